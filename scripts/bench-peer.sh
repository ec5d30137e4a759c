#!/usr/bin/env bash
# CPU per APNs push, side by side, against ONE APNs fake (provider-fakes: HTTP/2 + TLS,
# checks the ES256 provider token, the headers and the device token):
#   relay     the dispatcher of a private PushRelay stack (release binaries), fed by
#             ingest's native API: APNs-only devices, notifications at a steady rate;
#             CPU = the dispatcher's utime+stime (/proc/PID/stat) over the measured window
#   aioapns   Zulip's APNs sender library (PyPI), token auth, same fake, count, rate, body size
#   go        net/http over HTTP/2 + a cached ES256 JWT + a goroutine per push (gorush/apns2's way)
# Each: a warm-up, then the measured window (RATE pushes/s for SECONDS s), and the
# CPU of its process over that window divided by the pushes sent in it. Every push must
# be answered 200; anything else is an error and shown. Prints a table and writes
# benchmarks/results/peer-latest.json.
#
#   scripts/bench-peer.sh                 # builds release binaries first
#   NO_BUILD=1 scripts/bench-peer.sh      # uses the binaries in $BIN (default .build/release)
#   RATE=400 SECONDS_MEASURED=30 WARMUP_SECONDS=5 USERS=1000 scripts/bench-peer.sh
set -euo pipefail
cd "$(dirname "$0")/.."
. benchmarks/peers/setup.sh
. benchmarks/peers/stack.sh

RATE=${RATE:-400}
SECONDS_MEASURED=${SECONDS_MEASURED:-30}
WARMUP_SECONDS=${WARMUP_SECONDS:-5}
USERS=${USERS:-1000}
OUT=${OUT:-benchmarks/results/peer-latest.json}
N=$((RATE * SECONDS_MEASURED))
WARMUP=$((RATE * WARMUP_SECONDS))

bench_install golang-go
command -v python3 >/dev/null || bench_install python3 python3-pip
bench_pip aioapns
bench_binaries

WORK=$(mktemp -d /tmp/pushrelay-bench-peer.XXXXXX)
STACK_DIR="$WORK/stack"
export STACK_DIR
cleanup() { stack_stop; }
trap cleanup EXIT
trap 'exit 130' INT TERM
bench_peerbench "$WORK"

stack_log "starting a private stack in $STACK_DIR (binaries: $BIN)"
stack_start
set -a; . "$STACK_DIR/fakes/dispatcher.env"; set +a

pids="dispatcher=$(stack_pid dispatcher)"
for p in ingest encryptor feedback provider-fakes devbroker redis; do pids+=",$p=$(stack_pid $p)"; done
stack_log "relay: $USERS APNs devices; warm-up $WARMUP, then $N notifications at $RATE/s"
"$WORK/peerbench" drive -ingest "$STACK_INGEST_URL" -control "$STACK_CONTROL_URL" \
  -ops-encryptor "$STACK_OPS_ENCRYPTOR" -ops-dispatcher "$STACK_OPS_DISPATCHER" -ops-feedback "$STACK_OPS_FEEDBACK" \
  -users "$USERS" -rate "$RATE" -warmup "$WARMUP" -n "$N" -cpu "$pids" >"$WORK/relay.json"
BYTES=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["apns_sample"]["bytes"] or 634)' "$WORK/relay.json")

# The peers talk to the same fake; the rest of the stack is stopped so it does not
# compete for the 2 cores while they run.
stack_stop_some ingest encryptor dispatcher feedback
stack_stop_some devbroker redis

stack_log "aioapns: warm-up $WARMUP, then $N pushes at $RATE/s, $BYTES-byte bodies"
python3 benchmarks/peers/aioapns_sender.py --url "$PUSHRELAY_APNS_URL" --ca "$PUSHRELAY_APNS_CA_FILE" \
  --key "$PUSHRELAY_APNS_KEY_FILE" --key-id "$PUSHRELAY_APNS_KEY_ID" --team-id "$PUSHRELAY_APNS_TEAM_ID" \
  --rate "$RATE" --warmup "$WARMUP" -n "$N" --payload-bytes "$BYTES" --devices "$USERS" \
  >"$WORK/aioapns.json" 2>"$WORK/aioapns.log" || { tail -20 "$WORK/aioapns.log" >&2; exit 1; }

stack_log "go: warm-up $WARMUP, then $N pushes at $RATE/s, $BYTES-byte bodies"
"$WORK/peerbench" apns -url "$PUSHRELAY_APNS_URL" -ca "$PUSHRELAY_APNS_CA_FILE" \
  -key "$PUSHRELAY_APNS_KEY_FILE" -key-id "$PUSHRELAY_APNS_KEY_ID" -team-id "$PUSHRELAY_APNS_TEAM_ID" \
  -rate "$RATE" -warmup "$WARMUP" -n "$N" -payload-bytes "$BYTES" -devices "$USERS" >"$WORK/go.json"

curl -sf "$STACK_CONTROL_URL/stats" >"$WORK/fake-stats.json" || true
python3 benchmarks/peers/report.py peer --relay "$WORK/relay.json" --aioapns "$WORK/aioapns.json" \
  --go "$WORK/go.json" --fake-stats "$WORK/fake-stats.json" --out "$OUT"
stack_log "logs and raw results in $WORK"
