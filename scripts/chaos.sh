#!/usr/bin/env bash
# The chaos run: three replicas in one group consume a mix of order batches
# (about 25 % retries, 2 % key reuse, 2 % clashes, 1 % invalid) while
#   * a killer sends kill -9 to a random replica every 1-3 s (it restarts),
#   * MariaDB is stopped for 12 s and started again,
#   * the Kafka broker is stopped and started again,
#   * the group is scaled 3 -> 1 -> 3.
# Then ow-verify checks invariants I1-I8 from the topics, the database and
# the committed offsets and prints the figures. Bounded to 6 minutes; starts
# and stops its own MariaDB and Kafka (under .run/chaos). Exit 0 only if
# every invariant holds.
#
#   scripts/chaos.sh                 (after a build; scripts/test.sh runs it)
#   OW_CHAOS_MESSAGES=20000 OW_CHAOS_PARTITIONS=6
#   OW_CHAOS_SHARDS=3                the sharded variant: three MariaDB
#                                    shards (.run/chaos/db1, db2 beside the first);
#                                    instead of the database outage, shard 1 is
#                                    killed (kill -9) for 12 s; ow-verify checks
#                                    across the shards
#   OW_CHAOS_BROKERS=3               (the default) on three brokers
#                                    (scripts/kafka-cluster.sh: replication 3, min
#                                    ISR 2): before the outage of every broker, the
#                                    one leading the most partitions is killed
#                                    (kill -9) for 12 s
#   OW_CHAOS_BROKERS=1               on one broker, restarted for the outage
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${OW_BUILD_DIR:-$ROOT/build}"
BIN="$BUILD/order-worker"
KIT="$BUILD/ow-kit"
N="${OW_CHAOS_MESSAGES:-20000}"
PARTS="${OW_CHAOS_PARTITIONS:-6}"
LIMIT_S=360
SHARDED="${OW_CHAOS_SHARDS:-0}"
[[ $SHARDED == 0 || $SHARDED == 3 ]] || { echo "chaos: OW_CHAOS_SHARDS must be 3 (or unset)" >&2; exit 2; }
BROKERS="${OW_CHAOS_BROKERS:-3}"
[[ $BROKERS == 1 || $BROKERS == 3 ]] || { echo "chaos: OW_CHAOS_BROKERS must be 1 or 3" >&2; exit 2; }
# The generation spans every fault (the cluster's take 30 s more), so that
# each recovery is measured under load.
GEN_S=60
if ((BROKERS == 3)); then export OW_KAFKA_BROKERS=3; GEN_S=100; fi
export OW_RUN_DIR="$ROOT/.run/chaos"
RUN="$OW_RUN_DIR"
FAULTS="$RUN/faults.log"
T_START=$SECONDS

say() { printf 'chaos: [%3ds] %s\n' "$((SECONDS - T_START))" "$*"; }
now_ms() { date +%s%3N; }
fault() { echo "$1 $(now_ms) ${2:-}" >>"$FAULTS"; }
left() { echo $((LIMIT_S - (SECONDS - T_START))); }

for f in "$BIN" "$KIT" "$BUILD/ow-verify"; do
  [[ -x $f ]] || { echo "chaos: $f not built (run scripts/test.sh or cmake --build build)" >&2; exit 2; }
done

cleanup() {
  set +e
  for i in 1 2 3; do rm -f "$RUN/replica-$i.enabled"; done
  for pidf in "$RUN"/replica-*.pid; do [[ -f $pidf ]] && kill -9 "$(cat "$pidf")" 2>/dev/null; done
  [[ -n ${KILLER_PID:-} ]] && kill "$KILLER_PID" 2>/dev/null
  [[ -n ${GEN_PID:-} ]] && kill "$GEN_PID" 2>/dev/null
  wait 2>/dev/null
  "$ROOT/scripts/services.sh" stop all >/dev/null 2>&1
  if ((SHARDED)); then shard_svc 1 stop all >/dev/null 2>&1; shard_svc 2 stop all >/dev/null 2>&1; fi
}
# (services.env, sourced below, exports OW_MYSQL_PORT, which would force the port.)
shard_svc() {
  env -u OW_MYSQL_PORT -u OW_KAFKA_PORT -u OW_KAFKA_CONTROLLER_PORT OW_RUN_DIR="$RUN/db$1" OW_BUILD_DIR="$BUILD" "$ROOT/scripts/services.sh" "${@:2}"
}
trap cleanup EXIT

mkdir -p "$RUN"
rm -f "$RUN"/replica-* "$FAULTS" "$RUN"/worker-*.log "$RUN/exits.log"
OW_BUILD_DIR="$BUILD" "$ROOT/scripts/services.sh" start all
# shellcheck disable=SC1091
source "$RUN/services.env"
say "broker: $OW_KAFKA_VERSION ($OW_BROKER_KIND) on $OW_KAFKA_BOOTSTRAP; MariaDB $OW_MARIADB_VERSION on :$OW_MYSQL_PORT"

DB=chaos
PASSWORD="c-$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')"
mysql_root() { mariadb --protocol=tcp -h127.0.0.1 -P"$OW_MYSQL_PORT" -uroot "$@"; }
SHARD_PORTS=("$OW_MYSQL_PORT")
export ORDER_WORKER_MYSQL_SHARDS=""
VERIFY_SHARDS=()
if ((SHARDED)); then
  for i in 1 2; do
    mkdir -p "$RUN/db$i"
    shard_svc "$i" start mariadb >/dev/null
    SHARD_PORTS+=("$(sed -n 's/^export OW_MYSQL_PORT=//p' "$RUN/db$i/services.env")")
  done
  ORDER_WORKER_MYSQL_SHARDS="127.0.0.1:${SHARD_PORTS[0]}/$DB,127.0.0.1:${SHARD_PORTS[1]}/$DB,127.0.0.1:${SHARD_PORTS[2]}/$DB"
  VERIFY_SHARDS=(--shards "$ORDER_WORKER_MYSQL_SHARDS")
  say "sharded variant: MariaDB shards on :${SHARD_PORTS[0]} :${SHARD_PORTS[1]} :${SHARD_PORTS[2]}"
fi
for port in "${SHARD_PORTS[@]}"; do
  mariadb --protocol=tcp -h127.0.0.1 -P"$port" -uroot -e "CREATE DATABASE $DB"
done
ORDER_WORKER_MYSQL_USER=root ORDER_WORKER_MYSQL_PORT="$OW_MYSQL_PORT" ORDER_WORKER_MYSQL_DATABASE=$DB \
  "$BIN" migrate >/dev/null
for port in "${SHARD_PORTS[@]}"; do
  mariadb --protocol=tcp -h127.0.0.1 -P"$port" -uroot \
    -e "SET @worker_user='ow_worker', @worker_host='%', @worker_password='$PASSWORD',
        @worker_database='$DB'; SOURCE $ROOT/sql/worker_user.sql;"
done
IN=chaos-in OUT=chaos-out DLQ=chaos-dlq GROUP=chaos-group
"$KIT" create-topic "$OW_KAFKA_BOOTSTRAP" $IN "$PARTS"
"$KIT" create-topic "$OW_KAFKA_BOOTSTRAP" $OUT "$PARTS"
"$KIT" create-topic "$OW_KAFKA_BOOTSTRAP" $DLQ 1

# The worker runs with the defaults, as the least-privilege user, with
# timeouts short enough for a six-minute run.
export ORDER_WORKER_KAFKA_BOOTSTRAP_SERVERS="$OW_KAFKA_BOOTSTRAP" ORDER_WORKER_KAFKA_GROUP_ID=$GROUP \
  ORDER_WORKER_TOPIC_INPUT=$IN ORDER_WORKER_TOPIC_RESULTS=$OUT ORDER_WORKER_TOPIC_DLQ=$DLQ \
  ORDER_WORKER_MYSQL_HOST=127.0.0.1 ORDER_WORKER_MYSQL_PORT="$OW_MYSQL_PORT" \
  ORDER_WORKER_MYSQL_USER=ow_worker ORDER_WORKER_MYSQL_DATABASE=$DB \
  ORDER_WORKER_KAFKA_CONSUMER_SESSION_TIMEOUT_MS=3000 ORDER_WORKER_KAFKA_CONSUMER_HEARTBEAT_INTERVAL_MS=500 \
  ORDER_WORKER_COMMIT_INTERVAL_MS=500 ORDER_WORKER_REQUEST_IN_PROGRESS_WAIT_S=2 \
  ORDER_WORKER_RETRY_BACKOFF_MAX_MS=2000 ORDER_WORKER_SHUTDOWN_TIMEOUT_MS=5000 \
  ORDER_WORKER_REBALANCE_DRAIN_TIMEOUT_MS=2000
printf '%s\n' "$PASSWORD" >"$RUN/worker.password"
chmod 600 "$RUN/worker.password"
export ORDER_WORKER_MYSQL_PASSWORD_FILE="$RUN/worker.password"

# A supervisor per replica: restarts it whenever it dies, until disabled.
supervise() {  # INDEX
  local i=$1 pid status
  while [[ -f $RUN/replica-$i.enabled ]]; do
    "$BIN" run 2>>"$RUN/worker-$i.log" &
    pid=$!
    echo "$pid" >"$RUN/replica-$i.pid"
    # A stop_replica between the loop's check and the pid file found no
    # pid to signal (seen: a scale-up at 70 s, caught up and stopped in
    # the same second): stop the replica here, as it would have.
    [[ -f $RUN/replica-$i.enabled ]] || kill -TERM "$pid" 2>/dev/null || true
    set +e; { wait "$pid"; } 2>/dev/null; status=$?; set -e
    echo "replica $i pid $pid exit $status" >>"$RUN/exits.log"
    rm -f "$RUN/replica-$i.pid"
    if [[ -f $RUN/replica-$i.enabled ]]; then
      sleep 0.3
      fault restart "$i"
    fi
  done
}
start_replica() { touch "$RUN/replica-$1.enabled"; supervise "$1" & }
stop_replica() {  # INDEX: a clean stop (SIGTERM), as an operator scales down
  rm -f "$RUN/replica-$1.enabled"
  [[ -f $RUN/replica-$1.pid ]] && kill -TERM "$(cat "$RUN/replica-$1.pid")" 2>/dev/null || true
}

killer() {  # SECONDS
  local until=$((SECONDS + $1)) victims pid
  while ((SECONDS < until)); do
    sleep "$((1 + RANDOM % 3))"
    mapfile -t victims < <(ls "$RUN"/replica-*.pid 2>/dev/null || true)
    ((${#victims[@]} > 0)) || continue
    pid="$(cat "${victims[RANDOM % ${#victims[@]}]}" 2>/dev/null || true)"
    [[ -n $pid ]] && kill -9 "$pid" 2>/dev/null && fault kill "$pid"
  done
}

for i in 1 2 3; do start_replica "$i"; done
say "3 replicas started; producing $N messages over about $GEN_S s"
"$KIT" gen "$OW_KAFKA_BOOTSTRAP" $IN "$N" --rate $((N / GEN_S + 1)) --seed 20261130 \
  --retry 25 --reuse 2 --clash 2 --invalid 1 --items 10 --prefix chaos 2>"$RUN/gen.log" &
GEN_PID=$!
sleep 5
killer 45 &
KILLER_PID=$!
say "killer running for 45 s"
sleep 10
if ((SHARDED)); then
  say "killing shard 1's MariaDB (kill -9) for 12 s"
  kill -9 "$(cat "$RUN/db1/mariadb.pid")"
  fault shard-down 1
  fault mariadb-down
  sleep 12
  shard_svc 1 mariadb-up >/dev/null
  fault mariadb-up
  fault shard-up 1
  say "shard 1 is back"
else
say "stopping MariaDB for 12 s"
fault mariadb-down
"$ROOT/scripts/services.sh" mariadb-down >/dev/null
sleep 12
"$ROOT/scripts/services.sh" mariadb-up >/dev/null
fault mariadb-up
say "MariaDB is back"
fi
sleep 8
if ((BROKERS == 3)); then
  # Leaders, and perhaps the group's coordinator, move to the other two;
  # produce with acks=all goes on with two in-sync replicas.
  node="$("$ROOT/scripts/kafka-cluster.sh" most-leaders)"
  say "killing broker $node (it leads the most partitions) for 12 s"
  "$ROOT/scripts/kafka-cluster.sh" kill "$node" >/dev/null
  fault broker-kill "$node"
  sleep 12
  "$ROOT/scripts/kafka-cluster.sh" restart "$node" >/dev/null
  fault broker-up "$node"
  "$ROOT/scripts/kafka-cluster.sh" wait-isr 60 >/dev/null
  say "broker $node is back, every partition with 3 in-sync replicas"
fi
say "stopping the Kafka broker$( ((BROKERS == 3)) && echo 's, all three')"
fault kafka-down
"$ROOT/scripts/services.sh" kafka-down >/dev/null
sleep 5
"$ROOT/scripts/services.sh" kafka-up >/dev/null
fault kafka-up
say "Kafka is back"
wait "$KILLER_PID" || true
KILLER_PID=""
say "scaling 3 -> 1"
fault scale-down
stop_replica 2
stop_replica 3
sleep 12
say "scaling 1 -> 3"
start_replica 2
start_replica 3
fault scale-up
wait "$GEN_PID" || { cat "$RUN/gen.log" >&2; say "the generator failed"; exit 1; }
GEN_PID=""
say "$(tail -n1 "$RUN/gen.log")"

say "waiting for the group to catch up (limit $(left) s)"
while ! "$KIT" lag "$OW_KAFKA_BOOTSTRAP" $GROUP $IN >"$RUN/lag.log" 2>&1; do
  if (($(left) < 40)); then
    cat "$RUN/lag.log"
    say "did not catch up within the time limit"
    exit 1
  fi
  sleep 3
done
say "caught up: $(tail -n1 "$RUN/lag.log")"
for i in 1 2 3; do stop_replica "$i"; done
# Every replica must stop within 30 s of SIGTERM; one that hangs is killed
# and fails the run.
for _ in $(seq 60); do
  ls "$RUN"/replica-*.pid >/dev/null 2>&1 || break
  sleep 0.5
done
hung=0
for pidf in "$RUN"/replica-*.pid; do
  [[ -f $pidf ]] || continue
  hung=$((hung + 1))
  say "replica ${pidf##*/} did not stop within 30 s of SIGTERM"
  kill -9 "$(cat "$pidf")" 2>/dev/null || true
done
wait
kills=$(grep -c '^kill ' "$FAULTS" || true)
unexpected=$(grep -vE 'exit (0|137)$' "$RUN/exits.log" || true)
clean=$(grep -cE 'exit 0$' "$RUN/exits.log" || true)
say "replica exits: $clean clean (SIGTERM), $kills killed; unexpected: ${unexpected:-none}"
# kill -9 of a process that was just starting may be caught before exec; only
# statuses other than 0 (SIGTERM) and 137 (SIGKILL) are unexpected.
"$BUILD/ow-verify" --bootstrap "$OW_KAFKA_BOOTSTRAP" --group $GROUP --input $IN --results $OUT \
  --dlq $DLQ --mysql-port "$OW_MYSQL_PORT" --database $DB --faults "$FAULTS" "${VERIFY_SHARDS[@]}" |
  tee "$RUN/verify.log"
status=${PIPESTATUS[0]}

# The verifier must be able to fail: tamper with the outcome in three ways
# and expect each to be reported.
say "verifier self-check: tampering with the results must be detected"
mysql_root $DB -e "UPDATE idempotency_requests SET response_body = CONCAT(response_body, ' ')
                   WHERE status = 'SUCCEEDED' ORDER BY id LIMIT 1;
                   UPDATE orders SET request_id = (SELECT id FROM idempotency_requests
                   WHERE status = 'FAILED' ORDER BY id LIMIT 1) ORDER BY id LIMIT 1;"
printf '{"user_id":1,"orders":[{"external_order_no":"late","amount":1}]}' |
  "$KIT" produce "$OW_KAFKA_BOOTSTRAP" $IN --key chaos-late
set +e
"$BUILD/ow-verify" --bootstrap "$OW_KAFKA_BOOTSTRAP" --group $GROUP --input $IN --results $OUT \
  --dlq $DLQ --mysql-port "$OW_MYSQL_PORT" --database $DB "${VERIFY_SHARDS[@]}" >"$RUN/verify-tampered.log"
tampered=$?
set -e
detected=$(grep -cE '^verify: FAIL +(I3 every order|I5 every recorded|I4 every message|I4 committed)' \
  "$RUN/verify-tampered.log" || true)
if ((tampered == 0 || detected < 4)); then
  cat "$RUN/verify-tampered.log"
  say "verifier self-check FAILED: it missed planted violations ($detected of 4 reported)"
  status=1
else
  say "verifier self-check passed: $detected of 4 planted violations reported"
fi
if ((kills < 10)); then say "only $kills kills happened (need at least 10)"; status=1; fi
if [[ -n $unexpected ]]; then
  say "a replica exited unexpectedly"
  # A stop held past its bound says where.
  { grep -h '"stop_overrun"' "$RUN"/worker-*.log || true; } | while read -r l; do say "  $l"; done
  status=1
fi
if ((hung > 0)); then say "$hung replica(s) hung on shutdown"; status=1; fi
say "took $((SECONDS - T_START)) s; $( ((status == 0)) && echo PASSED || echo FAILED)"
exit "$status"
