#!/usr/bin/env bash
# Fails if SQL text could be built from message data. Rules, for src/:
#   A. The client library's text entry points (mysql_query, mysql_real_query,
#      mysql_send_query, mysql_stmt_prepare) are called only inside
#      ow_store_exec_static and ow_store_prepare in src/store/store.c.
#   B. ow_store_exec_static is always called with a string literal.
#   C. ow_store_prepare is called with a string literal, a `sql_*` constant
#      initialised with a literal in the same file, or at a reviewed site
#      whose text is assembled by rule D (listed below).
#   D. Where SQL text is assembled (a buffer named sql, or b in build_sql),
#      only literals, `sql_*` constants, `head`/`tuple`/`tail` or
#      `shape->head`/`->tuple`/`->tail` (from statement shapes, rule E) and
#      `d->rows` (a static table of literals) are appended; no formatted
#      output (*appendf, snprintf) goes into it.
#   E. A statement shape (`static const ow_sql_shape`, cached by
#      ow_store_stmt) holds a slot number (`OW_SLOT_X + n`) and string
#      literals, nothing else.
# Data always travels as bound parameters. Run with --self-test to prove the
# check fails on planted violations.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

check() {  # DIR
  local dir=$1 bad=0 line
  # A
  while IFS= read -r line; do
    local file=${line%%:*} rest=${line#*:} lineno
    lineno=${rest%%:*}
    local fn
    fn=$(awk -v n="$lineno" 'NR<=n && /^[a-z].*\(/ {f=$0} NR==n {print f}' "$file")
    if [[ $file != */store/store.c || ! ( $fn == *ow_store_exec_static* || $fn == *ow_store_prepare* ) ]]; then
      echo "check-sql: $file:$lineno: raw query call outside ow_store_exec_static/ow_store_prepare" >&2
      bad=1
    fi
  done < <(grep -nE '\b(mysql_query|mysql_real_query|mysql_send_query|mysql_stmt_prepare)\s*\(' "$dir"/*/*.c || true)
  # B
  while IFS= read -r line; do
    if ! grep -qE 'ow_store_exec_static\([^,]+,\s*"' <<<"$line"; then
      echo "check-sql: ${line%%:*}: ow_store_exec_static without a string literal: ${line#*:}" >&2
      bad=1
    fi
  done < <(grep -nHE 'ow_store_exec_static\(' "$dir"/*/*.c | grep -vE '^[^:]+:[0-9]+:(int|static int) ow_store_exec_static' || true)
  # C
  while IFS= read -r line; do
    local file=${line%%:*} arg
    if grep -qE 'ow_store_prepare\([^,]+,\s*"' <<<"$line"; then continue; fi
    arg=$(sed -nE 's/.*ow_store_prepare\([^,]+,\s*([A-Za-z_][A-Za-z0-9_.]*),.*/\1/p' <<<"$line")
    if [[ $arg == sql_* ]] &&
        grep -qzE "static const char \*const $arg =[[:space:]]*\"" "$file"; then
      continue
    fi
    case "$line" in
      */store.c:*'rc = ow_store_prepare(s, sql.data, slot, err)'*) ;;        # ow_sql_shape (rule E)
      */store_migrate.c:*'ow_store_prepare(s, sql, &st, err)'*) ;;      # embedded migrations
      */store_query.c:*'int rc = ow_store_prepare(s, sql, &st, err)'*) ;; # ow_store_query_int
      */store_audit.c:*'rc = ow_store_prepare(s, sql.data, &st, err)'*) ;; # rule D builders
      *) echo "check-sql: ${line%%:*}: ow_store_prepare with SQL that is neither a literal nor a reviewed site: ${line#*:}" >&2
         bad=1 ;;
    esac
  done < <(grep -nHE 'ow_store_prepare\(' "$dir"/*/*.c | grep -vE ':[0-9]+:(int|static int) ow_store_prepare' || true)
  # D
  # The appended argument must start with a literal (possibly continued on the
  # next lines), be a literal-only ternary, or be one of the reviewed names.
  local allowed='^("|[a-z_]+ [=!<>]=* [0-9]+ \? "[^"]*" : "[^"]*"\)|(sql_[a-z_]+|head|tuple|tail|shape->(head|tuple|tail)|d->rows)\))'
  while IFS= read -r line; do
    # Every append on the line, leftmost first (a line may hold two).
    local rest=$line what re='ow_buf_append([fsc]?)\((&?sql|b), (.*)$'
    while [[ $rest =~ $re ]]; do
      what=${BASH_REMATCH[3]}
      rest=$what
      [[ ${BASH_REMATCH[1]} == c && $what == "'"?"'"* ]] && continue
      if [[ ${BASH_REMATCH[1]} == f ]] || ! grep -qE "$allowed" <<<"$what"; then
        echo "check-sql: ${line%%:*}: SQL text assembled from something other than literals: ${line#*:}" >&2
        bad=1
        break
      fi
    done
  done < <(grep -nHE 'ow_buf_append[fsc]?\((&?sql|b),' "$dir"/store/store*.c | grep -vE "ow_buf_appendc\((&?sql|b), '.'\)" || true)
  if grep -nHE 'snprintf\((sql|b)\b' "$dir"/store/store*.c; then
    echo "check-sql: formatted output into an SQL buffer" >&2
    bad=1
  fi
  # E
  # A statement shape (ow_sql_shape) is a slot number and string literals.
  local residue
  residue=$(awk '/static const ow_sql_shape [a-z_]+ = \{/ {f = 1} f {print} f && /\};/ {f = 0}' \
              "$dir"/*/*.c |
            sed -E 's/"([^"\\]|\\.)*"//g; s/static const ow_sql_shape [a-z_]+ = \{//; s/OW_SLOT_[A-Z]+ *\+//g; s/[0-9]+//g; s/[{},;[:space:]]//g')
  if [[ -n $residue ]]; then
    echo "check-sql: a statement shape holds something other than literals: $residue" >&2
    bad=1
  fi
  return $bad
}

if [[ ${1:-} == --self-test ]]; then
  tmp=$(mktemp -d)
  on_exit 'rm -rf "$tmp"'
  for plant in \
      's/ow_store_exec_static(s, "SAVEPOINT ow_item", err)/ow_store_exec_static(s, key, err)/' \
      's/rc = ow_store_prepare(s, "SET SESSION innodb_lock_wait_timeout = ?", \&st, err);/rc = ow_store_prepare(s, text, \&st, err);/' \
      's/rc = ow_buf_appends(b, shape->tuple);/rc = ow_buf_appendf(b, "(%s)", key);/' \
      's/int rc = ow_buf_appends(b, shape->head);/int rc = ow_buf_appends(b, key);/' \
      's/    "(?,?,?,?,?,?,?,?)", " RETURNING id"};/    key, " RETURNING id"};/' \
      's/ow_buf_appends(\&sql, d->rows) == OW_OK \&\& ow_buf_appends(\&sql, " LIMIT ?")/ow_buf_appends(\&sql, key) == OW_OK \&\& ow_buf_appends(\&sql, " LIMIT ?")/' \
      's/"DELETE FROM idempotency_requests WHERE id IN (", "?", ")"};/head, "?", ")"};/' \
      's/rc = ow_store_prepare(s, sql_cutoff, \&st, err);/rc = ow_store_prepare(s, user_text, \&st, err);/' ; do
    rm -rf "$tmp/src"; cp -r "$ROOT/src" "$tmp/src"
    sed -i "$plant" "$tmp/src"/*/*.c
    if diff -rq "$ROOT/src" "$tmp/src" >/dev/null; then
      echo "check-sql: self-test could not plant: $plant" >&2; exit 1
    fi
    if check "$tmp/src" 2>/dev/null; then
      echo "check-sql: self-test FAILED: a planted violation passed ($plant)" >&2; exit 1
    fi
  done
  # A raw query outside the store.
  rm -rf "$tmp/src"; cp -r "$ROOT/src" "$tmp/src"
  printf 'void f(void *db, const char *k) { mysql_query(db, k); }\n' >>"$tmp/src/pipeline/lane.c"
  if check "$tmp/src" 2>/dev/null; then echo "check-sql: self-test FAILED on a raw query" >&2; exit 1; fi
  echo "check-sql: self-test passed (9 planted violations caught)"
  exit 0
fi

check "$ROOT/src"
echo "check-sql: ok (SQL text in src/ is static; data is bound)"
