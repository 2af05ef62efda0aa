#!/usr/bin/env bash
# Throwaway MariaDB and Kafka instances for the tests and the demo.
#
# usage: scripts/services.sh COMMAND [SERVICE]
#
#   start [mariadb|kafka|all]  start fresh instances (new data dirs, free ports);
#                              a service that is already running is left as is
#   stop  [mariadb|kafka|all]  stop them; `stop all` also deletes their data
#                              dirs and the state file
#   status                     show what is running
#   env                        print the state file ($OW_RUN_DIR/services.env)
#   mariadb-down | kafka-down  stop ONE service, keep its data and port
#   mariadb-up   | kafka-up    start it again on the same port and data
#   restart-mariadb | restart-kafka   down + up
#   start|stop|status galera   a three-node MariaDB Galera cluster, and
#   galera COMMAND [N]         its faults: scripts/galera-cluster.sh
#
# State lives in $OW_RUN_DIR (default <repo>/.run). `start` writes
# $OW_RUN_DIR/services.env, `export VAR=value` lines to `source`:
#   OW_MYSQL_HOST OW_MYSQL_PORT OW_MYSQL_SOCKET OW_MYSQL_ROOT_USER
#   OW_MARIADB_VERSION OW_MARIADB_VERSION_FULL
#   OW_KAFKA_BOOTSTRAP OW_KAFKA_PORT OW_BROKER_KIND (kafka|mock) OW_KAFKA_VERSION
#
# Environment:
#   OW_RUN_DIR                  state/data/log folder (default <repo>/.run)
#   OW_MYSQL_PORT, OW_KAFKA_PORT, OW_KAFKA_CONTROLLER_PORT
#                               force ports (default: random free ports)
#   OW_BUILD_DIR                where ow-mockbroker is built (default <repo>/build)
#   OW_FORCE_MOCK_BROKER=1      use the librdkafka mock broker even if Kafka is available
#   OW_SERVICES_TLS_DIR=DIR     TLS only, with the files of scripts/secure-certs.sh:
#                               MariaDB with require_secure_transport=ON; Kafka with only
#                               an SSL listener (client certificates required) and a
#                               SASL_SSL one (SCRAM-SHA-512), StandardAuthorizer, and the
#                               broker's own principals as super users. services.env then
#                               also has OW_KAFKA_SASL_BOOTSTRAP.
#   OW_KAFKA_SASL_USERS="u=pw ..."  SASL users (with TLS): SCRAM-SHA-512 credentials
#                               created at format time, and the same as PLAIN users
#   OW_MARIADB_BUFFER_POOL      innodb_buffer_pool_size (default 512M; the growth
#                               benchmark uses 256M so that its indexes outgrow it)
#   OW_MARIADB_REDO_LOG         innodb_log_file_size (default MariaDB's own, 96M;
#                               scripts/bench.sh uses 1G: docs/tuning.md, "Knobs")
#   OW_MARIADB_ARGS             more mariadbd options, space-separated (benchmarks)
#   OW_KAFKA_DATA_TMPFS=1       the broker's log directory under /dev/shm (benchmarks:
#                               on one disk its writeback stalled MariaDB's commits)
#   OW_KAFKA_BROKERS=3          Kafka as three brokers (replication 3, min ISR 2), run by
#                               scripts/kafka-cluster.sh (its kill/restart/leader-of
#                               commands make the faults); kafka-down/up stop and start
#                               all three; `stop` deletes the cluster's data
#
# Apache Kafka needs the jars fetched by scripts/deps.sh and java; without them
# the script falls back to $OW_BUILD_DIR/ow-mockbroker (a librdkafka mock cluster).
# Only processes started by this script (pid files in $OW_RUN_DIR, checked
# against the process name and its data dir) are ever signalled.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
messages services

KAFKA_VERSION=4.1.1
MARIADB_READY_TIMEOUT=60
KAFKA_READY_TIMEOUT=90
MOCK_READY_TIMEOUT=30
STOP_TIMEOUT=30

OW_RUN_DIR="${OW_RUN_DIR:-$ROOT/.run}"
mkdir -p "$OW_RUN_DIR"
OW_RUN_DIR="$(cd "$OW_RUN_DIR" && pwd -P)"

STATE_FILE="$OW_RUN_DIR/services.env"
# Names outside $OW_RUN_DIR (a short socket path, the broker's memory log
# directory) carry this tag, so that run directories never share one.
RUN_TAG="$(printf '%s' "$OW_RUN_DIR" | md5sum | cut -c1-12)"

MDB_DIR="$OW_RUN_DIR/mariadb"
MDB_DATA="$MDB_DIR/data"
MDB_LOG="$OW_RUN_DIR/mariadb.log"
MDB_INSTALL_LOG="$OW_RUN_DIR/mariadb-install.log"
MDB_PIDFILE="$OW_RUN_DIR/mariadb.pid"
MDB_ENV="$OW_RUN_DIR/mariadb.env"          # this service's part of services.env

K_DIR="$OW_RUN_DIR/kafka"
K_DATA="$K_DIR/data"
# Benchmarks only: the broker's log segments in memory, so that their
# writeback does not queue MariaDB's redo fsyncs on the one disk here.
K_SHM_DATA="/dev/shm/ow-kafka-$RUN_TAG"
if [[ ${OW_KAFKA_DATA_TMPFS:-0} == 1 ]]; then K_DATA="$K_SHM_DATA"; fi
K_PROPS="$K_DIR/server.properties"
K_LOG="$OW_RUN_DIR/kafka.log"
K_FORMAT_LOG="$OW_RUN_DIR/kafka-format.log"
K_PIDFILE="$OW_RUN_DIR/kafka.pid"
K_ENV="$OW_RUN_DIR/kafka.env"
K_CACHE="$ROOT/.cache/kafka/$KAFKA_VERSION"
K_CP="$K_CACHE/jars/*"
MOCK_BIN="$BUILD/ow-mockbroker"
TLS_DIR="${OW_SERVICES_TLS_DIR:-}"
MDB_TLS_SERVER=()   # mariadbd options with TLS
MDB_CLIENT=()       # mariadb/mariadb-admin options with TLS
K_KCAT=()           # kcat options with TLS
if [[ -n $TLS_DIR ]]; then
  TLS_DIR="$(cd "$TLS_DIR" && pwd -P)"
  MDB_TLS_SERVER=(--ssl-ca="$TLS_DIR/ca.crt" --ssl-cert="$TLS_DIR/server.crt"
    --ssl-key="$TLS_DIR/server.key" --require-secure-transport=ON)
  MDB_CLIENT=(--ssl-ca="$TLS_DIR/ca.crt")
  K_KCAT=(-X security.protocol=ssl -X ssl.ca.location="$TLS_DIR/ca.crt"
    -X ssl.certificate.location="$TLS_DIR/broker.crt" -X ssl.key.location="$TLS_DIR/broker.key")
fi

# ---------------------------------------------------------------- helpers ---

usage() { script_help >&2; exit 2; }

proc_comm()    { cat "/proc/$1/comm" 2>/dev/null || true; }
proc_cmdline() { tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null || true; }
proc_cwd()     { readlink "/proc/$1/cwd" 2>/dev/null || true; }

# Is PID a process this script started for SERVICE (in this $OW_RUN_DIR)?
pid_is_ours() {
  local svc=$1 pid=$2 comm
  pid_running "$pid" || return 1
  comm="$(proc_comm "$pid")"
  case $svc in
    mariadb)
      [[ $comm == mariadbd ]] && [[ "$(proc_cmdline "$pid") " == *"--datadir=$MDB_DATA "* ]] ;;
    kafka)
      if [[ $comm == java ]]; then
        [[ "$(proc_cmdline "$pid") " == *" $K_PROPS "* ]]
      elif [[ $comm == ow-mockbroker ]]; then
        [[ "$(proc_cwd "$pid")" == "$K_DIR" ]]
      else
        return 1
      fi ;;
    *) return 1 ;;
  esac
}

# Prints the pid of SERVICE if it is running: from its pid file, or else by
# scanning /proc for a process with our data dir (e.g. a lost pid file).
service_pid() {
  local svc=$1 pidfile pid p
  pidfile="$(pidfile_of "$svc")"
  if [[ -f $pidfile ]]; then
    pid="$(<"$pidfile")"
    if pid_is_ours "$svc" "$pid"; then echo "$pid"; return 0; fi
  fi
  local comm
  for p in /proc/[0-9]*; do
    read -r comm 2>/dev/null <"$p/comm" || continue
    case $comm in
      mariadbd | java | ow-mockbroker)
        pid=${p#/proc/}
        if pid_is_ours "$svc" "$pid"; then echo "$pid"; return 0; fi ;;
    esac
  done
  return 1
}

pidfile_of() { case $1 in mariadb) echo "$MDB_PIDFILE" ;; kafka) echo "$K_PIDFILE" ;; esac; }
envfile_of() { case $1 in mariadb) echo "$MDB_ENV" ;; kafka) echo "$K_ENV" ;; esac; }
# Whether a running service was started with this shell's data directory
# (OW_KAFKA_DATA_TMPFS moves the broker's).
data_dir_current() {
  [[ $1 != kafka || ! -f $K_PROPS ]] || grep -qxF "log.dirs=$K_DATA" "$K_PROPS"
}

# frag_get FILE VAR: value of VAR in a fragment file, without our environment.
frag_get() {
  [[ -f $1 ]] || return 0
  # shellcheck disable=SC2016  # expanded by the inner bash
  env -i bash -c 'source "$1" >/dev/null 2>&1; printf "%s" "${!2:-}"' _ "$1" "$2"
}

write_frag() {  # FILE VAR=VALUE...
  local file=$1 kv
  shift
  {
    for kv in "$@"; do printf 'export %s=%q\n' "${kv%%=*}" "${kv#*=}"; done
  } >"$file.tmp"
  mv "$file.tmp" "$file"
}

# services.env = header + the fragments of the services that were started.
write_state() {
  if [[ ! -f $MDB_ENV && ! -f $K_ENV ]]; then
    rm -f "$STATE_FILE"
    return 0
  fi
  {
    echo "# Written by scripts/services.sh; source this file. Services in $OW_RUN_DIR"
    printf 'export OW_RUN_DIR=%q\n' "$OW_RUN_DIR"
    if [[ -f $MDB_ENV ]]; then cat "$MDB_ENV"; fi
    if [[ -f $K_ENV ]]; then cat "$K_ENV"; fi
  } >"$STATE_FILE.tmp"
  mv "$STATE_FILE.tmp" "$STATE_FILE"
}

file_size() { if [[ -f $1 ]]; then stat -c %s "$1"; else echo 0; fi; }

rotate_log() { if [[ -s $1 ]]; then mv -f "$1" "$1.prev"; fi; : >"$1"; }

show_log_tail() {  # LOG
  printf -- '----- last 30 lines of %s -----\n' "$1" >&2
  tail -n 30 "$1" >&2 2>/dev/null || true
  printf -- '-----\n' >&2
}

# Send SIGTERM, wait, then SIGKILL. Only call with a pid that pid_is_ours.
kill_and_wait() {  # PID NAME
  local pid=$1 name=$2
  if ! signal_wait "$pid" TERM "$STOP_TIMEOUT"; then
    warn "$name (pid $pid) did not exit within ${STOP_TIMEOUT}s of SIGTERM; sending SIGKILL"
    signal_wait "$pid" KILL 10 || die "$name (pid $pid) survived SIGKILL"
  fi
}

# ---------------------------------------------------------------- mariadb ---

MARIADBD=""
mariadb_prereqs() {
  MARIADBD="$(find_bin mariadbd)" || die "mariadbd not found (install mariadb-server: scripts/deps.sh)"
  find_bin mariadb-install-db >/dev/null || die "mariadb-install-db not found (scripts/deps.sh)"
  find_bin mariadb-admin >/dev/null || die "mariadb-admin not found (install mariadb-client: scripts/deps.sh)"
  find_bin mariadb >/dev/null || die "mariadb client not found (install mariadb-client: scripts/deps.sh)"
}

mariadb_socket() {
  local sock="$MDB_DIR/mysql.sock"
  # sun_path holds 107 bytes: fall back to /tmp for a deep $OW_RUN_DIR.
  if ((${#sock} > 100)); then
    sock="/tmp/ow-mysql-$RUN_TAG.sock"
  fi
  echo "$sock"
}

mariadb_launch() {  # PORT -> sets MDB_PID
  local port=$1 sock
  sock="$(mariadb_socket)"
  MDB_PID="$(launch "$MDB_DIR" "$MDB_LOG" "$MARIADBD" --no-defaults \
    --datadir="$MDB_DATA" --socket="$sock" --port="$port" \
    --bind-address=127.0.0.1 --user=root \
    --innodb-flush-log-at-trx-commit=1 --max-connections=500 \
    --innodb-buffer-pool-size="${OW_MARIADB_BUFFER_POOL:-512M}" \
    ${OW_MARIADB_REDO_LOG:+--innodb-log-file-size="$OW_MARIADB_REDO_LOG"} --skip-name-resolve --innodb-print-all-deadlocks=ON \
    --pid-file="$MDB_DIR/mariadbd.pid" --log-error="$MDB_LOG" "${MDB_TLS_SERVER[@]}" \
    ${OW_MARIADB_ARGS:-})"
  echo "$MDB_PID" >"$MDB_PIDFILE"
}

mariadb_wait_ready() {  # PORT
  local port=$1 deadline=$((SECONDS + MARIADB_READY_TIMEOUT))
  while :; do
    if ! pid_running "$MDB_PID"; then
      show_log_tail "$MDB_LOG"
      rm -f "$MDB_PIDFILE"
      die "mariadbd exited during startup (log: $MDB_LOG)"
    fi
    if mariadb-admin --no-defaults --protocol=tcp -h127.0.0.1 -P"$port" -uroot "${MDB_CLIENT[@]}" \
        --connect-timeout=2 ping >/dev/null 2>&1; then
      return 0
    fi
    if ((SECONDS >= deadline)); then
      show_log_tail "$MDB_LOG"
      kill_and_wait "$MDB_PID" mariadbd
      rm -f "$MDB_PIDFILE"
      die "MariaDB not ready on 127.0.0.1:$port after ${MARIADB_READY_TIMEOUT}s (log: $MDB_LOG)"
    fi
    sleep 0.3
  done
}

# Fresh instance: new data dir, new port.
mariadb_start() {  # PORT
  local port=$1 t0=$SECONDS full ver sock
  rm -rf "$MDB_DIR"
  mkdir -p "$MDB_DATA"
  rm -f "$MDB_ENV" "$MDB_PIDFILE"
  rotate_log "$MDB_LOG"
  if ! mariadb-install-db --no-defaults --datadir="$MDB_DATA" \
      --auth-root-authentication-method=normal >"$MDB_INSTALL_LOG" 2>&1 9>&-; then
    show_log_tail "$MDB_INSTALL_LOG"
    die "mariadb-install-db failed (log: $MDB_INSTALL_LOG)"
  fi
  mariadb_launch "$port"
  mariadb_wait_ready "$port"
  # mariadb-install-db creates anonymous accounts (''@localhost, ''@<host>)
  # that would shadow test users such as 'ow_worker'@'%'; drop them.
  mariadb --no-defaults --protocol=tcp -h127.0.0.1 -P"$port" -uroot "${MDB_CLIENT[@]}" -N -B -e \
    "SELECT CONCAT('DROP USER ', QUOTE(user), '@', QUOTE(host), ';') FROM mysql.user WHERE user = ''" \
    | mariadb --no-defaults --protocol=tcp -h127.0.0.1 -P"$port" -uroot "${MDB_CLIENT[@]}"

  full="$(mariadb --no-defaults --protocol=tcp -h127.0.0.1 -P"$port" -uroot "${MDB_CLIENT[@]}" -N -B \
    -e 'SELECT VERSION()' 2>/dev/null || true)"
  if [[ -z $full ]]; then  # e.g. "mariadbd  Ver 10.11.19-MariaDB-0+deb12u1 for ..."
    full="$("$MARIADBD" --version | sed -n 's/.* Ver \([^ ]*\).*/\1/p')"
  fi
  ver="${full%%-*}"
  sock="$(mariadb_socket)"
  write_frag "$MDB_ENV" \
    OW_MYSQL_HOST=127.0.0.1 \
    OW_MYSQL_PORT="$port" \
    OW_MYSQL_SOCKET="$sock" \
    OW_MYSQL_ROOT_USER=root \
    OW_MARIADB_VERSION="$ver" \
    OW_MARIADB_VERSION_FULL="$full" \
    OW_MARIADB_DATADIR="$MDB_DATA" \
    OW_MARIADB_LOG="$MDB_LOG"
  say "MariaDB $ver on 127.0.0.1:$port (socket: $sock, data: $MDB_DATA) ready in $((SECONDS - t0))s"
}

mariadb_down() {
  local pid port
  port="$(frag_get "$MDB_ENV" OW_MYSQL_PORT)"
  if pid="$(service_pid mariadb)"; then
    kill_and_wait "$pid" mariadbd
    say "MariaDB stopped (pid $pid); data kept in $MDB_DATA"
  else
    say "MariaDB is not running"
  fi
  rm -f "$MDB_PIDFILE"
  if [[ -n $port ]] && ! wait_port_closed "$port" 30; then
    die "port $port is still open after stopping MariaDB"
  fi
}

mariadb_up() {
  local pid port t0=$SECONDS
  mariadb_prereqs
  if pid="$(service_pid mariadb)"; then
    echo "$pid" >"$MDB_PIDFILE"
    say "MariaDB already running (pid $pid)"
    return 0
  fi
  port="$(frag_get "$MDB_ENV" OW_MYSQL_PORT)"
  [[ -n $port && -d $MDB_DATA ]] || die "MariaDB was never started here (no $MDB_ENV or $MDB_DATA); use: $0 start mariadb"
  port_in_use "$port" && die "cannot restart MariaDB: port $port is now taken by another process"
  mariadb_launch "$port"
  mariadb_wait_ready "$port"
  say "MariaDB up again on 127.0.0.1:$port (pid $MDB_PID, same data) in $((SECONDS - t0))s"
}

# ------------------------------------------------------------------ kafka ---

BROKER_KIND=""      # kafka | mock, set by kafka_choose
kafka_choose() {
  local reason=""
  if [[ ${OW_FORCE_MOCK_BROKER:-0} == 1 ]]; then
    reason="OW_FORCE_MOCK_BROKER=1"
  elif [[ ! -f $K_CACHE/.complete ]]; then
    reason="no jars in ${K_CACHE#"$ROOT"/}; run scripts/deps.sh"
  elif ! command -v java >/dev/null 2>&1; then
    reason="java not found"
  fi
  if [[ -z $reason ]]; then
    BROKER_KIND=kafka
    return 0
  fi
  [[ -x $MOCK_BIN ]] || die "Apache Kafka unavailable ($reason) and no mock broker at $MOCK_BIN (build the project first, or run scripts/deps.sh)"
  say "################################################################"
  say "Apache Kafka unavailable ($reason); using librdkafka mock cluster"
  say "################################################################"
  BROKER_KIND=mock
}

plain_users() {
  local u
  for u in ${OW_KAFKA_SASL_USERS:-}; do printf 'user_%s="%s" ' "${u%%=*}" "${u#*=}"; done
}

# The data and the topic defaults of a single broker, with or without
# topics created on first use (the TLS broker has none: every topic there
# is made on purpose, under its ACLs).
kafka_node_props() {  # AUTO_CREATE
  cat <<EOF
log.dirs=$K_DATA
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
group.initial.rebalance.delay.ms=0
group.min.session.timeout.ms=1000
num.partitions=6
auto.create.topics.enable=$1
EOF
}

# TLS only: SSL with client certificates, SASL_SSL with SCRAM,
# the controller over TLS too, so that no plaintext principal is a super user.
kafka_write_tls_props() {  # PORT CPORT SASLPORT
  cat "$TLS_DIR/server.key" "$TLS_DIR/chain.pem" >"$K_DIR/keystore.pem"
  {
    cat <<EOF
# Single-node KRaft broker, TLS only; written by scripts/services.sh
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$2
listeners=SSL://127.0.0.1:$1,SASL_SSL://127.0.0.1:$3,CONTROLLER://127.0.0.1:$2
advertised.listeners=SSL://127.0.0.1:$1,SASL_SSL://127.0.0.1:$3
controller.listener.names=CONTROLLER
inter.broker.listener.name=SSL
listener.security.protocol.map=SSL:SSL,SASL_SSL:SASL_SSL,CONTROLLER:SSL
ssl.keystore.type=PEM
ssl.keystore.location=$K_DIR/keystore.pem
ssl.truststore.type=PEM
ssl.truststore.location=$TLS_DIR/ca.crt
ssl.client.auth=required
listener.name.sasl_ssl.ssl.client.auth=none
sasl.enabled.mechanisms=SCRAM-SHA-512,PLAIN
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required $(plain_users);
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:CN=127.0.0.1;User:CN=broker
allow.everyone.if.no.acl.found=false
EOF
    kafka_node_props false
  } >"$K_PROPS"
}

kafka_write_props() {  # PORT CPORT
  {
    cat <<EOF
# Single-node KRaft broker for tests; written by scripts/services.sh
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$2
listeners=PLAINTEXT://127.0.0.1:$1,CONTROLLER://127.0.0.1:$2
advertised.listeners=PLAINTEXT://127.0.0.1:$1
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
EOF
    kafka_node_props true
  } >"$K_PROPS"
}

# Short-lived tool JVMs: C1 only and the serial GC start ~40% faster.
TOOL_JVM_OPTS=(-XX:TieredStopAtLevel=1 -XX:+UseSerialGC)

kafka_format() {
  local id
  : >"$K_FORMAT_LOG"
  id="$(java "${TOOL_JVM_OPTS[@]}" -cp "$K_CP" kafka.tools.StorageTool random-uuid 2>>"$K_FORMAT_LOG" 9>&- | tail -n 1)" || true
  if [[ ! $id =~ ^[A-Za-z0-9_-]{22}$ ]]; then
    show_log_tail "$K_FORMAT_LOG"
    die "kafka.tools.StorageTool random-uuid gave '$id' (log: $K_FORMAT_LOG)"
  fi
  local scram=() u
  for u in ${OW_KAFKA_SASL_USERS:-}; do
    scram+=(--add-scram "SCRAM-SHA-512=[name=${u%%=*},password=${u#*=}]")
  done
  if ! java "${TOOL_JVM_OPTS[@]}" -cp "$K_CP" kafka.tools.StorageTool format -t "$id" -c "$K_PROPS" \
      "${scram[@]}" >>"$K_FORMAT_LOG" 2>&1 9>&-; then
    show_log_tail "$K_FORMAT_LOG"
    die "kafka.tools.StorageTool format failed (log: $K_FORMAT_LOG)"
  fi
}

# A metadata request answered by the broker (skipped when kcat is missing).
kafka_metadata_ok() {  # PORT
  command -v kcat >/dev/null 2>&1 || return 0
  timeout 15 kcat -b "127.0.0.1:$1" "${K_KCAT[@]}" -L -m 5 2>/dev/null | grep -q 'broker.* at 127\.0\.0\.1:'"$1"
}

kafka_launch() {  # KIND PORT -> sets K_PID, K_LOG_OFF
  local kind=$1 port=$2 runner=()
  K_LOG_OFF="$(file_size "$K_LOG")"
  if [[ $kind == kafka ]]; then
    K_PID="$(launch "$K_DIR" "$K_LOG" java -Xms1g -Xmx1g -XX:+UseG1GC \
      "-Xlog:gc:file=$OW_RUN_DIR/kafka-gc.log:time,uptime:filecount=2,filesize=10m" \
      -Dorg.slf4j.simpleLogger.showDateTime=true \
      -Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS \
      -cp "$K_CP" kafka.Kafka "$K_PROPS")"
  else
    # stdbuf: the "bootstrap=" line must reach the log even if the mock
    # leaves its stdout fully buffered.
    if command -v stdbuf >/dev/null 2>&1; then runner=(stdbuf -oL -eL); fi
    K_PID="$(launch "$K_DIR" "$K_LOG" "${runner[@]}" "$MOCK_BIN" --port "$port")"
  fi
  echo "$K_PID" >"$K_PIDFILE"
}

kafka_wait_ready() {  # KIND PORT
  local kind=$1 port=$2 timeout what
  if [[ $kind == kafka ]]; then timeout=$KAFKA_READY_TIMEOUT; what="Apache Kafka"
  else timeout=$MOCK_READY_TIMEOUT; what="mock broker"; fi
  local t0=$SECONDS deadline=$((SECONDS + timeout))
  while :; do
    if ! pid_running "$K_PID"; then
      show_log_tail "$K_LOG"
      rm -f "$K_PIDFILE"
      die "$what exited during startup (log: $K_LOG)"
    fi
    if [[ $kind == kafka ]]; then
      if log_since "$K_LOG" "$K_LOG_OFF" | grep -q 'Kafka Server started' \
          && kafka_metadata_ok "$port"; then
        return 0
      fi
    else
      if log_since "$K_LOG" "$K_LOG_OFF" | grep -q "^bootstrap=127\.0\.0\.1:$port\$"; then
        return 0
      fi
      # In case the line never reaches the log: a broker that answers
      # metadata requests is ready too.
      if ((SECONDS - t0 >= 5)) && command -v kcat >/dev/null 2>&1 \
          && port_in_use "$port" && kafka_metadata_ok "$port"; then
        return 0
      fi
    fi
    if ((SECONDS >= deadline)); then
      show_log_tail "$K_LOG"
      kill_and_wait "$K_PID" "$what"
      rm -f "$K_PIDFILE"
      die "$what not ready on 127.0.0.1:$port after ${timeout}s (log: $K_LOG)"
    fi
    sleep 0.5
  done
}

kafka_start() {  # KIND PORT CPORT [SASLPORT]
  local kind=$1 port=$2 cport=$3 sport=${4:-} t0=$SECONDS
  if kafka_is_cluster; then "$KCLUSTER" start; return; fi
  rm -rf "$K_DIR" "$K_DATA"
  mkdir -p "$K_DIR" "$K_DATA"
  if [[ $K_DATA == "$K_SHM_DATA" ]] && (($(df -Pk /dev/shm | awk 'NR == 2 { print $4 }') < 2097152)); then
    die "OW_KAFKA_DATA_TMPFS=1: /dev/shm has less than 2 GiB free for the broker's log"
  fi
  rm -f "$K_ENV" "$K_PIDFILE"
  rotate_log "$K_LOG"
  if [[ $kind == kafka && -n $TLS_DIR ]]; then
    kafka_write_tls_props "$port" "$cport" "$sport"
    kafka_format
  elif [[ $kind == kafka ]]; then
    kafka_write_props "$port" "$cport"
    kafka_format
  fi
  kafka_launch "$kind" "$port"
  kafka_wait_ready "$kind" "$port"
  if [[ $kind == kafka ]]; then
    write_frag "$K_ENV" \
      OW_KAFKA_BOOTSTRAP="127.0.0.1:$port" \
      OW_KAFKA_PORT="$port" \
      OW_KAFKA_CONTROLLER_PORT="$cport" \
      OW_BROKER_KIND=kafka \
      OW_KAFKA_VERSION="apache-kafka-$KAFKA_VERSION" \
      OW_KAFKA_SASL_BOOTSTRAP="${sport:+127.0.0.1:$sport}" \
      OW_KAFKA_LOG="$K_LOG"
    say "Apache Kafka $KAFKA_VERSION (KRaft) on 127.0.0.1:$port (controller :$cport, data: $K_DATA) ready in $((SECONDS - t0))s"
  else
    write_frag "$K_ENV" \
      OW_KAFKA_BOOTSTRAP="127.0.0.1:$port" \
      OW_KAFKA_PORT="$port" \
      OW_BROKER_KIND=mock \
      OW_KAFKA_VERSION=librdkafka-mock \
      OW_KAFKA_LOG="$K_LOG"
    say "librdkafka mock broker on 127.0.0.1:$port ready in $((SECONDS - t0))s"
  fi
}

kafka_down() {
  local pid port cport
  if kafka_is_cluster; then "$KCLUSTER" down; return; fi
  port="$(frag_get "$K_ENV" OW_KAFKA_PORT)"
  cport="$(frag_get "$K_ENV" OW_KAFKA_CONTROLLER_PORT)"
  if pid="$(service_pid kafka)"; then
    kill_and_wait "$pid" "$(proc_comm "$pid")"
    if [[ "$(frag_get "$K_ENV" OW_BROKER_KIND)" == mock ]]; then
      say "mock broker stopped (pid $pid); its in-memory topics are gone"
    else
      say "Kafka broker stopped (pid $pid); data kept in $K_DATA"
    fi
  else
    say "Kafka broker is not running"
  fi
  rm -f "$K_PIDFILE"
  local p
  for p in $port $cport; do
    wait_port_closed "$p" 30 || die "port $p is still open after stopping the Kafka broker"
  done
}

kafka_up() {
  local pid port cport kind t0=$SECONDS
  if kafka_is_cluster; then "$KCLUSTER" up; return; fi
  if pid="$(service_pid kafka)"; then
    echo "$pid" >"$K_PIDFILE"
    say "Kafka broker already running (pid $pid)"
    return 0
  fi
  port="$(frag_get "$K_ENV" OW_KAFKA_PORT)"
  cport="$(frag_get "$K_ENV" OW_KAFKA_CONTROLLER_PORT)"
  kind="$(frag_get "$K_ENV" OW_BROKER_KIND)"
  [[ -n $port && -n $kind && -d $K_DIR ]] || die "Kafka was never started here (no $K_ENV); use: $0 start kafka"
  local p
  for p in $port $cport; do
    port_in_use "$p" && die "cannot restart the Kafka broker: port $p is now taken by another process"
  done
  if [[ $kind == kafka ]]; then
    [[ -f $K_CACHE/.complete ]] || die "Kafka jars gone from $K_CACHE"
    [[ -f $K_PROPS ]] || die "missing $K_PROPS"
  else
    [[ -x $MOCK_BIN ]] || die "mock broker gone from $MOCK_BIN"
    warn "the mock broker keeps its data in memory: topics and messages are lost across kafka-down/kafka-up"
  fi
  kafka_launch "$kind" "$port"
  kafka_wait_ready "$kind" "$port"
  if [[ $kind == kafka ]]; then
    say "Apache Kafka up again on 127.0.0.1:$port (pid $K_PID, same data) in $((SECONDS - t0))s"
  else
    say "mock broker up again on 127.0.0.1:$port (pid $K_PID, empty) in $((SECONDS - t0))s"
  fi
}

# OW_KAFKA_BROKERS=3: the brokers are scripts/kafka-cluster.sh's, which
# writes kafka.env; once started, the cluster is this directory's Kafka until
# it is stopped, whatever the caller's environment.
KCLUSTER="$ROOT/scripts/kafka-cluster.sh"
kafka_is_cluster() { [[ ${OW_KAFKA_BROKERS:-1} == 3 || -d $OW_RUN_DIR/kafka-cluster ]]; }

# --------------------------------------------------------------- commands ---

parse_target() {  # [mariadb|kafka|all] -> TARGETS
  case ${1:-all} in
    all) TARGETS=(mariadb kafka) ;;
    mariadb | mysql) TARGETS=(mariadb) ;;
    kafka) TARGETS=(kafka) ;;
    *) usage ;;
  esac
}

cmd_start() {
  parse_target "${1:-all}"
  local todo=() svc pid
  for svc in "${TARGETS[@]}"; do
    if pid="$(service_pid "$svc")"; then
      echo "$pid" >"$(pidfile_of "$svc")"
      if [[ ! -f $(envfile_of "$svc") ]]; then
        # Running but its state was lost: restart it cleanly.
        warn "$svc is running (pid $pid) without its state file; restarting it"
      elif ! data_dir_current "$svc"; then
        warn "$svc is running (pid $pid) with another data directory; restarting it"
      else
        say "$svc already running (pid $pid); leaving it as is"
        continue
      fi
      kill_and_wait "$pid" "$svc"
    fi
    todo+=("$svc")
  done
  if ((${#todo[@]} == 0)); then
    write_state
    say "state: $STATE_FILE"
    return 0
  fi

  # Checks and port choices happen here, before the parallel part.
  local mport="" kport="" cport="" sport=""
  for svc in "${todo[@]}"; do
    case $svc in
      mariadb)
        mariadb_prereqs
        pick_port mport "${OW_MYSQL_PORT:-}" ;;
      kafka)
        kafka_choose
        pick_port kport "${OW_KAFKA_PORT:-}"
        if [[ $BROKER_KIND == kafka ]]; then pick_port cport "${OW_KAFKA_CONTROLLER_PORT:-}"; fi
        if [[ -n $TLS_DIR ]]; then
          [[ $BROKER_KIND == kafka ]] || die "OW_SERVICES_TLS_DIR needs Apache Kafka (the mock broker has no TLS)"
          pick_port sport
        fi ;;
    esac
  done

  # A broker cluster picks its ports in kafka-cluster.sh, while MariaDB
  # has not bound its own yet: tell it which are taken.
  export OW_USED_PORTS="$USED_PORTS"
  local -A job=()
  for svc in "${todo[@]}"; do
    case $svc in
      mariadb) ( mariadb_start "$mport" ) & job[mariadb]=$! ;;
      kafka) ( kafka_start "$BROKER_KIND" "$kport" "$cport" "$sport" ) & job[kafka]=$! ;;
    esac
  done
  local failed=() ok=()
  for svc in "${todo[@]}"; do
    if wait "${job[$svc]}"; then ok+=("$svc"); else failed+=("$svc"); fi
  done

  if ((${#failed[@]} > 0)); then
    # Do not leave half a set running: stop what this call started.
    for svc in "${ok[@]}"; do
      if [[ $svc == kafka ]] && kafka_is_cluster; then "$KCLUSTER" stop; fi
      if pid="$(service_pid "$svc")"; then kill_and_wait "$pid" "$svc"; fi
      rm -f "$(pidfile_of "$svc")" "$(envfile_of "$svc")"
    done
    for svc in "${failed[@]}"; do rm -f "$(envfile_of "$svc")"; done
    write_state
    die "could not start: ${failed[*]}${ok[*]:+ (stopped again: ${ok[*]})}"
  fi
  write_state
  say "state: $STATE_FILE"
}

cmd_stop() {
  parse_target "${1:-all}"
  local svc pid
  for svc in "${TARGETS[@]}"; do
    if [[ $svc == kafka ]] && kafka_is_cluster; then "$KCLUSTER" stop; continue; fi
    if pid="$(service_pid "$svc")"; then
      kill_and_wait "$pid" "$svc"
      say "$svc stopped (pid $pid)"
    else
      say "$svc not running"
    fi
    rm -f "$(pidfile_of "$svc")" "$(envfile_of "$svc")"
  done
  if [[ ${1:-all} == all ]]; then
    if [[ -f $OW_RUN_DIR/galera.env ]]; then "$ROOT/scripts/galera-cluster.sh" stop; fi
    rm -rf "$MDB_DIR" "$K_DIR" "$K_SHM_DATA"
    rm -f "$STATE_FILE" "$STATE_FILE.tmp"
    say "removed data dirs and state file (logs kept in $OW_RUN_DIR)"
  else
    write_state
  fi
}

cmd_status() {
  local svc pid port
  for svc in mariadb kafka; do
    if [[ $svc == kafka ]] && kafka_is_cluster; then "$KCLUSTER" status; continue; fi
    case $svc in
      mariadb) port="$(frag_get "$MDB_ENV" OW_MYSQL_PORT)" ;;
      kafka) port="$(frag_get "$K_ENV" OW_KAFKA_PORT)" ;;
    esac
    if pid="$(service_pid "$svc")"; then
      local what=$svc
      [[ $svc == kafka ]] && what="kafka ($(frag_get "$K_ENV" OW_KAFKA_VERSION))"
      [[ $svc == mariadb ]] && what="mariadb ($(frag_get "$MDB_ENV" OW_MARIADB_VERSION))"
      if [[ -n $port ]] && port_in_use "$port"; then
        say "$what: running, pid $pid, 127.0.0.1:$port"
      else
        say "$what: process $pid running, port ${port:-?} not listening yet"
      fi
    elif [[ -f $(envfile_of "$svc") ]]; then
      say "$svc: DOWN (port $port and data kept; '$0 $svc-up' restarts it)"
    else
      say "$svc: not started"
    fi
  done
  if [[ -f $STATE_FILE ]]; then say "state: $STATE_FILE"; fi
}

cmd_env() {
  [[ -f $STATE_FILE ]] || die "no services started ($STATE_FILE missing); run: $0 start"
  cat "$STATE_FILE"
}

main() {
  local cmd=${1:-}
  [[ -n $cmd ]] || usage
  shift || true
  if [[ $cmd == galera || ${1:-} == galera ]]; then
    [[ $cmd == galera ]] || set -- "$cmd"
    exec "$ROOT/scripts/galera-cluster.sh" "$@"
  fi

  # One services.sh at a time per $OW_RUN_DIR (daemons get fd 9 closed).
  if command -v flock >/dev/null 2>&1; then
    exec 9>"$OW_RUN_DIR/.lock"
    flock -w 600 9 || die "another services.sh is still running in $OW_RUN_DIR"
  fi

  case $cmd in
    start) cmd_start "$@" ;;
    stop) cmd_stop "$@" ;;
    status) cmd_status ;;
    env) cmd_env ;;
    mariadb-down) mariadb_down ;;
    mariadb-up) mariadb_up ;;
    kafka-down) kafka_down ;;
    kafka-up) kafka_up ;;
    restart-mariadb | mariadb-restart) mariadb_down; mariadb_up ;;
    restart-kafka | kafka-restart | restart-kafka-down) kafka_down; kafka_up ;;
    -h | --help | help) usage ;;
    *) usage ;;
  esac
}

main "$@"
