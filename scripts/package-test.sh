#!/usr/bin/env bash
# The `package` tier: builds the Debian package with CPack, runs
# lintian on it, installs it on this machine with dpkg -i and checks the
# installed system, then removes and purges it and checks what each step
# leaves behind.
#
#   scripts/package-test.sh [--build-only]
#
# --build-only stops after building the .deb and lintian (no root needed for
# that part). The package is built in $OW_DEB_BUILD_DIR (default
# <repo>/build-deb), configured for the Debian layout with Debian's hardening
# flags (dpkg-buildflags). Installing needs root; the package is purged again
# on exit, also after a failure. The order-worker system user stays after a
# purge by design (see config/debian/postrm); a user left by an earlier run
# is deleted before the install so that this run proves postinst creates it.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
messages package --die FAIL 1
DEB_BUILD="${OW_DEB_BUILD_DIR:-$ROOT/build-deb}"
PKG=order-worker
CONF=/etc/order-worker/order-worker.conf
# Debian 12 keeps units in /lib/systemd/system (its lintian wants them there);
# from Debian 13 on, /lib is only an alias of /usr/lib and lintian refuses a
# package that ships files under it (aliased-location).
UNITDIR=/usr/lib/systemd/system
if [[ "$(. /etc/os-release && echo "${VERSION_ID:-}")" == 12 ]]; then UNITDIR=/lib/systemd/system; fi
UNIT=$UNITDIR/order-worker.service
TEMPLATE=$UNITDIR/order-worker@.service
installed_by_us=0

status_of() { dpkg-query -W -f='${Status}' "$PKG" 2>/dev/null || true; }

# dpkg has no lock timeout: wait while another apt/dpkg run holds the lock.
dpkg_wait() {
  local out
  for _ in $(seq 1 120); do
    if out=$(dpkg "$@" 2>&1); then return 0; fi
    if grep -q 'lock' <<<"$out"; then sleep 5; continue; fi
    printf '%s\n' "$out" >&2
    return 1
  done
  die "dpkg lock still held after 10 minutes"
}

cleanup() {
  if ((installed_by_us)) && [[ -n $(status_of) ]]; then
    dpkg_wait --purge "$PKG" >/dev/null 2>&1 || true
  fi
}
on_exit cleanup

# --- build -------------------------------------------------------------------
t0=$SECONDS
export DEB_BUILD_MAINT_OPTIONS=hardening=+all
cmake -S "$ROOT" -B "$DEB_BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_INSTALL_PREFIX=/usr -DCMAKE_INSTALL_SYSCONFDIR=/etc -DOW_SYSTEMD_UNITDIR="$UNITDIR" \
  -DOW_TESTS=OFF -DCMAKE_SKIP_INSTALL_ALL_DEPENDENCY=ON \
  -DCMAKE_C_FLAGS="$(dpkg-buildflags --get CFLAGS) $(dpkg-buildflags --get CPPFLAGS)" \
  -DCMAKE_EXE_LINKER_FLAGS="$(dpkg-buildflags --get LDFLAGS)" >/dev/null
# Only what the package installs (CMAKE_SKIP_INSTALL_ALL_DEPENDENCY keeps
# cpack from building the test tools).
cmake --build "$DEB_BUILD" --target order-worker ow_deb_docs >/dev/null
version=$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$DEB_BUILD/CMakeCache.txt")
deb="$DEB_BUILD/${PKG}_${version}_amd64.deb"
rm -f "$deb"
(cd "$DEB_BUILD" && cpack -G DEB >cpack.log 2>&1) || { cat "$DEB_BUILD/cpack.log"; die "cpack -G DEB"; }
[[ -f $deb ]] || die "cpack did not write $deb"
size=$(stat -c %s "$deb")
depends=$(dpkg-deb -f "$deb" Depends)
say "built $(basename "$deb") in $((SECONDS - t0)) s: $size bytes ($((size / 1024)) KiB)"
say "Depends: $depends"

# --- contents ----------------------------------------------------------------
dpkg-deb -c "$deb" | awk '{print $6}' | sed 's|^\./|/|' >"$DEB_BUILD/contents.txt"
for f in /usr/bin/order-worker /usr/share/order-worker/sql/001_schema.sql \
         /usr/share/order-worker/sql/worker_user.sql "$CONF" "$UNIT" "$TEMPLATE" \
         /usr/share/order-worker/prometheus/order-worker.rules.yml \
         /usr/share/order-worker/grafana/order-worker.json \
         /usr/share/doc/order-worker/copyright /usr/share/doc/order-worker/changelog.gz \
         /usr/share/man/man1/order-worker.1.gz; do
  grep -qx "$f" "$DEB_BUILD/contents.txt" || die "$f is not in the package"
done
conffiles=$(dpkg-deb --ctrl-tarfile "$deb" | tar -xO ./conffiles)
grep -qx "$CONF" <<<"$conffiles" || die "$CONF is not a conffile"
for lib in libc6 libmariadb3 librdkafka1 libjansson4 libssl3 libmicrohttpd12 adduser; do
  [[ $depends == *"$lib"* ]] || die "Depends lacks $lib (dpkg-shlibdeps did not run?)"
done

# --- lintian -----------------------------------------------------------------
lintian --tag-display-limit 0 -I "$deb" >"$DEB_BUILD/lintian.txt" 2>/dev/null || true
n_e=$(grep -c '^E:' "$DEB_BUILD/lintian.txt" || true)
n_w=$(grep -c '^W:' "$DEB_BUILD/lintian.txt" || true)
n_i=$(grep -c '^I:' "$DEB_BUILD/lintian.txt" || true)
sed 's/^/package:   /' "$DEB_BUILD/lintian.txt"
say "lintian: $n_e errors, $n_w warnings, $n_i info"
((n_e == 0)) || die "lintian reports errors"
[[ ${1:-} == --build-only ]] && { say "built (--build-only)"; exit 0; }

# --- install -------------------------------------------------------------------
[[ $(id -u) -eq 0 ]] || die "installing the package needs root"
# One install test at a time per machine (several checkouts may run test.sh).
exec 9>/run/lock/order-worker-package-test.lock
flock -w 900 9 || die "another package test held the lock for 15 minutes"
[[ -z $(status_of) || $(status_of) == "unknown ok not-installed" ]] ||
  die "$PKG is already installed here ($(status_of)); not touching it"
if getent passwd order-worker >/dev/null; then
  uid=$(id -u order-worker)
  ((uid < 1000)) || die "a non-system user order-worker exists; not touching it"
  pgrep -u order-worker >/dev/null && die "processes run as order-worker; not touching it"
  deluser --system --quiet order-worker >/dev/null 2>&1
  getent group order-worker >/dev/null && delgroup --system --quiet order-worker >/dev/null
  say "deleted the order-worker user an earlier run left (purge keeps it)"
fi
[[ ! -e /etc/order-worker ]] || die "/etc/order-worker exists without the package"
installed_by_us=1
dpkg_wait -i "$deb" >"$DEB_BUILD/dpkg-install.log"
[[ $(status_of) == "install ok installed" ]] || die "dpkg -i: status $(status_of)"
got=$(/usr/bin/order-worker --version 2>&1) || die "/usr/bin/order-worker --version failed: $got"
[[ $got == "order-worker $version "* ]] || die "/usr/bin/order-worker --version: $got"
if ! out=$(systemd-analyze verify "$UNIT" 2>&1) || grep -q 'order-worker.service' <<<"$out"; then
  printf '%s\n' "$out"
  die "systemd-analyze verify $UNIT"
fi
grep -q '^ExecStart=/usr/bin/order-worker run --config /etc/order-worker/order-worker.conf$' "$UNIT" ||
  die "the installed unit does not run /usr/bin/order-worker with $CONF"
# The template: an instance verifies, and runs the worker with its
# instance name as the replica id, whatever the environment files say.
if ! out=$(systemd-analyze verify order-worker@orders-a1.service 2>&1) || grep -q 'order-worker@' <<<"$out"; then
  printf '%s\n' "$out"
  die "systemd-analyze verify order-worker@orders-a1.service"
fi
exec_start=$(sed -n 's/^ExecStart=//p' "$TEMPLATE" | sed 's/%i/orders-a1/g')
[[ $exec_start == "/usr/bin/env ORDER_WORKER_WORKER_REPLICA_ID=orders-a1 /usr/bin/order-worker run --config $CONF" ]] ||
  die "the template's ExecStart does not pass the instance name as the replica id: $exec_start"
getent passwd order-worker >/dev/null || die "postinst did not create the order-worker user"
read -ra words <<<"${exec_start% run --config *}"
replica=$(ORDER_WORKER_WORKER_REPLICA_ID=from-a-file runuser -u order-worker -- "${words[@]}" config --print --config "$CONF" |
  sed -n 's/^worker\.replica_id *= *\([^ ]*\).*/\1/p')
[[ $replica == orders-a1 ]] || die "order-worker@orders-a1 runs with worker.replica_id '$replica'"
IFS=: read -r _ _ uid gid _ home shell < <(getent passwd order-worker)
((uid < 1000)) || die "order-worker is not a system user (uid $uid)"
[[ $shell == */nologin || $shell == /bin/false ]] || die "order-worker has a login shell: $shell"
group=$(getent group "$gid" | cut -d: -f1)
[[ $group == order-worker ]] || die "order-worker's group is $group"
perm=$(stat -c '%a %U %G' "$CONF")
[[ $perm == "640 root order-worker" ]] || die "$CONF is $perm, want 640 root order-worker"
# The worker's user can read its configuration (the unit runs it as that user).
runuser -u order-worker -- /usr/bin/order-worker config --print --config "$CONF" >/dev/null ||
  die "the order-worker user cannot read $CONF"
[[ ! -e /etc/systemd/system/multi-user.target.wants/order-worker.service ]] ||
  die "the package enabled the unit (it must wait for a database and topics)"
say "installed: /usr/bin/order-worker --version ok, systemd-analyze verify ok (and of order-worker@orders-a1: replica id orders-a1), user order-worker (uid $uid, home $home, shell $shell), $CONF is $perm"

# --- remove: the programs go, the configuration and the user stay ------------
printf '# changed by the administrator\n' >>"$CONF"
dpkg_wait -r "$PKG" >"$DEB_BUILD/dpkg-remove.log"
[[ $(status_of) == "deinstall ok config-files" ]] || die "after dpkg -r: status $(status_of)"
for f in /usr/bin/order-worker "$UNIT" "$TEMPLATE" /usr/share/order-worker /usr/share/doc/order-worker; do
  [[ ! -e $f ]] || die "$f is still there after dpkg -r"
done
[[ -f $CONF ]] || die "dpkg -r deleted the conffile $CONF"
grep -q 'changed by the administrator' "$CONF" || die "dpkg -r replaced the edited $CONF"
[[ $(stat -c '%a %U %G' "$CONF") == "640 root order-worker" ]] || die "$CONF changed mode on remove"
getent passwd order-worker >/dev/null || die "dpkg -r deleted the user"
say "removed: programs, unit, data and docs gone; the edited $CONF (640 root order-worker) and the user stay"

# --- purge: the configuration goes, the user stays --------------------------
dpkg_wait -P "$PKG" >"$DEB_BUILD/dpkg-purge.log"
[[ -z $(status_of) || $(status_of) == "unknown ok not-installed" ]] || die "after dpkg -P: status $(status_of)"
[[ ! -e $CONF && ! -e /etc/order-worker ]] || die "/etc/order-worker is still there after dpkg -P"
! dpkg-statoverride --list "$CONF" >/dev/null || die "the mode override of $CONF is still there after dpkg -P"
getent passwd order-worker >/dev/null || die "dpkg -P deleted the user (postrm keeps it by design)"
installed_by_us=0
say "purged: $CONF, /etc/order-worker and the mode override gone; user order-worker stays (Debian practice)"
say "passed: $(basename "$deb") $size bytes; lintian $n_e errors, $n_w warnings, $n_i info; install, remove, purge checked ($((SECONDS - t0)) s)"
