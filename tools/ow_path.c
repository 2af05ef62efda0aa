/*
 * ow-path: the worker's in-process path (tools/path/path.h) over a fixed
 * corpus, for counting its instructions with callgrind.
 *
 *   ow-path [--rounds R (1)] [--messages M (1000)] [--seed S] [--invalid PCT (5)]
 *           [--traceparent]
 *       runs the path over the M messages R times (with --traceparent,
 *       every message carries a W3C traceparent header) and prints
 *       path: R rounds x M messages = N messages (V valid, I invalid), ...,
 *             corpus 0x..., outputs 0x...
 *   ow-path --per-message IR1 N1 IR2 N2
 *       prints round((IR2 - IR1) / (N2 - N1)): instructions per message
 *       from two runs, with the start-up they share cancelled out
 *
 * scripts/bench-cost.sh runs it twice under callgrind and once with
 * --per-message. Exit status 0, 1 when the path failed, 2 for bad
 * arguments.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "ow/util.h"
#include "path.h"

static void usage(void)
{
    fputs("usage: ow-path [--rounds R (1)] [--messages M (1000)] [--seed S (20261130)]\n"
          "               [--invalid PCT (5)] [--traceparent]\n"
          "       ow-path --per-message IR1 N1 IR2 N2\n",
          stderr);
}

static int number(const char *opt, const char *s, int64_t min, int64_t max, int64_t *out)
{
    if (s == NULL || ow_parse_int64(s, out) != 0 || *out < min || *out > max) {
        fprintf(stderr, "ow-path: %s: expected an integer in %" PRId64 "..%" PRId64 ", got '%s'\n",
                opt, min, max, s != NULL ? s : "");
        return -1;
    }
    return 0;
}

static int per_message(char **argv)
{
    int64_t v[4];
    uint64_t out;

    for (int i = 0; i < 4; i++)
        if (number("--per-message", argv[i], 0, INT64_MAX, &v[i]) != 0)
            return 2;
    if (pt_per_message((uint64_t)v[0], (uint64_t)v[1], (uint64_t)v[2], (uint64_t)v[3], &out) != 0) {
        fprintf(stderr, "ow-path: --per-message: the second run must have more messages and "
                        "at least as many instructions as the first\n");
        return 2;
    }
    printf("%" PRIu64 "\n", out);
    return 0;
}

static int parse_args(int argc, char **argv, pt_corpus_opts *o, int *rounds)
{
    int64_t v;

    for (int i = 1; i < argc; i += 2) {
        const char *k = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;

        if (strcmp(k, "--traceparent") == 0) {
            o->traceparent = 1;
            i--; /* no value */
        } else if (strcmp(k, "--rounds") == 0 && number(k, val, 1, 1000000, &v) == 0)
            *rounds = (int)v;
        else if (strcmp(k, "--messages") == 0 && number(k, val, 1, 10000000, &v) == 0)
            o->messages = (size_t)v;
        else if (strcmp(k, "--seed") == 0 && number(k, val, 1, INT64_MAX, &v) == 0)
            o->seed = (uint64_t)v;
        else if (strcmp(k, "--invalid") == 0 &&
                 number(k, val, 0, 100 - o->pct_retry - o->pct_reuse - o->pct_clash, &v) == 0)
            o->pct_invalid = (int)v;
        else if (strcmp(k, "--rounds") != 0 && strcmp(k, "--messages") != 0 &&
                 strcmp(k, "--seed") != 0 && strcmp(k, "--invalid") != 0) {
            fprintf(stderr, "ow-path: unknown option %s\n", k);
            return -1;
        } else
            return -1; /* a bad value, reported by number() */
    }
    return 0;
}

int main(int argc, char **argv)
{
    pt_corpus_opts o;
    pt_corpus c;
    pt_stats st;
    int rounds = 1;
    int rc;

    if (argc == 6 && strcmp(argv[1], "--per-message") == 0)
        return per_message(argv + 2);
    pt_corpus_defaults(&o);
    if (parse_args(argc, argv, &o, &rounds) != 0) {
        usage();
        return 2;
    }
    if (pt_corpus_make(&o, &c) != 0) {
        fprintf(stderr, "ow-path: cannot make the corpus (out of memory?)\n");
        return 1;
    }
    rc = pt_run(&c, rounds, &st);
    if (rc == 0)
        printf("path: %d rounds x %zu messages = %zu messages (%zu valid, %zu invalid; %zu "
               "orders a round; %zu bodies built, %zu header sets; %s), corpus 0x%016" PRIx64
               ", outputs 0x%016" PRIx64 "\n",
               rounds, c.n, st.messages, st.valid, st.invalid, c.orders, st.bodies_built,
               st.headers, o.traceparent ? "each with a traceparent" : "no input headers",
               pt_corpus_checksum(&c), st.checksum);
    else
        fprintf(stderr, "ow-path: the path failed (out of memory)\n");
    pt_corpus_free(&c);
    return rc == 0 ? 0 : 1;
}
