#!/usr/bin/env bash
# Checks the Kubernetes package in deploy/ (CI runs it from .ci/run, before the tests):
#   1. `kubectl kustomize` renders the base and every overlay (deploy/overlays/*);
#   2. the committed PrometheusRule is what scripts/gen-prometheusrule.py makes of
#      deploy/observability/alerts.yml;
#   3. kubernetes-validate --strict (Kubernetes 1.32 schemas) on each rendering, and
#      scripts/deploy_validate.py: the same strict schemas plus deploy/schemas/ for the
#      custom resources (KEDA, Prometheus Operator, Strimzi); an unknown kind fails;
#   4. checkov (kubernetes) on each rendering: no failed check but those listed, with a
#      reason, in deploy/checkov-exceptions.yaml;
#   5. yamllint (deploy/.yamllint.yaml) on deploy/ and the compose file;
#   6. scripts/validate-manifests.sh: the Dockerfile, compose and the rendered overlays
#      against the code (groups, topics, ports, partitions, secrets, shutdown settings).
# Tools: kubectl (with its built-in kustomize; preinstalled on the project's machines) and
# two Python virtual environments under $PUSHRELAY_VENVS (default /opt/pushrelay-venvs, or
# ~/.cache/pushrelay-venvs when /opt is not writable): one for kubernetes-validate and
# yamllint, one for checkov alone (it pins its own dependencies). Installed from PyPI on
# the first run (python3-venv from apt if missing), reused after.
set -euo pipefail
cd "$(dirname "$0")/.."

KUBERNETES_VERSION=1.32.0
VALIDATE_REQUIREMENTS="kubernetes-validate==1.37.0 yamllint==1.38.0"
CHECKOV_REQUIREMENTS="checkov==3.3.30"

# shellcheck source=scripts/lib/venv.sh
. scripts/lib/venv.sh

command -v kubectl >/dev/null || {
  echo "kubectl is missing (it renders the overlays with its built-in kustomize): install kubectl 1.30+" >&2
  exit 1
}

venv deploy-check "$VALIDATE_REQUIREMENTS"
venv checkov "$CHECKOV_REQUIREMENTS"
check_python="$venvs/deploy-check/bin/python"

rendered=$(mktemp -d)
trap 'rm -rf "$rendered"' EXIT
failed=0
step() { echo "== $*"; }
fail() { echo "FAIL: $*" >&2; failed=1; }

step "render (kubectl kustomize)"
targets=(base)
for overlay in deploy/overlays/*/; do targets+=("$(basename "$overlay")"); done
for name in "${targets[@]}"; do
  dir="deploy/overlays/$name"; [ "$name" = base ] && dir=deploy/base
  if kubectl kustomize "$dir" > "$rendered/$name.yaml"; then
    echo "$dir: $(grep -c '^kind:' "$rendered/$name.yaml") objects"
  else
    fail "kubectl kustomize $dir"
    rm -f "$rendered/$name.yaml"
  fi
done

step "PrometheusRule generated from alerts.yml"
"$check_python" scripts/gen-prometheusrule.py --check || fail "deploy/observability/prometheusrule.yaml is stale"

step "kubernetes-validate --strict (Kubernetes $KUBERNETES_VERSION) + deploy/schemas"
for file in "$rendered"/*.yaml; do
  name=$(basename "$file" .yaml)
  # The command line validates the built-in kinds and only warns about custom resources;
  # deploy_validate.py validates those too, against deploy/schemas/.
  if ! "$venvs/deploy-check/bin/kubernetes-validate" --strict --quiet --no-warn -k "$KUBERNETES_VERSION" "$file"; then
    fail "kubernetes-validate: $name"
  fi
  echo -n "$name: "
  "$check_python" scripts/deploy_validate.py -k "$KUBERNETES_VERSION" "$file" || fail "deploy_validate: $name"
done
"$check_python" scripts/deploy_validate.py --self-test || fail "deploy_validate self-test"

step "checkov"
"$venvs/checkov/bin/python" scripts/deploy_checkov.py "$venvs/checkov/bin/checkov" "$rendered" || fail "checkov"

step "yamllint"
"$venvs/deploy-check/bin/yamllint" --strict -c deploy/.yamllint.yaml deploy compose/docker-compose.yml \
  && echo "yamllint: deploy/ and compose/docker-compose.yml clean" || fail "yamllint"

step "validate-manifests"
PYTHON="$check_python" scripts/validate-manifests.sh || fail "validate-manifests"

if [ "$failed" -ne 0 ]; then
  echo "check-deploy: FAILED" >&2
  exit 1
fi
echo "check-deploy: ok"
