#!/usr/bin/env bash
# make release VERSION=x.y.z: checks the tree, writes the version everywhere it is kept
# (VERSION, BuildInfo.swift, the Dockerfile's default, deploy/'s labels and image tag),
# moves CHANGELOG.md's [Unreleased] notes under "[x.y.z] - today", commits and tags
# vx.y.z (annotated). Nothing is pushed. Refuses: a version that is not MAJOR.MINOR.PATCH
# or not above the current one, uncommitted changes, an existing tag, an empty
# [Unreleased] section, or a lint or version check that fails.
set -euo pipefail
cd "$(dirname "$0")/.."
new="${1:-${VERSION:-}}"
fail() { echo "release: $*" >&2; exit 1; }
[[ "$new" =~ ^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$ ]] || fail "VERSION=$new is not MAJOR.MINOR.PATCH"
current="$(cat VERSION)"
newest="$(printf '%s\n%s\n' "$current" "$new" | sort -V | tail -1)"
[ "$new" != "$current" ] && [ "$newest" = "$new" ] || fail "$new is not above the current $current"
[ -z "$(git status --porcelain)" ] || fail "the tree has uncommitted changes"
git rev-parse -q --verify "refs/tags/v$new" >/dev/null && fail "tag v$new exists"
scripts/check-version.sh >/dev/null || fail "the version is not the same everywhere now (scripts/check-version.sh)"
notes="$(awk '/^## \[Unreleased\]/{on=1; next} /^## \[/{on=0} on' CHANGELOG.md | grep -v '^[[:space:]]*$' || true)"
[ -n "$notes" ] || fail "CHANGELOG.md has nothing under [Unreleased]"

today="$(date -u +%Y-%m-%d)"
echo "$new" > VERSION
sed -i "s/public static let version = \"$current\"/public static let version = \"$new\"/" Shared/ServiceKit/BuildInfo.swift
sed -i "s/^ARG VERSION=$current\$/ARG VERSION=$new/" Dockerfile
find deploy -name kustomization.yaml -print0 | xargs -0 sed -i \
  -e "s/app.kubernetes.io\/version: \"$current\"/app.kubernetes.io\/version: \"$new\"/" \
  -e "s/newTag: \"$current\"/newTag: \"$new\"/"
sed -i "s/^## \[Unreleased\]\$/## [Unreleased]\n\n## [$new] - $today/" CHANGELOG.md
# The release's reading rules, frozen: the next releases' writers are checked against them
# (Tests/PushModelsTests/WireCompatibilityTests.swift, docs/compatibility.md).
rules=Tests/PushModelsTests/Fixtures/rules
python3 scripts/wiregen.py --check >/dev/null || fail "scripts/wiregen.py --check fails: regenerate and commit first"
cp "$rules/current.json" "$rules/$new.json"
git add "$rules/$new.json"
scripts/check-version.sh
scripts/lint.sh >/dev/null
git commit -qam "Release $new"
git tag -a "v$new" -m "PushRelay $new"
echo "released $new: commit $(git rev-parse --short HEAD), tag v$new (push both: git push origin main v$new)"
