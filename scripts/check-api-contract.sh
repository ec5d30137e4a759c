#!/usr/bin/env bash
# Checks the running relay against its own API contract: schemathesis generates requests
# from the OpenAPI document ingest serves at GET /openapi.json (docs/api/openapi.json) and
# checks every answer:
#   - not_a_server_error            no 5xx;
#   - status_code_conformance       the status is one the operation documents;
#   - content_type_conformance      the Content-Type is one documented for that status;
#   - response_schema_conformance   the body validates against the documented schema.
# Phases: examples, coverage, fuzzing (positive and negative data) and stateful (the
# links schemathesis infers from the document: a realm registered by POST /v1/realms is
# then listed, given devices, notified, ...). Bounded and repeatable: at most
# CONTRACT_MAX_EXAMPLES (50) cases per operation, a fixed seed (CONTRACT_SEED), no example
# database or cache carried between runs, and a hard deadline (CONTRACT_DEADLINE, 600 s).
#
# It needs the dev stack up (`make up`, scripts/dev-up.sh): ingest's API on
# 127.0.0.1:${PUSHRELAY_INGEST_PORT:-8080} and the demo server whose credentials dev-up.sh
# wrote to .run/demo/env (SERVER=, KEY=, REALM=). Authenticated operations use them as
# HTTP Basic; the key is handed to schemathesis through the environment, never on a
# command line, and reports are sanitized.
#
# The relay limits what one client address may do, and this run is one address sending
# thousands of requests (some without credentials, which count as failed
# authentications). 429 is documented, so a limited run would pass having tested little:
# the run fails when any answer was 429 (but for the relay-wide daily limit of
# registration-transfer verifications, PUSHRELAY_ZULIP_TRANSFER_VERIFICATIONS_PER_DAY).
# Start the stack for it with the limits raised (`make up` passes the environment
# through to the services):
#
#   PUSHRELAY_RATELIMIT_REQUESTS=1000000 PUSHRELAY_AUTH_FAILURES_MAX=1000000 \
#   PUSHRELAY_SERVER_REGISTRATIONS_MAX=1000000 PUSHRELAY_STATUS_REQUESTS_MAX=1000000 \
#   PUSHRELAY_GORUSH_SYNC_TIMEOUT_MS=5000 make up
#   scripts/check-api-contract.sh
#
# (PUSHRELAY_GORUSH_SYNC_TIMEOUT_MS: a generated `?sync=true` push waits for its outcomes,
# 30 s by default. PUSHRELAY_ZULIP_TRANSFER_VERIFICATIONS_PER_DAY=0 would keep the
# registration transfer from fetching https://<generated hostname>/..., at the price of
# those two endpoints answering only 403 TRANSFER_DISABLED.)
#
# POST /api/v1/remotes/server/deactivate would deactivate the demo server, after which
# every authenticated call answers 401 (documented: the rest of the run would test
# nothing). A first, small pass tests it alone, as a throwaway server registered for it;
# the main pass leaves it out.
#
# It writes to the dev stack's Redis (servers, realms, devices; the demo realm's devices
# may be deleted) and sends pushes to the provider fakes: run it on a dev stack, never
# against a relay that matters.
#
# Settings (environment): PUSHRELAY_INGEST_PORT (8080), CONTRACT_MAX_EXAMPLES (50),
# CONTRACT_SEED (1), CONTRACT_DEADLINE (600, seconds), CONTRACT_WORKERS (1),
# CONTRACT_REPORT_DIR (.run/contract: junit.xml and a sanitized HAR of every exchange).
# schemathesis lives in a virtual environment under $PUSHRELAY_VENVS (default
# /opt/pushrelay-venvs, or ~/.cache/pushrelay-venvs when /opt is not writable), installed
# from PyPI on the first run (python3-venv from apt if missing), reused after.
#
# Exit status: 0 when both passes found nothing, 1 otherwise (a failure, an error, the
# deadline, answers limited by 429, or a stack that is not up). The last line sums it up.
set -euo pipefail
cd "$(dirname "$0")/.."

SCHEMATHESIS_REQUIREMENTS="schemathesis==4.32.5"

port="${PUSHRELAY_INGEST_PORT:-8080}"
api="http://127.0.0.1:$port"
max_examples="${CONTRACT_MAX_EXAMPLES:-50}"
seed="${CONTRACT_SEED:-1}"
deadline="${CONTRACT_DEADLINE:-600}"
workers="${CONTRACT_WORKERS:-1}"
reports="${CONTRACT_REPORT_DIR:-.run/contract}"
demo=.run/demo/env

# shellcheck source=scripts/lib/venv.sh
. scripts/lib/venv.sh

fail() { echo "check-api-contract: FAILED ($*)" >&2; exit 1; }

# The demo server's credentials, as dev-up.sh wrote them (read, not sourced).
[ -r "$demo" ] || fail "no $demo: start the dev stack first (make up)"
demo_value() { sed -n "s/^$1=//p" "$demo" | head -n 1; }
server=$(demo_value SERVER)
key=$(demo_value KEY)
realm=$(demo_value REALM)
[ -n "$server" ] && [ -n "$key" ] && [ -n "$realm" ] || fail "$demo lacks SERVER, KEY or REALM"

# curl_as UUID KEY ARGS...: curl with HTTP Basic from its config on stdin, so the key is
# on no command line.
curl_as() {
  local user="$1:$2"; shift 2
  printf 'user = "%s"\n' "$user" | curl -K - "$@"
}

command -v curl >/dev/null || fail "curl is missing"
curl -sf -o /dev/null "$api/openapi.json" \
  || fail "nothing answers $api/openapi.json: start the dev stack first (make up)"
# The demo server must be able to call: 401s are documented, so a run with dead
# credentials (a stack restarted on a fresh Redis, a deactivated server) would pass
# having tested nothing.
status=$(curl_as "$server" "$key" -s -o /dev/null -w '%{http_code}' \
  "$api/v1/devices?realm_uuid=$realm&user_id=10")
case "$status" in
  200) ;;
  429) fail "GET /v1/devices as the demo server answers 429: the stack runs with the default limits; restart it with the settings at the top of $0" ;;
  *) fail "the demo server's credentials in $demo get $status from GET /v1/devices (want 200): restart the stack (make down; make up)" ;;
esac

venv schemathesis "$SCHEMATHESIS_REQUIREMENTS"
st="$venvs/schemathesis/bin/schemathesis"
py="$venvs/schemathesis/bin/python"

mkdir -p "$reports"
rm -f "$reports"/*.xml "$reports"/*.har
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The document ingest serves, as it serves it. Read from a file rather than from the URL:
# given the URL, schemathesis leaves out the operation that served it (GET /openapi.json).
curl -sf -o "$work/openapi.json" "$api/openapi.json" || fail "GET $api/openapi.json failed"

# The configuration the command line cannot give. The credentials come from the
# environment when schemathesis reads it (${...} is its interpolation, not the shell's).
# Half the generated `realm_uuid`s and `user_id`s are the demo realm's and user's, so
# the answers of a realm that exists (200 DeviceList, FeedbackPage, DryRunAnswer, 202)
# are checked too, not only 404 REALM_NOT_FOUND.
#
# The Status endpoints take `application/x-protobuf` (a `format: binary` string), which
# schemathesis cannot send by itself: the hook sends the generated bytes as they are, as
# it does `application/octet-stream`.
cat > "$work/hooks.py" <<'PY'
import schemathesis

schemathesis.serializer.alias("application/x-protobuf", "application/octet-stream")
PY
cat > "$work/schemathesis.toml" <<TOML
hooks = "$work/hooks.py"

[cache]
enabled = false

[auth]
auto-signup = false

[auth.openapi.basic]
username = "\${CONTRACT_SERVER}"
password = "\${CONTRACT_KEY}"

[dictionaries.demo-realm]
values = ["$realm"]

[dictionaries.demo-user]
values = [10]

[parameters]
"query.realm_uuid" = { dictionary = "demo-realm", probability = 0.5 }
"body.realm_uuid" = { dictionary = "demo-realm", probability = 0.5 }
"query.user_id" = { dictionary = "demo-user", probability = 0.5 }
"body.user_id" = { dictionary = "demo-user", probability = 0.5 }
TOML

checks=not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance
common=(
  --phases examples,coverage,fuzzing,stateful
  --checks "$checks"
  --max-examples "$max_examples"
  --seed "$seed"
  --generation-database none
  --workers "$workers"
  --request-timeout 45
  --output-sanitize true
)

# run NAME UUID KEY SECONDS ARGS...: one schemathesis pass as that server, within SECONDS;
# its exit status (124: the deadline).
run() {
  local name="$1" uuid="$2" secret="$3" seconds="$4"; shift 4
  echo "== schemathesis: $name"
  local rc=0
  CONTRACT_SERVER="$uuid" CONTRACT_KEY="$secret" HYPOTHESIS_STORAGE_DIRECTORY="$work/hypothesis" \
    timeout --signal=INT --kill-after=30 "$seconds" \
    "$st" --config-file "$work/schemathesis.toml" run "$work/openapi.json" --url "$api" "${common[@]}" \
    --report junit,har --report-junit-path "$reports/$name.xml" --report-har-path "$reports/$name.har" \
    "$@" || rc=$?
  return "$rc"
}

started=$(date +%s)
problems=()

# Pass 1: deactivation, alone, as a server registered for it (it must not end the demo
# server's run). The registration needs one of the address's registrations.
throwaway=$(cat /proc/sys/kernel/random/uuid)
throwaway_key=$(head -c 96 /dev/urandom | base64 -w0 | tr -dc 'a-zA-Z0-9' | head -c 64)
status=$(printf '%s' "$throwaway_key" | curl -s -o /dev/null -w '%{http_code}' \
  -X POST "$api/api/v1/remotes/server/register" \
  --data-urlencode "zulip_org_id=$throwaway" --data-urlencode "zulip_org_key@-" \
  --data-urlencode "hostname=contract-${throwaway%%-*}.example.com" \
  --data-urlencode "contact_email=admin@example.com")
if [ "$status" = 200 ]; then
  rc=0
  run deactivate "$throwaway" "$throwaway_key" 120 \
    --include-operation-id zulipDeactivateServer --max-examples 5 || rc=$?
  if [ "$rc" -ne 0 ]; then problems+=("deactivate pass: schemathesis exit $rc"); fi
else
  problems+=("deactivate pass: registering its server got $status (PUSHRELAY_SERVER_REGISTRATIONS_MAX?)")
fi

# Pass 2: everything else, as the demo server. Left out: zulipDeactivateServer (pass 1).
rc=0
run api "$server" "$key" "$deadline" --exclude-operation-id zulipDeactivateServer || rc=$?
if [ "$rc" -eq 124 ]; then
  problems+=("main pass: not done within CONTRACT_DEADLINE=${deadline}s")
elif [ "$rc" -ne 0 ]; then
  problems+=("main pass: schemathesis exit $rc")
fi

# What the runs came to, from their reports: operations, failures, errors, requests, and
# the 429 answers. A limit that was not raised turns answers into 429s, which are
# documented, so such a run would pass having tested little: it fails instead. (The
# registration transfer's verifications are limited per day for the whole relay,
# PUSHRELAY_ZULIP_TRANSFER_VERIFICATIONS_PER_DAY: those 429s are expected.)
summary=$("$py" - "$reports" <<'PY'
import collections, glob, json, os, sys
import xml.etree.ElementTree as ET
reports = sys.argv[1]
tests = failures = errors = 0
for path in glob.glob(os.path.join(reports, "*.xml")):
    for suite in ET.parse(path).getroot().iter("testsuite"):
        # One test case per operation, and one for the stateful scenarios.
        tests += sum(1 for case in suite.iter("testcase") if case.get("name") != "Stateful tests")
        failures += int(suite.get("failures", 0))
        errors += int(suite.get("errors", 0))
requests = 0
limited = collections.Counter()
expected = "/api/v1/remotes/server/register/verify_challenge"
for path in glob.glob(os.path.join(reports, "*.har")):
    try:
        entries = json.load(open(path))["log"]["entries"]
    except (OSError, ValueError, KeyError):
        continue
    requests += len(entries)
    for entry in entries:
        if entry.get("response", {}).get("status") == 429:
            url = entry["request"]["url"].split("?")[0]
            limited["/" + url.split("/", 3)[-1]] += 1
unexpected = sum(n for p, n in limited.items() if p != expected)
for p, n in sorted(limited.items()):
    print(f"429 x{n}: {p}", file=sys.stderr)
print(f"{tests} operations, {failures} failed, {errors} errors, {requests} requests, {sum(limited.values())} answered 429")
sys.exit(3 if unexpected else 0)
PY
) || {
  rc=$?
  [ -n "$summary" ] || summary="no reports"
  if [ "$rc" -eq 3 ]; then
    problems+=("limits not raised: answers were 429 (see above): restart the stack with the settings at the top of $0")
  else
    problems+=("the reports could not be read")
  fi
}

elapsed=$(( $(date +%s) - started ))
if [ ${#problems[@]} -gt 0 ]; then
  printf '  %s\n' "${problems[@]}" >&2
  echo "check-api-contract: FAILED: $summary in ${elapsed}s (reports in $reports)" >&2
  exit 1
fi
echo "check-api-contract: ok: $summary in ${elapsed}s (reports in $reports)"
