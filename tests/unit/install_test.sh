#!/bin/sh
# cmake --install into a scratch directory: every file lands where the docs
# say, the installed binary runs, and systemd accepts the unit.
# Usage: install_test.sh BUILD_DIR
set -eu
build=$1
dest=$(mktemp -d)
trap 'rm -rf "$dest"' EXIT
DESTDIR="$dest" cmake --install "$build" --prefix /usr/local >"$dest.log" 2>&1 || { cat "$dest.log"; exit 1; }
root="$dest/usr/local"
for f in bin/order-worker share/order-worker/sql/001_schema.sql share/order-worker/sql/worker_user.sql \
         etc/order-worker/order-worker.conf lib/systemd/system/order-worker.service \
         share/order-worker/prometheus/order-worker.rules.yml share/order-worker/grafana/order-worker.json \
         share/man/man1/order-worker.1.gz \
         share/doc/order-worker/operations.md share/doc/order-worker/README.md; do
  [ -e "$root/$f" ] || { echo "FAIL: $f was not installed"; exit 1; }
done
"$root/bin/order-worker" --version | grep -q '^order-worker ' || { echo "FAIL: installed binary"; exit 1; }
unit="$root/lib/systemd/system/order-worker.service"
grep -q '^ExecStart=/usr/local/bin/order-worker run --config /usr/local/etc/order-worker/order-worker.conf$' "$unit" \
  || { echo "FAIL: ExecStart does not name the installed paths"; grep ExecStart "$unit"; exit 1; }
# systemd-analyze checks that ExecStart's binary exists: point it at the
# installed copy in the scratch tree, keep everything else as shipped.
check="$dest/order-worker.service"
sed "s|/usr/local/bin/order-worker|$root/bin/order-worker|" "$unit" >"$check"
if ! out=$(systemd-analyze verify "$check" 2>&1); then
  echo "FAIL: systemd-analyze verify"; echo "$out"; exit 1
fi
# It prints warnings without failing for some mistakes: treat any line about
# our unit file as a failure.
if printf '%s\n' "$out" | grep -q 'order-worker.service'; then
  echo "FAIL: systemd-analyze verify complained"; echo "$out"; exit 1
fi
echo "OK: installed tree complete; systemd-analyze verify accepts order-worker.service"
