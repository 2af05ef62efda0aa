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
         lib/systemd/system/order-worker@.service \
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
# systemd must not SIGKILL a stop that shutdown.timeout_ms still bounds:
# the unit's stop timeout stays above the shipped
# configuration's, with 5 s to spare for the process to exit.
stop_s=$(sed -nE 's/^TimeoutStopSec=([0-9]+)s$/\1/p' "$unit")
conf_ms=$(sed -nE 's/^shutdown\.timeout_ms *= *([0-9]+)$/\1/p' "$root/etc/order-worker/order-worker.conf")
[ -n "$conf_ms" ] || conf_ms=$("$root/bin/order-worker" config --help 2>/dev/null |
  sed -nE 's/.*shutdown\.timeout_ms.*default "?([0-9]+).*/\1/p' | head -n 1)
if [ -z "$stop_s" ] || [ -z "$conf_ms" ] || [ $((stop_s * 1000)) -lt $((conf_ms + 5000)) ]; then
  echo "FAIL: TimeoutStopSec=${stop_s:-?}s does not leave 5 s above shutdown.timeout_ms=${conf_ms:-?}"
  exit 1
fi
# The template: an instance of it passes verify, and its instance name is
# the replica id the worker reads, whatever the environment files say.
tmpl="$root/lib/systemd/system/order-worker@.service"
inst="$dest/order-worker@orders-a1.service"
sed "s|/usr/local/bin/order-worker|$root/bin/order-worker|" "$tmpl" >"$inst"
if ! out=$(systemd-analyze verify "$inst" 2>&1) || printf '%s\n' "$out" | grep -q 'order-worker@'; then
  echo "FAIL: systemd-analyze verify order-worker@orders-a1.service"; echo "$out"; exit 1
fi
exec_start=$(sed -n 's/^ExecStart=//p' "$tmpl" | sed "s|%i|orders-a1|g; s|/usr/local/bin/order-worker|$root/bin/order-worker|")
case $exec_start in
  "/usr/bin/env ORDER_WORKER_WORKER_REPLICA_ID=orders-a1 $root/bin/order-worker run --config /usr/local/etc/order-worker/order-worker.conf") ;;
  *) echo "FAIL: the template's ExecStart does not pass the instance name as the replica id: $exec_start"; exit 1 ;;
esac
conf="$root/etc/order-worker/order-worker.conf"
# shellcheck disable=SC2086  # the ExecStart's words, as systemd splits them
got=$(ORDER_WORKER_WORKER_REPLICA_ID=from-a-file $(printf '%s' "$exec_start" | sed "s| run --config .*| config --print --config $conf|") 2>&1 |
  sed -n 's/^worker\.replica_id *= *\([^ ]*\).*/\1/p')
[ "$got" = orders-a1 ] || { echo "FAIL: order-worker@orders-a1 runs with worker.replica_id '$got'"; exit 1; }
echo "OK: installed tree complete; systemd-analyze verify accepts order-worker.service and order-worker@orders-a1.service (replica id orders-a1)"
