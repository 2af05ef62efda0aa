#!/usr/bin/env bash
# The `container` tier: the image of scripts/image.sh run as a deployment
# runs it. Three replicas, each a podman container with a read-only root
# filesystem, --cap-drop=ALL, no new privileges, the image's non-root user,
# and the database password mounted as a file, run processing.guarantee =
# exactly_once_v2 on three brokers (scripts/kafka-cluster.sh) and MariaDB,
# against the chaos mix (about 25 % retries, 2 % key reuse, 2 % clashes,
# 1 % invalid):
#   * `migrate` runs first, as a one-shot container;
#   * each replica's worker.replica_id and kafka group.instance.id (static
#     membership) are its container's name, as a StatefulSet gives a pod
#     its name;
#   * a killer sends `podman kill --signal KILL` to a random replica every
#     1-3 s; its supervisor starts it again under the same name, which
#     fences its predecessor's transactions;
#   * the group is scaled 3 -> 1 -> 3 with `podman stop` (SIGTERM, then the
#     grace period), and at the end every replica is stopped so: each stop
#     must exit 0 within shutdown.timeout_ms (plus what podman takes),
#     never reaching the grace period's SIGKILL;
#   * `serve` runs in a container and must answer a lookup with the bytes
#     of a published result, and refuse a wrong token.
# Then ow-verify reads the topics with isolation.level=read_committed and
# checks I1-I8, exactly one result per message and one dead-letter copy per
# invalid one. A self-check plants a duplicate result and a message that
# never got one (a loss): the verifier must see both. Every container of
# the run carries the label ow.test.run=<run id> and is removed at exit,
# also after a failure. Bounded to 5 minutes; starts and stops its own
# MariaDB and brokers (under .run/container). Exit 0 only if every check
# holds; the figures line says what held.
#
#   scripts/container.sh          (after scripts/image.sh and a build of the tools)
#   OW_CONTAINER_MESSAGES=N       messages of the mix (default 12000)
#   OW_CONTAINER_NO_RESTART=1     a killed replica is not started again: the
#                                 run must fail (the tier's own self-check)
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
messages container --die '' 2

N="${OW_CONTAINER_MESSAGES:-12000}"
PARTS=6
LIMIT_S=300
NO_RESTART="${OW_CONTAINER_NO_RESTART:-0}"
export OW_RUN_DIR="$ROOT/.run/container"
export OW_KAFKA_BROKERS=3
RUN="$OW_RUN_DIR"
FAULTS="$RUN/faults.log"
VERSION="$(sed -n 's/^project(order-worker VERSION \([0-9.]*\).*/\1/p' "$ROOT/CMakeLists.txt")"
IMAGE="order-worker:$VERSION"
USER_ID=10001
# The worker's stop bound, and the grace period podman stop gives before
# SIGKILL: above the bound plus the 2 s after which the worker ends itself.
SHUTDOWN_MS=5000
GRACE_S=$((SHUTDOWN_MS / 1000 + 3))

need_built "$KIT" "$BUILD/ow-verify"
command -v podman >/dev/null 2>&1 || die_with 2 "podman is missing: run scripts/deps.sh"
podman image exists "$IMAGE" || die_with 2 "$IMAGE is not in podman: run scripts/image.sh"
RUN_ID="$(od -An -N4 -tx4 /dev/urandom | tr -d ' ')"
NAME="owc-$RUN_ID"
clock_start

mkdir -p "$RUN"
rm -rf "$RUN"/replica-* "$FAULTS" "$RUN"/worker-*.log "$RUN"/*.log "$RUN/lso.txt" "$RUN/secrets"
services_up
BOOT="$OW_KAFKA_BOOTSTRAP"
# Registered after the services' stop, so it runs before it: the containers
# go first, whatever ended the run.
remove_containers() {
  local ids
  ids="$(podman ps -aq --filter "label=ow.test.run=$RUN_ID" 2>/dev/null || true)"
  # shellcheck disable=SC2086
  [[ -z $ids ]] || podman rm -f -t 0 $ids >/dev/null 2>&1 || true
  # The README's command carries no label of the run.
  podman rm -f -t 0 "$NAME-readme" >/dev/null 2>&1 || true
}
on_exit 'remove_containers; stop_fault_run KILLER_PID GEN_PID WATCH_PID'
say "image $IMAGE ($(podman image inspect --format '{{.Digest}}' "$IMAGE")); brokers: $OW_KAFKA_VERSION on $BOOT;" \
  "MariaDB $OW_MARIADB_VERSION on :$OW_MYSQL_PORT; containers $NAME-*"

# What every container of the run gets: the run's label, the machine's
# podman flags (lib.sh) and the restrictions a cluster would impose.
CONTAINER_FLAGS=(--label "ow.test.run=$RUN_ID" --read-only --cap-drop=ALL
  --security-opt no-new-privileges --user "$USER_ID:$USER_ID")
DB=orders IN=ctr-in OUT=ctr-out DLQ=ctr-dlq GROUP=ctr-group

# --- the database: migrate as a one-shot container, then the users -----------
mariadb_at "$OW_MYSQL_PORT" -e "CREATE DATABASE $DB"
podman_run --rm --name "$NAME-migrate" "${CONTAINER_FLAGS[@]}" \
  -e ORDER_WORKER_MYSQL_HOST=127.0.0.1 -e ORDER_WORKER_MYSQL_PORT="$OW_MYSQL_PORT" \
  -e ORDER_WORKER_MYSQL_USER=root -e ORDER_WORKER_MYSQL_DATABASE=$DB "$IMAGE" migrate \
  >"$RUN/migrate.log" 2>&1 || { cat "$RUN/migrate.log"; die_with 1 "migrate in a container failed"; }
[[ -n "$(mariadb_at "$OW_MYSQL_PORT" -N -e "SHOW TABLES FROM $DB LIKE 'idempotency_requests'")" ]] ||
  die_with 1 "migrate in a container exited 0 but made no tables"
say "migrate ran as a one-shot container"
# The secrets are files the container's user owns and alone may read, as a
# Secret volume mounts them.
mkdir -p "$RUN/secrets"
worker_pw="$(secret w)" api_pw="$(secret a)"
worker_user "$OW_MYSQL_PORT" $DB "$worker_pw"
mariadb_at "$OW_MYSQL_PORT" -e "SET @api_user='ow_api', @api_host='%', @api_password='$api_pw',
  @api_database='$DB'; SOURCE $ROOT/sql/api_user.sql;"
write_private "$RUN/secrets/mysql-password" "$worker_pw"
write_private "$RUN/secrets/api-mysql-password" "$api_pw"
TOKEN="$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')"
write_private "$RUN/secrets/api-token" "$TOKEN"
chown -R "$USER_ID:$USER_ID" "$RUN/secrets"
chmod 500 "$RUN/secrets"

create_topics "$PARTS" $IN $OUT $DLQ
# No secret among them: the password is mysql.password_file.
cat >"$RUN/worker.env" <<EOF
ORDER_WORKER_MYSQL_HOST=127.0.0.1
ORDER_WORKER_MYSQL_PORT=$OW_MYSQL_PORT
ORDER_WORKER_MYSQL_USER=ow_worker
ORDER_WORKER_MYSQL_DATABASE=$DB
ORDER_WORKER_MYSQL_PASSWORD_FILE=/run/secrets/mysql-password
ORDER_WORKER_KAFKA_BOOTSTRAP_SERVERS=$BOOT
ORDER_WORKER_KAFKA_GROUP_ID=$GROUP
ORDER_WORKER_TOPIC_INPUT=$IN
ORDER_WORKER_TOPIC_RESULTS=$OUT
ORDER_WORKER_TOPIC_DLQ=$DLQ
ORDER_WORKER_PROCESSING_GUARANTEE=exactly_once_v2
ORDER_WORKER_KAFKA_CONSUMER_SESSION_TIMEOUT_MS=6000
ORDER_WORKER_KAFKA_CONSUMER_HEARTBEAT_INTERVAL_MS=500
ORDER_WORKER_REQUEST_IN_PROGRESS_WAIT_S=2
ORDER_WORKER_RETRY_BACKOFF_MAX_MS=2000
ORDER_WORKER_SHUTDOWN_TIMEOUT_MS=$SHUTDOWN_MS
ORDER_WORKER_REBALANCE_DRAIN_TIMEOUT_MS=2000
EOF

# --- replicas under supervision ----------------------------------------------
# Replica I is the container $NAME-I, started again under that name after
# every exit until stop_container I. Its exits go to RUN/exits.log as
# lib.sh's supervisor writes them; RUN/replica-I.up exists while it runs.
run_replica() {  # I
  local name="$NAME-$1"
  podman_run --rm --name "$name" "${CONTAINER_FLAGS[@]}" --stop-timeout "$GRACE_S" \
    --env-file "$RUN/worker.env" -e ORDER_WORKER_WORKER_REPLICA_ID="$name" \
    -e ORDER_WORKER_KAFKA_CONSUMER_GROUP_INSTANCE_ID="$name" \
    -v "$RUN/secrets/mysql-password:/run/secrets/mysql-password:ro" "$IMAGE" run
}
supervise_container() {  # I
  local i=$1 status
  while [[ -f $RUN/replica-$i.enabled ]]; do
    # A name left by a container that podman has not removed yet.
    podman rm -f -t 0 "$NAME-$i" >/dev/null 2>&1 || true
    touch "$RUN/replica-$i.up"
    set +e; run_replica "$i" >>"$RUN/worker-$i.log" 2>&1; status=$?; set -e
    replica_exited "$i" "$NAME-$i" "$status"
    rm -f "$RUN/replica-$i.up"
    [[ -f $RUN/replica-$i.enabled ]] || break
    if ((NO_RESTART && status == 137)); then
      say "replica $i was killed and is not started again (OW_CONTAINER_NO_RESTART=1)"
      break
    fi
    replica_restart "$i"
  done
}
start_container() {  # I
  touch "$RUN/replica-$1.enabled"
  supervise_container "$1" &
}
# podman stop, timed: SIGTERM, SIGKILL after the grace period. Each stop
# is a line "stop I exit S MS" in RUN/stops.log once the supervisor has
# recorded the exit.
stop_container() {  # I
  local i=$1 t0 t1 status
  rm -f "$RUN/replica-$i.enabled"
  t0=$(now_ms)
  podman stop -t "$GRACE_S" "$NAME-$i" >/dev/null 2>&1 || true
  t1=$(now_ms)
  # The supervisor records the exit, then removes the up file.
  for _ in $(seq 100); do
    [[ -f $RUN/replica-$i.up ]] || break
    sleep 0.1
  done
  status="$(sed -n "s/^replica $i pid $NAME-$i exit //p" "$RUN/exits.log" | tail -n 1)"
  echo "stop $i exit ${status:-?} $((t1 - t0))" >>"$RUN/stops.log"
}
stop_containers() {  # I...: side by side, as a cluster scales down
  local i pids=()
  for i in "$@"; do
    stop_container "$i" &
    pids+=($!)
  done
  wait "${pids[@]}"
}
killer_containers() {  # SECONDS
  local until=$((SECONDS + $1)) up victim
  while ((SECONDS < until)); do
    sleep "$((1 + RANDOM % 3))"
    mapfile -t up < <(compgen -G "$RUN/replica-*.up" || true)
    ((${#up[@]} > 0)) || continue
    victim="${up[RANDOM % ${#up[@]}]}"
    victim="${victim##*/replica-}"
    victim="${victim%.up}"
    if podman kill --signal KILL "$NAME-$victim" >/dev/null 2>&1; then fault kill "$NAME-$victim"; fi
  done
}
wait_started() {  # I OFF
  wait_log "$RUN/worker-$1.log" "$2" '"event":"worker_started"' 60 || die_with 1 "replica $1 did not start within 60 s"
}

"$KIT" lso-watch "$BOOT" $OUT "$RUN/lso.txt" --interval-ms 100 --seconds "$LIMIT_S" &
WATCH_PID=$!
for i in 1 2 3; do start_container "$i"; done
for i in 1 2 3; do wait_started "$i" 0; done
say "3 replicas started ($NAME-1..3); producing $N messages over about 60 s"
mix $IN "$N" $((N / 60 + 1)) 20261206 ctr "$RUN/gen.log" &
GEN_PID=$!
sleep 3
killer_containers 40 &
KILLER_PID=$!
say "killer running for 40 s"
wait "$KILLER_PID" || true
KILLER_PID=""
# Every replica the killer hit must be running again under its name.
sleep 2
down=()
for i in 1 2 3; do
  [[ "$(podman container inspect --format '{{.State.Running}}' "$NAME-$i" 2>/dev/null)" == true ]] || down+=("$i")
done
KILLS=$(grep -c '^kill ' "$FAULTS" || true)
say "killer done: $KILLS kills; replicas not running: ${down[*]:-none}"

say "scaling 3 -> 1 (podman stop of 2 and 3)"
fault scale-down
stop_containers 2 3
sleep 12
say "scaling 1 -> 3"
for i in 2 3; do off[i]=$(stat -c %s "$RUN/worker-$i.log"); done
start_container 2
start_container 3
fault scale-up
for i in 2 3; do wait_started "$i" "${off[i]}"; done
wait_generator "$RUN/gen.log"
say "$(tail -n1 "$RUN/gen.log")"
say "waiting for the group to catch up (limit $(left) s)"
catch_up $GROUP $IN 70 3
stop_containers 1 2 3
kill "$WATCH_PID" 2>/dev/null || true
wait "$WATCH_PID" 2>/dev/null || true
WATCH_PID=""

# --- the README's podman command ---------------------------------------------
# Run as written, in a directory with the worker.env and mysql-password it
# names, under this run's name instead of order-worker-1: it must start,
# and stop with exit 0 on podman stop.
readme_ok=0
mkdir -p "$RUN/readme"
cp "$RUN/worker.env" "$RUN/readme/worker.env"
cp -p "$RUN/secrets/mysql-password" "$RUN/readme/mysql-password"
readme_cmd="$(awk '$0 == "<!-- readme-test: podman-run -->" { on = 1; next }
  on && /^```/ { if (b) exit; b = 1; next } b { print }' "$ROOT/README.md")"
[[ $readme_cmd == "podman "* ]] || die_with 1 "README.md: no podman command after <!-- readme-test: podman-run -->"
readme_cmd="${readme_cmd//order-worker-1/$NAME-readme}"
if (cd "$RUN/readme" && eval "$readme_cmd") >"$RUN/readme/run.log" 2>&1; then
  for _ in $(seq 100); do
    podman logs "$NAME-readme" 2>&1 | grep -q '"event":"worker_started"' && { readme_ok=1; break; }
    sleep 0.3
  done
  podman stop -t "$GRACE_S" "$NAME-readme" >/dev/null 2>&1 || true
  readme_exit="$(podman container inspect --format '{{.State.ExitCode}}' "$NAME-readme" 2>/dev/null || echo '?')"
  [[ $readme_exit == 0 ]] || readme_ok=0
  if ((readme_ok)); then
    say "the README's podman command: the replica started and stopped with exit 0"
  else
    podman logs "$NAME-readme" 2>&1 | tail -n 10
    say "the README's podman command: started=$readme_ok, exit ${readme_exit:-?} on podman stop"
  fi
else
  cat "$RUN/readme/run.log"
  say "the README's podman command failed"
fi

# --- serve in a container ------------------------------------------------------
pick_port API_PORT
podman_run -d --name "$NAME-serve" "${CONTAINER_FLAGS[@]}" \
  -e ORDER_WORKER_MYSQL_HOST=127.0.0.1 -e ORDER_WORKER_MYSQL_PORT="$OW_MYSQL_PORT" \
  -e ORDER_WORKER_MYSQL_USER=ow_api -e ORDER_WORKER_MYSQL_DATABASE=$DB \
  -e ORDER_WORKER_MYSQL_PASSWORD_FILE=/run/secrets/api-mysql-password \
  -e ORDER_WORKER_API_PORT="$API_PORT" -e ORDER_WORKER_API_TOKEN_FILE=/run/secrets/api-token \
  -v "$RUN/secrets/api-mysql-password:/run/secrets/api-mysql-password:ro" \
  -v "$RUN/secrets/api-token:/run/secrets/api-token:ro" "$IMAGE" serve >/dev/null
serve_ok=0
for _ in $(seq 50); do
  curl -fsS -o /dev/null "http://127.0.0.1:$API_PORT/healthz" 2>/dev/null && { serve_ok=1; break; }
  sleep 0.2
done
if ((serve_ok)); then
  # A result the replicas published first (replayed: false), and its record.
  "$KIT" read "$BOOT" $OUT >"$RUN/results.jsonl"
  jq -n -c 'first(inputs | select(.value | test("\"code\":\"CREATED\"")) | .value)' "$RUN/results.jsonl" >"$RUN/one.json"
  body="$(jq -r . "$RUN/one.json")"
  user="$(jq -r .user_id <<<"$body")" key="$(jq -r '.idempotency_key | @uri' <<<"$body")"
  got="$(curl -sS -H "Authorization: Bearer $TOKEN" "http://127.0.0.1:$API_PORT/v1/requests/$user/$key")"
  code="$(curl -sS -o /dev/null -w '%{http_code}' -H "Authorization: Bearer x$TOKEN" \
    "http://127.0.0.1:$API_PORT/v1/requests/$user/$key")"
  if [[ -n $body && $got == "$body" && $code == 401 ]]; then
    say "serve in a container: the lookup of user $user's key gave the published bytes; a wrong token got 401"
  else
    say "serve in a container: lookup of /v1/requests/$user/$key gave '${got:0:200}', wrong token $code"
    serve_ok=0
  fi
else
  podman logs "$NAME-serve" 2>&1 | tail -n 20
  say "serve in a container did not answer /healthz within 10 s"
fi
podman stop -t "$GRACE_S" "$NAME-serve" >/dev/null 2>&1 || true
serve_exit="$(podman container inspect --format '{{.State.ExitCode}}' "$NAME-serve" 2>/dev/null || echo '?')"
[[ $serve_exit == 0 ]] || { say "serve's container exited $serve_exit on podman stop"; serve_ok=0; }

# --- the checks -------------------------------------------------------------------
VERIFY=("$BUILD/ow-verify" --bootstrap "$BOOT" --group "$GROUP" --input "$IN" --results "$OUT"
  --dlq "$DLQ" --mysql-port "$OW_MYSQL_PORT" --database "$DB" --read-committed)
LOGS=()
for f in "$RUN"/worker-*.log; do LOGS+=(--worker-log "$f"); done
SETTLE_S=$(($(left) - 40))
((SETTLE_S <= 90)) || SETTLE_S=90
((SETTLE_S >= 10)) || SETTLE_S=10
set +e
"${VERIFY[@]}" --faults "$FAULTS" --lso-timeline "$RUN/lso.txt" "${LOGS[@]}" \
  --settle-ms $((SETTLE_S * 1000)) | tee "$RUN/verify.log"
status=${PIPESTATUS[0]}
set -e

# The verifier must be able to fail: a second committed copy of a result
# must count as a duplicate, and a message that no replica saw as lost.
say "verifier self-check: a planted duplicate result and a planted loss must be seen"
figure() {  # NAME LOG: a number of the exactly-once figures line (-1 when absent)
  local v
  v="$(sed -n "s/.*exactly-once figures:.* $1=\([0-9-]*\).*/\1/p" "$2")"
  echo "${v:--1}"
}
read -r rp ro < <("$KIT" read "$BOOT" $OUT | jq -r 'select(.value | contains("REQUEST_IN_PROGRESS") | not)
  | "\(.partition) \(.offset)"' | head -n 1)
"$KIT" copy "$BOOT" $OUT "$rp" "$ro" >/dev/null
"$KIT" gen "$BOOT" $IN 1 --rate 10 --seed 7 --prefix ctr-lost 2>/dev/null
set +e
"${VERIFY[@]}" --settle-ms 3000 >"$RUN/verify-tampered.log"
tampered=$?
set -e
seen=0
(($(figure duplicate_results "$RUN/verify-tampered.log") == $(figure duplicate_results "$RUN/verify.log") + 1)) && seen=$((seen + 1))
(($(figure lost "$RUN/verify-tampered.log") == $(figure lost "$RUN/verify.log") + 1)) && seen=$((seen + 1))
if ((tampered == 0 || seen < 2)); then
  cat "$RUN/verify-tampered.log"
  say "verifier self-check FAILED: $seen of 2 planted faults seen"
  status=1
else
  say "verifier self-check passed: 2 of 2 planted faults seen (duplicate result, lost message)"
fi

# How the replicas ended: every exit a kill (137) or a stop (0); every kill
# followed by a restart under the same name; every stop exit 0 within
# shutdown.timeout_ms, plus 1.5 s for podman's own part, far below the
# grace period's SIGKILL.
unexpected="$(grep -vE 'exit (0|137)$' "$RUN/exits.log" || true)"
stops=$(wc -l <"$RUN/stops.log")
bad_stops="$(awk -v lim=$((SHUTDOWN_MS + 1500)) '$4 != 0 || $5 > lim' "$RUN/stops.log")"
longest=$(awk 'BEGIN { m = 0 } $5 > m { m = $5 } END { print m }' "$RUN/stops.log")
vfig() { sed -n "s/^verify: .*figures:.* $1=\([0-9-]*\).*/\1/p" "$RUN/verify.log" | head -n 1; }
lost="$(vfig lost)" dup_orders="$(vfig duplicate_orders)" dup_results="$(vfig duplicate_results)"
if ((KILLS < 10)); then say "only $KILLS kills happened (need at least 10)"; status=1; fi
if ((${#down[@]} > 0)); then
  say "replica(s) ${down[*]} not running after the killer: killed and not started again under their name"
  status=1
fi
if [[ -n $unexpected ]]; then say "unexpected exits: $(tr '\n' ';' <<<"$unexpected")"; status=1; fi
if [[ -n $bad_stops ]]; then
  say "stops that did not exit 0 within $SHUTDOWN_MS ms + 1.5 s: $(tr '\n' ';' <<<"$bad_stops")"
  status=1
fi
((serve_ok)) || status=1
((readme_ok)) || status=1
if [[ -z $bad_stops ]]; then stop_words="every one exit 0 within its grace period of"; else
  stop_words="$(grep -c . <<<"$bad_stops") NOT clean; grace period"
fi
restart_words="each restarted under its name"
((${#down[@]} == 0)) || restart_words="${#down[@]} NOT restarted"
say "figures: replicas 3 (containers, read-only root, cap-drop ALL, uid $USER_ID), kills $KILLS" \
  "($restart_words), stops $stops ($stop_words" \
  "${GRACE_S} s; longest $longest ms, shutdown.timeout_ms $SHUTDOWN_MS), lost ${lost:-?}," \
  "duplicate orders ${dup_orders:-?}, duplicate results ${dup_results:-?}, serve lookup $( ((serve_ok)) && echo ok || echo FAILED)"
finish "$status"
