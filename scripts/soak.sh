#!/usr/bin/env bash
# The soak (issue 29): a steady rate below capacity for SOAK_MINUTES (default 30), one
# loadgen phase per minute, so each minute prints its own p99 and each process's peak
# RSS; then a verdict on the trend (first third against last third of the minutes).
#   SOAK_MINUTES=30 SOAK_RATE=500 scripts/soak.sh
# A benchmark, not a test: it runs release builds on a private stack, as `make bench`.
set -euo pipefail
cd "$(dirname "$0")/.."
MINUTES="${SOAK_MINUTES:-30}"
RATE="${SOAK_RATE:-500}"
OUT="${SOAK_JSON:-benchmarks/results/soak-latest.json}"
scripts/install-deps.sh
swift build -c release
BIN="$(swift build -c release --show-bin-path)"
phases=(--phases "warm=${RATE}:20")
for m in $(seq 1 "$MINUTES"); do phases+=(--phases "min${m}=${RATE}:60"); done
"$BIN/loadgen" "${phases[@]}" --json "$OUT"
python3 - "$OUT" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
minutes = [p for p in report["phases"] if p["phase"]["name"].startswith("min")]
if len(minutes) < 3:
    sys.exit("soak: fewer than 3 minutes, no trend to judge")
third = max(1, len(minutes) // 3)
def mean(values): return sum(values) / len(values)
print("\nminute  p99 ms  " + "  ".join(f"{p:>10}" for p in sorted(minutes[0]["peakRSSMiB"])))
for p in minutes:
    rss = "  ".join(f"{p['peakRSSMiB'][k]:>10.1f}" for k in sorted(p["peakRSSMiB"]))
    print(f"{p['phase']['name']:>6}  {p['latencyMs']['p99']:>6.0f}  {rss}")
# The verdict is on the relay's four services; the dev broker (memory only, it keeps
# every record) and Redis (the send ledger and delivery status live until their TTLs)
# grow by design.
services = ["ingest", "encryptor", "dispatcher", "feedback"]
verdict = 0
for name in sorted(minutes[0]["peakRSSMiB"]):
    if name not in services:
        first = mean([p["peakRSSMiB"].get(name, 0) for p in minutes[:third]])
        last = mean([p["peakRSSMiB"].get(name, 0) for p in minutes[-third:]])
        print(f"RSS {name}: {first:.1f} -> {last:.1f} MiB (test infrastructure, not judged)")
        continue
    first = mean([p["peakRSSMiB"].get(name, 0) for p in minutes[:third]])
    last = mean([p["peakRSSMiB"].get(name, 0) for p in minutes[-third:]])
    grew = last - first
    flat = grew <= max(8.0, 0.10 * first)
    verdict |= not flat
    print(f"RSS {name}: {first:.1f} -> {last:.1f} MiB ({'flat' if flat else 'GROWING'})")
ledger = [p["ledgerBytesPerPush"] for p in minutes if p.get("ledgerBytesPerPush") is not None]
used = [p["redisBytesPerPush"] for p in minutes if p.get("redisBytesPerPush") is not None]
if ledger:
    print(f"Redis per push: send ledger {mean(ledger):.1f} B, used_memory growth {mean(used):.0f} B (mean of the minutes)")
first = mean([p["latencyMs"]["p99"] for p in minutes[:third]])
last = mean([p["latencyMs"]["p99"] for p in minutes[-third:]])
flat = last <= max(1.5 * first, first + 50)
verdict |= not flat
print(f"p99: {first:.0f} -> {last:.0f} ms ({'flat' if flat else 'GROWING'})")
sys.exit(verdict)
PY
