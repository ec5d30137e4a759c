#!/usr/bin/env bash
# Lint: every Swift file formatted as .swift-format says (swift-format ships with the
# toolchain). `scripts/lint.sh --fix` rewrites the files in place.
set -euo pipefail
cd "$(dirname "$0")/.."
paths=(Package.swift Services Shared Dev Tools Tests benchmarks/Micro)
if [ "${1:-}" = "--fix" ]; then
  exec swift format format --in-place --recursive --parallel "${paths[@]}"
fi
swift format lint --strict --recursive --parallel "${paths[@]}"
# The records' generated reader and writer match their declaration (Shared/PushModels/Records.wire).
python3 scripts/wiregen.py --check
# The OpenAPI document ingest serves is docs/api/openapi.json (scripts/openapi-embed.py).
python3 scripts/openapi-embed.py --check
# Rooms: files under Services/*Core within 450 lines, functions within 60.
python3 scripts/check-rooms.py
# The release is the same in VERSION, BuildInfo, the Dockerfile, deploy/ and CHANGELOG.md.
scripts/check-version.sh
echo "lint: clean"
