#!/usr/bin/env bash
# The benchmark: starts its own MariaDB and Apache Kafka under .run/bench,
# runs tools/ow_bench.c (build/ow-bench) against the built order-worker, and
# stops the services again. Prints a table (batches/s, orders/s, latency
# p50/p95/p99, CPU seconds, peak RSS per configuration) and the line
#   ratios: tuned/naive = X.XX (batches/s), tuned/db-limit = Y.YY (orders/s)
#
#   scripts/bench.sh                  100,000 batches: tuned, naive (first 5,000,
#                                     at most 120 s), serial, database limit
#   scripts/bench.sh --quick          5,000 batches, naive on 1,000 (at most 20 s)
#   scripts/bench.sh --rate R         produce R batches/s while the worker runs; latency
#                                     also without the first --warmup S (10) seconds. A
#                                     discarded run of the same shape comes first, for
#                                     OW_BENCH_PIPELINE_WARMUP_S (30) seconds of load
#   scripts/bench.sh --sweep          lanes {1,2,4,8} x batch {1,8,32,64,128} on
#                                     20,000 batches: sweep.csv and sweep.png
#   scripts/bench.sh --sweep --small-grid     lanes {1,2,4} x batch {1,16,64}
#   scripts/bench.sh --sweep --repeat 3       each point 3 times (in rounds): the median,
#                                     with min-max bars in the plot
#   scripts/bench.sh --items-1000 -n 2000     every batch 1,000 orders (peak RSS)
#   scripts/bench.sh --verify ...     also run ow-verify on every completed run
#   scripts/bench.sh --broker-cpus 1 --rate R ...   pin every thread of the broker's
#                                     JVM to these CPUs (taskset) after its warm-up, to
#                                     see what it takes from the worker
#   scripts/bench.sh --broker-nice 10 --rate R ...  every thread of the broker's JVM at
#                                     that niceness after the warm-ups
#   scripts/bench.sh --broker-tmpfs --rate R ...    the broker's log directory in /dev/shm,
#                                     so its writeback does not share the disk with
#                                     MariaDB's commits (as on separate hosts)
#   scripts/bench.sh --out DIR ...    results in DIR (default .run/bench/results-<time>)
#   scripts/bench.sh --growth [--quick]   rows 0..10M (--quick: 0, 1M): decide rate, p99,
#                                     sizes, buffer pool hit rate; growth.png
#   scripts/bench.sh --replay [--quick]  decide N batches, then a cold worker in a new
#                                     group on the same topic and database (every input
#                                     a replay): ratios: replay/decide = X
#   scripts/bench.sh --retry-storm [--quick]  every batch sent three times within a
#                                     second, retry cache on and off
#   scripts/bench.sh --purge [--quick]    p99 with and without a purge of 5M records
#                                     (--quick: 200,000) beside the worker; see
#                                     scripts/bench-growth.sh
#   scripts/bench.sh --eos [--quick]  the worker in each processing.guarantee: as fast as
#                                     it goes over 300,000 batches (--quick: 5,000), then
#                                     each at half the at-least-once maximum for 40 s
#                                     (the first 10 s left out of the latency);
#                                     prints ratios: exactly-once/at-least-once = X
#                                     (batches/s) and each mode's p99 to a read_committed
#                                     consumer. OW_BENCH_EO_GUARANTEE=at_least_once runs
#                                     the "exactly-once" runs at least once (a check of
#                                     the plumbing); OW_BENCH_TXN_INTERVAL_MS sets the
#                                     worker's transaction.interval_ms
#   scripts/bench.sh --shards [--quick]  deciding throughput over 1, 2 and 3 user shards
#                                     with each mariadbd's CPU; see
#                                     scripts/bench-shards.sh
#   scripts/bench.sh --cost [--quick]  CPU per batch of the worker, mariadbd and the broker
#                                     (decide, replay, tuned) and the worker's instructions
#                                     per message (callgrind over ow-path); --build DIR
#                                     measures another build: see scripts/bench-cost.sh
#   scripts/bench.sh --galera [--quick]  deciding throughput on a three-node Galera
#                                     cluster against a single MariaDB: ratios:
#                                     galera/single = X; see scripts/bench-galera.sh
#
# Any other option goes to ow-bench (`build/ow-bench --help` lists them),
# e.g. -n 20000, --naive-prefix 500, --tuned-lanes 8, --lanes 1,4,
# --worker-env ORDER_WORKER_BATCH_MAX_WAIT_MS=0.
#
# MariaDB runs with a 1 GiB redo log in every mode; OW_MARIADB_REDO_LOG=96M
# gives MariaDB's own default (the figures before 2026-12-02 afternoon).
#
# Timings are reported, never judged: the script fails only when a run does
# not complete (a worker dies, nothing is committed for --stall-timeout
# seconds, or an input has no result) or a service does not start.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
messages bench --stderr --die ERROR 2
clock_start
export OW_RUN_DIR="$ROOT/.run/bench"

# MariaDB's default 96 MiB redo log held the checkpoint age at its limit
# at 3,100 batches/s, and every lane stalled together while InnoDB flushed
# pages to make room (docs/tuning.md, "Knobs"). A production
# server is sized for its write rate; so is this one, for every mode.
export OW_MARIADB_REDO_LOG="${OW_MARIADB_REDO_LOG:-1G}"

case " $* " in
  *" --growth "* | *" --purge "*) exec "$ROOT/scripts/bench-growth.sh" "$@" ;;
  *" --shards "*) exec "$ROOT/scripts/bench-shards.sh" "$@" ;;
  *" --cost "*) exec "$ROOT/scripts/bench-cost.sh" "$@" ;;
  *" --galera "*) exec "$ROOT/scripts/bench-galera.sh" "$@" ;;
esac

OUT="" QUICK=0 VERIFY=0 SWEEP=0 EOS=0 BROKER_CPUS="" BROKER_NICE="" RATE="" PASS=()
while (($# > 0)); do
  case $1 in
    --rate) [[ $# -ge 2 ]] || die "--rate needs batches per second"; RATE=$2; PASS+=(--rate "$2"); shift ;;
    --quick) QUICK=1 ;;
    --verify) VERIFY=1 ;;
    --sweep) SWEEP=1; PASS+=(--sweep) ;;
    --eos) EOS=1; PASS+=(--eos) ;;
    --small-grid) PASS+=(--lanes "1,2,4" --batches "1,16,64") ;;
    --out) [[ $# -ge 2 ]] || die "--out needs a directory"; OUT=$2; shift ;;
    --broker-cpus) [[ $# -ge 2 ]] || die "--broker-cpus needs a CPU list (e.g. 1)"; BROKER_CPUS=$2; shift ;;
    --broker-nice) [[ $# -ge 2 && $2 =~ ^[0-9]+$ ]] || die "--broker-nice needs a niceness 0-19"; BROKER_NICE=$2; shift ;;
    --broker-tmpfs) export OW_KAFKA_DATA_TMPFS=1 ;;
    -h | --help) script_help; exit 0 ;;
    *) PASS+=("$1") ;;
  esac
  shift
done
if ((QUICK)); then
  # First, so that options given after --quick still win.
  PASS=(-n 5000 --sweep-n 5000 --naive-prefix 1000 --naive-time-limit 20 "${PASS[@]}")
fi
if ((VERIFY)); then PASS+=(--keep-databases); fi
# Enough batches for 40 s at half of a maximum of about 12,000/s.
if ((EOS)) && [[ " ${PASS[*]} " != *" -n "* ]]; then PASS=(-n 300000 "${PASS[@]}"); fi

OUT="${OUT:-$OW_RUN_DIR/results-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd -P)"

# An incremental build: configures once, then only what changed.
if [[ ! -f $BUILD/build.ninja ]]; then
  say "configuring $BUILD"
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DOW_WERROR=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
cmake --build "$BUILD" --target order-worker ow-bench ow-verify ow-kit >/dev/null || die "build failed"
# --eos: each mode's worker variables, as far as this worker has the keys.
if ((EOS)); then
  EO_GUARANTEE="${OW_BENCH_EO_GUARANTEE:-exactly_once_v2}"
  [[ $EO_GUARANTEE == exactly_once_v2 || $EO_GUARANTEE == at_least_once ]] ||
    die "OW_BENCH_EO_GUARANTEE must be exactly_once_v2 or at_least_once"
  if worker_has_key 'processing\.guarantee'; then
    PASS+=(--alo-env ORDER_WORKER_PROCESSING_GUARANTEE=at_least_once
      --eo-env ORDER_WORKER_PROCESSING_GUARANTEE="$EO_GUARANTEE")
  elif [[ $EO_GUARANTEE != at_least_once ]]; then
    die "this order-worker has no processing.guarantee key (no exactly-once mode);" \
      "OW_BENCH_EO_GUARANTEE=at_least_once runs both modes at least once"
  fi
  if worker_has_key 'worker\.replica_id'; then
    PASS+=(--eo-env ORDER_WORKER_WORKER_REPLICA_ID=1)
  fi
  if [[ -n ${OW_BENCH_TXN_INTERVAL_MS:-} ]]; then
    PASS+=(--eo-env ORDER_WORKER_TRANSACTION_INTERVAL_MS="$OW_BENCH_TXN_INTERVAL_MS")
  fi
  if [[ $EO_GUARANTEE == at_least_once ]]; then
    say "OW_BENCH_EO_GUARANTEE=at_least_once: the exactly-once runs are at least once (plumbing check)"
  fi
fi

trap 'exit 130' INT TERM
services_up >&2
need_kafka
WATCH="mariadbd=$(cat "$OW_RUN_DIR/mariadb.pid"),kafka=$(cat "$OW_RUN_DIR/kafka.pid")"
SETUP=""  # what was done to the services, for the log and bench.txt's header
setup_done() { say "$1"; SETUP+=" ($1)"; }

# shellcheck source=scripts/bench-warmup.sh
source "$ROOT/scripts/bench-warmup.sh"
warm_broker_jvm
if [[ -n $RATE ]] && warm_pipeline "$RATE" "$OUT/pipeline-warmup" ow_bench "${PASS[@]}"; then
  setup_done "after a ${OW_BENCH_PIPELINE_WARMUP_S:-30} s pipeline warm-up, discarded"
fi
if [[ -n $BROKER_CPUS ]]; then
  command -v taskset >/dev/null || die "--broker-cpus needs taskset (util-linux)"
  taskset -a -p -c "$BROKER_CPUS" "$(cat "$OW_RUN_DIR/kafka.pid")" >/dev/null ||
    die "taskset could not pin the broker to CPUs $BROKER_CPUS"
  setup_done "broker pinned to CPUs $BROKER_CPUS, every thread of its JVM"
fi
if [[ -n $BROKER_NICE ]]; then
  for task in /proc/"$(cat "$OW_RUN_DIR/kafka.pid")"/task/*; do
    # A thread can exit between the listing and its renice (the JVM retires
    # idle compiler threads): only a failure for a living thread counts.
    renice -n "$BROKER_NICE" -p "${task##*/}" >/dev/null 2>&1 || [[ ! -d $task ]] ||
      die "renice failed for the broker's thread ${task##*/}"
  done
  setup_done "broker at niceness $BROKER_NICE, every thread of its JVM"
fi
if [[ ${OW_KAFKA_DATA_TMPFS:-0} == 1 ]]; then setup_done "broker log directory in /dev/shm"; fi

{
  echo "bench: $(run_stamp)$(git -C "$ROOT" diff --quiet HEAD -- src include 2>/dev/null || echo ' (src modified)')"
  echo "bench: $(nproc) cores ($(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1)), load average $(cut -d' ' -f1-3 /proc/loadavg) at start"
  echo "bench: MariaDB $OW_MARIADB_VERSION on :$OW_MYSQL_PORT (innodb_flush_log_at_trx_commit=1, redo log $(mariadb_at "$OW_MYSQL_PORT" -N -B -e 'SELECT @@innodb_log_file_size DIV 1048576') MiB), $OW_KAFKA_VERSION on $OW_KAFKA_BOOTSTRAP"
  echo "bench: ow-bench ${PASS[*]}$SETUP"
} | tee "$OUT/bench.txt"

set +e
ow_bench "$OUT" --watch "$WATCH" "${PASS[@]}" | tee -a "$OUT/bench.txt"
status=${PIPESTATUS[0]}
set -e

if ((SWEEP)) && [[ -f $OUT/sweep.gp ]]; then
  if command -v gnuplot >/dev/null 2>&1 && gnuplot "$OUT/sweep.gp" 2>"$OUT/gnuplot.log"; then
    say "plot: $OUT/sweep.png"
  else
    say "gnuplot failed or is missing (see $OUT/gnuplot.log); the data is in $OUT/sweep.csv"
  fi
fi

if ((VERIFY)) && ((status == 0)); then
  while read -r name database group input results dlq; do
    say "ow-verify on run '$name'"
    if ! "$BUILD/ow-verify" --bootstrap "$OW_KAFKA_BOOTSTRAP" --group "$group" --input "$input" \
        --results "$results" --dlq "$dlq" --mysql-port "$OW_MYSQL_PORT" --database "$database" \
        >"$OUT/verify-$name.log" 2>&1; then
      status=1
      say "ow-verify found violations in '$name' (see $OUT/verify-$name.log)"
    fi
    grep -E '^verify: (FAIL|figures|all)' "$OUT/verify-$name.log" | tee -a "$OUT/bench.txt" || true
  done < <(sed -n 's/^run-names: //p' "$OUT/bench.txt")
fi

say "results in $OUT: $(cd "$OUT" && ls -- bench.txt runs.csv sweep.csv sweep.png 2>/dev/null | tr '\n' ' ')and worker-*.log"
say "took $((SECONDS - T_START)) s; $( ((status == 0)) && echo 'every run completed' || echo 'a run did NOT complete')"
exit "$status"
