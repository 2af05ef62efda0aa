#!/usr/bin/env bash
# The dbsettings tier: the built worker against MariaDB servers started
# with settings DBAs use (tests/e2e/test_dbsettings_e2e.c), one server per
# group of cases:
#   tuned      --innodb-rollback-on-timeout=ON --max-allowed-packet=1M and
#              the binary log on, row-based;
#   stmt_time  --max-statement-time=1;
#   statement  the binary log on, --binlog-format=STATEMENT.
# Kafka is the broker of scripts/test.sh when OW_KAFKA_BOOTSTRAP is set
# (it runs this tier while its services are up), else one of its own. The
# servers live under .run/dbsettings and are stopped and deleted at exit.
#
#   scripts/dbsettings.sh    (after a build)
#   OW_DBSETTINGS_FILTER=test_lock_wait_rolls_back_the_batch scripts/dbsettings.sh
#                            one case (cmocka's filter), the others' groups then pass empty
#   OW_DBSETTINGS_CTEST=dbsettings.tuned scripts/dbsettings.sh   the ctest entries matching it
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
messages dbsettings

RUN="$ROOT/.run/dbsettings"
LOGS="${OW_TEST_LOG_DIR:-$RUN/logs}"
need_built "$BIN" "$BUILD/tests/test_dbsettings_e2e"
mkdir -p "$RUN" "$LOGS"
clock_start

declare -A ARGS=(
  [tuned]="--innodb-rollback-on-timeout=ON --max-allowed-packet=1M --log-bin=binlog --binlog-format=ROW"
  [stmt_time]="--max-statement-time=1"
  [statement]="--log-bin=binlog --binlog-format=STATEMENT"
)

if [[ -z ${OW_KAFKA_BOOTSTRAP:-} ]]; then
  services_up_in "$RUN/kafka" kafka
  services_env "$RUN/kafka"
fi
for g in tuned stmt_time statement; do
  OW_MARIADB_ARGS="${ARGS[$g]}" services_up_in "$RUN/$g" mariadb
  export "OW_TEST_MYSQL_PORT_$g=$(instance_port "$RUN/$g")"
  say "$g: MariaDB with ${ARGS[$g]} on port $(instance_port "$RUN/$g")"
done
# The test programs' variables (export_test_env) with the first server's
# port: each group takes its own from OW_TEST_MYSQL_PORT_<group>.
OW_MYSQL_PORT="$(instance_port "$RUN/tuned")" export_test_env
export OW_TEST_LOG_DIR="$LOGS"

log="$LOGS/ctest-dbsettings.log"
status=0
ctest --test-dir "$BUILD" -L '^dbsettings$' -R "${OW_DBSETTINGS_CTEST:-.}" --output-on-failure -V \
  >"$log" 2>&1 || status=$?
if ((status != 0)); then
  grep -E 'FAILED|ERROR|LINE|fail|Timeout|aborted' "$log" | head -40 || true
  die "cases failed (log: $log)"
fi
passed=$({ grep -oE '\[  PASSED  \] [0-9]+ test' "$log" || true; } | awk '{s += $4} END {print s + 0}')
say "$passed cases passed on three servers (tuned, stmt_time, statement)"
