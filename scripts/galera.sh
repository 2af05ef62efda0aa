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
#   4. rolling   then every node is restarted in turn (each by IST);
#   5. power     all three are killed at once and the cluster is recovered
#                as docs/operations.md says (the most advanced node found
#                with --wsrep-recover bootstraps it, the others join); the
#                answers wait for it, so it has no failover bound.
# Before the replicas start, every node runs with
# innodb_flush_log_at_trx_commit=2 until both replicas have named it in a
# db_setting warning; then it is 1 again for the faults.
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
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
messages galera --die '' 2

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

need_built "$BIN" "$KIT" "$BUILD/ow-verify"
command -v iptables >/dev/null || die "iptables not found (scripts/deps.sh)"
clock_start

failed=0
fail() { say "FAIL: $*"; failed=1; }

# At exit, in this order: the replicas, the generator and the watchdog
# stopped, the cluster and the broker stopped, and the firewall as it was
# before the run, or the run fails.
iptables_unchanged() {
  iptables -S >"$RUN/iptables-end.txt" 2>/dev/null
  if ! cmp -s "$RUN/iptables-start.txt" "$RUN/iptables-end.txt"; then
    say "FAIL: iptables -S differs from before the run:"
    diff "$RUN/iptables-start.txt" "$RUN/iptables-end.txt"
    AT_EXIT_FAILED=1
  fi
}
on_exit iptables_unchanged
on_exit 'services stop all >/dev/null 2>&1'
on_exit '"$CLUSTER" stop >/dev/null 2>&1'
trap 'say "FAIL: stopped after ${HARD_LIMIT_S} s"; exit 1' TERM
# Every step has its own bound; this one holds if several run long at once.
( sleep "$HARD_LIMIT_S"; kill -TERM $$ ) >/dev/null 2>&1 </dev/null &
# shellcheck disable=SC2034  # read at exit
WATCHDOG_PID=$!
# The watchdog's sleep is stopped first: it would outlive its shell.
on_exit 'touch "$RUN/gen.stop"; pkill -P "$WATCHDOG_PID" 2>/dev/null; stop_fault_run GEN_PID WATCHDOG_PID'

mkdir -p "$RUN"
rm -f "$RUN"/replica-* "$FAULTS" "$RUN"/worker-*.log "$RUN/exits.log" "$RUN/gen.stop" "$RUN"/verify*.log
iptables -S >"$RUN/iptables-start.txt"
: >"$FAULTS"
# The broker and the cluster start side by side.
services_in "$RUN" start kafka >"$RUN/services.log" 2>&1 &
kafka_job=$!
"$CLUSTER" start | sed 's/^/galera:   /'
wait "$kafka_job" || { cat "$RUN/services.log"; say "the Kafka broker did not start"; exit 1; }
services_env "$RUN"
# shellcheck disable=SC1091  # written by scripts/galera-cluster.sh
source "$RUN/galera.env"
say "broker: $OW_KAFKA_VERSION ($OW_BROKER_KIND) on $OW_KAFKA_BOOTSTRAP; cluster: MariaDB $OW_GALERA_VERSION, Galera $OW_GALERA_PROVIDER_VERSION, nodes $OW_GALERA_HOSTS port $OW_GALERA_PORT"

ADDR=("" "$OW_GALERA_ADDR_1" "$OW_GALERA_ADDR_2" "$OW_GALERA_ADDR_3")
mysql_root() {  # NODE ARGS...: a node that does not answer within 3 s fails the call
  mariadb_at "${ADDR[$1]}:$OW_GALERA_PORT" --connect-timeout=3 "${@:2}"
}
DB=galera
IN=galera-in OUT=galera-out DLQ=galera-dlq GROUP=galera-group
# The worker's defaults, the least-privilege user (made through node 1),
# the three nodes in mysql.host, and the chaos run's Kafka timeouts.
worker_database $DB "$(secret g)" "$OW_GALERA_ADDR_1:$OW_GALERA_PORT"
export ORDER_WORKER_MYSQL_HOST="${OW_GALERA_WORKER_HOSTS:-$OW_GALERA_HOSTS}"
worker_kafka $PARTS $GROUP $IN $OUT $DLQ
fault_run_timeouts

# Any exit of a replica but its clean stop fails the run, as does one that
# does not stop: an exit is not a fault the run recovers from, so a restart
# is none for the verifier, and each exit carries its time, to be set
# beside the node faults.
replica_exited() { echo "replica $1 pid $2 exit $3 at $(now_ms)" >>"$RUN/exits.log"; }
replica_restart() { sleep 1; }
replica_hung() { fail "$1"; }
for n in 1 2 3; do mysql_root "$n" -e "SET GLOBAL innodb_flush_log_at_trx_commit = 2"; done
start_replica 1
start_replica 2
for i in 1 2; do
  if wait_log "$RUN/worker-$i.log" 0 '"setting":"innodb_flush_log_at_trx_commit","value":"2"' 30; then
    say "replica $i named innodb_flush_log_at_trx_commit=2 at start"
  else
    fail "replica $i did not name innodb_flush_log_at_trx_commit=2 at start"
  fi
done
for n in 1 2 3; do mysql_root "$n" -e "SET GLOBAL innodb_flush_log_at_trx_commit = 1"; done

# The node the replicas write to: the one whose count of transactions that
# began there grows most over 2 s; the last one seen when none grows.
WRITER=1
local_commits() {
  # Empty when the node does not answer (find_writer skips it).
  mysql_root "$1" -N -B -e "SHOW GLOBAL STATUS LIKE 'wsrep_local_commits'" 2>/dev/null | cut -f2 || true
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
mix $IN 1000000 "$RATE" 20261205 galera "$RUN/gen.log" --stop-file "$RUN/gen.stop" &
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
sleep 8

# 5. The whole cluster loses power; the documented recovery brings it back.
# Its marks go to a file of their own: no node answers until the recovery
# ends, so there is no failover to bound.
t0=$(now_ms)
OW_GALERA_FAULTS="$RUN/power.log" OW_GALERA_MARK=galera-power-start cluster power-loss
if cluster recover-cluster; then
  say "fault power: the cluster was down and recovered in $(($(now_ms) - t0)) ms"
else
  fail "the cluster did not recover after the power loss"
fi
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
stop_replicas 1 2
wait "${SUPERVISORS[@]}"
unexpected=$(grep -vE ' exit 0 at ' "$RUN/exits.log" || true)
if [[ -n $unexpected ]]; then
  fail "a replica exited other than by its clean stop:"
  sed 's/^/galera:   /' <<<"$unexpected"
fi
cluster wait-synced || fail "the cluster is not Synced after the run"

VERIFY=("$BUILD/ow-verify" --bootstrap "$OW_KAFKA_BOOTSTRAP" --group "$GROUP" --input "$IN" --results "$OUT"
  --dlq "$DLQ" --mysql-host "$OW_GALERA_HOSTS" --mysql-port "$OW_GALERA_PORT" --database "$DB")
set +e
"${VERIFY[@]}" --faults "$FAULTS" --failover-max-ms $((FAILOVER_MAX_S * 1000)) | tee "$RUN/verify.log"
((PIPESTATUS[0] == 0)) || failed=1
set -e

# The new check must be able to fail: a row changed on node 3 alone (not
# replicated) must be reported.
mysql_root 3 $DB -e "SET SESSION wsrep_on = OFF; UPDATE idempotency_requests
                     SET response_body = CONCAT(response_body, ' ') ORDER BY id LIMIT 1"
set +e
"${VERIFY[@]}" >"$RUN/verify-tampered.log" 2>&1
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
finish "$failed"
