#!/usr/bin/env bash
# The test command. On a fresh Debian 12 machine (as root) it installs what
# is missing, builds with warnings as errors, starts a throwaway MariaDB and
# an Apache Kafka broker, runs every test tier, and stops what it started.
# Exits non-zero on any failure.
#
#   scripts/test.sh            all tiers
#   OW_TEST_TIERS="unit" scripts/test.sh   only some tiers (unit integration e2e)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${OW_BUILD_DIR:-$ROOT/build}"
TIERS="${OW_TEST_TIERS:-unit integration e2e}"
export OW_RUN_DIR="${OW_TEST_RUN_DIR:-$ROOT/.run/test}"
LOGS="$OW_RUN_DIR/logs"
SUMMARY=()

say() { printf 'test: %s\n' "$*"; }

cd "$ROOT"
t_start=$SECONDS

"$ROOT/scripts/deps.sh"

say "static checks"
"$ROOT/scripts/check-sql.sh"
"$ROOT/scripts/check-sql.sh" --self-test
if grep -nE '\b(atoi|atol|sprintf|strcpy|strcat|strtok|gets)\s*\(' "$ROOT"/src/*.c; then
  say "unchecked or unbounded calls in src/ (use the checked helpers)"; exit 1
fi

say "building in $BUILD (warnings are errors)"
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DOW_WERROR=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$BUILD"

needs_services=0
for t in $TIERS; do [[ $t != unit ]] && needs_services=1; done
if ((needs_services)); then
  trap '"$ROOT/scripts/services.sh" stop all || true' EXIT
  OW_BUILD_DIR="$BUILD" "$ROOT/scripts/services.sh" start all
  # shellcheck disable=SC1091
  source "$OW_RUN_DIR/services.env"
  export OW_TEST_MYSQL_HOST=127.0.0.1 OW_TEST_MYSQL_PORT="$OW_MYSQL_PORT" \
    OW_TEST_MYSQL_USER=root OW_TEST_MYSQL_PASSWORD="" \
    OW_TEST_KAFKA_BOOTSTRAP="$OW_KAFKA_BOOTSTRAP" OW_TEST_BROKER_KIND="$OW_BROKER_KIND"
  # Workers under test run as a least-privilege user made by sql/worker_user.sql
  # (tests/support/testdb.c applies it to every test database).
  export OW_TEST_WORKER_MYSQL_USER=ow_worker
  OW_TEST_WORKER_MYSQL_PASSWORD="w-$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')"
  export OW_TEST_WORKER_MYSQL_PASSWORD
  say "database: MariaDB $OW_MARIADB_VERSION on 127.0.0.1:$OW_MYSQL_PORT"
  say "broker:   $OW_KAFKA_VERSION ($OW_BROKER_KIND) on $OW_KAFKA_BOOTSTRAP"
fi
mkdir -p "$LOGS"
export OW_TEST_LOG_DIR="$LOGS"

failed=0
for tier in $TIERS; do
  log="$LOGS/ctest-$tier.log"
  say "tier $tier"
  if ctest --test-dir "$BUILD" -L "^$tier\$" --output-on-failure -V >"$log" 2>&1; then
    status=passed
  else
    status=FAILED
    failed=1
    grep -E 'FAILED|ERROR|LINE|fail' "$log" | head -40 || true
  fi
  programs=$(grep -cE '^ *[0-9]+/[0-9]+ Test +#' "$log" || true)
  cases=$(grep -oE '\[==========\] [0-9]+ test\(s\) run' "$log" | awk '{s += $2} END {print s + 0}')
  passed=$(grep -oE '\[  PASSED  \] [0-9]+ test' "$log" | awk '{s += $4} END {print s + 0}')
  SUMMARY+=("$(printf '%-12s %-7s %3s programs, %4s cases, %4s passed' "$tier" "$status" "$programs" "$cases" "$passed")")
done

say "summary (logs in $LOGS)"
for line in "${SUMMARY[@]}"; do say "  $line"; done
if ((needs_services)); then
  say "  end-to-end tests ran against: $OW_KAFKA_VERSION ($OW_BROKER_KIND), MariaDB $OW_MARIADB_VERSION"
fi
say "took $((SECONDS - t_start)) s"
exit "$failed"
