#!/usr/bin/env bash
# The contract tier (issue 15): docs/asyncapi.yaml against the official
# AsyncAPI parser, then every example (the document's, README.md's and
# docs/contract.md's) and, when the e2e tier ran with
# OW_TEST_CONTRACT_CAPTURE, every result body and dead-letter header set it
# read, against the document's schemas (JSON Schema 2020-12).
#
# usage: scripts/contract.sh [CAPTURE_FILE]
# Needs tools/contract/node_modules (scripts/deps.sh) and python3-jsonschema.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DOC="$ROOT/docs/asyncapi.yaml"
capture=${1:-}

[[ -d $ROOT/tools/contract/node_modules/@asyncapi/parser ]] \
  || { echo "contract: tools/contract/node_modules is missing: run scripts/deps.sh"; exit 1; }
(cd "$ROOT/tools/contract" && node validate-asyncapi.mjs "$DOC")

args=(--markdown "$ROOT/README.md" --markdown "$ROOT/docs/contract.md")
if [[ -n $capture ]]; then
  [[ -s $capture ]] || { echo "contract: $capture is empty or missing: did the e2e tier run?"; exit 1; }
  args+=(--capture "$capture")
else
  echo "contract: no capture file given: the e2e tier's output is not checked"
fi
# Debian's python3-jsonschema (4.10, JSON Schema 2020-12), not a pyenv one.
/usr/bin/python3 "$ROOT/tools/contract/check_contract.py" "$DOC" "${args[@]}"
