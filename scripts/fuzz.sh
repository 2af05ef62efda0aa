#!/usr/bin/env bash
# Fuzzes the request path (tests/fuzz/fuzz_request.c: key check, parse,
# digest, response bodies) with libFuzzer, AddressSanitizer and UBSan.
#
#   scripts/fuzz.sh [SECONDS]     run for SECONDS (default 60)
#
# Builds with clang in a build dir of its own ($OW_FUZZ_BUILD_DIR, default
# <repo>/build-fuzz), runs over a temporary COPY of tests/fuzz/corpus (new
# inputs the fuzzer finds are thrown away, never committed by this script)
# with tests/fuzz/request.dict, and ends with one line:
#   fuzz: <execs> executions in <S> s (<N> exec/s), <crashes> crashes
# Exits non-zero on a crash, leak or timeout; the input that caused it is
# kept under <build dir>/artifacts/ and its path printed. Reproduce with
#   <build dir>/fuzz_request <artifact>
# Needs no services.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
messages fuzz --die ERROR 2
BUILD="${OW_FUZZ_BUILD_DIR:-$ROOT/build-fuzz}"
DURATION="${1:-60}"
ARTIFACTS="$BUILD/artifacts"
LOG="$BUILD/fuzz.log"

[[ $DURATION =~ ^[1-9][0-9]*$ ]] || die "SECONDS must be a positive integer, got '$DURATION'"
command -v clang >/dev/null 2>&1 || die "clang not found (scripts/deps.sh installs it)"

say "building fuzz_request with clang in $BUILD"
CC=clang cmake -S "$ROOT" -B "$BUILD" -G Ninja -DOW_FUZZ=ON -DOW_TESTS=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$BUILD" --target fuzz_request >/dev/null

WORK="$(mktemp -d "${TMPDIR:-/tmp}/ow-fuzz.XXXXXX")"
on_exit 'rm -rf "$WORK"'
mkdir -p "$WORK/corpus" "$ARTIFACTS"
cp "$ROOT"/tests/fuzz/corpus/* "$WORK/corpus/"
seeds=$(find "$WORK/corpus" -type f | wc -l)
# Artifacts of this run only: they are named after their content, so list
# the directory before and after.
before="$(ls -1 "$ARTIFACTS")"

say "running for $DURATION s over a copy of $seeds seeds (log: $LOG)"
t0=$(date +%s%N)
set +e
"$BUILD/fuzz_request" "$WORK/corpus" -max_total_time="$DURATION" -max_len=65536 \
  -dict="$ROOT/tests/fuzz/request.dict" -timeout=10 -print_final_stats=1 \
  -artifact_prefix="$ARTIFACTS/" >"$LOG" 2>&1
status=$?
set -e
elapsed_ms=$((($(date +%s%N) - t0) / 1000000))

execs="$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$LOG" | grep -oE '[0-9]+$' || true)"
rate="$(grep -oE 'stat::average_exec_per_sec: *[0-9]+' "$LOG" | grep -oE '[0-9]+$' || true)"
new_artifacts="$(comm -13 <(printf '%s\n' "$before" | sort) <(ls -1 "$ARTIFACTS" | sort) | sed '/^$/d')"
crashes=$(printf '%s' "$new_artifacts" | grep -c . || true)
corpus_after=$(find "$WORK/corpus" -type f | wc -l)

if ((status != 0 || crashes > 0)); then
  grep -E 'ERROR|invariant failed|SUMMARY|runtime error|Test unit written' "$LOG" | head -20 || true
  for a in $new_artifacts; do say "kept $ARTIFACTS/$a (reproduce: $BUILD/fuzz_request $ARTIFACTS/$a)"; done
  ((crashes > 0)) || crashes=1
else
  say "the corpus copy grew by $((corpus_after - seeds)) inputs (discarded)"
fi
secs="$(awk -v ms="$elapsed_ms" 'BEGIN { printf "%.1f", ms / 1000 }')"
echo "fuzz: ${execs:-0} executions in $secs s (${rate:-0} exec/s), $crashes crashes"
((status == 0 && crashes == 0))
