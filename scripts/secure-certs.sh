#!/usr/bin/env bash
# Throwaway TLS material for the `secure` test tier, made with
# OpenSSL at test time; nothing here is ever committed.
#
# usage: scripts/secure-certs.sh DIR
#
# Writes into DIR (PEM, unencrypted PKCS#8 keys, which Kafka's PEM key
# stores accept):
#   ca.crt ca.key                 the test CA
#   other-ca.crt                  an unrelated CA (the "wrong CA" case)
#   server.crt server.key         127.0.0.1 and localhost, signed by ca
#   otherhost.crt otherhost.key   only db.other.invalid, signed by ca
#   client.crt client.key         CN=ow_worker, signed by ca (mutual TLS)
#   expired.crt expired.key       CN=ow_worker, signed by ca, expired in 2020
#   broker.crt broker.key         CN=broker: the Kafka broker's own client identity
#   chain.pem / client-chain.pem  certificate followed by the CA (Kafka key stores)
set -euo pipefail

DIR=${1:?usage: $0 DIR}
mkdir -p "$DIR"
cd "$DIR"

key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }

# CA: self-signed, 1 day.
ca() {  # NAME CN
  key "$1.key"
  openssl req -x509 -new -key "$1.key" -days 1 -subj "/CN=$2" -out "$1.crt" \
    -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign
}

leaf() {  # NAME CN SAN EXTKEYUSAGE
  key "$1.key"
  openssl req -new -key "$1.key" -subj "/CN=$2" -out "$1.csr"
  printf 'subjectAltName=%s\nextendedKeyUsage=%s\nbasicConstraints=CA:FALSE\n' "$3" "$4" >"$1.ext"
  openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 1 \
    -extfile "$1.ext" -out "$1.crt" 2>/dev/null
  rm -f "$1.csr" "$1.ext"
}

# An expired certificate: `openssl x509` cannot back-date, `openssl ca` can.
expired() {  # NAME CN
  key "$1.key"
  openssl req -new -key "$1.key" -subj "/CN=$2" -out "$1.csr"
  mkdir -p ca-db
  : >ca-db/index.txt
  cat >ca-db/ca.cnf <<EOF
[ca]
default_ca = test
[test]
database = $PWD/ca-db/index.txt
new_certs_dir = $PWD/ca-db
serial = $PWD/ca-db/serial
default_md = sha256
policy = any
copy_extensions = none
[any]
commonName = supplied
[ext]
basicConstraints = CA:FALSE
extendedKeyUsage = clientAuth
EOF
  echo 1000 >ca-db/serial
  openssl ca -batch -config ca-db/ca.cnf -cert ca.crt -keyfile ca.key -in "$1.csr" -out "$1.crt" \
    -startdate 20200101000000Z -enddate 20200102000000Z -extensions ext -notext 2>/dev/null
  rm -rf "$1.csr" ca-db
}

ca ca "order-worker test CA"
ca other-ca "unrelated CA"
rm -f other-ca.key
leaf server 127.0.0.1 "IP:127.0.0.1,DNS:localhost" "serverAuth,clientAuth"
leaf otherhost db.other.invalid "DNS:db.other.invalid" "serverAuth"
leaf client ow_worker "DNS:ow-worker" "clientAuth"
leaf broker broker "DNS:broker" "clientAuth"
expired expired ow_worker
cat server.crt ca.crt >chain.pem
cat client.crt ca.crt >client-chain.pem
rm -f ca.srl
chmod 600 ./*.key
