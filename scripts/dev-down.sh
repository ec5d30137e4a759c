#!/usr/bin/env bash
# Stops what scripts/dev-up.sh started (SIGTERM: each service drains and commits),
# waiting up to 15 s for each to exit.
cd "$(dirname "$0")/.."
pids=()
for pidfile in .run/pids/*.pid; do
  [ -f "$pidfile" ] || continue
  pid=$(cat "$pidfile")
  kill "$pid" 2>/dev/null && pids+=("$pid")
  rm -f "$pidfile"
done
for pid in "${pids[@]}"; do
  for _ in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
done
