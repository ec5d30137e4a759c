#!/usr/bin/env bash
# Checks that the Dockerfile, the compose file and the Kubernetes package parse and name
# what they must: the production image builds and holds only the four services and
# the pushrelay tool (no dev broker, no provider fakes) and runs as uid
# 10001; dev-only services run the dev image in compose's dev profile; every compose
# service has a healthcheck and a restart policy, Kafka keeps its log on its volume and
# Redis has a password. The Kubernetes overlays (deploy/base, deploy/overlays/*) are
# rendered with `kubectl kustomize` and checked as they would be applied: every stage is
# given its brokers, key files and Redis password, runs the production image under Pod
# Security "restricted" with its probes on its health port, its shutdown settings equal to
# its grace period and preStop pause, and waits for the topics; the topics Job (or the
# Strimzi KafkaTopics and KafkaUser) makes every topic the code uses; ingest scales with an
# HPA, each consumer stage with one KEDA ScaledObject whose kafka triggers name the
# stage's consumer groups and topics as the code and the ConfigMap set them, logs in as
# the services do, and never scales past the topics' partitions.
# (No Docker engine or cluster runs on the development machines.) Needs kubectl.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
if ! "$PY" -c "import yaml" 2>/dev/null; then
  echo "PyYAML is missing; installing it ($PY -m pip install pyyaml)" >&2
  "$PY" -m pip install --quiet pyyaml
fi
"$PY" - <<'PY'
import os, re, shlex, subprocess, sys
import yaml

failures = []
def check(ok, message):
    if not ok:
        failures.append(message)
    return ok

PRODUCTION_PRODUCTS = {"ingest", "encryptor", "dispatcher", "feedback", "pushrelay"}
DEV_PRODUCTS = {"devbroker", "provider-fakes"}
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
    # Both runtimes run as the non-root user, by number (Kubernetes' runAsNonRoot checks a
    # numeric USER without resolving names; deploy/base's runAsUser/runAsGroup match it).
    for n in ("production", "dev"):
        users = [a for k, a in by_name[n]["instructions"] if k == "USER"]
        base_users = [a for k, a in by_name.get(by_name[n]["base"], {"instructions": []})["instructions"] if k == "USER"]
        check((users or base_users)[-1:] == ["10001:10001"], f"Dockerfile: {n} does not run as USER 10001:10001")
    runtime_runs = " ".join(a for k, a in by_name.get("runtime", {"instructions": []})["instructions"] if k == "RUN")
    check(re.search(r"groupadd\b[^&;]*--gid 10001\b[^&;]*\brelay\b", runtime_runs)
          and re.search(r"useradd\b[^&;]*--uid 10001\b[^&;]*--gid 10001\b[^&;]*\brelay\b", runtime_runs),
          "Dockerfile: the runtime stage does not create group and user relay with gid and uid 10001")

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
# Every service has a restart policy and a healthcheck; the exceptions say why not.
NO_HEALTHCHECK = {
    "kafka-init": "a one-shot: it creates the topics and exits",
    "otel-collector": "the image holds the collector binary alone: nothing inside can probe it",
}
for name, service in services.items():
    restart = service.get("restart")
    one_shot = any(isinstance(other.get("depends_on"), dict)
                   and ((other["depends_on"].get(name) or {}).get("condition") == "service_completed_successfully")
                   for other in services.values())
    if one_shot:
        check(restart == "on-failure", f"compose {name}: a one-shot others wait for, so restart: on-failure (not {restart})")
    else:
        check(restart in ("unless-stopped", "always"), f"compose {name}: restart is {restart}, not unless-stopped or always")
    health = service.get("healthcheck") or {}
    if name in NO_HEALTHCHECK:
        check(health.get("disable") is True, f"compose {name}: healthcheck should be disabled explicitly ({NO_HEALTHCHECK[name]})")
    else:
        check(health.get("test") and not health.get("disable"), f"compose {name}: no healthcheck")
# Kafka keeps its log on its volume; Redis asks for a password it reads from a secret.
kafka = services.get("kafka", {})
kafka_mounts = [str(v).split(":")[1] for v in kafka.get("volumes") or [] if ":" in str(v)]
log_dirs = str(environment(kafka).get("KAFKA_LOG_DIRS", ""))
check(log_dirs and any(log_dirs == m or log_dirs.startswith(m.rstrip("/") + "/") for m in kafka_mounts),
      f"compose kafka: KAFKA_LOG_DIRS {log_dirs!r} is not on its volume {kafka_mounts}")
redis_service = services.get("redis", {})
check("redis_password" in (redis_service.get("secrets") or []) and "redis_password" in (compose.get("secrets") or {}),
      "compose redis: not given the redis_password secret")
redis_words = " ".join(command_words(redis_service) + [str(w) for w in (redis_service.get("entrypoint") or [])])
check("requirepass" in redis_words and "/run/secrets/redis_password" in redis_words
      and not re.search(r"--requirepass", redis_words),
      "compose redis: the password must come from /run/secrets/redis_password into a config file, not the command line")
check("/run/secrets/redis_password" in str((redis_service.get("healthcheck") or {}).get("test")),
      "compose redis: its healthcheck does not authenticate")
for name in STAGES:
    service = services.get(name, {})
    check("redis_password" in (service.get("secrets") or []), f"compose {name}: lacks the redis_password secret")
    check(environment(service).get("PUSHRELAY_REDIS_PASSWORD_FILE") == "/run/secrets/redis_password",
          f"compose {name}: PUSHRELAY_REDIS_PASSWORD_FILE is not /run/secrets/redis_password")
for name, service in services.items():
    test = (service.get("healthcheck") or {}).get("test") or (compose.get("x-relay", {}).get("healthcheck") or {}).get("test")
    if test and "/dev/tcp" in str(test):
        check(test[0] == "CMD" and test[1] == "bash", f"compose {name}: /dev/tcp needs bash, not /bin/sh (dash)")

# ---------------------------------------------------------------- Kubernetes: the code's facts
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
    # Every setting a service or tool reads: the catalog's `Setting("pushrelay.…", …)` entries
    # (Shared/ServiceKit/SettingsCatalogPlatform.swift and SettingsCatalogStages.swift).
    code_facts["settings"] = {env_name(k) for path in (
        "Shared/ServiceKit/SettingsCatalogPlatform.swift", "Shared/ServiceKit/SettingsCatalogStages.swift")
        for k in re.findall(r'Setting\(\s*"(pushrelay\.[a-z0-9.]+)"', source(path))}
    if len(code_facts["settings"]) < 100:
        raise AttributeError(f"only {len(code_facts['settings'])} settings found in the catalog")
except (AttributeError, OSError) as error:
    check(False, f"cannot read the consumers' topics, groups, offset reset or settings from the Swift code ({error})")
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

def topic_name(field, env):
    key = code_facts.get("topic_keys", {}).get(field)
    check(key and field in code_facts.get("topic_defaults", {}), f"cannot read topic {field} from the Swift code")
    return env.get(env_name(key), code_facts["topic_defaults"].get(field, "?")) if key else "?"

def retry_count(env):
    return len([d for d in env.get("PUSHRELAY_RETRY_DELAYS", code_facts.get("retry_delays", "")).split(",") if d.strip()])

def expected_triggers(stage, env):
    """(consumer group, topic) per topic the stage consumes, as its environment sets them."""
    if not {"topic_defaults", "topic_keys", "retry_delays", "group_default"} <= set(code_facts):
        return []
    pairs = []
    for deployment, key, field, retry, _ in consumers:
        if deployment != stage:
            continue
        group = env.get(env_name(f"pushrelay.{key}.group"), code_facts["group_default"].replace("\\(stage)", key))
        if field != "retry":
            pairs.append((group, topic_name(field, env)))
            continue
        for n in range(1, retry_count(env) + 1) if retry == "all" else [int(retry)]:
            pairs.append((group, topic_name("retryPrefix", env) + str(n)))
    return pairs

def all_topics(env):
    """Every topic the pipeline uses (TopicNames, one retry topic per delay), as env names them."""
    if not {"topic_defaults", "topic_keys", "retry_delays"} <= set(code_facts):
        return []
    fields = [f for f in code_facts["topic_defaults"] if f != "retryPrefix"]
    return [topic_name(f, env) for f in fields] + [
        topic_name("retryPrefix", env) + str(n) for n in range(1, retry_count(env) + 1)]

# The partition count compose creates its topics with (kafka-init).
kafka_init = str(services.get("kafka-init", {}).get("command"))
compose_partitions = [int(n) for n in re.findall(r"--partitions\s+(\d+)", kafka_init)]
check(compose_partitions, "compose kafka-init: no --partitions")

# ---------------------------------------------------------------- Kubernetes: the rendered overlays
# deploy/base and deploy/overlays/* rendered with `kubectl kustomize` (Kustomize 5), and
# checked as they would be applied. Production and strimzi autoscale; dev (and the base on
# its own) do not.
OVERLAYS = {"base": "deploy/base"}
for entry in sorted(os.listdir("deploy/overlays")) if os.path.isdir("deploy/overlays") else []:
    if os.path.exists(f"deploy/overlays/{entry}/kustomization.yaml"):
        OVERLAYS[entry] = f"deploy/overlays/{entry}"
AUTOSCALED = {"production", "strimzi"}
check({"dev", "production", "strimzi"} <= set(OVERLAYS), f"deploy/overlays lacks one of dev, production, strimzi: {sorted(OVERLAYS)}")
check(not os.path.exists("deploy/k8s/pushrelay.yaml"), "deploy/k8s/pushrelay.yaml is back: the manifests are deploy/base and deploy/overlays")

def render(path):
    try:
        out = subprocess.run(["kubectl", "kustomize", path], capture_output=True, text=True, check=False)
    except FileNotFoundError:
        check(False, "kubectl is missing: it renders the overlays (kubectl kustomize)")
        return []
    if not check(out.returncode == 0, f"kubectl kustomize {path} failed: {out.stderr.strip()[-400:]}"):
        return []
    return [d for d in yaml.safe_load_all(out.stdout) if d]

WORKLOADS = ("Deployment", "StatefulSet", "DaemonSet", "Job", "CronJob")
k8s_summary = []
autoscaling_summary = []

def k8s_overlay(overlay, docs):
    where = f"k8s {overlay}"
    def named(kind, name=None):
        return [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    config_maps = {d["metadata"]["name"]: d.get("data", {}) for d in docs if d["kind"] == "ConfigMap"}
    def container_env(container):
        """The container's environment: its ConfigMaps (envFrom), then its own env entries."""
        env = {}
        for source_ in container.get("envFrom", []):
            ref = (source_.get("configMapRef") or {}).get("name")
            if source_.get("configMapRef"):
                check(ref in config_maps, f"{where}: envFrom names ConfigMap {ref}, which is not rendered")
            env.update(config_maps.get(ref, {}))
        env.update({e["name"]: e.get("value", "<from secret>") for e in container.get("env", [])})
        return env
    def relay(d):
        return (d["metadata"].get("labels") or {}).get("app.kubernetes.io/name") == "pushrelay"
    def pod_of(d):
        spec = d["spec"]["jobTemplate"]["spec"] if d["kind"] == "CronJob" else d["spec"]
        return spec["template"]["spec"]
    deployments = {d["metadata"]["name"]: d for d in named("Deployment")}
    for stage in STAGES:
        check(stage in deployments, f"{where}: no {stage} Deployment")
    for d in docs:
        check(d["metadata"].get("namespace", "pushrelay") == "pushrelay" or d["kind"] == "Namespace",
              f"{where}: {d['kind']} {d['metadata']['name']} is not in namespace pushrelay")
        labels = d["metadata"].get("labels") or {}
        for label in ("app.kubernetes.io/name", "app.kubernetes.io/component", "app.kubernetes.io/part-of"):
            check(label in labels, f"{where}: {d['kind']} {d['metadata']['name']} lacks label {label}")
        if relay(d):
            check(labels.get("app.kubernetes.io/version"), f"{where}: {d['kind']} {d['metadata']['name']} lacks app.kubernetes.io/version")

    # Every PushRelay container runs the one production image, a production executable,
    # under Pod Security "restricted", with requests and limits.
    relay_images = set()
    for d in docs:
        if d["kind"] not in WORKLOADS:
            continue
        name = d["metadata"]["name"]
        pod = pod_of(d)
        psc = pod.get("securityContext") or {}
        check(pod.get("automountServiceAccountToken") is False, f"{where}: {name} mounts a service account token")
        check(psc.get("runAsNonRoot") is True and (psc.get("seccompProfile") or {}).get("type") == "RuntimeDefault",
              f"{where}: {name}: pod securityContext lacks runAsNonRoot / seccompProfile RuntimeDefault")
        tmp_volumes = {v["name"] for v in pod.get("volumes", []) if "emptyDir" in v}
        for c in pod.get("containers", []) + pod.get("initContainers", []):
            sc = c.get("securityContext") or {}
            what = f"{where}: {name}/{c['name']}"
            check(sc.get("allowPrivilegeEscalation") is False and sc.get("readOnlyRootFilesystem") is True
                  and (sc.get("capabilities") or {}).get("drop") == ["ALL"] and sc.get("runAsNonRoot") is True
                  and (sc.get("seccompProfile") or {}).get("type") == "RuntimeDefault",
                  f"{what}: securityContext is not Pod Security restricted (no escalation, read-only root, "
                  "drop ALL, runAsNonRoot, RuntimeDefault seccomp)")
            check(isinstance(sc.get("runAsUser", psc.get("runAsUser")), int), f"{what}: no numeric runAsUser")
            res = c.get("resources") or {}
            check(all(k in (res.get(part) or {}) for part in ("requests", "limits") for k in ("cpu", "memory")),
                  f"{what}: cpu and memory requests and limits are not all set")
            if not relay(d):
                continue
            relay_images.add(c["image"])
            check(re.fullmatch(r"(.+/)?pushrelay([:@].+)", c["image"]) is not None,
                  f"{what}: image {c['image']} is not the production image (…/pushrelay:tag or @digest)")
            command = c.get("command", [])
            check(command[:1] and command[0] in PRODUCTION_PRODUCTS,
                  f"{what}: runs {command[:1]}, not one of the production image's executables")
            check(not set(command[:1]) & DEV_PRODUCTS, f"{what}: runs a dev tool {command}")
            check(sc.get("runAsUser") == 10001 and sc.get("runAsGroup") == 10001
                  and psc.get("runAsUser") == 10001 and psc.get("runAsGroup") == 10001,
                  f"{what}: runAsUser/runAsGroup are not 10001, the Dockerfile's USER")
            check(any(m["mountPath"] == "/tmp" and m["name"] in tmp_volumes for m in c.get("volumeMounts", [])),
                  f"{what}: no emptyDir at /tmp under the read-only root")
            for var in container_env(c):
                if var.startswith("PUSHRELAY_") and "settings" in code_facts:
                    check(var in code_facts["settings"], f"{what}: {var} is not a setting the services read (a typo?)")
    check(len(relay_images) == 1, f"{where}: PushRelay containers run {len(relay_images)} images, not one: {sorted(relay_images)}")

    # The stages: settings, secrets, ports, probes, graceful stop, topics wait, spread, PDB.
    pdbs = named("PodDisruptionBudget")
    services_ = named("Service")
    policies = named("NetworkPolicy")
    def selects(selector, labels):
        selector = selector or {}
        ok = all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items())
        for e in selector.get("matchExpressions") or []:
            value = labels.get(e["key"])
            ok &= {"In": value in e.get("values", []), "NotIn": value not in e.get("values", []),
                   "Exists": e["key"] in labels, "DoesNotExist": e["key"] not in labels}[e["operator"]]
        return ok
    def policy_ports(pod_labels, direction, peer_namespace):
        """Ports the NetworkPolicies open for these pods, to or from that namespace."""
        ports = set()
        for p in policies:
            if not selects(p["spec"].get("podSelector"), pod_labels):
                continue
            for rule in p["spec"].get(direction, []) or []:
                peers = rule.get("from" if direction == "ingress" else "to", [])
                if any(((peer.get("namespaceSelector") or {}).get("matchLabels") or {}).get("kubernetes.io/metadata.name")
                       == peer_namespace for peer in peers):
                    for port in rule.get("ports", []):
                        ports.update(range(port["port"], port.get("endPort", port["port"]) + 1))
        return ports
    def egress_ports(pod_labels, peer_test):
        ports = set()
        for p in policies:
            if not selects(p["spec"].get("podSelector"), pod_labels):
                continue
            for rule in p["spec"].get("egress", []) or []:
                if any(peer_test(peer) for peer in rule.get("to", [])):
                    for port in rule.get("ports", []):
                        ports.update(range(port["port"], port.get("endPort", port["port"]) + 1))
        return ports
    def internet(peer):
        return (peer.get("ipBlock") or {}).get("cidr") == "0.0.0.0/0"
    def anything(peer):
        return True
    check(any(p["spec"].get("podSelector") == {} and set(p["spec"].get("policyTypes", [])) == {"Ingress", "Egress"}
              and not p["spec"].get("ingress") and not p["spec"].get("egress") for p in policies),
          f"{where}: no default-deny NetworkPolicy (ingress and egress)")
    for stage, deployment in sorted(deployments.items()):
        if stage not in STAGES:
            continue
        pod = deployment["spec"]["template"]["spec"]
        pod_labels = deployment["spec"]["template"]["metadata"].get("labels") or {}
        container = next((c for c in pod["containers"] if c["name"] == stage), pod["containers"][0])
        env = container_env(container)
        what = f"{where}: {stage}"
        check(env.get("PUSHRELAY_KAFKA_BROKERS"), f"{what}: PUSHRELAY_KAFKA_BROKERS is not set")
        check(container.get("command") == [stage], f"{what}: command is {container.get('command')}, not [{stage}]")
        # Secrets: each file a setting names is in a mounted Secret (or projected Secrets).
        volume_secrets = {}
        for v in pod.get("volumes", []):
            if "secret" in v:
                volume_secrets[v["name"]] = {v["secret"]["secretName"]}
            elif "projected" in v:
                volume_secrets[v["name"]] = {s["secret"]["name"] for s in v["projected"].get("sources", []) if "secret" in s}
        mounts = {m["mountPath"].rstrip("/"): m["name"] for m in container.get("volumeMounts", [])}
        k8s_wanted = {w.replace("_", "-") for w in NEEDS[stage]}
        have = set().union(*volume_secrets.values()) if volume_secrets else set()
        check(k8s_wanted <= have, f"{what}: lacks secrets {k8s_wanted - have}")
        for secret in NEEDS[stage]:
            path = env.get(SECRET_ENV[secret])
            if check(path, f"{what}: {SECRET_ENV[secret]} is not set"):
                check(secret.replace("_", "-") in volume_secrets.get(mounts.get(os.path.dirname(path)), set()),
                      f"{what}: {SECRET_ENV[secret]}={path} is not in the mounted secret {secret.replace('_', '-')}")
        file_settings = ["PUSHRELAY_REDIS_PASSWORD_FILE", "PUSHRELAY_REDIS_TLS_CA_FILE", "PUSHRELAY_REDIS_TLS_CERT_FILE",
                         "PUSHRELAY_REDIS_TLS_KEY_FILE", "PUSHRELAY_KAFKA_SASL_PASSWORD_FILE", "PUSHRELAY_KAFKA_TLS_CA_FILE",
                         "PUSHRELAY_KAFKA_TLS_CERT_FILE", "PUSHRELAY_KAFKA_TLS_KEY_FILE"]
        for var in file_settings:
            if env.get(var):
                check(mounts.get(os.path.dirname(env[var])) in volume_secrets,
                      f"{what}: {var}={env[var]} is in no mounted Secret")
        check(env.get("PUSHRELAY_REDIS_PASSWORD_FILE") or env.get("PUSHRELAY_REDIS_PASSWORD"),
              f"{what}: Redis has no password (PUSHRELAY_REDIS_PASSWORD_FILE)")
        protocol = env.get("PUSHRELAY_KAFKA_SECURITY_PROTOCOL", "plaintext")
        if protocol.startswith("sasl"):
            for var in ("PUSHRELAY_KAFKA_SASL_MECHANISM", "PUSHRELAY_KAFKA_SASL_USERNAME", "PUSHRELAY_KAFKA_SASL_PASSWORD_FILE"):
                check(env.get(var), f"{what}: security protocol {protocol} without {var}")
        # Ports and probes: ingest's health on its ops listener, the others' on the HTTP port.
        ports = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
        check(str(ports.get("http")) == env.get("PUSHRELAY_HTTP_PORT"),
              f"{what}: container port http {ports.get('http')} is not PUSHRELAY_HTTP_PORT {env.get('PUSHRELAY_HTTP_PORT')}")
        health_port = "ops" if stage == "ingest" else "http"
        if stage == "ingest":
            check(str(ports.get("ops")) == env.get("PUSHRELAY_OPS_PORT"),
                  f"{what}: container port ops {ports.get('ops')} is not PUSHRELAY_OPS_PORT {env.get('PUSHRELAY_OPS_PORT')}")
            header = env.get("PUSHRELAY_HTTP_CLIENT_IP_HEADER")
            check(header and re.fullmatch(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+", header),
                  f"{what}: PUSHRELAY_HTTP_CLIENT_IP_HEADER (the load balancer's client-address header) is not set")
        for kind, path in (("startupProbe", "/health/live"), ("readinessProbe", "/health/ready"), ("livenessProbe", "/health/live")):
            probe = container.get(kind) or {}
            get = probe.get("httpGet") or {}
            check(get.get("path") == path and get.get("port") == health_port,
                  f"{what}: {kind} is not GET {path} on port {health_port}")
            check(all(isinstance(probe.get(k), int) for k in ("timeoutSeconds", "periodSeconds", "failureThreshold")),
                  f"{what}: {kind} lacks an explicit timeoutSeconds, periodSeconds or failureThreshold")
        # Health and metrics: a Service port named ops reaches the health port, and the
        # monitoring namespace may reach it; ingest's API is open to the ingress namespace.
        ops_services = [s for s in services_ if selects({"matchLabels": s["spec"].get("selector")}, pod_labels)
                        and any(p.get("name") == "ops" for p in s["spec"]["ports"])]
        check(any(p.get("name") == "ops" and p.get("targetPort") in (health_port, ports.get(health_port))
                  for s in ops_services for p in s["spec"]["ports"]),
              f"{what}: no Service port named ops targets its health port {health_port}")
        check(ports.get(health_port) in policy_ports(pod_labels, "ingress", "monitoring"),
              f"{what}: no NetworkPolicy admits the monitoring namespace on port {ports.get(health_port)}")
        if stage == "ingest":
            check(ports.get("http") in policy_ports(pod_labels, "ingress", "ingress-nginx"),
                  f"{what}: no NetworkPolicy admits the ingress controller on the API port {ports.get('http')}")
            check(any(p.get("targetPort") in ("http", ports.get("http")) for s in services_
                      if s["metadata"]["name"] == "ingest" for p in s["spec"]["ports"]),
                  f"{what}: Service ingest does not target the API port")
        # Egress: DNS and Kafka for every stage, HTTPS out for those that call out.
        broker_port = int(env.get("PUSHRELAY_KAFKA_BROKERS", ":0").split(",")[0].rsplit(":", 1)[-1] or 0)
        check(53 in egress_ports(pod_labels, anything), f"{what}: no NetworkPolicy lets it reach DNS (53)")
        check(broker_port in egress_ports(pod_labels, anything),
              f"{what}: no NetworkPolicy lets it reach the brokers' port {broker_port}")
        if stage in ("ingest", "dispatcher", "feedback"):
            check(443 in egress_ports(pod_labels, internet), f"{what}: no NetworkPolicy lets it reach HTTPS (443) outside the cluster")
        # Graceful stop: the settings are the pod's own numbers (kustomize replacements).
        grace = pod.get("terminationGracePeriodSeconds")
        prestop = (((container.get("lifecycle") or {}).get("preStop") or {}).get("sleep") or {}).get("seconds", 0)
        check(isinstance(grace, int) and 10 <= grace <= 3600, f"{what}: terminationGracePeriodSeconds {grace} is not 10..3600")
        check(env.get("PUSHRELAY_SHUTDOWN_GRACE_SECONDS") == str(grace),
              f"{what}: PUSHRELAY_SHUTDOWN_GRACE_SECONDS {env.get('PUSHRELAY_SHUTDOWN_GRACE_SECONDS')!r} "
              f"is not terminationGracePeriodSeconds {grace}")
        check(env.get("PUSHRELAY_SHUTDOWN_PRESTOP_SECONDS", "0") == str(prestop),
              f"{what}: PUSHRELAY_SHUTDOWN_PRESTOP_SECONDS {env.get('PUSHRELAY_SHUTDOWN_PRESTOP_SECONDS')!r} "
              f"is not the preStop sleep {prestop}")
        check("PUSHRELAY_SHUTDOWN_TIMEOUT_MS" not in env,
              f"{what}: PUSHRELAY_SHUTDOWN_TIMEOUT_MS is set beside PUSHRELAY_SHUTDOWN_GRACE_SECONDS")
        if isinstance(grace, int):
            check(grace - prestop - 5 - 3 >= 1,
                  f"{what}: grace {grace} s leaves no shutdown timeout after preStop {prestop} s, 5 s cancellation, 3 s margin")
        if stage == "ingest":
            check(prestop > 0, f"{what}: no preStop sleep: the listener would close before endpoints drain")
        # No consuming (or producing) before the topics exist.
        init = pod.get("initContainers") or []
        check(any(c.get("command", [])[:3] == ["pushrelay", "topics", "wait"] for c in init),
              f"{what}: no init container runs `pushrelay topics wait`")
        for c in init:
            check(container_env(c).get("PUSHRELAY_KAFKA_BROKERS") == env.get("PUSHRELAY_KAFKA_BROKERS"),
                  f"{what}: init container {c['name']} is given other brokers")
            # pushrelay reads the shared settings (Kafka and Redis), files included.
            c_mounts = {m["mountPath"] for m in c.get("volumeMounts", [])}
            for var in file_settings:
                if env.get(var):
                    check(os.path.dirname(env[var]) in c_mounts, f"{what}: init container {c['name']} lacks {env[var]}")
        keys = {t.get("topologyKey") for t in pod.get("topologySpreadConstraints", [])
                if selects(t.get("labelSelector"), pod_labels)}
        check({"kubernetes.io/hostname", "topology.kubernetes.io/zone"} <= keys,
              f"{what}: topologySpreadConstraints do not cover hostname and zone")
        check(any(selects(p["spec"].get("selector"), pod_labels) for p in pdbs), f"{what}: no PodDisruptionBudget")
        if overlay in AUTOSCALED or overlay == "base":
            check("replicas" not in deployment["spec"],
                  f"{what}: sets replicas, which its autoscaler owns (every apply would reset it)")
        else:
            check(deployment["spec"].get("replicas") == 1, f"{what}: dev runs one replica per stage")

    # The topics: a Job running `pushrelay topics create` (base, dev, production), or
    # Strimzi KafkaTopics (strimzi). Their partition count caps the consumer stages.
    jobs = named("Job")
    kafka_topics = {(d["spec"].get("topicName") or d["metadata"]["name"]): d for d in named("KafkaTopic")}
    stage_env = container_env(deployments["ingest"]["spec"]["template"]["spec"]["containers"][0]) if "ingest" in deployments else {}
    wanted_topics = all_topics(stage_env)
    topic_partitions = {}
    if overlay == "strimzi":
        check(not jobs, f"{where}: a Job besides the KafkaTopics: {[j['metadata']['name'] for j in jobs]}")
        check(set(wanted_topics) <= set(kafka_topics),
              f"{where}: no KafkaTopic for {sorted(set(wanted_topics) - set(kafka_topics))}")
        topic_partitions = {t: d["spec"].get("partitions") for t, d in kafka_topics.items()}
        for t, d in kafka_topics.items():
            check(d["spec"].get("partitions") == int(stage_env.get("PUSHRELAY_TOPIC_PARTITIONS", 0)),
                  f"{where}: KafkaTopic {t} has {d['spec'].get('partitions')} partitions, not PUSHRELAY_TOPIC_PARTITIONS")
        users = named("KafkaUser")
        if check(len(users) == 1, f"{where}: {len(users)} KafkaUsers, not 1"):
            user = users[0]
            check(user["metadata"]["name"] == stage_env.get("PUSHRELAY_KAFKA_SASL_USERNAME"),
                  f"{where}: KafkaUser {user['metadata']['name']} is not PUSHRELAY_KAFKA_SASL_USERNAME")
            check((user["spec"].get("authentication") or {}).get("type") == "scram-sha-512"
                  and stage_env.get("PUSHRELAY_KAFKA_SASL_MECHANISM") == "SCRAM-SHA-512",
                  f"{where}: the KafkaUser and the services do not both use SCRAM-SHA-512")
            acls = (user["spec"].get("authorization") or {}).get("acls", [])
            def allowed(kind, name, operation):
                for acl in acls:
                    r = acl.get("resource", {})
                    match = name == r.get("name") if r.get("patternType", "literal") == "literal" else name.startswith(r.get("name", ""))
                    ops = acl.get("operations") or [acl.get("operation")]
                    if r.get("type") == kind and match and (operation in ops or "All" in ops) and acl.get("type", "allow") == "allow":
                        return True
                return False
            for t in wanted_topics:
                check(allowed("topic", t, "Describe") and allowed("topic", t, "Write"),
                      f"{where}: the KafkaUser may not describe and write topic {t}")
            for stage in CONSUMER_STAGES:
                s_env = container_env(deployments[stage]["spec"]["template"]["spec"]["containers"][0]) if stage in deployments else {}
                for group, t in expected_triggers(stage, s_env):
                    check(allowed("topic", t, "Read"), f"{where}: the KafkaUser may not read topic {t} ({stage})")
                    check(allowed("group", group, "Read"), f"{where}: the KafkaUser may not use group {group} ({stage})")
    else:
        topic_jobs = [j for j in jobs if any(c.get("command", [])[:3] == ["pushrelay", "topics", "create"]
                                             for c in j["spec"]["template"]["spec"]["containers"])]
        if check(len(topic_jobs) == 1, f"{where}: {len(topic_jobs)} Jobs run `pushrelay topics create`, not 1"):
            job = topic_jobs[0]
            check(isinstance(job["spec"].get("backoffLimit"), int) and isinstance(job["spec"].get("ttlSecondsAfterFinished"), int),
                  f"{where}: the topics Job lacks backoffLimit or ttlSecondsAfterFinished")
            job_container = job["spec"]["template"]["spec"]["containers"][0]
            job_env = container_env(job_container)
            job_mounts = {m["mountPath"] for m in job_container.get("volumeMounts", [])}
            for var in ("PUSHRELAY_REDIS_PASSWORD_FILE", "PUSHRELAY_REDIS_TLS_CA_FILE", "PUSHRELAY_REDIS_TLS_CERT_FILE",
                        "PUSHRELAY_REDIS_TLS_KEY_FILE", "PUSHRELAY_KAFKA_SASL_PASSWORD_FILE", "PUSHRELAY_KAFKA_TLS_CA_FILE",
                        "PUSHRELAY_KAFKA_TLS_CERT_FILE", "PUSHRELAY_KAFKA_TLS_KEY_FILE"):
                if job_env.get(var):
                    check(os.path.dirname(job_env[var]) in job_mounts, f"{where}: the topics Job lacks {job_env[var]}")
            for var in ("PUSHRELAY_KAFKA_BROKERS", "PUSHRELAY_KAFKA_SECURITY_PROTOCOL", "PUSHRELAY_KAFKA_SASL_USERNAME",
                        "PUSHRELAY_KAFKA_SASL_PASSWORD_FILE", "PUSHRELAY_KAFKA_TLS_CA_FILE", "PUSHRELAY_RETRY_DELAYS"):
                check(job_env.get(var) == stage_env.get(var), f"{where}: the topics Job's {var} is not the stages'")
            partitions_text = job_env.get("PUSHRELAY_TOPIC_PARTITIONS", "")
            if check(partitions_text.isdigit(), f"{where}: the topics Job has no PUSHRELAY_TOPIC_PARTITIONS"):
                topic_partitions = {t: int(partitions_text) for t in wanted_topics}
            rf, isr = job_env.get("PUSHRELAY_TOPIC_REPLICATION_FACTOR", "3"), job_env.get("PUSHRELAY_TOPIC_MIN_INSYNC_REPLICAS", "2")
            check(rf.isdigit() and isr.isdigit() and int(isr) <= int(rf),
                  f"{where}: min.insync.replicas {isr} above the replication factor {rf}")
        check(not kafka_topics, f"{where}: KafkaTopics beside the topics Job")

    # Autoscaling: ingest on an HPA, each consumer stage on one KEDA ScaledObject whose kafka
    # triggers name the stage's groups and topics, never past the topics' partitions.
    hpas = named("HorizontalPodAutoscaler")
    scaled_objects = named("ScaledObject")
    if overlay not in AUTOSCALED:
        check(not hpas and not scaled_objects, f"{where}: has autoscalers, but runs fixed replicas")
        return
    trigger_auths = {d["metadata"]["name"]: d for d in named("TriggerAuthentication")}
    secrets = {d["metadata"]["name"]: {**(d.get("data") or {}), **(d.get("stringData") or {})} for d in named("Secret")}
    def scale_target(d):
        ref = d.get("spec", {}).get("scaleTargetRef") or {}
        default_kind = "Deployment" if d["kind"] == "ScaledObject" else None
        return (ref.get("apiVersion", "apps/v1"), ref.get("kind", default_kind), ref.get("name"))
    for d in hpas + scaled_objects:
        api, kind, name = scale_target(d)
        check(api == "apps/v1" and kind == "Deployment" and name in deployments,
              f"{where}: {d['kind']} {d['metadata']['name']}: targets {kind} {name}, not a rendered Deployment")
    def targeting(objects, name):
        return [d for d in objects if scale_target(d)[1:3] == ("Deployment", name)]
    def positive_int(value):
        return isinstance(value, int) and not isinstance(value, bool) and value > 0
    ingest_hpas = targeting(hpas, "ingest")
    check(len(ingest_hpas) == 1, f"{where}: {len(ingest_hpas)} HorizontalPodAutoscalers target ingest, not 1")
    for h in ingest_hpas:
        check(h["spec"].get("minReplicas", 1) >= 2, f"{where}: ingest's HPA allows fewer than 2 replicas")
    check(not targeting(scaled_objects, "ingest"), f"{where}: a ScaledObject targets ingest besides its HPA")
    summary = []
    for stage in CONSUMER_STAGES:
        deployment = deployments.get(stage)
        if deployment is None:
            continue
        env = container_env(deployment["spec"]["template"]["spec"]["containers"][0])
        wanted = expected_triggers(stage, env)
        stage_hpas = targeting(hpas, stage)
        check(not stage_hpas, f"{where}: HPAs {[d['metadata']['name'] for d in stage_hpas]} target {stage}; "
              "KEDA's ScaledObject makes its own, and two autoscalers fight")
        objects = targeting(scaled_objects, stage)
        if not check(len(objects) == 1, f"{where}: {len(objects)} ScaledObjects target {stage}, not 1"):
            continue
        so = objects[0]
        name = so["metadata"]["name"]
        spec = so["spec"]
        check(so.get("apiVersion") == "keda.sh/v1alpha1", f"{where}: ScaledObject {name}: apiVersion is not keda.sh/v1alpha1")
        low, high = spec.get("minReplicaCount"), spec.get("maxReplicaCount")
        check(positive_int(low) and low >= 2,
              f"{where}: ScaledObject {name}: minReplicaCount {low} is not at least 2 (one pod lost must leave one)")
        check("idleReplicaCount" not in spec, f"{where}: ScaledObject {name}: idleReplicaCount lets it go to zero replicas")
        cap = min((topic_partitions.get(t, 0) for _, t in wanted), default=0)
        check(positive_int(high) and positive_int(low) and low <= high <= cap,
              f"{where}: ScaledObject {name}: maxReplicaCount {high} is not between minReplicaCount {low} "
              f"and its topics' {cap} partitions")
        for field in ("pollingInterval", "cooldownPeriod"):
            check(positive_int(spec.get(field)), f"{where}: ScaledObject {name}: {field} is not set")
        have = []
        for i, trigger in enumerate(spec.get("triggers") or []):
            meta = trigger.get("metadata") or {}
            at = f"{where}: ScaledObject {name} trigger {i + 1}"
            if not check(trigger.get("type") == "kafka", f"{at}: type {trigger.get('type')} is not kafka"):
                continue
            check(all(isinstance(v, str) for v in meta.values()), f"{at}: metadata values must be strings (quote numbers and booleans)")
            check(meta.get("topic"), f"{at}: names no topic (one trigger per topic)")
            have.append((meta.get("consumerGroup"), meta.get("topic")))
            check(meta.get("bootstrapServers") == env.get("PUSHRELAY_KAFKA_BROKERS"),
                  f"{at}: bootstrapServers {meta.get('bootstrapServers')} is not the stage's "
                  f"PUSHRELAY_KAFKA_BROKERS {env.get('PUSHRELAY_KAFKA_BROKERS')}")
            check(str(meta.get("lagThreshold", "")).isdigit() and int(meta["lagThreshold"]) > 0,
                  f"{at}: lagThreshold {meta.get('lagThreshold')} is not a positive whole number")
            if "offset_reset" in code_facts:
                check(meta.get("offsetResetPolicy") == code_facts["offset_reset"],
                      f"{at}: offsetResetPolicy {meta.get('offsetResetPolicy')} is not the consumers' "
                      f"auto.offset.reset {code_facts['offset_reset']}")
            check(str(meta.get("allowIdleConsumers", "false")).lower() == "false",
                  f"{at}: allowIdleConsumers would scale past the partition count")
            # KEDA logs in as the services do.
            auth = (trigger.get("authenticationRef") or {}).get("name")
            protocol = env.get("PUSHRELAY_KAFKA_SECURITY_PROTOCOL", "plaintext")
            if protocol == "plaintext":
                continue
            if not check(auth in trigger_auths, f"{at}: Kafka is {protocol}, and authenticationRef {auth} "
                         "names no rendered TriggerAuthentication"):
                continue
            params = {}
            for ref in trigger_auths[auth]["spec"].get("secretTargetRef", []):
                params[ref["parameter"]] = secrets.get(ref["name"], {}).get(ref["key"], "<operator's Secret>")
            sasl = {"SCRAM-SHA-512": "scram_sha512", "SCRAM-SHA-256": "scram_sha256", "PLAIN": "plaintext"}
            if protocol.startswith("sasl"):
                check(params.get("sasl") == sasl.get(env.get("PUSHRELAY_KAFKA_SASL_MECHANISM")),
                      f"{at}: KEDA's sasl {params.get('sasl')} is not PUSHRELAY_KAFKA_SASL_MECHANISM "
                      f"{env.get('PUSHRELAY_KAFKA_SASL_MECHANISM')}")
                check(params.get("username") == env.get("PUSHRELAY_KAFKA_SASL_USERNAME"),
                      f"{at}: KEDA's username {params.get('username')} is not PUSHRELAY_KAFKA_SASL_USERNAME")
                check("password" in params, f"{at}: KEDA is given no password")
            check(params.get("tls") == ("enable" if protocol in ("ssl", "sasl_ssl") else params.get("tls")),
                  f"{at}: KEDA's tls {params.get('tls')} does not match security protocol {protocol}")
            if protocol in ("ssl", "sasl_ssl") and env.get("PUSHRELAY_KAFKA_TLS_CA_FILE"):
                check("ca" in params, f"{at}: the services trust a CA file, KEDA is given none")
        check(len(have) == len(set(have)), f"{where}: ScaledObject {name}: a (consumerGroup, topic) appears twice: {have}")
        check(sorted(have) == sorted(wanted),
              f"{where}: ScaledObject {name}: kafka triggers (consumerGroup, topic) are {sorted(have)}, "
              f"but {stage} consumes {sorted(wanted)}")
        groups = {}
        for group, topic in wanted:
            groups.setdefault(group, []).append(topic)
        summary.append(f"{stage} {low}-{high} on " + "; ".join(f"{g}: {', '.join(t)}" for g, t in groups.items()))
    # Monitoring: the ServiceMonitor scrapes the ops ports, the rules and the dashboard are there.
    monitors = named("ServiceMonitor")
    check(any(e.get("port") == "ops" for m in monitors for e in m["spec"].get("endpoints", [])),
          f"{where}: no ServiceMonitor scrapes the ops ports")
    check(named("PrometheusRule"), f"{where}: no PrometheusRule")
    check(any((d["metadata"].get("labels") or {}).get("grafana_dashboard") == "1" for d in named("ConfigMap")),
          f"{where}: no ConfigMap labelled grafana_dashboard: \"1\"")
    autoscaling_summary.append(f"{overlay}: ingest on its HPA (cpu); " + " | ".join(summary))

for overlay, path in OVERLAYS.items():
    docs = render(path)
    if docs:
        k8s_overlay(overlay, docs)
        k8s_summary.append(f"{overlay} {len(docs)}")

# Dev's own Kafka keeps its log on its volume, and its Redis takes the password from a Secret.
dev_docs = render(OVERLAYS["dev"]) if "dev" in OVERLAYS else []
for d in dev_docs:
    if d["kind"] != "StatefulSet":
        continue
    pod = d["spec"]["template"]["spec"]
    claims = {c["metadata"]["name"] for c in d["spec"].get("volumeClaimTemplates", [])}
    for c in pod["containers"]:
        env = {e["name"]: e.get("value") for e in c.get("env", [])}
        mounted = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
        if "kafka" in c["image"]:
            log_dirs = env.get("KAFKA_LOG_DIRS", "")
            check(log_dirs and any(log_dirs.startswith(p) and mounted[p] in claims for p in mounted),
                  f"k8s dev: Kafka's KAFKA_LOG_DIRS {log_dirs!r} is not on its persistent volume")
        if "redis" in c["image"]:
            check(not any("requirepass" in w for w in c.get("command", []) + c.get("args", [])),
                  "k8s dev: Redis's password is on its command line")
            check(any(v.get("secret", {}).get("secretName") == "redis-auth" for v in pod.get("volumes", [])),
                  "k8s dev: Redis does not read its password from Secret redis-auth")

if failures:
    print("\n".join("FAIL: " + f for f in failures))
    sys.exit(1)
print(f"Dockerfile: {len(stages)} stages; production (stages {', '.join(sorted(ancestry('production')))}) "
      f"builds {' '.join(sorted(swift_products(ancestry('production'))))}; "
      f"dev builds {' '.join(sorted(swift_products(['build-dev']) or []))}: ok")
print(f"Package.swift: production products use {len(production_targets)} targets, none under Dev/: ok")
print(f"compose: {len(services)} services, dev profile: {', '.join(sorted(dev_services)) or 'none'}: ok")
print(f"k8s: rendered objects per overlay: {', '.join(k8s_summary)}: ok")
for line in autoscaling_summary:
    print(f"k8s autoscaling {line}: ok")
PY
