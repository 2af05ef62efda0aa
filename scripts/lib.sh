# shellcheck shell=bash
# What the scripts in scripts/ share. Sourced at the top of a script:
#
#   # shellcheck source=scripts/lib.sh
#   source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
#
# Sourcing sets the paths below and defines functions, nothing more: no
# shell option, no trap, no output, so that each script keeps its own
# `set -euo pipefail` and decides what it prints.
#
#   paths        ROOT BUILD BIN KIT
#   messages     messages clock_start say warn die die_with script_help
#   at exit      on_exit kill_each AT_EXIT_FAILED
#   processes    find_bin pid_running signal_wait port_in_use pick_port
#                wait_port_closed launch
#   services     services services_in services_up services_up_in services_env
#                instance_port need_kafka export_test_env
#   the worker   mariadb_at secret write_private worker_user worker_database
#                create_topics worker_kafka fault_run_timeouts worker_has_key
#   fault runs   now_ms fault left need_built mix start_replica stop_replica
#                start_killer stop_replicas scale_down_up wait_log wait_generator
#                catch_up replica_exits self_check_verdict replica_verdict
#                finish stop_fault_run
#   benchmarks   run_stamp ow_bench committed_offsets ticks backlog_window
#   containers   podman_cmd podman_run

# ------------------------------------------------------------------ paths ---
# ROOT is the repository, BUILD the build directory (OW_BUILD_DIR, default
# ROOT/build), BIN and KIT the worker and ow-kit in it. A script with a
# build directory of its own sets BUILD after sourcing.
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${OW_BUILD_DIR:-$ROOT/build}"
BIN="$BUILD/order-worker"
KIT="$BUILD/ow-kit"

# --------------------------------------------------------------- messages ---
# Every line a script prints about itself starts with its name, and tests
# and other scripts select lines by it (`^chaos:`, `^shards: .*refused`),
# so the format of each script's lines stays what it was:
#
#   messages NAME [--stderr] [--width N] [--die WORD STATUS]
#     say   "NAME: MESSAGE" on stdout (--stderr: on stderr, where a benchmark
#           keeps its stdout for its table); after clock_start
#           "NAME: [ 12s] MESSAGE", the seconds since then in N columns (3)
#     warn  say's line with "WARNING: " before the message, on stderr
#     die   say's line with "WORD: " before the message (ERROR; "" for none),
#           on stderr, then exit STATUS (1); die_with STATUS MESSAGE for
#           another status
OW_NAME="${0##*/}"
OW_NAME="${OW_NAME%.sh}"
OW_SAY_FD=1 OW_SAY_WIDTH=3 OW_DIE_WORD=ERROR OW_DIE_STATUS=1
T_START=""

messages() {  # NAME [--stderr] [--width N] [--die WORD STATUS]
  OW_NAME=$1
  shift
  while (($# > 0)); do
    case $1 in
      --stderr) OW_SAY_FD=2 ;;
      --width) OW_SAY_WIDTH=$2; shift ;;
      --die) OW_DIE_WORD=$2 OW_DIE_STATUS=$3; shift 2 ;;
      *) printf 'lib.sh: messages: unknown option %s\n' "$1" >&2; exit 2 ;;
    esac
    shift
  done
}
# T_START is the run's start: say's seconds, left()'s and finish's.
clock_start() { T_START=$SECONDS; }

ow_line() {  # TEXT
  if [[ -n $T_START ]]; then
    printf '%s: [%*ds] %s\n' "$OW_NAME" "$OW_SAY_WIDTH" "$((SECONDS - T_START))" "$1"
  else
    printf '%s: %s\n' "$OW_NAME" "$1"
  fi
}
say() { ow_line "$*" >&"$OW_SAY_FD"; }
warn() { ow_line "WARNING: $*" >&2; }
die_with() {  # STATUS MESSAGE...
  local status=$1
  shift
  ow_line "${OW_DIE_WORD:+$OW_DIE_WORD: }$*" >&2
  exit "$status"
}
die() { die_with "$OW_DIE_STATUS" "$@"; }

# The script's opening comment, from the line after #! up to its
# `set -euo pipefail`, without the comment marks: its usage.
script_help() { sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; }

# ---------------------------------------------------------------- at exit ---
# on_exit COMMAND: COMMAND (one string, expanded when it runs, as a trap's)
# runs when the script exits, however it exits: at its end, through exit or
# die, or on a signal that ends it. The commands run in the reverse order of
# their registration, so that what was started last is stopped first, and
# each runs even when one before it failed (-e and -u are off while they
# run). They leave the exit status as it was: 130 or 143 from a script's
# `trap 'exit 130' INT`, and a signal bash handles by default ends the script
# with that signal after them. A command here must not exit; one that finds
# the run failed after all (galera.sh's check that no firewall rule is left)
# sets AT_EXIT_FAILED=1, and a script that was ending with status 0 then
# ends with 1.
OW_AT_EXIT=()
AT_EXIT_FAILED=0
on_exit() {  # COMMAND
  OW_AT_EXIT+=("$1")
  trap ow_at_exit EXIT
}
ow_at_exit() {
  # Prefixed locals: the commands run in this function's scope, and one
  # that sets a variable i would otherwise move the counter.
  local ow_status=$? ow_i
  set +eu
  for ((ow_i = ${#OW_AT_EXIT[@]} - 1; ow_i >= 0; ow_i--)); do eval "${OW_AT_EXIT[ow_i]}"; done
  if ((ow_status == 0 && AT_EXIT_FAILED)); then exit 1; fi
}

kill_each() {  # SIGNAL PID...: empty PIDs and processes already gone are skipped
  local sig=$1 pid
  shift
  for pid in "$@"; do
    if [[ -n $pid ]]; then kill "-$sig" "$pid" 2>/dev/null || true; fi
  done
}

# -------------------------------------------------------------- processes ---
# The path of a program, looked for in the sbin directories too, which a
# non-login PATH may lack (mariadbd).
find_bin() {  # NAME
  local d
  if command -v "$1" >/dev/null 2>&1; then command -v "$1"; return 0; fi
  for d in /usr/sbin /sbin /usr/local/sbin /usr/bin; do
    [[ -x $d/$1 ]] && { echo "$d/$1"; return 0; }
  done
  return 1
}

# A live process (zombies count as dead: PID 1 in a container may not reap).
pid_running() {  # PID
  local stat state
  [[ $1 =~ ^[0-9]+$ ]] || return 1
  read -r stat 2>/dev/null <"/proc/$1/stat" || return 1
  state=${stat##*) }      # "PID (comm) STATE ...": comm may contain spaces
  state=${state%% *}
  [[ -n $state && $state != Z && $state != X ]]
}

# Sends SIGNAL to PID and waits up to TIMEOUT_S for it to end; returns 1 if
# it still runs then (the caller decides what comes next: SIGKILL, say).
signal_wait() {  # PID SIGNAL TIMEOUT_S
  local deadline=$((SECONDS + $3))
  kill "-$2" "$1" 2>/dev/null || true
  while pid_running "$1"; do
    ((SECONDS < deadline)) || return 1
    sleep 0.2
  done
}

# Is something listening on 127.0.0.1:PORT?
port_in_use() {  # PORT
  if command -v ss >/dev/null 2>&1 && [[ -n "$(ss -Hltn "sport = :$1" 2>/dev/null)" ]]; then
    return 0
  fi
  # shellcheck disable=SC2016  # $0 expands in the inner bash
  timeout 3 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$0"' "$1" 2>/dev/null
}

# pick_port VAR [FORCED]: sets VAR to FORCED (which must be free) or to a
# random free port not handed out before by this script. The ports are
# drawn from [PORT_MIN, PORT_MAX], below Linux's default ephemeral range
# (32768-60999), where no outgoing connection takes one meanwhile.
PORT_MIN=20000
PORT_MAX=32000
# OW_USED_PORTS: ports a parent script has handed out and not yet bound
# (services.sh starts MariaDB and a broker cluster at once).
USED_PORTS=" ${OW_USED_PORTS:+$OW_USED_PORTS }"
pick_port() {
  # Prefixed locals: a caller's VAR of the same name would be set here instead.
  local pp_var=$1 pp_forced=${2:-} pp_port pp_try
  if [[ -n $pp_forced ]]; then
    if ! [[ $pp_forced =~ ^[0-9]+$ ]] || ((pp_forced < 1 || pp_forced > 65535)); then
      die "invalid port '$pp_forced'"
    fi
    [[ $USED_PORTS == *" $pp_forced "* ]] && die "port $pp_forced requested twice"
    port_in_use "$pp_forced" && die "requested port $pp_forced is already in use on 127.0.0.1"
    USED_PORTS+="$pp_forced "
    printf -v "$pp_var" '%s' "$pp_forced"
    return 0
  fi
  for ((pp_try = 0; pp_try < 200; pp_try++)); do
    pp_port=$((PORT_MIN + (RANDOM * 32768 + RANDOM) % (PORT_MAX - PORT_MIN + 1)))
    [[ $USED_PORTS == *" $pp_port "* ]] && continue
    port_in_use "$pp_port" && continue
    USED_PORTS+="$pp_port "
    printf -v "$pp_var" '%s' "$pp_port"
    return 0
  done
  die "could not find a free port in $PORT_MIN-$PORT_MAX"
}

wait_port_closed() {  # PORT TIMEOUT_S
  local deadline=$((SECONDS + $2))
  while port_in_use "$1"; do
    ((SECONDS < deadline)) || return 1
    sleep 0.2
  done
}

# Starts a daemon detached from this script (own session, no stdin, output
# appended to LOG) in DIR and prints its pid. Every inherited fd above 2 (a
# lock, a caller's pipes) is closed, so that nobody waits for the daemon to
# close a pipe it never uses.
launch() {  # DIR LOG CMD...
  local dir=$1 log=$2
  shift 2
  (
    cd "$dir"
    for f in /proc/"$BASHPID"/fd/*; do
      n=${f##*/}
      if ((n > 2)); then exec {n}>&- 2>/dev/null || true; fi
    done
    exec setsid nohup "$@" >>"$log" 2>&1 </dev/null
  ) &
  echo $!
}

# What a daemon wrote to LOG after byte offset OFF (its start). Never fails:
# piped into `grep -q` under pipefail, a tail that grep stops reading from
# dies of SIGPIPE once the rest is more than the pipe holds, and a pipeline
# that says 141 would miss a line that is there.
log_since() { tail -c +"$(($2 + 1))" "$1" 2>/dev/null || true; }  # LOG OFF

# --------------------------------------------------------------- services ---
# services COMMAND...: scripts/services.sh for this run's services, whose
# state is in OW_RUN_DIR (exported by the script).
services() { OW_BUILD_DIR="$BUILD" "$ROOT/scripts/services.sh" "$@"; }

# services_in DIR COMMAND...: the same for another set whose state is in
# DIR (a second MariaDB, say). The ports a caller's services.env exported
# (scripts/test.sh's) are dropped: they would force this set onto them.
services_in() {
  local dir=$1
  shift
  env -u OW_MYSQL_PORT -u OW_KAFKA_PORT -u OW_KAFKA_CONTROLLER_PORT \
    OW_RUN_DIR="$dir" OW_BUILD_DIR="$BUILD" "$ROOT/scripts/services.sh" "$@"
}

# services_up [SERVICE]: starts this run's SERVICE (all: MariaDB and Kafka),
# stops the set and deletes its data at exit, and reads what services.sh
# exported (OW_MYSQL_PORT, OW_KAFKA_BOOTSTRAP, OW_BROKER_KIND, ...). The stop
# is registered first: a start that fails half-way is stopped too.
services_up() {
  on_exit 'services stop all >/dev/null 2>&1'
  services start "${1:-all}"
  services_env "$OW_RUN_DIR"
}
# services_up_in DIR [SERVICE]: the same for the set in DIR, whose
# variables are not read (instance_port gives its MariaDB's port).
services_up_in() {
  on_exit "services_in $(printf '%q' "$1") stop all >/dev/null 2>&1"
  services_in "$1" start "${2:-all}"
}
services_env() {  # DIR
  # shellcheck disable=SC1091  # written by scripts/services.sh
  source "$1/services.env"
}
instance_port() { sed -n 's/^export OW_MYSQL_PORT=//p' "$1/services.env"; }  # DIR

# The benchmarks measure the real broker, never the mock one.
need_kafka() {
  [[ $OW_BROKER_KIND == kafka ]] ||
    die "Apache Kafka did not start (got the $OW_BROKER_KIND broker); run scripts/deps.sh"
}

# What the test programs read (tests/support, tests/e2e/owstack.py), from
# the variables of services.env: scripts/test.sh exports these before its
# tiers, and a ctest run by hand needs them too. Workers under test run as
# a least-privilege user made by sql/worker_user.sql (tests/support/testdb.c
# applies it to every test database).
export_test_env() {
  export OW_TEST_MYSQL_HOST=127.0.0.1 OW_TEST_MYSQL_PORT="$OW_MYSQL_PORT" \
    OW_TEST_MYSQL_USER=root OW_TEST_MYSQL_PASSWORD="" \
    OW_TEST_KAFKA_BOOTSTRAP="$OW_KAFKA_BOOTSTRAP" OW_TEST_BROKER_KIND="$OW_BROKER_KIND"
  export OW_TEST_WORKER_MYSQL_USER=ow_worker
  OW_TEST_WORKER_MYSQL_PASSWORD="$(secret w)"
  export OW_TEST_WORKER_MYSQL_PASSWORD
}

# ------------------------------------------------------------- the worker ---
# The mariadb client as root on a throwaway server: PORT on 127.0.0.1 (one
# of scripts/services.sh) or HOST:PORT (a node of scripts/galera-cluster.sh);
# no option file is read, so that a user's ~/.my.cnf cannot change it.
mariadb_at() {  # [HOST:]PORT ARGS...
  mariadb --no-defaults --protocol=tcp -h"$(server_host "$1")" -P"${1##*:}" -uroot "${@:2}"
}
server_host() { if [[ $1 == *:* ]]; then echo "${1%:*}"; else echo 127.0.0.1; fi; }  # [HOST:]PORT
secret() { printf '%s-%s\n' "$1" "$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')"; }  # PREFIX
write_private() {  # FILE TEXT: TEXT and a newline, readable by this user only
  printf '%s\n' "$2" >"$1"
  chmod 600 "$1"
}
# The least-privilege user of sql/worker_user.sql on DATABASE.
worker_user() {  # [HOST:]PORT DATABASE PASSWORD [USER]
  mariadb_at "$1" -e "SET @worker_user='${4:-ow_worker}', @worker_host='%', @worker_password='$3',
    @worker_database='$2'; SOURCE $ROOT/sql/worker_user.sql;"
}
# DATABASE made on every server [HOST:]PORT (as mariadb_at names them),
# migrated as root (through the first, or over the shards of
# ORDER_WORKER_MYSQL_SHARDS when that is set), and the least-privilege user
# ow_worker with PASSWORD on each: every worker this script starts
# afterwards connects to the first server as that user, its password in
# RUN/worker.password.
worker_database() {  # DATABASE PASSWORD [HOST:]PORT...
  local db=$1 password=$2 server host
  shift 2
  host=$(server_host "$1")
  for server in "$@"; do mariadb_at "$server" -e "CREATE DATABASE $db"; done
  ORDER_WORKER_MYSQL_USER=root ORDER_WORKER_MYSQL_HOST="$host" ORDER_WORKER_MYSQL_PORT="${1##*:}" \
    ORDER_WORKER_MYSQL_DATABASE="$db" "$BIN" migrate >/dev/null
  for server in "$@"; do worker_user "$server" "$db" "$password"; done
  write_private "$RUN/worker.password" "$password"
  export ORDER_WORKER_MYSQL_HOST="$host" ORDER_WORKER_MYSQL_PORT="${1##*:}" ORDER_WORKER_MYSQL_USER=ow_worker \
    ORDER_WORKER_MYSQL_DATABASE="$db" ORDER_WORKER_MYSQL_PASSWORD_FILE="$RUN/worker.password"
}
create_topics() {  # PARTITIONS INPUT RESULTS DLQ: the dead letters on one partition
  "$KIT" create-topic "$OW_KAFKA_BOOTSTRAP" "$2" "$1"
  "$KIT" create-topic "$OW_KAFKA_BOOTSTRAP" "$3" "$1"
  "$KIT" create-topic "$OW_KAFKA_BOOTSTRAP" "$4" 1
}
# The topics, and the broker, group and topics of every worker this script
# starts afterwards.
worker_kafka() {  # PARTITIONS GROUP INPUT RESULTS DLQ
  create_topics "$1" "$3" "$4" "$5"
  export ORDER_WORKER_KAFKA_BOOTSTRAP_SERVERS="$OW_KAFKA_BOOTSTRAP" ORDER_WORKER_KAFKA_GROUP_ID="$2" \
    ORDER_WORKER_TOPIC_INPUT="$3" ORDER_WORKER_TOPIC_RESULTS="$4" ORDER_WORKER_TOPIC_DLQ="$5"
}
# The worker's defaults but for its timeouts, short enough for a fault run
# of a few minutes: a killed replica's partitions move on within seconds.
fault_run_timeouts() {
  export ORDER_WORKER_KAFKA_CONSUMER_SESSION_TIMEOUT_MS=3000 ORDER_WORKER_KAFKA_CONSUMER_HEARTBEAT_INTERVAL_MS=500 \
    ORDER_WORKER_COMMIT_INTERVAL_MS=500 ORDER_WORKER_REQUEST_IN_PROGRESS_WAIT_S=2 \
    ORDER_WORKER_RETRY_BACKOFF_MAX_MS=2000 ORDER_WORKER_SHUTDOWN_TIMEOUT_MS=5000 \
    ORDER_WORKER_REBALANCE_DRAIN_TIMEOUT_MS=2000
}
# Whether the built worker has a configuration key, as its --help lists
# them. The help is read whole first: `--help | grep -q` under pipefail
# fails when grep stops at the key while the worker is still writing
# (SIGPIPE, status 141), which happens once the help is longer than what
# the pipe holds before grep reads it.
worker_has_key() {  # KEY (a regular expression)
  local help
  help="$("$BIN" --help 2>&1)" || true
  grep -qE "^  $1 " <<<"$help"
}

# ------------------------------------------------------------- fault runs ---
# chaos.sh, eos.sh and shards.sh: a run bounded to LIMIT_S seconds from
# clock_start, its state in RUN, and a faults file (FAULTS) of "NAME MS
# [ARG]" lines that ow-verify reads.
now_ms() { date +%s%3N; }
fault() { echo "$1 $(now_ms) ${2:-}" >>"$FAULTS"; }  # NAME [ARG]
left() { echo $((LIMIT_S - (SECONDS - T_START))); }  # seconds left of the run's bound
need_built() {  # FILE...
  local f
  for f in "$@"; do
    [[ -x $f ]] || die_with 2 "$f not built (run scripts/test.sh or cmake --build build)"
  done
}
# mix TOPIC N RATE SEED PREFIX LOG [ARG...]: N messages of the chaos mix
# (about 25 % retries, 2 % key reuse, 2 % clashes, 1 % invalid) at RATE a
# second; the ARGs go to ow-kit gen too (--stop-file FILE).
mix() {
  "$KIT" gen "$OW_KAFKA_BOOTSTRAP" "$1" "$2" --rate "$3" --seed "$4" \
    --retry 25 --reuse 2 --clash 2 --invalid 1 --items 10 --prefix "$5" "${@:7}" 2>"$6"
}

# Replicas under supervision (chaos.sh, eos.sh, galera.sh), as a service
# manager runs them: replica I is `BIN run` (its log RUN/worker-I.log),
# started again whenever it exits until stop_replica I; SUPERVISORS[I] is
# its supervisor's pid. REPLICA_IDS=1 runs replica I with
# worker.replica_id = I, so that each restart fences the replica's
# predecessor (eos.sh). After each exit, replica_exited I PID STATUS runs,
# and replica_restart I before a restart: by default the exit goes to
# RUN/exits.log ("replica I pid P exit S") and the restart, 0.3 s later, to
# the faults file. A script redefines them, and replica_hung (below), where
# a replica's exit means something else (galera.sh: a failure, not a fault
# to recover from).
REPLICA_IDS=0
SUPERVISORS=()
replica_exited() { echo "replica $1 pid $2 exit $3" >>"$RUN/exits.log"; }  # I PID STATUS
replica_restart() { sleep 0.3; fault restart "$1"; }  # I
supervise() {  # I
  local i=$1 pid status id_env=()
  if ((REPLICA_IDS)); then id_env=(ORDER_WORKER_WORKER_REPLICA_ID="$i"); fi
  while [[ -f $RUN/replica-$i.enabled ]]; do
    env "${id_env[@]}" "$BIN" run 2>>"$RUN/worker-$i.log" &
    pid=$!
    echo "$pid" >"$RUN/replica-$i.pid"
    # A stop_replica between the loop's check and the pid file found no
    # pid to signal: stop the replica here, as it would have.
    [[ -f $RUN/replica-$i.enabled ]] || kill -TERM "$pid" 2>/dev/null || true
    set +e; { wait "$pid"; } 2>/dev/null; status=$?; set -e
    # Recorded before the pid file goes: stop_replicas waits for the pid
    # files to go, and its caller then reads the exits.
    replica_exited "$i" "$pid" "$status"
    rm -f "$RUN/replica-$i.pid"
    if [[ -f $RUN/replica-$i.enabled ]]; then replica_restart "$i"; fi
  done
}
start_replica() {  # I
  touch "$RUN/replica-$1.enabled"
  supervise "$1" &
  # shellcheck disable=SC2034  # for the script to wait for
  SUPERVISORS[$1]=$!
}
stop_replica() {  # I: a clean stop (SIGTERM), as an operator scales down
  rm -f "$RUN/replica-$1.enabled"
  [[ -f $RUN/replica-$1.pid ]] && kill -TERM "$(cat "$RUN/replica-$1.pid")" 2>/dev/null || true
}
# At exit: the replicas killed (not restarted), the background jobs whose
# pids the named variables hold stopped, and all of them waited for.
stop_fault_run() {  # PID_VARIABLE...
  local pidf v
  rm -f "$RUN"/replica-*.enabled
  for pidf in "$RUN"/replica-*.pid; do [[ -f $pidf ]] && kill -9 "$(cat "$pidf")" 2>/dev/null; done
  for v in "$@"; do kill_each TERM "${!v:-}"; done
  wait 2>/dev/null
}

killer() {  # SECONDS: kill -9 to a random replica every 1-3 s
  local until=$((SECONDS + $1)) victims pid
  while ((SECONDS < until)); do
    sleep "$((1 + RANDOM % 3))"
    mapfile -t victims < <(ls "$RUN"/replica-*.pid 2>/dev/null || true)
    ((${#victims[@]} > 0)) || continue
    pid="$(cat "${victims[RANDOM % ${#victims[@]}]}" 2>/dev/null || true)"
    [[ -n $pid ]] && kill -9 "$pid" 2>/dev/null && fault kill "$pid"
  done
}
start_killer() {  # SECONDS: the killer in the background (KILLER_PID)
  killer "$1" &
  KILLER_PID=$!
  say "killer running for $1 s"
}

# The group scaled 3 -> 1 for 12 s and back, once the killer is done. The
# scale-up ends when both replicas have started, as an operator's does: a
# stop that came sooner could reach a worker before its signal handlers,
# which would end it with 143 instead of a clean stop.
scale_down_up() {
  local i off=()
  wait "$KILLER_PID" || true
  KILLER_PID=""
  say "scaling 3 -> 1"
  fault scale-down
  stop_replica 2
  stop_replica 3
  sleep 12
  say "scaling 1 -> 3"
  for i in 2 3; do off[i]=$(stat -c %s "$RUN/worker-$i.log" 2>/dev/null || echo 0); done
  start_replica 2
  start_replica 3
  fault scale-up
  for i in 2 3; do
    wait_log "$RUN/worker-$i.log" "${off[i]}" '"event":"worker_started"' 30 ||
      say "replica $i has not started within 30 s"
  done
}

# Waits up to SECONDS for a line with TEXT in LOG after byte OFF; 0 once
# it is there, 1 when the time is up.
wait_log() {  # LOG OFF TEXT SECONDS
  local end=$((SECONDS + $4))
  until log_since "$1" "$2" | grep -qF -- "$3"; do
    ((SECONDS < end)) || return 1
    sleep 0.2
  done
}

# Waits for the generator in the background (GEN_PID); its failure fails
# the run, with its LOG.
wait_generator() {  # LOG
  wait "$GEN_PID" || { cat "$1" >&2; say "the generator failed"; exit 1; }
  GEN_PID=""
}

# Waits until GROUP has committed TOPIC to its end; fails the run when
# less than MARGIN_S seconds of its bound would be left.
catch_up() {  # GROUP TOPIC MARGIN_S PAUSE_S [WHEN]
  while ! "$KIT" lag "$OW_KAFKA_BOOTSTRAP" "$1" "$2" >"$RUN/lag.log" 2>&1; do
    if (($(left) < $3)); then
      cat "$RUN/lag.log"
      say "did not catch up${5:+ $5} within the time limit"
      exit 1
    fi
    sleep "$4"
  done
  say "caught up: $(tail -n1 "$RUN/lag.log")"
}

# Stops replicas I... cleanly: each must stop within 30 s of its SIGTERM;
# one that hangs is killed and replica_hung MESSAGE runs: by default it
# says MESSAGE and counts the replica in HUNG, which fails the run.
HUNG=0
replica_hung() { HUNG=$((HUNG + 1)); say "$1"; }
stop_replicas() {  # I...
  local i pidf
  for i in "$@"; do stop_replica "$i"; done
  # compgen, not ls: a pid file that goes between the glob's expansion
  # and ls's look makes ls fail, which would end the wait early.
  for _ in $(seq 60); do
    compgen -G "$RUN/replica-*.pid" >/dev/null || break
    sleep 0.5
  done
  for pidf in "$RUN"/replica-*.pid; do
    [[ -f $pidf ]] || continue
    replica_hung "replica ${pidf##*/} did not stop within 30 s of SIGTERM"
    kill -9 "$(cat "$pidf")" 2>/dev/null || true
  done
}

# The verifier's self-check: its run over planted faults must fail
# (TAMPERED, its status) and report SEEN = 4 of them. Fails (returns 1)
# with that run's output (RUN/verify-tampered.log) and FAILED, or says
# PASSED.
self_check_verdict() {  # TAMPERED SEEN FAILED PASSED
  if (($1 == 0 || $2 < 4)); then
    cat "$RUN/verify-tampered.log"
    say "$3"
    return 1
  fi
  say "$4"
}

# How the replicas exited: KILLS, the killer's kills, and UNEXPECTED, the
# exits other than 0 (SIGTERM) and 137 (SIGKILL; a kill -9 of a process
# that was just starting may be caught before exec).
replica_exits() {
  local clean
  KILLS=$(grep -c '^kill ' "$FAULTS" || true)
  UNEXPECTED=$(grep -vE 'exit (0|137)$' "$RUN/exits.log" || true)
  clean=$(grep -cE 'exit 0$' "$RUN/exits.log" || true)
  say "replica exits: $clean clean (SIGTERM), $KILLS killed; unexpected: ${UNEXPECTED:-none}"
}
# Fails (returns 1) when fewer than 10 kills happened, a replica exited
# unexpectedly (HEADLINE, then the lines of the workers' logs that match
# PATTERN, which say why) or one hung on shutdown.
replica_verdict() {  # PATTERN HEADLINE
  local failed=0 l
  if ((KILLS < 10)); then say "only $KILLS kills happened (need at least 10)"; failed=1; fi
  if [[ -n $UNEXPECTED ]]; then
    say "$2"
    { grep -h "$1" "$RUN"/worker-*.log || true; } | while read -r l; do say "  $l"; done
    failed=1
  fi
  if ((HUNG > 0)); then say "$HUNG replica(s) hung on shutdown"; failed=1; fi
  return "$failed"
}

finish() {  # STATUS: the run's last line, then exit STATUS
  say "took $((SECONDS - T_START)) s; $( (($1 == 0)) && echo PASSED || echo FAILED)"
  exit "$1"
}

# ------------------------------------------------------------- benchmarks ---
# "<UTC time>, order-worker <commit>": when and what a benchmark measured.
run_stamp() {
  echo "$(date -u +%Y-%m-%dT%H:%M:%SZ), order-worker $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')"
}
# ow-bench (tools/ow_bench.c) against this run's services and the built
# worker; its output directory first.
ow_bench() {  # OUT_DIR ARGS...
  "$BUILD/ow-bench" --bootstrap "$OW_KAFKA_BOOTSTRAP" --mysql-host 127.0.0.1 \
    --mysql-port "$OW_MYSQL_PORT" --mysql-user root --worker "$BIN" --out "$1" "${@:2}"
}
# The committed offsets of GROUP on TOPIC, summed (ow-kit lag exits 1 while
# there is lag).
committed_offsets() {  # GROUP TOPIC
  { "$KIT" lag "$OW_KAFKA_BOOTSTRAP" "$1" "$2" 2>/dev/null || true; } |
    awk '/^partition/ { s += ($4 < 0 ? 0 : $4) } END { print s + 0 }'
}
ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat" 2>/dev/null || echo 0; }  # PID: utime + stime

# backlog_window GROUP TOPIC N PID...: a benchmark's window while its
# workers (the pids in WORKERS) decide a backlog of N preloaded on TOPIC:
# from GROUP's first committed offset to the N-th (polled every 200 ms, at
# most 120 s for the first and 600 s more for the rest, so that the group's
# join is not counted); then the workers are stopped (SIGTERM) and waited
# for. Sets WIN_MS, WIN_N (the batches decided in the window), WIN_WORKERS
# (the workers' CPU ticks in it) and WIN_TICKS (each PID's, in order).
# Returns 1 when nothing was committed, 2 when only WIN_C of N were, 3 when
# a worker exited with a status other than 0 (WIN_STATUS): the benchmark
# says which of its runs failed.
# shellcheck disable=SC2034  # WIN_*: the caller's
backlog_window() {
  local group=$1 topic=$2 n=$3 t0=0 c0=0 c=0 w0=0 i pid
  local -a pids=("${@:4}") m0=()
  for _ in $(seq 600); do
    c=$(committed_offsets "$group" "$topic")
    if ((c > 0)); then
      t0=$(now_ms) c0=$c w0=$(worker_ticks)
      for i in "${!pids[@]}"; do m0[i]=$(ticks "${pids[i]}"); done
      break
    fi
    sleep 0.2
  done
  ((t0 > 0)) || return 1
  for _ in $(seq 3000); do
    c=$(committed_offsets "$group" "$topic")
    ((c >= n)) && break
    sleep 0.2
  done
  WIN_C=$c
  ((c >= n)) || return 2
  WIN_MS=$(($(now_ms) - t0)) WIN_N=$((n - c0)) WIN_WORKERS=$(($(worker_ticks) - w0)) WIN_TICKS=()
  for i in "${!pids[@]}"; do WIN_TICKS[i]=$(($(ticks "${pids[i]}") - m0[i])); done
  for pid in "${WORKERS[@]}"; do
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" || { WIN_STATUS=$?; return 3; }
  done
  WORKERS=()
}
worker_ticks() {
  local pid sum=0
  for pid in "${WORKERS[@]}"; do sum=$((sum + $(ticks "$pid"))); done
  echo "$sum"
}

# ------------------------------------------------------------- containers ---
# podman as it runs on these machines (Debian 12, podman 4.3): crun refuses
# a host whose cgroups are in hybrid mode, so runc, with cgroupfs (there is
# no systemd user session); runc fails on setrlimit unless the limits are
# given, and not above this shell's hard limits; the host's
# network, so that a container reaches the loopback services and its ports
# are the host's.
podman_cmd() { podman --runtime runc --cgroup-manager cgroupfs "$@"; }
podman_run() {  # ARGS...: podman run with the flags above
  local nofile
  nofile=$(ulimit -Hn)
  [[ $nofile == unlimited ]] || ((nofile > 65536)) && nofile=65536
  # runc refused this host's own process limit (96362): 4096 is far above
  # the worker's threads.
  podman_cmd run --network host --ulimit "nofile=$nofile:$nofile" --ulimit nproc=4096:4096 "$@"
}
