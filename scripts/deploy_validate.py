#!/usr/bin/env python3
"""Validates rendered Kubernetes manifests: kubernetes-validate's strict schemas for the
built-in kinds, deploy/schemas/ for the custom resources (KEDA, Prometheus Operator,
Strimzi). Any other kind is an error (kubernetes-validate's command line only warns).

  deploy_validate.py [-k 1.32.0] FILE...     every object of every file; exit 1 on an error
  deploy_validate.py --self-test             objects with known mistakes must fail

kubernetes-validate has no option for extra schemas: it reads them from its own package
(kubernetes_validate/kubernetes-json-schema/v<version>-local-strict/<kind>-<group>-<version>.json)
and resolves their references against that directory's _definitions.json. The custom
schemas here are named the same way and refer to the same definitions for ObjectMeta and
the other embedded Kubernetes types, so one registry serves both.
"""
import argparse
import pathlib
import re
import sys

import jsonschema
import referencing
import yaml
from kubernetes_validate import utils as kv

ROOT = pathlib.Path(__file__).resolve().parent.parent
SCHEMAS = ROOT / "deploy/schemas"
DEFINITIONS_URI = "https://kubernetes.io/api/_definitions.json"


def schema_name(resource):
    group_version = resource.get("apiVersion", "")
    # kubernetes-validate's naming: the group's first label, then the version.
    short = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", group_version)
    return f"{str(resource.get('kind', '')).lower()}-{short}"


class Validator:
    def __init__(self, version):
        self.version = version
        shipped = [v for v in kv.all_versions() if kv.major_minor(v) <= kv.major_minor(version)]
        if not shipped:
            raise SystemExit(f"kubernetes-validate has no schemas for Kubernetes {version}")
        self.schema_version = shipped[-1]
        definitions = kv.schema_contents(
            f"kubernetes-json-schema/v{self.schema_version}-local-strict/_definitions.json", version)
        self.registry = referencing.Registry().with_resource(
            DEFINITIONS_URI, referencing.Resource.from_contents(definitions))
        self.custom = {p.stem: yaml.safe_load(p.read_text()) for p in SCHEMAS.glob("*.yaml")}

    def errors(self, resource):
        """Messages for one object; empty when it is valid."""
        if not isinstance(resource, dict) or "kind" not in resource or "apiVersion" not in resource:
            return ["not a Kubernetes object (no kind or apiVersion)"]
        name = schema_name(resource)
        if name in self.custom:
            validator = jsonschema.Draft202012Validator(self.custom[name], registry=self.registry)
            return [f"{'.'.join(str(p) for p in e.absolute_path) or '(top)'}: {e.message}"
                    for e in sorted(validator.iter_errors(resource), key=lambda e: list(map(str, e.absolute_path)))]
        try:
            kv.validate(resource, self.version, strict=True)
        except kv.SchemaNotFoundError as e:
            return [f"no schema for {resource['kind']} {resource['apiVersion']} "
                    f"(kubernetes-validate {self.schema_version}, or deploy/schemas/{name}.yaml): {e.message}"]
        except kv.ValidationError as e:
            return [f"{'.'.join(str(p) for p in e.path) or '(top)'}: {e.message}"]
        return []


def describe(resource):
    meta = resource.get("metadata") or {} if isinstance(resource, dict) else {}
    return f"{resource.get('kind', '?')}/{meta.get('name', '?')}" if isinstance(resource, dict) else "?"


def validate_files(validator, files):
    failed = counted = 0
    for path in files:
        for resource in (d for d in yaml.safe_load_all(open(path)) if d):
            counted += 1
            for message in validator.errors(resource):
                failed += 1
                print(f"ERROR {path}: {describe(resource)}: {message}")
    return counted, failed


SELF_TEST = """
apiVersion: apps/v1
kind: Deployment
metadata: { name: typo }
spec:
  replica: 2
  selector: { matchLabels: { a: b } }
  template: { metadata: { labels: { a: b } }, spec: { containers: [{ name: c, image: i }] } }
---
apiVersion: keda.sh/v1alpha1
kind: ScaledObject
metadata: { name: typo }
spec:
  scaleTargetRef: { name: x }
  triggers: [{ type: kafka, metadata: { bootstrapServers: "b:9092", consumerGroup: g, lagTreshold: "5" } }]
---
apiVersion: keda.sh/v1alpha1
kind: ScaledObject
metadata: { name: unquoted }
spec:
  scaleTargetRef: { name: x }
  triggers: [{ type: kafka, metadata: { bootstrapServers: "b:9092", consumerGroup: g, lagThreshold: 5 } }]
---
apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata: { name: typo }
spec:
  selector: {}
  endpoints: [{ port: ops, intervall: 15s }]
---
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata: { name: both }
spec:
  groups: [{ name: g, rules: [{ alert: A, record: r, expr: up }] }]
---
apiVersion: kafka.strimzi.io/v1beta2
kind: KafkaTopic
metadata: { name: nolabel }
spec: { partitions: 3 }
---
apiVersion: kafka.strimzi.io/v1beta2
kind: KafkaUser
metadata: { name: typo, labels: { strimzi.io/cluster: k } }
spec:
  authentication: { type: scram-sha-512 }
  authorization: { type: simple, acls: [{ resource: { type: topic, name: t }, operations: [Reed] }] }
---
apiVersion: keda.sh/v1alpha1
kind: TriggerAuthentication
metadata: { name: typo }
spec:
  secretTargetRef: [{ parameter: password, name: s, key: k, optional: true }]
---
apiVersion: example.com/v1
kind: Unknown
metadata: { name: x }
"""


def self_test(validator):
    bad = [d for d in yaml.safe_load_all(SELF_TEST) if d]
    missed = [describe(d) + " " + d["kind"] for d in bad if not validator.errors(d)]
    if missed:
        print("self-test: these mistakes were not caught: " + ", ".join(missed))
        return 1
    print(f"self-test: {len(bad)} objects with a mistake each, all refused")
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-k", "--kubernetes-version", default="1.32.0")
    parser.add_argument("--self-test", action="store_true")
    parser.add_argument("files", nargs="*")
    args = parser.parse_args()
    validator = Validator(args.kubernetes_version)
    if args.self_test:
        return self_test(validator)
    counted, failed = validate_files(validator, args.files)
    print(f"validate: {counted} objects, {failed} errors "
          f"(Kubernetes {kv.major_minor(validator.schema_version)} strict schemas + deploy/schemas)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
