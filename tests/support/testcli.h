/* Test support: runs the order-worker binary (or any program) with extra
 * environment and stdin, and captures its exit status, stdout and stderr. */
#ifndef OW_TESTCLI_H
#define OW_TESTCLI_H

#include <stddef.h>

typedef struct {
    int status; /* exit status, 128 + signal, or -1 when it timed out (then killed) */
    char *out;  /* NUL-terminated */
    size_t out_len;
    char *err;
    size_t err_len;
} testcli_result;

/* Runs argv (argv[0] a path) with the current environment plus env
 * ("NAME=value", NULL-terminated, may be NULL; these win), feeding in[0..in_len)
 * on stdin (in NULL: empty stdin). Waits up to timeout_ms. Returns 0, or -1
 * when the program could not be started. */
int testcli_run(char *const argv[], char *const env[], const char *in, size_t in_len,
                int timeout_ms, testcli_result *r);
void testcli_result_free(testcli_result *r);

/* The binary under test: $OW_TEST_WORKER_BIN, or NULL. */
const char *testcli_bin(void);

#endif
