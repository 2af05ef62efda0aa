#!/usr/bin/env bash
# The test command. On a fresh Debian 12 machine (as root) it installs what
# is missing, builds with warnings as errors, starts a throwaway MariaDB and
# an Apache Kafka broker, runs every test tier, and stops what it started.
# Exits non-zero on any failure.
#
# Tiers, in order (OW_TEST_TIERS selects some, e.g. OW_TEST_TIERS="unit e2e"):
#   unit         cmocka tests of the pure modules and the CLI (no services), and
#                the Helm chart's checks (scripts/chart-test.sh: helm lint and
#                template, every object decoded into the Kubernetes API's types,
#                planted faults, the README's helm install)
#   integration  cmocka tests against MariaDB (and librdkafka's mock cluster)
#   e2e          the built binary against Apache Kafka and MariaDB, the client
#                examples (examples/), the query service (`serve`)
#   dbsettings   scripts/dbsettings.sh: the worker against MariaDB servers started with
#                innodb_rollback_on_timeout=ON, a 1 MiB max_allowed_packet, the binary
#                log on; max_statement_time=1; binlog_format=STATEMENT (shares the broker)
#   contract     docs/asyncapi.yaml through the AsyncAPI parser; every example
#                and every result and dead letter the e2e tier read against
#                its schemas (scripts/contract.sh)
#   sanitize     unit + integration again under ASan + UBSan
#   valgrind     a short end-to-end run with the workers under memcheck
#   secure       scripts/secure.sh: TLS-only MariaDB and Kafka (SSL, SASL_SSL, ACLs),
#                two replicas, every refused certificate, password and ACL
#   fuzz         libFuzzer over parsing, validation and the digest (60 s)
#   chaos        scripts/chaos.sh on three brokers: kills of replicas and of the broker
#                leading the most partitions, outages, scaling; invariants I1-I8
#   chaos-single (not in the default list) the chaos run on one broker
#                (OW_CHAOS_BROKERS=1 scripts/chaos.sh)
#   eos          scripts/eos.sh: three exactly-once replicas on three brokers, replica
#                and broker kills, scaling; read_committed checks: one result per message
#   chaos-shards (not in the default list) the chaos run over three MariaDB shards,
#                one of them killed for 12 s (OW_CHAOS_SHARDS=3 scripts/chaos.sh)
#   shards       scripts/shards.sh: three MariaDB shards, two replicas, the mix, the
#                same key twice per shard, one shard stopped for 20 s under load;
#                invariants I1-I8 across the shards
#   galera       scripts/galera.sh: two replicas on a three-node MariaDB Galera
#                cluster (mysql.host lists the nodes) under the chaos mix while the
#                node they write to is killed, cut off by iptables, restarted (IST),
#                then a rolling restart; failover times, invariants I1-I8, the
#                nodes' tables compared (needs root for iptables)
#   alerts       promtool check/test of the alert rules, the Grafana dashboard's
#                queries, a live Prometheus scraping two replicas while the
#                database is stopped (scripts/alerts-test.sh)
#   package      cpack -G DEB, lintian, dpkg -i / -r / -P on this machine
#                (scripts/package-test.sh; needs root)
#   debian13     scripts/debian13.sh: in a cached Debian 13 root (debootstrap), the build
#                with gcc 14 and the unit, integration, e2e, secure and package tiers
#                against MariaDB 11.8 and librdkafka 2.8 (SCRAM to Kafka); needs root
#   container    scripts/image.sh builds the Debian 13 image twice (the digests must
#                match) and loads it into podman; scripts/container.sh runs three
#                exactly-once replicas as containers under replica kills and stops,
#                migrate and serve in containers, read_committed checks; needs root
#
# scripts/test.sh --only REGEX runs the ctest entries whose names match REGEX
# (e.g. 'integration\.purge', 'e2e\.hang', 'dbsettings\.tuned'), alone, with
# the services their tier needs, and nothing else (tests/README.md).
#
# OW_TEST_STATIC=0 skips the static checks and the unit tier's chart checks
# (scripts/debian13.sh sets it for the run inside its root: they ran outside
# and do not depend on the platform; the root has no Go either).
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
messages test
ONLY=""
while (($# > 0)); do
  case $1 in
    --only) [[ $# -ge 2 ]] || die "--only needs a regular expression of test names"; ONLY=$2; shift 2 ;;
    *) die "unknown argument '$1' (scripts/test.sh [--only REGEX])" ;;
  esac
done
[[ -z $ONLY ]] || OW_TEST_TIERS=none OW_TEST_STATIC=0
TIERS="${OW_TEST_TIERS:-unit package integration e2e dbsettings contract sanitize valgrind alerts secure debian13 container fuzz chaos eos shards galera}"
export OW_RUN_DIR="${OW_TEST_RUN_DIR:-$ROOT/.run/test}"
LOGS="$OW_RUN_DIR/logs"
SUMMARY=()
failed=0
services_up=0

has_tier() { [[ " $TIERS " == *" $1 "* ]]; }
record() { SUMMARY+=("$(printf '%-12s %-7s %s' "$1" "$2" "$3")"); [[ $2 == passed ]] || failed=1; }

# Stopped once the tiers that share them are done, or at exit.
stop_services() {
  if ((services_up)); then
    services stop all || true
    services_up=0
  fi
}
on_exit stop_services

cd "$ROOT"
t_start=$SECONDS
"$ROOT/scripts/deps.sh"
mkdir -p "$LOGS"
# The chart checks' tools (helm from the Go module proxy, chart-check) take
# minutes to build cold: they build while the other tiers run.
CHART_PREP_PID="" CHART=0
if has_tier unit && [[ ${OW_TEST_STATIC:-1} != 0 ]]; then
  CHART=1
  "$ROOT/scripts/chart-test.sh" --prepare >"$LOGS/chart-prepare.log" 2>&1 &
  CHART_PREP_PID=$!
  on_exit 'kill_each TERM "$CHART_PREP_PID"'
fi

static_checks() {
  say "static checks"
  "$ROOT/scripts/check-sql.sh"
  "$ROOT/scripts/check-sql.sh" --self-test
  "$ROOT/scripts/check-layers.sh"
  "$ROOT/scripts/check-layers.sh" --self-test
  if ! clang-format --dry-run --Werror "$ROOT"/src/*/*.[ch] "$ROOT"/include/*/ow/*.h \
    "$ROOT"/tools/*.c "$ROOT"/tools/*/*.[ch]; then
    say "src/, include/ or tools/ is not formatted: run clang-format -i on the files above"
    exit 1
  fi
  if grep -nE '\b(atoi|atol|sprintf|strcpy|strcat|strtok|gets)\s*\(' "$ROOT"/src/*/*.c; then
    say "unchecked or unbounded calls in src/ (use the checked helpers)"
    exit 1
  fi
  # From the repository: the scripts name scripts/lib.sh from there.
  if ! shellcheck -x -S warning scripts/*.sh; then
    say "scripts/ has shellcheck warnings (above)"
    exit 1
  fi
}
[[ ${OW_TEST_STATIC:-1} == 0 ]] || static_checks

# The debian13 tier builds in its own root: alone, it needs no build here.
if [[ $TIERS != debian13 ]]; then
  say "building in $BUILD (warnings are errors)"
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DOW_WERROR=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build "$BUILD"
fi
mkdir -p "$LOGS"
export OW_TEST_LOG_DIR="$LOGS"

# --only: the matching entries and their services, then the exit.
only_run() {
  local labels status=0
  labels="$(ctest --test-dir "$BUILD" --show-only=json-v1 -R "$ONLY" |
    jq -r '[.tests[].properties[]? | select(.name == "LABELS") | .value[]] | unique | join(" ")')"
  [[ -n $labels ]] || die "no test matches '$ONLY' (ctest --test-dir $BUILD -N lists them)"
  say "--only '$ONLY': $(ctest --test-dir "$BUILD" -N -R "$ONLY" | grep -c 'Test *#') test(s), tier(s) $labels"
  if [[ " $labels " == *" dbsettings "* ]]; then
    [[ $labels == dbsettings ]] || die "'$ONLY' matches dbsettings entries and others: run them apart"
    OW_DBSETTINGS_CTEST="$ONLY" "$ROOT/scripts/dbsettings.sh" || status=$?
    exit "$status"
  fi
  if [[ " $labels " == *" integration "* || " $labels " == *" e2e "* ]]; then
    start_services
  fi
  ctest --test-dir "$BUILD" -R "$ONLY" --output-on-failure || status=$?
  stop_services
  exit "$status"
}
# The e2e tier appends every result and dead letter it reads here;
# the contract tier validates them.
CAPTURE="$LOGS/contract-capture.jsonl"
rm -f "$CAPTURE"

start_services() {
  services start all
  services_up=1
  services_env "$OW_RUN_DIR"
  export_test_env
  say "database: MariaDB $OW_MARIADB_VERSION on 127.0.0.1:$OW_MYSQL_PORT"
  say "broker:   $OW_KAFKA_VERSION ($OW_BROKER_KIND) on $OW_KAFKA_BOOTSTRAP"
}

[[ -z $ONLY ]] || only_run

ctest_tier() {  # LABEL
  local tier=$1 log="$LOGS/ctest-$1.log" status programs cases passed jobs=1
  # Integration tests use databases of their own and mostly wait (the mock
  # cluster's scenarios): side by side. e2e tests stop and restart the
  # shared broker and database: one at a time.
  [[ $tier != integration ]] || jobs=${OW_TEST_INTEGRATION_JOBS:-4}
  say "tier $tier"
  if ctest --test-dir "$BUILD" -L "^$tier\$" -j "$jobs" --output-on-failure -V >"$log" 2>&1; then
    status=passed
  else
    status=FAILED
    grep -E 'FAILED|ERROR|LINE|fail|Timeout|aborted|SEGFAULT|Exception|Not Run' "$log" | head -40 || true
  fi
  programs=$(grep -cE '^ *[0-9]+/[0-9]+ Test +#' "$log" || true)
  # cmocka 1.1.7 (Debian 13) names the group: "[==========] json_table: 132 test(s) run."
  cases=$({ grep -oE '\[==========\] ([A-Za-z0-9_]+: )?[0-9]+ test\(s\) run' "$log" || true; } |
    awk '{s += $(NF - 2)} END {print s + 0}')
  passed=$({ grep -oE '\[  PASSED  \] [0-9]+ test' "$log" || true; } | awk '{s += $4} END {print s + 0}')
  record "$tier" "$status" "$(printf '%3s programs, %4s cases, %4s passed' "$programs" "$cases" "$passed")"
}

script_tier() {  # NAME COMMAND... : runs a script, keeps its last line as the summary
  local name=$1 log="$LOGS/$1.log"
  shift
  say "tier $name"
  if "$@" >"$log" 2>&1; then
    record "$name" passed "$(grep -vE '^\s*$' "$log" | tail -n 1)"
  else
    tail -n 40 "$log"
    record "$name" FAILED "see $log"
  fi
}

# A script's tier when it is selected, then the lines of its log that
# match PATTERN, which the summary repeats.
figures_tier() {  # NAME PATTERN COMMAND...
  has_tier "$1" || return 0
  script_tier "$1" "${@:3}"
  grep -E "$2" "$LOGS/$1.log" | sed 's/^/test:   /' || true
}

has_tier unit && ctest_tier unit
has_tier package && script_tier package "$ROOT/scripts/package-test.sh"
if has_tier integration || has_tier e2e || has_tier dbsettings || has_tier sanitize ||
  has_tier valgrind || has_tier alerts; then
  start_services
  has_tier integration && ctest_tier integration
  has_tier e2e && OW_TEST_CONTRACT_CAPTURE="$CAPTURE" ctest_tier e2e
  has_tier dbsettings && script_tier dbsettings "$ROOT/scripts/dbsettings.sh"
  has_tier sanitize && script_tier sanitize "$ROOT/scripts/sanitize.sh"
  has_tier valgrind && script_tier valgrind "$ROOT/scripts/valgrind.sh"
  # Last: it stops and restarts the database.
  has_tier alerts && OW_BUILD_DIR="$BUILD" script_tier alerts "$ROOT/scripts/alerts-test.sh"
  stop_services
fi
if has_tier contract; then
  if has_tier e2e; then
    script_tier contract "$ROOT/scripts/contract.sh" "$CAPTURE"
  else
    script_tier contract "$ROOT/scripts/contract.sh"
  fi
fi
# Starts and stops its own TLS-only services (in .run/secure).
has_tier secure && script_tier secure "$ROOT/scripts/secure.sh"
if has_tier debian13; then
  script_tier debian13 "$ROOT/scripts/debian13.sh"
  grep -E '^debian13:   ' "$LOGS/debian13.log" | sed 's/^debian13: /test:   /' || true
fi
# The image, built twice from this commit: one digest, or the build is not
# reproducible. Then the replicas as containers.
if has_tier container; then
  rm -f "$ROOT"/build-image/order-worker_*.digest
  script_tier image "$ROOT/scripts/image.sh"
  grep -E '^image: space' "$LOGS/image.log" | sed 's/^/test:   /' || true
  if compgen -G "$ROOT/build-image/order-worker_*.digest" >/dev/null; then
    first="$(cat "$ROOT"/build-image/order-worker_*.digest)"
    script_tier image-again "$ROOT/scripts/image.sh" --no-load
    second="$(cat "$ROOT"/build-image/order-worker_*.digest)"
    if [[ $first == "$second" ]]; then
      say "  image digest reproduced: ${first%% *}"
    else
      record image-repro FAILED "two builds gave ${first%% *} and ${second%% *}"
    fi
  fi
  figures_tier container '^container: .*(figures|self-check|README|serve in)' "$ROOT/scripts/container.sh"
fi
has_tier fuzz && script_tier fuzz "$ROOT/scripts/fuzz.sh" 60
# The runs of their own, each followed by the lines of its log that the
# summary repeats.
figures_tier chaos '^verify: (figures|faults|resume|broker kills)' "$ROOT/scripts/chaos.sh"
OW_CHAOS_BROKERS=1 figures_tier chaos-single '^verify: (figures|faults|resume)' "$ROOT/scripts/chaos.sh"
figures_tier eos '^verify: (exactly-once figures|faults|broker kills)' "$ROOT/scripts/eos.sh"
OW_CHAOS_SHARDS=3 OW_CHAOS_BROKERS=1 figures_tier chaos-shards '^verify: (figures|faults|resume|shard outage)' \
  "$ROOT/scripts/chaos.sh"
figures_tier shards '^(verify: (figures|shard outage|shard hang|shards)|shards: .*(refused|same key))' \
  "$ROOT/scripts/shards.sh"
figures_tier galera '^galera: (\[ *[0-9]+s\] )?(fault |figures|FAIL)' "$ROOT/scripts/galera.sh"

# The unit tier's chart checks, last: their tools had every other tier's
# time to build. A failed preparation is retried (and reported) by the
# checks themselves.
if ((CHART)); then
  wait "$CHART_PREP_PID" || cat "$LOGS/chart-prepare.log"
  CHART_PREP_PID=""
  script_tier unit-chart "$ROOT/scripts/chart-test.sh"
fi

say "summary (logs in $LOGS)"
for line in "${SUMMARY[@]}"; do say "  $line"; done
if [[ -n ${OW_KAFKA_VERSION:-} ]]; then
  say "  end-to-end tests ran against: $OW_KAFKA_VERSION ($OW_BROKER_KIND), MariaDB $OW_MARIADB_VERSION"
fi
say "took $((SECONDS - t_start)) s"
exit "$failed"
