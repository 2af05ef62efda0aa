#!/usr/bin/env bash
# Requests/s of the query service (`order-worker serve`, issue 15) for a
# found and a not-found lookup, measured with ApacheBench (`ab`, package
# apache2-utils) over loopback with keep-alive. Short and bounded: each run
# is at most N requests (default 20000) and 30 s.
#
# usage: scripts/bench-serve.sh [N] [CONCURRENCY]
# Needs the services of scripts/services.sh running (OW_RUN_DIR, default
# <repo>/.run) and a built tree (OW_BUILD_DIR, default <repo>/build). It
# makes its own database (10,001 request records) and stops what it starts.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${OW_BUILD_DIR:-$ROOT/build}"
export OW_RUN_DIR="${OW_RUN_DIR:-$ROOT/.run}"
N=${1:-20000}
C=${2:-16}
# shellcheck disable=SC1091
source "$OW_RUN_DIR/services.env"
DB="bench_serve_$$"
WORK="$(mktemp -d)"
TOKEN="$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')"
PW="b-$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')"
PORT=$((20000 + RANDOM % 10000))
pid=""

cleanup() {
  [[ -n $pid ]] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
  mysql_root -e "DROP DATABASE IF EXISTS $DB; DROP USER IF EXISTS 'ow_bench_api'@'%'" || true
  rm -rf "$WORK"
}
trap cleanup EXIT
mysql_root() { mariadb -h127.0.0.1 -P"$OW_MYSQL_PORT" -uroot "$@"; }

mysql_root -e "CREATE DATABASE $DB"
ORDER_WORKER_MYSQL_PORT=$OW_MYSQL_PORT ORDER_WORKER_MYSQL_USER=root ORDER_WORKER_MYSQL_DATABASE=$DB \
  "$BUILD/order-worker" migrate >/dev/null
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

printf '%s\n' "$TOKEN" >"$WORK/token"
chmod 600 "$WORK/token"  # serve refuses a token file others may read
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
"$BUILD/order-worker" serve --config "$WORK/serve.conf" 2>"$WORK/serve.log" &
pid=$!
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null && break; sleep 0.1; done

measure() {  # NAME PATH EXPECTED_STATUS
  local out rps
  curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $TOKEN" \
    "http://127.0.0.1:$PORT$2" | grep -qx "$3" || { echo "bench-serve: $2 is not $3"; exit 1; }
  out="$(ab -k -q -t 30 -n "$N" -c "$C" -H "Authorization: Bearer $TOKEN" "http://127.0.0.1:$PORT$2" 2>&1)"
  rps="$(awk '/^Requests per second/ {print $4}' <<<"$out")"
  printf 'bench-serve: %-9s %s requests/s (%s requests, %s failed, %s non-2xx, concurrency %s; %s)\n' \
    "$1" "$rps" "$(awk '/^Complete requests/ {print $3}' <<<"$out")" \
    "$(awk '/^Failed requests/ {print $3}' <<<"$out")" \
    "$(awk '/^Non-2xx responses/ {print $3}' <<<"$out" | grep . || echo 0)" "$C" \
    "$(awk '/^Time per request.*mean\)$/ {print $4 " ms mean"}' <<<"$out")"
}
echo "bench-serve: $(nproc) cores, api.threads 4, ab $(ab -V | awk 'NR==1 {print $5}') with keep-alive, loopback"
measure found /v1/requests/42/bench-found 201
measure not-found /v1/requests/42/bench-missing 404
