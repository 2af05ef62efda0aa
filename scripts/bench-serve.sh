#!/usr/bin/env bash
# Lookups/s and latency (p50, p99) of the query service (`order-worker
# serve`) for a found and a not-found lookup, measured with
# ApacheBench (`ab`, package apache2-utils) over loopback with keep-alive.
# Short and bounded: each run is at most N requests (default 20000) and 30 s.
#
# usage: scripts/bench-serve.sh [--old-build DIR | --old BIN] [N] [CONCURRENCY]
#
# With --old-build DIR (DIR/order-worker) or --old BIN, that binary's serve
# is measured too, on the same database, each lookup old then new, and the
# last line compares the found lookup:
#   serve: lookups/s old = X new = Y (new/old = R); p50/p99 old = a/b ms new = c/d ms
# (an earlier line compares the not-found lookup the same way). p50 and
# p99 are ab's percentiles of the time per request (its -e table).
#
# Needs the services of scripts/services.sh running (OW_RUN_DIR, default
# <repo>/.run) and a built tree (OW_BUILD_DIR, default <repo>/build), whose
# order-worker is the new binary. It makes its own database (10,001 request
# records) and stops what it starts.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
messages bench-serve --die '' 2

export OW_RUN_DIR="${OW_RUN_DIR:-$ROOT/.run}"
OLD=""
while (($# > 0)); do
  case $1 in
    --old-build) [[ $# -ge 2 ]] || die "--old-build needs a build directory"
      OLD=$2/order-worker; shift ;;
    --old) [[ $# -ge 2 ]] || die "--old needs a binary"
      OLD=$2; shift ;;
    *) break ;;
  esac
  shift
done
N=${1:-20000}
C=${2:-16}
[[ $N =~ ^[0-9]+$ && $C =~ ^[0-9]+$ ]] || die "N and CONCURRENCY are integers"
NEW="$BIN"
for bin in "$NEW" ${OLD:+"$OLD"}; do
  [[ -x $bin ]] || die "$bin is not an executable"
done
services_env "$OW_RUN_DIR"
DB="bench_serve_$$"
WORK="$(mktemp -d)"
TOKEN="$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')"
PW="$(secret b)"
pick_port PORT
pid=""

stop_serve() {
  if [[ -n $pid ]]; then
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    pid=""
  fi
}
cleanup() {
  stop_serve
  mysql_root -e "DROP DATABASE IF EXISTS $DB; DROP USER IF EXISTS 'ow_bench_api'@'%'"
  rm -rf "$WORK"
}
on_exit cleanup
mysql_root() { mariadb_at "$OW_MYSQL_PORT" "$@"; }

mysql_root -e "CREATE DATABASE $DB"
ORDER_WORKER_MYSQL_PORT=$OW_MYSQL_PORT ORDER_WORKER_MYSQL_USER=root ORDER_WORKER_MYSQL_DATABASE=$DB \
  "$NEW" migrate >/dev/null
mysql_root -e "SET @api_user='ow_bench_api', @api_host='%', @api_password='$PW',
               @api_database='$DB'; SOURCE $ROOT/sql/api_user.sql;"
# One looked-up record among 10,000 others, with a body of the usual size.
BODY='{"status":201,"code":"CREATED","user_id":42,"idempotency_key":"bench-found","request_digest":"617ba20a7005cb1c5dcf1f0b4450af614802fb12ad0b2655813278e4d2996c08","orders":[{"index":0,"external_order_no":"B20260827-001","order_id":121027840266211328,"order_no":"OW-03BFT5QSG0400","amount":"19.90","existing":false}]}'
mysql_root "$DB" -e "
  INSERT INTO idempotency_requests (id, user_id, idempotency_key, request_digest, status,
      response_status, response_body)
    SELECT seq, 1000 + seq, CONCAT('filler-', seq), UNHEX(SHA2(seq, 256)), 'SUCCEEDED', 201, '$BODY'
    FROM seq_1_to_10000;
  INSERT INTO idempotency_requests (id, user_id, idempotency_key, request_digest, status,
      response_status, response_body)
    VALUES (20000, 42, 'bench-found', UNHEX('617ba20a7005cb1c5dcf1f0b4450af614802fb12ad0b2655813278e4d2996c08'),
            'SUCCEEDED', 201, '$BODY');"

write_private "$WORK/token" "$TOKEN"  # serve refuses a token file others may read
cat >"$WORK/serve.conf" <<CONF
mysql.port = $OW_MYSQL_PORT
mysql.user = ow_bench_api
mysql.password = $PW
mysql.database = $DB
api.port = $PORT
api.token_file = $WORK/token
api.rate_limit = 0
log.level = warn
CONF

start_serve() {  # BIN
  "$1" serve --config "$WORK/serve.conf" 2>>"$WORK/serve.log" &
  pid=$!
  for _ in $(seq 50); do curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null && return 0; sleep 0.1; done
  { say "$1 serve did not answer /healthz within 5 s:"; tail -n 5 "$WORK/serve.log"; } >&2
  exit 1
}

# measure NAME PATH EXPECTED_STATUS: one ab run against the serve running;
# prints its line and sets RPS, P50 and P99 (ms).
measure() {
  local out
  curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $TOKEN" \
    "http://127.0.0.1:$PORT$2" | grep -qx "$3" || { say "$2 is not $3"; exit 1; }
  out="$(ab -k -q -t 30 -n "$N" -c "$C" -e "$WORK/pct.csv" -H "Authorization: Bearer $TOKEN" \
    "http://127.0.0.1:$PORT$2" 2>&1)"
  RPS="$(awk '/^Requests per second/ {print $4}' <<<"$out")"
  P50="$(awk -F, '$1 == "50" {print $2}' "$WORK/pct.csv")"
  P99="$(awk -F, '$1 == "99" {print $2}' "$WORK/pct.csv")"
  printf 'bench-serve: %-9s %s lookups/s, p50/p99 %s/%s ms (%s requests, %s failed, %s non-2xx, concurrency %s)\n' \
    "$1" "$RPS" "$P50" "$P99" "$(awk '/^Complete requests/ {print $3}' <<<"$out")" \
    "$(awk '/^Failed requests/ {print $3}' <<<"$out")" \
    "$(awk '/^Non-2xx responses/ {print $3}' <<<"$out" | grep . || echo 0)" "$C"
}

say "$(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg), api.threads 4, ab $(ab -V | awk 'NR==1 {print $5}') with keep-alive, loopback"
if [[ -z $OLD ]]; then
  start_serve "$NEW"
  measure found /v1/requests/42/bench-found 201
  measure not-found /v1/requests/42/bench-missing 404
  exit 0
fi

# compare NAME PATH STATUS PREFIX: the old binary's serve, then the new one's.
compare() {
  local o_rps o_p50 o_p99
  start_serve "$OLD"
  measure "$1 (old)" "$2" "$3"
  o_rps=$RPS o_p50=$P50 o_p99=$P99
  stop_serve
  start_serve "$NEW"
  measure "$1 (new)" "$2" "$3"
  stop_serve
  printf '%s: lookups/s old = %s new = %s (new/old = %s); p50/p99 old = %s/%s ms new = %s/%s ms\n' \
    "$4" "$o_rps" "$RPS" "$(awk -v a="$o_rps" -v b="$RPS" 'BEGIN { printf "%.2f", (a > 0 ? b / a : 0) }')" \
    "$o_p50" "$o_p99" "$P50" "$P99"
}
say "old $OLD, new $NEW"
compare not-found /v1/requests/42/bench-missing 404 "serve (not-found)"
compare found /v1/requests/42/bench-found 201 serve
