#!/usr/bin/env bash
# Profiles the running stages and the dev broker with perf (call graphs, 499 Hz) for N
# seconds and writes, per process, the hottest symbols inclusive of callees and by self time to
# benchmarks/profiles/<stage>.txt. Run it while a load runs (e.g. during `make bench`):
#   scripts/profile-stages.sh 20
set -eu
cd "$(dirname "$0")/.."
SECONDS_TO_RECORD="${1:-20}"
OUT=benchmarks/profiles
mkdir -p "$OUT"
REPORT_ONLY="${REPORT_ONLY:-}"
pids=()
for stage in ingest encryptor dispatcher feedback devbroker; do
  pid=$(pgrep -n -f "release/$stage$" || true)
  [ -z "$REPORT_ONLY" ] || continue
  [ -n "$pid" ] || { echo "no running $stage" >&2; continue; }
  perf record -F 499 -g -p "$pid" -o "/tmp/perf-$stage.data" -- sleep "$SECONDS_TO_RECORD" >/dev/null 2>&1 &
  pids+=($!)
done
[ ${#pids[@]} -eq 0 ] || wait "${pids[@]}"
for stage in ingest encryptor dispatcher feedback devbroker; do
  [ -s "/tmp/perf-$stage.data" ] || continue
  {
    echo "# $stage: perf record -F 499 -g for ${SECONDS_TO_RECORD} s under load"
    echo "## inclusive (children), top 45"
    perf report -i "/tmp/perf-$stage.data" --children --sort symbol --stdio -g none 2>/dev/null \
      | grep -v '^#' | grep '%' | awk '{$3=""; print}' | swift demangle --simplified | cut -c1-180 | head -45
    echo "## self, top 25"
    perf report -i "/tmp/perf-$stage.data" --no-children --sort dso,symbol --stdio -g none 2>/dev/null \
      | grep -v '^#' | grep '%' | swift demangle --simplified | cut -c1-180 | head -25
  } > "$OUT/$stage.txt"
  echo "wrote $OUT/$stage.txt"
done
