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
# Which stage needs which secret file (a stage without its file stops at start).
needs = {
    "ingest": {"pipeline_keys", "bouncer_keys", "storage_keys", "apikey_pepper"},
    "encryptor": {"pipeline_keys", "storage_keys"},
    "dispatcher": {"pipeline_keys"},
    "feedback": {"storage_keys"},
}
for stage, wanted in needs.items():
    have = set(compose["services"][stage].get("secrets", []))
    assert wanted <= have, f"compose {stage} lacks secrets {wanted - have}"
    assert wanted <= set(compose["secrets"]), f"compose does not define {wanted - set(compose['secrets'])}"
    deployment = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == stage)
    mounted = {v["secret"]["secretName"] for v in deployment["spec"]["template"]["spec"].get("volumes", []) if "secret" in v}
    k8s_wanted = {w.replace("_", "-") for w in wanted}
    assert k8s_wanted <= mounted, f"k8s {stage} lacks secrets {k8s_wanted - mounted}"
ingest = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "ingest")
probe = ingest["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["port"]
assert probe == "ops", "ingest's probes use the ops port"
assert "9080" in str(compose["services"]["ingest"]["healthcheck"]["test"]), "compose ingest healthcheck uses the ops port"
print(f"compose: {len(compose['services'])} services; k8s: {len(docs)} objects: ok")
PY
