#!/usr/bin/env bash
# A repeatable cost figure: instructions (callgrind's Ir) per notification per stage.
# For each stage (ingest, encryptor, dispatcher, feedback, or those named), a private
# stack where only that stage runs under `valgrind --tool=callgrind` (instrumentation
# off until the measured window; the others native) gets a fixed set of devices (USERS
# users, an APNs and an FCM device each, like loadgen), a warm-up, then — with
# `callgrind_control -i on` and `-z` just before — NOTIFICATIONS notifications at RATE/s
# (round robin over the users; DEAD of the APNs tokens are made dead at the fake first,
# so feedback has work: each answers 410 once, and the device's later pushes are
# dropped by the encryptor). Once every push has its outcome (the fakes' answers, the
# stages' pushrelay_deliveries_total, feedback's pushrelay_invalidations_total),
# `callgrind_control -d` dumps the counts: Ir / notifications (and / pushes for the
# dispatcher). Instruction counts hardly depend on the machine's load, unlike CPU time.
#
#   scripts/bench-instructions.sh                      # all four stages, builds first
#   NO_BUILD=1 RUNS=2 scripts/bench-instructions.sh dispatcher
#   NOTIFICATIONS=2000 RATE=40 WARMUP=300 USERS=500 DEAD=50 scripts/bench-instructions.sh
# Prints a table (and the spread when RUNS > 1); writes benchmarks/results/instructions-latest.json.
set -euo pipefail
cd "$(dirname "$0")/.."
. benchmarks/peers/setup.sh
. benchmarks/peers/stack.sh

NOTIFICATIONS=${NOTIFICATIONS:-2000}
RATE=${RATE:-40}
WARMUP=${WARMUP:-300}
USERS=${USERS:-500}
DEAD=${DEAD:-50}
RUNS=${RUNS:-1}
# After the window: the stage's instructions over IDLE_SECONDS with no load (consumer
# polls, timers), so the report can give the figure net of what idling costs (0: skip).
IDLE_SECONDS=${IDLE_SECONDS:-10}
OUT=${OUT:-benchmarks/results/instructions-latest.json}
# Swift's runtime and librdkafka start many threads; fair scheduling keeps the ones that
# spin from starving the others under valgrind's one-thread-at-a-time lock.
VALGRIND_FLAGS=${VALGRIND_FLAGS:---tool=callgrind --instr-atstart=no --fair-sched=yes --max-threads=1000 --vgdb=yes}
STAGES=("$@")
[ ${#STAGES[@]} -gt 0 ] || STAGES=(ingest encryptor dispatcher feedback)
for s in "${STAGES[@]}"; do
  case $s in ingest | encryptor | dispatcher | feedback) ;; *) echo "unknown stage: $s" >&2; exit 2 ;; esac
done

bench_install golang-go valgrind binutils gcc libc6-dev
bench_binaries

WORK=$(mktemp -d /tmp/pushrelay-bench-instructions.XXXXXX)
trap 'stack_stop' EXIT
trap 'exit 130' INT TERM
bench_peerbench "$WORK"
# Two things valgrind 3.19 (Debian 12) needs to run Swift binaries: no DWARF 5 debug
# info (its reader gives up on the forms Swift's clang emits: "Possibly corrupted
# debuginfo file"), so the stage runs from a copy with --strip-debug (symbols stay, and
# name the functions in the dumps); and sigsuspend() with a writable mask (the shim).
mkdir -p "$WORK/bin"
for b in ingest encryptor dispatcher feedback devbroker provider-fakes; do ln -sf "$BIN/$b" "$WORK/bin/$b"; done
cc -O2 -shared -fPIC -o "$WORK/sigsuspend-shim.so" benchmarks/peers/sigsuspend-shim.c -ldl
SOURCE_BIN=$BIN
BIN="$WORK/bin"

results=()
for stage in "${STAGES[@]}"; do
  for run in $(seq 1 "$RUNS"); do
    STACK_DIR="$WORK/$stage-$run"
    export STACK_DIR
    unset WRAP_ingest WRAP_encryptor WRAP_dispatcher WRAP_feedback
    if [ -L "$BIN/$stage" ]; then rm "$BIN/$stage"; objcopy --strip-debug "$SOURCE_BIN/$stage" "$BIN/$stage"; fi
    printf -v "WRAP_$stage" '%s' "env LD_PRELOAD=$WORK/sigsuspend-shim.so valgrind $VALGRIND_FLAGS --callgrind-out-file=$WORK/callgrind.$stage-$run.out"
    export "WRAP_$stage"
    stack_log "$stage, run $run: starting a stack with $stage under callgrind in $STACK_DIR"
    stack_start
    pid=$(stack_pid "$stage")
    ctl="callgrind_control"
    stack_log "$stage, run $run: warm-up $WARMUP, then $NOTIFICATIONS notifications at $RATE/s measured"
    "$WORK/peerbench" drive -ingest "$STACK_INGEST_URL" -control "$STACK_CONTROL_URL" \
      -ops-encryptor "$STACK_OPS_ENCRYPTOR" -ops-dispatcher "$STACK_OPS_DISPATCHER" \
      -ops-feedback "$STACK_OPS_FEEDBACK" -users "$USERS" -fcm -rate "$RATE" -warmup "$WARMUP" \
      -n "$NOTIFICATIONS" -dead "$DEAD" -cpu "$stage=$pid" \
      -before "$ctl -i on $pid >/dev/null 2>&1 && $ctl -z $pid >/dev/null 2>&1" \
      -after "$ctl -d $pid >/dev/null 2>&1 && $ctl -i off $pid >/dev/null 2>&1" >"$WORK/$stage-$run.drive.json"
    # The dump requested by -d: the newest part file.
    dump=$(ls -t "$WORK/callgrind.$stage-$run.out".* 2>/dev/null | head -1 || true)
    [ -n "$dump" ] || { echo "no callgrind dump for $stage (see $STACK_DIR/$stage.log)" >&2; exit 1; }
    idle_dump=""
    if [ "$IDLE_SECONDS" -gt 0 ]; then
      $ctl -i on "$pid" >/dev/null 2>&1 && $ctl -z "$pid" >/dev/null 2>&1
      sleep "$IDLE_SECONDS"
      $ctl -d "$pid" >/dev/null 2>&1 && $ctl -i off "$pid" >/dev/null 2>&1
      idle_dump=$(ls -t "$WORK/callgrind.$stage-$run.out".* | head -1)
    fi
    python3 - "$stage" "$run" "$dump" "$WORK/$stage-$run.drive.json" "$idle_dump" "$IDLE_SECONDS" \
      >"$WORK/$stage-$run.json" <<'PY'
import json, sys
stage, run, dump, drive = sys.argv[1], int(sys.argv[2]), sys.argv[3], json.load(open(sys.argv[4]))
idle_dump, idle_seconds = sys.argv[5], float(sys.argv[6])

def ir_of(path):
    events, totals = None, None
    for line in open(path, errors="replace"):
        if line.startswith("events:"):
            events = line.split()[1:]
        elif line.startswith("totals:") or (totals is None and line.startswith("summary:")):
            totals = [int(x) for x in line.split()[1:]]
    return dict(zip(events, totals))["Ir"]

ir = ir_of(dump)
pushes = sum(sum(v.values()) for v in drive["provider_requests"].values())
n = drive["accepted"]
report = {
    "stage": stage, "run": run, "notifications": n, "pushes": pushes,
    "instructions": ir, "instructions_per_notification": ir / max(1, n),
    "instructions_per_push": ir / max(1, pushes), "complete": bool(drive["drained"]) and drive["rejected"] == 0,
    "invalidations": drive["invalidations"], "outcomes": drive["outcomes"], "rate": drive["rate"],
    "dead_tokens": drive["dead_tokens"], "users": drive["users"], "devices_per_user": drive["devices_per_user"],
    "cpu_seconds_under_valgrind": drive["cpu_seconds"].get(stage), "wall_seconds": drive["wall_seconds"],
    "dump": dump,
}
if idle_dump:
    idle_rate = ir_of(idle_dump) / idle_seconds
    net = max(0.0, ir - idle_rate * drive["wall_seconds"])
    report.update({
        "idle_instructions_per_second": idle_rate, "idle_dump": idle_dump,
        "net_instructions_per_notification": net / max(1, n), "net_instructions_per_push": net / max(1, pushes),
    })
print(json.dumps(report))
PY
    results+=("$WORK/$stage-$run.json")
    stack_log "$stage, run $run: $(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print("{:,} Ir, {:,.0f} per notification".format(r["instructions"], r["instructions_per_notification"]))' "$WORK/$stage-$run.json")"
    stack_stop
  done
done
python3 benchmarks/peers/report.py instructions --out "$OUT" "${results[@]}"
stack_log "logs, dumps and raw results in $WORK"
