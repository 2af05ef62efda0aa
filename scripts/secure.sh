#!/usr/bin/env bash
# The `secure` test tier: the built worker against a MariaDB that
# accepts only TLS and an Apache Kafka broker that has only SSL and SASL_SSL
# listeners and ACLs. Run by scripts/test.sh (OW_TEST_TIERS=secure), or alone
# after a build:  scripts/secure.sh
#
#  1. throwaway CA and certificates (scripts/secure-certs.sh), own services
#     (scripts/services.sh with OW_SERVICES_TLS_DIR) in $OW_SECURE_RUN_DIR;
#  2. the worker's database user REQUIRE X509; the worker's two Kafka
#     principals (User:ow_worker over SASL_SSL, User:CN=ow_worker over mutual
#     TLS) get exactly the ACLs of docs/operations.md, nothing on the cluster;
#  3. two replicas (one per principal) with mysql.ssl_mode=verify_identity and
#     a client certificate decide a scripted mix: 201, replay, both 409s, 400;
#  4. negative cases, each with its exit status and its one log line asserted,
#     and afterwards no committed offset for its group and no row written.
# Everything it starts is stopped on exit. Prints "secure: ... passed" last.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
messages secure --die FAILED 1
RUN="${OW_SECURE_RUN_DIR:-$ROOT/.run/secure}"
T0=$SECONDS
PASSED=0

export OW_RUN_DIR="$RUN"
# Ports of the other tiers' services (exported by scripts/test.sh) must not
# pin ours.
unset OW_MYSQL_PORT OW_KAFKA_PORT OW_KAFKA_CONTROLLER_PORT
PIDS=()
on_exit 'services stop all >/dev/null 2>&1'
on_exit 'kill_each TERM "${PIDS[@]}"'

[[ -x $BIN && -x $KIT ]] || die "build first ($BIN, $KIT)"
rm -rf "$RUN"
mkdir -p "$RUN/logs"
C="$RUN/certs"
"$ROOT/scripts/secure-certs.sh" "$C"
SASL_PW="$(secret sasl)"
DB_PW="$(secret db)"
# MariaDB listens on 127.0.0.2 too, for the case of a certificate that does
# not name the host: MariaDB Connector/C 3.4 (Debian 13) does not compare the
# certificate with the host name when that name is 127.0.0.1.
OW_SERVICES_TLS_DIR="$C" OW_KAFKA_SASL_USERS="ow_worker=$SASL_PW" \
  OW_MARIADB_ARGS="--bind-address=127.0.0.1,127.0.0.2" \
  services start all >"$RUN/logs/services.log" 2>&1 \
  || { cat "$RUN/logs/services.log"; die "services did not start"; }
services_env "$RUN"
[[ $OW_BROKER_KIND == kafka ]] || die "the secure tier needs Apache Kafka (got $OW_BROKER_KIND)"
say "services up in $((SECONDS - T0)) s: MariaDB $OW_MARIADB_VERSION, $OW_KAFKA_VERSION"

# ------------------------------------------------------------- database ---
ROOT_SQL=(mariadb --no-defaults --protocol=tcp -h127.0.0.1 -P"$OW_MYSQL_PORT" -uroot
  --ssl-ca="$C/ca.crt" -N -B)  # no host check: it also runs while the server shows another host's certificate
sql() { "${ROOT_SQL[@]}" -e "$1"; }
sql "CREATE DATABASE orders"
ORDER_WORKER_MYSQL_PORT=$OW_MYSQL_PORT ORDER_WORKER_MYSQL_USER=root \
  ORDER_WORKER_MYSQL_SSL_MODE=verify_identity ORDER_WORKER_MYSQL_SSL_CA="$C/ca.crt" \
  "$BIN" migrate >"$RUN/logs/migrate.log" 2>&1 || { cat "$RUN/logs/migrate.log"; die "migrate"; }
"${ROOT_SQL[@]}" -e "SET @worker_user='ow_worker', @worker_host='%',
  @worker_password='$DB_PW', @worker_database='orders', @worker_require='X509';
  SOURCE $ROOT/sql/worker_user.sql;"
[[ "$(sql "SELECT ssl_type FROM mysql.user WHERE user = 'ow_worker'")" == X509 ]] \
  || die "ow_worker is not REQUIRE X509"
[[ "$(sql "SELECT @@require_secure_transport")" == 1 ]] || die "require_secure_transport is off"

# ---------------------------------------------------------------- kafka ---
# ow-kit acts as the broker's own principal (a super user) over mutual TLS.
export OW_KIT_KAFKA_CONF="security.protocol=ssl,ssl.ca.location=$C/ca.crt,ssl.certificate.location=$C/broker.crt,ssl.key.location=$C/broker.key"
KB=$OW_KAFKA_BOOTSTRAP
IN=order-batches RES=order-batch-results DLQ=order-batches.dlq
# The negative cases read their own input topic, holding only messages that
# need the database, so that any committed offset would be a message
# committed unanswered.
NEG_IN=order-batches.negative
for t in $IN $RES $DLQ; do "$KIT" create-topic "$KB" "$t" 4 >/dev/null; done
"$KIT" create-topic "$KB" $NEG_IN 1 >/dev/null
CASE_IN=$IN

# The least privilege (docs/operations.md, "Deploying securely"). Read and
# Write imply Describe; no IdempotentWrite: Kafka 4.1 lets a principal with
# Write on any topic initialise an idempotent producer (KIP-679).
ACLS=("topic INPUT read" "group GROUP read" "topic $RES write" "topic $DLQ write")
acl() {  # add|delete PRINCIPAL GROUP "TYPE NAME OP"
  local what=${4/GROUP/$3}
  what=${what/INPUT/$CASE_IN}
  # shellcheck disable=SC2086
  "$KIT" acl "$1" "$KB" "$2" $what >/dev/null || die "ow-kit acl $1 $2 $what"
}
grant_all() {  # PRINCIPAL GROUP
  local a
  for a in "${ACLS[@]}"; do acl add "$1" "$2" "$a"; done
}

# --------------------------------------------------------- worker config ---
base_conf() {  # GROUP
  cat <<EOF
kafka.group.id = $1
topic.input = $CASE_IN
topic.results = $RES
topic.dlq = $DLQ
mysql.host = 127.0.0.1
mysql.port = $OW_MYSQL_PORT
mysql.user = ow_worker
mysql.password = $DB_PW
mysql.database = orders
mysql.ssl_mode = verify_identity
mysql.ssl_ca = $C/ca.crt
mysql.ssl_cert = $C/client.crt
mysql.ssl_key = $C/client.key
worker.lanes = 2
commit.interval_ms = 200
shutdown.timeout_ms = 5000
log.level = info
kafka.ssl.ca.location = $C/ca.crt
kafka.ssl.endpoint.identification.algorithm = https
EOF
}
# librdkafka before 2.6.1 sends a SCRAM client-final nonce that Kafka 4.x
# rejects ("invalid credentials" for any password; librdkafka#4895). Debian
# 12 ships 2.0.2: there the SASL_SSL replica uses PLAIN, and a case below
# shows that SCRAM with the right password is refused, so that this tier
# notices (and switches to SCRAM) when the library is upgraded. Debian 13
# ships 2.8.0: there the replica logs in with SCRAM-SHA-512. The version is
# the one the binary runs with, as it reports it.
RDK_VERSION="$("$BIN" --version | sed -n 's/.*(librdkafka \([0-9][0-9.]*\)[,)].*/\1/p')"
[[ -n $RDK_VERSION ]] || die "$BIN --version does not name its librdkafka: $("$BIN" --version)"
if [[ "$(printf '%s\n' 2.6.1 "$RDK_VERSION" | sort -V | head -n 1)" == 2.6.1 ]]; then
  MECH=SCRAM-SHA-512
else
  MECH=PLAIN
fi
sasl_conf() {  # GROUP [MECHANISM] [PASSWORD]
  base_conf "$1"
  cat <<EOF
kafka.bootstrap.servers = $OW_KAFKA_SASL_BOOTSTRAP
kafka.security.protocol = SASL_SSL
kafka.sasl.mechanisms = ${2:-$MECH}
kafka.sasl.username = ow_worker
kafka.sasl.password = ${3:-$SASL_PW}
EOF
}
mtls_conf() {  # GROUP
  base_conf "$1"
  cat <<EOF
kafka.bootstrap.servers = $KB
kafka.security.protocol = SSL
kafka.ssl.certificate.location = $C/client.crt
kafka.ssl.key.location = $C/client.key
EOF
}

produce() {  # KEY JSON [TOPIC]
  printf '%s' "$2" | "$KIT" produce "$KB" "${3:-$IN}" --key "$1" >/dev/null || die "produce $1"
}
rows() { sql "SELECT COUNT(*) FROM orders.idempotency_requests WHERE user_id = $1"; }
# Committed offsets of GROUP on the input topic: "none" when nothing was committed.
committed() {
  "$KIT" lag "$KB" "$1" "$CASE_IN" 2>/dev/null | awk '/^partition/ && $4 >= 0 {c++} END {print c ? "some" : "none"}'
}

# ------------------------------------------------------------- positive ---
say "two replicas: SASL_SSL $MECH (User:ow_worker, librdkafka $RDK_VERSION) and mutual TLS (User:CN=ow_worker)"
GROUP=ow-secure
grant_all User:ow_worker $GROUP
grant_all User:CN=ow_worker $GROUP
# librdkafka's security debugging makes it log the mechanism it logs in with
# ("Authenticated as ow_worker using SCRAM-SHA-512"), which is asserted below.
sasl_conf $GROUP | sed 's/^log.level = info$/log.level = debug/' >"$RUN/a.conf"
echo "kafka.debug = security" >>"$RUN/a.conf"
mtls_conf $GROUP >"$RUN/b.conf"
"$BIN" config --print --config "$RUN/a.conf" >"$RUN/logs/config-print.txt"
grep -q "^kafka.sasl.password = (redacted)" "$RUN/logs/config-print.txt" || die "sasl.password not redacted"
if grep -qF "$SASL_PW" "$RUN/logs/config-print.txt"; then die "config --print shows the SASL password"; fi
grep -q "^mysql.ssl_mode = verify_identity" "$RUN/logs/config-print.txt" || die "config --print lacks mysql.ssl_mode"

"$BIN" run --config "$RUN/a.conf" 2>"$RUN/logs/replica-a.log" & PIDS+=($!)
"$BIN" run --config "$RUN/b.conf" 2>"$RUN/logs/replica-b.log" & PIDS+=($!)

ORDER='{"user_id":7,"orders":[{"external_order_no":"S-1","amount":"19.90","product_id":3}]}'
OTHER='{"user_id":7,"orders":[{"external_order_no":"S-1","amount":"25.00","product_id":3}]}'
wait_results() {  # N: keys of different partitions are decided in any order
  local deadline=$((SECONDS + 90))
  until [[ "$("$KIT" read "$KB" $RES 2>/dev/null | wc -l)" -ge $1 ]]; do
    ((SECONDS < deadline)) || die "fewer than $1 results after 90 s (logs in $RUN/logs)"
    sleep 0.5
  done
}
produce sec-new "$ORDER"
wait_results 1
produce sec-new "$ORDER"                   # a retry: replayed
produce sec-new "$OTHER"                   # the key, reused with another body
produce sec-clash "$OTHER"                 # the order, again with another amount
printf 'not json' | "$KIT" produce "$KB" "$IN" --key sec-bad >/dev/null
produce 'sec key!' "$ORDER"                # a malformed key: a security event
wait_results 6
"$KIT" read "$KB" $RES >"$RUN/logs/results.jsonl"
# key, status, code, replayed: per key in the order consumed (stable sort).
jq -r '[.key, (.value | fromjson | .status | tostring), (.value | fromjson | .code),
        .headers.replayed] | @tsv' "$RUN/logs/results.jsonl" \
  | LC_ALL=C sort -s -t $'\t' -k1,1 >"$RUN/logs/outcomes.tsv"
printf '%s\t%s\t%s\t%s\n' \
  'sec key!' 400 INVALID_REQUEST false \
  sec-bad 400 INVALID_REQUEST false \
  sec-clash 409 ORDER_ALREADY_EXISTS false \
  sec-new 201 CREATED false \
  sec-new 201 CREATED true \
  sec-new 409 IDEMPOTENCY_KEY_REUSED false >"$RUN/logs/outcomes.want"
diff "$RUN/logs/outcomes.want" "$RUN/logs/outcomes.tsv" >&2 || die "results are not the expected outcomes"
# The dead-letter copies are acknowledged independently of the results.
deadline=$((SECONDS + 30))
until [[ "$("$KIT" read "$KB" $DLQ 2>/dev/null | wc -l)" -ge 2 ]]; do
  ((SECONDS < deadline)) || die "the invalid messages are not in the DLQ"
  sleep 0.5
done
[[ "$("$KIT" read "$KB" $DLQ 2>/dev/null | wc -l)" -eq 2 ]] || die "more than 2 messages in the DLQ"
deadline=$((SECONDS + 30))
until "$KIT" lag "$KB" $GROUP $IN >/dev/null 2>&1; do
  ((SECONDS < deadline)) || die "group $GROUP did not commit to the end"
  sleep 1
done
for p in "${PIDS[@]}"; do kill -TERM "$p"; done
for p in "${PIDS[@]}"; do wait "$p" || die "a replica exited non-zero after SIGTERM"; done
PIDS=()
[[ "$(rows 7)" == 2 ]] || die "expected 2 request rows for user 7, got $(rows 7)"
for r in a b; do
  grep -q '"event":"db_session".*"ssl_mode":"verify_identity","tls":"TLSv1' "$RUN/logs/replica-$r.log" \
    || die "replica $r: no TLS db_session line"
  if grep -qF -e "$SASL_PW" -e "$DB_PW" "$RUN/logs/replica-$r.log"; then die "replica $r logged a secret"; fi
done
cat "$RUN/logs/replica-a.log" "$RUN/logs/replica-b.log" >"$RUN/logs/replicas.log"
# Security events: user, masked key, both digests' first 8 hex digits.
grep '"event":"idempotency_key_reused"' "$RUN/logs/replicas.log" \
  | grep -qE '"level":"warn".*"user_id":7,"key":"[^"]{0,4}…#[0-9a-f]{8}","digest":"[0-9a-f]{8}","stored_digest":"[0-9a-f]{8}"' \
  || die "no idempotency_key_reused security event"
grep '"event":"idempotency_key_rejected"' "$RUN/logs/replicas.log" | grep -q '"level":"warn".*"user_id":7' \
  || die "no idempotency_key_rejected security event"
if grep -q 'sec key!\|"sec-new"\|"sec-clash"' "$RUN/logs/replicas.log"; then die "a key was logged unmasked"; fi
DB_TLS="$(grep -ho '"tls":"[^"]*","cipher":"[^"]*"' "$RUN/logs/replica-a.log" | head -n 1)"
# librdkafka logs a SCRAM login when it succeeds; of PLAIN only the token it
# sends (the results above show that the broker accepted it).
SASL_LOGIN_LINE="Authenticated as ow_worker using $MECH"
[[ $MECH == PLAIN ]] && SASL_LOGIN_LINE="Sending SASL PLAIN (builtin) authentication token"
SASL_LOGIN="$(grep -m 1 -o "${SASL_LOGIN_LINE}[^\"]*" "$RUN/logs/replica-a.log")" \
  || die "replica a: librdkafka did not log its $MECH login (log: $RUN/logs/replica-a.log)"
say "  SASL_SSL replica: $SASL_LOGIN (librdkafka $RDK_VERSION)"
say "  ok: 201, replay, 409 IDEMPOTENCY_KEY_REUSED, 409 ORDER_ALREADY_EXISTS, 400 + DLQ; offsets committed; security events logged"
say "  database session: $DB_TLS"
PASSED=$((PASSED + 1))

# ------------------------------------------------------------- negative ---
# Each case: a fresh group with every ACL (unless the case removes one), one
# pending message of user 9, the worker with CONF; expects exit status 1 and
# exactly one line of EVENT matching PATTERN; then no offset committed for the
# group and no row for user 9.
N=0
negative() {  # NAME CONF EVENT PATTERN
  local name=$1 conf=$2 event=$3 pattern=$4 log="$RUN/logs/neg-$1.log" rc=0 n group
  group=$(sed -n 's/^kafka.group.id = //p' "$conf")
  timeout -s TERM 60 "$BIN" run --config "$conf" 2>"$log" || rc=$?
  n=$(grep -c "\"event\":\"$event\"" "$log" || true)
  [[ $rc == 1 ]] || die "$name: exit status $rc, expected 1 (log: $log)"
  [[ $n == 1 ]] || die "$name: $n $event lines, expected 1 (log: $log)"
  grep "\"event\":\"$event\"" "$log" | grep -qE "$pattern" || die "$name: $event line does not match /$pattern/ (log: $log)"
  [[ "$(committed "$group")" == none ]] || die "$name: group $group committed an offset"
  [[ "$(rows 9)" == 0 ]] || die "$name: a row was written for user 9"
  if grep -qF -e "$SASL_PW" -e "$DB_PW" "$log"; then die "$name: a secret was logged"; fi
  say "  ok: $name: exit $rc, $(grep "\"event\":\"$event\"" "$log" | sed 's/^{"ts":"[^"]*",//')"
  PASSED=$((PASSED + 1))
}
new_case() {  # -> GROUP with every ACL for both principals, a fresh message pending
  N=$((N + 1))
  GROUP="ow-neg-$N"
  grant_all User:ow_worker "$GROUP"
  grant_all User:CN=ow_worker "$GROUP"
}
CASE_IN=$NEG_IN
produce neg-pending '{"user_id":9,"orders":[{"external_order_no":"N-1","amount":"1.00"}]}' $NEG_IN

say "negative cases"
new_case; mtls_conf $GROUP | sed "s#^mysql.ssl_ca = .*#mysql.ssl_ca = $C/other-ca.crt#" >"$RUN/n.conf"
negative db-wrong-ca "$RUN/n.conf" db_tls_failed '"ssl_mode":"verify_identity".*self-signed certificate in certificate chain'

new_case; mtls_conf $GROUP | sed -e "s#^mysql.ssl_cert = .*#mysql.ssl_cert = $C/expired.crt#" \
  -e "s#^mysql.ssl_key = .*#mysql.ssl_key = $C/expired.key#" >"$RUN/n.conf"
# TLS 1.3: the server's alert arrives either during the handshake ("certificate
# expired") or as the lost connection right after it (src/store/store_tls.c).
negative db-expired-client-cert "$RUN/n.conf" db_tls_failed 'certificate expired|handshake three times'

# MariaDB 10.11 refuses a plaintext login with 1045 "Access denied" and does
# not say why; 11.8 says it: 3159, "Connections using insecure transport are
# prohibited while --require_secure_transport=ON".
PLAINTEXT_REFUSAL='"code":1045,"error":"Access denied'
if [[ "$(printf '%s\n' 11.8 "$OW_MARIADB_VERSION" | sort -V | head -n 1)" == 11.8 ]]; then
  PLAINTEXT_REFUSAL='"code":3159,"error":"Connections using insecure transport are prohibited'
fi
new_case; mtls_conf $GROUP | sed "s#^mysql.ssl_mode = .*#mysql.ssl_mode = disabled#" >"$RUN/n.conf"
negative db-plaintext "$RUN/n.conf" db_connect_failed "\"ssl_mode\":\"disabled\".*$PLAINTEXT_REFUSAL"

# The server presents a certificate for db.other.invalid: MariaDB reloads
# its certificate files on FLUSH SSL (the rotation of docs/operations.md).
cp "$C/server.crt" "$C/server.crt.orig"; cp "$C/server.key" "$C/server.key.orig"
cp "$C/otherhost.crt" "$C/server.crt"; cp "$C/otherhost.key" "$C/server.key"
sql "FLUSH SSL"
new_case; mtls_conf $GROUP | sed "s#^mysql.host = .*#mysql.host = 127.0.0.2#" >"$RUN/n.conf"
# Connector/C 3.3 (Debian 12) says "Validation of SSL server certificate
# failed", 3.4 (Debian 13) "Hostname verification failed".
CONNECTOR_VERSION="$("$BIN" --version | sed -n 's/.*, \([0-9][0-9.]*\))$/\1/p')"
HOST_REFUSAL='Validation of SSL server certificate failed'
if [[ "$(printf '%s\n' 3.4 "$CONNECTOR_VERSION" | sort -V | head -n 1)" == 3.4 ]]; then
  HOST_REFUSAL='Hostname verification failed'
fi
negative db-other-host-cert "$RUN/n.conf" db_tls_failed \
  "\"server\":\"127.0.0.2\".*\"ssl_mode\":\"verify_identity\".*$HOST_REFUSAL"
mv "$C/server.crt.orig" "$C/server.crt"; mv "$C/server.key.orig" "$C/server.key"
sql "FLUSH SSL"

new_case; sasl_conf $GROUP PLAIN wrong-password >"$RUN/n.conf"
negative kafka-wrong-sasl-password "$RUN/n.conf" kafka_refused '"kind":"authentication"'

new_case; sasl_conf $GROUP SCRAM-SHA-512 wrong-password >"$RUN/n.conf"
negative kafka-wrong-scram-password "$RUN/n.conf" kafka_refused '"kind":"authentication".*SCRAM-SHA-512'

if [[ $MECH == PLAIN ]]; then
  new_case; sasl_conf $GROUP SCRAM-SHA-512 "$SASL_PW" >"$RUN/n.conf"
  negative "kafka-scram-right-password-librdkafka-$RDK_VERSION" "$RUN/n.conf" kafka_refused \
    '"kind":"authentication".*SCRAM-SHA-512'
fi

new_case; mtls_conf $GROUP | sed "s#^kafka.ssl.ca.location = .*#kafka.ssl.ca.location = $C/other-ca.crt#" >"$RUN/n.conf"
negative kafka-wrong-ca "$RUN/n.conf" kafka_refused '"kind":"tls"'

# Each ACL removed in turn, from the mutual-TLS principal.
for a in "${ACLS[@]}"; do
  new_case
  acl delete User:CN=ow_worker "$GROUP" "$a"
  mtls_conf $GROUP >"$RUN/n.conf"
  name=${a/INPUT/input}
  negative "acl-missing-${name// /-}" "$RUN/n.conf" kafka_refused '"kind":"authorization"'
done

say "passed: $PASSED cases in $((SECONDS - T0)) s; SASL_SSL login with $MECH (librdkafka $RDK_VERSION, MariaDB $OW_MARIADB_VERSION); database session $DB_TLS"
