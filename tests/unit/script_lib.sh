#!/usr/bin/env bash
# scripts/lib.sh, the library the scripts source: its messages keep the
# formats that tests and scripts select lines by; what on_exit registers
# runs in reverse order on every way out (end, exit, die, a trapped or an
# untrapped signal) and leaves the exit status as it was, unless it finds
# the run failed; pick_port hands out free ports of its range, each once;
# signal_wait tells a process that ended from one that did not; the
# supervised replicas record their exits and restarts through hooks a
# script may replace; a benchmark's window spans its backlog's first to
# last commit. Every case runs a small script that sources the library in
# a fresh bash under set -euo pipefail, as the scripts do; programs that
# need services (mariadb, ow-kit, the worker) are stand-ins. Prints
# cmocka's summary lines, which scripts/test.sh counts.
#
# usage: script_lib.sh REPO
set -u
lib="$1/scripts/lib.sh"
dir=$(mktemp -d)
listener=""
trap 'rm -rf "$dir"; [[ -z $listener ]] || kill "$listener" 2>/dev/null' EXIT
run=0 failed=0

check() {  # NAME WANT GOT
  run=$((run + 1))
  if [[ $2 == "$3" ]]; then
    echo "[       OK ] $1"
  else
    failed=$((failed + 1))
    echo "[  FAILED  ] $1"
    printf '  want: %q\n  got:  %q\n' "$2" "$3"
  fi
}
# Runs BODY as a script that sources the library, for 60 s at most; sets
# OUT, ERR and STATUS.
body() {  # BODY
  printf '#!/usr/bin/env bash\nset -euo pipefail\nsource %q\n%s\n' "$lib" "$1" >"$dir/s.sh"
  STATUS=0
  timeout 60 bash "$dir/s.sh" >"$dir/out" 2>"$dir/err" || STATUS=$?
  OUT=$(cat "$dir/out")
  ERR=$(cat "$dir/err")
}

# --- messages --------------------------------------------------------------
body 'messages chaos; say "3 replicas started"'
check "say: name and message on stdout" "chaos: 3 replicas started|" "$OUT|$ERR"

body 'messages chaos; clock_start; SECONDS=$((T_START + 12)); say "killer running"'
check "say after clock_start: seconds in 3 columns" "chaos: [ 12s] killer running" "$OUT"

body 'messages bench --stderr --width 4; clock_start; SECONDS=$((T_START + 7)); say x'
check "say --stderr --width 4" "|bench: [   7s] x" "$OUT|$ERR"

body 'messages services; warn "no state file"'
check "warn on stderr" "|services: WARNING: no state file" "$OUT|$ERR"

body 'messages reshard; die "mysql.shards must list 2N entries"; echo not reached'
check "die: ERROR, exit 1" "|reshard: ERROR: mysql.shards must list 2N entries|1" "$OUT|$ERR|$STATUS"

body 'messages chaos --die "" 2; die "OW_CHAOS_SHARDS must be 3 (or unset)"'
check "die with no word, exit 2" "chaos: OW_CHAOS_SHARDS must be 3 (or unset)|2" "$ERR|$STATUS"

body 'messages eos --die "" 2; die_with 1 "FAILED: no processing.guarantee key"'
check "die_with another status" "eos: FAILED: no processing.guarantee key|1" "$ERR|$STATUS"

body 'messages bench --stderr --die ERROR 2; clock_start; die "build failed"'
check "die after clock_start: say's line" "bench: [  0s] ERROR: build failed|2" "$ERR|$STATUS"

body 'need_built /nonexistent/order-worker'
check "need_built: exit 2 naming the file" \
  "s: ERROR: /nonexistent/order-worker not built (run scripts/test.sh or cmake --build build)|2" "$ERR|$STATUS"

# --- at exit ----------------------------------------------------------------
body 'on_exit "echo first"; on_exit "echo second"; echo end'
check "on_exit: reverse order at the end, status 0" "end second first|0" "$(echo $OUT)|$STATUS"

body 'on_exit "echo first"; on_exit "echo second"; exit 3'
check "on_exit: exit 3 kept" "second first|3" "$(echo $OUT)|$STATUS"

body 'messages x --die ERROR 2; on_exit "echo cleaned"; die "stop"'
check "on_exit: die's status kept" "cleaned|2" "$OUT|$STATUS"

body 'on_exit "echo first"; on_exit "false; echo \"\${NOT_SET_ANYWHERE}after\"; false"; true'
check "on_exit: a failing command or an unset variable stops no other" "after first|0" "$(echo $OUT)|$STATUS"

body 'v=early; on_exit "echo \$v"; v=late'
check "on_exit: the command is expanded when it runs" "late" "$OUT"

body 'on_exit "echo first"; on_exit "for i in 1 2 3; do :; done; echo second"; on_exit "i=0; echo third"'
check "on_exit: a command's own variables move no other" "third second first|0" "$(echo $OUT)|$STATUS"

# A signal while a foreground child runs, as in the fault runs' sleeps.
# The script runs under job control: a non-interactive shell starts its
# background jobs with SIGINT ignored, and an ignored signal cannot be
# trapped.
signal() {  # SIGNAL BODY
  printf '#!/usr/bin/env bash\nset -euo pipefail\nsource %q\n%s\n' "$lib" "$2" >"$dir/s.sh"
  set -m
  bash "$dir/s.sh" >"$dir/out" 2>&1 &
  local pid=$!
  set +m
  for _ in $(seq 50); do [[ -s $dir/out ]] && break; sleep 0.1; done
  kill "-$1" "$pid"
  STATUS=0
  wait "$pid" || STATUS=$?
  OUT=$(cat "$dir/out")
}
signal INT 'trap "exit 130" INT TERM; on_exit "echo cleaned"; echo started; sleep 2'
check "trapped SIGINT: exit 130 after the cleanups" "started cleaned|130" "$(echo $OUT)|$STATUS"

signal TERM 'on_exit "echo cleaned"; echo started; sleep 2'
check "untrapped SIGTERM: cleanups, then ended by the signal (143)" "started cleaned|143" "$(echo $OUT)|$STATUS"

body 'on_exit "echo first"; on_exit "AT_EXIT_FAILED=1"; true'
check "on_exit: AT_EXIT_FAILED turns status 0 into 1" "first|1" "$OUT|$STATUS"

body 'on_exit "AT_EXIT_FAILED=1"; exit 3'
check "on_exit: AT_EXIT_FAILED keeps another status" "3" "$STATUS"

body 'sleep 30 & a=$!; kill_each TERM "" "$a" 99999999; wait "$a" || echo "status $?"'
check "kill_each: skips empty and gone pids" "status 143|0" "$OUT|$STATUS"

# --- processes --------------------------------------------------------------
body 'sleep 30 & a=$!; signal_wait "$a" TERM 5 && echo ended'
check "signal_wait: a process that ends on the signal" "ended|0" "$OUT|$STATUS"

body 'bash -c "trap \"\" TERM; exec sleep 30" & a=$!; sleep 0.3
signal_wait "$a" TERM 1 || echo "still running"; signal_wait "$a" KILL 5 && echo killed'
check "signal_wait: one that ignores it runs on, until SIGKILL" "still running killed|0" "$(echo $OUT)|$STATUS"

body 'PATH=/nonexistent; find_bin chroot; find_bin no-such-program || echo "not found"'
check "find_bin: in sbin without PATH, and a program nowhere" "/usr/sbin/chroot not found|0" "$(echo $OUT)|$STATUS"

# A daemon's log: a line found after the offset, even with more after it
# than a pipe holds (a broker's log after "Kafka Server started"), and
# nothing from before the offset.
{ printf 'old line\n'; printf 'Kafka Server started\n'; head -c 300000 /dev/zero | tr '\0' 'x'; } \
  >"$dir/daemon.log"
body "log_since $dir/daemon.log 9 | grep -q 'Kafka Server started' && echo found"
check "log_since | grep -q: a line followed by 300 KB" "found|0" "$OUT|$STATUS"
body "log_since $dir/daemon.log 9 | grep -q 'old line' || echo absent"
check "log_since: nothing before the offset" "absent|0" "$OUT|$STATUS"

: >"$dir/w.log"
body "(sleep 0.5; echo '{\"event\":\"worker_started\"}' >>$dir/w.log) &
wait_log $dir/w.log 0 '\"event\":\"worker_started\"' 10 && echo started
wait_log $dir/w.log 0 'never' 1 || echo 'time up'"
check "wait_log: a line that comes later, and the time up" "started time up|0" "$(echo $OUT)|$STATUS"

# --- the worker -------------------------------------------------------------
body 'mariadb() { echo "$*"; }; mariadb_at 22467 -e x; mariadb_at 127.0.0.12:3307 -N'
check "mariadb_at: PORT on 127.0.0.1, or HOST:PORT" \
  "--no-defaults --protocol=tcp -h127.0.0.1 -P22467 -uroot -e x|--no-defaults --protocol=tcp -h127.0.0.12 -P3307 -uroot -N" \
  "$(paste -sd'|' "$dir/out")"

# Stand-ins for the client and the migration that say where they connect.
printf '#!/usr/bin/env bash\necho "$1 $ORDER_WORKER_MYSQL_USER@$ORDER_WORKER_MYSQL_HOST:$ORDER_WORKER_MYSQL_PORT" >>"%s/calls"\n' \
  "$dir" >"$dir/fake-migrate"
chmod +x "$dir/fake-migrate"
body "RUN=$dir BIN=$dir/fake-migrate; mariadb() { echo \"mariadb \${3#-h}:\${4#-P}\" >>$dir/calls; }
worker_database galera pw 127.0.0.11:3307
echo \"\$ORDER_WORKER_MYSQL_HOST \$ORDER_WORKER_MYSQL_PORT \$(cat \"\$ORDER_WORKER_MYSQL_PASSWORD_FILE\")\""
check "worker_database on HOST:PORT: made, migrated as root, the user, the workers' server" \
  "mariadb 127.0.0.11:3307|migrate root@127.0.0.11:3307|mariadb 127.0.0.11:3307|127.0.0.11 3307 pw|0" \
  "$(paste -sd'|' "$dir/calls")|$OUT|$STATUS"

printf '#!/usr/bin/env bash\necho "$*"\n' >"$dir/fake-kit"
chmod +x "$dir/fake-kit"
body "KIT=$dir/fake-kit OW_KAFKA_BOOTSTRAP=b; mix in 5 10 7 p $dir/gen.log --stop-file stop"
check "mix: further arguments go to ow-kit gen" \
  "gen b in 5 --rate 10 --seed 7 --retry 25 --reuse 2 --clash 2 --invalid 1 --items 10 --prefix p --stop-file stop" "$OUT"

# --- supervised replicas ----------------------------------------------------
# A worker stand-in that exits 3 at once, restarted until it is stopped.
printf '#!/usr/bin/env bash\nexit 3\n' >"$dir/fake-worker-3"
chmod +x "$dir/fake-worker-3"
mkdir -p "$dir/replicas"
body "RUN=$dir/replicas FAULTS=$dir/replicas/faults BIN=$dir/fake-worker-3; : >\"\$FAULTS\"
start_replica 1; sleep 1; stop_replica 1; wait \"\${SUPERVISORS[1]}\"
grep -c '^replica 1 pid [0-9]* exit 3\$' \"\$RUN/exits.log\"; grep -c '^restart [0-9]* 1\$' \"\$FAULTS\""
read -r exits restarts <<<"$(echo $OUT)"
check "supervise: each exit recorded, each restart a fault" "yes yes|0" \
  "$( ((exits >= 2)) && echo yes) $( ((restarts >= exits - 1 && restarts <= exits)) && echo yes)|$STATUS"

rm -f "$dir/replicas"/*
body "RUN=$dir/replicas FAULTS=$dir/replicas/faults BIN=$dir/fake-worker-3; : >\"\$FAULTS\"
replica_exited() { echo \"exit \$3 of \$1\" >>\"\$RUN/exits.log\"; }; replica_restart() { sleep 0.2; }
start_replica 2; sleep 1; stop_replica 2; wait \"\${SUPERVISORS[2]}\"
sort -u \"\$RUN/exits.log\"; wc -l <\"\$FAULTS\""
check "supervise: a script's own replica_exited and replica_restart" "exit 3 of 2 0|0" "$(echo $OUT)|$STATUS"

# stop_replicas waits while any pid file is left. A replica's pid file can
# go between the glob's expansion and a look at the files (its supervisor
# removes it when the replica exits), as the ls below pretends: that must
# not end the wait while another replica is still stopping. Each stand-in
# takes 0.5 s per replica number to stop after its SIGTERM.
printf '#!/usr/bin/env bash\ntrap "sleep \\$(( ORDER_WORKER_WORKER_REPLICA_ID * 5 ))e-1; exit 0" TERM\nwhile :; do sleep 0.05; done\n' \
  >"$dir/fake-worker-slow"
chmod +x "$dir/fake-worker-slow"
rm -f "$dir/replicas"/*
body "RUN=$dir/replicas FAULTS=$dir/replicas/faults BIN=$dir/fake-worker-slow REPLICA_IDS=1
: >\"\$FAULTS\"; messages chaos
ls() { command ls \"\$@\" \"\$RUN/gone.pid\"; }
start_replica 1; start_replica 2; sleep 1
stop_replicas 1 2; wait
echo \"hung=\$HUNG\"; sort \"\$RUN/exits.log\" | sed 's/pid [0-9]* //'"
check "stop_replicas: a pid file gone between the glob and the look ends no wait" \
  "hung=0 replica 1 exit 0 replica 2 exit 0|0" "$(echo $OUT)|$STATUS"

# --- benchmarks -------------------------------------------------------------
# An ow-kit lag stand-in whose group commits 5 more offsets at each call,
# from 0, and workers that end on SIGTERM with STATUS.
printf '#!/usr/bin/env bash\nn=$(cat "%s/lag" 2>/dev/null || echo 0)\necho $((n + 5)) >"%s/lag"\necho "partition 0: committed $n end 20 lag $((20 - n))"\n' \
  "$dir" "$dir" >"$dir/fake-lag"
chmod +x "$dir/fake-lag"
window() {  # STATUS
  rm -f "$dir/lag"
  body "KIT=$dir/fake-lag OW_KAFKA_BOOTSTRAP=b
bash -c 'trap \"exit $1\" TERM; while :; do sleep 0.05; done' & WORKERS=(\$!)
sleep 30 & watched=\$!
backlog_window g t 20 \"\$watched\" && echo \"n=\$WIN_N ticks=\${#WIN_TICKS[@]} workers=\${#WORKERS[@]}\" ||
  echo \"returned \$? status \${WIN_STATUS:-}\"
kill \"\$watched\""
}
window 0
check "backlog_window: from the first commit (5) to N (20), workers stopped" "n=15 ticks=1 workers=0|0" "$OUT|$STATUS"
window 7
check "backlog_window: a worker that exits other than 0" "returned 3 status 7|0" "$OUT|$STATUS"

# --- the worker's keys ------------------------------------------------------
# A --help far longer than a pipe holds, the key on its first line.
{
  echo '#!/usr/bin/env bash'
  echo 'echo "  worker.replica_id            string, default \"\""'
  echo 'for ((i = 0; i < 5000; i++)); do echo "  filler.key_$i                string, default \"\""; done'
} >"$dir/fake-worker"
chmod +x "$dir/fake-worker"
body "BIN=$dir/fake-worker; worker_has_key 'worker\\.replica_id' && echo yes || echo no
worker_has_key 'processing\\.guarantee' && echo yes || echo no"
check "worker_has_key: a key early in a long --help, and one absent" "yes no|0" "$(echo $OUT)|$STATUS"

# --- ports ------------------------------------------------------------------
body 'for i in 1 2 3 4 5; do pick_port p; echo "$p"; done'
ports=$(sort -u <<<"$OUT" | awk -v lo=20000 -v hi=32000 '$1 >= lo && $1 <= hi' | wc -l)
check "pick_port: five distinct ports in 20000-32000" "5|0" "$ports|$STATUS"

python3 -c 'import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
print(s.getsockname()[1], flush=True); time.sleep(60)' >"$dir/port" &
listener=$!
for _ in $(seq 50); do [[ -s $dir/port ]] && break; sleep 0.1; done
busy=$(cat "$dir/port")
body "messages services; pick_port p $busy; echo \"\$p\""
check "pick_port: a forced port in use is refused" \
  "|services: ERROR: requested port $busy is already in use on 127.0.0.1|1" "$OUT|$ERR|$STATUS"
# A port a parent script handed out, before its daemon has bound it.
OW_USED_PORTS="20123 $busy" body "messages services; pick_port p 20123"
check "pick_port: a port in OW_USED_PORTS is taken" \
  "services: ERROR: port 20123 requested twice|1" "$ERR|$STATUS"
body "port_in_use $busy && echo busy"
check "port_in_use: a listening port" "busy" "$OUT"

echo "[==========] script_lib: $run test(s) run."
if ((failed > 0)); then
  echo "[  FAILED  ] $failed test(s)."
  exit 1
fi
echo "[  PASSED  ] $run test(s)."
