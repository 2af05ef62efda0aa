#!/usr/bin/env bash
# The `alerts` tier: the Prometheus rules and the Grafana dashboard
# proven against Prometheus itself and two live replicas.
#
#   1. promtool check rules, promtool test rules (config/prometheus/tests/);
#      every runbook_url names a section of docs/operations.md.
#   2. the dashboard is JSON with the panels the issue lists.
#   3. two worker replicas (their own database and topics on the running
#      services) and a Prometheus server from the Debian package on a loopback
#      port, scraping them every second, with a test copy of the rules whose
#      `for:` durations are 5 s.
#   4. through Prometheus' HTTP API: both targets up, the worker's series
#      present; every metric the dashboard and the rules name exists in a
#      replica's /metrics, every dashboard query evaluates and returns series.
#   5. scripts/services.sh mariadb-down: OrderWorkerDatabaseUnavailable goes
#      to firing for both replicas (prints the seconds from the stop);
#      mariadb-up: the alert clears (prints the seconds from the start).
#
# Needs the services of scripts/services.sh running (OW_RUN_DIR/services.env)
# and a build (OW_BUILD_DIR, default build/). Stops everything it starts and
# starts the database again if it stopped it.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
messages alerts --die FAIL 1
: "${OW_RUN_DIR:?set OW_RUN_DIR to the services state folder}"
RULES="$ROOT/config/prometheus/order-worker.rules.yml"
DASH="$ROOT/config/grafana/order-worker.json"
WORK="$OW_RUN_DIR/alerts"
PIDS=()
db_stopped=0

cleanup() {
  local pid
  kill_each TERM "${PIDS[@]}"
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null; done
  if ((db_stopped)); then services mariadb-up >/dev/null 2>&1; fi
}
on_exit cleanup

secs() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.1f", b - a}'; }  # FROM TO

# --- 1. promtool -------------------------------------------------------------
command -v promtool >/dev/null || die "promtool not found (scripts/deps.sh installs prometheus)"
promtool check rules "$RULES" >/dev/null || { promtool check rules "$RULES"; die "promtool check rules"; }
out=$(promtool test rules "$ROOT"/config/prometheus/tests/*.yml 2>&1) || { echo "$out"; die "promtool test rules"; }
n_alerts=$(grep -c '^ *- alert:' "$RULES")
n_records=$(grep -c '^ *- record:' "$RULES")
n_cases=$(grep -hc '^ *- eval_time:' "$ROOT"/config/prometheus/tests/*.yml | awk '{s += $1} END {print s}')
n_groups=$(grep -hc '^ *- name:' "$ROOT"/config/prometheus/tests/*.yml | awk '{s += $1} END {print s}')
say "promtool: $n_alerts alerts and $n_records recording rules; $n_groups test groups, $n_cases alert checks passed"
for anchor in $(grep -o 'docs/operations.md#[a-z]*' "$RULES" | cut -d'#' -f2); do
  grep -qiE "^### $anchor\$" "$ROOT/docs/operations.md" || die "runbook section '$anchor' missing in docs/operations.md"
done
[[ $(grep -c 'runbook_url:' "$RULES") -eq $n_alerts ]] || die "an alert has no runbook_url"
[[ $(grep -c 'summary:' "$RULES") -eq $n_alerts ]] || die "an alert has no summary"

# --- 2. dashboard ------------------------------------------------------------
jq empty "$DASH" || die "$DASH is not valid JSON"
for title in "Throughput" "Latency percentiles" "Consumer lag" "Outcomes by code" "Database retries" "In flight"; do
  jq -e --arg t "$title" 'any(.panels[]; .title == $t)' "$DASH" >/dev/null || die "dashboard has no panel '$title'"
done
n_panels=$(jq '.panels | length' "$DASH")
n_queries=$(jq '[.. | objects | select(has("expr"))] | length' "$DASH")
say "dashboard: valid JSON, $n_panels panels, $n_queries queries"

# --- 3. two replicas and Prometheus ------------------------------------------
services_env "$OW_RUN_DIR"
rm -rf "$WORK" && mkdir -p "$WORK"
suffix="$(od -An -N4 -tx4 /dev/urandom | tr -d ' ')"
DB="ow_alerts_$suffix"
IN="alerts-$suffix-in"
mysql_root() { mariadb_at "$OW_MYSQL_PORT" "$@"; }
mysql_root -e "CREATE DATABASE $DB"
password="$(secret a)"
write_private "$WORK/worker.password" "$password"
for t in "$IN:2" "alerts-$suffix-results:2" "alerts-$suffix-dlq:1"; do
  "$KIT" create-topic "$OW_KAFKA_BOOTSTRAP" "${t%:*}" "${t#*:}" >/dev/null
done
ports=()
for i in 1 2; do
  pick_port port
  ports+=("$port")
  sed -e "s|^kafka.bootstrap.servers = .*|kafka.bootstrap.servers = $OW_KAFKA_BOOTSTRAP|" \
      -e "s|^kafka.group.id = .*|kafka.group.id = alerts-$suffix|" \
      -e "s|^topic.input = .*|topic.input = $IN|" \
      -e "s|^topic.results = .*|topic.results = alerts-$suffix-results|" \
      -e "s|^topic.dlq = .*|topic.dlq = alerts-$suffix-dlq|" \
      -e "s|^mysql.port = .*|mysql.port = $OW_MYSQL_PORT|" \
      -e "s|^mysql.user = .*|mysql.user = ow_alerts|" \
      -e "s|^mysql.database = .*|mysql.database = $DB|" \
      -e "s|^mysql.password_file =.*|mysql.password_file = $WORK/worker.password|" \
      -e "s|^mysql.connect_timeout_s = .*|mysql.connect_timeout_s = 2|" \
      -e "s|^worker.lanes = .*|worker.lanes = 2|" \
      -e "s|^metrics.port = .*|metrics.port = ${ports[i - 1]}|" \
      "$ROOT/config/order-worker.conf" >"$WORK/replica-$i.conf"
done
ORDER_WORKER_MYSQL_USER=root ORDER_WORKER_MYSQL_PASSWORD_FILE='' \
  "$BIN" migrate --config "$WORK/replica-1.conf" >"$WORK/migrate.log" 2>&1 || { cat "$WORK/migrate.log"; die "migrate"; }
worker_user "$OW_MYSQL_PORT" "$DB" "$password" ow_alerts
for i in 1 2; do
  "$BIN" run --config "$WORK/replica-$i.conf" 2>"$WORK/replica-$i.log" &
  PIDS+=($!)
done

# The test copy of the rules: every `for:` is 5 s, so the live test takes
# seconds; the expressions are the shipped ones.
sed -E 's/^( *for: ).*/\15s/' "$RULES" >"$WORK/rules.yml"
grep -q 'for: 5s' "$WORK/rules.yml" || die "the test copy of the rules did not shorten for:"
prom_port=""
pick_port prom_port
cat >"$WORK/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files:
  - $WORK/rules.yml
scrape_configs:
  - job_name: order-worker
    static_configs:
      - targets: ['127.0.0.1:${ports[0]}', '127.0.0.1:${ports[1]}']
EOF
prometheus --config.file="$WORK/prometheus.yml" --storage.tsdb.path="$WORK/tsdb" \
  --web.listen-address="127.0.0.1:$prom_port" --storage.tsdb.retention.time=1h \
  --log.level=warn >"$WORK/prometheus.log" 2>&1 &
PIDS+=($!)
PROM="http://127.0.0.1:$prom_port"

query() {  # PROMQL -> the API's JSON
  curl -sf --max-time 5 -G "$PROM/api/v1/query" --data-urlencode "query=$1"
}
count() {  # PROMQL -> number of series
  query "$1" | jq -r '.data.result | length' 2>/dev/null || echo 0
}
wait_for() {  # SECONDS DESCRIPTION COMMAND...
  local limit=$1 what=$2 t0=$SECONDS
  shift 2
  until "$@"; do
    ((SECONDS - t0 < limit)) || die "$what: not within $limit s (logs in $WORK)"
    sleep 0.5
  done
}

# --- 4. the series are there -------------------------------------------------
wait_for 60 "Prometheus ready" curl -sf --max-time 2 "$PROM/-/ready" -o /dev/null
both_up() { [[ $(count 'up{job="order-worker"} == 1') -eq 2 ]]; }
wait_for 60 "both replicas scraped" both_up
assigned() { [[ $(query 'sum(order_worker_assigned_partitions)' | jq -r '.data.result[0].value[1] // 0') == 2 ]]; }
wait_for 90 "the two input partitions assigned" assigned
# Some traffic, so that rates and histograms have data: 20 batches.
for n in $(seq 1 20); do
  printf '{"user_id":7,"orders":[{"external_order_no":"A-%s","amount":"1.00"}]}' "$n" |
    "$KIT" produce "$OW_KAFKA_BOOTSTRAP" "$IN" --key "alerts-$n" >/dev/null
done
# (>= : a redelivery after a rebalance adds a replayed CREATED result)
results() { query 'sum(order_worker_results_total{code="CREATED"})' | jq -e '(.data.result[0].value[1] // "0" | tonumber) >= 20' >/dev/null; }
wait_for 60 "20 results counted by Prometheus" results
for m in order_worker_messages_consumed_total order_worker_results_total order_worker_database_up \
         order_worker_consumer_lag order_worker_end_to_end_seconds_bucket order_worker_retries_total; do
  [[ $(count "$m") -gt 0 ]] || die "Prometheus has no series $m"
done
[[ $(count 'count by (instance) (order_worker_database_up)') -eq 2 ]] || die "order_worker_database_up not from both replicas"
say "prometheus: both replicas scraped every 1 s; the worker's series are there"

# Every metric the dashboard or the rules name exists in a live /metrics.
curl -sf --max-time 5 "http://127.0.0.1:${ports[0]}/metrics" >"$WORK/metrics.txt"
grep -vE '^#' "$WORK/metrics.txt" | sed -E 's/[{ ].*//' | sort -u >"$WORK/exposed.txt"
{ jq -r '.. | objects | (.expr?, .definition?) // empty' "$DASH"
  grep -E '^\s+expr:|^\s{10,}\S' "$RULES"; } |
  grep -oE '[a-zA-Z_:][a-zA-Z0-9_:]*' | grep -E '^order_worker_' | sort -u >"$WORK/named.txt"
missing=$(comm -23 "$WORK/named.txt" "$WORK/exposed.txt")
[[ -z $missing ]] || die "named in the dashboard or rules but not in /metrics: $missing"
say "metric names: all $(wc -l <"$WORK/named.txt") named by the dashboard and the rules are in a replica's /metrics"
# Recorded series the alerts use are defined by the rules, and appear once a
# rate has two samples (waited for: one check without waiting failed once).
has_series() { [[ $(count "$1") -gt 0 ]]; }
for rec in $(grep -oE '[a-z_]+:order_worker_[a-z0-9_]+:[a-z0-9_]+' "$RULES" | sort -u); do
  grep -qE "record: $rec\$" "$RULES" || die "recorded series $rec is used but not recorded"
  wait_for 30 "Prometheus has the recorded series $rec" has_series "$rec"
done
# Every dashboard query, with Grafana's variables filled in, evaluates and
# returns series.
n=0
while IFS= read -r expr; do
  q=${expr//\$__rate_interval/15s}
  q=${q//\$job/order-worker}
  [[ $(count "$q") -gt 0 ]] || die "dashboard query returns nothing: $q"
  n=$((n + 1))
done < <(jq -r '.. | objects | select(has("expr")) | .expr' "$DASH")
say "dashboard: all $n queries return series from the live Prometheus"

# --- 5. the database alert -----------------------------------------------------
alert_states() {  # -> "instance state" lines of OrderWorkerDatabaseUnavailable
  curl -sf --max-time 5 "$PROM/api/v1/alerts" |
    jq -r '.data.alerts[] | select(.labels.alertname == "OrderWorkerDatabaseUnavailable")
           | "\(.labels.instance) \(.state)"'
}
sleep 3
[[ -z $(alert_states) ]] || die "OrderWorkerDatabaseUnavailable is active while the database is up: $(alert_states)"
t_down=$(date +%s.%N)
db_stopped=1
services mariadb-down >"$WORK/mariadb-down.log" 2>&1
t_stopped=$(date +%s.%N)
first=""
first_firing() {  # true once both replicas' alerts fire; notes when the first did
  local n
  n=$(alert_states | grep -c ' firing$' || true)
  [[ -z $first && $n -gt 0 ]] && first=$(date +%s.%N)
  [[ $n -eq 2 ]]
}
wait_for 120 "OrderWorkerDatabaseUnavailable firing for both replicas" first_firing
t_fire=$(date +%s.%N)
say "database stopped (mariadb-down took $(secs "$t_down" "$t_stopped") s): alert firing for the first replica $(secs "$t_down" "$first") s and for both $(secs "$t_down" "$t_fire") s after the stop began (scrape 1 s, evaluation 1 s, for: 5 s, idle ping 5 s)"
t_up=$(date +%s.%N)
services mariadb-up >"$WORK/mariadb-up.log" 2>&1
db_stopped=0
t_started=$(date +%s.%N)
cleared() { [[ -z $(alert_states) ]]; }
wait_for 120 "OrderWorkerDatabaseUnavailable cleared" cleared
t_clear=$(date +%s.%N)
say "database started (mariadb-up took $(secs "$t_up" "$t_started") s): alert cleared $(secs "$t_up" "$t_clear") s after the start began"
mysql_root -e "DROP DATABASE $DB; DROP USER IF EXISTS 'ow_alerts'@'%'" || true
say "passed: $n_alerts alerts, $n_cases promtool checks; database alert fired in $(secs "$t_down" "$t_fire") s and cleared ($SECONDS s)"
