/* The kit's shared helpers: the one environment merge used by
 * the kit, the CLI test runner and the benchmark, and kit_header, which
 * reads a kept message's headers with the pipeline's reader. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kit.h"

/* The value of name in a merged environment, or NULL; fails on a second
 * entry of the same name. */
static const char *lookup(char **envp, const char *name)
{
    size_t n = strlen(name);
    const char *found = NULL;

    for (size_t i = 0; envp[i] != NULL; i++) {
        if (strncmp(envp[i], name, n) == 0 && envp[i][n] == '=') {
            assert_null(found);
            found = envp[i] + n + 1;
        }
    }
    return found;
}

static void test_env_merge_replaces_and_appends(void **state)
{
    const char *extra[] = {"OW_KIT_A=new", "OW_KIT_C=3", "OW_KIT_GH=x", NULL};
    char **envp;

    (void)state;
    assert_int_equal(setenv("OW_KIT_A", "old", 1), 0);
    assert_int_equal(setenv("OW_KIT_AB", "kept", 1), 0);
    assert_int_equal(setenv("OW_KIT_B", "parent", 1), 0);
    assert_int_equal(setenv("OW_KIT_G", "parent", 1), 0);
    envp = kit_env_merge(extra, SIZE_MAX);
    assert_non_null(envp);
    assert_string_equal(lookup(envp, "OW_KIT_A"), "new");
    /* Only the same name is replaced, not one that starts like it or one
     * that an override starts like. */
    assert_string_equal(lookup(envp, "OW_KIT_AB"), "kept");
    assert_string_equal(lookup(envp, "OW_KIT_G"), "parent");
    assert_string_equal(lookup(envp, "OW_KIT_GH"), "x");
    assert_string_equal(lookup(envp, "OW_KIT_B"), "parent");
    assert_string_equal(lookup(envp, "OW_KIT_C"), "3");
    free(envp);
}

static void test_env_merge_counts(void **state)
{
    /* n_env bounds a list that has no NULL (the benchmark's arrays). */
    const char *extra[] = {"OW_KIT_D=1", "OW_KIT_E=2"};
    char **envp;

    (void)state;
    unsetenv("OW_KIT_E");
    envp = kit_env_merge(extra, 1);
    assert_non_null(envp);
    assert_string_equal(lookup(envp, "OW_KIT_D"), "1");
    assert_null(lookup(envp, "OW_KIT_E"));
    free(envp);
    envp = kit_env_merge(NULL, 0);
    assert_non_null(envp);
    assert_null(lookup(envp, "OW_KIT_D"));
    free(envp);
}

static void test_header(void **state)
{
    kit_msg m;
    char out[8];

    (void)state;
    memset(&m, 0, sizeof(m));
    assert_int_equal(kit_header(&m, "replayed", out, sizeof(out)), 0); /* no headers */
    m.headers = rd_kafka_headers_new(4);
    rd_kafka_header_add(m.headers, "replayed", -1, "false", -1);
    rd_kafka_header_add(m.headers, "source-topic", -1, "a-long-topic-name", -1);
    rd_kafka_header_add(m.headers, "replayed", -1, "true", -1);
    rd_kafka_header_add(m.headers, "empty", -1, "", 0);
    /* The last header of a name wins, as in the pipeline. */
    assert_int_equal(kit_header(&m, "replayed", out, sizeof(out)), 1);
    assert_string_equal(out, "true");
    /* A long value is cut to the buffer. */
    assert_int_equal(kit_header(&m, "source-topic", out, sizeof(out)), 1);
    assert_string_equal(out, "a-long-");
    /* An empty value is present. */
    assert_int_equal(kit_header(&m, "empty", out, sizeof(out)), 1);
    assert_string_equal(out, "");
    assert_int_equal(kit_header(&m, "source", out, sizeof(out)), 0);
    assert_int_equal(kit_header(&m, "error-code", out, sizeof(out)), 0);
    rd_kafka_headers_destroy(m.headers);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_env_merge_replaces_and_appends),
        cmocka_unit_test(test_env_merge_counts),
        cmocka_unit_test(test_header),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
