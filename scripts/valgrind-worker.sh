#!/usr/bin/env bash
# Runs the built worker under valgrind memcheck (used by scripts/valgrind.sh
# as OW_TEST_WORKER_BIN). Each process writes $OW_TEST_LOG_DIR/valgrind-<pid>.log.
exec valgrind --tool=memcheck --leak-check=full --errors-for-leak-kinds=definite \
  --show-leak-kinds=definite --track-origins=no --error-exitcode=99 \
  --log-file="${OW_TEST_LOG_DIR:-/tmp}/valgrind-%p.log" \
  "${OW_VALGRIND_TARGET:?}" "$@"
