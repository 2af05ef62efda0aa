/* order-worker audit: checks the invariants of the stored data. */
#include <stdio.h>

#include "ow/store_audit.h"
#include "cli.h"

void ow_help_audit(void)
{
    puts("usage: order-worker audit [--config FILE]\n"
         "\n"
         "Checks the stored data against order-worker's invariants, in one read-only\n"
         "snapshot, and prints one line per check with its number of findings:\n"
         "\n"
         "  duplicate request keys              two records for one (user_id, key)\n"
         "  duplicate orders                    two orders for one (user_id,\n"
         "                                      external_order_no)\n"
         "  orders without a SUCCEEDED request  request_id names a missing or\n"
         "                                      non-SUCCEEDED request (a NULL\n"
         "                                      request_id, left by purge, is fine)\n"
         "  FAILED requests owning orders\n"
         "  requests not in a final state       status other than SUCCEEDED/FAILED,\n"
         "                                      response_status not 201/409 to match,\n"
         "                                      or an empty response body\n"
         "\n"
         "For a failing check it prints up to 10 examples: ids and counts, with keys\n"
         "and order numbers masked. It also prints the row counts of both tables.\n"
         "The queries scan whole tables: run it off-peak on large databases.\n"
         "With mysql.shards set, every shard is audited in turn, each under a line\n"
         "naming it.\n"
         "\n"
         "Exit status: 0 every check passed, 4 findings, 1 database error, 2 bad\n"
         "arguments or configuration.");
}

static int print_report(const ow_audit_report *r)
{
    int failed = 0;

    printf("audit: idempotency_requests %lld rows, orders %lld rows\n\n", (long long)r->requests,
           (long long)r->orders);
    printf("%-38s %10s  %s\n", "check", "findings", "result");
    for (size_t i = 0; i < OW_AUDIT_CHECK_COUNT; i++) {
        const ow_audit_check *c = &r->checks[i];

        printf("%-38s %10lld  %s\n", c->name, (long long)c->findings,
               c->findings > 0 ? "FAIL" : "OK");
        failed |= c->findings > 0;
    }
    for (size_t i = 0; i < OW_AUDIT_CHECK_COUNT; i++) {
        const ow_audit_check *c = &r->checks[i];

        if (c->findings == 0)
            continue;
        printf("\nFAIL %s: %lld finding(s), %s\n", c->name, (long long)c->findings,
               c->findings > (int64_t)c->n_examples ? "first examples" : "all of them");
        for (size_t k = 0; k < c->n_examples; k++)
            printf("  %s\n", c->examples[k]);
    }
    return failed;
}

/* Audits one database; returns its exit code. */
static int audit_one(const ow_config *cfg, unsigned shard)
{
    ow_audit_report report;
    ow_error err;
    ow_idgen ids;
    ow_store *s = ow_cli_shard_store_new(cfg, shard, &ids, 0);
    int code;

    ow_cli_shard_header(cfg, shard, "audit");
    if (s == NULL) {
        fprintf(stderr, "order-worker audit: out of memory\n");
        code = OW_EXIT_FAILURE;
    } else if (ow_store_audit(s, &report, &err) != OW_OK) {
        fprintf(stderr, "order-worker audit: %s\n", err.msg);
        code = ow_cli_exit_for(&err);
    } else {
        code = print_report(&report) ? OW_EXIT_FINDINGS : OW_EXIT_OK;
    }
    ow_store_free(&s);
    return code;
}

int ow_cmd_audit(int argc, char **argv, const volatile sig_atomic_t *stop)
{
    static const char *const known[] = {"--config", NULL};
    ow_config cfg;
    int code;

    (void)stop;
    if (ow_cli_args(argc, argv, known, "audit", NULL, 0) < 0)
        return OW_EXIT_USAGE;
    code = ow_cli_config_with_maps(argc, argv, "audit", &cfg);
    if (code != OW_EXIT_OK)
        return code;
    /* Each shard is audited on its own (a user's rows are all on one); a
     * database error outranks findings in the exit status. */
    for (unsigned i = 0; i < ow_cli_shards(&cfg); i++) {
        int one = audit_one(&cfg, i);

        if ((one == OW_EXIT_USAGE || one == OW_EXIT_FAILURE) && code != OW_EXIT_USAGE)
            code = one;
        else if (one == OW_EXIT_FINDINGS && code == OW_EXIT_OK)
            code = one;
    }
    ow_config_cleanup(&cfg);
    return code;
}
