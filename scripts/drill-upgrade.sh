#!/usr/bin/env bash
# The rolling-upgrade drill at full length: a stack started on the previous release's
# binaries, two instances a stage at 200 notifications/s, rolled to HEAD's one instance
# at a time, producers first and consumers first (Tests/PipelineTests/UpgradeDrillTests).
# FROM=<tag or commit> picks the build to upgrade from (default: the newest tag before HEAD).
# That build is made once, from `git archive`, under .build/upgrade/<name>.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
from="${FROM:-$(git describe --tags --abbrev=0 HEAD^ 2>/dev/null || true)}"
if [ -z "$from" ]; then
  echo "drill-upgrade: no tag before HEAD; give FROM=<tag or commit>" >&2
  exit 2
fi
name="$(echo "$from" | tr '/' '_')"
source_dir=".build/upgrade/$name"
if [ ! -x "$source_dir/.build/debug/ingest" ]; then
  echo "drill-upgrade: building $from in $source_dir"
  rm -rf "$source_dir"
  mkdir -p "$source_dir"
  git archive "$from" | tar -x -C "$source_dir"
  (cd "$source_dir" && swift build)
fi
swift build --build-tests
PUSHRELAY_UPGRADE_FROM_BIN="$(cd "$source_dir" && swift build --show-bin-path)" \
  PUSHRELAY_UPGRADE_FROM_NAME="$from (commit $(git rev-parse --short "$from^{commit}"))" \
  PUSHRELAY_UPGRADE_TO_NAME="HEAD (commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo ', with local changes'))" \
  PUSHRELAY_BIN_DIR="$(swift build --show-bin-path)" \
  swift test --skip-build --filter UpgradeDrillTests
