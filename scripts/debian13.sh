#!/usr/bin/env bash
# The `debian13` test tier: the project built and tested on Debian 13
# ("trixie"), with its gcc 14, librdkafka 2.8 and MariaDB 11.8, on this
# machine. Run by scripts/test.sh (OW_TEST_TIERS=debian13), or alone after
# scripts/deps.sh:
#
#   scripts/debian13.sh              the tier: build and the tiers below, in the root
#   scripts/debian13.sh CMD [ARG...] CMD in the prepared root instead (for example
#                                    `scripts/debian13.sh bash`), from the clone's directory
#
# How it is laid out:
#  * the root is made once per machine by scripts/debian13-root.sh (cached in
#    /var/cache/order-worker) and never written to: each run mounts it as the
#    lower layer of an overlay whose upper layer lives in $OW_DEBIAN13_RUN_DIR
#    (default <repo>/.run/debian13), so every run starts from the same root;
#  * the clone is bind-mounted into the root at its own path, so the build
#    (<repo>/build-debian13), the logs and the services' state files have the
#    same names inside and outside, and the Kafka jars scripts/deps.sh cached
#    in <repo>/.cache serve the broker inside; ~/.m2 is bind-mounted too (the
#    Java client example builds offline from it);
#  * the root shares the machine's network: the services it starts listen on
#    random loopback ports, as scripts/services.sh picks them everywhere;
#  * inside, scripts/test.sh runs with OW_TEST_TIERS from OW_DEBIAN13_TIERS
#    (default "unit integration e2e secure package"): it builds with gcc 14
#    and warnings as errors, starts MariaDB 11.8 and the Apache Kafka 4.1
#    broker (the same jars, on Debian 13's OpenJDK 21) once for unit,
#    integration and e2e, then runs scripts/secure.sh (its own TLS-only
#    services) and scripts/package-test.sh (the .deb built, linted,
#    installed, removed and purged in the root). The static checks ran
#    outside and do not depend on the platform (OW_TEST_STATIC=0).
#
# Every mount is undone and every process left in the root is stopped on
# every way out; the run inside is bounded by OW_DEBIAN13_TIMEOUT seconds
# (default 2400). The last line is the tier's summary.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
messages debian13 --die FAILED 1
# The clone is bind-mounted into the root at this path: no symbolic link in it.
ROOT="$(cd "$ROOT" && pwd -P)"
RUN="${OW_DEBIAN13_RUN_DIR:-$ROOT/.run/debian13}"
TIERS="${OW_DEBIAN13_TIERS:-unit integration e2e secure package}"
LIMIT="${OW_DEBIAN13_TIMEOUT:-2400}"
BUILD="$ROOT/build-debian13"
T0=$SECONDS

[[ $(id -u) -eq 0 ]] || die "needs root (mount, chroot)"
mkdir -p "$RUN"
RUN="$(cd "$RUN" && pwd -P)"
R="$RUN/root"

# Processes whose root directory is the Debian 13 root: what the run inside
# started and left (its own traps normally stop everything).
root_pids() {
  local p
  for p in /proc/[0-9]*; do
    [[ "$(readlink "$p/root" 2>/dev/null)" == "$R" ]] && printf '%s\n' "${p#/proc/}"
  done
  return 0
}
stop_root_pids() {
  local pids
  pids="$(root_pids)"
  [[ -z $pids ]] && return 0
  say "stopping what the run left in the root: $(tr '\n' ' ' <<<"$pids")"
  # shellcheck disable=SC2086
  kill -TERM $pids 2>/dev/null || true
  for _ in $(seq 1 20); do
    [[ -z "$(root_pids)" ]] && return 0
    sleep 0.5
  done
  pids="$(root_pids)"
  # shellcheck disable=SC2086
  [[ -n $pids ]] && kill -KILL $pids 2>/dev/null || true
  sleep 0.5
}
# Mount points under $RUN, deepest first: this run's, or a killed run's.
mounts_under_run() {
  awk -v run="$RUN/" '{ if (index($5 "/", run) == 1) print $5 }' /proc/self/mountinfo | sort -r
}
unmount_all() {
  local m
  while read -r m; do
    [[ -n $m ]] || continue
    umount "$m" 2>/dev/null || umount -l "$m" || true
  done < <(mounts_under_run)
}
cleanup() {
  stop_root_pids
  unmount_all
  if [[ -n "$(mounts_under_run)" ]]; then
    warn "still mounted: $(mounts_under_run | tr '\n' ' ')"
  else
    rm -rf --one-file-system "$RUN/upper" "$RUN/work"
  fi
}
# A signal stops the run inside first (bash would run a trap only after a
# foreground child ends), then the EXIT trap cleans up.
INNER=""
on_signal() {
  if [[ -n $INNER ]]; then
    kill -TERM "$INNER" 2>/dev/null || true
    wait "$INNER" 2>/dev/null || true
  fi
  exit "$1"
}
on_exit cleanup
trap 'on_signal 130' INT
trap 'on_signal 143' TERM HUP

# cleanup finds the mounts under RUN: nothing to remember here.
mnt() { mkdir -p "$1"; mount "${@:2}" "$1"; }  # TARGET MOUNT-ARGS...

# A killed earlier run may have left its mounts and processes.
cleanup
LOWER="$("$ROOT/scripts/debian13-root.sh")" || die "could not make the Debian 13 root (scripts/debian13-root.sh)"
mkdir -p "$RUN/upper" "$RUN/work" "$R"
if ! mount -t overlay overlay -o "lowerdir=$LOWER,upperdir=$RUN/upper,workdir=$RUN/work" "$R" 2>"$RUN/overlay.err"; then
  # Without overlayfs, a private copy of the root (about 20 s more).
  say "no overlay mount ($(cat "$RUN/overlay.err")); copying the root"
  rm -rf --one-file-system "$R"
  cp -a "$LOWER" "$R"
fi
mnt "$R/proc" -t proc proc
mnt "$R$ROOT" --bind "$ROOT"
if [[ -d $HOME/.m2 ]]; then mnt "$R/root/.m2" --bind "$HOME/.m2"; fi
say "root: $LOWER ($(tr '\n' ' ' <"$LOWER/.ow-versions")), ready in $((SECONDS - T0)) s"

# A clean environment inside: none of this machine's variables leak in.
ROOT_ENV=(HOME=/root LANG=C.UTF-8 TERM=dumb PYTHONDONTWRITEBYTECODE=1
  PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin)
in_root() { chroot "$R" /usr/bin/env -i "${ROOT_ENV[@]}" "$@"; }

if (($# > 0)); then
  rc=0
  in_root /bin/sh -c 'cd "$1" && shift && exec "$@"' sh "$ROOT" "$@" || rc=$?
  exit "$rc"
fi

# Debian, gcc, librdkafka (as the built binary reports it) and MariaDB.
versions_line() {
  local gcc rdk mdb
  gcc="$(in_root gcc -dumpfullversion 2>/dev/null || echo '?')"
  rdk="$(in_root "$BUILD/order-worker" --version 2>/dev/null | sed -n 's/.*(librdkafka \([^,]*\),.*/\1/p')"
  mdb="$(sed -n 's/^test: database: MariaDB \([^ ]*\) .*/\1/p' "$LOG" | head -n 1)"
  # Without the shared services (the secure tier alone), the server says.
  [[ -n $mdb ]] || mdb="$(in_root mariadbd --version 2>/dev/null | sed -n 's/.* Ver \([0-9.]*\).*/\1/p')"
  printf 'Debian %s, gcc %s, librdkafka %s, MariaDB %s' "$(cat "$R/etc/debian_version")" "$gcc" "${rdk:-?}" "${mdb:-?}"
}
# One phrase per tier from the summary of the run inside, on one line.
tiers_line() {
  local logs="$RUN/test/logs" line
  line="$(sed -n 's/^test:   \([a-z0-9-]*\) *passed *[0-9]* programs, *\([0-9]*\) cases, *\([0-9]*\) passed$/\1 \3\/\2/p' "$LOG" |
    paste -sd, - | sed 's/,/, /g')"
  if [[ " $TIERS " == *" secure "* ]]; then
    line+="; secure $(sed -n 's/^secure: passed: \([0-9]* cases\) in [0-9]* s; \(SASL_SSL login with [^ ]*\).*/\1, \2/p' "$logs/secure.log")"
  fi
  if [[ " $TIERS " == *" package "* ]]; then
    line+="; package: $(grep -o 'lintian [0-9]* errors, [0-9]* warnings' "$logs/package.log" | tail -n 1)"
  fi
  printf '%s\n' "$line"
}

LOG="$RUN/test.log"
rc=0
timeout -k 30 "$LIMIT" chroot "$R" /usr/bin/env -i "${ROOT_ENV[@]}" \
  OW_TEST_TIERS="$TIERS" OW_TEST_STATIC=0 OW_BUILD_DIR="$BUILD" \
  OW_TEST_RUN_DIR="$RUN/test" OW_SECURE_RUN_DIR="$RUN/secure" OW_DEB_BUILD_DIR="$BUILD-deb" \
  OW_DEPS_SKIP_APT=1 OW_DEPS_SKIP_NPM=1 OW_DEPS_SKIP_KAFKA=1 OW_DEPS_SKIP_EXAMPLES=1 \
  "$ROOT/scripts/test.sh" >"$LOG" 2>&1 &
INNER=$!
wait "$INNER" || rc=$?
INNER=""
grep -E '^test: (summary|  )' "$LOG" | sed 's/^test: /debian13: /' || true
if ((rc == 124)); then
  tail -n 40 "$LOG"
  die "the run in the root took more than $LIMIT s (log: $LOG)"
elif ((rc != 0)); then
  tail -n 60 "$LOG"
  die "scripts/test.sh in the root exited $rc (log: $LOG)"
fi
say "passed in $((SECONDS - T0)) s: $(versions_line); $(tiers_line)"
