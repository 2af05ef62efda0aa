/*
 * ow-verify: checks the contract's invariants after a run, from the outside:
 * the input, results and dead-letter topics, the database and the group's
 * committed offsets. Prints one line per invariant and a figures line;
 * exits 1 on any violation. The invariants of the stored data alone (I1,
 * I2, I3, I7) are the audit's (ow_store_audit, as `order-worker audit` runs
 * them): one definition of each. The checks that compare the
 * topics with the database read it here.
 *
 *   ow-verify --bootstrap B --group G --input T --results T --dlq T
 *             --mysql-port P [--mysql-host H] [--mysql-user U] [--mysql-password PW]
 *             --database D [--faults FILE] [--failover-max-ms MS]
 *             [--shards LIST [--shard-buckets B]]
 *             [--read-committed [--settle-ms MS] [--lso-timeline FILE]
 *              [--worker-log FILE]...]
 *
 * With --read-committed, the results and dead letters are read with
 * isolation.level=read_committed, after waiting (at most --settle-ms,
 * default 90,000) until no open transaction holds back their end, and the
 * exactly-once checks are added: one definitive result per message and one
 * dead-letter copy per invalid message, nothing left behind the last stable
 * offset. It also reports the aborted records (read_uncommitted minus
 * read_committed), the txn_aborted lines of the worker logs, the last
 * stable offset's stalls after replica kills (an `ow-kit lso-watch`
 * timeline) and the recovery after each "broker-kill MS NODE" fault.
 *
 * --mysql-host may name the nodes of one cluster, comma-separated (the
 * mysql.host form): ow-verify reads the first that answers and, on
 * Galera, is Synced in the Primary component, with reads that wait for
 * every committed write; it also compares the worker's tables on every
 * node (CHECKSUM TABLE). Faults that last a while ("NAME-start MS N" ...
 * "NAME-end MS N" lines of the faults file) get their failover time and
 * the answers given during them; --failover-max-ms makes a fault whose
 * failover is slower than that, or no shorter than the fault, a violation.
 *
 * With --shards (mysql.shards syntax, user and password from
 * --mysql-*), the database checks run on every shard, each row must be on
 * its user's shard, and "shard-down MS N" / "shard-up MS N" lines of the
 * faults file give the shard outage's figures.
 */
#include <jansson.h>
#include <mysql.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kit.h"
#include "ow/store_audit.h"
#include "verify_cluster.h"
#include "verify_eos.h"
#include "ow/error.h"
#include "ow/htab.h"
#include "ow/idgen.h"
#include "ow/request.h"
#include "ow/shard.h"
#include "ow/store.h"
#include "ow/util.h"

/* --- A string-keyed index ---------------------------------------------- */

/* The keys are kept one after another in one buffer (each with its NUL),
 * an entry per key says where its key is and holds its value, and the
 * table files the entries' positions under the keys' hashes. */
typedef struct {
    size_t key; /* offset in keys */
    size_t val;
} ix_entry;

typedef struct {
    ow_htab tab;
    ow_buf keys;
    ix_entry *e;
    size_t n, cap;
} index_t;

static void out_of_memory(void)
{
    fprintf(stderr, "verify: out of memory\n");
    exit(2);
}

static void ix_init(index_t *ix, size_t expect)
{
    ix->cap = expect > 1024 ? expect : 1024;
    ix->e = malloc(ix->cap * sizeof(*ix->e));
    ix->n = 0;
    ow_buf_init(&ix->keys);
    if (ix->e == NULL || ow_htab_init(&ix->tab, ix->cap) != OW_OK)
        out_of_memory();
}

/* The value of key k, added (as 0) when create is set; NULL when k has
 * none and create is not set. The pointer holds until the next add. */
static size_t *ix_slot(index_t *ix, const char *k, int create)
{
    size_t len = strlen(k);
    uint64_t h = ow_hash64(k, len);
    ow_htab_walk w = OW_HTAB_START;
    uintptr_t i;

    while (ow_htab_next(&ix->tab, h, &w, &i)) {
        if (strcmp(ix->keys.data + ix->e[i].key, k) == 0)
            return &ix->e[i].val;
    }
    if (!create)
        return NULL;
    if (ix->n == ix->cap) {
        ix->cap *= 2;
        ix->e = realloc(ix->e, ix->cap * sizeof(*ix->e));
    }
    if (ix->e == NULL || ow_htab_put(&ix->tab, h, ix->n) != OW_OK)
        out_of_memory();
    ix->e[ix->n] = (ix_entry){ix->keys.len, 0};
    if (ow_buf_append(&ix->keys, k, len + 1) != OW_OK)
        out_of_memory();
    return &ix->e[ix->n++].val;
}

/* --- Inputs -------------------------------------------------------------- */

typedef struct {
    const kit_msg *m;
    int valid;   /* key and value pass validation */
    int results; /* definitive results seen */
    int dlq;     /* dead-letter copies seen */
    const kit_msg *first_result;
    int mismatched; /* definitive results with different bytes */
} input_t;

typedef struct {
    long long id;
    long long user_id;
    char *key;
    char digest[65];
    char status[16];
    int response_status;
    char *body;
    size_t body_len;
} record_t;

typedef struct {
    const char *bootstrap, *group, *in, *out, *dlq, *host, *user, *password, *database, *faults;
    unsigned port;
    const char *shards;
    uint32_t buckets;
    long long failover_max_ms; /* 0: failover times are only reported */
    int read_committed;
    int settle_ms;
    const char *timeline;
    const char *logs[EOS_MAX_LOGS];
    int n_logs;
} args_t;

/* The shards' connections; n is 0 without --shards. */
static struct {
    ow_shard_list list;
    MYSQL *db[OW_SHARD_MAX];
    uint32_t buckets;
    long long records[OW_SHARD_MAX];
    long long misplaced;
} shards;

static unsigned shard_of(long long user)
{
    return ow_shard_of_user(user, shards.buckets, shards.list.n);
}

static int violations;

static void verdict(const char *name, long long bad, const char *what)
{
    printf("verify: %-4s %-58s %s (%lld %s)\n", bad == 0 ? "ok" : "FAIL", name,
           bad == 0 ? "holds" : "VIOLATED", bad, what);
    if (bad != 0)
        violations++;
}

static long long sql_count(MYSQL *db, const char *sql)
{
    MYSQL_RES *r;
    MYSQL_ROW row;
    long long v = -1;

    if (mysql_query(db, sql) != 0) {
        fprintf(stderr, "verify: %s: %s\n", sql, mysql_error(db));
        return -1;
    }
    r = mysql_store_result(db);
    if (r != NULL && (row = mysql_fetch_row(r)) != NULL && row[0] != NULL)
        v = strtoll(row[0], NULL, 10);
    mysql_free_result(r);
    return v;
}

/* Reads the records of db into recs from *n on (growing it); shard is the
 * database's index among the shards, or -1. */
static record_t *load_records_from(MYSQL *db, record_t *recs, size_t *n, index_t *ix, int shard)
{
    MYSQL_RES *r;
    MYSQL_ROW row;
    size_t k = *n;

    if (mysql_query(db, "SELECT id, user_id, idempotency_key, HEX(request_digest), status, "
                        "response_status, response_body FROM idempotency_requests") != 0) {
        fprintf(stderr, "verify: %s\n", mysql_error(db));
        exit(2);
    }
    r = mysql_store_result(db);
    recs = realloc(recs, (k + mysql_num_rows(r) + 1) * sizeof(*recs));
    memset(recs + k, 0, (mysql_num_rows(r) + 1) * sizeof(*recs));
    while ((row = mysql_fetch_row(r)) != NULL) {
        unsigned long *len = mysql_fetch_lengths(r);
        record_t *rec = &recs[k];
        char ikey[160];

        rec->id = strtoll(row[0], NULL, 10);
        rec->user_id = strtoll(row[1], NULL, 10);
        rec->key = strndup(row[2], len[2]);
        for (int i = 0; i < 64; i++)
            rec->digest[i] =
                (char)(row[3][i] >= 'A' && row[3][i] <= 'F' ? row[3][i] + 32 : row[3][i]);
        snprintf(rec->status, sizeof(rec->status), "%s", row[4]);
        rec->response_status = (int)strtol(row[5], NULL, 10);
        rec->body = malloc(len[6] + 1);
        memcpy(rec->body, row[6], len[6]);
        rec->body[len[6]] = '\0';
        rec->body_len = len[6];
        snprintf(ikey, sizeof(ikey), "%lld\x1f%s", rec->user_id, rec->key);
        *ix_slot(ix, ikey, 1) = k;
        k++;
        if (shard >= 0) {
            shards.records[shard]++;
            shards.misplaced += shard_of(rec->user_id) != (unsigned)shard;
        }
    }
    mysql_free_result(r);
    *n = k;
    return recs;
}

static record_t *load_records(MYSQL *db, size_t *n, index_t *ix)
{
    record_t *recs = NULL;

    *n = 0;
    ix_init(ix, 1 << 16);
    if (shards.list.n == 0)
        return load_records_from(db, recs, n, ix, -1);
    for (unsigned i = 0; i < shards.list.n; i++) {
        char sql[160];

        recs = load_records_from(shards.db[i], recs, n, ix, (int)i);
        /* Orders on another shard than their user's. */
        snprintf(sql, sizeof(sql), "SELECT user_id FROM orders");
        if (mysql_query(shards.db[i], sql) == 0) {
            MYSQL_RES *r = mysql_store_result(shards.db[i]);
            MYSQL_ROW row;

            while (r != NULL && (row = mysql_fetch_row(r)) != NULL)
                shards.misplaced += shard_of(strtoll(row[0], NULL, 10)) != i;
            mysql_free_result(r);
        }
    }
    return recs;
}

/* --- Checks -------------------------------------------------------------- */

static int hdr_int(const kit_msg *m, const char *name, long long *v)
{
    char buf[64];

    if (!kit_header(m, name, buf, sizeof(buf)))
        return 0;
    *v = strtoll(buf, NULL, 10);
    return 1;
}

static const char *code_of(json_t *j)
{
    const char *c = json_string_value(json_object_get(j, "code"));

    return c != NULL ? c : "";
}

typedef struct {
    long long results, definitive, replays, in_progress, created, conflicts, reused, invalid;
    long long dlq, lost, mismatched, stored_mismatch, reuse_bad, body_orders_bad, order_bad;
    long long first_db_result_ms[64];
} tally_t;

static void check_created_orders(MYSQL *db, json_t *body, const record_t *rec, tally_t *t)
{
    json_t *orders = json_object_get(body, "orders");
    size_t i;
    json_t *o;

    json_array_foreach(orders, i, o)
    {
        char sql[512];
        long long id = json_integer_value(json_object_get(o, "order_id"));
        const char *amount = json_string_value(json_object_get(o, "amount"));
        int existing = json_is_true(json_object_get(o, "existing"));

        if (amount == NULL || strchr(amount, '\'') != NULL) {
            t->body_orders_bad++;
            continue;
        }
        snprintf(
            sql, sizeof(sql),
            "SELECT COUNT(*) FROM orders WHERE id = %lld AND user_id = %lld AND amount = '%s'%s",
            id, rec->user_id, amount, existing ? "" : " AND request_id = ");
        if (!existing)
            snprintf(sql + strlen(sql), sizeof(sql) - strlen(sql), "%lld", rec->id);
        if (sql_count(shards.list.n > 0 ? shards.db[shard_of(rec->user_id)] : db, sql) != 1)
            t->body_orders_bad++;
    }
}

static void check_result(MYSQL *db, const kit_msg *r, input_t *in, record_t *recs, index_t *recix,
                         tally_t *t)
{
    char replayed[8] = "";
    json_error_t jerr;
    json_t *j = json_loadb(r->value, r->len, 0, &jerr);
    const char *code;
    long long user = 0;

    t->results++;
    if (j == NULL) {
        t->mismatched++;
        return;
    }
    code = code_of(j);
    kit_header(r, "replayed", replayed, sizeof(replayed));
    if (strcmp(code, "REQUEST_IN_PROGRESS") == 0) {
        t->in_progress++;
        json_decref(j);
        return;
    }
    t->definitive++;
    t->replays += strcmp(replayed, "true") == 0;
    if (in != NULL) {
        in->results++;
        if (in->first_result == NULL)
            in->first_result = r;
        else if (in->first_result->len != r->len ||
                 memcmp(in->first_result->value, r->value, r->len) != 0)
            in->mismatched++;
    }
    if (strcmp(code, "INVALID_REQUEST") == 0) {
        t->invalid++;
    } else if (hdr_int(r, "user-id", &user)) {
        char ikey[160];
        size_t *slot;

        snprintf(ikey, sizeof(ikey), "%lld\x1f%.*s", user, (int)r->key_len, r->key);
        slot = ix_slot(recix, ikey, 0);
        if (strcmp(code, "IDEMPOTENCY_KEY_REUSED") == 0) {
            const char *d = json_string_value(json_object_get(j, "request_digest"));

            t->reused++;
            /* I6: a record exists for the key, with another digest. */
            if (slot == NULL || d == NULL || strcmp(recs[*slot].digest, d) == 0)
                t->reuse_bad++;
        } else {
            t->created += strcmp(code, "CREATED") == 0;
            t->conflicts += strcmp(code, "ORDER_ALREADY_EXISTS") == 0;
            /* I5: every result of a recorded request is its stored body. */
            if (slot == NULL || recs[*slot].body_len != r->len ||
                memcmp(recs[*slot].body, r->value, r->len) != 0)
                t->stored_mismatch++;
            else if (strcmp(code, "CREATED") == 0 && strcmp(replayed, "false") == 0)
                check_created_orders(db, j, &recs[*slot], t);
        }
    }
    json_decref(j);
}

/* Per (partition, user, key), the first definitive result of each message must
 * appear in offset order; repeats of an already published message (after a
 * redelivery) may come later. */
static long long order_violations(const kit_msgs *results)
{
    index_t seen, maxfirst;
    long long bad = 0;

    ix_init(&seen, results->n);
    ix_init(&maxfirst, results->n);
    for (size_t i = 0; i < results->n; i++) {
        const kit_msg *r = &results->v[i];
        long long part = -1, off = -1;
        long long user = 0;
        char k1[240], k2[264];
        size_t *max;

        if (r->key == NULL || r->len < 20 || strstr(r->value, "\"REQUEST_IN_PROGRESS\"") != NULL ||
            !hdr_int(r, "source-partition", &part) || !hdr_int(r, "source-offset", &off))
            continue;
        /* The scope of the order is (user, key): a message without a
         * readable user id is ordered with its key among user 0's. */
        if (!hdr_int(r, "user-id", &user))
            user = 0;
        snprintf(k1, sizeof(k1), "%lld\x1f%lld\x1f%.*s", part, user, (int)r->key_len, r->key);
        snprintf(k2, sizeof(k2), "%s\x1f%lld", k1, off);
        if (ix_slot(&seen, k2, 0) != NULL)
            continue;
        *ix_slot(&seen, k2, 1) = 1;
        max = ix_slot(&maxfirst, k1, 0);
        if (max != NULL && (long long)*max > off && bad++ < 3)
            printf("verify: inversion: partition %lld user %lld key %.*s: offset %lld's first "
                   "result left after offset %zu's\n",
                   part, user, (int)r->key_len, r->key, off, *max);
        if (max == NULL || (long long)*max < off)
            *ix_slot(&maxfirst, k1, 1) = (size_t)off;
    }
    return bad;
}

/* The input an output names in its source-partition and source-offset
 * headers, or NULL. */
static input_t *source_of(const kit_msg *out, index_t *src, input_t *ins)
{
    long long p = -1, o = -1;
    char k[64];
    size_t *slot;

    if (!hdr_int(out, "source-partition", &p) || !hdr_int(out, "source-offset", &o))
        return NULL;
    snprintf(k, sizeof(k), "%lld:%lld", p, o);
    slot = ix_slot(src, k, 0);
    return slot != NULL ? &ins[*slot] : NULL;
}

static void usage(void)
{
    fputs("usage: ow-verify --bootstrap B --group G --input T --results T --dlq T "
          "--mysql-port P [--mysql-host H] [--mysql-user U] [--mysql-password PW] --database D "
          "[--faults FILE] [--failover-max-ms MS] [--shards LIST [--shard-buckets B]] "
          "[--read-committed [--settle-ms MS] [--lso-timeline FILE] [--worker-log FILE]...]\n",
          stderr);
    exit(2);
}

/* The options of the exactly-once mode; 0 when k is one of them. */
static int parse_eos_arg(args_t *a, const char *k, const char *v)
{
    if (strcmp(k, "--settle-ms") == 0)
        a->settle_ms = (int)strtol(v, NULL, 10);
    else if (strcmp(k, "--lso-timeline") == 0)
        a->timeline = v;
    else if (strcmp(k, "--worker-log") == 0 && a->n_logs < EOS_MAX_LOGS)
        a->logs[a->n_logs++] = v;
    else
        return -1;
    return 0;
}

static void parse_args(int argc, char **argv, args_t *a)
{
    memset(a, 0, sizeof(*a));
    a->host = "127.0.0.1";
    a->buckets = OW_SHARD_BUCKETS_DEFAULT;
    a->user = "root";
    a->password = "";
    a->settle_ms = 90000;
    for (int i = 1; i < argc; i++) {
        const char *k = argv[i], *v;

        if (strcmp(k, "--read-committed") == 0) {
            a->read_committed = 1;
            continue;
        }
        if (i + 1 >= argc)
            usage();
        v = argv[++i];
        if (strcmp(k, "--bootstrap") == 0)
            a->bootstrap = v;
        else if (strcmp(k, "--group") == 0)
            a->group = v;
        else if (strcmp(k, "--input") == 0)
            a->in = v;
        else if (strcmp(k, "--results") == 0)
            a->out = v;
        else if (strcmp(k, "--dlq") == 0)
            a->dlq = v;
        else if (strcmp(k, "--mysql-host") == 0)
            a->host = v;
        else if (strcmp(k, "--mysql-port") == 0)
            a->port = (unsigned)strtoul(v, NULL, 10);
        else if (strcmp(k, "--mysql-user") == 0)
            a->user = v;
        else if (strcmp(k, "--mysql-password") == 0)
            a->password = v;
        else if (strcmp(k, "--database") == 0)
            a->database = v;
        else if (strcmp(k, "--faults") == 0)
            a->faults = v;
        else if (strcmp(k, "--shards") == 0)
            a->shards = v;
        else if (strcmp(k, "--shard-buckets") == 0)
            a->buckets = (uint32_t)strtoul(v, NULL, 10);
        else if (strcmp(k, "--failover-max-ms") == 0)
            a->failover_max_ms = strtoll(v, NULL, 10);
        else if (parse_eos_arg(a, k, v) != 0)
            usage();
    }
    if (!a->read_committed && a->n_logs > 0)
        usage();
    if (a->shards != NULL && a->port == 0)
        a->port = 3306; /* each entry names its own */
    if (!a->bootstrap || !a->group || !a->in || !a->out || !a->dlq || !a->port || !a->database)
        usage();
}

/* The first result at or after t (one that needed the database when db is
 * set), or -1. */
static long long first_result_after(const kit_msgs *results, long long t, int db)
{
    long long first = -1;

    for (size_t i = 0; i < results->n; i++) {
        const kit_msg *r = &results->v[i];

        if (r->timestamp_ms < t || (first >= 0 && r->timestamp_ms >= first))
            continue;
        if (db && strstr(r->value, "\"status\":400") != NULL)
            continue;
        first = r->timestamp_ms;
    }
    return first;
}

typedef struct {
    char name[32];
    long long t;
} fault_event;

/* 1 when a database or broker outage (or one broker's kill) covers t, or
 * begins between t and until (the kill's resume would then measure the
 * outage instead). */
static int outage_near(const fault_event *ev, size_t n, long long t, long long until)
{
    long long down_since = -1;

    for (size_t i = 0; i < n; i++) {
        int down = strcmp(ev[i].name, "mariadb-down") == 0 ||
                   strcmp(ev[i].name, "kafka-down") == 0 || strcmp(ev[i].name, "broker-kill") == 0;
        int up = strcmp(ev[i].name, "mariadb-up") == 0 || strcmp(ev[i].name, "kafka-up") == 0 ||
                 strcmp(ev[i].name, "broker-up") == 0;

        if (down) {
            down_since = ev[i].t;
            if (ev[i].t >= t && ev[i].t <= until)
                return 1;
        }
        if (up) {
            if (down_since >= 0 && down_since <= t && ev[i].t >= t)
                return 1;
            down_since = -1;
        }
    }
    return down_since >= 0 && down_since <= t;
}

/* Time from the end of each fault to the next result that needed the
 * database (or, for broker faults and restarts, any result). A kill whose
 * restart overlaps a database or broker outage is not counted: its resume
 * would measure the outage, which has its own figure. */
static void resume_times(const char *path, const kit_msgs *results)
{
    FILE *f = path != NULL ? fopen(path, "r") : NULL;
    fault_event ev[4096];
    size_t n = 0;
    long long worst_db = -1, worst_broker = -1, worst_kill = -1;
    int kills = 0, db_outages = 0, broker_outages = 0, scales = 0, restarts = 0, counted = 0;
    int broker_kills = 0;

    if (f == NULL)
        return;
    while (n < sizeof(ev) / sizeof(ev[0]) &&
           fscanf(f, "%31s %lld%*[^\n]", ev[n].name, &ev[n].t) == 2)
        n++;
    fclose(f);
    for (size_t i = 0; i < n; i++) {
        long long t = ev[i].t, first;

        kills += strcmp(ev[i].name, "kill") == 0;
        broker_kills += strcmp(ev[i].name, "broker-kill") == 0;
        scales += strcmp(ev[i].name, "scale-up") == 0;
        if (strcmp(ev[i].name, "mariadb-up") == 0) {
            db_outages++;
            first = first_result_after(results, t, 1);
            if (first >= 0 && first - t > worst_db)
                worst_db = first - t;
        } else if (strcmp(ev[i].name, "kafka-up") == 0) {
            broker_outages++;
            first = first_result_after(results, t, 0);
            if (first >= 0 && first - t > worst_broker)
                worst_broker = first - t;
        } else if (strcmp(ev[i].name, "restart") == 0) {
            restarts++;
            first = first_result_after(results, t, 0);
            if (first < 0 || outage_near(ev, n, t, first))
                continue;
            counted++;
            if (first - t > worst_kill)
                worst_kill = first - t;
        }
    }
    printf("verify: faults: kills=%d database_outages=%d broker_outages=%d broker_kills=%d "
           "scale_cycles=%d\n",
           kills, db_outages, broker_outages, broker_kills, scales);
    printf("verify: resume (fault end to next result, longest): database %lld ms, broker %lld ms, "
           "after a kill %lld ms (%d of %d restarts: those clear of the outages)\n",
           worst_db, worst_broker, worst_kill, counted, restarts);
}

/* --- Shards ------------------------------------------------------ */

static int connect_shards(const args_t *a)
{
    ow_error err;

    shards.buckets = a->buckets;
    if (a->shards == NULL)
        return 0;
    if (ow_shard_list_parse(a->shards, &shards.list, &err) != OW_OK) {
        fprintf(stderr, "verify: --shards: %s\n", err.msg);
        return -1;
    }
    for (unsigned i = 0; i < shards.list.n; i++) {
        ow_shard_addr *s = &shards.list.addr[i];

        if (s->port == 0)
            s->port = a->port;
        if (s->database[0] == '\0')
            snprintf(s->database, sizeof(s->database), "%s", a->database);
        shards.db[i] = mysql_init(NULL);
        if (mysql_real_connect(shards.db[i], s->host, a->user, a->password, s->database, s->port,
                               NULL, 0) == NULL) {
            fprintf(stderr, "verify: shard %u: %s\n", i, mysql_error(shards.db[i]));
            return -1;
        }
    }
    return 0;
}

/* 1 for a definitive, database-decided result (not 400, not interim) of
 * a user on shard s. */
static int decided_on(const kit_msg *r, unsigned s, long long *user)
{
    return strstr(r->value, "\"REQUEST_IN_PROGRESS\"") == NULL && hdr_int(r, "user-id", user) &&
           strstr(r->value, "\"status\":400") == NULL && shard_of(*user) == s;
}

static int is_replay(const kit_msg *r)
{
    char v[8] = "";

    return kit_header(r, "replayed", v, sizeof(v)) && strcmp(v, "true") == 0;
}

/* What left during a shard's outage. Its start is the "shard-down" line of
 * the faults file (written once the server stopped); its end is when the
 * shard answered again, observed in the data as the first first-time
 * answer (not a replay) for one of its users whose message was produced
 * after the start (the script's "shard-up" line comes later: its readiness
 * check polls). A replay cannot mark the end: a lane's retry cache (issue
 * 12) answers a retry of a key it committed without the shard. Reported:
 * the definitive results for the other shards' users and for its own in
 * that window, and of its own how many were such replays; then how many of
 * its users' messages sent before its return were answered after it, and
 * how long after its return the last one was. */
static void shard_outage(const char *path, const kit_msgs *results, index_t *src, input_t *ins)
{
    FILE *f = path != NULL ? fopen(path, "r") : NULL;
    char line[256], name[32];
    long long t, down = -1, up = -1, back = -1, others = 0, own = 0, own_replays = 0;
    long long stalled = 0, last = -1;
    unsigned s = 0, which = 0;

    if (f == NULL)
        return;
    while (fgets(line, sizeof(line), f) != NULL) {
        if (sscanf(line, "%31s %lld %u", name, &t, &which) != 3)
            continue;
        if (strcmp(name, "shard-down") == 0) {
            down = t;
            s = which;
        } else if (strcmp(name, "shard-up") == 0 && which == s) {
            up = t;
        }
    }
    fclose(f);
    if (down < 0 || up < 0)
        return;
    for (size_t i = 0; i < results->n; i++) {
        const kit_msg *r = &results->v[i];
        const input_t *in = source_of(r, src, ins);
        long long user = 0;

        if (decided_on(r, s, &user) && !is_replay(r) && in != NULL && in->m->timestamp_ms > down &&
            r->timestamp_ms > down && (back < 0 || r->timestamp_ms < back))
            back = r->timestamp_ms;
    }
    if (back < 0)
        back = up;
    for (size_t i = 0; i < results->n; i++) {
        const kit_msg *r = &results->v[i];
        const input_t *in = source_of(r, src, ins);
        long long user = 0;
        int mine = decided_on(r, s, &user);

        if (r->timestamp_ms >= down && r->timestamp_ms < back) {
            own += mine;
            own_replays += mine && is_replay(r);
            others += !mine && hdr_int(r, "user-id", &user) &&
                      strstr(r->value, "\"REQUEST_IN_PROGRESS\"") == NULL &&
                      strstr(r->value, "\"status\":400") == NULL;
        }
        if (mine && r->timestamp_ms >= back && in != NULL && in->m->timestamp_ms < back &&
            in->first_result == r) {
            stalled++;
            if (r->timestamp_ms - back > last)
                last = r->timestamp_ms - back;
        }
    }
    printf("verify: shard outage: shard %u down %lld ms (%lld ms by the script's check); "
           "results during it: %lld for the other shards' users, %lld for its own (%lld of them "
           "replays from a retry cache); its messages answered after it returned: %lld, the last "
           "%lld ms after\n",
           s, back - down, up - down, others, own, own_replays, stalled, last);
}

static int cmp_ll(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;

    return (x > y) - (x < y);
}

/* The faults file's window "NAME_START MS N" ... "NAME_END MS N"; 0 when
 * it has none. */
static int fault_window(const char *path, const char *start, const char *end, long long *from,
                        long long *until, unsigned *which)
{
    FILE *f = path != NULL ? fopen(path, "r") : NULL;
    char line[256], name[32];
    long long t;
    unsigned n = 0;

    *from = *until = -1;
    if (f == NULL)
        return 0;
    while (fgets(line, sizeof(line), f) != NULL) {
        if (sscanf(line, "%31s %lld %u", name, &t, &n) != 3)
            continue;
        if (strcmp(name, start) == 0) {
            *from = t;
            *which = n;
        } else if (strcmp(name, end) == 0 && n == *which) {
            *until = t;
        }
    }
    fclose(f);
    return *from >= 0 && *until > *from;
}

/* A shard that hangs (its server stopped with SIGSTOP, "shard-hang" and
 * "shard-resume" lines of the faults file) must cost only its own users:
 * the other shards' users keep getting definitive results. Reported: how
 * many they got while it hung and the longest gap between two of them
 * (the window's edges count as results), which fails the run at 3 s or
 * more. Returns the number of violations (0 or 1), or -1 when the faults
 * file has no hang. */
static long long shard_hang(const char *path, const kit_msgs *results)
{
    long long from, until, gap, prev, n = 0, own = 0;
    unsigned s = 0;
    long long *t;

    if (!fault_window(path, "shard-hang", "shard-resume", &from, &until, &s))
        return -1;
    t = calloc(results->n + 1, sizeof(*t));
    if (t == NULL)
        return 1;
    for (size_t i = 0; i < results->n; i++) {
        const kit_msg *r = &results->v[i];
        long long user = 0;

        if (r->timestamp_ms < from || r->timestamp_ms > until || !hdr_int(r, "user-id", &user) ||
            strstr(r->value, "\"REQUEST_IN_PROGRESS\"") != NULL ||
            strstr(r->value, "\"status\":400") != NULL)
            continue;
        if (shard_of(user) == s)
            own++;
        else
            t[n++] = r->timestamp_ms;
    }
    qsort(t, (size_t)n, sizeof(*t), cmp_ll);
    gap = 0;
    prev = from;
    for (long long i = 0; i <= n; i++) {
        long long at = i < n ? t[i] : until;

        if (at - prev > gap)
            gap = at - prev;
        prev = at;
    }
    free(t);
    printf("verify: shard hang: shard %u hung %lld ms; results during it: %lld for the other "
           "shards' users, the longest gap between them %lld ms; %lld for its own\n",
           s, until - from, n, gap, own);
    return gap >= 3000 || n == 0;
}

/* --- Faults that last a while (the galera tier) --------------------------- */

typedef struct {
    char name[32];
    long long t;
    unsigned node;
} window_ev;

typedef struct {
    long long results, first, replays, in_progress, invalid;
} answers_t;

#define WINDOW_PARTS 256

/* A decision committed when it was answered: a first 201 (a 409 needs
 * only a read, a replay not even that). */
static int committed_now(const kit_msg *r)
{
    return strstr(r->value, "\"code\":\"CREATED\"") != NULL && !is_replay(r);
}

/* Per input partition, the first decision committed at or after t for a
 * message produced at or after t (a result published after t for a
 * decision committed before it does not show that the service moved on).
 * *first is the earliest of them, *all the latest: when every partition
 * decided again. Returns how many partitions had one. */
static int decisions_after(const kit_msgs *results, index_t *src, input_t *ins, long long t,
                           long long *first, long long *all)
{
    long long per[WINDOW_PARTS];
    int counted = 0;

    for (int p = 0; p < WINDOW_PARTS; p++)
        per[p] = -1;
    for (size_t i = 0; i < results->n; i++) {
        const kit_msg *r = &results->v[i];
        const input_t *in;
        int p;

        if (r->timestamp_ms < t || !committed_now(r))
            continue;
        in = source_of(r, src, ins);
        if (in == NULL || in->m->timestamp_ms < t || in->m->partition < 0 ||
            in->m->partition >= WINDOW_PARTS)
            continue;
        p = in->m->partition;
        if (per[p] < 0 || r->timestamp_ms < per[p])
            per[p] = r->timestamp_ms;
    }
    *first = *all = -1;
    for (int p = 0; p < WINDOW_PARTS; p++) {
        if (per[p] < 0)
            continue;
        counted++;
        if (*first < 0 || per[p] < *first)
            *first = per[p];
        if (per[p] > *all)
            *all = per[p];
    }
    return counted;
}

static void count_answers(const kit_msgs *results, long long from, long long until, answers_t *a)
{
    memset(a, 0, sizeof(*a));
    for (size_t i = 0; i < results->n; i++) {
        const kit_msg *r = &results->v[i];

        if (r->timestamp_ms < from || r->timestamp_ms > until)
            continue;
        a->results++;
        if (strstr(r->value, "\"REQUEST_IN_PROGRESS\"") != NULL)
            a->in_progress++;
        else if (strstr(r->value, "\"status\":400") != NULL)
            a->invalid++;
        else if (is_replay(r))
            a->replays++;
        else
            a->first++;
    }
}

/* One fault from its start event s to its end event e; 1 when its
 * failover (every partition deciding again) breaks the bound. */
static int report_window(const window_ev *s, const window_ev *e, const kit_msgs *results,
                         index_t *src, input_t *ins, long long max_ms)
{
    long long first, all, lasted = e->t - s->t;
    int parts = decisions_after(results, src, ins, s->t, &first, &all);
    long long failover = all >= 0 ? all - s->t : -1;
    answers_t a;
    int bad;

    count_answers(results, s->t, e->t, &a);
    bad = max_ms > 0 && (failover < 0 || failover > max_ms || failover >= lasted);
    printf("verify: fault %.*s (node %u): lasted %lld ms; failover %lld ms (every partition "
           "deciding again, %d partitions; the first after %lld ms); answers while it lasted: "
           "%lld (first-time %lld, replays %lld, in progress %lld, invalid %lld)%s\n",
           (int)(strlen(s->name) - 6), s->name, s->node, lasted, failover, parts,
           first >= 0 ? first - s->t : -1, a.results, a.first, a.replays, a.in_progress, a.invalid,
           bad ? " SLOW" : "");
    return bad;
}

/* Every "NAME-start MS N" of the faults file with the next "NAME-end MS N"
 * after it. The failover time is from the start until every input
 * partition had a decision committed for a message sent after the start.
 * Returns the number of faults
 * whose failover is missing, above max_ms or not shorter than the fault
 * (the service came back only with the node), or -1 when the file has
 * none. */
static long long fault_windows(const char *path, const kit_msgs *results, index_t *src,
                               input_t *ins, long long max_ms)
{
    FILE *f = path != NULL ? fopen(path, "r") : NULL;
    static window_ev ev[1024];
    char line[256], end[40];
    size_t n = 0;
    long long bad = 0, found = 0;

    if (f == NULL)
        return -1;
    while (n < sizeof(ev) / sizeof(ev[0]) && fgets(line, sizeof(line), f) != NULL) {
        ev[n].node = 0;
        if (sscanf(line, "%31s %lld %u", ev[n].name, &ev[n].t, &ev[n].node) >= 2)
            n++;
    }
    fclose(f);
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(ev[i].name);

        if (len <= 6 || strcmp(ev[i].name + len - 6, "-start") != 0)
            continue;
        snprintf(end, sizeof(end), "%.*s-end", (int)(len - 6), ev[i].name);
        for (size_t j = i + 1; j < n; j++) {
            if (strcmp(ev[j].name, end) == 0 && ev[j].node == ev[i].node) {
                bad += report_window(&ev[i], &ev[j], results, src, ins, max_ms);
                found++;
                break;
            }
        }
    }
    return found > 0 ? bad : -1;
}

/* The audit maps onto the lines below: I1 duplicate request keys, I2
 * duplicate orders, I3 orders without a SUCCEEDED request (which contains
 * the FAILED requests owning orders), I7 requests not in a final state. A
 * new audit check must get its line here. */
_Static_assert(OW_AUDIT_CHECK_COUNT == 5, "ow-verify: report the new audit check");

/* Runs the project's audit in one snapshot; 0 or -1 (reported). */
static int audit_one(const args_t *a, unsigned shard, ow_audit_report *rep);

/* The audit of every shard, findings and row counts summed. */
static int audit(const args_t *a, ow_audit_report *rep)
{
    if (shards.list.n == 0)
        return audit_one(a, 0, rep);
    for (unsigned i = 0; i < shards.list.n; i++) {
        ow_audit_report one;

        if (audit_one(a, i, &one) != 0)
            return -1;
        if (i == 0) {
            *rep = one;
            continue;
        }
        rep->requests += one.requests;
        rep->orders += one.orders;
        for (int c = 0; c < OW_AUDIT_CHECK_COUNT; c++)
            rep->checks[c].findings += one.checks[c].findings;
    }
    return 0;
}

static int audit_one(const args_t *a, unsigned shard, ow_audit_report *rep)
{
    ow_store_params p;
    ow_idgen ids;
    ow_error err;
    ow_store *s;
    int rc;

    memset(&p, 0, sizeof(p));
    p.host = a->host;
    p.port = a->port;
    p.user = a->user;
    p.password = a->password;
    p.database = a->database;
    if (shards.list.n > 0) {
        p.host = shards.list.addr[shard].host;
        p.port = shards.list.addr[shard].port;
        p.database = shards.list.addr[shard].database;
    }
    p.connect_timeout_s = 10;
    p.lock_wait_timeout_s = 50;
    ow_idgen_init(&ids, 0, ow_clock_wall_ms);
    s = ow_store_new(&p, &ids);
    if (s == NULL) {
        fprintf(stderr, "verify: out of memory\n");
        return -1;
    }
    rc = ow_store_audit(s, rep, &err);
    if (rc != OW_OK)
        fprintf(stderr, "verify: audit: %s\n", err.msg);
    ow_store_free(&s);
    return rc == OW_OK ? 0 : -1;
}

static long long findings(const ow_audit_report *rep, ow_audit_check_id id)
{
    return (long long)rep->checks[id].findings;
}

/* The results and dead letters as the mode reads them. With
 * --read-committed, it first waits until no transaction holds back their
 * ends; *behind_lso gets the records still behind a last stable offset then. */
static int read_outputs(const args_t *a, kit_msgs *results, kit_msgs *dlq, long long *behind_lso)
{
    kit_isolation iso = a->read_committed ? KIT_READ_COMMITTED : KIT_READ_DEFAULT;
    const char *topics[2] = {a->out, a->dlq};

    *behind_lso = 0;
    for (int i = 0; a->read_committed && i < 2; i++) {
        long long waited = 0, behind = eos_settle(a->bootstrap, topics[i], a->settle_ms, &waited);

        if (behind < 0) {
            fprintf(stderr, "verify: cannot read the offsets of %s\n", topics[i]);
            return -1;
        }
        printf("verify: %s: %lld records behind the last stable offset after %lld ms\n", topics[i],
               behind, waited);
        *behind_lso += behind;
    }
    if (kit_read_topic_iso(a->bootstrap, a->out, 120000, iso, results) != 0 ||
        kit_read_topic_iso(a->bootstrap, a->dlq, 120000, iso, dlq) != 0)
        return -1;
    return 0;
}

/* Aborted records of the results and dead-letter topics: what a
 * read_uncommitted consumer reads beyond the committed ones. */
static long long aborted_records(const args_t *a, const kit_msgs *results, const kit_msgs *dlq,
                                 long long *runs)
{
    kit_msgs r = {0}, d = {0};
    long long n = -1, runs_d = 0;

    if (kit_read_topic_iso(a->bootstrap, a->out, 120000, KIT_READ_UNCOMMITTED, &r) == 0 &&
        kit_read_topic_iso(a->bootstrap, a->dlq, 120000, KIT_READ_UNCOMMITTED, &d) == 0)
        n = eos_aborted_records(results, &r, runs) + eos_aborted_records(dlq, &d, &runs_d);
    *runs += runs_d;
    kit_msgs_free(&r);
    kit_msgs_free(&d);
    return n;
}

/* The exactly-once checks and figures (--read-committed); tl is the LSO
 * timeline or NULL, recovery what eos_recovery found. */
static void exactly_once(const args_t *a, const input_t *ins, size_t n, const kit_msgs *results,
                         const kit_msgs *dlq, long long lost, long long behind_lso,
                         const eos_timeline *tl, const char *recovery)
{
    long long dup_results = 0, dup_dlq = 0, runs = 0, aborted, logged;
    eos_stalls st = {0};

    for (size_t i = 0; i < n; i++) {
        dup_results += ins[i].results > 1 ? ins[i].results - 1 : 0;
        dup_dlq += ins[i].dlq > 1 ? ins[i].dlq - 1 : 0;
    }
    verdict("EO exactly one definitive result per message", dup_results, "duplicate results");
    verdict("EO exactly one dead-letter copy per invalid message", dup_dlq, "duplicate copies");
    verdict("EO no transaction left open at the end", behind_lso, "records behind the LSO");
    aborted = aborted_records(a, results, dlq, &runs);
    logged = eos_logged_aborts(a->logs, a->n_logs);
    if (tl != NULL)
        eos_lso_stalls(tl, a->faults, &st);
    printf("verify: exactly-once figures: duplicate_results=%lld duplicate_dead_letters=%lld "
           "lost=%lld aborted_records=%lld (in %lld runs) txn_aborted_logged=%lld "
           "lso_stall_after_kill_max_ms=%lld p50=%lld (kills holding it %d of %d) "
           "lso_stall_max_ms=%lld broker_kill_recovery_ms(next/all):%s\n",
           dup_results, dup_dlq, lost, aborted, runs, logged,
           tl != NULL ? st.after_kill_max_ms : -1, tl != NULL ? st.after_kill_p50_ms : -1,
           st.kills_held, st.kills, tl != NULL ? st.max_ms : -1,
           recovery[0] != '\0' ? recovery : " none");
}

/* What one verification reads and counts, from the topics to the verdicts. */
typedef struct {
    args_t a;
    kit_msgs inputs, results, dlq;
    index_t src, recix;
    input_t *ins;
    record_t *recs;
    size_t n_recs;
    tally_t t;
    ow_audit_report rep;
    MYSQL *db;
    char node[256];
    vc_target cluster;
    long long lag, dlq_bad, valid, behind_lso;
} run_t;

/* The topics, the database (the node it reached serves the audit too),
 * the audit and the stored records; 0, or -1 with the reason printed. */
static int load(run_t *r)
{
    if (kit_read_topic(r->a.bootstrap, r->a.in, 120000, &r->inputs) != 0 ||
        read_outputs(&r->a, &r->results, &r->dlq, &r->behind_lso) != 0) {
        fprintf(stderr, "verify: cannot read the topics\n");
        return -1;
    }
    r->cluster = (vc_target){r->a.host, r->a.port, r->a.user, r->a.password, r->a.database};
    r->db = vc_connect(&r->cluster, r->node, sizeof(r->node));
    if (r->db == NULL)
        return -1;
    r->a.host = r->node;
    if (connect_shards(&r->a) != 0 || audit(&r->a, &r->rep) != 0)
        return -1;
    r->recs = load_records(r->db, &r->n_recs, &r->recix);
    return 0;
}

/* Each input message: valid or not, and where it is, for the outputs that
 * name it. */
static void index_inputs(run_t *r)
{
    const ow_request_limits limits = {1 << 20, 1000};

    r->ins = calloc(r->inputs.n + 1, sizeof(*r->ins));
    ix_init(&r->src, r->inputs.n);
    for (size_t i = 0; i < r->inputs.n; i++) {
        char k[64];
        ow_request req;
        ow_field_errors errs;
        const kit_msg *m = &r->inputs.v[i];

        r->ins[i].m = m;
        ow_field_errors_init(&errs);
        r->ins[i].valid = ow_request_check_key(m->key, m->key_len, &errs) == 0 &&
                          ow_request_parse(m->value, m->len, &limits, &req, &errs) == 0;
        ow_request_cleanup(&req);
        r->valid += r->ins[i].valid;
        snprintf(k, sizeof(k), "%d:%lld", m->partition, (long long)m->offset);
        *ix_slot(&r->src, k, 1) = i;
    }
}

/* Every result against its input and the stored record; every dead letter
 * against its input's bytes; then what no output answered. */
static void check_outputs(run_t *r)
{
    for (size_t i = 0; i < r->results.n; i++) {
        input_t *in = source_of(&r->results.v[i], &r->src, r->ins);

        check_result(r->db, &r->results.v[i], in, r->recs, &r->recix, &r->t);
    }
    for (size_t i = 0; i < r->dlq.n; i++) {
        input_t *in = source_of(&r->dlq.v[i], &r->src, r->ins);

        if (in == NULL || in->valid || r->dlq.v[i].len > in->m->len ||
            memcmp(r->dlq.v[i].value, in->m->value, r->dlq.v[i].len) != 0)
            r->dlq_bad++;
        else
            in->dlq++;
    }
    for (size_t i = 0; i < r->inputs.n; i++) {
        const input_t *in = &r->ins[i];

        if ((in->m->key_len > 0 && in->results == 0) || (!in->valid && in->dlq == 0))
            r->t.lost++;
        if (in->mismatched > 0)
            r->t.mismatched++;
    }
}

/* The group's lag over every partition of the input (-1: not known). */
static void group_lag(run_t *r)
{
    int64_t ends[256], committed[256], part_lag[256];
    int parts = kit_group_lag(r->a.bootstrap, r->a.group, r->a.in, 256, committed, ends, part_lag);

    r->lag = parts <= 0 ? -1 : 0;
    for (int p = 0; r->lag >= 0 && p < parts; p++)
        r->lag += part_lag[p];
}

/* I1-I7 and the order of results, then the figures line. */
static void report_invariants(const run_t *r)
{
    const tally_t *t = &r->t;
    const ow_audit_report *rep = &r->rep;

    verdict("I1 one request record per (user_id, key)", findings(rep, OW_AUDIT_DUPLICATE_REQUESTS),
            "duplicate keys");
    verdict("I2 no two orders with one (user_id, external_order_no)",
            findings(rep, OW_AUDIT_DUPLICATE_ORDERS), "duplicate orders");
    verdict("I3 every order belongs to a SUCCEEDED request",
            findings(rep, OW_AUDIT_ORDERS_WITHOUT_SUCCESS), "orphan or FAILED-owned orders");
    verdict("I3 results' created orders exist as stated", t->body_orders_bad, "mismatches");
    verdict("I4 every message has its result / dead letter (lost)", t->lost, "lost");
    verdict("I4 dead letters are the original bytes of invalid messages", r->dlq_bad, "bad copies");
    verdict("I4 committed offsets reach the end of every partition", r->lag, "messages of lag");
    verdict("I5 all results of a message are byte-identical", t->mismatched, "non-identical");
    verdict("I5 every recorded result equals the stored response", t->stored_mismatch,
            "mismatches");
    verdict("I6 a reused key never changed its record", t->reuse_bad, "violations");
    verdict("I7 no record left in a processing state", findings(rep, OW_AUDIT_NOT_FINAL),
            "stuck records");
    verdict("per (user, key), results leave in consumption order", order_violations(&r->results),
            "inversions");
    printf("verify: figures: messages_in=%zu valid=%lld results_out=%lld definitive=%lld "
           "replays=%lld in_progress=%lld created=%lld order_conflicts=%lld key_reused=%lld "
           "invalid=%lld dead_letters=%zu records=%zu orders=%lld lost=%lld duplicate_orders=%lld "
           "stuck=%lld non_identical_replays=%lld final_lag=%lld\n",
           r->inputs.n, r->valid, t->results, t->definitive, t->replays, t->in_progress, t->created,
           t->conflicts, t->reused, t->invalid, r->dlq.n, r->n_recs, (long long)rep->orders,
           t->lost, findings(rep, OW_AUDIT_DUPLICATE_ORDERS), findings(rep, OW_AUDIT_NOT_FINAL),
           t->mismatched + t->stored_mismatch, r->lag);
}

/* With shards: every row on its user's shard, records per shard, and the
 * shard outage's and hang's figures. */
static void report_shards(run_t *r)
{
    long long hang;

    if (shards.list.n == 0)
        return;
    verdict("I1-I3 every row is on its user's shard", shards.misplaced, "misplaced rows");
    printf("verify: shards: %u, request records per shard:", shards.list.n);
    for (unsigned i = 0; i < shards.list.n; i++)
        printf(" %u=%lld", i, shards.records[i]);
    printf("\n");
    shard_outage(r->a.faults, &r->results, &r->src, r->ins);
    hang = shard_hang(r->a.faults, &r->results);
    if (hang >= 0)
        verdict("a hung shard holds up only its own users (gap < 3 s)", hang, "violations");
}

/* The faults file's figures (resumes, failovers), the cluster's nodes
 * compared, the broker kills' recoveries and, reading committed, the
 * exactly-once checks. */
static void report_faults(run_t *r)
{
    long long nodes_bad, windows_bad;
    eos_timeline tl;
    int have_tl;
    char recovery[1024] = "";

    resume_times(r->a.faults, &r->results);
    windows_bad = fault_windows(r->a.faults, &r->results, &r->src, r->ins, r->a.failover_max_ms);
    if (r->a.failover_max_ms > 0)
        verdict("every fault's failover within the bound and the fault",
                windows_bad < 0 ? 1 : windows_bad, "slow or missing failovers");
    nodes_bad = vc_compare_nodes(&r->cluster, r->node);
    if (nodes_bad >= 0)
        verdict("every node of the cluster holds the same rows", nodes_bad,
                "differing or unsynced nodes");
    have_tl = r->a.timeline != NULL && eos_timeline_load(r->a.timeline, &tl) == 0;
    eos_recovery(have_tl ? &tl : NULL, &r->results, r->a.faults, recovery, sizeof(recovery));
    if (recovery[0] != '\0')
        printf("verify: broker kills, recovery in ms (kill to the next result / to a result in "
               "every results partition):%s\n",
               recovery);
    if (r->a.read_committed)
        exactly_once(&r->a, r->ins, r->inputs.n, &r->results, &r->dlq, r->t.lost, r->behind_lso,
                     have_tl ? &tl : NULL, recovery);
    if (have_tl)
        eos_timeline_free(&tl);
}

int main(int argc, char **argv)
{
    static run_t r;

    parse_args(argc, argv, &r.a);
    if (load(&r) != 0)
        return 2;
    index_inputs(&r);
    check_outputs(&r);
    group_lag(&r);
    report_invariants(&r);
    report_shards(&r);
    report_faults(&r);
    printf("verify: %s\n", violations == 0 ? "all invariants hold" : "INVARIANTS VIOLATED");
    mysql_close(r.db);
    return violations == 0 ? 0 : 1;
}
