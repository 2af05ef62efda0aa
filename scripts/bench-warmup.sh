# shellcheck shell=bash
# The broker warm-ups that scripts/bench.sh, scripts/bench-growth.sh and
# scripts/bench-cost.sh run before they measure. Sourced after
# scripts/lib.sh (KIT, say, die) and the services' variables
# (OW_KAFKA_BOOTSTRAP).

# A fresh broker's JVM is still compiling its hot paths: the same produce
# load cost it 52 % of a core in its first 10 s and 24 % in the next 10 s
# (measured here). OW_BENCH_JVM_WARMUP_S seconds of produce and fetch
# traffic come before anything is measured.
warm_broker_jvm() {
  local secs="${OW_BENCH_JVM_WARMUP_S:-20}"
  ((secs > 0)) || return 0
  say "warming the broker's JVM for ${secs} s"
  "$KIT" create-topic "$OW_KAFKA_BOOTSTRAP" owb-jvm-warmup 6 >/dev/null
  "$KIT" gen "$OW_KAFKA_BOOTSTRAP" owb-jvm-warmup $((4000 * secs)) --rate 4000 \
    --prefix warm >/dev/null 2>&1
  "$KIT" read "$OW_KAFKA_BOOTSTRAP" owb-jvm-warmup >/dev/null
}

# The produce-and-read warm-up leaves the broker's C2 compiler busy once a
# worker's traffic starts (consumer group fetches that wait for
# fetch.min.bytes, the idempotent result producer, offset commits): in the
# first 30 s of a --rate 2500 run the compiler threads took 50-60 % of a
# core on top of the request handlers' 44 %, the worker fell behind and
# the p99 "after the warm-up" was 2-3.5 s. A discarded paced run (its own
# topic, database and group) warms those paths too.
#
# warm_pipeline RATE DIR CMD ARGS...: runs CMD DIR ARGS... -n RATE*S, for
# S = OW_BENCH_PIPELINE_WARMUP_S (30; 0 skips it and returns 1); output in
# DIR.txt. CMD runs ow-bench with its output directory first; ARGS must
# carry --rate RATE.
warm_pipeline() {
  local rate=$1 dir=$2 secs="${OW_BENCH_PIPELINE_WARMUP_S:-30}"
  shift 2
  ((secs > 0)) || return 1
  say "warming the pipeline: ${secs} s at $rate batches/s"
  mkdir -p "$dir"
  "$1" "$dir" "${@:2}" -n "$(awk -v r="$rate" -v s="$secs" 'BEGIN { printf "%d", r * s }')" \
    >"$dir.txt" 2>&1 || die "the pipeline warm-up did not complete (see $dir.txt)"
}
