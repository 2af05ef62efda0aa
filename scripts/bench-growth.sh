#!/usr/bin/env bash
# Growth and purge-under-load benchmarks. Run through
# scripts/bench.sh --growth [--quick] | --purge [--quick]; not part of CI.
#
#   --growth          preload idempotency_requests to 0, 1, 3 and 10 million
#                     records (about 5 orders each) with MariaDB's buffer pool at
#                     256 MiB; at each step: the worker's decide rate on a backlog,
#                     latency (p99) at a fixed produce rate, table and index sizes,
#                     the buffer pool hit rate over the step's runs. Prints
#                       growth: decide rate at 10M / at 0 = X (p99 ... ms -> ... ms)
#                     and writes growth.png (rate and p99 against rows).
#   --growth --quick  steps 0 and 1 million (a few minutes); the line says "at 1M".
#   --purge           5 million purgeable records (--quick: 200,000); the worker's
#                     maximum rate on a backlog, then p99 at half of it without
#                     and with `order-worker purge` running beside it, and the
#                     purge's rows/s.
#
# Environment: OW_GROWTH_RATE (fixed produce rate for p99, batches/s; default
# 500), OW_GROWTH_SECONDS (length of each rate run; default 40),
# OW_GROWTH_BACKLOG (batches of the backlog run; default 100000: with 30,000
# the window was 2-3 s and step 0 read 10,680-18,039 batches/s in four runs),
# OW_GROWTH_POOL (MariaDB's buffer pool for --growth; default 256M),
# OW_BENCH_JVM_WARMUP_S and OW_BENCH_PIPELINE_WARMUP_S (the warm-ups of
# scripts/bench-warmup.sh before the first paced run; default 20 and 30),
# OW_GROWTH_BENCH_ARGS (more ow-bench options for every run, e.g.
# "--tuned-lanes 8"),
# OW_PURGE_ROWS (purgeable records for --purge; default 5000000),
# OW_PURGE_SECONDS (how long the purge may run beside the worker; default 180),
# OW_PURGE_BATCH (rows per purge chunk; default 500), OW_PURGE_MAX_RATE (also
# a second purge run with --max-rate this many records/s).
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
messages bench --stderr --width 4 --die ERROR 2
clock_start

MODE="" QUICK=0 OUT=""
while (($# > 0)); do
  case $1 in
    --growth) MODE=growth ;;
    --purge) MODE=purge ;;
    --quick) QUICK=1 ;;
    --out) [[ $# -ge 2 ]] || die "--out needs a directory"; OUT=$2; shift ;;
    *) die "unknown option $1 (with --growth or --purge: --quick, --out DIR)" ;;
  esac
  shift
done
[[ -n $MODE ]] || die "--growth or --purge"

RATE="${OW_GROWTH_RATE:-500}"
SECS="${OW_GROWTH_SECONDS:-40}"
BACKLOG="${OW_GROWTH_BACKLOG:-100000}"
if [[ $MODE == growth ]]; then
  if ((QUICK)); then STEPS=(0 1000000); else STEPS=(0 1000000 3000000 10000000); fi
  export OW_MARIADB_BUFFER_POOL="${OW_GROWTH_POOL:-256M}"
else
  if ((QUICK)); then STEPS=(200000); else STEPS=("${OW_PURGE_ROWS:-5000000}"); fi
fi
TOP=${STEPS[-1]}
OW_RUN_DIR="$ROOT/.run/$MODE"
if ((QUICK)); then OW_RUN_DIR+="-quick"; fi
export OW_RUN_DIR
OUT="${OUT:-$OW_RUN_DIR/results-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd -P)"

# Disk: about 1.1 KB per request and 0.35 KB per order in the tables
# (measured by --quick), plus one 500,000-record chunk of load files.
need_kb=$(((TOP / 1000) * 3300 + 2000000))
avail_kb=$(df -Pk "$ROOT" | awk 'NR == 2 { print $4 }')
say "disk: $((avail_kb / 1048576)) GiB free where the data goes, about $((need_kb / 1048576 + 1)) GiB needed for $TOP records"
((avail_kb > need_kb)) || die "not enough free disk for $TOP records (need about $((need_kb / 1048576 + 1)) GiB)"

cmake --build "$BUILD" --target order-worker ow-bench ow-growth-gen ow-kit >/dev/null || die "build failed"

trap 'exit 130' INT TERM
services_up >&2
need_kafka

# The broker warms up as in scripts/bench.sh, so that step 0 is not
# measured on a cold broker (the first full run's step 0 was, which made
# every later step look better than it). The paced
# warm-up matters for the p99 at step 0, which the target compares with
# the top step's: the second full curve's step 0 was 202 ms, from 57-99 ms
# at the other steps, with only the JVM warm-up before it.
# shellcheck source=scripts/bench-warmup.sh
source "$ROOT/scripts/bench-warmup.sh"
warm_broker_jvm
fresh_bench() {  # OUT_DIR ARGS...: ow-bench on a database of its own unless ARGS name one
  ow_bench "$1" --no-naive --no-serial --no-db-limit "${@:2}"
}
if [[ $MODE == growth ]]; then
  warm_pipeline "$RATE" "$OUT/pipeline-warmup" fresh_bench --rate "$RATE" || true
fi

DB=owg
sql() { mariadb_at "$OW_MYSQL_PORT" "$@"; }
q() { sql -N -B "$DB" -e "$1"; }
export ORDER_WORKER_MYSQL_HOST=127.0.0.1 ORDER_WORKER_MYSQL_PORT="$OW_MYSQL_PORT" \
  ORDER_WORKER_MYSQL_USER=root ORDER_WORKER_MYSQL_PASSWORD='' ORDER_WORKER_MYSQL_DATABASE=$DB
sql -e "DROP DATABASE IF EXISTS $DB; CREATE DATABASE $DB"
"$BIN" migrate >"$OUT/migrate.log" 2>&1 || die "migrate failed ($OUT/migrate.log)"

{
  echo "bench: $(run_stamp), mode $MODE$( ((QUICK)) && echo ' --quick')"
  echo "bench: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) at start; MariaDB $OW_MARIADB_VERSION, buffer pool $(q 'SELECT @@innodb_buffer_pool_size DIV 1048576') MiB, redo log $(q 'SELECT @@innodb_log_file_size DIV 1048576') MiB"
} | tee "$OUT/growth.txt"

# Preload: generated rows through LOAD DATA LOCAL INFILE, 500,000 records
# per file, oldest first (the primary key grows; the unique keys are hit in
# random order, as the worker's are).
LOADED=0
preload_to() {  # TARGET
  local target=$1 chunk n t0=$SECONDS from=$LOADED
  while ((LOADED < target)); do
    chunk=$((target - LOADED < 500000 ? target - LOADED : 500000))
    "$BUILD/ow-growth-gen" "$LOADED" "$chunk" "$OUT/req.tsv" "$OUT/ord.tsv"
    sql --local-infile=1 "$DB" -e "
      SET unique_checks = 0;
      LOAD DATA LOCAL INFILE '$OUT/req.tsv' INTO TABLE idempotency_requests
        (id, user_id, idempotency_key, @digest, status, response_status, response_body,
         created_at, updated_at) SET request_digest = UNHEX(@digest);
      LOAD DATA LOCAL INFILE '$OUT/ord.tsv' INTO TABLE orders
        (id, order_no, user_id, external_order_no, amount, product_id, quantity, request_id,
         created_at);"
    LOADED=$((LOADED + chunk))
    n=$((SECONDS - t0))
    say "preload: $LOADED records ($((n > 0 ? (LOADED - from) / n : 0)) records/s)"
  done
  rm -f "$OUT/req.tsv" "$OUT/ord.tsv"
}

# InnoDB's page reads, page writes, waits for a free page, pages flushed,
# then mariadbd's CPU time in clock ticks
io_counters() {
  local io cpu
  # Separate assignments: a failed query or read stops the script (set -e).
  io=$(q "SELECT GROUP_CONCAT(VARIABLE_VALUE ORDER BY FIELD(VARIABLE_NAME, 'INNODB_DATA_READS',
       'INNODB_DATA_WRITES', 'INNODB_BUFFER_POOL_WAIT_FREE', 'INNODB_BUFFER_POOL_PAGES_FLUSHED')
       SEPARATOR ' ') FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME IN
       ('INNODB_DATA_READS', 'INNODB_DATA_WRITES', 'INNODB_BUFFER_POOL_WAIT_FREE',
        'INNODB_BUFFER_POOL_PAGES_FLUSHED')") || return
  cpu=$(awk '{ print $14 + $15 }' "/proc/$(<"$OW_RUN_DIR/mariadb.pid")/stat") || return
  echo "$io $cpu"
}
io_per_batch() {  # BEFORE AFTER LABEL: a backlog run's I/O and MariaDB CPU per decided batch
  awk -v a="$1" -v b="$2" -v n="$BACKLOG" -v l="$3" -v hz="$(getconf CLK_TCK)" 'BEGIN {
    split(a, x, " "); split(b, y, " ");
    printf "  backlog I/O per batch (%s): %.2f page reads, %.2f writes, %.2f pages flushed; %d waits for a free page; mariadbd %.0f us CPU\n",
      l, (y[1] - x[1]) / n, (y[2] - x[2]) / n, (y[4] - x[4]) / n, y[3] - x[3], (y[5] - x[5]) * 1e6 / hz / n }'
}
backlog_run() {  # NAME LABEL: a backlog of $BACKLOG batches, with its I/O and CPU per batch
  local before
  before=$(io_counters)
  bench "$1" -n "$BACKLOG"
  io_per_batch "$before" "$(io_counters)" "$2, $(backlog_rate "$1") batches/s" | tee -a "$OUT/growth.txt"
}

# What fills the buffer pool: MiB of pages per index (data pages only)
pool_by_index() {
  q "SELECT CONCAT(REPLACE(SUBSTRING_INDEX(TABLE_NAME, '.', -1), CHAR(96), ''), '.', INDEX_NAME, '=',
       ROUND(COUNT(*) * @@innodb_page_size / 1048576)) FROM information_schema.INNODB_BUFFER_PAGE_LRU
       WHERE INDEX_NAME IS NOT NULL GROUP BY TABLE_NAME, INDEX_NAME ORDER BY COUNT(*) DESC LIMIT 8" |
    tr '\n' ' '
}

status_var() { q "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = '$1'"; }

# "requests orders requests_data requests_index orders_data orders_index
# B/request B/order" (MiB; bytes are data + index per row), after ANALYZE.
sizes() {
  q "ANALYZE TABLE idempotency_requests, orders" >/dev/null
  q "SELECT @r := (SELECT COUNT(*) FROM idempotency_requests), @o := (SELECT COUNT(*) FROM orders),
       ROUND(SUM(IF(table_name = 'idempotency_requests', data_length, 0)) / 1048576),
       ROUND(SUM(IF(table_name = 'idempotency_requests', index_length, 0)) / 1048576),
       ROUND(SUM(IF(table_name = 'orders', data_length, 0)) / 1048576),
       ROUND(SUM(IF(table_name = 'orders', index_length, 0)) / 1048576),
       ROUND(SUM(IF(table_name = 'idempotency_requests', data_length + index_length, 0)) / GREATEST(1, @r)),
       ROUND(SUM(IF(table_name = 'orders', data_length + index_length, 0)) / GREATEST(1, @o))
     FROM information_schema.TABLES WHERE table_schema = '$DB'" | tr '\t' ' '
}

index_sizes() {
  q "SELECT CONCAT(table_name, '.', index_name, '=', ROUND(stat_value * @@innodb_page_size / 1048576), 'MiB')
     FROM mysql.innodb_index_stats WHERE database_name = '$DB' AND stat_name = 'size'
     ORDER BY table_name, index_name" | tr '\n' ' '
}

NUMBER=100000000  # ow-bench numbers its messages from here, a fresh range per run
bench() {  # NAME ARGS...: runs ow-bench on the preloaded database; output in $OUT/NAME.txt
  local name=$1
  shift
  mkdir -p "$OUT/$name"
  # shellcheck disable=SC2086 # OW_GROWTH_BENCH_ARGS is a list of options
  fresh_bench "$OUT/$name" --database $DB --random-keys --first-number "$NUMBER" \
    ${OW_GROWTH_BENCH_ARGS:-} "$@" >"$OUT/$name.txt" 2>"$OUT/$name.log" ||
    die "ow-bench $name failed (see $OUT/$name.txt and $OUT/$name.log)"
  NUMBER=$((NUMBER + 100000000))
}
backlog_rate() { awk -F'|' '$2 ~ /tuned/ { gsub(/ /, "", $7); print $7 }' "$OUT/$1.txt"; }
# "latency after a 10 s warm-up: N inputs, p50/p95/p99 A / B / C ms, p99.9 D ms" -> C
steady_p99() { sed -n 's/^latency after .*p50\/p95\/p99 [0-9]* \/ [0-9]* \/ \([0-9]*\) ms\(,.*\)\{0,1\}$/\1/p' "$OUT/$1.txt"; }

growth() {
  local step label rate p99 r0="" p0="" sz rq0 rd0 rq1 rd1 hit
  printf '# rows requests orders decide_per_s p99_ms req_data_MiB req_index_MiB ord_data_MiB ord_index_MiB B_per_request B_per_order pool_hit_pct\n' >"$OUT/growth.dat"
  for step in "${STEPS[@]}"; do
    preload_to "$step"
    rq0=$(status_var Innodb_buffer_pool_read_requests)
    rd0=$(status_var Innodb_buffer_pool_reads)
    # Two backlog runs; the second is measured. At step 0 the first one's
    # rows fit in the free part of the pool, so nothing is written back while
    # it runs: 19,712 batches/s there against 12,612 at 1M with 0.11 page
    # reads per batch (cbafeb7). After it, the pool is full at every step.
    say "step $step: two backlog runs ($BACKLOG batches each), then ${SECS} s at $RATE batches/s"
    backlog_run "first-$step" "first run"
    backlog_run "backlog-$step" "measured run"
    echo "  buffer pool after the backlog run, MiB by index: $(pool_by_index)" | tee -a "$OUT/growth.txt"
    bench "rate-$step" --rate "$RATE" -n $((RATE * SECS))
    rq1=$(status_var Innodb_buffer_pool_read_requests)
    rd1=$(status_var Innodb_buffer_pool_reads)
    hit=$(awk -v a=$((rq1 - rq0)) -v b=$((rd1 - rd0)) 'BEGIN { printf "%.2f", (a > 0 ? 100 * (1 - b / a) : 0) }')
    sz=$(sizes) # after the runs: the rows they added are counted too
    rate=$(backlog_rate "backlog-$step")
    p99=$(steady_p99 "rate-$step")
    [[ -n $rate && -n $p99 ]] || die "step $step: no figures in $OUT/backlog-$step.txt or rate-$step.txt"
    read -r nreq nord rdata ridx odata oidx bpr bpo <<<"$sz"
    printf '%s %s %s %s %s %s %s %s %s %s %s %s\n' "$step" "$nreq" "$nord" "$rate" "$p99" "$rdata" \
      "$ridx" "$odata" "$oidx" "$bpr" "$bpo" "$hit" >>"$OUT/growth.dat"
    printf 'growth step %s: %s requests, %s orders; decide %s batches/s (backlog), p99 %s ms at %s/s; requests data %s MiB index %s MiB, orders data %s MiB index %s MiB; %s B/request, %s B/order; buffer pool %s MiB, hit rate %s %%\n' \
      "$step" "$nreq" "$nord" "$rate" "$p99" "$RATE" "$rdata" "$ridx" "$odata" "$oidx" "$bpr" "$bpo" \
      "$(q 'SELECT @@innodb_buffer_pool_size DIV 1048576')" "$hit" | tee -a "$OUT/growth.txt"
    echo "  indexes: $(index_sizes)" | tee -a "$OUT/growth.txt"
    if [[ -z $r0 ]]; then r0=$rate p0=$p99; fi
    label=$((step / 1000000))M
  done
  awk -v r0="$r0" -v r="$rate" -v p0="$p0" -v p="$p99" -v l="$label" 'BEGIN {
    printf "growth: decide rate at %s / at 0 = %.2f (p99 at the fixed rate %d ms at 0, %d ms at %s: x%.2f)\n",
      l, r / r0, p0, p, l, (p0 > 0 ? p / p0 : 0) }' | tee -a "$OUT/growth.txt"
  cat >"$OUT/growth.gp" <<EOF
set terminal pngcairo size 900,500
set output '$OUT/growth.png'
set title 'order-worker: decide rate and p99 against rows (buffer pool $(q 'SELECT @@innodb_buffer_pool_size DIV 1048576') MiB)'
set xlabel 'request records (millions)'
set ylabel 'decided batches/s (backlog)'
set y2label 'p99 ms at $RATE batches/s'
set y2tics
set ytics nomirror
set yrange [0:*]
set y2range [0:*]
set grid
plot '$OUT/growth.dat' using (\$2/1e6):4 with linespoints title 'decide rate', \
     '' using (\$2/1e6):5 axes x1y2 with linespoints title 'p99'
EOF
  if gnuplot "$OUT/growth.gp" 2>"$OUT/gnuplot.log"; then
    say "plot: $OUT/growth.png"
  else
    say "gnuplot failed (see $OUT/gnuplot.log); the data is in $OUT/growth.dat"
  fi
}

# A purge beside the worker producing at RATE for PURGE_SECONDS; NAME and
# extra purge options. Prints the purge's rows/s and the run's p99. The
# benchmark's workers keep the default cache.ttl_s (300 s), which purge is
# told, so that a one-day horizon is allowed.
purge_beside() {  # NAME RATE OPTIONS...
  local name=$1 rate=$2 pid t0 t1 deleted stopped=""
  shift 2
  rm -f "$OUT/purge-$name.done"
  t0=$(date +%s.%N)
  (
    "$BUILD/order-worker" purge --older-than 1d --workers-cache-ttl 300 \
      --batch "${OW_PURGE_BATCH:-500}" "$@" \
      >"$OUT/purge-$name.out" 2>"$OUT/purge-$name.log" &
    echo $! >"$OUT/purge-$name.pid"
    wait $! || true
    date +%s.%N >"$OUT/purge-$name.done"
  ) &
  pid=$!
  bench "rate-$name" --rate "$rate" -n $((rate * ${OW_PURGE_SECONDS:-180}))
  if [[ ! -f $OUT/purge-$name.done ]]; then
    kill -INT "$(cat "$OUT/purge-$name.pid")" 2>/dev/null || true
    stopped=" (stopped when the rate run ended)"
  fi
  wait "$pid" || true
  t1=$(cat "$OUT/purge-$name.done")
  deleted=$(sed -n 's/^purge: deleted \([0-9]*\) request records.*/\1/p' "$OUT/purge-$name.out")
  {
    echo "purge $name: order-worker purge --older-than 1d --workers-cache-ttl 300 --batch ${OW_PURGE_BATCH:-500} $*: ${deleted:-0} records in $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.0f", b - a }') s$stopped: $(awk -v n="${deleted:-0}" -v a="$t0" -v b="$t1" 'BEGIN { printf "%.0f", n / (b - a) }') rows/s"
    echo "purge $name: worker at $rate batches/s: p99 $(steady_p99 "rate-$name") ms; $(grep '^p99 ms per 5 s' "$OUT/rate-$name.txt")"
  } | tee -a "$OUT/growth.txt"
}

purge() {
  local max half left
  preload_to "$TOP"
  say "sizes: $(sizes)"
  bench backlog -n "$BACKLOG"
  max=$(backlog_rate backlog)
  half=$(awk -v m="$max" 'BEGIN { printf "%d", m / 2 }')
  echo "purge: $TOP purgeable records; worker maximum $max batches/s (backlog); half: $half" | tee -a "$OUT/growth.txt"
  # Both rate runs after a paced warm-up: a cold first run would raise the
  # p99 without the purge that the one with it is compared against.
  warm_pipeline "$half" "$OUT/pipeline-warmup" fresh_bench --rate "$half" || true
  bench rate-without --rate "$half" -n $((half * SECS))
  echo "purge without: worker at $half batches/s: p99 $(steady_p99 rate-without) ms; $(grep '^p99 ms per 5 s' "$OUT/rate-without.txt")" | tee -a "$OUT/growth.txt"
  purge_beside with "$half"
  if [[ -n ${OW_PURGE_MAX_RATE:-} ]]; then
    # The throttled purge gets as many records as the first one had: new
    # ones in place of those it deleted (with --quick, all of them).
    left=$(q "SELECT COUNT(*) FROM idempotency_requests WHERE created_at < NOW() - INTERVAL 1 DAY")
    preload_to $((LOADED + TOP - left))
    purge_beside "with-max-rate" "$half" --max-rate "$OW_PURGE_MAX_RATE"
  fi
}

if [[ $MODE == growth ]]; then growth; else purge; fi
say "results in $OUT; took $((SECONDS - T_START)) s"
