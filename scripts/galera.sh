#!/usr/bin/env bash
# The galera tier: two replicas with mysql.host naming the three nodes of a
# MariaDB Galera cluster (scripts/galera-cluster.sh) consume the chaos mix
# (about 25 % retries, 2 % key reuse, 2 % clashes, 1 % invalid) while, in
# turn, the node they write to (the one whose wsrep_local_commits grows)
#   1. kill      is killed with kill -9 and started again 20 s later: its
#                position is recovered and it must rejoin by IST;
#   2. partition is cut off from the other two by iptables rules for 20 s:
#                it must be seen non-Primary (wsrep_ready OFF) while still
#                accepting connections, then rejoin when the rules go;
#   3. restart   is stopped cleanly for 10 s and must rejoin by IST;
#   4. rolling   then every node is restarted in turn (each by IST).
# Each fault's start and end go to the faults file ("galera-NAME-start MS N"
# and "galera-NAME-end MS N"). ow-verify then checks I1-I8 on a node that is
# Synced in the Primary component, compares the tables of the three nodes,
# and prints for each fault its failover time (from its start to the first
# first-time answer to a message sent after it began) and the answers given
# while it lasted; a failover slower than OW_GALERA_FAILOVER_MAX_S, or none
# before the fault ended, fails the run. Exit 0 only if every check holds.
# Bounded to about 5 minutes; starts and stops its own Kafka broker and
# cluster (under .run/galera) and removes every iptables rule it added.
#
#   scripts/galera.sh                 (after a build; scripts/test.sh runs it)
#   OW_GALERA_RATE=50 OW_GALERA_FAILOVER_MAX_S=15 OW_GALERA_KILL_S=20
#   OW_GALERA_PARTITION_S=20 OW_GALERA_RESTART_S=10
#   OW_GALERA_WORKER_HOSTS=127.0.0.11   the replicas' mysql.host instead of the
#                                     three nodes (to see the run fail without a list)
#   OW_GALERA_PARTITION_NODE=1        cut off this node instead of the writer
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${OW_BUILD_DIR:-$ROOT/build}"
BIN="$BUILD/order-worker"
KIT="$BUILD/ow-kit"
RATE="${OW_GALERA_RATE:-50}"
FAILOVER_MAX_S="${OW_GALERA_FAILOVER_MAX_S:-15}"
KILL_S="${OW_GALERA_KILL_S:-20}"
PARTITION_S="${OW_GALERA_PARTITION_S:-20}"
RESTART_S="${OW_GALERA_RESTART_S:-10}"
PARTS=4
LIMIT_S=330   # the catch-up's deadline
HARD_LIMIT_S="${OW_GALERA_HARD_LIMIT_S:-480}"  # the whole run is stopped (and cleaned up) after this
export OW_RUN_DIR="$ROOT/.run/galera"
RUN="$OW_RUN_DIR"
FAULTS="$RUN/faults.log"
# The cluster script writes each fault's start when it acts.
export OW_GALERA_FAULTS="$FAULTS"
CLUSTER="$ROOT/scripts/galera-cluster.sh"
T_START=$SECONDS

say() { printf 'galera: [%3ds] %s\n' "$((SECONDS - T_START))" "$*"; }
now_ms() { date +%s%3N; }
fault() { echo "$1 $(now_ms) ${2:-}" >>"$FAULTS"; }
left() { echo $((LIMIT_S - (SECONDS - T_START))); }

for f in "$BIN" "$KIT" "$BUILD/ow-verify"; do
  [[ -x $f ]] || { echo "galera: $f not built (run scripts/test.sh or cmake --build build)" >&2; exit 2; }
done
command -v iptables >/dev/null || { echo "galera: iptables not found (scripts/deps.sh)" >&2; exit 2; }

failed=0
fail() { say "FAIL: $*"; failed=1; }

cleanup() {
  local status=$?
  set +e
  touch "$RUN/gen.stop"
  for i in 1 2; do rm -f "$RUN/replica-$i.enabled"; done
  for pidf in "$RUN"/replica-*.pid; do [[ -f $pidf ]] && kill -9 "$(cat "$pidf")" 2>/dev/null; done
  [[ -n ${GEN_PID:-} ]] && kill "$GEN_PID" 2>/dev/null
  pkill -P "$WATCHDOG_PID" 2>/dev/null
  kill "$WATCHDOG_PID" 2>/dev/null
  wait 2>/dev/null
  "$CLUSTER" stop >/dev/null 2>&1
  "$ROOT/scripts/services.sh" stop all >/dev/null 2>&1
  iptables -S >"$RUN/iptables-end.txt" 2>/dev/null
  if ! cmp -s "$RUN/iptables-start.txt" "$RUN/iptables-end.txt"; then
    say "FAIL: iptables -S differs from before the run:"
    diff "$RUN/iptables-start.txt" "$RUN/iptables-end.txt"
    status=1
  fi
  exit "$status"
}
trap cleanup EXIT
trap 'say "FAIL: stopped after ${HARD_LIMIT_S} s"; exit 1' TERM
# Every step has its own bound; this one holds if several run long at once.
( sleep "$HARD_LIMIT_S"; kill -TERM $$ ) >/dev/null 2>&1 </dev/null &
WATCHDOG_PID=$!

mkdir -p "$RUN"
rm -f "$RUN"/replica-* "$FAULTS" "$RUN"/worker-*.log "$RUN/exits.log" "$RUN/gen.stop" "$RUN"/verify*.log
iptables -S >"$RUN/iptables-start.txt"
: >"$FAULTS"
# The broker and the cluster start side by side.
env -u OW_MYSQL_PORT -u OW_KAFKA_PORT -u OW_KAFKA_CONTROLLER_PORT OW_BUILD_DIR="$BUILD" \
  "$ROOT/scripts/services.sh" start kafka >"$RUN/services.log" 2>&1 &
kafka_job=$!
"$CLUSTER" start | sed 's/^/galera:   /'
wait "$kafka_job" || { cat "$RUN/services.log"; say "the Kafka broker did not start"; exit 1; }
# shellcheck disable=SC1091
source "$RUN/services.env"
# shellcheck disable=SC1091
source "$RUN/galera.env"
say "broker: $OW_KAFKA_VERSION ($OW_BROKER_KIND) on $OW_KAFKA_BOOTSTRAP; cluster: MariaDB $OW_GALERA_VERSION, Galera $OW_GALERA_PROVIDER_VERSION, nodes $OW_GALERA_HOSTS port $OW_GALERA_PORT"

ADDR=("" "$OW_GALERA_ADDR_1" "$OW_GALERA_ADDR_2" "$OW_GALERA_ADDR_3")
mysql_root() {  # NODE ARGS...
  mariadb --no-defaults --protocol=tcp -h"${ADDR[$1]}" -P"$OW_GALERA_PORT" -uroot --connect-timeout=3 "${@:2}"
}
DB=galera
PASSWORD="g-$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')"
mysql_root 1 -e "CREATE DATABASE $DB"
ORDER_WORKER_MYSQL_USER=root ORDER_WORKER_MYSQL_HOST="$OW_GALERA_ADDR_1" ORDER_WORKER_MYSQL_PORT="$OW_GALERA_PORT" \
  ORDER_WORKER_MYSQL_DATABASE=$DB "$BIN" migrate >"$RUN/migrate.log"
mysql_root 1 -e "SET @worker_user='ow_worker', @worker_host='%', @worker_password='$PASSWORD',
                 @worker_database='$DB'; SOURCE $ROOT/sql/worker_user.sql;"
IN=galera-in OUT=galera-out DLQ=galera-dlq GROUP=galera-group
"$KIT" create-topic "$OW_KAFKA_BOOTSTRAP" $IN $PARTS
"$KIT" create-topic "$OW_KAFKA_BOOTSTRAP" $OUT $PARTS
"$KIT" create-topic "$OW_KAFKA_BOOTSTRAP" $DLQ 1

# The worker's defaults, the three nodes in mysql.host, the least-privilege
# user, and the chaos run's Kafka timeouts.
export ORDER_WORKER_KAFKA_BOOTSTRAP_SERVERS="$OW_KAFKA_BOOTSTRAP" ORDER_WORKER_KAFKA_GROUP_ID=$GROUP \
  ORDER_WORKER_TOPIC_INPUT=$IN ORDER_WORKER_TOPIC_RESULTS=$OUT ORDER_WORKER_TOPIC_DLQ=$DLQ \
  ORDER_WORKER_MYSQL_HOST="${OW_GALERA_WORKER_HOSTS:-$OW_GALERA_HOSTS}" ORDER_WORKER_MYSQL_PORT="$OW_GALERA_PORT" \
  ORDER_WORKER_MYSQL_USER=ow_worker ORDER_WORKER_MYSQL_DATABASE=$DB \
  ORDER_WORKER_KAFKA_CONSUMER_SESSION_TIMEOUT_MS=3000 ORDER_WORKER_KAFKA_CONSUMER_HEARTBEAT_INTERVAL_MS=500 \
  ORDER_WORKER_COMMIT_INTERVAL_MS=500 ORDER_WORKER_REQUEST_IN_PROGRESS_WAIT_S=2 \
  ORDER_WORKER_RETRY_BACKOFF_MAX_MS=2000 ORDER_WORKER_SHUTDOWN_TIMEOUT_MS=5000 \
  ORDER_WORKER_REBALANCE_DRAIN_TIMEOUT_MS=2000
printf '%s\n' "$PASSWORD" >"$RUN/worker.password"
chmod 600 "$RUN/worker.password"
export ORDER_WORKER_MYSQL_PASSWORD_FILE="$RUN/worker.password"

# A supervisor per replica, as a service manager restarts a process that
# exits; every exit is logged and any but a clean stop fails the run.
supervise() {  # INDEX
  local i=$1 pid status
  while [[ -f $RUN/replica-$i.enabled ]]; do
    "$BIN" run 2>>"$RUN/worker-$i.log" &
    pid=$!
    echo "$pid" >"$RUN/replica-$i.pid"
    [[ -f $RUN/replica-$i.enabled ]] || kill -TERM "$pid" 2>/dev/null || true
    set +e; { wait "$pid"; } 2>/dev/null; status=$?; set -e
    echo "replica $i pid $pid exit $status at $(now_ms)" >>"$RUN/exits.log"
    rm -f "$RUN/replica-$i.pid"
    if [[ -f $RUN/replica-$i.enabled ]]; then sleep 1; fi
  done
}
SUPERVISORS=()
for i in 1 2; do
  touch "$RUN/replica-$i.enabled"
  supervise "$i" &
  SUPERVISORS+=("$!")
done

# The node the replicas write to: the one whose count of transactions that
# began there grows most over 2 s; the last one seen when none grows.
WRITER=1
local_commits() {
  mysql_root "$1" -N -B -e "SHOW GLOBAL STATUS LIKE 'wsrep_local_commits'" 2>/dev/null | cut -f2
}
connections() {  # the worker's sessions on each node
  local n out=""
  for n in 1 2 3; do
    out+=" node$n=$(mysql_root "$n" -N -B -e "SELECT COUNT(*) FROM information_schema.PROCESSLIST
      WHERE USER = 'ow_worker'" 2>/dev/null || echo -)"
  done
  echo "${out# }"
}
find_writer() {
  local n c0=() c1=() best=0 d
  for n in 1 2 3; do c0[n]=$(local_commits "$n"); done
  sleep 2
  for n in 1 2 3; do
    c1[n]=$(local_commits "$n")
    [[ -n ${c0[n]} && -n ${c1[n]} ]] || continue
    d=$((c1[n] - c0[n]))
    if ((d > best)); then best=$d; WRITER=$n; fi
  done
  say "the replicas write to node $WRITER ($best local commits there in 2 s; worker sessions: $(connections))"
}
# Runs a cluster command; its lines go to the log, and to RESULT.
cluster() {
  RESULT="$("$CLUSTER" "$@" 2>&1)" || { echo "$RESULT" | sed 's/^/galera:   /'; return 1; }
  echo "$RESULT" | sed 's/^/galera:   /'
}
expect_ist() {  # NODE
  if ! grep -q "node $1 rejoined by IST" <<<"$RESULT"; then
    fail "node $1 did not rejoin by IST"
  fi
}

say "2 replicas started; producing the mix at $RATE/s until the faults are over"
"$KIT" gen "$OW_KAFKA_BOOTSTRAP" $IN 1000000 --rate "$RATE" --seed 20261205 --retry 25 --reuse 2 \
  --clash 2 --invalid 1 --items 10 --prefix galera --stop-file "$RUN/gen.stop" 2>"$RUN/gen.log" &
GEN_PID=$!
sleep 12

# 1. kill -9 of the writer, started again KILL_S later.
find_writer
w=$WRITER
OW_GALERA_MARK=galera-kill-start cluster kill "$w"
sleep "$KILL_S"
if cluster node-up "$w"; then expect_ist "$w"; else fail "node $w did not rejoin after the kill"; fi
fault galera-kill-end "$w"
sleep 8

# 2. The writer cut off from the other two for PARTITION_S.
find_writer
w=${OW_GALERA_PARTITION_NODE:-$WRITER}
t0=$(now_ms)
if OW_GALERA_MARK=galera-partition-start cluster partition "$w"; then
  say "node $w non-Primary $(($(now_ms) - t0)) ms after the cut, still accepting connections"
else
  fail "node $w was not seen non-Primary and accepting connections"
fi
rest=$((PARTITION_S - ($(now_ms) - t0) / 1000))
((rest > 0)) && sleep "$rest"
cluster heal || fail "the cluster did not heal"
fault galera-partition-end "$w"
sleep 8

# 3. A clean stop of the writer for RESTART_S, then a rejoin by IST.
find_writer
w=$WRITER
OW_GALERA_MARK=galera-restart-start cluster node-down "$w"
sleep "$RESTART_S"
if cluster node-up "$w"; then expect_ist "$w"; else fail "node $w did not rejoin after its restart"; fi
fault galera-restart-end "$w"
sleep 8

# 4. A rolling restart, one node after the other.
for n in 1 2 3; do
  OW_GALERA_MARK=galera-rolling-start cluster node-down "$n"
  if cluster node-up "$n"; then expect_ist "$n"; else fail "node $n did not rejoin in the rolling restart"; fi
  fault galera-rolling-end "$n"
done
sleep 5
touch "$RUN/gen.stop"
wait "$GEN_PID" || { cat "$RUN/gen.log" >&2; fail "the generator failed"; }
GEN_PID=""
say "$(tail -n1 "$RUN/gen.log")"

say "waiting for the group to catch up (limit $(left) s)"
while ! "$KIT" lag "$OW_KAFKA_BOOTSTRAP" $GROUP $IN >"$RUN/lag.log" 2>&1; do
  if (($(left) < 40)); then
    cat "$RUN/lag.log"
    fail "the group did not catch up within the time limit"
    break
  fi
  sleep 3
done
say "lag: $(tail -n1 "$RUN/lag.log")"
for i in 1 2; do
  rm -f "$RUN/replica-$i.enabled"
  [[ -f $RUN/replica-$i.pid ]] && kill -TERM "$(cat "$RUN/replica-$i.pid")" 2>/dev/null || true
done
for _ in $(seq 60); do
  ls "$RUN"/replica-*.pid >/dev/null 2>&1 || break
  sleep 0.5
done
for pidf in "$RUN"/replica-*.pid; do
  [[ -f $pidf ]] || continue
  fail "replica ${pidf##*/} did not stop within 30 s of SIGTERM"
  kill -9 "$(cat "$pidf")" 2>/dev/null || true
done
wait "${SUPERVISORS[@]}"
unexpected=$(grep -vE ' exit 0 at ' "$RUN/exits.log" || true)
if [[ -n $unexpected ]]; then
  fail "a replica exited other than by its clean stop:"
  sed 's/^/galera:   /' <<<"$unexpected"
fi
cluster wait-synced || fail "the cluster is not Synced after the run"

set +e
"$BUILD/ow-verify" --bootstrap "$OW_KAFKA_BOOTSTRAP" --group $GROUP --input $IN --results $OUT \
  --dlq $DLQ --mysql-host "$OW_GALERA_HOSTS" --mysql-port "$OW_GALERA_PORT" --database $DB \
  --faults "$FAULTS" --failover-max-ms $((FAILOVER_MAX_S * 1000)) | tee "$RUN/verify.log"
((PIPESTATUS[0] == 0)) || failed=1
set -e

# The new check must be able to fail: a row changed on node 3 alone (not
# replicated) must be reported.
mysql_root 3 $DB -e "SET SESSION wsrep_on = OFF; UPDATE idempotency_requests
                     SET response_body = CONCAT(response_body, ' ') ORDER BY id LIMIT 1"
set +e
"$BUILD/ow-verify" --bootstrap "$OW_KAFKA_BOOTSTRAP" --group $GROUP --input $IN --results $OUT \
  --dlq $DLQ --mysql-host "$OW_GALERA_HOSTS" --mysql-port "$OW_GALERA_PORT" --database $DB \
  >"$RUN/verify-tampered.log" 2>&1
tampered=$?
set -e
if ((tampered == 0)) || ! grep -q "^verify: node ${ADDR[3]}:.* DIFFERS" "$RUN/verify-tampered.log"; then
  fail "verifier self-check: a row changed on node 3 alone was not reported"
else
  say "verifier self-check passed: a row changed on node 3 alone is reported"
fi

# What the replicas met, from their logs: retried and fatal database errors by code.
for ev in db_retry db_fatal; do
  say "worker logs: $ev by error code: $(grep -h "\"event\":\"$ev\"" "$RUN"/worker-*.log |
    sed -n 's/.*"code":\([0-9]*\).*/\1/p' | sort | uniq -c | awk '{ printf "%s%s x%s", (NR > 1 ? ", " : ""), $2, $1 }')"
done
grep -E '^verify: fault ' "$RUN/verify.log" | sed 's/^verify: /galera: /' || true
grep -E '^verify: figures' "$RUN/verify.log" | sed 's/^verify: /galera: /' || true
say "took $((SECONDS - T_START)) s; $( ((failed == 0)) && echo PASSED || echo FAILED)"
exit "$failed"
