#!/usr/bin/env bash
# Makes (once per machine) the Debian 13 ("trixie") root the `debian13` test
# tier runs in, and prints its path. The root is cached outside the clone, in
# $OW_DEBIAN13_CACHE (default /var/cache/order-worker), under a name that
# holds a hash of this script: the package list and every step below are in
# it, so any change here makes a new root and an unchanged script reuses the
# one already made. Later runs never write to the cached root (the tier
# mounts it read-only under an overlay), so one root serves every clone.
#
#   scripts/debian13-root.sh     prints e.g. /var/cache/order-worker/debian13-0123abcd4567
#
# Needs root and debootstrap (scripts/deps.sh installs it). Cold, it takes
# about two minutes here: one debootstrap of the minimal base from Debian's
# archive, then one apt-get install of the packages below with neither
# recommended packages nor documentation. The downloaded packages stay in
# $OW_DEBIAN13_CACHE/debian13-debs, so a root remade after an edit here
# fetches only what changed.
#
# Environment:
#   OW_DEBIAN13_CACHE    where roots are kept (default /var/cache/order-worker)
#   OW_DEBIAN_MIRROR     Debian archive (default http://deb.debian.org/debian)
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
messages debian13-root --stderr

SUITE=trixie
# What the tier needs inside: the build (gcc 14 and the libraries), MariaDB
# 11.8 and its client, a Java runtime and Maven for the broker and the Java
# client example, Python and confluent-kafka for the other example and the
# query service's test, and the package tier's tools.
PACKAGES=(
  gcc libc6-dev cmake ninja-build pkgconf
  librdkafka-dev default-libmysqlclient-dev libjansson-dev libssl-dev
  libcmocka-dev libmicrohttpd-dev zlib1g-dev
  mariadb-server mariadb-client
  openjdk-21-jdk-headless maven
  python3 python3-confluent-kafka
  curl jq openssl kcat procps iproute2
  dpkg-dev lintian systemd adduser
)

CACHE="${OW_DEBIAN13_CACHE:-/var/cache/order-worker}"
MIRROR="${OW_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
KEY="$(sha256sum "${BASH_SOURCE[0]}" | cut -c1-12)"
DEST="$CACHE/debian13-$KEY"
DEBS="$CACHE/debian13-debs"

[[ $(id -u) -eq 0 ]] || die "needs root (debootstrap, chroot, mount)"
command -v debootstrap >/dev/null 2>&1 || die "debootstrap is missing: run scripts/deps.sh"
mkdir -p "$CACHE" "$DEBS"
# One builder at a time per machine; a second run waits and then finds the root.
exec 8>"$CACHE/debian13.lock"
flock -w 1200 8 || die "another run held $CACHE/debian13.lock for 20 minutes"
if [[ -f $DEST/.complete ]]; then
  printf '%s\n' "$DEST"
  exit 0
fi

TMP="$(mktemp -d "$CACHE/.tmp-debian13-$KEY.XXXXXX")"
chmod 755 "$TMP"  # the root directory of the root: other users must traverse it
MOUNTS=()
cleanup() {
  local i
  for ((i = ${#MOUNTS[@]} - 1; i >= 0; i--)); do umount "${MOUNTS[i]}" 2>/dev/null || umount -l "${MOUNTS[i]}" || true; done
  MOUNTS=()
  if [[ -n ${TMP:-} ]]; then rm -rf --one-file-system "$TMP"; fi
}
on_exit cleanup
trap 'exit 130' INT
trap 'exit 143' TERM HUP
mnt() {  # TARGET MOUNT-ARGS...
  local target=$1
  shift
  mount "$@" "$target"
  MOUNTS+=("$target")
}

t0=$SECONDS
say "making a Debian 13 root in $DEST (debootstrap $SUITE from $MIRROR)"
timeout 900 debootstrap --variant=minbase --cache-dir="$DEBS" "$SUITE" "$TMP" "$MIRROR" \
  >"$TMP.log" 2>&1 || { tail -n 30 "$TMP.log" >&2; die "debootstrap failed (log: $TMP.log)"; }
say "debootstrap: $((SECONDS - t0)) s"

# Nothing installed here may start a service (MariaDB's postinst would), and
# the root needs neither documentation nor translations.
printf '#!/bin/sh\nexit 101\n' >"$TMP/usr/sbin/policy-rc.d"
chmod 755 "$TMP/usr/sbin/policy-rc.d"
cat >"$TMP/etc/dpkg/dpkg.cfg.d/01-ow-nodoc" <<'EOF'
path-exclude=/usr/share/doc/*
path-include=/usr/share/doc/*/copyright
path-exclude=/usr/share/man/*
path-exclude=/usr/share/info/*
path-exclude=/usr/share/locale/*
EOF
printf 'APT::Install-Recommends "false";\nAPT::Install-Suggests "false";\n' \
  >"$TMP/etc/apt/apt.conf.d/01-ow-norecommends"

mnt "$TMP/proc" -t proc proc
mnt "$TMP/var/cache/apt/archives" --bind "$DEBS"
t1=$SECONDS
in_root() { chroot "$TMP" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8 "$@"; }
in_root apt-get update -q >>"$TMP.log" 2>&1 || { tail -n 30 "$TMP.log" >&2; die "apt-get update failed"; }
timeout 1200 chroot "$TMP" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8 \
  apt-get install -y -q "${PACKAGES[@]}" >>"$TMP.log" 2>&1 \
  || { tail -n 30 "$TMP.log" >&2; die "apt-get install failed (log: $TMP.log)"; }
say "apt-get install of ${#PACKAGES[@]} packages: $((SECONDS - t1)) s"
for p in /proc/[0-9]*; do
  [[ "$(readlink "$p/root" 2>/dev/null)" == "$TMP" ]] && die "a package left a process running in the root: $(tr '\0' ' ' <"$p/cmdline")"
done
for ((i = ${#MOUNTS[@]} - 1; i >= 0; i--)); do umount "${MOUNTS[i]}"; done
MOUNTS=()
# The exclusions were for this build only: the package tier installs the
# project's .deb in the root as on any Debian 13 machine.
rm -f "$TMP/etc/dpkg/dpkg.cfg.d/01-ow-nodoc"
mkdir -p "$TMP/run/lock"
in_root dpkg-query -W -f='${Package} ${Version}\n' mariadb-server librdkafka-dev gcc openjdk-21-jre-headless \
  >"$TMP/.ow-versions"
du -sm "$TMP" | awk '{print $1 " MiB"}' >>"$TMP/.ow-versions"
date -u +%Y-%m-%dT%H:%M:%SZ >"$TMP/.complete"
mv "$TMP" "$DEST"
TMP=""
say "made $DEST in $((SECONDS - t0)) s: $(tr '\n' ' ' <"$DEST/.ow-versions")"
# Roots of earlier versions of this script, unless a running tier uses one.
for old in "$CACHE"/debian13-*/; do
  old=${old%/}
  [[ $old == "$DEST" || $old == "$DEBS" ]] && continue
  grep -qF "$old" /proc/self/mountinfo && continue
  rm -rf --one-file-system "$old"
done
rm -f "$CACHE"/.tmp-debian13-*.log
printf '%s\n' "$DEST"
