#!/usr/bin/env bash
# Builds the container image order-worker:<version> with no Docker daemon and
# no image registry: a Debian 13 ("trixie") root of only the runtime
# libraries, from Debian's archive, plus the worker built in the Debian 13
# root of the debian13 tier; written as an OCI archive and loaded into
# podman. Prints the packages that take its space, its size and digest, and one line
#
#   image: order-worker:<v> sha256:<digest> <MiB> MiB, librdkafka <v>, Connector/C <v>
#
#   scripts/image.sh               build, load into podman, print the line
#   scripts/image.sh --no-load     build the archive only
#
# How it is made, so that two builds of one commit give the same digest:
#  * SOURCE_DATE_EPOCH defaults to the commit's time; every file newer than
#    it gets that time, the layer and the archive are tar'ed sorted by name
#    with numeric owners and no access or change times, gzip writes no name
#    or time, and the config's "created" is that time;
#  * the root is `mmdebstrap --variant=extract` of the runtime packages
#    below and their dependencies: their files only, no shell, no dpkg, no
#    apt. dpkg's status (/var/lib/dpkg/status and info/*.list) is written
#    from the packages' own control data, so that image scanners list them;
#    documentation, manual pages, translations and glibc's iconv modules
#    are left out (the worker converts no character sets);
#  * the binary is built in the cached Debian 13 root (scripts/debian13.sh)
#    with Debian's hardening flags, the clone's path mapped to ".", and
#    stripped as the .deb's is;
#  * the user is order-worker, uid and gid 10001; the entrypoint is
#    /usr/bin/order-worker and the default command `run`. Configuration
#    comes from ORDER_WORKER_* variables and mounted files; secrets only
#    from files (mysql.password_file, api.token_file, the TLS files).
#
# The same Debian archive state gives the same packages: a build after a
# Debian point release or security update gives another digest, as it
# should. Needs root (mmdebstrap, the root's mounts) and podman for the
# load; scripts/deps.sh installs them.
#
# Environment:
#   SOURCE_DATE_EPOCH     default: the commit's time (git log -1 --format=%ct)
#   OW_IMAGE_DIR          where the archive is written (default <repo>/build-image)
#   OW_DEBIAN_MIRROR      Debian archive (default http://deb.debian.org/debian)
#   OW_IMAGE_SOURCE       the org.opencontainers.image.source annotation
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
messages image --die ERROR 1
ROOT="$(cd "$ROOT" && pwd -P)"
OUT="${OW_IMAGE_DIR:-$ROOT/build-image}"
MIRROR="${OW_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
LOAD=1
case ${1:-} in
  --no-load) LOAD=0 ;;
  "") ;;
  -h | --help) script_help; exit 0 ;;
  *) die_with 2 "unknown option $1 (see scripts/image.sh --help)" ;;
esac
# What the worker links (its NEEDED libraries' packages) and what the
# image's users expect of a Debian image: /etc/os-release (base-files) and
# /etc/services and /etc/protocols (netbase).
PACKAGES=(base-files netbase librdkafka1 libmariadb3 libjansson4 libssl3t64 libmicrohttpd12t64 zlib1g)
USER_ID=10001
# The source annotation. Not the clone's origin: a clone of a clone would
# name another path and give the same commit another digest.
SOURCE_URL="${OW_IMAGE_SOURCE:-https://example.org/order-worker}"

[[ $(id -u) -eq 0 ]] || die "needs root (mmdebstrap, and the Debian 13 root's mounts)"
command -v mmdebstrap >/dev/null 2>&1 || die "mmdebstrap is missing: run scripts/deps.sh"
VERSION="$(sed -n 's/^project(order-worker VERSION \([0-9.]*\).*/\1/p' "$ROOT/CMakeLists.txt")"
[[ -n $VERSION ]] || die "no version in CMakeLists.txt's project()"
REVISION="$(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)"
if [[ -z ${SOURCE_DATE_EPOCH:-} ]]; then
  SOURCE_DATE_EPOCH="$(git -C "$ROOT" log -1 --format=%ct 2>/dev/null)" ||
    die "SOURCE_DATE_EPOCH is not set and git cannot give the commit's time"
fi
export SOURCE_DATE_EPOCH
[[ $SOURCE_DATE_EPOCH =~ ^[0-9]+$ ]] || die "SOURCE_DATE_EPOCH must be seconds since 1970: '$SOURCE_DATE_EPOCH'"
CREATED="$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)"
if [[ -n "$(git -C "$ROOT" status --porcelain --untracked-files=no 2>/dev/null)" ]]; then
  warn "the clone has uncommitted changes: the image is not the commit $REVISION"
  REVISION="$REVISION-dirty"
fi

WORK="$ROOT/.run/image"
BUILD_DIR="$ROOT/build-image/obj"
mkdir -p "$OUT" "$WORK"
rm -rf --one-file-system "$WORK/rootfs" "$WORK/oci"
cleanup() { rm -rf --one-file-system "$WORK/rootfs" "$WORK/oci" "$WORK/layer.tar"; }
on_exit cleanup
trap 'exit 130' INT
trap 'exit 143' TERM HUP
t0=$SECONDS

# --- the binary, built on Debian 13 -------------------------------------------
say "building the worker in the Debian 13 root"
# shellcheck disable=SC2016  # expanded by the shell inside the root
OW_DEBIAN13_RUN_DIR="$ROOT/.run/image-build" "$ROOT/scripts/debian13.sh" \
  env DEB_BUILD_MAINT_OPTIONS=hardening=+all ROOT="$ROOT" B="$BUILD_DIR" sh -ec '
    flags="$(dpkg-buildflags --get CFLAGS) $(dpkg-buildflags --get CPPFLAGS) -ffile-prefix-map=$ROOT=."
    cmake -S "$ROOT" -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DOW_TESTS=OFF \
      -DCMAKE_INSTALL_PREFIX=/usr -DCMAKE_INSTALL_SYSCONFDIR=/etc \
      -DCMAKE_C_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="$(dpkg-buildflags --get LDFLAGS)" >/dev/null
    cmake --build "$B" --target order-worker >/dev/null
    strip --strip-unneeded --remove-section=.comment --remove-section=.note -o "$B/order-worker.stripped" "$B/order-worker"
  ' >"$WORK/build.log" 2>&1 || { tail -n 30 "$WORK/build.log"; die "the build in the Debian 13 root failed (log: $WORK/build.log)"; }
say "built in $((SECONDS - t0)) s"

# --- the root: the runtime packages' files -----------------------------------
t1=$SECONDS
# Runs inside mmdebstrap after the packages are unpacked, while their .deb
# files are still in the root's apt cache: dpkg's status and file lists
# from each package's control data, as dpkg would have written them.
cat >"$WORK/status-hook.sh" <<'EOF'
#!/bin/sh
set -eu
r=$1
mkdir -p "$r/var/lib/dpkg/info"
: >"$r/var/lib/dpkg/status.new"
for deb in "$r"/var/cache/apt/archives/*.deb; do
  pkg=$(dpkg-deb -f "$deb" Package)
  {
    printf 'Package: %s\nStatus: install ok installed\n' "$pkg"
    dpkg-deb -f "$deb" | grep -v '^Package:'
    printf '\n'
  } >"$r/var/lib/dpkg/$pkg.stanza"
  dpkg-deb --fsys-tarfile "$deb" | tar -t | sed -e 's|^\./|/|' -e 's|/$||' -e 's|^$|/.|' \
    >"$r/var/lib/dpkg/info/$pkg.list"
done
LC_ALL=C ls "$r"/var/lib/dpkg/*.stanza | LC_ALL=C sort | while read -r f; do cat "$f"; done \
  >"$r/var/lib/dpkg/status"
rm -f "$r"/var/lib/dpkg/*.stanza "$r/var/lib/dpkg/status.new"
EOF
chmod 755 "$WORK/status-hook.sh"
mkdir -p "$WORK/rootfs"
timeout 900 mmdebstrap --variant=extract --format=directory --include="$(
  IFS=,
  echo "${PACKAGES[*]}"
)" \
  --extract-hook="$WORK/status-hook.sh \"\$1\"" trixie "$WORK/rootfs" "$MIRROR" >"$WORK/mmdebstrap.log" 2>&1 ||
  { tail -n 30 "$WORK/mmdebstrap.log"; die "mmdebstrap failed (log: $WORK/mmdebstrap.log)"; }
R="$WORK/rootfs"
[[ -s $R/var/lib/dpkg/status ]] || die "mmdebstrap's hook wrote no dpkg status"

# What a runtime does not read, and what mmdebstrap and apt left: the
# container engine supplies /dev, /proc, /etc/hosts, /etc/resolv.conf and
# /etc/hostname.
find "$R/usr/share/doc" -mindepth 2 ! -name copyright ! -type d -delete
find "$R/usr/share/doc" -mindepth 1 -type d -empty -delete
rm -rf --one-file-system "$R"/usr/share/{man,info,locale,lintian} "$R/usr/lib/x86_64-linux-gnu/gconv" \
  "$R"/etc/apt "$R"/var/lib/apt "$R"/var/cache/apt "$R"/var/cache/ldconfig "$R"/var/log/* \
  "$R"/etc/dpkg/dpkg.cfg.d/99mmdebstrap "${R:?}"/dev/* "${R:?}"/proc/* "${R:?}"/sys/*
: >"$R/etc/resolv.conf"
: >"$R/etc/hostname"
printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n' >"$R/etc/hosts"
# The users: root, nobody and the worker's fixed uid (a StatefulSet's
# securityContext and a mounted secret's mode name it by number).
cat >"$R/etc/passwd" <<EOF
root:x:0:0:root:/root:/usr/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin
order-worker:x:$USER_ID:$USER_ID:order-worker:/nonexistent:/usr/sbin/nologin
EOF
cat >"$R/etc/group" <<EOF
root:x:0:
nogroup:x:65534:
order-worker:x:$USER_ID:
EOF
chmod 644 "$R/etc/passwd" "$R/etc/group"
mkdir -p "$R/tmp" "$R/etc/order-worker" "$R/usr/share/order-worker"
chmod 1777 "$R/tmp"
install -m 0755 "$BUILD_DIR/order-worker.stripped" "$R/usr/bin/order-worker"
install -m 0644 "$ROOT/config/order-worker.conf" "$R/usr/share/order-worker/order-worker.conf.example"
cp -r "$ROOT/sql" "$R/usr/share/order-worker/sql"
# The dynamic linker's cache, made from the root's own libraries; its
# auxiliary cache records inodes and change times, which differ per build.
ldconfig -r "$R"
rm -rf --one-file-system "$R/var/cache/ldconfig"
say "root: ${#PACKAGES[@]} packages and $(grep -c '^Package:' "$R/var/lib/dpkg/status") with their dependencies, $(du -sm "$R" | cut -f1) MiB, in $((SECONDS - t1)) s"
# What takes the space: each package's files as they are in the image.
say "space: $(/usr/bin/python3 - "$R" <<'EOF'
import glob, os, sys
r = sys.argv[1]
sizes = []
for lst in glob.glob(r + "/var/lib/dpkg/info/*.list"):
    total = 0
    for path in open(lst).read().splitlines():
        f = r + path
        if os.path.isfile(f) and not os.path.islink(f):
            total += os.path.getsize(f)
    sizes.append((total, os.path.basename(lst)[:-5]))
sizes.sort(reverse=True)
top = ", ".join("%s %.1f" % (n, b / 1048576) for b, n in sizes[:8])
rest = sum(b for b, _ in sizes[8:])
print("%s, %d more packages %.1f MiB; the worker %.1f MiB" % (top, len(sizes) - 8, rest / 1048576,
      os.path.getsize(r + "/usr/bin/order-worker") / 1048576))
EOF
)"

# --- the OCI layout -----------------------------------------------------------
O="$WORK/oci"
mkdir -p "$O/blobs/sha256"
det_tar() {  # DIR OUT: DIR's contents, the same bytes for the same files
  tar --create --file "$2" --directory "$1" --sort=name --format=posix \
    --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
    --mtime="@$SOURCE_DATE_EPOCH" --clamp-mtime --numeric-owner --owner=0 --group=0 .
}
blob() {  # FILE: moves FILE into the blobs, prints its digest and size
  local d s
  d="$(sha256sum "$1" | cut -d' ' -f1)"
  s="$(stat -c %s "$1")"
  mv "$1" "$O/blobs/sha256/$d"
  printf 'sha256:%s %s\n' "$d" "$s"
}
det_tar "$R" "$WORK/layer.tar"
LAYER_BYTES="$(stat -c %s "$WORK/layer.tar")"
DIFF_ID="sha256:$(sha256sum "$WORK/layer.tar" | cut -d' ' -f1)"
gzip -n -6 -c "$WORK/layer.tar" >"$WORK/layer.tar.gz"
rm -f "$WORK/layer.tar"
read -r LAYER LAYER_SIZE < <(blob "$WORK/layer.tar.gz")

ANNOTATIONS="$(jq -n -S -c --arg v "$VERSION" --arg r "$REVISION" --arg s "$SOURCE_URL" --arg c "$CREATED" '{
  "org.opencontainers.image.version": $v, "org.opencontainers.image.revision": $r,
  "org.opencontainers.image.source": $s, "org.opencontainers.image.created": $c,
  "org.opencontainers.image.title": "order-worker",
  "org.opencontainers.image.base.name": "debian:trixie (mmdebstrap --variant=extract)"}')"
jq -n -S -c --arg c "$CREATED" --arg d "$DIFF_ID" --arg u "$USER_ID:$USER_ID" --argjson a "$ANNOTATIONS" '{
  architecture: "amd64", os: "linux", created: $c,
  config: {User: $u, Entrypoint: ["/usr/bin/order-worker"], Cmd: ["run"], WorkingDir: "/",
    Env: ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
    StopSignal: "SIGTERM", Labels: $a},
  rootfs: {type: "layers", diff_ids: [$d]},
  history: [{created: $c, created_by: "scripts/image.sh"}]}' >"$WORK/config.json"
read -r CONFIG CONFIG_SIZE < <(blob "$WORK/config.json")
jq -n -S -c --arg c "$CONFIG" --argjson cs "$CONFIG_SIZE" --arg l "$LAYER" --argjson ls "$LAYER_SIZE" \
  --argjson a "$ANNOTATIONS" '{
  schemaVersion: 2, mediaType: "application/vnd.oci.image.manifest.v1+json",
  config: {mediaType: "application/vnd.oci.image.config.v1+json", digest: $c, size: $cs},
  layers: [{mediaType: "application/vnd.oci.image.layer.v1.tar+gzip", digest: $l, size: $ls}],
  annotations: $a}' >"$WORK/manifest.json"
read -r MANIFEST MANIFEST_SIZE < <(blob "$WORK/manifest.json")
jq -n -S -c --arg m "$MANIFEST" --argjson ms "$MANIFEST_SIZE" --arg v "$VERSION" '{
  schemaVersion: 2, mediaType: "application/vnd.oci.image.index.v1+json",
  manifests: [{mediaType: "application/vnd.oci.image.manifest.v1+json", digest: $m, size: $ms,
    annotations: {"org.opencontainers.image.ref.name": $v}}]}' >"$O/index.json"
printf '{"imageLayoutVersion":"1.0.0"}' >"$O/oci-layout"
ARCHIVE="$OUT/order-worker_${VERSION}.oci.tar"
det_tar "$O" "$ARCHIVE"
MIB="$(awk -v b="$LAYER_BYTES" 'BEGIN { printf "%.1f", b / 1048576 }')"
say "archive: $ARCHIVE ($((LAYER_SIZE / 1024)) KiB compressed, $MIB MiB unpacked)"
say "digest: $MANIFEST (config $CONFIG)"
printf '%s %s\n' "$MANIFEST" "$MIB" >"$OUT/order-worker_${VERSION}.digest"

if ((LOAD == 0)); then
  say "built in $((SECONDS - t0)) s (--no-load)"
  exit 0
fi
# --- into podman --------------------------------------------------------------
command -v podman >/dev/null 2>&1 || die "podman is missing: run scripts/deps.sh"
podman rmi -f "order-worker:$VERSION" >/dev/null 2>&1 || true
podman load -q -i "$ARCHIVE" >"$WORK/load.log" 2>&1 || { cat "$WORK/load.log"; die "podman load failed"; }
podman tag "${CONFIG#sha256:}" "order-worker:$VERSION"
podman untag "${CONFIG#sha256:}" "localhost/$VERSION:latest" >/dev/null 2>&1 || true
got="$(podman image inspect --format '{{.Digest}}' "order-worker:$VERSION")"
[[ $got == "$MANIFEST" ]] || die "podman holds order-worker:$VERSION with digest $got, not $MANIFEST"
# The versions as the image's own binary reports them.
ver="$(podman_run --rm "order-worker:$VERSION" --version)" || die "the image does not run: $ver"
rdk="$(sed -n 's/.*(librdkafka \([^,]*\),.*/\1/p' <<<"$ver")"
conc="$(sed -n 's/.*, \([0-9.]*\))$/\1/p' <<<"$ver")"
say "loaded into podman in $((SECONDS - t0)) s in all"
echo "image: order-worker:$VERSION $MANIFEST $MIB MiB, librdkafka ${rdk:-?}, Connector/C ${conc:-?}"
