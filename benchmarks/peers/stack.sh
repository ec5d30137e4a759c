# Sourced by scripts/bench-peer.sh and scripts/bench-instructions.sh: a private PushRelay
# stack (Redis, dev broker, provider fakes, the four services) started from prebuilt
# binaries on free loopback ports in a directory of its own, the way dev-up.sh and
# Dev/DevStack/Stack.swift start one. Any stage can run under a wrapper command
# (valgrind). Nothing here touches .run/ or the ports of `make up`.
#
#   STACK_DIR=/tmp/x BIN=.build/release stack_start     # WRAP_<stage>="valgrind ..." optional
#   stack_pid dispatcher; stack_port ingest; ...
#   stack_stop
#
# After stack_start: STACK_INGEST_URL, STACK_CONTROL_URL (fakes' control API),
# STACK_APNS_URL, STACK_OPS_<STAGE> (health/metrics URL of each stage), and the fakes'
# dispatcher.env (APNs key, team, key id, URL, CA) in $STACK_DIR/fakes/dispatcher.env.

stack_free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

stack_log() { echo "[$(date +%H:%M:%S)] $*" >&2; }

stack_wait_for() { # description, seconds, command[, name of the process that must stay up]
  local what=$1 seconds=$2 cmd=$3 watched=${4:-} i pid
  for i in $(seq 1 $((seconds * 5))); do
    eval "$cmd" >/dev/null 2>&1 && return 0
    if [ -n "$watched" ]; then
      pid=$(stack_pid "$watched")
      if [ -z "$pid" ] || ! kill -0 "$pid" 2>/dev/null; then
        stack_log "$watched exited while waiting for $what; the end of $STACK_DIR/$watched.log:"
        tail -15 "$STACK_DIR/$watched.log" >&2
        return 1
      fi
    fi
    sleep 0.2
  done
  stack_log "timed out waiting for $what (logs in $STACK_DIR)"
  return 1
}

stack_launch() { # name, command...
  local name=$1; shift
  PUSHRELAY_EXIT_WITH_PARENT=1 nohup "$@" >"$STACK_DIR/$name.log" 2>&1 &
  echo $! >"$STACK_DIR/pids/$name"
  disown
}

stack_pid() { cat "$STACK_DIR/pids/$1" 2>/dev/null; }

stack_start() {
  : "${STACK_DIR:?}" "${BIN:?}"
  STACK_PARTITIONS=${STACK_PARTITIONS:-6}
  rm -rf "$STACK_DIR"; mkdir -p "$STACK_DIR/pids" "$STACK_DIR/redis"
  local redis_port; redis_port=$(stack_free_port)
  stack_launch redis redis-server --port "$redis_port" --bind 127.0.0.1 --dir "$STACK_DIR/redis" \
    --appendonly yes --appendfsync everysec --save "" --daemonize no
  stack_wait_for redis 20 "redis-cli -p $redis_port ping | grep -q PONG" || return 1

  PUSHRELAY_KAFKA_BROKERS_FILE="$STACK_DIR/kafka-bootstrap" PUSHRELAY_DEVBROKER_PARTITIONS=$STACK_PARTITIONS \
    stack_launch devbroker "$BIN/devbroker"
  stack_wait_for "the dev broker" 30 "test -s $STACK_DIR/kafka-bootstrap" || return 1

  local apns fcm control push
  apns=$(stack_free_port); fcm=$(stack_free_port); control=$(stack_free_port); push=$(stack_free_port)
  PUSHRELAY_FAKES_DIR="$STACK_DIR/fakes" PUSHRELAY_FAKES_APNS_PORT=$apns PUSHRELAY_FAKES_FCM_PORT=$fcm \
    PUSHRELAY_FAKES_CONTROL_PORT=$control PUSHRELAY_FAKES_PUSH_PORT=$push PUSHRELAY_FAKES_MAX_RECORDED=1000 \
    stack_launch provider-fakes "$BIN/provider-fakes"
  STACK_CONTROL_URL="http://127.0.0.1:$control"
  STACK_APNS_URL="https://localhost:$apns"
  stack_wait_for "the provider fakes" 30 "curl -sf $STACK_CONTROL_URL/health" provider-fakes || return 1

  # Secrets, in the formats dev-up.sh writes.
  echo "bench1:$(head -c 32 /dev/urandom | base64 -w0)" >"$STACK_DIR/pipeline-keys"
  echo "bench1:$(head -c 32 /dev/urandom | base64 -w0)" >"$STACK_DIR/storage-keys"
  head -c 32 /dev/urandom | base64 -w0 >"$STACK_DIR/bouncer-keys"
  head -c 32 /dev/urandom | base64 -w0 >"$STACK_DIR/apikey-pepper"
  head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$STACK_DIR/status-key"
  chmod 600 "$STACK_DIR"/*-keys "$STACK_DIR/apikey-pepper" "$STACK_DIR/status-key"

  local ingest_port ops_port stage port
  ingest_port=$(stack_free_port); ops_port=$(stack_free_port)
  STACK_INGEST_URL="http://127.0.0.1:$ingest_port"
  STACK_OPS_INGEST="http://127.0.0.1:$ops_port"
  for stage in encryptor dispatcher feedback; do
    port=$(stack_free_port)
    printf -v "STACK_OPS_${stage^^}" '%s' "http://127.0.0.1:$port"
    printf -v "STACK_PORT_${stage^^}" '%s' "$port"
  done
  STACK_PORT_INGEST=$ingest_port

  for stage in ingest encryptor dispatcher feedback; do
    local wrap_var="WRAP_${stage}" port_var="STACK_PORT_${stage^^}" line
    local envs=(
      PUSHRELAY_KAFKA_BROKERS_FILE="$STACK_DIR/kafka-bootstrap"
      PUSHRELAY_REDIS_PORT="$redis_port"
      PUSHRELAY_HTTP_PORT="${!port_var}"
      PUSHRELAY_PIPELINE_KEYS_FILE="$STACK_DIR/pipeline-keys"
      PUSHRELAY_BOUNCER_KEYS_FILE="$STACK_DIR/bouncer-keys"
      PUSHRELAY_STORAGE_KEYS_FILE="$STACK_DIR/storage-keys"
      PUSHRELAY_APIKEY_PEPPER_FILE="$STACK_DIR/apikey-pepper"
      # One client address registers every server and device of a benchmark: lift the
      # per-address and per-server limits, as loadgen does.
      PUSHRELAY_RATELIMIT_REQUESTS=1000000000
      PUSHRELAY_AUTH_FAILURES_MAX=1000000 PUSHRELAY_SERVER_REGISTRATIONS_MAX=1000000
      PUSHRELAY_STATUS_REQUESTS_MAX=1000000
    )
    if [ "$stage" = ingest ]; then
      envs+=(PUSHRELAY_OPS_PORT="$ops_port" PUSHRELAY_STATUS_ENABLED=true
        PUSHRELAY_STATUS_KEY_FILE="$STACK_DIR/status-key"
        PUSHRELAY_STATUS_APNS_TOPICS=org.zulip.Zulip PUSHRELAY_GORUSH_APNS_TOPIC=org.zulip.Zulip)
    fi
    if [ "$stage" = dispatcher ]; then
      while IFS= read -r line; do [ -n "$line" ] && envs+=("$line"); done <"$STACK_DIR/fakes/dispatcher.env"
    fi
    # shellcheck disable=SC2206
    envs+=(${STACK_ENV:-})
    # shellcheck disable=SC2086
    stack_launch "$stage" env "${envs[@]}" ${!wrap_var:-} "$BIN/$stage"
  done
  for stage in ingest encryptor dispatcher feedback; do
    local ops_var="STACK_OPS_${stage^^}" wrap_var="WRAP_${stage}" limit=60
    [ -n "${!wrap_var:-}" ] && limit=600
    stack_wait_for "$stage to be ready" "$limit" "curl -sf ${!ops_var}/health/ready" "$stage" || return 1
  done
  for stage in encryptor dispatcher feedback; do
    local wrap_var="WRAP_${stage}" limit=60
    [ -n "${!wrap_var:-}" ] && limit=600
    stack_wait_for "$stage to join its consumer group" "$limit" \
      "grep -q 'partitions assigned' $STACK_DIR/$stage.log" "$stage" || return 1
  done
}

# Stops what stack_start started (by the pids it recorded): services first, gracefully.
stack_stop() {
  [ -n "${STACK_DIR:-}" ] && [ -d "$STACK_DIR/pids" ] || return 0
  stack_stop_some ingest encryptor dispatcher feedback
  stack_stop_some provider-fakes devbroker redis
  rm -rf "$STACK_DIR/pids"
  return 0
}

# Stops some processes of the stack by name (SIGTERM, then SIGKILL after 10 s).
stack_stop_some() {
  local name pid pids=()
  for name in "$@"; do
    pid=$(stack_pid "$name") || continue
    [ -n "$pid" ] || continue
    kill "$pid" 2>/dev/null || true; pids+=("$pid"); rm -f "$STACK_DIR/pids/$name"
  done
  for _ in $(seq 1 50); do
    local alive=0
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && break
    sleep 0.2
  done
  for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  return 0
}
