#!/bin/sh
# The README's configuration table must be exactly `order-worker config
# --markdown`: the lines between "<!-- config-table:begin -->" and
# "<!-- config-table:end -->" (each alone on its line) are compared byte for
# byte. Skips (exit 77) only when the README has neither marker; a README
# with one marker, or with a marker twice, fails.
#
# usage: readme_config.sh ORDER_WORKER_BIN README
set -u
bin=$1
readme=$2
begin='<!-- config-table:begin -->'
end='<!-- config-table:end -->'

nb=0
ne=0
if [ -f "$readme" ]; then
  nb=$(grep -cxF -- "$begin" "$readme")
  ne=$(grep -cxF -- "$end" "$readme")
fi
if [ "$nb" -eq 0 ] && [ "$ne" -eq 0 ]; then
  echo "SKIP: README.md has no config table markers ($begin ... $end)"
  exit 77
fi
if [ "$nb" -ne 1 ] || [ "$ne" -ne 1 ]; then
  echo "FAIL: $readme must have each config table marker exactly once (begin: $nb, end: $ne)"
  exit 1
fi

tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
if ! "$bin" config --markdown >"$tmp/expected"; then
  echo "FAIL: $bin config --markdown failed"
  exit 1
fi
awk -v b="$begin" -v e="$end" '
  $0 == e { inside = 0; seen_end = 1 }
  inside { print }
  $0 == b { inside = 1; if (seen_end) bad = 1 }
  END { exit bad }' "$readme" >"$tmp/actual" || {
  echo "FAIL: $readme has the end marker before the begin marker"
  exit 1
}
if ! diff -u "$tmp/expected" "$tmp/actual"; then
  echo "FAIL: the configuration table in $readme is not the output of 'order-worker config --markdown';"
  echo "      replace the lines between the markers with that output (diff above: - expected, + README)"
  exit 1
fi
echo "OK: $readme's configuration table matches 'order-worker config --markdown'"
