#!/usr/bin/env bash
# The shards tier: three throwaway MariaDB instances as user
# shards, each on its own port, and one Kafka broker; two replicas over them.
#   1. migrate records the map on every shard; run with the list reordered
#      exits 2 naming both maps;
#   2. a scripted mix (retries, key reuse, clashes, invalid) from users
#      spread over all three shards, and the same key twice from one user of
#      each shard;
#   3. a shard outage under load: shard 1 is stopped for 20 s while messages
#      keep coming; results for the other shards' users must keep leaving;
#      then a hang: shard 1's server is stopped with SIGSTOP for 20 s (it
#      keeps its connections and answers nothing); the other shards' users
#      must keep getting results with no gap of 3 s or more (ow-verify
#      prints their count and the longest gap);
#   4. the group catches up, both replicas stop with status 0, `order-worker
#      serve` answers the same-key user of each shard from that shard with
#      the published bytes, `order-worker audit` passes on every shard, and ow-verify checks I1-I8 across the
#      shards and prints the outage's figures;
#   5. resharding 3 -> 6 with scripts/reshard.sh (a worker started with the
#      new list before it exits 2): row counts unchanged, every row on its
#      user's new shard, retries of old keys replayed, I1-I8 hold again.
# Starts and stops its own services under .run/shards (shard 0's MariaDB and
# Kafka there, shards 1 and 2 in .run/shards/db1 and db2: one
# scripts/services.sh state directory per instance). Bounded to 5 minutes.
#
#   scripts/shards.sh                      (after a build; scripts/test.sh runs it)
#   OW_SHARDS_MESSAGES=3000 OW_SHARDS_RATE=150 OW_SHARDS_OUTAGE_S=20 OW_SHARDS_HANG_S=20
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
messages shards --die '' 2

N="${OW_SHARDS_MESSAGES:-3000}"
RATE="${OW_SHARDS_RATE:-150}"
OUTAGE_S="${OW_SHARDS_OUTAGE_S:-20}"
HANG_S="${OW_SHARDS_HANG_S:-20}"
PARTS=4
LIMIT_S=360
RUN="$ROOT/.run/shards"
FAULTS="$RUN/faults.log"
need_built "$BIN" "$KIT" "$BUILD/ow-verify"
clock_start

rm -rf "$RUN"
mkdir -p "$RUN/db1" "$RUN/db2"
: >"$FAULTS"
# Shard 0's MariaDB and the broker in RUN, shards 1 and 2 in RUN/db1, db2.
services_up_in "$RUN" all
services_up_in "$RUN/db1" mariadb
services_up_in "$RUN/db2" mariadb
services_env "$RUN"
REPLICAS=()
on_exit 'kill_each CONT "$HUNG_PID"; kill_each 9 "${REPLICAS[@]}"; kill_each TERM "$GEN_PID" "$SERVE_PID"; wait 2>/dev/null'
PORTS=("$OW_MYSQL_PORT" "$(instance_port "$RUN/db1")" "$(instance_port "$RUN/db2")")
say "broker: $OW_KAFKA_VERSION ($OW_BROKER_KIND) on $OW_KAFKA_BOOTSTRAP; shards: MariaDB $OW_MARIADB_VERSION on :${PORTS[0]} :${PORTS[1]} :${PORTS[2]}"

DB=orders
SHARDS="127.0.0.1:${PORTS[0]}/$DB,127.0.0.1:${PORTS[1]}/$DB,127.0.0.1:${PORTS[2]}/$DB"
REORDERED="127.0.0.1:${PORTS[1]}/$DB,127.0.0.1:${PORTS[0]}/$DB,127.0.0.1:${PORTS[2]}/$DB"
PASSWORD="$(secret s)"
mysql_root() { mariadb_at "${PORTS[$1]}" "${@:2}"; }  # SHARD ARGS...
for s in 0 1 2; do mysql_root "$s" -e "CREATE DATABASE $DB"; done
ORDER_WORKER_MYSQL_USER=root ORDER_WORKER_MYSQL_SHARDS="$SHARDS" "$BIN" migrate >"$RUN/migrate.log"
grep -E '^migrate: .*map recorded' "$RUN/migrate.log" | sed 's/^/shards:   /'
for s in 0 1 2; do worker_user "${PORTS[$s]}" $DB "$PASSWORD"; done
IN=shards-in OUT=shards-out DLQ=shards-dlq GROUP=shards-group
worker_kafka $PARTS $GROUP $IN $OUT $DLQ
export ORDER_WORKER_MYSQL_SHARDS="$SHARDS" ORDER_WORKER_MYSQL_USER=ow_worker \
  ORDER_WORKER_KAFKA_CONSUMER_SESSION_TIMEOUT_MS=6000 ORDER_WORKER_KAFKA_CONSUMER_HEARTBEAT_INTERVAL_MS=500 \
  ORDER_WORKER_COMMIT_INTERVAL_MS=500 ORDER_WORKER_REQUEST_IN_PROGRESS_WAIT_S=2 \
  ORDER_WORKER_RETRY_BACKOFF_MAX_MS=1000 ORDER_WORKER_SHUTDOWN_TIMEOUT_MS=8000
write_private "$RUN/worker.password" "$PASSWORD"
export ORDER_WORKER_MYSQL_PASSWORD_FILE="$RUN/worker.password"

# 1. A reordered list is refused before anything is consumed.
set +e
ORDER_WORKER_MYSQL_SHARDS="$REORDERED" timeout 60 "$BIN" run >"$RUN/reordered.out" 2>"$RUN/reordered.err"
status=$?
set -e
if ((status != 2)) || ! grep -q 'configured map (mysql.shards)' "$RUN/reordered.err" ||
  ! grep -q 'recorded as shard 1' "$RUN/reordered.err"; then
  cat "$RUN/reordered.err"
  say "FAIL: run with a reordered list exited $status, want 2 naming both maps"
  exit 1
fi
say "reordered list refused: exit 2, both maps named ($(grep -c 'shard [0-9] (' "$RUN/reordered.err") map lines)"

METRICS_PORTS=()
for i in 1 2; do
  pick_port port
  METRICS_PORTS+=("$port")
  ORDER_WORKER_METRICS_PORT="${METRICS_PORTS[-1]}" "$BIN" run 2>>"$RUN/worker-$i.log" &
  REPLICAS+=("$!")
done
say "2 replicas started"

# A user id on each shard (docs/contract.md, "Shard routing").
user_on() {  # SHARD
  python3 - "$1" <<'PY'
import sys
want = int(sys.argv[1])
for u in range(5000, 100000):
    h = 14695981039346656037
    for b in str(u).encode():
        h = ((h ^ b) * 1099511628211) % (1 << 64)
    if (h % 4096) % 3 == want:
        print(u)
        break
PY
}
# 2. The mix, then the same key twice from one user of each shard.
say "producing $N mixed messages (users 1-1000 span all shards)"
mix $IN "$N" $((RATE * 2)) 20261201 mix "$RUN/gen-mix.log"
TWICE_USERS=()
for s in 0 1 2; do
  u=$(user_on "$s")
  TWICE_USERS+=("$u")
  v="{\"user_id\":$u,\"orders\":[{\"external_order_no\":\"twice-$s\",\"amount\":\"3.10\"}]}"
  for _ in 1 2; do printf '%s' "$v" | "$KIT" produce "$OW_KAFKA_BOOTSTRAP" $IN --key "twice-$s"; done
done

# 3. The outage: shard 1 stopped for OUTAGE_S seconds under load.
M=$((RATE * (OUTAGE_S + 16)))
say "producing $M messages at $RATE/s; shard 1 goes down in 8 s for $OUTAGE_S s"
mix $IN "$M" "$RATE" 20261202 outage "$RUN/gen-outage.log" &
GEN_PID=$!
sleep 8
services_in "$RUN/db1" mariadb-down >/dev/null
fault shard-down 1 # once it no longer answers
say "shard 1 is down"
# Within the outage: /readyz is 503 naming the shard, /metrics says it is down.
sleep 5
probe_port=${METRICS_PORTS[0]}
ready_code=$(curl -s --max-time 5 -o "$RUN/readyz.txt" -w '%{http_code}' "http://127.0.0.1:$probe_port/readyz" || true)
curl -s --max-time 5 "http://127.0.0.1:$probe_port/metrics" >"$RUN/metrics.txt" || true
if [[ $ready_code != 503 ]] || ! grep -q 'shard 1 unreachable' "$RUN/readyz.txt" ||
  ! grep -q '^order_worker_shard_up{shard="1"} 0$' "$RUN/metrics.txt" ||
  ! grep -q '^order_worker_shard_up{shard="0"} 1$' "$RUN/metrics.txt"; then
  say "FAIL: during the outage /readyz answered $ready_code ($(tr '\n' ' ' <"$RUN/readyz.txt")) or /metrics lacks the shard states"
  readyz_failed=1
else
  say "during the outage: /readyz 503 ($(tr '\n' ' ' <"$RUN/readyz.txt" | sed 's/ *$//')), $(grep -c '^order_worker_shard_up{' "$RUN/metrics.txt") shard_up series, waiting on shard 1: $(sed -n 's/^order_worker_shard_waiting_messages{shard="1"} //p' "$RUN/metrics.txt")"
fi
sleep $((OUTAGE_S - 5))
services_in "$RUN/db1" mariadb-up >/dev/null
fault shard-up 1
say "shard 1 is back"
wait_generator "$RUN/gen-outage.log"

say "waiting for the group to catch up (limit $(left) s)"
catch_up $GROUP $IN 40 2

# 3, continued. The hang: shard 1's server stopped (SIGSTOP) for HANG_S seconds under
#    load. Its connections stay open and nothing answers on them, which is
#    what a hung server or a dropped network looks like.
H=$((RATE * (HANG_S + 12)))
say "producing $H messages at $RATE/s; shard 1 hangs (SIGSTOP) in 6 s for $HANG_S s"
mix $IN "$H" "$RATE" 20261203 hang "$RUN/gen-hang.log" &
GEN_PID=$!
sleep 6
HUNG_PID=$(cat "$RUN/db1/mariadb.pid")
kill -STOP "$HUNG_PID"
hang_t0=$SECONDS
fault shard-hang 1
say "shard 1 hangs"
# The watch calls a shard down after its ping has waited connect_timeout_s
# (5 s): /readyz must say so within 12 s of the hang, whatever the load.
sleep 6
while :; do
  ready_code=$(curl -s --max-time 5 -o "$RUN/readyz-hang.txt" -w '%{http_code}' "http://127.0.0.1:$probe_port/readyz" || true)
  if [[ $ready_code == 503 ]] && grep -q 'shard 1 unreachable' "$RUN/readyz-hang.txt"; then break; fi
  ((SECONDS - hang_t0 < 12)) || break
  sleep 0.5
done
curl -s --max-time 5 "http://127.0.0.1:$probe_port/metrics" >"$RUN/metrics-hang.txt" || true
if [[ $ready_code != 503 ]] || ! grep -q 'shard 1 unreachable' "$RUN/readyz-hang.txt"; then
  say "FAIL: within 12 s of the hang /readyz answered $ready_code ($(tr '\n' ' ' <"$RUN/readyz-hang.txt"))"
  readyz_failed=1
else
  say "during the hang: /readyz 503 after $((SECONDS - hang_t0)) s ($(tr '\n' ' ' <"$RUN/readyz-hang.txt" | sed 's/ *$//')), waiting on shard 1: $(sed -n 's/^order_worker_shard_waiting_messages{shard="1"} //p' "$RUN/metrics-hang.txt") of inflight.max_messages 4096"
fi
sleep $((HANG_S - (SECONDS - hang_t0) > 0 ? HANG_S - (SECONDS - hang_t0) : 0))
kill -CONT "$HUNG_PID"
HUNG_PID=""
fault shard-resume 1
say "shard 1 answers again"
wait_generator "$RUN/gen-hang.log"
catch_up $GROUP $IN 40 2 "after the hang"
failed=${readyz_failed:-0}
for pid in "${REPLICAS[@]}"; do kill -TERM "$pid"; done
for pid in "${REPLICAS[@]}"; do
  set +e; wait "$pid"; st=$?; set -e
  if ((st != 0)); then say "FAIL: replica $pid exited $st after SIGTERM"; failed=1; fi
done
REPLICAS=()

# The same key twice: one record, on the user's shard only; two results,
# the second a byte-identical replay.
"$KIT" read "$OW_KAFKA_BOOTSTRAP" $OUT >"$RUN/results.jsonl"
# Kept for a look afterwards: each result's timestamp, key and headers.
kcat -C -b "$OW_KAFKA_BOOTSTRAP" -t $OUT -e -q -f '%T %k %h\n' >"$RUN/results-times.txt" 2>/dev/null || true
for s in 0 1 2; do
  for t in 0 1 2; do
    c=$(mysql_root "$t" -N $DB -e "SELECT COUNT(*) FROM idempotency_requests
                                   WHERE user_id = ${TWICE_USERS[$s]} AND idempotency_key = 'twice-$s'")
    want=0
    ((s == t)) && want=1
    if [[ $c != "$want" ]]; then
      say "FAIL: key twice-$s of user ${TWICE_USERS[$s]}: $c records on shard $t, want $want"
      failed=1
    fi
  done
  sel='select(.key == $k and (.value | contains("REQUEST_IN_PROGRESS") | not))'
  bodies=$(jq -r --arg k "twice-$s" "$sel | .value" "$RUN/results.jsonl" | sort -u | wc -l)
  replayed=$(jq -r --arg k "twice-$s" "$sel | .headers.replayed" "$RUN/results.jsonl" | sort -u | xargs)
  if [[ $bodies != 1 || $replayed != "false true" ]]; then
    jq -c --arg k "twice-$s" 'select(.key == $k)' "$RUN/results.jsonl" >&2
    say "FAIL: key twice-$s: want a first answer and a byte-identical replay ($bodies bodies, replayed: $replayed)"
    failed=1
  fi
done
say "same key twice from one user of each shard: one record on its shard, one replay each"

# The query service reads each user's record on that user's shard: the
# published bytes for the user of every shard.
pick_port API_PORT
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$RUN/api.token"
chmod 600 "$RUN/api.token"
ORDER_WORKER_API_PORT=$API_PORT ORDER_WORKER_API_TOKEN_FILE="$RUN/api.token" "$BIN" serve 2>>"$RUN/serve.log" &
SERVE_PID=$!
for _ in $(seq 1 100); do
  curl -fs -m 2 "http://127.0.0.1:$API_PORT/healthz" >/dev/null 2>&1 && break
  sleep 0.1
done
serve_ok=1
for s in 0 1 2; do
  code=$(curl -s -m 10 -o "$RUN/serve-$s.body" -w '%{http_code}' -H "Authorization: Bearer $(cat "$RUN/api.token")" \
    "http://127.0.0.1:$API_PORT/v1/requests/${TWICE_USERS[$s]}/twice-$s" || true)
  jq -j -s --arg k "twice-$s" "map($sel | select(.headers.replayed == \"false\")) | first | .value" \
    "$RUN/results.jsonl" >"$RUN/published-$s.body"
  if [[ $code != 201 ]] || ! cmp -s "$RUN/serve-$s.body" "$RUN/published-$s.body"; then
    say "FAIL: serve answered $code for key twice-$s of user ${TWICE_USERS[$s]} (shard $s), want 201 and the published bytes"
    serve_ok=0
    tail -n 5 "$RUN/serve.log" >&2
  fi
done
kill -TERM "$SERVE_PID" && wait "$SERVE_PID" || { say "FAIL: serve did not stop cleanly"; serve_ok=0; }
SERVE_PID=""
if ((serve_ok)); then
  say "serve: the user of each shard answered from its shard, byte for byte the published result"
else
  failed=1
fi

ORDER_WORKER_MYSQL_USER=root ORDER_WORKER_MYSQL_PASSWORD_FILE='' "$BIN" audit >"$RUN/audit.log" ||
  { cat "$RUN/audit.log"; say "FAIL: audit found problems"; failed=1; }
say "audit: $(grep -c '^audit: shard' "$RUN/audit.log") shards audited"

set +e
"$BUILD/ow-verify" --bootstrap "$OW_KAFKA_BOOTSTRAP" --group $GROUP --input $IN --results $OUT \
  --dlq $DLQ --mysql-port "${PORTS[0]}" --database $DB --shards "$SHARDS" --faults "$FAULTS" |
  tee "$RUN/verify.log"
((PIPESTATUS[0] == 0)) || failed=1
set -e
for s in 0 1 2; do
  if ! grep -qE "^verify: shards: 3, request records per shard:.* $s=[1-9]" "$RUN/verify.log"; then
    say "FAIL: shard $s holds no request record"
    failed=1
  fi
done

# 5. Resharding 3 -> 6 (docs/operations.md, "Adding shards"): the new shards
#    are databases orders_n on the same three servers. Workers are stopped.
NEW6="$SHARDS,127.0.0.1:${PORTS[0]}/orders_n,127.0.0.1:${PORTS[1]}/orders_n,127.0.0.1:${PORTS[2]}/orders_n"
totals() {  # TABLE: rows over every database that exists
  local sum=0 s d n
  for s in 0 1 2; do
    for d in $DB orders_n; do
      n=$(mysql_root "$s" -N -e "SELECT COUNT(*) FROM $d.$1" 2>/dev/null || echo 0)
      sum=$((sum + n))
    done
  done
  echo "$sum"
}
for s in 0 1 2; do mysql_root "$s" -e "CREATE DATABASE orders_n"; done
req_before=$(totals idempotency_requests) ord_before=$(totals orders)
set +e
ORDER_WORKER_MYSQL_USER=root ORDER_WORKER_MYSQL_PASSWORD_FILE='' ORDER_WORKER_MYSQL_SHARDS="$NEW6" \
  timeout 60 "$BIN" run >/dev/null 2>"$RUN/early.err"
status=$?
set -e
if ((status != 2)); then cat "$RUN/early.err"; say "FAIL: a worker started with the 6-shard list before resharding exited $status, want 2"; failed=1; fi
printf 'mysql.shards = %s\n' "$NEW6" >"$RUN/new6.conf"
ORDER_WORKER_MYSQL_USER=root ORDER_WORKER_MYSQL_PASSWORD_FILE='' ORDER_WORKER_MYSQL_SHARDS="$NEW6" \
  "$ROOT/scripts/reshard.sh" --config "$RUN/new6.conf" | tee "$RUN/reshard.log" | sed 's/^/shards:   /'
req_after=$(totals idempotency_requests) ord_after=$(totals orders)
say "resharded 3 -> 6: requests $req_before -> $req_after, orders $ord_before -> $ord_after"
if [[ $req_before != "$req_after" || $ord_before != "$ord_after" ]]; then
  say "FAIL: resharding changed the number of rows"
  failed=1
fi
for s in 3 4 5; do
  if ! grep -q "this is shard $s" "$RUN/reshard.log"; then say "FAIL: shard $s has no map"; failed=1; fi
done
for s in 0 1 2; do
  mysql_root "$s" -e "SET @worker_user='ow_worker', @worker_host='%', @worker_password='$PASSWORD',
                      @worker_database='orders_n'; SOURCE $ROOT/sql/worker_user.sql;"
done
# After it, retries of the same keys are replays (the requests are reachable
# on the users' new shards) and new keys are decided on them.
export ORDER_WORKER_MYSQL_SHARDS="$NEW6"
"$BIN" run 2>>"$RUN/worker-6.log" &
REPLICAS+=("$!")
for s in 0 1 2; do
  u=${TWICE_USERS[$s]}
  v="{\"user_id\":$u,\"orders\":[{\"external_order_no\":\"twice-$s\",\"amount\":\"3.10\"}]}"
  printf '%s' "$v" | "$KIT" produce "$OW_KAFKA_BOOTSTRAP" $IN --key "twice-$s"
  v="{\"user_id\":$u,\"orders\":[{\"external_order_no\":\"after-$s\",\"amount\":\"1.00\"}]}"
  printf '%s' "$v" | "$KIT" produce "$OW_KAFKA_BOOTSTRAP" $IN --key "after-$s"
done
for _ in $(seq 60); do "$KIT" lag "$OW_KAFKA_BOOTSTRAP" $GROUP $IN >"$RUN/lag.log" 2>&1 && break; sleep 1; done
kill -TERM "${REPLICAS[0]}"
wait "${REPLICAS[0]}" || { say "FAIL: the 6-shard replica did not stop cleanly"; failed=1; }
REPLICAS=()
"$KIT" read "$OW_KAFKA_BOOTSTRAP" $OUT >"$RUN/results.jsonl"
for s in 0 1 2; do
  r=$(jq -r --arg k "twice-$s" 'select(.key == $k) | .headers.replayed' "$RUN/results.jsonl" | sort | uniq -c | xargs)
  if [[ $r != "1 false 2 true" ]]; then say "FAIL: key twice-$s after resharding: replayed counts \"$r\", want one first answer and two replays"; failed=1; fi
done
set +e
"$BUILD/ow-verify" --bootstrap "$OW_KAFKA_BOOTSTRAP" --group $GROUP --input $IN --results $OUT \
  --dlq $DLQ --mysql-port "${PORTS[0]}" --database $DB --shards "$NEW6" >"$RUN/verify6.log"
((PIPESTATUS[0] == 0)) || { grep FAIL "$RUN/verify6.log"; failed=1; }
set -e
grep -E '^verify: (shards|ok   I1-I3 every row|all invariants|INVARIANTS)' "$RUN/verify6.log" | sed 's/^verify: /verify (6 shards): /'

others=$(sed -n '/shard outage:/s/.*results during it: \([0-9]*\) for the other.*/\1/p' "$RUN/verify.log")
# The data's outage ends with shard 1's first first-time answer: if that
# came within half the outage, the shard answered while it was down.
down_ms=$(sed -n 's/.*shard 1 down \([0-9]*\) ms.*/\1/p' "$RUN/verify.log")
if [[ -z $down_ms || $down_ms -lt $((OUTAGE_S * 500)) ]]; then
  say "FAIL: shard 1's users got a first-time answer ${down_ms:-?} ms into its ${OUTAGE_S} s outage"
  failed=1
fi
if [[ -z $others || $others -eq 0 ]]; then
  say "FAIL: no result left for the other shards' users during the outage"
  failed=1
fi
finish "$failed"
