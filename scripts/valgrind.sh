#!/usr/bin/env bash
# A short end-to-end run with every worker under valgrind memcheck: the
# e2e test's two replicas decide its scripted mix and stop on SIGTERM.
# Passes when every worker process reports no invalid access and no
# definitely lost memory (valgrind exits 99 otherwise, which the test sees as
# a failed shutdown). Assumes services are running and OW_TEST_* is set, as
# scripts/test.sh does.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
: "${OW_TEST_MYSQL_PORT:?start the services first (scripts/test.sh does)}"
LOGS="${OW_TEST_LOG_DIR:-$ROOT/.run/test/logs}/valgrind"
rm -rf "$LOGS"
mkdir -p "$LOGS"
export OW_TEST_LOG_DIR="$LOGS" OW_VALGRIND_TARGET="$BUILD/order-worker"
export OW_TEST_WORKER_BIN="$ROOT/scripts/valgrind-worker.sh"
status=0
"$BUILD/tests/test_mix_e2e" >"$LOGS/test_mix_e2e.out" 2>&1 || status=$?
n=0 bad=0
for log in "$LOGS"/valgrind-*.log; do
  [[ -f $log ]] || continue
  n=$((n + 1))
  if ! grep -q 'ERROR SUMMARY: 0 errors' "$log"; then bad=$((bad + 1)); grep -E 'ERROR SUMMARY|definitely lost|Invalid' "$log" | head -5; fi
done
printf 'valgrind: %d worker process(es) under memcheck: %s; definitely lost: %s\n' "$n" \
  "$( ((bad == 0)) && echo 'no errors' || echo "$bad with errors")" \
  "$(grep -h 'definitely lost:' "$LOGS"/valgrind-*.log | awk '{print $4" "$5}' | sort -u | paste -sd, -)"
if ((status != 0 || bad != 0 || n == 0)); then
  tail -30 "$LOGS/test_mix_e2e.out"
  echo "valgrind: FAILED (see $LOGS)"
  exit 1
fi
echo "valgrind: passed"
