#!/usr/bin/env bash
# The exactly-once run: three replicas with processing.guarantee =
# exactly_once_v2, each with its own worker.replica_id, on a three-broker
# cluster (scripts/kafka-cluster.sh: replication 3, min ISR 2) consume the
# chaos mix (about 25 % retries, 2 % key reuse, 2 % clashes, 1 % invalid)
# while
#   * a killer sends kill -9 to a random replica every 1-3 s (it restarts
#     under the same replica id, which fences its predecessor),
#   * the broker leading the most partitions is killed (kill -9) and
#     restarted,
#   * then the broker that coordinates replica 1's transactions is killed
#     and restarted,
#   * the group is scaled 3 -> 1 -> 3.
# `ow-kit lso-watch` samples the results topic's last stable offsets every
# 100 ms meanwhile. Then ow-verify reads the topics with
# isolation.level=read_committed and checks I1-I8 plus exactly one result
# per message and one dead-letter copy per invalid one, and prints the
# aborted records, the LSO stalls after replica kills and the recovery
# after each broker kill in one figures line. A self-check plants a
# duplicate result, a duplicate dead letter, an aborted and an open
# transaction, and expects the verifier to see each. Bounded to 5 minutes;
# starts and stops its own MariaDB and brokers (under .run/eos). Exit 0
# only if every check holds.
#
#   scripts/eos.sh                   (after a build; scripts/test.sh runs it)
#   OW_EOS_MESSAGES=20000 OW_EOS_PARTITIONS=6
#   OW_EOS_GUARANTEE=at_least_once   the same run with the worker's at-least-once
#                                    mode (the exactly-once checks then count the
#                                    duplicates that mode allows, and fail)
#   OW_EOS_TXN_INTERVAL_MS=N         the worker's transaction.interval_ms
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${OW_BUILD_DIR:-$ROOT/build}"
BIN="$BUILD/order-worker"
KIT="$BUILD/ow-kit"
N="${OW_EOS_MESSAGES:-20000}"
PARTS="${OW_EOS_PARTITIONS:-6}"
GUARANTEE="${OW_EOS_GUARANTEE:-exactly_once_v2}"
LIMIT_S=300
export OW_RUN_DIR="$ROOT/.run/eos"
export OW_KAFKA_BROKERS=3
RUN="$OW_RUN_DIR"
FAULTS="$RUN/faults.log"
CLUSTER="$ROOT/scripts/kafka-cluster.sh"
T_START=$SECONDS

say() { printf 'eos: [%3ds] %s\n' "$((SECONDS - T_START))" "$*"; }
now_ms() { date +%s%3N; }
fault() { echo "$1 $(now_ms) ${2:-}" >>"$FAULTS"; }
left() { echo $((LIMIT_S - (SECONDS - T_START))); }

for f in "$BIN" "$KIT" "$BUILD/ow-verify"; do
  [[ -x $f ]] || { echo "eos: $f not built (run scripts/test.sh or cmake --build build)" >&2; exit 2; }
done
case $GUARANTEE in
  exactly_once_v2 | at_least_once) ;;
  *) echo "eos: OW_EOS_GUARANTEE must be exactly_once_v2 or at_least_once" >&2; exit 2 ;;
esac
# The worker's keys for this run, as its --help lists them.
has_key() { "$BIN" --help 2>&1 | grep -qE "^  $1 "; }
WORKER_ENV=()
if has_key 'processing\.guarantee'; then
  WORKER_ENV+=(ORDER_WORKER_PROCESSING_GUARANTEE="$GUARANTEE")
elif [[ $GUARANTEE != at_least_once ]]; then
  echo "eos: FAILED: this order-worker has no processing.guarantee key (no exactly-once mode);" \
    "OW_EOS_GUARANTEE=at_least_once runs the tier without it" >&2
  exit 1
fi
HAS_REPLICA_ID=0
if has_key 'worker\.replica_id'; then HAS_REPLICA_ID=1; fi
if [[ -n ${OW_EOS_TXN_INTERVAL_MS:-} ]]; then
  WORKER_ENV+=(ORDER_WORKER_TRANSACTION_INTERVAL_MS="$OW_EOS_TXN_INTERVAL_MS")
fi

cleanup() {
  set +e
  for i in 1 2 3; do rm -f "$RUN/replica-$i.enabled"; done
  for pidf in "$RUN"/replica-*.pid; do [[ -f $pidf ]] && kill -9 "$(cat "$pidf")" 2>/dev/null; done
  [[ -n ${KILLER_PID:-} ]] && kill "$KILLER_PID" 2>/dev/null
  [[ -n ${GEN_PID:-} ]] && kill "$GEN_PID" 2>/dev/null
  [[ -n ${WATCH_PID:-} ]] && kill "$WATCH_PID" 2>/dev/null
  wait 2>/dev/null
  "$ROOT/scripts/services.sh" stop all >/dev/null 2>&1
}
trap cleanup EXIT

mkdir -p "$RUN"
rm -f "$RUN"/replica-* "$FAULTS" "$RUN"/worker-*.log "$RUN/exits.log" "$RUN/lso.txt"
OW_BUILD_DIR="$BUILD" "$ROOT/scripts/services.sh" start all
# shellcheck disable=SC1091
source "$RUN/services.env"
BOOT="$OW_KAFKA_BOOTSTRAP"
say "brokers: $OW_KAFKA_VERSION on $BOOT; MariaDB $OW_MARIADB_VERSION on :$OW_MYSQL_PORT;" \
  "worker: processing.guarantee=$GUARANTEE$( ((HAS_REPLICA_ID)) || echo ' (no worker.replica_id key)')"

DB=eos
PASSWORD="e-$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')"
mariadb --protocol=tcp -h127.0.0.1 -P"$OW_MYSQL_PORT" -uroot -e "CREATE DATABASE $DB"
ORDER_WORKER_MYSQL_USER=root ORDER_WORKER_MYSQL_PORT="$OW_MYSQL_PORT" ORDER_WORKER_MYSQL_DATABASE=$DB \
  "$BIN" migrate >/dev/null
mariadb --protocol=tcp -h127.0.0.1 -P"$OW_MYSQL_PORT" -uroot \
  -e "SET @worker_user='ow_worker', @worker_host='%', @worker_password='$PASSWORD',
      @worker_database='$DB'; SOURCE $ROOT/sql/worker_user.sql;"
IN=eos-in OUT=eos-out DLQ=eos-dlq GROUP=eos-group
"$KIT" create-topic "$BOOT" $IN "$PARTS"
"$KIT" create-topic "$BOOT" $OUT "$PARTS"
"$KIT" create-topic "$BOOT" $DLQ 1

export ORDER_WORKER_KAFKA_BOOTSTRAP_SERVERS="$BOOT" ORDER_WORKER_KAFKA_GROUP_ID=$GROUP \
  ORDER_WORKER_TOPIC_INPUT=$IN ORDER_WORKER_TOPIC_RESULTS=$OUT ORDER_WORKER_TOPIC_DLQ=$DLQ \
  ORDER_WORKER_MYSQL_HOST=127.0.0.1 ORDER_WORKER_MYSQL_PORT="$OW_MYSQL_PORT" \
  ORDER_WORKER_MYSQL_USER=ow_worker ORDER_WORKER_MYSQL_DATABASE=$DB \
  ORDER_WORKER_KAFKA_CONSUMER_SESSION_TIMEOUT_MS=3000 ORDER_WORKER_KAFKA_CONSUMER_HEARTBEAT_INTERVAL_MS=500 \
  ORDER_WORKER_COMMIT_INTERVAL_MS=500 ORDER_WORKER_REQUEST_IN_PROGRESS_WAIT_S=2 \
  ORDER_WORKER_RETRY_BACKOFF_MAX_MS=2000 ORDER_WORKER_SHUTDOWN_TIMEOUT_MS=5000 \
  ORDER_WORKER_REBALANCE_DRAIN_TIMEOUT_MS=2000
if ((${#WORKER_ENV[@]} > 0)); then export "${WORKER_ENV[@]}"; fi
printf '%s\n' "$PASSWORD" >"$RUN/worker.password"
chmod 600 "$RUN/worker.password"
export ORDER_WORKER_MYSQL_PASSWORD_FILE="$RUN/worker.password"

# A supervisor per replica id: restarts it under the same id whenever it
# dies, until disabled.
supervise() {  # ID
  local i=$1 pid status id_env=()
  if ((HAS_REPLICA_ID)); then id_env=(ORDER_WORKER_WORKER_REPLICA_ID="$i"); fi
  while [[ -f $RUN/replica-$i.enabled ]]; do
    env "${id_env[@]}" "$BIN" run 2>>"$RUN/worker-$i.log" &
    pid=$!
    echo "$pid" >"$RUN/replica-$i.pid"
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
stop_replica() {  # ID: a clean stop (SIGTERM), as an operator scales down
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

# kill -9 of node N, restarted after 12 s (past the brokers' 9 s session
# timeout, so that its partitions get new leaders first); returns once
# every partition is back to three in-sync replicas.
broker_fault() {  # NODE WHY
  local t0 t1
  say "killing broker $1 ($2)"
  "$CLUSTER" kill "$1" >/dev/null
  fault broker-kill "$1"
  sleep 12
  t0=$SECONDS
  "$CLUSTER" restart "$1" >/dev/null
  fault broker-up "$1"
  t1=$SECONDS
  "$CLUSTER" wait-isr 60 >/dev/null
  say "broker $1 is back (restart $((t1 - t0)) s), every partition with 3 in-sync replicas $((SECONDS - t1)) s later"
}

"$KIT" lso-watch "$BOOT" $OUT "$RUN/lso.txt" --interval-ms 100 --seconds "$LIMIT_S" &
WATCH_PID=$!
for i in 1 2 3; do start_replica "$i"; done
# Over 75 s: the generation spans both broker faults.
say "3 replicas started; producing $N messages over about 75 s"
"$KIT" gen "$BOOT" $IN "$N" --rate $((N / 75 + 1)) --seed 20261205 \
  --retry 25 --reuse 2 --clash 2 --invalid 1 --items 10 --prefix eos 2>"$RUN/gen.log" &
GEN_PID=$!
sleep 5
killer 45 &
KILLER_PID=$!
say "killer running for 45 s"
sleep 3
broker_fault "$("$CLUSTER" most-leaders)" "it leads the most partitions"
# The coordinator of replica 1's transactional id, <group>-1; without
# transactions (at_least_once) there is no transaction state log: then
# the group's coordinator.
if COORD="$("$CLUSTER" coordinator-of "$GROUP-1" 2>/dev/null)"; then
  broker_fault "$COORD" "the transaction coordinator of $GROUP-1"
else
  broker_fault "$("$CLUSTER" group-coordinator-of $GROUP)" "no transactions: the coordinator of group $GROUP"
fi
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
while ! "$KIT" lag "$BOOT" $GROUP $IN >"$RUN/lag.log" 2>&1; do
  if (($(left) < 60)); then
    cat "$RUN/lag.log"
    say "did not catch up within the time limit"
    exit 1
  fi
  sleep 3
done
say "caught up: $(tail -n1 "$RUN/lag.log")"
for i in 1 2 3; do stop_replica "$i"; done
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
kill "$WATCH_PID" 2>/dev/null || true
wait
WATCH_PID=""
kills=$(grep -c '^kill ' "$FAULTS" || true)
unexpected=$(grep -vE 'exit (0|137)$' "$RUN/exits.log" || true)
clean=$(grep -cE 'exit 0$' "$RUN/exits.log" || true)
say "replica exits: $clean clean (SIGTERM), $kills killed; unexpected: ${unexpected:-none}"
VERIFY=("$BUILD/ow-verify" --bootstrap "$BOOT" --group $GROUP --input $IN --results $OUT
  --dlq $DLQ --mysql-port "$OW_MYSQL_PORT" --database $DB --read-committed)
LOGS=()
for f in "$RUN"/worker-*.log; do LOGS+=(--worker-log "$f"); done
# A transaction left open would hold the reads back: wait for it at most
# 90 s, within what is left of the run's time.
SETTLE_S=$(($(left) - 40))
((SETTLE_S <= 90)) || SETTLE_S=90
((SETTLE_S >= 10)) || SETTLE_S=10
set +e
"${VERIFY[@]}" --faults "$FAULTS" --lso-timeline "$RUN/lso.txt" "${LOGS[@]}" \
  --settle-ms $((SETTLE_S * 1000)) | tee "$RUN/verify.log"
status=${PIPESTATUS[0]}
set -e

# The verifier must be able to fail: a second committed copy of a result and
# of a dead letter must count as duplicates; a copy in an aborted
# transaction must not, but must count as aborted; a copy left in an open
# transaction (its producer gone, as after a kill -9) must hold the end back.
say "verifier self-check: planted duplicates and transactions must be seen"
figure() {  # NAME LOG: a number of the exactly-once figures line (-1 when absent)
  local v
  v="$(sed -n "s/.*exactly-once figures:.* $1=\([0-9-]*\).*/\1/p" "$2")"
  echo "${v:--1}"
}
# "PARTITION OFFSET" of the first committed definitive result and dead letter.
first_of() {  # TOPIC
  "$KIT" read "$BOOT" "$1" | jq -r 'select(.value | contains("REQUEST_IN_PROGRESS") | not)
    | "\(.partition) \(.offset)"' | head -n 1
}
read -r rp ro < <(first_of $OUT)
read -r dlq_p dlq_o < <(first_of $DLQ)
"$KIT" copy "$BOOT" $OUT "$rp" "$ro" >/dev/null
"$KIT" copy "$BOOT" $DLQ "$dlq_p" "$dlq_o" >/dev/null
"$KIT" copy "$BOOT" $OUT "$rp" "$ro" --txn eos-selfcheck-aborted --abort >/dev/null
"$KIT" copy "$BOOT" $OUT "$rp" "$ro" --txn eos-selfcheck-open --open >/dev/null
set +e
"${VERIFY[@]}" --settle-ms 3000 >"$RUN/verify-tampered.log"
tampered=$?
set -e
ok=0
(($(figure duplicate_results "$RUN/verify-tampered.log") == $(figure duplicate_results "$RUN/verify.log") + 1)) && ok=$((ok + 1))
(($(figure duplicate_dead_letters "$RUN/verify-tampered.log") == $(figure duplicate_dead_letters "$RUN/verify.log") + 1)) && ok=$((ok + 1))
(($(figure aborted_records "$RUN/verify-tampered.log") == $(figure aborted_records "$RUN/verify.log") + 2)) && ok=$((ok + 1))
grep -qE '^verify: FAIL +EO no transaction left open' "$RUN/verify-tampered.log" && ok=$((ok + 1))
if ((tampered == 0 || ok < 4)); then
  cat "$RUN/verify-tampered.log"
  say "verifier self-check FAILED: $ok of 4 planted faults seen"
  status=1
else
  say "verifier self-check passed: 4 of 4 planted faults seen (duplicate result, duplicate dead letter, aborted copy, open transaction)"
fi
if ((kills < 10)); then say "only $kills kills happened (need at least 10)"; status=1; fi
if [[ -n $unexpected ]]; then
  say "a replica exited unexpectedly; the reasons it logged:"
  { grep -h '"worker_fatal"\|"kafka_fatal"\|"stop_overrun"' "$RUN"/worker-*.log || true; } |
    while read -r l; do say "  $l"; done
  status=1
fi
if ((hung > 0)); then say "$hung replica(s) hung on shutdown"; status=1; fi
say "took $((SECONDS - T_START)) s; $( ((status == 0)) && echo PASSED || echo FAILED)"
exit "$status"
