#!/usr/bin/env bash
# Deciding throughput over 1, 2 and 3 user shards, with each
# mariadbd's CPU. Started by `scripts/bench.sh --shards [--quick]`.
#
# Starts Kafka and three MariaDB instances under .run/bench-shards (one
# scripts/services.sh state directory each). For K = 1, 2, 3: fresh
# databases on the first K instances, migrated as K shards; N new batches
# (1-10 orders, no retries) preloaded on an 8-partition topic; then two
# replicas with mysql.shards = those K databases decide the backlog. The
# rate is measured between the first committed offset and the last (so the
# group join is not counted), from the group's committed offsets polled
# every 200 ms. CPU is each process's utime + stime over that window, from
# /proc, as a share of one core.
#
#   OW_BENCH_SHARDS_N=20000 (--quick: 5000)  OW_BENCH_SHARDS_LANES=4
#   --lanes-per-shard   worker.lanes = 4 x K instead (a lane runs its K
#                       transactions one after the other, so K shards make
#                       each lane's micro-batch K commits long)
#
# The machine's cores are shared by everything here, so the curve flattens
# early; docs/tuning.md ("Shards") has the model for separate machines.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
messages bench-shards --stderr --die ERROR 2
clock_start

N="${OW_BENCH_SHARDS_N:-20000}"
[[ " $* " == *" --quick "* ]] && N="${OW_BENCH_SHARDS_N:-5000}"
LANES="${OW_BENCH_SHARDS_LANES:-4}"
PER_SHARD=0
[[ " $* " == *" --lanes-per-shard "* ]] && PER_SHARD=1
PARTS=8
RUN="$ROOT/.run/bench-shards"
CLK=$(getconf CLK_TCK)

cmake --build "$BUILD" --target order-worker ow-kit >/dev/null || die "build failed"
trap 'exit 130' INT TERM

rm -rf "$RUN"
mkdir -p "$RUN/db1" "$RUN/db2"
services_up_in "$RUN" all >&2
services_up_in "$RUN/db1" mariadb >&2
services_up_in "$RUN/db2" mariadb >&2
WORKERS=()
on_exit 'kill_each 9 "${WORKERS[@]}"; wait 2>/dev/null'
services_env "$RUN"
need_kafka
PORTS=("$OW_MYSQL_PORT" "$(instance_port "$RUN/db1")" "$(instance_port "$RUN/db2")")
PIDS=("$(cat "$RUN/mariadb.pid")" "$(cat "$RUN/db1/mariadb.pid")" "$(cat "$RUN/db2/mariadb.pid")")

echo "bench-shards: $(run_stamp); $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) at start"
echo "bench-shards: $N new batches per run, 2 replicas x $LANES lanes$( ((PER_SHARD)) && echo ' per shard'), $PARTS partitions, MariaDB $OW_MARIADB_VERSION (durable commits)"
printf 'bench-shards: %-6s %10s %10s %12s %s\n' shards batches/s orders/s "workers CPU" "mariadbd CPU (per shard, % of one core)"

run_k() {  # K
  local k=$1 list="" s db=bench_k$1 in=bsh-in-$1 out=bsh-out-$1 dlq=bsh-dlq-$1 group=bsh-group-$1
  local orders i
  for ((s = 0; s < k; s++)); do
    mariadb_at "${PORTS[$s]}" -e "CREATE DATABASE $db"
    list+="${list:+,}127.0.0.1:${PORTS[$s]}/$db"
  done
  ORDER_WORKER_MYSQL_USER=root ORDER_WORKER_MYSQL_SHARDS="$list" "$BIN" migrate >/dev/null
  create_topics $PARTS "$in" "$out" "$dlq" >/dev/null
  "$KIT" gen "$OW_KAFKA_BOOTSTRAP" "$in" "$N" --seed $((20261200 + k)) --retry 0 --reuse 0 \
    --clash 0 --invalid 0 --items 10 --prefix "k$k" 2>"$RUN/gen-$k.log"
  WORKERS=()
  for i in 1 2; do
    ORDER_WORKER_KAFKA_BOOTSTRAP_SERVERS="$OW_KAFKA_BOOTSTRAP" ORDER_WORKER_KAFKA_GROUP_ID=$group \
      ORDER_WORKER_TOPIC_INPUT=$in ORDER_WORKER_TOPIC_RESULTS=$out ORDER_WORKER_TOPIC_DLQ=$dlq \
      ORDER_WORKER_MYSQL_USER=root ORDER_WORKER_MYSQL_SHARDS="$list" \
      ORDER_WORKER_WORKER_LANES=$((PER_SHARD ? LANES * k : LANES)) \
      ORDER_WORKER_COMMIT_INTERVAL_MS=200 ORDER_WORKER_LOG_LEVEL=warn \
      "$BIN" run 2>>"$RUN/worker-$k-$i.log" &
    WORKERS+=("$!")
  done
  backlog_window $group "$in" "$N" "${PIDS[@]}" || case $? in
    1) die "K=$k: nothing was committed within 120 s (see $RUN/worker-$k-*.log)" ;;
    2) die "K=$k: only $WIN_C of $N committed (see $RUN/worker-$k-*.log)" ;;
    *) die "K=$k: a worker exited with status $WIN_STATUS (see $RUN/worker-$k-*.log)" ;;
  esac
  orders=0
  for ((s = 0; s < k; s++)); do
    orders=$((orders + $(mariadb_at "${PORTS[$s]}" -N -e "SELECT COUNT(*) FROM $db.orders")))
  done
  local ms=$WIN_MS cpu=""
  for ((s = 0; s < 3; s++)); do
    cpu+="$(awk -v d="${WIN_TICKS[s]}" -v hz="$CLK" -v ms="$ms" 'BEGIN { printf "%d%%", 100 * d / hz / (ms / 1000) }')"
    ((s < 2)) && cpu+=" "
  done
  awk -v n="$WIN_N" -v o="${orders:-0}" -v nn="$N" -v ms="$ms" -v w="$WIN_WORKERS" -v hz="$CLK" -v k="$k" -v cpu="$cpu" \
    'BEGIN { printf "bench-shards: %-6d %10.0f %10.0f %11.0f%% %s\n", k, n / (ms / 1000), o * (n / nn) / (ms / 1000), 100 * w / hz / (ms / 1000), cpu }'
}

for k in 1 2 3; do
  say "K=$k: preloading $N batches, then two replicas decide them"
  run_k "$k" | tee -a "$RUN/bench-shards.txt"
done
say "took $((SECONDS - T_START)) s"
