#!/usr/bin/env bash
# What a kill -9 of an exactly-once replica costs under each replica-id
# choice (docs/operations.md, "Replica ids"). Two replicas in
# processing.guarantee = exactly_once_v2 take 150 messages/s on the single
# broker; 20 s in, replica r1 is killed with kill -9 and started again 1 s
# later:
#   same      under the same worker.replica_id (the rule)
#   new       under another id, as a scheme that draws a new id per start
#             would (or a replica that never returns, for its transaction)
#   static    under the same id, with group.instance.id = the replica id
#             (static membership: the group keeps its partitions for it)
# For each it prints one line: the longest time after the kill that the
# results topic's last stable offset stood still behind its high watermark
# (read_committed consumers wait that long), and the time until the input's
# lag was back under 2 s of traffic (the killed replica's partitions were
# processed again). Default Kafka and librdkafka timeouts
# (session.timeout.ms 45 s, transaction.timeout.ms 60 s). Bounded: about
# 100 s per choice; starts and stops its own services under .run/replica-ids.
#
#   scripts/eos-replica-ids.sh [same|new|static]...   (default: all three)
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
messages replica-ids --die '' 2
export OW_RUN_DIR="$ROOT/.run/replica-ids"
RUN="$OW_RUN_DIR"
RATE=150
SECONDS_OF_LOAD=70
KILL_AT_S=20
CHOICES=("$@")
((${#CHOICES[@]} > 0)) || CHOICES=(same new static)

need_built "$BIN" "$KIT"
for c in "${CHOICES[@]}"; do
  case $c in same | new | static) ;; *) die "unknown choice $c" ;; esac
done
clock_start
trap 'exit 130' INT TERM

mkdir -p "$RUN"
services_up >/dev/null
PIDS=()
on_exit 'kill_each 9 "${PIDS[@]}"; wait 2>/dev/null'
BOOT="$OW_KAFKA_BOOTSTRAP"

# The longest stall after the kill: a sample whose LSO equals the previous
# one while the HW is ahead of it, summed per partition into runs.
lso_stall_ms() {  # FILE KILL_MS
  awk -v kill="$2" '
    { t = $1; for (i = 2; i <= NF; i++) { split($i, f, ":"); p = f[1]; lso = f[2]; hw = f[3]
        if (t >= kill && (p in last) && lso == last[p] && hw > lso) {
          if (!(p in since)) since[p] = prev[p]
          run = t - since[p]; if (run > best) best = run
        } else delete since[p]
        last[p] = lso; prev[p] = t } }
    END { print best + 0 }' "$1"
}

# Seconds from the kill until the lag samples are back under 2 s of traffic.
lag_recovery_ms() {  # FILE KILL_MS
  awk -v kill="$2" -v limit=$((2 * RATE)) '
    $1 >= kill && $2 > limit { high = $1 }
    END { print (high > 0 ? high - kill : 0) }' "$1"
}

measure() {  # CHOICE
  local choice=$1 tag db id2 kill_ms gen_pid watch_pid lag_pid r1 r2
  tag="ids-$choice-$RANDOM"
  db="ids_${choice}_$RANDOM"
  mariadb_at "$OW_MYSQL_PORT" -e "CREATE DATABASE $db"
  for t in in out dlq; do "$KIT" create-topic "$BOOT" "$tag-$t" 6 >/dev/null; done
  export ORDER_WORKER_KAFKA_BOOTSTRAP_SERVERS="$BOOT" ORDER_WORKER_KAFKA_GROUP_ID="$tag-g" \
    ORDER_WORKER_TOPIC_INPUT="$tag-in" ORDER_WORKER_TOPIC_RESULTS="$tag-out" \
    ORDER_WORKER_TOPIC_DLQ="$tag-dlq" ORDER_WORKER_MYSQL_HOST=127.0.0.1 \
    ORDER_WORKER_MYSQL_PORT="$OW_MYSQL_PORT" ORDER_WORKER_MYSQL_USER=root \
    ORDER_WORKER_MYSQL_DATABASE="$db" ORDER_WORKER_METRICS_PORT=0 \
    ORDER_WORKER_PROCESSING_GUARANTEE=exactly_once_v2
  ORDER_WORKER_WORKER_REPLICA_ID=migrate "$BIN" migrate >/dev/null 2>&1
  start() {  # ID: the replica's pid in STARTED
    local env=(ORDER_WORKER_WORKER_REPLICA_ID="$1")
    [[ $choice != static ]] || env+=(ORDER_WORKER_KAFKA_CONSUMER_GROUP_INSTANCE_ID="$1")
    env "${env[@]}" "$BIN" run >/dev/null 2>>"$RUN/$tag-$1.log" &
    STARTED=$!
    PIDS+=("$STARTED")
  }
  start r1
  r1=$STARTED
  start r2
  r2=$STARTED
  sleep 5
  "$KIT" lso-watch "$BOOT" "$tag-out" "$RUN/$tag.lso" --seconds $((SECONDS_OF_LOAD + 25)) &
  watch_pid=$!
  PIDS+=("$watch_pid")
  (for _ in $(seq 1 $((SECONDS_OF_LOAD + 20))); do
     echo "$(now_ms) $("$KIT" lag "$BOOT" "$tag-g" "$tag-in" 2>/dev/null | sed -n 's/^total lag //p')"
     sleep 1
   done) >"$RUN/$tag.lag" &
  lag_pid=$!
  PIDS+=("$lag_pid")
  "$KIT" gen "$BOOT" "$tag-in" $((RATE * SECONDS_OF_LOAD)) --rate $RATE >/dev/null 2>&1 &
  gen_pid=$!
  PIDS+=("$gen_pid")
  sleep "$KILL_AT_S"
  kill_ms=$(now_ms)
  kill -9 "$r1"
  sleep 1
  id2=r1
  if [[ $choice == new ]]; then id2="r1-new"; fi
  start "$id2"
  r1=$STARTED
  wait "$gen_pid" || true
  sleep 20
  kill -TERM "$r1" "$r2" 2>/dev/null || true
  wait "$r1" "$r2" 2>/dev/null || true
  kill "$watch_pid" "$lag_pid" 2>/dev/null || true
  wait "$watch_pid" "$lag_pid" 2>/dev/null || true
  say "$choice: lso_stall_after_kill_ms=$(lso_stall_ms "$RUN/$tag.lso" "$kill_ms")" \
    "lag_recovery_ms=$(lag_recovery_ms "$RUN/$tag.lag" "$kill_ms")"
}

for c in "${CHOICES[@]}"; do
  measure "$c"
done
say "took $((SECONDS - T_START)) s"
