#!/usr/bin/env bash
# Installs what the build, the tests and the demo need. Idempotent: a second
# run does nothing but print what it skipped.
#
#   (a) Debian packages (apt-get), only those missing;
#   (b) the Apache Kafka broker jars, fetched with Maven into
#       <repo>/.cache/kafka/<version>/jars (used by scripts/services.sh);
#   (c) the AsyncAPI parser, `npm ci` in tools/contract (pinned by its
#       package-lock.json; used by the contract tier);
#   (d) the Maven artifacts of examples/java (one online build; the e2e
#       tier then builds it offline).
#
# Environment:
#   OW_DEPS_SKIP_APT=1        skip step (a)
#   OW_DEPS_SKIP_KAFKA=1      skip step (b)
#   OW_DEPS_SKIP_NPM=1        skip step (c)
#   OW_DEPS_SKIP_EXAMPLES=1   skip step (d)
#   OW_DEPS_KAFKA_OPTIONAL=1  if the Maven fetch fails, warn and exit 0
#                             (services.sh then falls back to the mock broker)
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
messages deps

KAFKA_VERSION=4.1.1

PACKAGES=(
  build-essential cmake ninja-build pkg-config
  librdkafka-dev default-libmysqlclient-dev libjansson-dev libssl-dev
  libcmocka-dev libmicrohttpd-dev zlib1g-dev
  mariadb-server mariadb-client galera-4 rsync iproute2 iptables
  clang clang-format libclang-rt-14-dev valgrind shellcheck
  gnuplot-nox curl kcat jq openssl apache2-utils
  openjdk-17-jre-headless openjdk-17-jdk-headless maven
  systemd
  prometheus dpkg-dev lintian debootstrap mmdebstrap podman runc uidmap
  nodejs python3-jsonschema python3-yaml python3-confluent-kafka
)

# Run a command as root (directly, or through sudo when we are not root).
as_root() {
  if [[ ${EUID:-$(id -u)} -eq 0 ]]; then
    "$@"
  elif command -v sudo >/dev/null 2>&1; then
    sudo "$@"
  else
    die "need root (or sudo) to run: $*"
  fi
}

pkg_installed() {
  local status
  status="$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null || true)"
  [[ $status == "install ok installed" ]]
}

install_packages() {
  if [[ ${OW_DEPS_SKIP_APT:-0} == 1 ]]; then
    say "apt: skipped (OW_DEPS_SKIP_APT=1)"
    return 0
  fi
  command -v dpkg-query >/dev/null 2>&1 || die "dpkg-query not found: this script expects Debian/Ubuntu"

  local missing=() p
  for p in "${PACKAGES[@]}"; do
    pkg_installed "$p" || missing+=("$p")
  done

  if [[ ${#missing[@]} -eq 0 ]]; then
    say "apt: all ${#PACKAGES[@]} packages already installed"
    return 0
  fi

  say "apt: installing ${#missing[@]} missing package(s): ${missing[*]}"
  # Another apt run (a second checkout's deps.sh) may hold the dpkg lock:
  # wait for it rather than fail.
  as_root apt-get -o DPkg::Lock::Timeout=600 update -q >/dev/null \
    || die "apt-get update failed"
  as_root env DEBIAN_FRONTEND=noninteractive \
    apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends "${missing[@]}" \
    || die "apt-get install failed for: ${missing[*]}"

  for p in "${missing[@]}"; do
    pkg_installed "$p" || die "package $p is still not installed after apt-get install"
  done
  say "apt: installed ${missing[*]}"
  [[ " ${missing[*]} " == *" prometheus "* ]] && stop_packaged_prometheus
  return 0
}

# Debian's prometheus package starts its own server on :9090 at install time
# (through its init script when systemd is not PID 1). The tests run their own
# server on a loopback port, so stop and disable the packaged one.
stop_packaged_prometheus() {
  if [[ -d /run/systemd/system ]]; then
    as_root systemctl disable --now prometheus.service >/dev/null 2>&1 || true
  elif [[ -x /etc/init.d/prometheus ]]; then
    as_root /etc/init.d/prometheus stop >/dev/null 2>&1 || true
    as_root update-rc.d prometheus disable >/dev/null 2>&1 || true
    # systemctl disable edits the wants/ links without a running systemd,
    # so a later boot under systemd does not start it either.
    as_root systemctl disable prometheus.service >/dev/null 2>&1 || true
  fi
  say "apt: the packaged prometheus service is stopped and disabled (tests start their own)"
}

fetch_kafka_jars() {
  local cache_parent="$ROOT/.cache/kafka"
  local cache="$cache_parent/$KAFKA_VERSION"
  local pom="$ROOT/scripts/kafka/pom.xml"

  if [[ ${OW_DEPS_SKIP_KAFKA:-0} == 1 ]]; then
    say "kafka: jar fetch skipped (OW_DEPS_SKIP_KAFKA=1)"
    return 0
  fi
  if [[ -f $cache/.complete ]]; then
    say "kafka: jars for Apache Kafka $KAFKA_VERSION already cached in ${cache#"$ROOT"/}/jars"
    return 0
  fi

  local tool
  for tool in java mvn; do
    if ! command -v "$tool" >/dev/null 2>&1; then
      say "kafka: '$tool' not found: Apache Kafka jars unavailable; services.sh will use the librdkafka mock broker"
      exit 0
    fi
  done
  [[ -f $pom ]] || die "missing $pom"

  mkdir -p "$cache_parent"
  # Leftovers of runs killed before their EXIT trap could run.
  find "$cache_parent" -maxdepth 1 -name ".tmp-*" -mmin +60 -exec rm -rf {} + 2>/dev/null || true
  # Download into a private temp dir next to the cache, then rename it into
  # place, so an interrupted run never leaves a half-filled cache behind.
  TMP_CACHE="$(mktemp -d "$cache_parent/.tmp-$KAFKA_VERSION.XXXXXX")"
  on_exit 'rm -rf "${TMP_CACHE:-}"'
  trap 'exit 130' INT
  trap 'exit 143' TERM HUP
  chmod 755 "$TMP_CACHE"

  say "kafka: fetching Apache Kafka $KAFKA_VERSION jars with Maven (this takes a while the first time)"
  local t0=$SECONDS mvn_log="$TMP_CACHE/mvn.log"
  if ! mvn -q -B -Dstyle.color=never -f "$pom" dependency:copy-dependencies \
        -DincludeScope=runtime -DoutputDirectory="$TMP_CACHE/jars" >"$mvn_log" 2>&1; then
    tail -n 30 "$mvn_log" >&2 || true
    if [[ ${OW_DEPS_KAFKA_OPTIONAL:-0} == 1 ]]; then
      say "kafka: WARNING: Maven fetch failed; Apache Kafka jars unavailable; services.sh will use the librdkafka mock broker"
      exit 0
    fi
    die "Maven could not fetch the Kafka jars (log above); set OW_DEPS_KAFKA_OPTIONAL=1 to fall back to the mock broker"
  fi

  local n
  n="$(find "$TMP_CACHE/jars" -maxdepth 1 -name '*.jar' | wc -l)"
  [[ -f $TMP_CACHE/jars/kafka_2.13-$KAFKA_VERSION.jar ]] \
    || die "Maven succeeded but kafka_2.13-$KAFKA_VERSION.jar is not among the $n fetched jars"

  rm -f "$mvn_log"
  date -u +%Y-%m-%dT%H:%M:%SZ >"$TMP_CACHE/.complete"
  # A previous interrupted run cannot have left $cache (it only ever appears
  # by rename), but a hand-made one might exist without the marker.
  rm -rf "$cache"
  mv "$TMP_CACHE" "$cache"
  TMP_CACHE=""
  say "kafka: cached $n jars in ${cache#"$ROOT"/}/jars ($((SECONDS - t0)) s)"
}

# The AsyncAPI parser for the contract tier, pinned by
# tools/contract/package-lock.json; node_modules is rebuilt only when the
# lock file changed.
install_npm_tools() {
  local dir="$ROOT/tools/contract"
  if [[ ${OW_DEPS_SKIP_NPM:-0} == 1 ]]; then
    say "npm: skipped (OW_DEPS_SKIP_NPM=1)"
    return 0
  fi
  if cmp -s "$dir/package-lock.json" "$dir/node_modules/.ow-lock" 2>/dev/null; then
    say "npm: tools/contract already installed"
    return 0
  fi
  # Debian's nodejs comes without npm (NodeSource's includes it).
  if ! command -v npm >/dev/null 2>&1; then
    as_root env DEBIAN_FRONTEND=noninteractive \
      apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends npm \
      || die "apt-get install npm failed"
  fi
  local t0=$SECONDS
  (cd "$dir" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >/dev/null) \
    || die "npm ci failed in tools/contract"
  cp "$dir/package-lock.json" "$dir/node_modules/.ow-lock"
  say "npm: installed tools/contract ($((SECONDS - t0)) s)"
}

# The Java client example's dependencies and plugins, into ~/.m2.
# Redone only when its pom.xml changed (the stamp holds the pom's hash).
fetch_example_artifacts() {
  local pom="$ROOT/examples/java/pom.xml" stamp="$ROOT/.cache/examples-java.stamp" sum
  if [[ ${OW_DEPS_SKIP_EXAMPLES:-0} == 1 ]]; then
    say "examples: skipped (OW_DEPS_SKIP_EXAMPLES=1)"
    return 0
  fi
  sum="$(sha256sum "$pom" | cut -d' ' -f1)"
  if [[ -f $stamp && $(cat "$stamp") == "$sum" ]]; then
    say "examples: Maven artifacts of examples/java already fetched"
    return 0
  fi
  command -v mvn >/dev/null 2>&1 || die "mvn not found (package maven)"
  local t0=$SECONDS tmp
  tmp="$(mktemp -d)"
  if ! mvn -q -B -Dstyle.color=never -f "$pom" -DbuildDirectory="$tmp" compile \
        dependency:build-classpath -Dmdep.outputFile="$tmp/classpath.txt" >"$tmp/mvn.log" 2>&1; then
    tail -n 30 "$tmp/mvn.log" >&2 || true
    rm -rf "$tmp"
    die "Maven could not build examples/java (log above)"
  fi
  rm -rf "$tmp"
  mkdir -p "$(dirname "$stamp")"
  printf '%s\n' "$sum" >"$stamp"
  say "examples: fetched the Maven artifacts of examples/java ($((SECONDS - t0)) s)"
}

install_packages
install_npm_tools
fetch_kafka_jars
fetch_example_artifacts
