#!/usr/bin/env bash
# A three-broker Apache Kafka cluster on loopback for the tests: KRaft, each
# node broker and controller at once, replication factor 3 with
# min.insync.replicas=2 for every topic (the offsets topic and the
# transaction state log too), unclean leader election off, topics created
# on first use as on the single test broker.
#
# usage: scripts/kafka-cluster.sh COMMAND [ARG]
#
#   start              three fresh nodes (new data, free ports); returns when
#                      all three serve metadata listing all three brokers
#   stop               stop every node (SIGTERM, then SIGKILL) and delete the data
#   down | up          stop every node keeping the data / start them again
#   status             one line per node: pid, port, leaderships
#   kill N             kill -9 node N (1-3); its data is kept
#   restart N          start node N again (stopping it first if it runs) and
#                      wait until it is ready
#   leader-of TOPIC-P  the node id leading partition P of TOPIC
#   coordinator-of ID  the node id of the transaction coordinator of
#                      transactional id ID (the leader of its partition of
#                      __transaction_state)
#   group-coordinator-of GROUP  the node id of GROUP's coordinator
#   most-leaders [TOPIC...]  the node leading the most partitions of these
#                      topics (default: every topic)
#   wait-isr [S]       wait (at most S seconds, default 60) until every
#                      partition has all three replicas in sync
#   bootstrap          the bootstrap list
#
# `scripts/services.sh start kafka` runs this with OW_KAFKA_BROKERS=3. State
# and data live in $OW_RUN_DIR/kafka-cluster, each node's log in
# $OW_RUN_DIR/kafka-N.log; `start` writes $OW_RUN_DIR/kafka.env (what
# services.sh folds into services.env): OW_KAFKA_BOOTSTRAP (all three),
# OW_KAFKA_PORT (node 1's), OW_BROKER_KIND=kafka, OW_KAFKA_VERSION,
# OW_KAFKA_BROKERS=3, OW_KAFKA_CLUSTER_DIR.
#
# Environment: OW_RUN_DIR (default <repo>/.run), OW_KAFKA_CLUSTER_HEAP (per
# node, default 256m), OW_KAFKA_CLUSTER_READY_TIMEOUT (seconds, default 120).
# Only processes started here (pid files checked against the process's
# command line) are ever signalled.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
messages kafka-cluster

KAFKA_VERSION=4.1.1
NODES=(1 2 3)
READY_TIMEOUT="${OW_KAFKA_CLUSTER_READY_TIMEOUT:-120}"
STOP_TIMEOUT=30
HEAP="${OW_KAFKA_CLUSTER_HEAP:-256m}"
# The transaction state log's and the offsets topic's partition counts;
# coordinator-of computes with the first.
TXN_PARTITIONS=6
OFFSETS_PARTITIONS=6

OW_RUN_DIR="${OW_RUN_DIR:-$ROOT/.run}"
mkdir -p "$OW_RUN_DIR"
OW_RUN_DIR="$(cd "$OW_RUN_DIR" && pwd -P)"
DIR="$OW_RUN_DIR/kafka-cluster"
STATE="$DIR/cluster.env"
K_ENV="$OW_RUN_DIR/kafka.env"
K_CACHE="$ROOT/.cache/kafka/$KAFKA_VERSION"
K_CP="$K_CACHE/jars/*"
TOOL_JVM_OPTS=(-XX:TieredStopAtLevel=1 -XX:+UseSerialGC)

usage() { script_help >&2; exit 2; }

node_dir() { echo "$DIR/node$1"; }
node_props() { echo "$DIR/node$1/server.properties"; }
node_log() { echo "$OW_RUN_DIR/kafka-$1.log"; }
node_pidfile() { echo "$DIR/node$1.pid"; }

check_node() {  # N
  [[ $1 =~ ^[123]$ ]] || die "node must be 1, 2 or 3 (got '$1')"
}

# The pid of node N if it runs: its pid file, checked against the command line.
node_pid() {  # N
  local pid
  [[ -f $(node_pidfile "$1") ]] || return 1
  pid="$(<"$(node_pidfile "$1")")"
  pid_running "$pid" || return 1
  [[ "$(cat "/proc/$pid/comm" 2>/dev/null)" == java ]] || return 1
  [[ "$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) " == *" $(node_props "$1") "* ]] || return 1
  echo "$pid"
}

load_state() {
  [[ -f $STATE ]] || die "no cluster in $OW_RUN_DIR (run: $0 start)"
  # shellcheck disable=SC1090
  source "$STATE"
}

port_of() { local v="PORT_$1"; echo "${!v}"; }
cport_of() { local v="CPORT_$1"; echo "${!v}"; }
bootstrap() {
  local n out=""
  for n in "${NODES[@]}"; do out+="${out:+,}127.0.0.1:$(port_of "$n")"; done
  echo "$out"
}
# Bootstrap list of the nodes that run (metadata requests to a dead node
# would wait for its connection timeout).
live_bootstrap() {
  local n out=""
  for n in "${NODES[@]}"; do
    if node_pid "$n" >/dev/null; then out+="${out:+,}127.0.0.1:$(port_of "$n")"; fi
  done
  [[ -n $out ]] || die "no node is running"
  echo "$out"
}

write_props() {  # N
  local n=$1 voters="" m
  for m in "${NODES[@]}"; do voters+="${voters:+,}$m@127.0.0.1:$(cport_of "$m")"; done
  mkdir -p "$(node_dir "$n")/data"
  cat >"$(node_props "$n")" <<EOF
# Node $n of a three-node KRaft cluster for tests; written by scripts/kafka-cluster.sh
process.roles=broker,controller
node.id=$n
controller.quorum.voters=$voters
listeners=PLAINTEXT://127.0.0.1:$(port_of "$n"),CONTROLLER://127.0.0.1:$(cport_of "$n")
advertised.listeners=PLAINTEXT://127.0.0.1:$(port_of "$n")
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$(node_dir "$n")/data
default.replication.factor=3
min.insync.replicas=2
offsets.topic.replication.factor=3
offsets.topic.num.partitions=$OFFSETS_PARTITIONS
transaction.state.log.replication.factor=3
transaction.state.log.min.isr=2
transaction.state.log.num.partitions=$TXN_PARTITIONS
unclean.leader.election.enable=false
auto.create.topics.enable=true
num.partitions=6
group.initial.rebalance.delay.ms=0
group.min.session.timeout.ms=1000
# Two cores run three of these beside MariaDB and the workers.
num.network.threads=2
num.io.threads=2
background.threads=2
EOF
}

format_node() {  # N ID
  local log="$DIR/format-$1.log"
  if ! java "${TOOL_JVM_OPTS[@]}" -cp "$K_CP" kafka.tools.StorageTool format -t "$2" \
      -c "$(node_props "$1")" >"$log" 2>&1 9>&-; then
    tail -n 20 "$log" >&2
    die "formatting node $1 failed (log: $log)"
  fi
}

# Starts node N detached (scripts/lib.sh's launch: a caller's lock or pipe
# must not live on in the broker).
launch_node() {  # N
  local n=$1
  stat -c %s "$(node_log "$n")" >"$DIR/node$n.logoff" 2>/dev/null || echo 0 >"$DIR/node$n.logoff"
  launch "$(node_dir "$n")" "$(node_log "$n")" java "-Xms$HEAP" "-Xmx$HEAP" -XX:+UseG1GC \
    -XX:ParallelGCThreads=1 -XX:ConcGCThreads=1 -Dorg.slf4j.simpleLogger.showDateTime=true \
    -Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS \
    -cp "$K_CP" kafka.Kafka "$(node_props "$n")" >"$(node_pidfile "$n")"
}

# The node's launcher or JVM is alive (between the two, the pid's command
# is not yet java).
node_alive() {  # N
  [[ -f $(node_pidfile "$1") ]] && pid_running "$(<"$(node_pidfile "$1")")"
}

# Brokers listed by a metadata request to node N.
brokers_seen() {  # N
  timeout 10 kcat -b "127.0.0.1:$(port_of "$1")" -L -m 5 2>/dev/null |
    grep -cE '^  broker [0-9]+ at 127\.0\.0\.1:' || true
}

# Waits until each given node has started and lists WANT brokers.
wait_ready() {  # WANT N...
  local want=$1 n deadline=$((SECONDS + READY_TIMEOUT)) pending
  shift
  pending=("$@")
  while ((${#pending[@]} > 0)); do
    local left=()
    for n in "${pending[@]}"; do
      node_alive "$n" || { tail -n 30 "$(node_log "$n")" >&2; die "node $n exited during startup (log: $(node_log "$n"))"; }
      if log_since "$(node_log "$n")" "$(<"$DIR/node$n.logoff")" | grep -q 'Kafka Server started' &&
          (($(brokers_seen "$n") >= want)); then
        continue
      fi
      left+=("$n")
    done
    pending=("${left[@]}")
    ((${#pending[@]} == 0)) && break
    if ((SECONDS >= deadline)); then
      tail -n 30 "$(node_log "${pending[0]}")" >&2
      die "node(s) ${pending[*]} not ready after ${READY_TIMEOUT}s"
    fi
    sleep 0.5
  done
}

stop_node() {  # N SIGNAL: signal node N and wait until it is gone (SIGKILL every 10 s after STOP_TIMEOUT)
  local n=$1 sig=$2 limit=$STOP_TIMEOUT pid
  pid="$(node_pid "$n")" || return 0
  until signal_wait "$pid" "$sig" "$limit"; do
    say "node $n (pid $pid) did not stop within ${STOP_TIMEOUT}s of SIG$sig; sending SIGKILL"
    sig=KILL limit=10
  done
  rm -f "$(node_pidfile "$n")"
}

write_env() {
  {
    printf 'export OW_KAFKA_BOOTSTRAP=%q\n' "$(bootstrap)"
    printf 'export OW_KAFKA_PORT=%q\n' "$(port_of 1)"
    printf 'export OW_KAFKA_CONTROLLER_PORT=%q\n' "$(cport_of 1)"
    echo 'export OW_BROKER_KIND=kafka'
    printf 'export OW_KAFKA_VERSION=%q\n' "apache-kafka-$KAFKA_VERSION-x3"
    echo 'export OW_KAFKA_BROKERS=3'
    printf 'export OW_KAFKA_CLUSTER_DIR=%q\n' "$DIR"
    printf 'export OW_KAFKA_LOG=%q\n' "$(node_log 1)"
  } >"$K_ENV.tmp"
  mv "$K_ENV.tmp" "$K_ENV"
}

cmd_start() {
  local n id t0=$SECONDS running=0
  [[ -f $K_CACHE/.complete ]] || die "no Kafka jars in $K_CACHE (run scripts/deps.sh)"
  command -v java >/dev/null || die "java not found (scripts/deps.sh)"
  command -v kcat >/dev/null || die "kcat not found (scripts/deps.sh)"
  if [[ -f $STATE ]]; then
    load_state
    for n in "${NODES[@]}"; do node_pid "$n" >/dev/null && running=$((running + 1)); done
    if ((running == 3)); then
      write_env
      say "already running on $(bootstrap); leaving it as is"
      return 0
    fi
    say "a cluster with $running of 3 nodes running was left here; starting afresh"
    cmd_stop >/dev/null
  fi
  if [[ -f $K_ENV ]] && ! grep -q '^export OW_KAFKA_BROKERS=3$' "$K_ENV"; then
    die "a single broker's state is in $K_ENV; stop it first (scripts/services.sh stop kafka)"
  fi
  rm -rf "$DIR"
  mkdir -p "$DIR"
  {
    for n in "${NODES[@]}"; do
      pick_port "PORT_$n"
      pick_port "CPORT_$n"
      echo "PORT_$n=$(port_of "$n")"
      echo "CPORT_$n=$(cport_of "$n")"
    done
  } >"$STATE.tmp"
  for n in "${NODES[@]}"; do write_props "$n"; done
  id="$(java "${TOOL_JVM_OPTS[@]}" -cp "$K_CP" kafka.tools.StorageTool random-uuid 2>/dev/null 9>&- | tail -n 1)" || true
  [[ $id =~ ^[A-Za-z0-9_-]{22}$ ]] || die "kafka.tools.StorageTool random-uuid gave '$id'"
  echo "CLUSTER_ID=$id" >>"$STATE.tmp"
  mv "$STATE.tmp" "$STATE"
  local jobs=()
  for n in "${NODES[@]}"; do format_node "$n" "$id" & jobs+=($!); done
  for j in "${jobs[@]}"; do wait "$j" || { cmd_stop >/dev/null; die "formatting failed"; }; done
  for n in "${NODES[@]}"; do
    [[ -s $(node_log "$n") ]] && mv -f "$(node_log "$n")" "$(node_log "$n").prev"
    : >"$(node_log "$n")"
    launch_node "$n"
  done
  if ! (wait_ready 3 "${NODES[@]}"); then
    cmd_stop >/dev/null
    die "the cluster did not start"
  fi
  write_env
  say "Apache Kafka $KAFKA_VERSION, 3 KRaft nodes on $(bootstrap) (heap $HEAP each) ready in $((SECONDS - t0))s"
}

cmd_stop() {
  local n
  if [[ -f $STATE ]]; then
    load_state
    # In parallel: a broker's controlled shutdown waits for the others.
    for n in "${NODES[@]}"; do stop_node "$n" TERM & done
    wait
  fi
  rm -rf "$DIR"
  if [[ -f $K_ENV ]] && grep -q '^export OW_KAFKA_BROKERS=3$' "$K_ENV"; then rm -f "$K_ENV"; fi
  say "stopped; data deleted (logs kept in $OW_RUN_DIR/kafka-N.log)"
}

cmd_down() {
  local n
  load_state
  for n in "${NODES[@]}"; do stop_node "$n" TERM & done
  wait
  say "every node stopped; data kept"
}

cmd_up() {
  local n t0=$SECONDS todo=()
  load_state
  for n in "${NODES[@]}"; do
    node_pid "$n" >/dev/null && continue
    port_in_use "$(port_of "$n")" && die "node $n's port $(port_of "$n") is taken by another process"
    launch_node "$n"
    todo+=("$n")
  done
  ((${#todo[@]} > 0)) && wait_ready 3 "${todo[@]}"
  say "node(s) ${todo[*]:-none} started again in $((SECONDS - t0))s"
}

cmd_kill() {  # N
  local pid
  check_node "$1"
  load_state
  pid="$(node_pid "$1")" || die "node $1 is not running"
  stop_node "$1" KILL
  say "node $1 (pid $pid) killed with SIGKILL"
}

cmd_restart() {  # N
  local t0=$SECONDS
  check_node "$1"
  load_state
  stop_node "$1" TERM
  local p
  for p in "$(port_of "$1")" "$(cport_of "$1")"; do
    wait_port_closed "$p" 30 || die "port $p of node $1 is still in use"
  done
  launch_node "$1"
  wait_ready 3 "$1"
  say "node $1 started again (pid $(node_pid "$1"), same data) in $((SECONDS - t0))s"
}

# "TOPIC PARTITION LEADER" for every partition (of TOPIC, or every topic),
# from a metadata request to the running nodes.
# (Every topic's: a metadata request naming a topic would create it.)
partition_leaders() {  # [TOPIC]
  local out=""
  for _ in 1 2 3; do
    out="$(timeout 15 kcat -b "$(live_bootstrap)" -L -m 10 2>/dev/null)" && break
    out=""
    sleep 1
  done
  [[ -n $out ]] || die "no metadata from $(live_bootstrap) in 3 tries"
  awk -v want="${1:-}" '/^  topic "/ { split($0, a, "\""); topic = a[2] }
       /^    partition [0-9]+, leader / && (want == "" || topic == want) {
         p = $2; sub(",", "", p); l = $4; sub(",", "", l); print topic, p, l }' <<<"$out"
}

cmd_leader_of() {  # TOPIC-P
  local topic=${1%-*} part=${1##*-} leader
  [[ -n $topic && $part =~ ^[0-9]+$ && $1 == *-* ]] || die "leader-of needs TOPIC-PARTITION (got '$1')"
  load_state
  leader="$(partition_leaders "$topic" | awk -v t="$topic" -v p="$part" '$1 == t && $2 == p { print $3 }')"
  [[ $leader =~ ^[0-9]+$ && $leader != -1 ]] || die "no leader known for $1"
  echo "$leader"
}

# Java's String.hashCode of an ASCII string, as a 32-bit signed value.
java_hash() {
  local s=$1 h=0 i c
  for ((i = 0; i < ${#s}; i++)); do
    printf -v c '%d' "'${s:i:1}"
    ((c < 128)) || die "coordinator-of: only ASCII transactional ids are supported"
    h=$(((h * 31 + c) & 0xffffffff))
  done
  echo "$h"
}

# A transactional id's coordinator owns partition
# Utils.abs(hashCode(id)) % partitions of __transaction_state, a group's
# that of __consumer_offsets; Utils.abs is Math.abs, except that it maps
# Integer.MIN_VALUE to 0.
coordinator_partition() {  # KEY PARTITIONS
  local h
  h="$(java_hash "$1")"
  ((h < 0x80000000)) || h=$((0x100000000 - h))
  ((h != 0x80000000)) || h=0
  echo $((h % $2))
}

cmd_coordinator_of() {  # ID
  [[ -n ${1:-} ]] || die "coordinator-of needs a transactional id"
  cmd_leader_of "__transaction_state-$(coordinator_partition "$1" "$TXN_PARTITIONS")"
}

cmd_group_coordinator_of() {  # GROUP
  [[ -n ${1:-} ]] || die "group-coordinator-of needs a group id"
  cmd_leader_of "__consumer_offsets-$(coordinator_partition "$1" "$OFFSETS_PARTITIONS")"
}

# Returns when every partition of every topic has all three replicas in
# sync (after a restart, before the next fault), or fails after TIMEOUT s.
cmd_wait_isr() {  # [TIMEOUT]
  local timeout=${1:-60} t0=$SECONDS short
  load_state
  while :; do
    short="$(timeout 15 kcat -b "$(live_bootstrap)" -L -m 10 2>/dev/null |
      awk '/^    partition [0-9]+, leader / { n = split($0, a, "isrs: "); if (split(a[2], r, ",") < 3) s++ }
           END { print s + 0 }')" || short=""
    if [[ $short == 0 ]]; then
      say "every partition has 3 in-sync replicas (waited $((SECONDS - t0))s)"
      return 0
    fi
    ((SECONDS - t0 < timeout)) || die "${short:-?} partition(s) still short of 3 in-sync replicas after ${timeout}s"
    sleep 0.5
  done
}

cmd_most_leaders() {  # [TOPIC...]
  local all
  load_state
  if (($# == 0)); then
    all="$(partition_leaders)"
  else
    all="$(for t in "$@"; do partition_leaders "$t"; done)"
  fi
  awk '$3 >= 0 { n[$3]++ } END { best = -1; for (b in n) if (best < 0 || n[b] > n[best] || (n[b] == n[best] && b + 0 < best + 0)) best = b; if (best < 0) exit 1; print best }' <<<"$all" ||
    die "no partition leaders found"
}

cmd_status() {
  local n pid leaders
  if [[ ! -f $STATE ]]; then say "not started"; return 0; fi
  load_state
  leaders="$(partition_leaders 2>/dev/null)" || leaders=""
  for n in "${NODES[@]}"; do
    if pid="$(node_pid "$n")"; then
      say "node $n: running, pid $pid, 127.0.0.1:$(port_of "$n") (controller :$(cport_of "$n")), leads $(awk -v n="$n" '$3 == n' <<<"$leaders" | wc -l) partitions"
    else
      say "node $n: DOWN (port $(port_of "$n"), data kept; '$0 restart $n')"
    fi
  done
}

main() {
  local cmd=${1:-}
  [[ -n $cmd ]] || usage
  shift
  case $cmd in
    start) cmd_start ;;
    stop) cmd_stop ;;
    down) cmd_down ;;
    up) cmd_up ;;
    status) cmd_status ;;
    kill) [[ $# == 1 ]] || usage; cmd_kill "$1" ;;
    restart) [[ $# == 1 ]] || usage; cmd_restart "$1" ;;
    leader-of) [[ $# == 1 ]] || usage; cmd_leader_of "$1" ;;
    coordinator-of) [[ $# == 1 ]] || usage; load_state; cmd_coordinator_of "$1" ;;
    group-coordinator-of) [[ $# == 1 ]] || usage; load_state; cmd_group_coordinator_of "$1" ;;
    wait-isr) cmd_wait_isr "${1:-60}" ;;
    most-leaders) cmd_most_leaders "$@" ;;
    bootstrap) load_state; bootstrap ;;
    -h | --help | help) usage ;;
    *) usage ;;
  esac
}

main "$@"
