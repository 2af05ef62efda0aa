#!/usr/bin/env bash
# What a message costs. Run through scripts/bench.sh --cost [--quick]; not
# part of CI. Starts its own MariaDB and Apache Kafka under .run/bench, as
# scripts/bench.sh does, and stops them again.
#
# CPU per batch of the worker, MariaDB (mariadbd) and the broker (the Kafka
# JVM), and what MariaDB did per batch (statements, batches per commit, redo
# bytes from Innodb_os_log_written, index entries added: each table's new
# rows times its indexes), in three phases of N batches each (100,000;
# --quick: 5,000):
#   decide  every batch new (no retries, reused keys, clashes or invalid
#           messages): each one decided in a transaction
#   replay  a cold worker in a new consumer group re-reads the decide phase's
#           topic against the same database, so every input is a replay
#           (ow-bench --replay)
#   tuned   the default run of scripts/bench.sh: the worker's defaults on the
#           benchmark's mix (10 % retries, 1 % reused keys, 1 % clashes)
# ow-bench writes the figures to cost.csv and dbwork.csv in each phase's
# directory: the worker's user + sys time over its whole life (wait4: its
# start and stop are in it, spread over the phase's batches), mariadbd's
# and the broker's from /proc/PID/stat, and the server's global counters,
# between the worker's start and the last input done.
# The machine may be shared: the load average is printed beside them.
#
# Instructions per message of the worker's in-process path: ow-path
# (tools/ow_path.c: per message the job, i.e. key check, parse, validation,
# key hash and digest, then the decision's body and the output headers) over
# its fixed corpus of 1,000 generated messages, counted by valgrind's
# callgrind for R1 = 1 and R2 = 5 rounds (--quick: 3):
#   (Ir(R2) - Ir(R1)) / (messages(R2) - messages(R1))
# so the start-up both runs share cancels out; then the same again with
# every message carrying a W3C traceparent header (ow-path --traceparent;
# skipped, "-", for a path tool built before it had the option). Each run has an empty
# environment, its own directory and the tool copied there as ./ow-path, so
# the same binary gives the same count every time (the count moves by a few
# hundred instructions when only the environment's size changes).
#
# The last line is
#   cost: worker us/batch decide = A replay = B; instructions/message = C,
#         with a traceparent = D
#
# Options:
#   --quick          5,000 batches a phase, R2 = 3 rounds
#   --build DIR      measure DIR/order-worker and DIR/ow-path, built from
#                    another tree (DIR is not rebuilt)
#   --worker BIN     the worker to measure (default: this tree's build)
#   --path-tool BIN  the ow-path to count (default: this tree's build)
#   --no-cpu         only the instruction count: no services, a few seconds
#   --out DIR        results in DIR (default .run/bench/cost-<time>)
#   --image IMAGE    measure the worker of a podman image (scripts/image.sh's
#                    order-worker:<version>): its root filesystem is exported
#                    and its /usr/bin/order-worker run through the image's own
#                    dynamic loader and libraries (Debian 13: librdkafka 2.8.0,
#                    Connector/C 3.4, glibc 2.41), as a child of ow-bench so
#                    that its CPU time is counted; the container's namespaces
#                    are left out, the code is the image's. The instruction
#                    count stays this tree's host build (the path tool)
# The harness (ow-bench, ow-kit) is always this tree's build
# (OW_BUILD_DIR, default build/), built first.
#
# Two builds, interleaved so that a change in the machine's load hits both:
#   git worktree add /tmp/ow-old <commit>
#   cmake -S /tmp/ow-old -B /tmp/ow-old/build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
#   cmake --build /tmp/ow-old/build --target order-worker ow-path
#   for b in /tmp/ow-old/build build /tmp/ow-old/build build; do
#     scripts/bench.sh --cost --quick --build "$b"; done
# Instruction counts compare exactly (same machine, same valgrind); the
# us/batch figures only as far as the load averages beside them agree.
#
# The image (librdkafka 2.8.0) against this Debian 12 host's build (2.0.2),
# three interleaved pairs against the same kind of services:
#   scripts/image.sh
#   for i in 1 2 3; do scripts/bench.sh --cost --image order-worker:0.1.0
#     scripts/bench.sh --cost; done
#
# Bounds: each phase's ow-bench at most 900 s (--quick) or 3,600 s, and
# gives up after 60 s without a commit; each callgrind run at most 600 s.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
messages bench --stderr --die ERROR 2
clock_start
export OW_RUN_DIR="$ROOT/.run/bench"
export OW_MARIADB_REDO_LOG="${OW_MARIADB_REDO_LOG:-1G}"

QUICK=0 CPU=1 OUT="" WORKER="" PATH_TOOL="" IMAGE=""
while (($# > 0)); do
  case $1 in
    --cost) ;;
    --quick) QUICK=1 ;;
    --no-cpu) CPU=0 ;;
    --build) [[ $# -ge 2 ]] || die "--build needs a build directory"
      WORKER=$2/order-worker PATH_TOOL=$2/ow-path; shift ;;
    --worker) [[ $# -ge 2 ]] || die "--worker needs a binary"; WORKER=$2; shift ;;
    --path-tool) [[ $# -ge 2 ]] || die "--path-tool needs a binary"; PATH_TOOL=$2; shift ;;
    --out) [[ $# -ge 2 ]] || die "--out needs a directory"; OUT=$2; shift ;;
    --image) [[ $# -ge 2 ]] || die "--image needs an image (order-worker:<version>)"; IMAGE=$2; shift ;;
    -h | --help) script_help; exit 0 ;;
    *) die "unknown option $1 (with --cost: --quick, --build DIR, --worker BIN, --path-tool BIN, --image IMAGE, --no-cpu, --out DIR)" ;;
  esac
  shift
done
if ((QUICK)); then N=5000 R2=3 LIMIT=900; else N=100000 R2=5 LIMIT=3600; fi
R1=1

# The harness, and what is measured when nothing else is named.
if [[ ! -f $BUILD/build.ninja ]]; then
  say "configuring $BUILD"
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DOW_WERROR=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
cmake --build "$BUILD" --target order-worker ow-bench ow-kit ow-path >/dev/null || die "build failed"
WORKER="${WORKER:-$BUILD/order-worker}"
PATH_TOOL="${PATH_TOOL:-$BUILD/ow-path}"
[[ -x $WORKER ]] || die "$WORKER is not an executable (build the order-worker target there)"
[[ -x $PATH_TOOL ]] || die "$PATH_TOOL is not an executable (build the ow-path target there)"
command -v valgrind >/dev/null || die "valgrind is missing: run scripts/deps.sh"

OUT="${OUT:-$OW_RUN_DIR/cost-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd -P)"

services_up=0 child="" scratch="" image_root=""
WORKER_DESC="$WORKER" WORKER_BIN="$WORKER"
# What runs under run_bounded first, then the services it may use.
cleanup() {
  if [[ -n $child ]]; then kill -TERM "$child" 2>/dev/null; wait "$child" 2>/dev/null; fi
  if ((services_up)); then services stop all >/dev/null 2>&1; fi
  if [[ -n $scratch ]]; then rm -rf "$scratch"; fi
  if [[ -n $image_root ]]; then rm -rf --one-file-system "$image_root"; fi
}
on_exit cleanup
trap 'exit 130' INT TERM

if [[ -n $IMAGE ]]; then
  command -v podman >/dev/null 2>&1 || die "podman is missing: run scripts/deps.sh"
  podman image exists "$IMAGE" || die "$IMAGE is not in podman: run scripts/image.sh"
  image_root="$(mktemp -d)"
  cid="$(podman_cmd create "$IMAGE")" || die "podman create $IMAGE failed"
  podman export "$cid" | tar -x -C "$image_root" -f - || { podman rm "$cid" >/dev/null; die "podman export failed"; }
  podman rm "$cid" >/dev/null
  # exec: the loader becomes the process ow-bench started and waits for.
  printf '#!/bin/sh\nexec %q --library-path %q %q "$@"\n' \
    "$image_root/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" "$image_root/usr/lib/x86_64-linux-gnu" \
    "$image_root/usr/bin/order-worker" >"$image_root/order-worker-from-image"
  chmod 755 "$image_root/order-worker-from-image"
  WORKER="$image_root/order-worker-from-image"
  WORKER_DESC="$WORKER, the image $IMAGE" WORKER_BIN="$image_root/usr/bin/order-worker"
  say "the worker of $IMAGE ($(podman image inspect --format '{{.Digest}}' "$IMAGE")): $("$WORKER" --version)"
fi

# run_bounded SECONDS CMD...: CMD under timeout, in the background so that
# an interrupt reaches it through cleanup.
run_bounded() {
  local secs=$1 status=0
  shift
  timeout --kill-after=30 "$secs" "$@" &
  child=$!
  wait "$child" || status=$?
  child=""
  return "$status"
}

# --- Instructions per message ------------------------------------------------

# count ROUNDS [TAG ARGS...]: sets IR, MSGS and SUM (the outputs' checksum)
# for one callgrind run of the path tool, with ARGS; TAG names its files.
count() {
  local rounds=$1 tag=${2:-} dir status=0
  shift $(($# > 1 ? 2 : 1))
  dir="$scratch/r$rounds$tag"
  mkdir -p "$dir"
  cp "$PATH_TOOL" "$dir/ow-path"
  run_bounded 600 env -i -C "$dir" PATH=/usr/bin:/bin valgrind --tool=callgrind \
    --callgrind-out-file=callgrind.out ./ow-path --rounds "$rounds" "$@" >"$dir/path.txt" \
    2>"$dir/callgrind.log" || status=$?
  cp "$dir/callgrind.log" "$OUT/callgrind-r$rounds$tag.log"
  cp "$dir/path.txt" "$OUT/path-r$rounds$tag.txt"
  ((status == 0)) || die "callgrind over ow-path --rounds $rounds $* failed (see $OUT/callgrind-r$rounds$tag.log)"
  IR=$(sed -n 's/^totals: \([0-9]*\)$/\1/p' "$dir/callgrind.out")
  MSGS=$(sed -n 's/^path: .* = \([0-9]*\) messages (.*/\1/p' "$dir/path.txt")
  SUM=$(sed -n 's/^path: .*, outputs \(0x[0-9a-f]*\)$/\1/p' "$dir/path.txt")
  [[ $IR =~ ^[0-9]+$ && $MSGS =~ ^[0-9]+$ && -n $SUM ]] ||
    die "no instruction, message or output count from ow-path --rounds $rounds $* (see $OUT/path-r$rounds$tag.txt)"
}

# per_message [TAG ARGS...]: sets IPM from the two runs, and PATH_LINE.
per_message() {
  local ir1 m1 sum1
  count "$R1" "$@"
  ir1=$IR m1=$MSGS sum1=$SUM
  count "$R2" "$@"
  # Both runs start with the same first round: other outputs mean the path
  # depends on something besides the binary and the corpus.
  [[ $SUM == "$sum1" ]] || die "ow-path's first round gave other outputs in the second run ($sum1, then $SUM)"
  IPM=$("$BUILD/ow-path" --per-message "$ir1" "$m1" "$IR" "$MSGS") || die "ow-path --per-message refused the counts"
  PATH_LINE=$(sed 's/^path: [0-9]* rounds x [0-9]* messages = //' "$OUT/path-r$R1${1:-}.txt")
  IR_LINE="callgrind Ir $ir1 for $m1 messages, $IR for $MSGS messages: $IPM instructions/message"
}

scratch="$(mktemp -d)"
say "counting instructions: $PATH_TOOL under callgrind, $R1 and $R2 rounds"
per_message
{
  echo "cost: $(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) at start"
  echo "cost: worker $WORKER_DESC (sha256 $(sha256sum "$WORKER_BIN" | cut -c1-12)), path tool $PATH_TOOL (sha256 $(sha256sum "$PATH_TOOL" | cut -c1-12))"
  echo "cost: ow-path corpus $PATH_LINE"
  echo "cost: $IR_LINE"
} | tee "$OUT/cost.txt"
IPM_PLAIN=$IPM IPM_TRACE="-"
# The same corpus, every message with a traceparent: what reading it and
# continuing its trace on every output cost.
if "$PATH_TOOL" --traceparent --messages 1 >/dev/null 2>&1; then
  per_message -trace --traceparent
  IPM_TRACE=$IPM
  {
    echo "cost: ow-path corpus with a traceparent: $PATH_LINE"
    echo "cost: with a traceparent: $IR_LINE"
  } | tee -a "$OUT/cost.txt"
else
  echo "cost: $PATH_TOOL has no --traceparent: no figure with a traceparent" | tee -a "$OUT/cost.txt"
fi

# --- CPU per batch -------------------------------------------------------------

# us PHASE_DIR RUN PROCESS: that process's microseconds per batch in the run.
us() {
  awk -F, -v run="$2" -v p="$3" '$1 == run && $3 == p { v = $5 }
    END { if (v == "" || v < 0) exit 1; print v }' "$1/cost.csv" ||
    die "no CPU figure for $3 in run $2 (see $1/bench.txt)"
}

# db_work PHASE_DIR RUN: what MariaDB did per batch in the run (dbwork.csv):
# statements (prepared executions and text statements), the batches one
# commit carried, redo bytes, and the index entries the run added.
db_work() {
  awk -F, -v run="$2" '
    function per(v, d) { return v < 0 || b <= 0 ? "-" : sprintf(d, v / b) }
    $1 == run { b = $2; s = $3; c = $4; r = $5; x = $6 }
    END {
      commit = (c > 0 && b > 0) ? sprintf("%.1f", b / c) : "-"
      printf "cost: %-7s %12s %15s %14s %15s", run, per(s, "%.3f"), commit, per(r, "%.0f"),
        per(x, "%.2f")
    }' "$1/dbwork.csv"
}

if ((CPU)); then
  services_up=1
  services start all >&2
  services_env "$OW_RUN_DIR"
  need_kafka
  WATCH="mariadbd=$(cat "$OW_RUN_DIR/mariadb.pid"),kafka=$(cat "$OW_RUN_DIR/kafka.pid")"
  # shellcheck source=scripts/bench-warmup.sh
  source "$ROOT/scripts/bench-warmup.sh"
  warm_broker_jvm

  phase() {  # DIR ARGS...: one ow-bench run against the services, bounded
    local dir=$1
    shift
    mkdir -p "$dir"
    say "$(basename "$dir"): ow-bench $*"
    run_bounded "$LIMIT" "$BUILD/ow-bench" --bootstrap "$OW_KAFKA_BOOTSTRAP" \
      --mysql-host 127.0.0.1 --mysql-port "$OW_MYSQL_PORT" --mysql-user root \
      --worker "$WORKER" --out "$dir" --watch "$WATCH" --stall-timeout 60 "$@" \
      >"$dir/bench.txt" || die "a run did not complete (see $dir/bench.txt)"
  }
  phase "$OUT/replay" --replay -n "$N" --retry 0 --reuse 0 --clash 0 --invalid 0
  phase "$OUT/tuned" -n "$N" --no-naive --no-serial --no-db-limit

  table="$(printf 'cost: %-7s %8s %16s %18s %16s' phase batches "worker us/batch" "mariadbd us/batch" "broker us/batch")"
  work="$(printf 'cost: %-7s %12s %15s %14s %15s' phase "statements/b" "batches/commit" "redo bytes/b" "index entries/b")"
  for p in decide:replay replay:replay tuned:tuned; do
    run=${p%%:*} dir=$OUT/${p#*:}
    batches=$(awk -F, -v run="$run" '$1 == run && $3 == "worker" { print $2 }' "$dir/cost.csv")
    w=$(us "$dir" "$run" worker)
    m=$(us "$dir" "$run" mariadbd)
    k=$(us "$dir" "$run" kafka)
    table+=$'\n'"$(printf 'cost: %-7s %8s %16s %18s %16s' "$run" "$batches" "$w" "$m" "$k")"
    work+=$'\n'"$(db_work "$dir" "$run")"
  done
  {
    echo "$table"
    echo "$work"
    echo "cost: load average $(cut -d' ' -f1-3 /proc/loadavg) at the end; details in $OUT/{replay,tuned}/bench.txt"
  } | tee -a "$OUT/cost.txt"
  A=$(us "$OUT/replay" decide worker)
  B=$(us "$OUT/replay" replay worker)
else
  A="-" B="-"
fi

echo "cost: worker us/batch decide = $A replay = $B; instructions/message = $IPM_PLAIN, with a traceparent = $IPM_TRACE" | tee -a "$OUT/cost.txt"
say "took $((SECONDS - T_START)) s; results in $OUT"
