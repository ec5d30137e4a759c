#!/usr/bin/env bash
# Starts the whole pipeline on embedded defaults: Redis (AOF), the dev Kafka broker,
# the APNs/FCM fakes, ingest, encryptor, dispatcher and feedback; then creates a demo
# server, realm and two devices, and prints how to send a notification.
# Everything lives under .run/; `make down` (scripts/dev-down.sh) stops it.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
CONFIG="${CONFIG:-debug}"
swift build -c "$CONFIG"
BIN="$(swift build -c "$CONFIG" --show-bin-path)"

RUN=.run
mkdir -p "$RUN/logs" "$RUN/pids" "$RUN/redis" "$RUN/demo"
scripts/dev-down.sh >/dev/null 2>&1 || true

REDIS_PORT="${PUSHRELAY_REDIS_PORT:-6390}"
INGEST_PORT="${PUSHRELAY_INGEST_PORT:-8080}"
export PUSHRELAY_REDIS_PORT="$REDIS_PORT"
export PUSHRELAY_KAFKA_BROKERS_FILE="$RUN/kafka-bootstrap"
export PUSHRELAY_PIPELINE_KEYS_FILE="$RUN/pipeline-keys"
export PUSHRELAY_BOUNCER_KEYS_FILE="$RUN/bouncer-keys"
export PUSHRELAY_STORAGE_KEYS_FILE="$RUN/storage-keys"
export PUSHRELAY_APIKEY_PEPPER_FILE="$RUN/apikey-pepper"

# Secrets the relay needs, generated once: the pipeline key (seals plaintext and tokens
# on the topics), the bouncer X25519 key realms seal registrations to, the storage key
# (tokens and push keys in Redis) and the API key pepper.
[ -s "$RUN/pipeline-keys" ] || { echo "dev1:$(head -c 32 /dev/urandom | base64)" > "$RUN/pipeline-keys"; chmod 600 "$RUN/pipeline-keys"; }
[ -s "$RUN/bouncer-keys" ] || { head -c 32 /dev/urandom | base64 > "$RUN/bouncer-keys"; chmod 600 "$RUN/bouncer-keys"; }
[ -s "$RUN/storage-keys" ] || { echo "dev1:$(head -c 32 /dev/urandom | base64)" > "$RUN/storage-keys"; chmod 600 "$RUN/storage-keys"; }
[ -s "$RUN/apikey-pepper" ] || { head -c 32 /dev/urandom | base64 > "$RUN/apikey-pepper"; chmod 600 "$RUN/apikey-pepper"; }
# The Status push server's secp256k1 identity (32 random bytes, hex), and gorush's API
# default APNs topic: the demo app's bundle id.
[ -s "$RUN/status-key" ] || { head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$RUN/status-key"; chmod 600 "$RUN/status-key"; }
export PUSHRELAY_STATUS_ENABLED=true PUSHRELAY_STATUS_KEY_FILE="$RUN/status-key"
export PUSHRELAY_STATUS_APNS_TOPICS=org.zulip.Zulip PUSHRELAY_GORUSH_APNS_TOPIC=org.zulip.Zulip
# Status clients also reach the push server over Waku: the fakes run a Waku node's REST API on 8645.
export PUSHRELAY_STATUS_WAKU_URL=http://127.0.0.1:8645

start() { # name, command...
  local name=$1; shift
  nohup "$@" >"$RUN/logs/$name.log" 2>&1 &
  echo $! >"$RUN/pids/$name.pid"
}
wait_for() { # description, command
  for _ in $(seq 1 300); do eval "$2" >/dev/null 2>&1 && return 0; sleep 0.2; done
  echo "timed out waiting for $1 (see $RUN/logs)" >&2; exit 1
}

start redis "$(command -v redis-server || echo /usr/bin/redis-server)" --port "$REDIS_PORT" --bind 127.0.0.1 \
  --dir "$PWD/$RUN/redis" --appendonly yes --save ""
wait_for redis "redis-cli -p $REDIS_PORT ping"
rm -f "$RUN/kafka-bootstrap"
start devbroker "$BIN/devbroker"
wait_for "the dev broker" "test -s $RUN/kafka-bootstrap"
start provider-fakes env PUSHRELAY_FAKES_DIR="$RUN/fakes" "$BIN/provider-fakes"
wait_for "the provider fakes" "curl -sf http://127.0.0.1:8445/health"

set -a; . "$RUN/fakes/dispatcher.env"; set +a
OPS_PORT="${PUSHRELAY_OPS_PORT:-9080}"
PUSHRELAY_HTTP_PORT=$INGEST_PORT PUSHRELAY_OPS_PORT=$OPS_PORT start ingest "$BIN/ingest"
PUSHRELAY_HTTP_PORT=8081 start encryptor "$BIN/encryptor"
PUSHRELAY_HTTP_PORT=8082 start dispatcher "$BIN/dispatcher"
PUSHRELAY_HTTP_PORT=8083 start feedback "$BIN/feedback"
for port in "$OPS_PORT" 8081 8082 8083; do
  wait_for "the service on :$port" "curl -sf http://127.0.0.1:$port/health/ready"
done
# The first consumer-group join takes a few seconds on the dev broker.
for stage in encryptor dispatcher feedback; do
  wait_for "$stage to join its consumer group" "grep -q 'partitions assigned' $RUN/logs/$stage.log"
done

# Demo realm host: a server, a realm, and one APNs and one FCM device with a push key.
API="http://127.0.0.1:$INGEST_PORT"
SERVER=$(cat /proc/sys/kernel/random/uuid)
KEY=$(head -c 96 /dev/urandom | base64 -w0 | tr -dc 'a-zA-Z0-9' | head -c 64)
REALM=$(cat /proc/sys/kernel/random/uuid)
PUSH_KEY=$( (printf '\x31'; head -c 32 /dev/urandom) | base64 -w0)
APNS_TOKEN=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
FCM_TOKEN="demo-fcm-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')"
echo "$PUSH_KEY" > "$RUN/demo/push-key"
curl -sf -X POST "$API/api/v1/remotes/server/register" \
  -d "zulip_org_id=$SERVER&zulip_org_key=$KEY&hostname=demo.example.com&contact_email=admin%40demo.example.com" >/dev/null
curl -sf -u "$SERVER:$KEY" -H 'content-type: application/json' -X POST "$API/v1/realms" \
  -d "{\"realm_uuid\":\"$REALM\"}" >/dev/null
for device in "\"token_kind\":\"apns\",\"token\":\"$APNS_TOKEN\",\"ios_app_id\":\"org.zulip.Zulip\"" \
              "\"token_kind\":\"fcm\",\"token\":\"$FCM_TOKEN\""; do
  curl -sf -u "$SERVER:$KEY" -H 'content-type: application/json' -X POST "$API/v1/devices" \
    -d "{\"realm_uuid\":\"$REALM\",\"user_id\":10,$device,\"push_key\":\"$PUSH_KEY\",\"push_key_id\":1}" >/dev/null
done
cat > "$RUN/demo/env" <<ENV
SERVER=$SERVER
KEY=$KEY
REALM=$REALM
APNS_TOKEN=$APNS_TOKEN
FCM_TOKEN=$FCM_TOKEN
ENV

# The operator tool's settings for this stack (file paths and ports, no secret values):
# `set -a; . .run/env; set +a`, then `pushrelay …` (its key: PUSHRELAY_API_KEY=$KEY).
cat > "$RUN/env" <<ENV
PUSHRELAY_REDIS_PORT=$REDIS_PORT
PUSHRELAY_KAFKA_BROKERS_FILE=$PWD/$RUN/kafka-bootstrap
PUSHRELAY_PIPELINE_KEYS_FILE=$PWD/$RUN/pipeline-keys
PUSHRELAY_STORAGE_KEYS_FILE=$PWD/$RUN/storage-keys
PUSHRELAY_APIKEY_PEPPER_FILE=$PWD/$RUN/apikey-pepper
PUSHRELAY_API_URL=$API
PUSHRELAY_TOPIC_PARTITIONS=${PUSHRELAY_DEVBROKER_PARTITIONS:-6}
ENV

cat <<TXT

PushRelay is running (logs in $RUN/logs, stop with: make down).
  API (ingest):   $API        health/metrics (ops, loopback) on :$OPS_PORT, :8081, :8082, :8083
  Kafka (dev):    $(cat "$RUN/kafka-bootstrap")   Redis: 127.0.0.1:$REDIS_PORT
  Provider fakes: APNs https://localhost:8443, FCM https://localhost:8444, control http://127.0.0.1:8445

Send a notification to the demo user's two devices:

  curl -s -u '$SERVER:$KEY' -H 'content-type: application/json' $API/v1/notify -d '{"realm_uuid":"$REALM","user_id":10,"payload":{"type":"test","realm_url":"https://chat.example.com","realm_name":"Demo","user_id":10,"time":$(date +%s)}}'

Then see what each phone received, decrypted with its push key:

  $BIN/demo-device http://127.0.0.1:8445 $APNS_TOKEN $RUN/demo/push-key
  $BIN/demo-device http://127.0.0.1:8445 $FCM_TOKEN $RUN/demo/push-key

Or send a test through the pipeline and wait for each device's outcome, then trace it:

  set -a; . $RUN/env; set +a
  PUSHRELAY_API_KEY=\$(sed -n 's/^KEY=//p' $RUN/demo/env) $BIN/pushrelay send-test --server $SERVER --realm $REALM --user 10 --wait
  $BIN/pushrelay trace <notification id>

Or be a Status app over Waku (registration, query, notification, through the fake node on :8645):

  $BIN/demo-device status-waku http://127.0.0.1:8645 \$(curl -s $API/status/v1/server | sed 's/.*"public_key":"\([0-9a-f]*\)".*/\1/') org.zulip.Zulip
TXT
