#!/usr/bin/env bash
# CPU per APNs push, side by side, against ONE APNs fake (provider-fakes: HTTP/2 + TLS,
# checks the ES256 provider token, the headers and the device token):
#   relay     the dispatcher of a private PushRelay stack (release binaries), fed by
#             ingest's native API: APNs-only devices, notifications of DEVICES_PER_NOTIFY
#             devices each (all of one user's); CPU = the dispatcher's utime+stime
#             (/proc/PID/stat) over the measured window, and so for every other process
#   aioapns   Zulip's APNs sender library (PyPI), token auth, same fake, count, rate, body size
#   go        net/http over HTTP/2 + a cached ES256 JWT + a goroutine per push (gorush/apns2's way)
# Each: a warm-up, then the measured window, and the CPU of its process over that window
# divided by the pushes sent in it. Paced (RATE > 0, the default 400): RATE pushes/s for
# SECONDS_MEASURED s to USERS (1000) users, DEVICES_PER_NOTIFY (1, a divisor of RATE)
# devices each. Unpaced (RATE=0): PUSHES (20,000) pushes each after WARMUP_PUSHES (2,000),
# as fast as the fake answers (at most 256 pushes in flight for the peers, 64 notify
# requests for the relay), the relay's notifications going to USERS (20) users of
# DEVICES_PER_NOTIFY (100) devices each, as Zulip sends them. Every push must be answered
# 200; anything else is an error and shown. Prints a table, CPU per push by process
# (dispatcher, each service, the four together, broker and Redis, aioapns, Go) with the
# ratios, and writes benchmarks/results/peer-latest.json.
#
#   scripts/bench-peer.sh                 # builds release binaries first
#   NO_BUILD=1 scripts/bench-peer.sh      # uses the binaries in $BIN (default .build/release)
#   RATE=400 SECONDS_MEASURED=30 WARMUP_SECONDS=5 USERS=1000 scripts/bench-peer.sh
#   RATE=0 PUSHES=20000 WARMUP_PUSHES=2000 USERS=20 DEVICES_PER_NOTIFY=100 scripts/bench-peer.sh
set -euo pipefail
cd "$(dirname "$0")/.."
. benchmarks/peers/setup.sh
. benchmarks/peers/stack.sh

RATE=${RATE:-400}
OUT=${OUT:-benchmarks/results/peer-latest.json}
if [ "$RATE" -eq 0 ]; then
  PUSHES=${PUSHES:-20000}
  WARMUP_PUSHES=${WARMUP_PUSHES:-2000}
  USERS=${USERS:-20}
  DEVICES_PER_NOTIFY=${DEVICES_PER_NOTIFY:-100}
  PACE="unpaced"
else
  SECONDS_MEASURED=${SECONDS_MEASURED:-30}
  WARMUP_SECONDS=${WARMUP_SECONDS:-5}
  USERS=${USERS:-1000}
  DEVICES_PER_NOTIFY=${DEVICES_PER_NOTIFY:-1}
  PUSHES=$((RATE * SECONDS_MEASURED))
  WARMUP_PUSHES=$((RATE * WARMUP_SECONDS))
  PACE="at $RATE/s"
fi
if [ $((RATE % DEVICES_PER_NOTIFY)) -ne 0 ]; then
  echo "RATE ($RATE) must be a multiple of DEVICES_PER_NOTIFY ($DEVICES_PER_NOTIFY)" >&2
  exit 2
fi
# The relay is fed notifications, each one push per device of its user; every sender
# sends the same whole number of notifications' worth of pushes.
NOTIFICATIONS=$((PUSHES / DEVICES_PER_NOTIFY))
WARMUP_NOTIFICATIONS=$((WARMUP_PUSHES / DEVICES_PER_NOTIFY))
N=$((NOTIFICATIONS * DEVICES_PER_NOTIFY))
WARMUP=$((WARMUP_NOTIFICATIONS * DEVICES_PER_NOTIFY))
DEVICES=$((USERS * DEVICES_PER_NOTIFY))

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
stack_log "relay: $DEVICES APNs devices ($USERS users × $DEVICES_PER_NOTIFY); warm-up $WARMUP pushes," \
  "then $N pushes $PACE ($NOTIFICATIONS notifications of $DEVICES_PER_NOTIFY devices)"
"$WORK/peerbench" drive -ingest "$STACK_INGEST_URL" -control "$STACK_CONTROL_URL" \
  -ops-encryptor "$STACK_OPS_ENCRYPTOR" -ops-dispatcher "$STACK_OPS_DISPATCHER" -ops-feedback "$STACK_OPS_FEEDBACK" \
  -users "$USERS" -devices-per-user "$DEVICES_PER_NOTIFY" -rate "$((RATE / DEVICES_PER_NOTIFY))" \
  -warmup "$WARMUP_NOTIFICATIONS" -n "$NOTIFICATIONS" -cpu "$pids" >"$WORK/relay.json"
BYTES=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["apns_sample"]["bytes"] or 634)' "$WORK/relay.json")

# The peers talk to the same fake; the rest of the stack is stopped so it does not
# compete for the 2 cores while they run.
stack_stop_some ingest encryptor dispatcher feedback
stack_stop_some devbroker redis

stack_log "aioapns: warm-up $WARMUP, then $N pushes $PACE, $BYTES-byte bodies"
python3 benchmarks/peers/aioapns_sender.py --url "$PUSHRELAY_APNS_URL" --ca "$PUSHRELAY_APNS_CA_FILE" \
  --key "$PUSHRELAY_APNS_KEY_FILE" --key-id "$PUSHRELAY_APNS_KEY_ID" --team-id "$PUSHRELAY_APNS_TEAM_ID" \
  --rate "$RATE" --warmup "$WARMUP" -n "$N" --payload-bytes "$BYTES" --devices "$DEVICES" \
  >"$WORK/aioapns.json" 2>"$WORK/aioapns.log" || { tail -20 "$WORK/aioapns.log" >&2; exit 1; }

stack_log "go: warm-up $WARMUP, then $N pushes $PACE, $BYTES-byte bodies"
"$WORK/peerbench" apns -url "$PUSHRELAY_APNS_URL" -ca "$PUSHRELAY_APNS_CA_FILE" \
  -key "$PUSHRELAY_APNS_KEY_FILE" -key-id "$PUSHRELAY_APNS_KEY_ID" -team-id "$PUSHRELAY_APNS_TEAM_ID" \
  -rate "$RATE" -warmup "$WARMUP" -n "$N" -payload-bytes "$BYTES" -devices "$DEVICES" >"$WORK/go.json"

curl -sf "$STACK_CONTROL_URL/stats" >"$WORK/fake-stats.json" || true
python3 benchmarks/peers/report.py peer --relay "$WORK/relay.json" --aioapns "$WORK/aioapns.json" \
  --go "$WORK/go.json" --fake-stats "$WORK/fake-stats.json" --out "$OUT"
stack_log "logs and raw results in $WORK"
