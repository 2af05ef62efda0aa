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
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
messages chaos --die '' 2

N="${OW_CHAOS_MESSAGES:-20000}"
PARTS="${OW_CHAOS_PARTITIONS:-6}"
LIMIT_S=360
SHARDED="${OW_CHAOS_SHARDS:-0}"
[[ $SHARDED == 0 || $SHARDED == 3 ]] || die "OW_CHAOS_SHARDS must be 3 (or unset)"
BROKERS="${OW_CHAOS_BROKERS:-3}"
[[ $BROKERS == 1 || $BROKERS == 3 ]] || die "OW_CHAOS_BROKERS must be 1 or 3"
# The generation spans every fault (the cluster's take 30 s more), so that
# each recovery is measured under load.
GEN_S=60
if ((BROKERS == 3)); then export OW_KAFKA_BROKERS=3; GEN_S=100; fi
export OW_RUN_DIR="$ROOT/.run/chaos"
RUN="$OW_RUN_DIR"
FAULTS="$RUN/faults.log"
need_built "$BIN" "$KIT" "$BUILD/ow-verify"
clock_start

mkdir -p "$RUN"
rm -f "$RUN"/replica-* "$FAULTS" "$RUN"/worker-*.log "$RUN/exits.log"
services_up
say "broker: $OW_KAFKA_VERSION ($OW_BROKER_KIND) on $OW_KAFKA_BOOTSTRAP; MariaDB $OW_MARIADB_VERSION on :$OW_MYSQL_PORT"

DB=chaos
SHARD_PORTS=("$OW_MYSQL_PORT")
export ORDER_WORKER_MYSQL_SHARDS=""
VERIFY_SHARDS=()
if ((SHARDED)); then
  for i in 1 2; do
    mkdir -p "$RUN/db$i"
    services_up_in "$RUN/db$i" mariadb >/dev/null
    SHARD_PORTS+=("$(instance_port "$RUN/db$i")")
  done
  ORDER_WORKER_MYSQL_SHARDS="127.0.0.1:${SHARD_PORTS[0]}/$DB,127.0.0.1:${SHARD_PORTS[1]}/$DB,127.0.0.1:${SHARD_PORTS[2]}/$DB"
  VERIFY_SHARDS=(--shards "$ORDER_WORKER_MYSQL_SHARDS")
  say "sharded variant: MariaDB shards on :${SHARD_PORTS[0]} :${SHARD_PORTS[1]} :${SHARD_PORTS[2]}"
fi
IN=chaos-in OUT=chaos-out DLQ=chaos-dlq GROUP=chaos-group
# The worker runs with the defaults, as the least-privilege user, with
# timeouts short enough for a six-minute run.
worker_database $DB "$(secret c)" "${SHARD_PORTS[@]}"
worker_kafka "$PARTS" $GROUP $IN $OUT $DLQ
fault_run_timeouts
on_exit 'stop_fault_run KILLER_PID GEN_PID'

# A service outage under load: SERVICE stopped for SECONDS, then started.
outage() {  # SERVICE SECONDS STOPPING BACK
  say "$3"
  fault "$1-down"
  services "$1-down" >/dev/null
  sleep "$2"
  services "$1-up" >/dev/null
  fault "$1-up"
  say "$4"
}

for i in 1 2 3; do start_replica "$i"; done
say "3 replicas started; producing $N messages over about $GEN_S s"
mix $IN "$N" $((N / GEN_S + 1)) 20261130 chaos "$RUN/gen.log" &
GEN_PID=$!
sleep 5
start_killer 45
sleep 10
if ((SHARDED)); then
  say "killing shard 1's MariaDB (kill -9) for 12 s"
  kill -9 "$(cat "$RUN/db1/mariadb.pid")"
  fault shard-down 1
  fault mariadb-down
  sleep 12
  services_in "$RUN/db1" mariadb-up >/dev/null
  fault mariadb-up
  fault shard-up 1
  say "shard 1 is back"
else
  outage mariadb 12 "stopping MariaDB for 12 s" "MariaDB is back"
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
outage kafka 5 "stopping the Kafka broker$( ((BROKERS == 3)) && echo 's, all three')" "Kafka is back"
scale_down_up
wait_generator "$RUN/gen.log"
say "$(tail -n1 "$RUN/gen.log")"

say "waiting for the group to catch up (limit $(left) s)"
catch_up $GROUP $IN 40 3
stop_replicas 1 2 3
wait
replica_exits
"$BUILD/ow-verify" --bootstrap "$OW_KAFKA_BOOTSTRAP" --group $GROUP --input $IN --results $OUT \
  --dlq $DLQ --mysql-port "$OW_MYSQL_PORT" --database $DB --faults "$FAULTS" "${VERIFY_SHARDS[@]}" |
  tee "$RUN/verify.log"
status=${PIPESTATUS[0]}

# The verifier must be able to fail: tamper with the outcome in three ways
# and expect each to be reported.
say "verifier self-check: tampering with the results must be detected"
mariadb_at "$OW_MYSQL_PORT" $DB -e "UPDATE idempotency_requests SET response_body = CONCAT(response_body, ' ')
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
self_check_verdict "$tampered" "$detected" \
  "verifier self-check FAILED: it missed planted violations ($detected of 4 reported)" \
  "verifier self-check passed: $detected of 4 planted violations reported" || status=1
replica_verdict '"stop_overrun"' "a replica exited unexpectedly" || status=1
finish "$status"
