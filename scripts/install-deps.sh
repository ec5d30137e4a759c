#!/usr/bin/env bash
# Installs the Debian packages PushRelay builds and runs with, if any is missing:
# librdkafka, hiredis, libsodium, OpenSSL and libsecp256k1 (headers), pkg-config, Redis, curl,
# and prometheus (for promtool: the alert rules' checks and unit tests).
set -euo pipefail
packages=(librdkafka-dev libhiredis-dev libsodium-dev libssl-dev libsecp256k1-dev pkg-config redis-server curl prometheus)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
command -v swift >/dev/null || { echo "swift is not on PATH (Swift 6.2+ is required)" >&2; exit 1; }
# PyYAML: scripts/observability_metrics.py reads the alert rules (PyPI, if missing).
python3 -c "import yaml" 2>/dev/null || python3 -m pip install --quiet pyyaml
