#!/usr/bin/env bash
# The contract tier: docs/asyncapi.yaml against the official
# AsyncAPI parser, then every example (the document's, README.md's and
# docs/contract.md's) and, when the e2e tier ran with
# OW_TEST_CONTRACT_CAPTURE, every result body and dead-letter header set it
# read, against the document's schemas (JSON Schema 2020-12).
#
# usage: scripts/contract.sh [CAPTURE_FILE]
#        scripts/contract.sh --self-test   the checker must reject drifted output
# Needs tools/contract/node_modules (scripts/deps.sh) and python3-jsonschema.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
DOC="$ROOT/docs/asyncapi.yaml"
CHECK=(/usr/bin/python3 "$ROOT/tools/contract/check_contract.py" "$DOC")
capture=${1:-}
cd "$ROOT"

hex() { printf '%s' "$1" | od -An -tx1 -v | tr -d ' \n'; }
line() {  # KIND OFFSET HEADERS VALUE
  printf '{"kind":"%s","topic":"t","partition":0,"offset":%s,"headers":"%s","value":"%s"}\n' \
    "$1" "$2" "$(hex "$3")" "$(hex "$4")"
}

# Drifted output must fail, each drift with its own message; the same
# records without the drift must pass.
self_test() {
  local dir out good digest
  dir="$(mktemp -d)"
  trap 'rm -rf "$dir"; trap - RETURN' RETURN
  digest=617ba20a7005cb1c5dcf1f0b4450af614802fb12ad0b2655813278e4d2996c08
  good='{"status":201,"code":"CREATED","user_id":42,"idempotency_key":"k","request_digest":"'$digest'","orders":[{"index":0,"external_order_no":"B-1","order_id":5,"order_no":"OW-0000000000005","amount":"19.90","existing":false}]}'
  hdrs=$'user-id=42\nreplayed=false\nsource-topic=in\nsource-partition=0\nsource-offset=0\n'
  dl=$'error-code=INVALID_REQUEST\nerror-message=key: is empty\nerror-count=1\nsource-topic=in\nsource-partition=0\nsource-offset=1\nsource-timestamp=5\n'
  reused='{"status":409,"code":"IDEMPOTENCY_KEY_REUSED","message":"m","user_id":42,"idempotency_key":"k","request_digest":"'$digest'"}'
  tp=00-4bf92f3577b34da6a3ce929d0e0e4736-b7ad6b7169203331-01
  {
    line result 1 "$hdrs" "$good"
    line result 2 "$hdrs" "${good/\"amount\":\"19.90\"/\"amount\":19.9}"
    line result 3 "${hdrs/replayed=false/replayed=yes}" "$good"
    line result 4 "$hdrs" '{"status":201,"code":"CREATED","held":true}'
    line dead_letter 5 "${dl/error-count=1/error-count=one}" ""
    line result 6 "$hdrs" "$reused"
    line result 7 "${hdrs/replayed=false/replayed=true}" "$good"
    line result 8 "${hdrs/replayed=false/replayed=true}" "$reused"
    line result 9 "${hdrs}traceparent=00-4BF92F3577B34DA6A3CE929D0E0E4736-b7ad6b7169203331-01"$'\n' "$good"
    line result 10 "${hdrs}tracestate=rojo=1"$'\n' "$good"
    line dead_letter 11 "${dl}traceparent=00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01"$'\n' ""
    line result 12 "${hdrs}traceparent=$tp"$'\n'"tracestate=rojo=1,congo=2,rojo=3"$'\n' "$good"
    line result 13 "${hdrs}traceparent=$tp"$'\n'"tracestate=rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"$'\n' "$good"
  } >"$dir/bad.jsonl"
  out="$("${CHECK[@]}" --capture "$dir/bad.jsonl" 2>&1)" && { echo "$out"; echo "contract: self-test: drift passed"; return 1; }
  for want in "t/0@2 body: orders/0/amount" "t/0@3 headers (CREATED): replayed" \
              "t/0@4 body: (root): 'user_id' is a required" "t/0@5 headers: error-count" \
              "t/0@8 headers (IDEMPOTENCY_KEY_REUSED): replayed" \
              "t/0@9 headers (CREATED): traceparent" \
              "t/0@10 headers (CREATED): (root): 'traceparent' is a required" \
              "t/0@11 headers: traceparent" "t/0@12 headers: tracestate repeats"; do
    grep -qF "$want" <<<"$out" || { echo "$out"; echo "contract: self-test: no failure \"$want\""; return 1; }
  done
  grep -qE "t/0@(1|6|7|13)( |:)" <<<"$out" && { echo "$out"; echo "contract: self-test: a good record failed"; return 1; }
  echo "contract: self-test: ok (9 drifts caught, the good records passed)"
}

if [[ $capture == --self-test ]]; then
  self_test
  exit
fi

[[ -d $ROOT/tools/contract/node_modules/@asyncapi/parser ]] \
  || { echo "contract: tools/contract/node_modules is missing: run scripts/deps.sh"; exit 1; }
(cd "$ROOT/tools/contract" && node validate-asyncapi.mjs "$DOC")

args=(--markdown README.md --markdown docs/contract.md)
if [[ -n $capture ]]; then
  [[ -s $capture ]] || { echo "contract: $capture is empty or missing: did the e2e tier run?"; exit 1; }
  args+=(--capture "$capture")
else
  echo "contract: no capture file given: the e2e tier's output is not checked"
fi
self_test
# Debian's python3-jsonschema (4.10, JSON Schema 2020-12), not a pyenv one.
"${CHECK[@]}" "${args[@]}"
