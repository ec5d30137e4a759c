#!/usr/bin/env bash
# Checks that the Dockerfile, the compose file and the Kubernetes manifests parse and
# name what they must: the production image builds and holds only the four services and
# pushrelay-replay (no dev broker, no provider fakes); dev-only services run the dev
# image in compose's dev profile; every stage is given its brokers and key files; ingest
# scales with an HPA, each consumer stage with one KEDA ScaledObject whose kafka triggers
# name the stage's consumer groups and topics as the code and the manifest's env set them.
# (No Docker engine or cluster runs on the development machines.)
set -euo pipefail
cd "$(dirname "$0")/.."
if ! python3 -c "import yaml" 2>/dev/null; then
  echo "PyYAML is missing; installing it (python3 -m pip install pyyaml)" >&2
  python3 -m pip install --quiet pyyaml
fi
python3 - <<'PY'
import os, re, shlex, sys
import yaml

failures = []
def check(ok, message):
    if not ok:
        failures.append(message)
    return ok

PRODUCTION_PRODUCTS = {"ingest", "encryptor", "dispatcher", "feedback", "pushrelay-replay"}
DEV_PRODUCTS = {"devbroker", "provider-fakes", "pushrelay-admin"}
DEV_ONLY_WORDS = ["devbroker", "provider-fakes", "fakeproviders"]  # matched case-insensitively
DEV_COMMANDS = {"devbroker", "provider-fakes"}
STAGES = ["ingest", "encryptor", "dispatcher", "feedback"]
# Which stage needs which secret file (a stage without its file stops at start).
NEEDS = {
    "ingest": {"pipeline_keys", "bouncer_keys", "storage_keys", "apikey_pepper"},
    "encryptor": {"pipeline_keys", "storage_keys"},
    "dispatcher": {"pipeline_keys"},
    "feedback": {"storage_keys"},
}
SECRET_ENV = {
    "pipeline_keys": "PUSHRELAY_PIPELINE_KEYS_FILE",
    "bouncer_keys": "PUSHRELAY_BOUNCER_KEYS_FILE",
    "storage_keys": "PUSHRELAY_STORAGE_KEYS_FILE",
    "apikey_pepper": "PUSHRELAY_APIKEY_PEPPER_FILE",
}

# ---------------------------------------------------------------- Package.swift
def balanced(text, start):
    """Index just past the parenthesis that closes the one at text[start]."""
    depth, i, in_string = 0, start, False
    while i < len(text):
        c = text[i]
        if in_string:
            if c == "\\":
                i += 1
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise ValueError("unbalanced parentheses in Package.swift")

def parse_package(text):
    text = re.sub(r"//[^\n]*", "", text)
    targets, products = {}, {}
    for m in re.finditer(r"\.(target|executableTarget|testTarget|systemLibrary|binaryTarget|plugin|macro)\(", text):
        body = text[m.end() - 1:balanced(text, m.end() - 1)]
        name = re.search(r'name:\s*"([^"]+)"', body).group(1)
        deps = []
        d = re.search(r"dependencies:\s*\[", body)
        if d:
            end = body.index("]", d.end())
            # Skip .product(...) entries: those come from other packages.
            inner = body[d.end():]
            cleaned, i = "", 0
            while i < len(inner) and inner[i] != "]":
                if inner.startswith(".product(", i):
                    i = balanced(inner, i + len(".product"))
                    continue
                cleaned += inner[i]
                i += 1
            deps = re.findall(r'"([^"]+)"', cleaned)
        path = re.search(r'path:\s*"([^"]+)"', body)
        default = "Tests/" + name if m.group(1) == "testTarget" else "Sources/" + name
        targets[name] = {"deps": deps, "path": path.group(1) if path else default}
    for m in re.finditer(r'\.(?:executable|library)\(\s*name:\s*"([^"]+)"[^)]*?targets:\s*\[([^\]]*)\]', text):
        products[m.group(1)] = re.findall(r'"([^"]+)"', m.group(2))
    return targets, products

package_targets, package_products = parse_package(open("Package.swift").read())
check(PRODUCTION_PRODUCTS | DEV_PRODUCTS <= set(package_products),
      f"Package.swift lacks products {(PRODUCTION_PRODUCTS | DEV_PRODUCTS) - set(package_products)}")

def closure(names):
    seen, todo = set(), list(names)
    while todo:
        t = todo.pop()
        if t in seen or t not in package_targets:
            continue
        seen.add(t)
        todo.extend(package_targets[t]["deps"])
    return seen

production_targets = closure(t for p in PRODUCTION_PRODUCTS for t in package_products.get(p, []))
dev_in_production = sorted(
    t for t in production_targets
    if package_targets[t]["path"].startswith("Dev/") or t.lower() in DEV_ONLY_WORDS + ["devstack", "kafkadev"])
check(not dev_in_production, f"production products depend on dev targets {dev_in_production}")

# ---------------------------------------------------------------- Dockerfile
def dockerfile_instructions(text):
    """(keyword, arguments) per instruction, continuation lines joined, comments dropped."""
    out, current = [], ""
    for line in text.splitlines():
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if current and line.lstrip().startswith("#"):
            continue  # a comment inside a continued instruction
        if line.rstrip().endswith("\\"):
            current += line.rstrip()[:-1] + " "
            continue
        current += line
        keyword, _, args = current.strip().partition(" ")
        out.append((keyword.upper(), args.strip()))
        current = ""
    return out

stages = []  # each: {"name", "base", "instructions"}
for keyword, args in dockerfile_instructions(open("Dockerfile").read()):
    if keyword == "FROM":
        words = [w for w in args.split() if not w.startswith("--")]
        name = words[2] if len(words) >= 3 and words[1].lower() == "as" else str(len(stages))
        stages.append({"name": name, "base": words[0], "instructions": []})
    else:
        check(stages, f"Dockerfile: {keyword} before FROM")
        stages[-1]["instructions"].append((keyword, args))
by_name = {s["name"]: s for s in stages}

def copy_from(args):
    m = re.search(r"--from=(\S+)", args)
    return m.group(1) if m else None

def ancestry(name):
    """The stage and every stage it is built FROM or COPYs --from."""
    seen, todo = [], [name]
    while todo:
        n = todo.pop()
        if n in seen or n not in by_name:
            continue
        seen.append(n)
        stage = by_name[n]
        todo.append(stage["base"])
        todo.extend(copy_from(a) for k, a in stage["instructions"] if k == "COPY" and copy_from(a))
    return seen

def swift_products(stage_names):
    """--product names of every `swift build` in the stages; None for a build of everything."""
    products = set()
    for n in stage_names:
        for keyword, args in by_name[n]["instructions"]:
            for command in re.findall(r"swift build[^&;|]*", args) if keyword == "RUN" else []:
                if "--show-bin-path" in command:
                    continue
                named = re.findall(r"--product\s+(\S+)", command)
                if not named:
                    return None
                products.update(named)
    return products

check(stages and stages[-1]["name"] == "production",
      "Dockerfile: the last stage (the default target) must be named production")
check("dev" in by_name, "Dockerfile: no dev stage")
if stages and stages[-1]["name"] == "production" and "dev" in by_name:
    production = ancestry("production")
    # (a) nothing in the production image's stages names a dev product or library.
    for n in production:
        for keyword, args in by_name[n]["instructions"]:
            for word in DEV_ONLY_WORDS:
                check(word not in args.lower(),
                      f"Dockerfile: stage {n} (used by production) names {word}: {keyword} {args[:80]}")
    built = swift_products(production)
    check(built == PRODUCTION_PRODUCTS,
          f"Dockerfile: production builds {sorted(built) if built is not None else 'every product'}, "
          f"not exactly {sorted(PRODUCTION_PRODUCTS)}")
    final = [(k, a) for k, a in by_name["production"]["instructions"] if k in ("COPY", "ADD")]
    check(all(copy_from(a) for k, a in final), "Dockerfile: production copies from the build context")
    copied = set()
    for n in production:
        for keyword, args in by_name[n]["instructions"]:
            if keyword == "RUN" and "cp " in args:
                copied.update(re.findall(r'\$bin/([\w.-]+)"', args))
    check(copied == PRODUCTION_PRODUCTS,
          f"Dockerfile: production's stages copy out {sorted(copied)}, not {sorted(PRODUCTION_PRODUCTS)}")
    check("build-dev" not in production, "Dockerfile: production depends on build-dev")
    # The dev target holds the dev tools.
    check(DEV_PRODUCTS <= (swift_products(ancestry("dev")) or set()),
          f"Dockerfile: dev does not build {sorted(DEV_PRODUCTS)}")
    # Both runtimes run as the non-root user.
    for n in ("production", "dev"):
        users = [a for k, a in by_name[n]["instructions"] if k == "USER"]
        base_users = [a for k, a in by_name.get(by_name[n]["base"], {"instructions": []})["instructions"] if k == "USER"]
        check((users or base_users)[-1:] == ["relay"], f"Dockerfile: {n} does not run as relay")

# SwiftPM loads the manifest only if every target directory exists: the build stage copies them all.
copied_dirs = set()
for n in ancestry("build") if "build" in by_name else []:
    for keyword, args in by_name[n]["instructions"]:
        if keyword == "COPY" and not copy_from(args):
            copied_dirs.update(w.rstrip("/") for w in args.split()[:-1] if not w.startswith("--"))
top_dirs = {t["path"].split("/")[0] for t in package_targets.values()}
check(top_dirs <= copied_dirs, f"Dockerfile: the build stage does not copy {sorted(top_dirs - copied_dirs)}")
check("Package.swift" in copied_dirs, "Dockerfile: the build stage does not copy Package.swift")

# .dockerignore keeps local state out of the context, and nothing the build copies.
ignored = [l.strip().rstrip("/") for l in open(".dockerignore") if l.strip() and not l.startswith("#")] \
    if os.path.exists(".dockerignore") else []
for entry in [".build", ".run", ".git", "benchmarks/results"]:
    check(entry in ignored, f".dockerignore lacks {entry}")
for entry in ignored:
    check(entry not in copied_dirs and entry != "Package.resolved", f".dockerignore hides {entry}, which the build copies")

# ---------------------------------------------------------------- compose
compose = yaml.safe_load(open("compose/docker-compose.yml"))
services = compose["services"]
for service in ["kafka", "redis", "ingest", "encryptor", "dispatcher", "feedback"]:
    check(service in services, f"compose lacks {service}")

def interpolate(value):
    """${VAR:-default} / ${VAR-default} with VAR unset, as a plain `up` sees it."""
    return re.sub(r"\$\{[A-Za-z_][A-Za-z0-9_]*(?::?-([^}]*))?\}", lambda m: m.group(1) or "", str(value))

def command_words(service):
    command = service.get("command") or []
    return shlex.split(command) if isinstance(command, str) else [str(w) for w in command]

def environment(service):
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(e.split("=", 1) if "=" in e else (e, "") for e in env)
    return {k: interpolate(v) for k, v in env.items()}

def profiles(service):
    return service.get("profiles") or []

def build_target(service):
    build = service.get("build")
    return build.get("target") if isinstance(build, dict) else None

# (b) every dev tool runs from the dev image, in the dev profile only.
dev_services = set()
for name, service in services.items():
    words = command_words(service)
    uses_dev = bool(set(words[:1]) & DEV_COMMANDS) or build_target(service) == "dev" \
        or str(service.get("image", "")).startswith("pushrelay-dev")
    if not uses_dev:
        continue
    dev_services.add(name)
    check(profiles(service) == ["dev"], f"compose {name}: runs {words[:1]} but is not in (only) the dev profile")
    check(build_target(service) == "dev", f"compose {name}: runs {words[:1]} but does not build the dev target")
    check(service.get("image") == "pushrelay-dev:latest", f"compose {name}: runs {words[:1]} but not from pushrelay-dev:latest")

for name in STAGES:
    service = services.get(name, {})
    check(build_target(service) == "production", f"compose {name}: does not build the production target")
    check(service.get("image") == "pushrelay:latest", f"compose {name}: image is not pushrelay:latest")
    check(not profiles(service), f"compose {name}: must run without a profile")
    env = environment(service)
    check(env.get("PUSHRELAY_KAFKA_BROKERS"), f"compose {name}: PUSHRELAY_KAFKA_BROKERS is not set")
    have = set(service.get("secrets", []))
    check(NEEDS[name] <= have, f"compose {name} lacks secrets {NEEDS[name] - have}")
    check(NEEDS[name] <= set(compose.get("secrets", {})), f"compose does not define {NEEDS[name] - set(compose.get('secrets', {}))}")
    for secret in NEEDS[name]:
        check(env.get(SECRET_ENV[secret]) == f"/run/secrets/{secret}",
              f"compose {name}: {SECRET_ENV[secret]} is not /run/secrets/{secret}")

# A plain `up` (no profile) must not need a dev-profile service, nor its image.
for name, service in services.items():
    if profiles(service):
        continue
    depends = service.get("depends_on") or {}
    for dep, spec in (depends.items() if isinstance(depends, dict) else ((d, {}) for d in depends)):
        check(dep in services, f"compose {name}: depends on undefined service {dep}")
        if dep in services and profiles(services[dep]):
            check(isinstance(spec, dict) and spec.get("required") is False,
                  f"compose {name}: depends on {dep} (profiles {profiles(services[dep])}) without required: false")
    for volume in service.get("volumes") or []:
        source = interpolate(volume if isinstance(volume, str) else volume.get("source", "")).split(":")[0]
        if source and not source.startswith((".", "/", "~")):
            check(source in (compose.get("volumes") or {}), f"compose {name}: volume {source} is not defined")
check("9080" in str(services["ingest"]["healthcheck"]["test"]), "compose ingest healthcheck uses the ops port")
for name, service in services.items():
    test = (service.get("healthcheck") or {}).get("test") or (compose.get("x-relay", {}).get("healthcheck") or {}).get("test")
    if test and "/dev/tcp" in str(test):
        check(test[0] == "CMD" and test[1] == "bash", f"compose {name}: /dev/tcp needs bash, not /bin/sh (dash)")

# ---------------------------------------------------------------- Kubernetes
docs = [d for d in yaml.safe_load_all(open("deploy/k8s/pushrelay.yaml")) if d]
kinds = {(d["kind"], d["metadata"]["name"]) for d in docs}
config_maps = {d["metadata"]["name"]: d.get("data", {}) for d in docs if d["kind"] == "ConfigMap"}
for stage in STAGES:
    check(("Deployment", stage) in kinds, f"k8s lacks the {stage} Deployment")
for d in docs:
    if d["kind"] not in ("Deployment", "StatefulSet", "DaemonSet", "Job", "CronJob"):
        continue
    pod = d["spec"]["template"]["spec"]
    for c in pod.get("containers", []) + pod.get("initContainers", []):
        check(c["image"].split(":")[0] == "pushrelay", f"k8s {d['metadata']['name']}: image {c['image']} is not the production image")
        check(not set(c.get("command", [])[:1]) & (DEV_PRODUCTS | {"provider-fakes"}),
              f"k8s {d['metadata']['name']}: runs a dev tool {c.get('command')}")

def container_env(container):
    """The container's environment: its ConfigMaps (envFrom), then its own env entries."""
    env = {}
    for source in container.get("envFrom", []):
        env.update(config_maps.get((source.get("configMapRef") or {}).get("name"), {}))
    env.update({e["name"]: e.get("value", "<from secret>") for e in container.get("env", [])})
    return env

for stage in STAGES:
    deployment = next((d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == stage), None)
    if deployment is None:
        continue
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    env = container_env(container)
    check(env.get("PUSHRELAY_KAFKA_BROKERS"), f"k8s {stage}: PUSHRELAY_KAFKA_BROKERS is not set")
    secret_of_volume = {v["name"]: v["secret"]["secretName"] for v in pod.get("volumes", []) if "secret" in v}
    mounts = {m["mountPath"].rstrip("/"): secret_of_volume.get(m["name"]) for m in container.get("volumeMounts", [])}
    k8s_wanted = {w.replace("_", "-") for w in NEEDS[stage]}
    check(k8s_wanted <= set(secret_of_volume.values()), f"k8s {stage} lacks secrets {k8s_wanted - set(secret_of_volume.values())}")
    for secret in NEEDS[stage]:
        path = env.get(SECRET_ENV[secret])
        if check(path, f"k8s {stage}: {SECRET_ENV[secret]} is not set"):
            check(mounts.get(os.path.dirname(path)) == secret.replace("_", "-"),
                  f"k8s {stage}: {SECRET_ENV[secret]}={path} is not in the mounted secret {secret.replace('_', '-')}")
ingest = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "ingest")
ingest_container = ingest["spec"]["template"]["spec"]["containers"][0]
probe = ingest_container["readinessProbe"]["httpGet"]["port"]
check(probe == "ops", "ingest's probes use the ops port")
header = {e["name"]: e.get("value") for e in ingest_container.get("env", [])}.get("PUSHRELAY_HTTP_CLIENT_IP_HEADER")
check(header and re.fullmatch(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+", header),
      "k8s ingest: PUSHRELAY_HTTP_CLIENT_IP_HEADER (the load balancer's client-address header) is not set")

# ---------------------------------------------------------------- Kubernetes autoscaling
# What each consumer stage consumes, read from the code: the consumers built with
# `common.consumer(stage:topic:…)` in Services/, their group `PUSHRELAY_<STAGE>_GROUP`
# (default in Shared/ServiceKit/Stage.swift), the topic names (TopicNames defaults,
# overridable by `PUSHRELAY_TOPIC_*`) and one retry topic per `PUSHRELAY_RETRY_DELAYS` entry.
def source(path):
    return open(path).read()

def env_name(key):
    return key.upper().replace(".", "_")

consumers = []  # (deployment, stage key, topic field, retry stage or "all", file)
code_facts = {}
try:
    records_swift = source("Shared/PushModels/Records.swift")
    topic_struct = re.search(r"public struct TopicNames\b.*?\n\}", records_swift, re.S).group(0)
    code_facts["topic_defaults"] = dict(re.findall(r'public var (\w+) = "([^"]*)"', topic_struct))
    settings_swift = source("Shared/ServiceKit/Settings.swift")
    code_facts["topic_keys"] = dict(re.findall(
        r'topics\.(\w+) = try reader\.string\(\s*"([^"]+)",\s*default:\s*topics\.\1\s*\)', settings_swift))
    code_facts["retry_delays"] = re.search(
        r'reader\.string\(\s*"pushrelay\.retry\.delays",\s*default:\s*"([^"]*)"', settings_swift).group(1)
    code_facts["group_default"] = re.search(
        r'reader\.string\(\s*"pushrelay\.\\\(stage\)\.group",\s*default:\s*"([^"]*)"',
        source("Shared/ServiceKit/Stage.swift")).group(1)
    code_facts["offset_reset"] = re.search(
        r'"auto\.offset\.reset":\s*"(\w+)"', source("Shared/Kafka/KafkaConsumer.swift")).group(1)
except (AttributeError, OSError) as error:
    check(False, f"cannot read the consumers' topics, groups or offset reset from the Swift code ({error})")
for root, _, files in sorted(os.walk("Services")):
    for name in sorted(files):
        if not name.endswith(".swift"):
            continue
        path = os.path.join(root, name)
        text = source(path)
        for m in re.finditer(r'(\w+)\s*=\s*try\s+common\.consumer\(\s*stage:\s*"([^"]+)",\s*'
                             r'topic:\s*common\.topics\.(\w+)(?:\((\d+)\))?', text):
            variable, key, field, argument = m.groups()
            retry = argument
            override = re.search(r"\b" + re.escape(variable) + r"\.topics\s*=\s*(.+)", text)
            if override:
                if re.fullmatch(r"\(1\s*\.\.\.\s*common\.retry\.delays\.count\)\.map\(common\.topics\.retry\)\s*",
                                override.group(1)):
                    field, retry = "retry", "all"
                else:
                    check(False, f"{path}: cannot read the topics of {variable}: {override.group(1).strip()}")
            consumers.append((key.split(".")[0], key, field, retry, path))
check(consumers, "found no `common.consumer(stage:topic:…)` in Services/")
CONSUMER_STAGES = sorted({c[0] for c in consumers})
check(set(CONSUMER_STAGES) == set(STAGES) - {"ingest"},
      f"the consumer stages in the code are {CONSUMER_STAGES}, not encryptor, dispatcher, feedback")

def expected_triggers(stage, env):
    """(consumer group, topic) per topic the stage consumes, as its environment sets them."""
    if not {"topic_defaults", "topic_keys", "retry_delays", "group_default"} <= set(code_facts):
        return []
    def topic(field):
        key = code_facts["topic_keys"].get(field)
        check(key and field in code_facts["topic_defaults"], f"cannot read topic {field} from the Swift code")
        return env.get(env_name(key), code_facts["topic_defaults"].get(field, "?")) if key else "?"
    pairs = []
    for deployment, key, field, retry, _ in consumers:
        if deployment != stage:
            continue
        group = env.get(env_name(f"pushrelay.{key}.group"), code_facts["group_default"].replace("\\(stage)", key))
        if field != "retry":
            pairs.append((group, topic(field)))
            continue
        delays = [d for d in env.get("PUSHRELAY_RETRY_DELAYS", code_facts["retry_delays"]).split(",") if d.strip()]
        for n in range(1, len(delays) + 1) if retry == "all" else [int(retry)]:
            pairs.append((group, topic("retryPrefix") + str(n)))
    return pairs

# The partition count the project creates its topics with (compose's kafka-init).
kafka_init = str(services.get("kafka-init", {}).get("command"))
compose_partitions = [int(n) for n in re.findall(r"--partitions\s+(\d+)", kafka_init)]
check(compose_partitions, "compose kafka-init: no --partitions, so no partition count to cap consumer stages at")
partitions = min(compose_partitions) if compose_partitions else 0

def scale_target(d):
    ref = d.get("spec", {}).get("scaleTargetRef") or {}
    default_kind = "Deployment" if d["kind"] == "ScaledObject" else None
    return (ref.get("apiVersion", "apps/v1"), ref.get("kind", default_kind), ref.get("name"),
            d["metadata"].get("namespace", "default"))

deployments = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Deployment"}
hpas = [d for d in docs if d["kind"] == "HorizontalPodAutoscaler"]
scaled_objects = [d for d in docs if d["kind"] == "ScaledObject"]
trigger_auths = {(d["metadata"]["name"], d["metadata"].get("namespace", "default"))
                 for d in docs if d["kind"] == "TriggerAuthentication"}
for d in hpas + scaled_objects:
    api, kind, name, namespace = scale_target(d)
    target = deployments.get(name)
    check(api == "apps/v1" and kind == "Deployment" and target is not None
          and target["metadata"].get("namespace", "default") == namespace,
          f"k8s {d['kind']} {d['metadata']['name']}: targets {kind} {name} in {namespace}, "
          "not a Deployment of this file")

def targeting(objects, name):
    return [d for d in objects if scale_target(d)[1:3] == ("Deployment", name)]

def positive_int(value):
    return isinstance(value, int) and not isinstance(value, bool) and value > 0

ingest_hpas = targeting(hpas, "ingest")
check(len(ingest_hpas) == 1, f"k8s ingest: {len(ingest_hpas)} HorizontalPodAutoscalers target it, not 1")
check(not targeting(scaled_objects, "ingest"), "k8s ingest: a ScaledObject targets it besides its HPA")
autoscaling_summary = []
for stage in CONSUMER_STAGES:
    deployment = deployments.get(stage)
    if deployment is None:
        continue
    env = container_env(deployment["spec"]["template"]["spec"]["containers"][0])
    wanted = expected_triggers(stage, env)
    stage_hpas = targeting(hpas, stage)
    check(not stage_hpas, f"k8s {stage}: HPAs {[d['metadata']['name'] for d in stage_hpas]} target it; "
          "KEDA's ScaledObject makes its own, and two autoscalers fight")
    objects = targeting(scaled_objects, stage)
    if not check(len(objects) == 1, f"k8s {stage}: {len(objects)} ScaledObjects target it, not 1"):
        continue
    so = objects[0]
    name = so["metadata"]["name"]
    spec = so["spec"]
    check(so.get("apiVersion") == "keda.sh/v1alpha1", f"k8s ScaledObject {name}: apiVersion is not keda.sh/v1alpha1")
    low, high = spec.get("minReplicaCount"), spec.get("maxReplicaCount")
    check(positive_int(low),
          f"k8s ScaledObject {name}: minReplicaCount {low} is not at least 1 (records would wait for a pod)")
    check("idleReplicaCount" not in spec, f"k8s ScaledObject {name}: idleReplicaCount lets it go to zero replicas")
    check(positive_int(high) and positive_int(low) and low <= high <= partitions,
          f"k8s ScaledObject {name}: maxReplicaCount {high} is not between minReplicaCount {low} "
          f"and the topics' {partitions} partitions")
    for field in ("pollingInterval", "cooldownPeriod"):
        check(positive_int(spec.get(field)), f"k8s ScaledObject {name}: {field} is not set")
    have = []
    for i, trigger in enumerate(spec.get("triggers") or []):
        meta = trigger.get("metadata") or {}
        where = f"k8s ScaledObject {name} trigger {i + 1}"
        if not check(trigger.get("type") == "kafka", f"{where}: type {trigger.get('type')} is not kafka"):
            continue
        check(all(isinstance(v, str) for v in meta.values()),
              f"{where}: metadata values must be strings (quote numbers and booleans)")
        check(meta.get("topic"), f"{where}: names no topic (one trigger per topic)")
        have.append((meta.get("consumerGroup"), meta.get("topic")))
        check(meta.get("bootstrapServers") == env.get("PUSHRELAY_KAFKA_BROKERS"),
              f"{where}: bootstrapServers {meta.get('bootstrapServers')} is not the stage's "
              f"PUSHRELAY_KAFKA_BROKERS {env.get('PUSHRELAY_KAFKA_BROKERS')}")
        check(str(meta.get("lagThreshold", "")).isdigit() and int(meta["lagThreshold"]) > 0,
              f"{where}: lagThreshold {meta.get('lagThreshold')} is not a positive whole number")
        if "offset_reset" in code_facts:
            check(meta.get("offsetResetPolicy") == code_facts["offset_reset"],
                  f"{where}: offsetResetPolicy {meta.get('offsetResetPolicy')} is not the consumers' "
                  f"auto.offset.reset {code_facts['offset_reset']}")
        check(str(meta.get("allowIdleConsumers", "false")).lower() == "false",
              f"{where}: allowIdleConsumers would scale past the partition count")
        auth = (trigger.get("authenticationRef") or {}).get("name")
        check(auth is None or (auth, so["metadata"].get("namespace", "default")) in trigger_auths,
              f"{where}: authenticationRef {auth} names no TriggerAuthentication of this file")
    check(len(have) == len(set(have)), f"k8s ScaledObject {name}: a (consumerGroup, topic) appears twice: {have}")
    check(sorted(have) == sorted(wanted),
          f"k8s ScaledObject {name}: kafka triggers (consumerGroup, topic) are {sorted(have)}, "
          f"but {stage} consumes {sorted(wanted)}")
    groups = {}
    for group, topic in wanted:
        groups.setdefault(group, []).append(topic)
    autoscaling_summary.append(
        f"{stage} {low}-{high} on " + "; ".join(f"{g}: {', '.join(t)}" for g, t in groups.items()))

if failures:
    print("\n".join("FAIL: " + f for f in failures))
    sys.exit(1)
print(f"Dockerfile: {len(stages)} stages; production (stages {', '.join(sorted(ancestry('production')))}) "
      f"builds {' '.join(sorted(swift_products(ancestry('production'))))}; "
      f"dev builds {' '.join(sorted(swift_products(['build-dev']) or []))}: ok")
print(f"Package.swift: production products use {len(production_targets)} targets, none under Dev/: ok")
print(f"compose: {len(services)} services, dev profile: {', '.join(sorted(dev_services)) or 'none'}: ok")
print(f"k8s: {len(docs)} objects: ok")
print(f"k8s autoscaling: ingest on its HPA (cpu); KEDA kafka lag, at most {partitions} partitions: "
      + " | ".join(autoscaling_summary) + ": ok")
PY
