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
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
messages eos --die '' 2

N="${OW_EOS_MESSAGES:-20000}"
PARTS="${OW_EOS_PARTITIONS:-6}"
GUARANTEE="${OW_EOS_GUARANTEE:-exactly_once_v2}"
LIMIT_S=300
export OW_RUN_DIR="$ROOT/.run/eos"
export OW_KAFKA_BROKERS=3
RUN="$OW_RUN_DIR"
FAULTS="$RUN/faults.log"
CLUSTER="$ROOT/scripts/kafka-cluster.sh"

need_built "$BIN" "$KIT" "$BUILD/ow-verify"
case $GUARANTEE in
  exactly_once_v2 | at_least_once) ;;
  *) die "OW_EOS_GUARANTEE must be exactly_once_v2 or at_least_once" ;;
esac
# The worker's keys for this run, as its --help lists them.
WORKER_ENV=()
if worker_has_key 'processing\.guarantee'; then
  WORKER_ENV+=(ORDER_WORKER_PROCESSING_GUARANTEE="$GUARANTEE")
elif [[ $GUARANTEE != at_least_once ]]; then
  die_with 1 "FAILED: this order-worker has no processing.guarantee key (no exactly-once mode);" \
    "OW_EOS_GUARANTEE=at_least_once runs the tier without it"
fi
if worker_has_key 'worker\.replica_id'; then REPLICA_IDS=1; fi
if [[ -n ${OW_EOS_TXN_INTERVAL_MS:-} ]]; then
  WORKER_ENV+=(ORDER_WORKER_TRANSACTION_INTERVAL_MS="$OW_EOS_TXN_INTERVAL_MS")
fi
clock_start

mkdir -p "$RUN"
rm -f "$RUN"/replica-* "$FAULTS" "$RUN"/worker-*.log "$RUN/exits.log" "$RUN/lso.txt"
services_up
BOOT="$OW_KAFKA_BOOTSTRAP"
say "brokers: $OW_KAFKA_VERSION on $BOOT; MariaDB $OW_MARIADB_VERSION on :$OW_MYSQL_PORT;" \
  "worker: processing.guarantee=$GUARANTEE$( ((REPLICA_IDS)) || echo ' (no worker.replica_id key)')"

DB=eos
IN=eos-in OUT=eos-out DLQ=eos-dlq GROUP=eos-group
worker_database $DB "$(secret e)" "$OW_MYSQL_PORT"
worker_kafka "$PARTS" $GROUP $IN $OUT $DLQ
fault_run_timeouts
if ((${#WORKER_ENV[@]} > 0)); then export "${WORKER_ENV[@]}"; fi
on_exit 'stop_fault_run KILLER_PID GEN_PID WATCH_PID'

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
mix $IN "$N" $((N / 75 + 1)) 20261205 eos "$RUN/gen.log" &
GEN_PID=$!
sleep 5
start_killer 45
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
scale_down_up
wait_generator "$RUN/gen.log"
say "$(tail -n1 "$RUN/gen.log")"

say "waiting for the group to catch up (limit $(left) s)"
catch_up $GROUP $IN 60 3
stop_replicas 1 2 3
kill "$WATCH_PID" 2>/dev/null || true
wait
WATCH_PID=""
replica_exits
VERIFY=("$BUILD/ow-verify" --bootstrap "$BOOT" --group "$GROUP" --input "$IN" --results "$OUT"
  --dlq "$DLQ" --mysql-port "$OW_MYSQL_PORT" --database "$DB" --read-committed)
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
self_check_verdict "$tampered" "$ok" "verifier self-check FAILED: $ok of 4 planted faults seen" \
  "verifier self-check passed: 4 of 4 planted faults seen (duplicate result, duplicate dead letter, aborted copy, open transaction)" ||
  status=1
replica_verdict '"worker_fatal"\|"kafka_fatal"\|"stop_overrun"' \
  "a replica exited unexpectedly; the reasons it logged:" || status=1
finish "$status"
