#!/usr/bin/env bash
# Deciding throughput on a three-node Galera cluster against a single
# MariaDB. Started by `scripts/bench.sh --galera [--quick]`.
#
# Starts Kafka and a single MariaDB (scripts/services.sh) and a Galera
# cluster (scripts/galera-cluster.sh) under .run/bench-galera. For each
# target: a fresh database, N new batches (1-10 orders, no retries)
# preloaded on an 8-partition topic, then two replicas decide the backlog,
# with mysql.host the single server or the cluster's three nodes (the
# worker writes to one node; the others apply its write sets). The rate is
# measured between the first committed offset and the last (the group join
# is not counted), from the group's committed offsets polled every 200 ms,
# and the target's CPU is its mariadbd processes' utime + stime over that
# window, as a share of one core. Prints a line per target and
#   ratios: galera/single = X.XX (batches/s)
#
#   OW_BENCH_GALERA_N=20000 (--quick: 5000)  OW_BENCH_GALERA_LANES=4
#
# The three nodes share this machine's cores with the worker and the
# broker, and replication between them costs no network latency: the
# ratio says what certification and applying cost here, not what a
# cluster over a network gives (docs/tuning.md, "Knobs").
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
messages bench-galera --stderr --die ERROR 2
clock_start

N="${OW_BENCH_GALERA_N:-20000}"
[[ " $* " == *" --quick "* ]] && N="${OW_BENCH_GALERA_N:-5000}"
LANES="${OW_BENCH_GALERA_LANES:-4}"
PARTS=8
export OW_RUN_DIR="$ROOT/.run/bench-galera"
RUN="$OW_RUN_DIR"
CLK=$(getconf CLK_TCK)

cmake --build "$BUILD" --target order-worker ow-kit >/dev/null || die "build failed"
trap 'exit 130' INT TERM

rm -rf "$RUN"
mkdir -p "$RUN"
services_up_in "$RUN" all >&2
on_exit '"$ROOT/scripts/galera-cluster.sh" stop >/dev/null 2>&1'
"$ROOT/scripts/galera-cluster.sh" start >&2
WORKERS=()
on_exit 'kill_each 9 "${WORKERS[@]}"; wait 2>/dev/null'
services_env "$RUN"
# shellcheck disable=SC1091  # written by scripts/galera-cluster.sh
source "$RUN/galera.env"
[[ $OW_BROKER_KIND == kafka ]] || die "Apache Kafka did not start; run scripts/deps.sh"

echo "bench-galera: $(run_stamp); $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) at start"
echo "bench-galera: $N new batches per run, 2 replicas x $LANES lanes, $PARTS partitions; single: MariaDB $OW_MARIADB_VERSION; galera: 3 nodes, $OW_GALERA_VERSION, Galera $OW_GALERA_PROVIDER_VERSION (durable commits on every node)"
printf 'bench-galera: %-7s %10s %10s %12s %s\n' target batches/s orders/s "workers CPU" "mariadbd CPU (% of one core, per node)"

RATE_OF=()  # batches/s per target, for the ratio
run_target() {  # NAME HOSTS PORT PIDS...
  local name=$1 hosts=$2 port=$3 db=bench_$1 in=bg-in-$1 out=bg-out-$1 dlq=bg-dlq-$1 group=bg-group-$1
  local orders i host=${2%%,*} logs="$RUN/worker-$1-*.log"
  mariadb_at "$host:$port" -e "CREATE DATABASE $db"
  ORDER_WORKER_MYSQL_USER=root ORDER_WORKER_MYSQL_HOST="$host" ORDER_WORKER_MYSQL_PORT="$port" \
    ORDER_WORKER_MYSQL_DATABASE=$db "$BIN" migrate >/dev/null
  create_topics $PARTS "$in" "$out" "$dlq" >/dev/null
  "$KIT" gen "$OW_KAFKA_BOOTSTRAP" "$in" "$N" --seed 20261205 --retry 0 --reuse 0 \
    --clash 0 --invalid 0 --items 10 --prefix "$name" 2>"$RUN/gen-$name.log"
  WORKERS=()
  for i in 1 2; do
    ORDER_WORKER_KAFKA_BOOTSTRAP_SERVERS="$OW_KAFKA_BOOTSTRAP" ORDER_WORKER_KAFKA_GROUP_ID=$group \
      ORDER_WORKER_TOPIC_INPUT=$in ORDER_WORKER_TOPIC_RESULTS=$out ORDER_WORKER_TOPIC_DLQ=$dlq \
      ORDER_WORKER_MYSQL_USER=root ORDER_WORKER_MYSQL_HOST="$hosts" ORDER_WORKER_MYSQL_PORT="$port" \
      ORDER_WORKER_MYSQL_DATABASE=$db ORDER_WORKER_WORKER_LANES="$LANES" \
      ORDER_WORKER_COMMIT_INTERVAL_MS=200 ORDER_WORKER_LOG_LEVEL=warn \
      "$BIN" run 2>>"$RUN/worker-$name-$i.log" &
    WORKERS+=("$!")
  done
  backlog_window "$group" "$in" "$N" "${@:4}" || case $? in
    1) die "$name: nothing was committed within 120 s (see $logs)" ;;
    2) die "$name: only $WIN_C of $N committed within 600 s (see $logs)" ;;
    *) die "$name: a worker exited with status $WIN_STATUS (see $logs)" ;;
  esac
  orders=$(mariadb_at "$host:$port" -N -e "SELECT COUNT(*) FROM $db.orders")
  local ms=$WIN_MS cpu=""
  for i in "${!WIN_TICKS[@]}"; do
    cpu+="$(awk -v d="${WIN_TICKS[i]}" -v hz="$CLK" -v ms="$ms" 'BEGIN { printf "%d%% ", 100 * d / hz / (ms / 1000) }')"
  done
  RATE_OF+=("$(awk -v n="$WIN_N" -v ms="$ms" 'BEGIN { printf "%.1f", n / (ms / 1000) }')")
  awk -v n="$WIN_N" -v o="${orders:-0}" -v nn="$N" -v ms="$ms" -v w="$WIN_WORKERS" -v hz="$CLK" -v t="$name" -v cpu="$cpu" \
    'BEGIN { printf "bench-galera: %-7s %10.0f %10.0f %11.0f%% %s\n", t, n / (ms / 1000), o * (n / nn) / (ms / 1000), 100 * w / hz / (ms / 1000), cpu }' |
    tee -a "$RUN/bench-galera.txt"
}

say "single MariaDB: preloading $N batches, then two replicas decide them"
run_target single 127.0.0.1 "$OW_MYSQL_PORT" "$(cat "$RUN/mariadb.pid")"
say "Galera cluster: the same on mysql.host=$OW_GALERA_HOSTS"
run_target galera "$OW_GALERA_HOSTS" "$OW_GALERA_PORT" \
  "$(cat "$RUN/galera/node1/mariadbd.pid")" "$(cat "$RUN/galera/node2/mariadbd.pid")" \
  "$(cat "$RUN/galera/node3/mariadbd.pid")"
awk -v g="${RATE_OF[1]}" -v s="${RATE_OF[0]}" \
  'BEGIN { printf "ratios: galera/single = %.2f (batches/s)\n", g / s }' | tee -a "$RUN/bench-galera.txt"
say "took $((SECONDS - T_START)) s"
