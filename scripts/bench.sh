#!/usr/bin/env bash
# The end-to-end benchmark: builds release binaries, starts a private stack (dev broker,
# Redis, provider fakes, the four services) and drives it with `loadgen`: 500
# notifications/s, flat out, then 2,000/s, 60 s each. Prints a table; writes
# benchmarks/results/latest.json. Extra loadgen flags pass through, e.g.
#   scripts/bench.sh --phases quick=0:15
# Numbers depend on the machine and on what else runs on it: see docs/performance.md.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
swift build -c release
BIN="$(swift build -c release --show-bin-path)"
exec "$BIN/loadgen" "$@"
