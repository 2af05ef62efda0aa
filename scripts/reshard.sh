#!/usr/bin/env bash
# Doubles the shards of an order-worker deployment, N -> 2N
# (docs/operations.md, "Adding shards"). Run it with every worker stopped.
#
#   scripts/reshard.sh --config NEW.conf
#
# NEW.conf is the workers' configuration with mysql.shards listing the N
# current shards first, in their recorded order, then N new, empty
# databases (which must exist). Under bucket = FNV-1a(user_id) mod B, the
# shard of a bucket b goes from b mod N to b mod 2N: shard i keeps its
# buckets with b mod 2N = i and hands those with b mod 2N = i + N to the
# new shard i + N; nothing else moves. For each old shard the script
#   1. applies the schema to shard i + N (`order-worker migrate` of that
#      database alone: no map is recorded yet);
#   2. copies the moving users' requests and orders to it
#      (mariadb-dump --insert-ignore with a WHERE on sql/ow_bucket.sql's
#      function; ids and unique keys travel unchanged);
#   3. checks that every moving row arrived, then deletes them from shard i
#      in one transaction;
# and finally records the 2N map on every shard (`order-worker migrate
# --remap` with NEW.conf: migrate alone never changes a recorded map).
# Until that last step the shards still record N, so a worker started too
# early refuses NEW.conf with exit 2, and an
# interrupted run can simply be run again (copies are INSERT IGNORE,
# deletes only touch rows already copied).
#
# Credentials: mysql.user and mysql.password_file of NEW.conf, or the
# environment (ORDER_WORKER_MYSQL_USER, ORDER_WORKER_MYSQL_PASSWORD), as
# for `order-worker migrate`; a password written in the file itself is not
# read. The user needs CREATE, ALTER, CREATE ROUTINE, SELECT, INSERT and
# DELETE. Needs the mariadb and mariadb-dump clients.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
messages reshard
BIN="${OW_BIN:-$ROOT/build/order-worker}"

[[ ${1:-} == --config && -n ${2:-} ]] || { echo "usage: $0 --config NEW.conf" >&2; exit 2; }
CONF=$2
# The effective settings, as the worker reads them (file, then environment).
setting() { "$BIN" config --config "$CONF" --print | sed -n "s/^$1 = \(.*\)    # .*/\1/p"; }
LIST=$(setting mysql.shards)
B=$(setting mysql.shard_buckets)
USER_NAME=$(setting mysql.user)
PASSWORD=${ORDER_WORKER_MYSQL_PASSWORD:-}
PWFILE=$(setting mysql.password_file)
[[ -n $PWFILE && -z $PASSWORD ]] && PASSWORD=$(head -n1 "$PWFILE")
DEF_PORT=$(setting mysql.port)
DEF_DB=$(setting mysql.database)

IFS=',' read -r -a ENTRIES <<<"${LIST// /}"
TOTAL=${#ENTRIES[@]}
((TOTAL >= 2 && TOTAL % 2 == 0)) || die "mysql.shards must list 2N entries (N old, then N new), not $TOTAL"
N=$((TOTAL / 2))
HOSTS=() PORTS=() DBS=()
for e in "${ENTRIES[@]}"; do
  [[ $e == \[* ]] && die "IPv6 entries are not supported by this script: $e"
  hp=${e%%/*} db=$DEF_DB
  [[ $e == */* ]] && db=${e#*/}
  HOSTS+=("${hp%%:*}")
  if [[ $hp == *:* ]]; then PORTS+=("${hp#*:}"); else PORTS+=("$DEF_PORT"); fi
  DBS+=("$db")
done
sql() {  # SHARD ARGS...: the mariadb client on that shard's database
  MYSQL_PWD="$PASSWORD" mariadb --no-defaults --protocol=tcp -h"${HOSTS[$1]}" -P"${PORTS[$1]}" \
    -u"$USER_NAME" "${@:2}" "${DBS[$1]}"
}
recorded() { sql "$1" -N -e "SELECT CONCAT(bucket_count, ' ', shard_count, ' ', shard_index) FROM ow_shard_map" 2>/dev/null || true; }

# Where are we? Old shards must record (B, N, i), or all of them (B, 2N, i): done.
done_already=1
for ((i = 0; i < TOTAL; i++)); do [[ $(recorded "$i") == "$B $TOTAL $i" ]] || done_already=0; done
if ((done_already)); then say "every shard already records $B buckets over $TOTAL shards: nothing to do"; exit 0; fi
for ((i = 0; i < N; i++)); do
  r=$(recorded "$i")
  [[ $r == "$B $N $i" ]] || die "shard $i (${ENTRIES[$i]}) records \"${r:-no map}\", want \"$B $N $i\": the first $N entries must be the current shards in their order"
done
for ((j = N; j < TOTAL; j++)); do
  r=$(recorded "$j")
  [[ -z $r || $r == "$B $TOTAL $j" ]] || die "new shard $j (${ENTRIES[$j]}) already records \"$r\""
done
say "$N -> $TOTAL shards, $B buckets"

moving="MOD(ow_bucket(user_id, $B), $TOTAL)"
for ((i = 0; i < N; i++)); do
  j=$((i + N))
  ORDER_WORKER_MYSQL_SHARDS='' ORDER_WORKER_MYSQL_HOST="${HOSTS[$j]}" ORDER_WORKER_MYSQL_PORT="${PORTS[$j]}" \
    ORDER_WORKER_MYSQL_DATABASE="${DBS[$j]}" "$BIN" migrate --config "$CONF" >/dev/null
  sql "$i" <"$ROOT/sql/ow_bucket.sql"
  MYSQL_PWD="$PASSWORD" mariadb-dump --no-defaults --protocol=tcp -h"${HOSTS[$i]}" -P"${PORTS[$i]}" \
    -u"$USER_NAME" --single-transaction --no-create-info --insert-ignore --skip-triggers \
    --where="$moving = $j" "${DBS[$i]}" idempotency_requests orders | sql "$j"
  # Shard j receives rows from shard i alone: both sets must be the same
  # (count and XOR of the ids) before anything is deleted.
  for t in idempotency_requests orders; do
    want=$(sql "$i" -N -e "SELECT CONCAT(COUNT(*), ' ', COALESCE(BIT_XOR(id), 0)) FROM $t WHERE $moving = $j")
    got=$(sql "$j" -N -e "SELECT CONCAT(COUNT(*), ' ', COALESCE(BIT_XOR(id), 0)) FROM $t")
    [[ $want == "0 0" || $want == "$got" ]] ||
      die "shard $j holds \"$got\" (rows, id xor) of $t where shard $i moves \"$want\"; nothing was deleted"
  done
  sql "$i" -e "START TRANSACTION;
               DELETE FROM orders WHERE $moving = $j;
               DELETE FROM idempotency_requests WHERE $moving = $j;
               COMMIT;
               DROP FUNCTION ow_bucket;"
  say "shard $i -> $j: $(sql "$j" -N -e "SELECT COUNT(*) FROM idempotency_requests") requests, $(sql "$j" -N -e "SELECT COUNT(*) FROM orders") orders"
done
# --remap: migrate replaces a recorded map only when asked, and only shard
# i of N with shard i of 2N.
ORDER_WORKER_MYSQL_SHARDS="$LIST" "$BIN" migrate --config "$CONF" --remap | grep 'map recorded' | sed 's/^/reshard: /'
say "done: start the workers with mysql.shards = $LIST"
