#!/usr/bin/env bash
# The newcomer's tour. Installs what is missing, builds, starts a throwaway
# MariaDB and Apache Kafka, migrates, runs two worker replicas, sends sample
# batches (a first request, its retries, a key reused with other content, an
# existing order reused, a clash, another user with the same key, invalid
# messages, and one key decided by two replicas at the same moment), prints
# a table of the outcomes, the stored record, the database audit and the
# dead letters, and stops everything. Exit 0 when every outcome is the
# expected one.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
export OW_RUN_DIR="$ROOT/.run/demo"
RUN="$OW_RUN_DIR"
PIDS=()

# The demo's steps stand out as headings in its output.
step() { printf '\n== %s\n' "$*"; }

step "installing what is missing and building"
"$ROOT/scripts/deps.sh"
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$BUILD" >/dev/null
echo "built $("$BIN" --version)"

step "starting MariaDB and Kafka (throwaway, loopback)"
mkdir -p "$RUN"
services_up
on_exit 'kill_each TERM "${PIDS[@]}"; wait 2>/dev/null'

step "creating the database, the schema, the worker's user and the topics"
DB=orders_demo
mariadb_at "$OW_MYSQL_PORT" -e "CREATE DATABASE $DB"
PASSWORD="$(secret demo)"
write_private "$RUN/worker.password" "$PASSWORD"
sed -e "s|^kafka.bootstrap.servers = .*|kafka.bootstrap.servers = $OW_KAFKA_BOOTSTRAP|" \
    -e "s|^mysql.port = .*|mysql.port = $OW_MYSQL_PORT|" \
    -e "s|^mysql.database = .*|mysql.database = $DB|" \
    -e "s|^mysql.password_file =.*|mysql.password_file = $RUN/worker.password|" \
    -e "s|^commit.interval_ms = .*|commit.interval_ms = 500|" \
    "$ROOT/config/order-worker.conf" >"$RUN/order-worker.conf"
CONF="$RUN/order-worker.conf"
# migrate needs CREATE: run it as the administrator, overriding two keys.
ORDER_WORKER_MYSQL_USER=root ORDER_WORKER_MYSQL_PASSWORD_FILE='' "$BIN" migrate --config "$CONF"
worker_user "$OW_MYSQL_PORT" $DB "$PASSWORD" order_worker
echo "user order_worker may: SELECT, INSERT, UPDATE, DELETE on the two tables (sql/worker_user.sql)"
for t in order-batches:6 order-batch-results:6 order-batches.dlq:1; do
  "$KIT" create-topic "$OW_KAFKA_BOOTSTRAP" "${t%:*}" "${t#*:}"
done
echo "topics: order-batches (6 partitions), order-batch-results (6), order-batches.dlq (1)"

step "starting two worker replicas in one consumer group"
for i in 1 2; do
  "$BIN" run --config "$CONF" 2>"$RUN/replica-$i.log" &
  PIDS+=($!)
done
for _ in $(seq 60); do
  if grep -q partitions_assigned "$RUN/replica-1.log" && grep -q partitions_assigned "$RUN/replica-2.log"; then break; fi
  sleep 0.5
done
for i in 1 2; do
  echo "replica $i (pid ${PIDS[i-1]}): $(grep -o '"event":"partitions_assigned","count":[0-9]*' "$RUN/replica-$i.log" | tail -1 | sed 's/.*count":/partitions: /')"
done

ROWS=()
fails=0
# The records of TOPIC that match the jq condition SELECT, once there are N
# of them or after 30 s. send --wait returns when it has read the result;
# a dead-letter copy is produced after the result and acknowledged later,
# and on a cold broker the first write to a topic takes a while.
read_until() {  # TOPIC N SELECT
  local topic=$1 want=$2 select=$3 out n deadline=$((SECONDS + 30))
  while :; do
    out="$("$KIT" read "$OW_KAFKA_BOOTSTRAP" "$topic" 2>/dev/null | jq -c "select($select)" || true)"
    n=$(grep -c . <<<"$out" || true)
    ((n < want && SECONDS < deadline)) || break
    sleep 0.2
  done
  [[ -z $out ]] || printf '%s\n' "$out"
}
send() {  # N SCENARIO USER KEY EXPECT DOC
  local n=$1 what=$2 user=$3 key=$4 expect=$5 doc=$6 out err code replayed detail
  out="$(printf '%s' "$doc" | "$BIN" send --config "$CONF" --user "$user" --key "$key" --wait 2>"$RUN/send.err")" || true
  err="$(cat "$RUN/send.err")"
  printf '%s\n' "$out" >"$RUN/result-$n.json"
  code="$(jq -r '"\(.status) \(.code)"' <<<"$out" 2>/dev/null || echo "no result")"
  replayed="$(sed -n 's/^replayed: //p' <<<"$err")"
  detail="$(jq -r '
      if .code == "CREATED" then "orders " + ([.orders[] | "\(.external_order_no)=\(.order_no)\(if .existing then " (existing)" else "" end)"] | join(", "))
      elif .code == "ORDER_ALREADY_EXISTS" then "conflicts " + ([.conflicts[] | "#\(.index) \(.external_order_no) \(.fields | join("+"))"] | join(", "))
      elif .code == "INVALID_REQUEST" then "errors " + ([.errors[] | .field] | join(", "))
      else (.message // "") end' <<<"$out" 2>/dev/null || true)"
  [[ $code == "$expect" ]] || { fails=$((fails + 1)); detail="EXPECTED $expect; $detail"; }
  ROWS+=("$(printf '%-2s|%-34s|%-5s|%-11s|%-30s|%-8s|%s' "$n" "$what" "$user" "$key" "$code" "${replayed:--}" "$detail")")
}

step "sending sample batches (each waits for its result)"
FIRST='{"user_id":42,"orders":[{"external_order_no":"D-100","amount":"19.90","product_id":101},{"external_order_no":"D-101","amount":"5.00","quantity":2}]}'
send 1 "first request" 42 demo-1 "201 CREATED" "$FIRST"
send 2 "retry, same bytes" 42 demo-1 "201 CREATED" "$FIRST"
send 3 "retry, respelled (19.9, key order)" 42 demo-1 "201 CREATED" \
  '{ "orders": [ {"product_id":101, "amount":19.9, "external_order_no":"D-100"}, {"quantity":2,"external_order_no":"D-101","amount":5} ], "user_id": 42 }'
send 4 "same key, other content" 42 demo-1 "409 IDEMPOTENCY_KEY_REUSED" \
  '{"user_id":42,"orders":[{"external_order_no":"D-102","amount":"1.00"}]}'
send 5 "new key, identical existing order" 42 demo-2 "201 CREATED" \
  '{"user_id":42,"orders":[{"external_order_no":"D-100","amount":"19.90","product_id":101},{"external_order_no":"D-103","amount":"7.50"}]}'
CONFLICT='{"user_id":42,"orders":[{"external_order_no":"D-104","amount":"3.00"},{"external_order_no":"D-101","amount":"6.00","quantity":2}]}'
send 6 "new key, existing order differs" 42 demo-3 "409 ORDER_ALREADY_EXISTS" "$CONFLICT"
send 7 "retry of the conflicting request" 42 demo-3 "409 ORDER_ALREADY_EXISTS" "$CONFLICT"
send 8 "same key, another user" 7 demo-1 "201 CREATED" \
  '{"user_id":7,"orders":[{"external_order_no":"D-100","amount":"19.90"}]}'
send 9 "poison: not JSON" 42 demo-poison "400 INVALID_REQUEST" 'this is not JSON {'
send 10 "invalid field" 42 demo-bad "400 INVALID_REQUEST" \
  '{"user_id":42,"orders":[{"external_order_no":"D-105","amount":"1.999","quantity":0}]}'

step "one key on two partitions at the same moment (two replicas may decide it)"
RACE='{"user_id":42,"orders":[{"external_order_no":"D-200","amount":"12.00"}]}'
printf '%s' "$RACE" | "$KIT" produce "$OW_KAFKA_BOOTSTRAP" order-batches --partition 0 --key demo-race &
p0=$!
printf '%s' "$RACE" | "$KIT" produce "$OW_KAFKA_BOOTSTRAP" order-batches --partition 3 --key demo-race &
wait "$p0" "$!" || true
race="$(read_until order-batch-results 2 '.key == "demo-race"')"
n_race=$(grep -c . <<<"$race" || true)
bodies=$(jq -r '.value' <<<"$race" | sort -u | grep -c . || true)
echo "$race" | jq -r '"  partition \(.headers["source-partition"]) offset \(.headers["source-offset"]): replayed=\(.headers.replayed) \(.value | fromjson | "\(.status) \(.code)")"'
if [[ $n_race -ne 2 || $bodies -ne 1 ]]; then fails=$((fails + 1)); echo "  EXPECTED two identical results"; fi
rows=$(mariadb_at "$OW_MYSQL_PORT" -N $DB -e \
  "SELECT COUNT(*) FROM idempotency_requests WHERE idempotency_key='demo-race'")
echo "  request records for demo-race: $rows (the unique key decided)"

step "outcomes"
printf '%-2s|%-34s|%-5s|%-11s|%-30s|%-8s|%s\n' "#" "scenario" "user" "key" "result" "replayed" "detail"
printf '%s\n' "--+----------------------------------+-----+-----------+------------------------------+--------+------"
printf '%s\n' "${ROWS[@]}"
if cmp -s "$RUN/result-1.json" "$RUN/result-2.json" && cmp -s "$RUN/result-1.json" "$RUN/result-3.json"; then
  echo "results 1, 2 and 3 are byte-identical"
else
  echo "results 1, 2 and 3 DIFFER"; fails=$((fails + 1))
fi

step "the stored record: order-worker lookup --user 42 --key demo-1"
"$BIN" lookup --config "$CONF" --user 42 --key demo-1 | jq -c '{status, response_status, request_digest, orders: [.orders[] | {order_no, external_order_no, amount}]}'

step "dead letters (order-batches.dlq)"
dead="$(read_until order-batches.dlq 2 '.key == "demo-poison" or .key == "demo-bad"')"
[[ -z $dead ]] || jq -r '"  key=\(.key) error=\(.headers["error-message"]) bytes=\(.value | @json)"' <<<"$dead"
if [[ $(grep -c . <<<"$dead" || true) -ne 2 ]]; then
  fails=$((fails + 1)); echo "  EXPECTED the dead letters of demo-poison and demo-bad"
fi

step "database audit: order-worker audit"
"$BIN" audit --config "$CONF" || fails=$((fails + 1))

step "stopping the replicas (SIGTERM)"
for i in 1 2; do
  kill -TERM "${PIDS[i-1]}"
  status=0
  wait "${PIDS[i-1]}" || status=$?
  echo "replica $i exited with status $status"
  [[ $status -eq 0 ]] || fails=$((fails + 1))
done
PIDS=()
"$KIT" lag "$OW_KAFKA_BOOTSTRAP" order-worker order-batches | tail -1

if ((fails > 0)); then
  step "demo FAILED: $fails unexpected outcome(s); logs in $RUN"
  exit 1
fi
step "demo finished: every outcome as expected (logs in $RUN)"
