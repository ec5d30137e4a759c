#!/usr/bin/env bash
# The release is written in one place per file that needs it; this keeps them equal:
# VERSION, BuildInfo.version (the binaries' --version, /health, pushrelay_build_info),
# the Dockerfile's VERSION default (the image's OCI label), the Kubernetes labels
# app.kubernetes.io/version and the image tag in deploy/, and the newest release in
# CHANGELOG.md (which also keeps an [Unreleased] section on top). scripts/release.sh
# changes them together.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 - <<'PY'
import re, sys, glob
failures = []
version = open("VERSION").read().strip()
if not re.fullmatch(r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)", version):
    failures.append(f"VERSION {version!r} is not MAJOR.MINOR.PATCH")
swift = re.search(r'public static let version = "([^"]+)"', open("Shared/ServiceKit/BuildInfo.swift").read())
if not swift or swift.group(1) != version:
    failures.append(f"BuildInfo.version is {swift.group(1) if swift else None}, VERSION {version}")
docker = re.search(r"^ARG VERSION=(\S+)$", open("Dockerfile").read(), re.M)
if not docker or docker.group(1) != version:
    failures.append(f"Dockerfile ARG VERSION is {docker.group(1) if docker else None}, VERSION {version}")
for path in sorted(glob.glob("deploy/**/kustomization.yaml", recursive=True)):
    text = open(path).read()
    for found in re.findall(r'app\.kubernetes\.io/version:\s*"([^"]+)"', text):
        if found != version:
            failures.append(f"{path}: app.kubernetes.io/version {found}, VERSION {version}")
    for name, tag in re.findall(r'name:\s*(\S+)\s*\n\s*newName:\s*\S*pushrelay\S*\s*\n\s*newTag:\s*"?([^"\s]+)"?', text):
        if tag not in (version, "dev"):
            failures.append(f"{path}: image tag {tag}, VERSION {version}")
changelog = open("CHANGELOG.md").read()
headings = re.findall(r"^## \[([^\]]+)\](?: - (\d{4}-\d{2}-\d{2}))?", changelog, re.M)
if not headings or headings[0][0] != "Unreleased":
    failures.append("CHANGELOG.md: the first section is not [Unreleased]")
released = [h for h in headings if h[0] != "Unreleased"]
if not released or released[0][0] != version or not released[0][1]:
    failures.append(f"CHANGELOG.md: the newest release is {released[0] if released else None}, VERSION {version}")
if failures:
    print("\n".join("FAIL: " + f for f in failures))
    sys.exit(1)
print(f"version {version}: VERSION, BuildInfo, Dockerfile, deploy/ labels and image tag, CHANGELOG agree")
PY
