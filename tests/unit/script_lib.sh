#!/usr/bin/env bash
# scripts/lib.sh, the library the scripts source: its messages keep the
# formats that tests and scripts select lines by; what on_exit registers
# runs in reverse order on every way out (end, exit, die, a trapped or an
# untrapped signal) and leaves the exit status as it was; pick_port hands
# out free ports of its range, each once. Every case runs a small script
# that sources the library in a fresh bash under set -euo pipefail, as the
# scripts do. Prints cmocka's summary lines, which scripts/test.sh counts.
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
# Runs BODY as a script that sources the library; sets OUT, ERR and STATUS.
body() {  # BODY
  printf '#!/usr/bin/env bash\nset -euo pipefail\nsource %q\n%s\n' "$lib" "$1" >"$dir/s.sh"
  STATUS=0
  bash "$dir/s.sh" >"$dir/out" 2>"$dir/err" || STATUS=$?
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
  local pid=$! i
  set +m
  for i in $(seq 50); do [[ -s $dir/out ]] && break; sleep 0.1; done
  kill "-$1" "$pid"
  STATUS=0
  wait "$pid" || STATUS=$?
  OUT=$(cat "$dir/out")
}
signal INT 'trap "exit 130" INT TERM; on_exit "echo cleaned"; echo started; sleep 2'
check "trapped SIGINT: exit 130 after the cleanups" "started cleaned|130" "$(echo $OUT)|$STATUS"

signal TERM 'on_exit "echo cleaned"; echo started; sleep 2'
check "untrapped SIGTERM: cleanups, then ended by the signal (143)" "started cleaned|143" "$(echo $OUT)|$STATUS"

body 'sleep 30 & a=$!; kill_each TERM "" "$a" 99999999; wait "$a" || echo "status $?"'
check "kill_each: skips empty and gone pids" "status 143|0" "$OUT|$STATUS"

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
body "port_in_use $busy && echo busy"
check "port_in_use: a listening port" "busy" "$OUT"

echo "[==========] script_lib: $run test(s) run."
if ((failed > 0)); then
  echo "[  FAILED  ] $failed test(s)."
  exit 1
fi
echo "[  PASSED  ] $run test(s)."
