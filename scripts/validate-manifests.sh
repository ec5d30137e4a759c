#!/usr/bin/env bash
# Checks that the compose file and Kubernetes manifests parse and name what they must.
# (No Docker engine or cluster runs on the development machines.)
set -euo pipefail
cd "$(dirname "$0")/.."
python3 - <<'PY'
import yaml, sys
compose = yaml.safe_load(open("compose/docker-compose.yml"))
for service in ["kafka", "redis", "ingest", "encryptor", "dispatcher", "feedback"]:
    assert service in compose["services"], service
docs = [d for d in yaml.safe_load_all(open("deploy/k8s/pushrelay.yaml")) if d]
kinds = {(d["kind"], d["metadata"]["name"]) for d in docs}
for stage in ["ingest", "encryptor", "dispatcher", "feedback"]:
    assert ("Deployment", stage) in kinds and ("HorizontalPodAutoscaler", stage) in kinds, stage
print(f"compose: {len(compose['services'])} services; k8s: {len(docs)} objects: ok")
PY
