#!/usr/bin/env bash
# Fails when a file includes a header of a layer above its own. The layers
# (docs/architecture.md) and what each may include:
#   base      base
#   store     base, store
#   kafka     base, kafka
#   pipeline  base, store, kafka, pipeline
#   serve     base, store, serve
#   cli       every layer
# A layer's sources are src/<layer>/*.[ch] and its public headers
# include/<layer>/ow/*.h. A quoted include is either "ow/<name>.h", a public
# header of an allowed layer, or a private header of the file's own
# directory; a public header includes no private one. The build enforces
# the same through include paths; this check needs no build and names the
# line. Run with --self-test to see it fail on planted violations.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

declare -A ALLOWED=(
  [base]="base"
  [store]="base store"
  [kafka]="base kafka"
  [pipeline]="base store kafka pipeline"
  [serve]="base store serve"
  [cli]="base store kafka pipeline serve cli"
)

# The layer whose include/<layer>/ow/ holds this public header, or nothing.
owner_of() {  # ROOT NAME
  local layer
  for layer in "${!ALLOWED[@]}"; do
    if [[ -f $1/include/$layer/ow/$2 ]]; then
      echo "$layer"
      return
    fi
  done
}

check_file() {  # ROOT FILE LAYER PUBLIC(0|1)
  local root=$1 file=$2 layer=$3 public=$4 bad=0 lineno name owner
  while IFS=: read -r lineno name; do
    name=${name#*\"}
    name=${name%%\"*}
    if [[ $name == ow/* ]]; then
      owner=$(owner_of "$root" "${name#ow/}")
      if [[ -z $owner ]]; then
        echo "check-layers: ${file#"$root"/}:$lineno includes $name, which no layer's include/<layer>/ow/ holds" >&2
        bad=1
      elif [[ " ${ALLOWED[$layer]} " != *" $owner "* ]]; then
        echo "check-layers: ${file#"$root"/}:$lineno includes $name of the $owner layer; the $layer layer may include only: ${ALLOWED[$layer]}" >&2
        bad=1
      fi
    elif ((public)); then
      echo "check-layers: ${file#"$root"/}:$lineno: a public header includes the private \"$name\"" >&2
      bad=1
    elif [[ $name == */* || ! -f $(dirname "$file")/$name ]]; then
      echo "check-layers: ${file#"$root"/}:$lineno includes \"$name\", which is not a private header of src/$layer/" >&2
      bad=1
    fi
  done < <(grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]+"' "$file" || true)
  return $bad
}

check() {  # ROOT
  local root=$1 bad=0 dir layer file
  for file in "$root"/src/* "$root"/include/*; do
    if [[ -f $file ]]; then
      echo "check-layers: ${file#"$root"/} belongs to no layer: move it into a layer's directory" >&2
      bad=1
    fi
  done
  for dir in "$root"/src/*/ "$root"/include/*/; do
    layer=$(basename "$dir")
    if [[ -z ${ALLOWED[$layer]+x} ]]; then
      echo "check-layers: ${dir#"$root"/} is not a layer (${!ALLOWED[*]})" >&2
      bad=1
    fi
  done
  ((bad == 0)) || return 1
  for layer in "${!ALLOWED[@]}"; do
    for file in "$root/src/$layer"/*.[ch]; do
      [[ -e $file ]] || continue
      check_file "$root" "$file" "$layer" 0 || bad=1
    done
    for file in "$root/include/$layer/ow"/*.h; do
      [[ -e $file ]] || continue
      check_file "$root" "$file" "$layer" 1 || bad=1
    done
  done
  return $bad
}

if [[ ${1:-} == --self-test ]]; then
  tmp=$(mktemp -d)
  on_exit 'rm -rf "$tmp"'
  n=0
  # FILE|LINE: the line is added after the file's first include.
  for plant in \
      'src/store/store_decide.c|#include "ow/worker.h"' \
      'src/base/config.c|#include "ow/store.h"' \
      'src/serve/serve.c|#include "ow/kafka.h"' \
      'src/kafka/kafka.c|#include "ow/metrics.h"' \
      'include/store/ow/store.h|#include "ow/worker.h"' \
      'include/base/ow/config.h|#include "store_parts.h"' \
      'src/serve/serve_reply.c|#include "job.h"' \
      'src/store/store.c|#include "../pipeline/job.h"'; do
    rm -rf "$tmp/src" "$tmp/include"
    cp -r "$ROOT/src" "$ROOT/include" "$tmp/"
    file=${plant%%|*}
    sed -i "0,/^#include/s||${plant#*|}\n#include|" "$tmp/$file"
    if diff -rq "$ROOT/src" "$tmp/src" >/dev/null && diff -rq "$ROOT/include" "$tmp/include" >/dev/null; then
      echo "check-layers: self-test could not plant into $file" >&2
      exit 1
    fi
    if check "$tmp" 2>/dev/null; then
      echo "check-layers: self-test FAILED: a planted violation passed ($plant)" >&2
      exit 1
    fi
    n=$((n + 1))
  done
  # A source file outside every layer.
  rm -rf "$tmp/src" "$tmp/include"
  cp -r "$ROOT/src" "$ROOT/include" "$tmp/"
  cp "$tmp/src/pipeline/lane.c" "$tmp/src/lane.c"
  if check "$tmp" 2>/dev/null; then
    echo "check-layers: self-test FAILED: a file outside the layers passed" >&2
    exit 1
  fi
  echo "check-layers: self-test passed ($((n + 1)) planted violations caught)"
  exit 0
fi

check "$ROOT"
echo "check-layers: ok (every include points to its own layer or one below)"
