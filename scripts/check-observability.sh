#!/usr/bin/env bash
# Checks the observability files in deploy/observability/:
#   - the alert rules parse (promtool check rules) and pass their unit tests (promtool
#     test rules); every alert has a severity, its annotations and a runbook anchor, and
#     a test where it fires and one where it does not;
#   - the compose profile's Prometheus config parses (promtool check config);
#   - the Grafana dashboard parses, every panel has a datasource and a query;
#   - the metric-name extractor passes its self-test.
# With a file listing the metric series the services export (one name a line, or a
# scrape of /metrics), also checks that every metric a dashboard panel, a dashboard
# variable or an alert rule queries is in it (`up`, `scrape_*`, `ALERTS` and the rules'
# own recorded series are always available); prints each missing name.
#
# Usage: scripts/check-observability.sh [METRICS_LIST]
#        scripts/check-observability.sh --self-test     (the extractor's self-test only)
# promtool comes with Debian's prometheus package
# (apt-get install --no-install-recommends prometheus); PROMTOOL=… names another.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=deploy/observability
extractor=scripts/observability_metrics.py

if [[ "${1:-}" == "--self-test" ]]; then
  exec python3 "$extractor" self-test
fi
if [[ "${1:-}" == -* || $# -gt 1 ]]; then
  sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
fi
metrics="${1:-}"
if [[ -n "$metrics" && ! -r "$metrics" ]]; then
  echo "cannot read the metrics list $metrics" >&2
  exit 2
fi

promtool="${PROMTOOL:-promtool}"
if ! command -v "$promtool" >/dev/null; then
  echo "promtool is missing: apt-get install --no-install-recommends prometheus (Debian), or set PROMTOOL" >&2
  exit 1
fi
if ! python3 -c "import yaml" 2>/dev/null; then
  echo "PyYAML is missing; installing it (python3 -m pip install pyyaml)" >&2
  python3 -m pip install --quiet pyyaml
fi

failed=0
run() {
  echo "+ $*"
  if ! "$@"; then
    failed=1
  fi
}

run "$promtool" check rules "$dir/alerts.yml"
run "$promtool" test rules "$dir/alerts.test.yml"
run "$promtool" check config "$dir/prometheus.yml"
run python3 "$extractor" check-rules "$dir/alerts.yml" "$dir/alerts.test.yml"
run python3 "$extractor" check-dashboard "$dir/grafana-dashboard.json"
run python3 "$extractor" self-test
if [[ -n "$metrics" ]]; then
  run python3 "$extractor" check-names "$metrics" "$dir/alerts.yml" "$dir/grafana-dashboard.json"
fi

if [[ $failed -ne 0 ]]; then
  echo "check-observability: FAILED" >&2
  exit 1
fi
echo "check-observability: ok"
