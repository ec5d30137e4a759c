#!/usr/bin/env bash
# The test command (README, CI): installs what is missing, builds every product, and
# runs all tests. The integration tests start their own Redis, dev broker, provider
# fakes and the four services on free loopback ports, and stop them when they end.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
swift build
export PUSHRELAY_BIN_DIR="$(swift build --show-bin-path)"
swift test "$@"
