#!/usr/bin/env bash
# Builds with AddressSanitizer + UndefinedBehaviorSanitizer (OW_SANITIZE=ON,
# warnings as errors) in a build dir of its own and runs the unit and
# integration test tiers there. Any sanitizer report fails the test.
#
#   scripts/sanitize.sh
#
# It starts NO services: MariaDB must already be running and the OW_TEST_*
# variables that scripts/test.sh exports must be set (at least
# OW_TEST_MYSQL_PORT; also OW_TEST_MYSQL_HOST, OW_TEST_MYSQL_USER,
# OW_TEST_MYSQL_PASSWORD). scripts/test.sh calls it after starting them; by
# hand:
#   OW_RUN_DIR=$PWD/.run/dev scripts/services.sh start all
#   source .run/dev/services.env
#   export OW_TEST_MYSQL_HOST=127.0.0.1 OW_TEST_MYSQL_PORT=$OW_MYSQL_PORT \
#     OW_TEST_MYSQL_USER=root OW_TEST_MYSQL_PASSWORD=
#   scripts/sanitize.sh
#
# Environment:
#   OW_SANITIZE_BUILD_DIR   build dir (default <repo>/build-asan)
#   OW_SANITIZE_TIERS       tiers to run (default "unit integration")
#   CC                      compiler (default: cmake's choice, gcc on Debian;
#                           clang works too)
# Exits non-zero when the build or any test fails.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
messages sanitize --die ERROR 2
BUILD="${OW_SANITIZE_BUILD_DIR:-$ROOT/build-asan}"
TIERS="${OW_SANITIZE_TIERS:-unit integration}"
LOGS="${OW_TEST_LOG_DIR:-$BUILD/logs}"

for t in $TIERS; do
  if [[ $t != unit && -z ${OW_TEST_MYSQL_PORT:-} ]]; then
    die "tier $t needs running services and OW_TEST_MYSQL_PORT (see the top of $0)"
  fi
done

# The sanitizer runtimes (libasan, libubsan) come with the compiler's
# support library on Debian (libgcc-12-dev); check before a long build.
probe="$(mktemp -d)"
on_exit 'rm -rf "$probe"'
echo 'int main(void) { return 0; }' >"$probe/p.c"
"${CC:-cc}" -fsanitize=address,undefined "$probe/p.c" -o "$probe/p" 2>"$probe/err" \
  || die "the compiler cannot link -fsanitize=address,undefined: $(head -3 "$probe/err")"

say "building in $BUILD (ASan + UBSan, warnings are errors)"
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DOW_SANITIZE=ON -DOW_WERROR=ON \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$BUILD"

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
mkdir -p "$LOGS"
failed=0
for tier in $TIERS; do
  log="$LOGS/sanitize-$tier.log"
  jobs=1
  [[ $tier != integration ]] || jobs=${OW_TEST_INTEGRATION_JOBS:-4}
  if ctest --test-dir "$BUILD" -L "^$tier\$" -j "$jobs" --output-on-failure >"$log" 2>&1; then
    say "tier $tier passed ($(grep -oE '[0-9]+ tests? failed out of [0-9]+' "$log" || echo '?'))"
  else
    failed=1
    say "tier $tier FAILED (log: $log)"
    grep -E 'ERROR: (Address|Leak|Undefined)Sanitizer|runtime error|SUMMARY|FAILED|Failed|Timeout|aborted|SEGFAULT|Exception|Not Run' "$log" \
      | head -40 || true
  fi
done
exit "$failed"
