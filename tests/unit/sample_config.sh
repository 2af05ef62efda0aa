#!/bin/sh
# Every setting in the sample configuration (config/order-worker.conf) is
# the default that `order-worker config --markdown` prints, so that a user
# who copies it gets what the documentation describes. Its
# inflight.max_bytes stayed at 16 MiB for a day after the default became
# 14 MiB (867b49e). A setting may differ only if it is listed in ALLOWED,
# with its reason.
#
# usage: sample_config.sh ORDER_WORKER_BIN SAMPLE_CONF
set -u
bin=$1
conf=$2
# api.token_file: the sample names where the package puts the token.
ALLOWED="api.token_file"

defaults=$(mktemp)
trap 'rm -f "$defaults"' EXIT
# | `key` | type | `default` | ...  ->  key<TAB>default ("(empty)" is "")
"$bin" config --markdown | awk -F'|' 'NR > 2 {
    k = $2; d = $4
    gsub(/[ `]/, "", k); gsub(/^ +| +$/, "", d); gsub(/`/, "", d)
    if (d == "(empty)") d = ""
    print k "\t" d
}' >"$defaults"
if [ ! -s "$defaults" ]; then
  echo "FAIL: '$bin config --markdown' printed no table"
  exit 1
fi

fail=0
checked=0
while IFS= read -r line; do
  case $line in '' | '#'*) continue ;; esac
  key=$(printf '%s\n' "$line" | sed -E 's/^ *([^ =]+) *=.*/\1/')
  value=$(printf '%s\n' "$line" | sed -E 's/^[^=]*= *//; s/ *$//')
  checked=$((checked + 1))
  case " $ALLOWED " in *" $key "*) continue ;; esac
  if ! awk -F'\t' -v k="$key" '$1 == k { found = 1 } END { exit !found }' "$defaults"; then
    echo "FAIL: $conf sets '$key', which is not a configuration key"
    fail=1
    continue
  fi
  want=$(awk -F'\t' -v k="$key" '$1 == k { print $2 }' "$defaults")
  if [ "$value" != "$want" ]; then
    echo "FAIL: $conf: $key = '$value', but its default is '$want'"
    fail=1
  fi
done <"$conf"
if [ "$checked" -eq 0 ]; then
  echo "FAIL: $conf holds no settings"
  exit 1
fi
[ "$fail" -eq 0 ] || exit 1
echo "OK: the $checked settings of $conf are the defaults (except $ALLOWED)"
