#!/usr/bin/env bash
# A throwaway three-node MariaDB Galera cluster on loopback addresses, for
# the galera tier (scripts/galera.sh) and scripts/bench.sh --galera.
#
# usage: scripts/galera-cluster.sh COMMAND [N]
#        (or scripts/services.sh start|stop|status galera, scripts/services.sh galera COMMAND [N])
#
#   start            three fresh nodes (new data dirs, one free SQL port on
#                    every node's address): node 1 bootstraps the cluster,
#                    nodes 2 and 3 join it by state transfer (rsync); waits
#                    until all three are Synced in one Primary component
#   stop             heals any partition, stops every node, deletes the data
#                    dirs and the state file (logs are kept)
#   status           each node: pid, wsrep_cluster_size, wsrep_ready,
#                    wsrep_local_state_comment, wsrep_cluster_status
#   node-down N      clean stop (SIGTERM) of node N, its data kept
#   kill N           kill -9 of node N
#   node-up N        start node N again on its data (its position recovered
#                    first after a kill) and wait until it is Synced; prints
#                    whether it rejoined by IST or by a full SST
#   partition N      iptables rules drop the Galera traffic between node N's
#                    address and the other two (never a client's); waits until
#                    N is non-Primary with wsrep_ready OFF and still accepts
#                    connections, and the others are Primary
#   heal             removes the rules `partition` added (and only those) and
#                    waits until every running node is Synced again
#   rolling-restart  node-down and node-up of nodes 1, 2, 3 in turn
#   power-loss       kill -9 of all three nodes at once (a whole cluster
#                    losing power)
#   recover-cluster  the recovery after it (docs/operations.md, "Recovering a
#                    whole Galera cluster"): each node's position from
#                    mariadbd --wsrep-recover, the most advanced node marked
#                    safe_to_bootstrap and started with --wsrep-new-cluster,
#                    the other two joining it; prints the positions
#   wait-synced      wait until every running node is Synced in one Primary
#                    component of all running nodes
#
# State lives in $OW_RUN_DIR/galera (default <repo>/.run/galera);
# `start` writes $OW_RUN_DIR/galera.env, `export VAR=value` lines:
#   OW_GALERA_HOSTS (comma-separated, the mysql.host form) OW_GALERA_PORT
#   OW_GALERA_ADDR_1..3 OW_GALERA_LOG_1..3 OW_GALERA_VERSION OW_GALERA_PROVIDER_VERSION
#
# Environment:
#   OW_RUN_DIR          state folder (default <repo>/.run)
#   OW_GALERA_ADDRS     the three node addresses (default "127.0.0.11 127.0.0.12
#                       127.0.0.13"; any of 127.0.0.0/8 is loopback on Linux)
#   OW_GALERA_PORT      force the SQL port (default: a random free one)
#   OW_GALERA_READY_S   bound on one node's start or rejoin (default 120)
#   OW_GALERA_PARTITION_MAX_S  a partition's rules are removed after this many
#                       seconds even if nobody heals it (default 180)
#   OW_MARIADB_BUFFER_POOL, OW_MARIADB_ARGS   as for scripts/services.sh
#   OW_GALERA_FAULTS=FILE OW_GALERA_MARK=NAME   kill, node-down and partition
#                       append "NAME MS N" to FILE at the moment they act
#                       (the signal sent, the first rule added)
#
# The nodes run as the `mysql` user (the rsync state transfer's daemon on
# the joiner does not run as root, so the data must be mysql's). Only
# processes started here (pid files checked against the process name and
# data dir) are signalled, and only iptables rules carrying this run
# directory's tag are removed.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
messages galera

OW_RUN_DIR="${OW_RUN_DIR:-$ROOT/.run}"
mkdir -p "$OW_RUN_DIR"
OW_RUN_DIR="$(cd "$OW_RUN_DIR" && pwd -P)"
export OW_RUN_DIR
G_DIR="$OW_RUN_DIR/galera"
G_ENV="$OW_RUN_DIR/galera.env"
RUN_TAG="$(printf '%s' "$OW_RUN_DIR" | md5sum | cut -c1-12)"
RULE_TAG="ow-galera-$RUN_TAG"
PROVIDER=/usr/lib/galera/libgalera_smm.so
READY_S="${OW_GALERA_READY_S:-120}"
PARTITION_MAX_S="${OW_GALERA_PARTITION_MAX_S:-180}"
# The group's failure detector: a node silent for 3 s is suspected and
# one silent for 6 s is dropped from the view, so that a partition is
# seen within a few seconds (the defaults, 5 s and 15 s, would make most of
# a short tier a wait).
EVS="evs.keepalive_period=PT1S;evs.suspect_timeout=PT3S;evs.inactive_timeout=PT6S;evs.install_timeout=PT6S;evs.inactive_check_period=PT0.5S"
read -r -a ADDRS <<<"${OW_GALERA_ADDRS:-127.0.0.11 127.0.0.12 127.0.0.13}"

usage() { script_help >&2; exit 2; }

((${#ADDRS[@]} == 3)) || die "OW_GALERA_ADDRS must name three addresses"
for a in "${ADDRS[@]}"; do
  [[ $a =~ ^127\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}$ && $a != 127.0.0.1 ]] ||
    die "OW_GALERA_ADDRS: '$a' is not a loopback address other than 127.0.0.1 (clients use 127.0.0.1)"
done

node_dir()  { echo "$G_DIR/node$1"; }
node_data() { echo "$G_DIR/node$1/data"; }
node_log()  { echo "$G_DIR/node$1/node.log"; }
node_addr() { echo "${ADDRS[$1 - 1]}"; }

# The node's pid, if a mariadbd with its data dir runs.
node_pid() {
  local pid f="$G_DIR/node$1/mariadbd.pid"
  [[ -f $f ]] || return 1
  pid="$(<"$f")"
  pid_running "$pid" && [[ "$(cat "/proc/$pid/comm" 2>/dev/null)" == mariadbd ]] &&
    [[ "$(tr '\0' ' ' <"/proc/$pid/cmdline") " == *"--datadir=$(node_data "$1") "* ]] &&
    echo "$pid"
}

env_get() {  # VAR: from the state file
  [[ -f $G_ENV ]] || return 0
  # shellcheck disable=SC2016
  env -i bash -c 'source "$1" >/dev/null 2>&1; printf "%s" "${!2:-}"' _ "$G_ENV" "$1"
}

sql() {  # N SQL: as root over TCP, tab-separated, no headers
  mariadb_at "$(node_addr "$1"):$PORT" --connect-timeout=3 -N -B -e "$2"
}

# "size ready state cluster_status" of node N, or nothing when it does not answer.
node_state() {
  local out
  out="$(timeout 10 mariadb --no-defaults --protocol=tcp -h"$(node_addr "$1")" -P"$PORT" -uroot \
    --connect-timeout=3 -N -B -e "SHOW GLOBAL STATUS WHERE Variable_name IN
      ('wsrep_cluster_size', 'wsrep_ready', 'wsrep_local_state_comment', 'wsrep_cluster_status')" \
    2>/dev/null)" || return 0
  awk '{ v[$1] = $2 } END { printf "%s %s %s %s\n", v["wsrep_cluster_size"], v["wsrep_ready"],
        v["wsrep_local_state_comment"], v["wsrep_cluster_status"] }' <<<"$out"
}

running_nodes() {
  local n c=0
  for n in 1 2 3; do node_pid "$n" >/dev/null && c=$((c + 1)); done
  echo "$c"
}

partitioned() { [[ -f $G_DIR/partition ]]; }

# Waits until node N is Synced and ready in a Primary component of SIZE nodes.
wait_synced() {  # N SIZE TIMEOUT_S
  local n=$1 size=$2 deadline=$((SECONDS + $3)) st=""
  while :; do
    # (The pid file is written before the launched shell becomes mariadbd.)
    if ! pid_running "$(cat "$(node_dir "$n")/mariadbd.pid" 2>/dev/null)"; then
      tail -n 20 "$(node_log "$n")" >&2 || true
      die "node $n exited (log: $(node_log "$n"))"
    fi
    st="$(node_state "$n")"
    [[ $st == "$size ON Synced Primary" ]] && return 0
    if ((SECONDS >= deadline)); then
      tail -n 20 "$(node_log "$n")" >&2
      die "node $n not Synced in a Primary component of $size within $3 s (last: ${st:-no answer}; log: $(node_log "$n"))"
    fi
    sleep 0.5
  done
}

cmd_wait_synced() {
  local n size
  size="$(running_nodes)"
  for n in 1 2 3; do
    if node_pid "$n" >/dev/null; then wait_synced "$n" "$size" "$READY_S"; fi
  done
  say "every running node ($size) is Synced in one Primary component"
}

# ---------------------------------------------------------------- a node ---

node_args() {  # N -> NODE_ARGS
  local n=$1 a gcomm="" x sock
  a="$(node_addr "$n")"
  for x in "${ADDRS[@]}"; do gcomm+="${gcomm:+,}$x:$GPORT"; done
  sock="$(node_dir "$n")/mysql.sock"
  ((${#sock} > 100)) && sock="/tmp/ow-galera-$RUN_TAG-$n.sock"
  NODE_ARGS=(--no-defaults --datadir="$(node_data "$n")" --socket="$sock" --port="$PORT"
    --bind-address="$a" --user=mysql --pid-file="$(node_dir "$n")/mariadbd.pid.own"
    --log-error="$(node_log "$n")" --skip-name-resolve --max-connections=500
    --innodb-flush-log-at-trx-commit=1 --innodb-buffer-pool-size="${OW_MARIADB_BUFFER_POOL:-256M}"
    --innodb-log-file-size=64M --innodb-autoinc-lock-mode=2 --binlog-format=ROW
    --default-storage-engine=InnoDB --innodb-print-all-deadlocks=ON
    --wsrep-on=ON --wsrep-provider="$PROVIDER" --wsrep-cluster-name="ow-$RUN_TAG"
    --wsrep-cluster-address="gcomm://$gcomm" --wsrep-node-name="node$n"
    --wsrep-node-address="$a" --wsrep-node-incoming-address="$a:$PORT"
    --wsrep-provider-options="base_host=$a;base_port=$GPORT;gmcast.listen_addr=tcp://$a:$GPORT;ist.recv_addr=$a:$IPORT;gcache.size=128M;$EVS"
    --wsrep-sst-method=rsync --wsrep-sst-receive-address="$a:$SPORT" --wsrep-slave-threads=2)
  # shellcheck disable=SC2206  # space-separated options, as in services.sh
  NODE_ARGS+=(${OW_MARIADB_ARGS:-})
}

# After a kill the state file says seqno -1: recover the position from
# InnoDB (as the packaged galera_recovery does), so that the node can ask
# for an incremental state transfer instead of a full one.
recover_position() {  # N -> prints UUID:SEQNO or nothing
  local n=$1 g log pos
  g="$(node_data "$n")/grastate.dat"
  [[ -f $g && -f $(node_data "$n")/ibdata1 ]] || return 0
  grep -qE '^seqno: +-1$' "$g" || return 0
  log="$(node_dir "$n")/recover.log"
  : >"$log"
  chown mysql:mysql "$log"
  node_args "$n"
  timeout 120 "$MARIADBD" "${NODE_ARGS[@]}" --wsrep-recover --log-error="$log" >/dev/null 2>&1 || true
  pos="$(sed -n 's/.*WSREP: Recovered position: *\([0-9a-f-]*:-\{0,1\}[0-9]*\).*/\1/p' "$log" | tail -n 1)"
  if [[ -n $pos ]]; then echo "$pos"; fi
}

node_launch() {  # N [EXTRA ARGS...]
  local n=$1
  shift
  node_args "$n"
  launch "$(node_dir "$n")" "$(node_log "$n").out" "$MARIADBD" "${NODE_ARGS[@]}" "$@" \
    >"$(node_dir "$n")/mariadbd.pid"
}

prereqs() {
  MARIADBD="$(find_bin mariadbd)" || die "mariadbd not found (mariadb-server: scripts/deps.sh)"
  [[ -f $PROVIDER ]] || die "$PROVIDER not found (galera-4: scripts/deps.sh)"
  command -v rsync >/dev/null || die "rsync not found (scripts/deps.sh)"
  command -v ss >/dev/null || die "ss not found (iproute2)"
  id mysql >/dev/null 2>&1 || die "no 'mysql' user (it comes with mariadb-server)"
}

load_state() {
  [[ -f $G_ENV ]] || die "no cluster here ($G_ENV missing); run: $0 start"
  PORT="$(env_get OW_GALERA_PORT)"
  GPORT="$(env_get OW_GALERA_GCOMM_PORT)"
  IPORT="$(env_get OW_GALERA_IST_PORT)"
  SPORT="$(env_get OW_GALERA_SST_PORT)"
  read -r -a ADDRS <<<"$(env_get OW_GALERA_ADDRS)"
}

# The moment a fault acts, for a caller's faults file.
mark() {  # N
  if [[ -n ${OW_GALERA_FAULTS:-} && -n ${OW_GALERA_MARK:-} ]]; then
    echo "$OW_GALERA_MARK $(now_ms) $1" >>"$OW_GALERA_FAULTS"
  fi
}

check_node() { [[ $1 =~ ^[123]$ ]] || die "node must be 1, 2 or 3 (got '${1:-}')"; }

# How node N's last join went, from its log after byte OFF: "IST (K
# writesets)", "SST" or "none". The rsync script runs on every join and
# says which of the two it did.
join_kind() {  # N OFF
  local text k
  text="$(tail -c +"$(($2 + 1))" "$(node_log "$1")" 2>/dev/null || true)"
  if grep -q 'rsync SST completed on joiner' <<<"$text"; then
    echo SST
  elif grep -q 'rsync IST completed on joiner' <<<"$text"; then
    k="$(sed -n 's/.*Receiving IST: \([0-9]*\) writesets.*/\1/p' <<<"$text" | tail -n 1)"
    echo "IST (${k:-0} writesets)"
  else
    echo none
  fi
}

stop_pid() {  # N PID SIGNAL: SIGKILL after 60 s, and every 10 s after that
  local sig=$3 limit=60
  until signal_wait "$2" "$sig" "$limit"; do
    warn "node $1 (pid $2) did not stop within 60 s; sending SIGKILL"
    sig=KILL limit=10
  done
  rm -f "$(node_dir "$1")/mariadbd.pid"
}

cmd_node_down() {
  local n=$1 pid
  check_node "$n"
  load_state
  pid="$(node_pid "$n")" || { say "node $n is not running"; return 0; }
  mark "$n"
  stop_pid "$n" "$pid" TERM
  say "node $n stopped (pid $pid, clean shutdown); data kept"
}

cmd_kill() {
  local n=$1 pid
  check_node "$n"
  load_state
  pid="$(node_pid "$n")" || die "node $n is not running"
  mark "$n"
  kill -KILL "$pid"
  while pid_running "$pid"; do sleep 0.05; done
  rm -f "$(node_dir "$n")/mariadbd.pid"
  say "node $n killed (kill -9, pid $pid)"
}

cmd_power_loss() {
  local n pids=()
  load_state
  for n in 1 2 3; do pids[n]="$(node_pid "$n")" || die "node $n is not running"; done
  for n in 1 2 3; do mark "$n"; kill -KILL "${pids[n]}"; done
  for n in 1 2 3; do
    while pid_running "${pids[n]}"; do sleep 0.05; done
    rm -f "$(node_dir "$n")/mariadbd.pid"
  done
  say "all three nodes killed (kill -9 of pids ${pids[*]:1})"
}

# After every node went down uncleanly no node may bootstrap by itself
# (grastate.dat says safe_to_bootstrap: 0): the one holding the most
# advanced position must, or the commits only it has are lost.
cmd_recover_cluster() {
  local n pos best=0 best_seqno=-2 seqno positions=() t0=$SECONDS
  load_state
  prereqs
  for n in 1 2 3; do
    if node_pid "$n" >/dev/null; then die "node $n is running; recover-cluster is for a cluster that is down"; fi
    pos="$(recover_position "$n")"
    [[ -n $pos ]] || die "node $n: --wsrep-recover found no position (log: $(node_dir "$n")/recover.log)"
    positions[n]=$pos
    seqno=${pos##*:}
    if ((seqno > best_seqno)); then best=$n best_seqno=$seqno; fi
  done
  say "positions: node1=${positions[1]} node2=${positions[2]} node3=${positions[3]}; node $best is the most advanced"
  sed -i 's/^safe_to_bootstrap: *0/safe_to_bootstrap: 1/' "$(node_data "$best")/grastate.dat"
  node_launch "$best" --wsrep-new-cluster --wsrep-start-position="${positions[best]}"
  wait_synced "$best" 1 "$READY_S"
  say "node $best bootstrapped the cluster again in $((SECONDS - t0)) s"
  for n in 1 2 3; do
    ((n == best)) || cmd_node_up "$n"
  done
  say "cluster recovered in $((SECONDS - t0)) s"
}

cmd_node_up() {
  local n=$1 t0=$SECONDS off pos extra=() kind size
  check_node "$n"
  load_state
  prereqs
  if node_pid "$n" >/dev/null; then say "node $n already running"; return 0; fi
  [[ -d $(node_data "$n") ]] || die "node $n has no data dir; run: $0 start"
  if ss -Hltn "sport = :$PORT" | grep -qF "$(node_addr "$n"):$PORT"; then
    die "$(node_addr "$n"):$PORT is taken by another process"
  fi
  pos="$(recover_position "$n")"
  [[ -n $pos ]] && extra=(--wsrep-start-position="$pos")
  off="$(stat -c %s "$(node_log "$n")" 2>/dev/null || echo 0)"
  size=$(($(running_nodes) + 1))
  node_launch "$n" "${extra[@]}"
  wait_synced "$n" "$size" "$READY_S"
  kind="$(join_kind "$n" "$off")"
  say "node $n rejoined by $kind${pos:+ (position recovered after a kill: $pos)} in $((SECONDS - t0)) s; cluster size $size"
}

cmd_start() {
  local t0=$SECONDS n pid full
  prereqs
  for n in 1 2 3; do
    if pid="$(node_pid "$n")"; then die "node $n is already running (pid $pid); run: $0 stop"; fi
  done
  # The nodes listen on their own addresses, not on the 127.0.0.1 that
  # pick_port's refusal of a taken port names.
  if [[ -n ${OW_GALERA_PORT:-} ]] && port_in_use "$OW_GALERA_PORT"; then
    die "requested port $OW_GALERA_PORT is already in use"
  fi
  pick_port PORT "${OW_GALERA_PORT:-}"
  pick_port GPORT
  pick_port IPORT
  pick_port SPORT
  rm -rf "$G_DIR"
  rm -f "$G_ENV"
  mkdir -p "$G_DIR"
  for n in 1 2 3; do mkdir -p "$(node_data "$n")"; done
  chown -R mysql:mysql "$G_DIR"
  if ! mariadb-install-db --no-defaults --datadir="$(node_data 1)" --user=mysql \
      --auth-root-authentication-method=normal >"$G_DIR/install.log" 2>&1; then
    tail -n 20 "$G_DIR/install.log" >&2
    die "mariadb-install-db failed (log: $G_DIR/install.log)"
  fi
  write_env
  node_launch 1 --wsrep-new-cluster
  wait_synced 1 1 "$READY_S"
  # mariadb-install-db's anonymous accounts would shadow 'user'@'%'.
  sql 1 "SELECT CONCAT('DROP USER ', QUOTE(user), '@', QUOTE(host), ';') FROM mysql.user WHERE user = ''" |
    mariadb_at "$(node_addr 1):$PORT"
  say "node 1 bootstrapped the cluster on $(node_addr 1):$PORT in $((SECONDS - t0)) s"
  for n in 2 3; do
    node_launch "$n"
    wait_synced "$n" "$n" "$READY_S"
    say "node $n joined by $(join_kind "$n" 0) on $(node_addr "$n"):$PORT at $((SECONDS - t0)) s"
  done
  full="$(sql 1 'SELECT VERSION()')"
  write_env "$full" "$(sql 1 "SHOW GLOBAL STATUS LIKE 'wsrep_provider_version'" | cut -f2)"
  say "cluster of 3 ready in $((SECONDS - t0)) s: MariaDB $full, mysql.host=$(hosts) port $PORT (state: $G_ENV)"
}

hosts() { local IFS=,; echo "${ADDRS[*]}"; }

write_env() {  # [VERSION PROVIDER_VERSION]
  {
    echo "# Written by scripts/galera-cluster.sh; source this file."
    printf 'export OW_GALERA_HOSTS=%q\n' "$(hosts)"
    printf 'export OW_GALERA_ADDRS=%q\n' "${ADDRS[*]}"
    printf 'export OW_GALERA_PORT=%q\n' "$PORT"
    printf 'export OW_GALERA_GCOMM_PORT=%q OW_GALERA_IST_PORT=%q OW_GALERA_SST_PORT=%q\n' "$GPORT" "$IPORT" "$SPORT"
    for n in 1 2 3; do
      printf 'export OW_GALERA_ADDR_%d=%q OW_GALERA_LOG_%d=%q\n' "$n" "$(node_addr "$n")" "$n" "$(node_log "$n")"
    done
    printf 'export OW_GALERA_VERSION=%q OW_GALERA_PROVIDER_VERSION=%q\n' "${1:-}" "${2:-}"
    printf 'export OW_GALERA_RULE_TAG=%q\n' "$RULE_TAG"
  } >"$G_ENV.tmp"
  mv "$G_ENV.tmp" "$G_ENV"
}

# -------------------------------------------------------------- partition ---

# This run's rules, as `iptables -S INPUT` prints them.
our_rules() { iptables -S INPUT 2>/dev/null | grep -F -- "--comment $RULE_TAG" || true; }

remove_rules() {
  local line spec
  while IFS= read -r line; do
    [[ -n $line ]] || continue
    read -r -a spec <<<"${line#-A INPUT }"
    iptables -D INPUT "${spec[@]}" || warn "could not remove: $line"
  done < <(our_rules)
  rm -f "$G_DIR/partition"
  # Last: when the watchdog itself removes the rules, this ends it.
  if [[ -f $G_DIR/partition.watchdog ]]; then
    local w
    w="$(<"$G_DIR/partition.watchdog")"
    rm -f "$G_DIR/partition.watchdog"
    kill -TERM -- "-$w" 2>/dev/null || true
  fi
}

# Drops the Galera traffic (group, IST and SST ports) between node N's
# address and each other node's, both ways. Clients connect from 127.0.0.1
# and the SQL port is not among these, so they still reach every node.
add_rules() {  # N
  local a o x
  a="$(node_addr "$1")"
  for x in 1 2 3; do
    ((x == $1)) && continue
    o="$(node_addr "$x")"
    iptables -I INPUT -s "$a" -d "$o" -p tcp -m multiport --ports "$GPORT,$IPORT,$SPORT" \
      -m comment --comment "$RULE_TAG" -j DROP
    iptables -I INPUT -s "$o" -d "$a" -p tcp -m multiport --ports "$GPORT,$IPORT,$SPORT" \
      -m comment --comment "$RULE_TAG" -j DROP
  done
}

cmd_partition() {
  local n=$1 deadline st x others=() size
  check_node "$n"
  load_state
  command -v iptables >/dev/null || die "iptables not found (scripts/deps.sh)"
  partitioned && die "a partition is already in place; run: $0 heal"
  node_pid "$n" >/dev/null || die "node $n is not running"
  for x in 1 2 3; do ((x != n)) && node_pid "$x" >/dev/null && others+=("$x"); done
  iptables -S >"$G_DIR/iptables-before.txt"
  echo "$n" >"$G_DIR/partition"
  # Any failure below removes the rules again.
  PARTITION_OK=0
  on_exit 'if ((PARTITION_OK == 0)); then remove_rules; fi'
  mark "$n"
  add_rules "$n"
  # The rules go even if nobody heals (the caller killed, for instance):
  # a watchdog in its own process group, without our lock or output.
  # shellcheck disable=SC2016  # expanded by the inner bash
  setsid bash -c 'sleep "$1"; exec "$2" heal-rules' _ "$PARTITION_MAX_S" "$ROOT/scripts/galera-cluster.sh" \
    >/dev/null 2>&1 </dev/null 8>&- &
  echo $! >"$G_DIR/partition.watchdog"
  say "node $n cut off from nodes ${others[*]:-none} ($(our_rules | wc -l) rules tagged $RULE_TAG)"
  deadline=$((SECONDS + 60))
  while :; do
    st="$(node_state "$n")"
    # "1 OFF Initialized non-Primary" (or Joining when it tried to rejoin).
    if [[ $st =~ ^1\ OFF\ [A-Za-z/]+\ non-Primary$ ]]; then break; fi
    ((SECONDS < deadline)) || die "node $n not non-Primary 60 s after the cut (last: ${st:-no answer})"
    sleep 0.5
  done
  size=${#others[@]}
  for x in "${others[@]}"; do wait_synced "$x" "$size" 60; done
  # shellcheck disable=SC2034  # read by the EXIT trap
  PARTITION_OK=1
  say "node $n is non-Primary and still accepts connections (state: $st); the others are Primary, size $size"
}

cmd_heal() {
  load_state
  remove_rules
  iptables -S >"$G_DIR/iptables-after.txt"
  if [[ -f $G_DIR/iptables-before.txt ]] && ! cmp -s "$G_DIR/iptables-before.txt" "$G_DIR/iptables-after.txt"; then
    warn "iptables -S differs from before the partition (other rules changed meanwhile?):"
    diff "$G_DIR/iptables-before.txt" "$G_DIR/iptables-after.txt" >&2 || true
  fi
  say "rules removed ($(our_rules | wc -l) left); iptables -S as before the partition"
  cmd_wait_synced
}

cmd_rolling_restart() {
  local n t0=$SECONDS
  for n in 1 2 3; do
    cmd_node_down "$n"
    cmd_node_up "$n"
  done
  say "rolling restart done in $((SECONDS - t0)) s"
}

cmd_stop() {
  local n pid
  if [[ -f $G_ENV ]]; then load_state; fi
  if command -v iptables >/dev/null; then remove_rules; fi
  for n in 1 2 3; do
    if pid="$(node_pid "$n")"; then
      stop_pid "$n" "$pid" TERM
      say "node $n stopped (pid $pid)"
    fi
  done
  # Logs are kept beside the state folder; the data goes.
  if [[ -d $G_DIR ]]; then
    mkdir -p "$OW_RUN_DIR/galera-logs"
    for n in 1 2 3; do cp -f "$(node_log "$n")" "$OW_RUN_DIR/galera-logs/node$n.log" 2>/dev/null || true; done
  fi
  rm -rf "$G_DIR" "$G_ENV" /tmp/ow-galera-"$RUN_TAG"-*.sock
  say "cluster stopped; data dirs and state removed (node logs in $OW_RUN_DIR/galera-logs)"
}

cmd_status() {
  local n pid
  [[ -f $G_ENV ]] || { say "not started"; return 0; }
  load_state
  for n in 1 2 3; do
    if pid="$(node_pid "$n")"; then
      read -r size ready state cstatus <<<"$(node_state "$n")"
      say "node $n $(node_addr "$n"):$PORT pid $pid: cluster_size=${size:-?} ready=${ready:-?} state=${state:-?} status=${cstatus:-?}"
    else
      say "node $n $(node_addr "$n"):$PORT: DOWN"
    fi
  done
  if partitioned; then say "partition: node $(<"$G_DIR/partition") cut off ($(our_rules | wc -l) rules)"; fi
}

main() {
  local cmd=${1:-}
  [[ -n $cmd ]] || usage
  shift
  mkdir -p "$OW_RUN_DIR"
  exec 8>"$OW_RUN_DIR/.galera.lock"
  flock -w 600 8 || die "another galera-cluster.sh is still running in $OW_RUN_DIR"
  case $cmd in
    start) cmd_start ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    node-down) cmd_node_down "${1:-}" ;;
    node-up) cmd_node_up "${1:-}" ;;
    kill) cmd_kill "${1:-}" ;;
    partition) cmd_partition "${1:-}" ;;
    heal) cmd_heal ;;
    heal-rules) if [[ -f $G_ENV ]]; then load_state; fi; remove_rules ;;
    rolling-restart) load_state; cmd_rolling_restart ;;
    power-loss) cmd_power_loss ;;
    recover-cluster) cmd_recover_cluster ;;
    wait-synced) load_state; cmd_wait_synced ;;
    -h | --help | help) usage ;;
    *) usage ;;
  esac
}

main "$@"
