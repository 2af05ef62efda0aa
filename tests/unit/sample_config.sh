#!/bin/sh
# Every setting in the sample configuration (config/order-worker.conf) is
# its default, so that a user who copies it gets what the documentation
# describes. Its inflight.max_bytes stayed at 16 MiB for a day after the
# default became 14 MiB (867b49e). Both sides come from the worker's own
# loader (`order-worker config --print`), with and without the file, in an
# environment without ORDER_WORKER_* variables; a key it does not know
# fails the load. A setting may differ only if it is listed in ALLOWED,
# with its reason.
#
# usage: sample_config.sh ORDER_WORKER_BIN SAMPLE_CONF
set -u
bin=$1
conf=$2
# api.token_file: the sample names where the package puts the token.
ALLOWED="api.token_file"

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

# Writes $dir/$1: "key = value" lines without their "# source" and without
# the allowed keys; fails when the loader refuses the configuration.
effective() {
  out=$1
  shift
  env -i PATH="$PATH" "$bin" config --print "$@" >"$dir/raw" || return 1
  sed -E 's/    # .*$//' "$dir/raw" |
    awk -v allowed=" $ALLOWED " 'index(allowed, " " $1 " ") == 0' >"$dir/$out"
}

if ! effective defaults || ! effective sample --config "$conf"; then
  echo "FAIL: order-worker config --print could not load $conf (above)"
  exit 1
fi
if [ ! -s "$dir/defaults" ] || ! grep -q '    # file (' "$dir/raw"; then
  echo "FAIL: order-worker config --print printed nothing, or nothing from $conf"
  exit 1
fi
if ! diff -u "$dir/defaults" "$dir/sample" | sed -n '3,$p' | grep '^[-+]'; then
  echo "OK: every setting of $conf is its default (except $ALLOWED)"
  exit 0
fi
echo "FAIL: the settings above ('+') in $conf differ from their defaults ('-')"
exit 1
