/*
 * ow-growth-gen: request and order rows for the growth benchmark's preload,
 * as two tab-separated files for LOAD DATA LOCAL INFILE.
 *
 *   ow-growth-gen FIRST COUNT REQUESTS.tsv ORDERS.tsv
 *
 * Writes request records FIRST+1 .. FIRST+COUNT with the worker's row
 * shapes: a time-ordered id (the layout of src/base/idgen.c, node 1023, which no
 * worker uses by default), user 1..1000, a key "bench-<16 hex digits>" made
 * exactly like ow-bench --random-keys makes its keys (from numbers below
 * ow-bench's --first-number, so never the same key), so that the keys the
 * benchmark's worker inserts land at random places among the preloaded
 * ones, as UUID keys would; a 32-byte digest (hex; the
 * loader UNHEXes it), status SUCCEEDED, 201 and the response body the
 * worker would have stored, and 1..9 orders (mean 5) each with its own id,
 * order_no, external_order_no "P<n>-<i>", amount, product_id (NULL half the
 * time) and quantity. External order numbers are the client's: per user
 * they grow (the bench's are "N<number>-<i>"), so new orders go to the end
 * of each user's range in uq_orders_user_ext, not to random places.
 * Record n is created at 2026-01-02 00:00:00 plus n / 2000 seconds (the seed's 2,000 requests/s peak), so every preloaded
 * row is months older than anything a benchmark run writes and a purge
 * with --older-than 1d removes exactly the preload.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ow/idgen.h"
#include "ow/util.h"

#define BASE_EPOCH_S INT64_C(1767312000) /* 2026-01-02T00:00:00Z */
#define PER_SECOND 2000
#define NODE 1023

static uint64_t mix64(uint64_t x)
{
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/* Record n's id: its millisecond, node 1023, and a sequence that leaves
 * room for its orders (base + 1 + i). Two records per millisecond. */
static int64_t record_id(uint64_t n)
{
    int64_t ms = (int64_t)(n * 1000 / PER_SECOND) + (BASE_EPOCH_S * 1000 - OW_IDGEN_EPOCH_MS);
    int64_t seq = (int64_t)(n % 2) * 32;

    return (ms << (OW_IDGEN_NODE_BITS + OW_IDGEN_SEQ_BITS)) | ((int64_t)NODE << OW_IDGEN_SEQ_BITS) |
           seq;
}

static void created_at(uint64_t n, char out[64])
{
    time_t t = (time_t)(BASE_EPOCH_S + (int64_t)(n / PER_SECOND));
    struct tm tm;

    gmtime_r(&t, &tm);
    snprintf(out, 64, "%04d-%02d-%02d %02d:%02d:%02d.%06u", tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
             (unsigned)(n % PER_SECOND) * (1000000u / PER_SECOND));
}

typedef struct {
    FILE *req, *ord;
} outputs;

static void one_record(const outputs *o, uint64_t n)
{
    uint64_t r = mix64(n ^ 0x5eedULL);
    int64_t id = record_id(n), user = 1 + (int64_t)(r % 1000);
    int n_orders = 1 + (int)((r >> 16) % 9);
    unsigned char digest[32];
    char hex[65], key[32], at[64];

    for (int i = 0; i < 4; i++) {
        uint64_t d = mix64(n * 4 + (uint64_t)i);

        memcpy(digest + i * 8, &d, 8);
    }
    ow_hex(digest, sizeof(digest), hex);
    snprintf(key, sizeof(key), "bench-%016" PRIx64, mix64(n));
    created_at(n, at);
    fprintf(o->req, "%" PRId64 "\t%" PRId64 "\t%s\t%s\tSUCCEEDED\t201\t", id, user, key, hex);
    fprintf(o->req,
            "{\"status\":201,\"code\":\"CREATED\",\"user_id\":%" PRId64
            ",\"idempotency_key\":\"%s\",\"request_digest\":\"%s\",\"orders\":[",
            user, key, hex);
    for (int i = 0; i < n_orders; i++) {
        uint64_t q = mix64(n * 64 + (uint64_t)i + 7);
        int64_t oid = id + 1 + i;
        unsigned cents = 1 + (unsigned)(q % 99999);
        char order_no[OW_ORDER_NO_LEN + 1];

        ow_order_no_format(oid, order_no);
        fprintf(o->req,
                "%s{\"index\":%d,\"external_order_no\":\"P%" PRIu64 "-%d\",\"order_id\":%" PRId64
                ",\"order_no\":\"%s\",\"amount\":\"%u.%02u\",\"existing\":false}",
                i ? "," : "", i, n, i, oid, order_no, cents / 100, cents % 100);
        fprintf(o->ord, "%" PRId64 "\t%s\t%" PRId64 "\tP%" PRIu64 "-%d\t%u.%02u\t", oid, order_no,
                user, n, i, cents / 100, cents % 100);
        if ((q >> 20) % 2)
            fprintf(o->ord, "%u", 1 + (unsigned)((q >> 24) % 5000));
        else
            fputs("\\N", o->ord);
        fprintf(o->ord, "\t%u\t%" PRId64 "\t%s\n",
                (q >> 40) % 4 ? 1u : 1 + (unsigned)((q >> 44) % 9), id, at);
    }
    fprintf(o->req, "]}\t%s\t%s\n", at, at);
}

int main(int argc, char **argv)
{
    outputs o;
    int64_t first, count;

    if (argc != 5 || ow_parse_int64(argv[1], &first) != 0 || ow_parse_int64(argv[2], &count) != 0 ||
        first < 0 || count < 0) {
        fputs("usage: ow-growth-gen FIRST COUNT REQUESTS.tsv ORDERS.tsv\n", stderr);
        return 2;
    }
    o.req = fopen(argv[3], "w");
    o.ord = fopen(argv[4], "w");
    if (o.req == NULL || o.ord == NULL) {
        perror("ow-growth-gen: open");
        return 1;
    }
    for (int64_t i = 1; i <= count; i++)
        one_record(&o, (uint64_t)(first + i));
    if (fclose(o.req) != 0 || fclose(o.ord) != 0) {
        perror("ow-growth-gen: write");
        return 1;
    }
    return 0;
}
