/* order-worker lookup: one request record and its orders as JSON. */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "archive.h"
#include "record_json.h"
#include "ow/store_lookup.h"
#include "cli.h"

void ow_help_lookup(void)
{
    puts("usage: order-worker lookup --user U --key K [--config FILE]\n"
         "       order-worker lookup --archive DIR --user U --key K\n"
         "\n"
         "Prints the stored request record of user U and idempotency key K as JSON on\n"
         "stdout: id, user_id, idempotency_key, status, request_digest,\n"
         "response_status, created_at and updated_at (the database's time zone),\n"
         "the orders this request created (an order an earlier request had already\n"
         "created is listed in the response, not here), and the stored response\n"
         "body embedded as JSON. With mysql.shards set, it reads the user's shard\n"
         "(docs/contract.md, \"Shard routing\").\n"
         "\n"
         "With --archive DIR it reads no database: it searches the files that\n"
         "`order-worker purge --archive DIR` wrote and prints the archived record\n"
         "(id, user_id, idempotency_key, request_digest, status, response_status,\n"
         "response_body as the stored string, created_at, orders' id and order_no),\n"
         "plus archive_file (the file of the copy printed), archive_copies (a record\n"
         "archived again after a crash is there more than once), archive_copies_differ\n"
         "and archive_files_unreadable. Of differing copies (files written before\n"
         "purge locked its chunks may hold one without its orders) it prints the one\n"
         "with the most orders, whatever the files are named. A file that cannot be\n"
         "read to its end (truncated, damaged) is skipped with a warning on stderr\n"
         "naming it; when the record is then not found, the exit status is 1, not 3,\n"
         "since that file may hold it.\n"
         "\n"
         "Exit status: 0 found, 3 no such record, 1 database error or (--archive) an\n"
         "unreadable file and no record, 2 bad arguments or configuration.");
}

static json_t *order_json(const ow_record_order *o)
{
    json_t *j = json_object();
    int bad = j == NULL;

    if (bad)
        return NULL;
    bad |= ow_json_put(j, "order_id", json_integer(o->id));
    bad |= ow_json_put(j, "order_no", json_string(o->order_no));
    bad |= ow_json_put(j, "external_order_no", json_stringn(o->external_order_no, o->ext_len));
    bad |= ow_json_put(j, "amount", json_string(o->amount));
    bad |=
        ow_json_put(j, "product_id", o->product_id > 0 ? json_integer(o->product_id) : json_null());
    bad |= ow_json_put(j, "quantity", json_integer(o->quantity));
    if (bad)
        json_decref(j);
    return bad ? NULL : j;
}

static json_t *orders_json(const ow_record *r)
{
    json_t *a = json_array();

    for (size_t i = 0; a != NULL && i < r->n_orders; i++) {
        if (json_array_append_new(a, order_json(&r->orders[i])) != 0) {
            json_decref(a);
            a = NULL;
        }
    }
    return a;
}

/* The stored body as embedded JSON; null when it does not parse (it always
 * should: the worker stores what it built). */
static json_t *response_json(const ow_record *r)
{
    json_error_t jerr;
    json_t *j = json_loadb(r->response.data, r->response.len, 0, &jerr);

    if (j == NULL) {
        fprintf(stderr, "order-worker lookup: the stored response body is not valid JSON (%s)\n",
                jerr.text);
        j = json_null();
    }
    return j;
}

static json_t *record_json(const ow_record *r)
{
    char created[OW_TIMESTAMP_TEXT_MAX], updated[OW_TIMESTAMP_TEXT_MAX];
    json_t *j = ow_record_json_head(r);
    int bad = j == NULL;

    if (bad)
        return NULL;
    ow_timestamp_format(&r->created_at, created);
    ow_timestamp_format(&r->updated_at, updated);
    bad |= ow_json_put(j, "status", json_string(r->status));
    bad |= ow_json_put(j, "request_digest", json_string(r->digest_hex));
    bad |= ow_json_put(j, "response_status", json_integer(r->response_status));
    bad |= ow_json_put(j, "created_at", json_string(created));
    bad |= ow_json_put(j, "updated_at", json_string(updated));
    bad |= ow_json_put(j, "orders", orders_json(r));
    bad |= ow_json_put(j, "response", response_json(r));
    if (bad)
        json_decref(j);
    return bad ? NULL : j;
}

static int print_record(const ow_record *r)
{
    json_t *j = record_json(r);
    int rc = -1;

    if (j != NULL && json_dumpf(j, stdout, JSON_INDENT(2)) == 0 && fputc('\n', stdout) != EOF)
        rc = 0;
    json_decref(j);
    return rc;
}

/* Validates --user and --key; returns OW_EXIT_OK or OW_EXIT_USAGE. */
static int lookup_args(int argc, char **argv, int64_t *user, const char **key)
{
    static const char *const known[] = {"--config", "--user", "--key", "--archive", NULL};
    ow_field_errors errs;

    if (ow_cli_args(argc, argv, known, "lookup", NULL, 0) < 0 ||
        ow_cli_user(argc, argv, "lookup", user) != 0)
        return OW_EXIT_USAGE;
    *key = ow_cli_required(argc, argv, "--key", "lookup");
    if (*key == NULL)
        return OW_EXIT_USAGE;
    ow_field_errors_init(&errs);
    if (ow_request_check_key(*key, strlen(*key), &errs) != OW_OK) {
        fprintf(stderr, "order-worker lookup: --key: %s\n",
                errs.count > 0 ? errs.items[0].message : "not a valid idempotency key");
        return OW_EXIT_USAGE;
    }
    return OW_EXIT_OK;
}

static int lookup_print(ow_store *s, int64_t user, const char *key)
{
    ow_record rec;
    ow_error err;
    int code = OW_EXIT_OK;
    int rc;

    ow_record_init(&rec);
    rc = ow_store_lookup(s, user, key, strlen(key), &rec, &err);
    if (rc == OW_ENOTFOUND) {
        fprintf(stderr, "order-worker lookup: no request for user %lld with key %s\n",
                (long long)user, key);
        code = OW_EXIT_NOT_FOUND;
    } else if (rc != OW_OK) {
        fprintf(stderr, "order-worker lookup: %s\n", err.msg);
        code = ow_cli_exit_for(&err);
    } else if (print_record(&rec) != 0) {
        fprintf(stderr, "order-worker lookup: cannot write the record\n");
        code = OW_EXIT_FAILURE;
    }
    ow_record_cleanup(&rec);
    return code;
}

/* The files that could not be read, on stderr. */
static void warn_unreadable(const ow_archive_hit *h)
{
    for (size_t i = 0; i < h->n_unreadable; i++)
        fprintf(stderr, "order-worker lookup: warning: skipped %s; none of its records were read\n",
                h->unreadable[i]);
}

static int print_archived(ow_archive_hit *h)
{
    json_t *j = h->record;
    int bad;

    if (h->differ)
        fprintf(stderr,
                "order-worker lookup: warning: the %d archived copies of this record differ; "
                "printed the one with the most orders, from %s\n",
                h->copies, h->file);
    bad = json_object_set_new(j, "archive_file", json_string(h->file)) != 0 ||
          json_object_set_new(j, "archive_copies", json_integer(h->copies)) != 0 ||
          json_object_set_new(j, "archive_copies_differ", json_boolean(h->differ)) != 0 ||
          json_object_set_new(j, "archive_files_unreadable",
                              json_integer((json_int_t)h->n_unreadable)) != 0 ||
          json_dumpf(j, stdout, JSON_INDENT(2)) != 0 || fputc('\n', stdout) == EOF;
    if (bad) {
        fprintf(stderr, "order-worker lookup: cannot write the record\n");
        return OW_EXIT_FAILURE;
    }
    return OW_EXIT_OK;
}

/* --archive DIR: the record from the purge archive. Not found is only
 * reported when every file was read: a record missing from the database
 * and the archive is one whose key a client may reuse, and a file that
 * could not be read may hold it. */
static int lookup_archive(const char *dir, int64_t user, const char *key)
{
    char err[OW_ARCHIVE_ERR_MAX];
    ow_archive_hit h;
    int code;
    int rc;

    ow_archive_hit_init(&h);
    rc = ow_archive_find(dir, user, key, &h, err);
    if (rc >= 0)
        warn_unreadable(&h);
    if (rc < 0) {
        fprintf(stderr, "order-worker lookup: %s\n", err);
        code = OW_EXIT_FAILURE;
    } else if (rc == 1) {
        code = print_archived(&h);
    } else if (h.n_unreadable > 0) {
        fprintf(stderr,
                "order-worker lookup: no archived request for user %lld with key %s in the "
                "readable files of %s, but %zu file(s) could not be read (above) and may hold "
                "it: not found is not certain\n",
                (long long)user, key, dir, h.n_unreadable);
        code = OW_EXIT_FAILURE;
    } else {
        fprintf(stderr,
                "order-worker lookup: no archived request for user %lld with key %s in %s\n",
                (long long)user, key, dir);
        code = OW_EXIT_NOT_FOUND;
    }
    ow_archive_hit_cleanup(&h);
    return code;
}

int ow_cmd_lookup(int argc, char **argv, const volatile sig_atomic_t *stop)
{
    ow_config cfg;
    ow_idgen ids;
    ow_store *s;
    const char *key = NULL;
    int64_t user = 0;
    int code;

    (void)stop;
    code = lookup_args(argc, argv, &user, &key);
    if (code == OW_EXIT_OK && ow_cli_opt(argc, argv, "--archive") != NULL)
        return lookup_archive(ow_cli_opt(argc, argv, "--archive"), user, key);
    if (code == OW_EXIT_OK)
        code = ow_cli_config_with_maps(argc, argv, "lookup", &cfg);
    if (code != OW_EXIT_OK)
        return code;
    /* The user's shard; shard 0 is mysql.host when unsharded. */
    s = ow_cli_shard_store_new(
        &cfg, ow_shard_of_user(user, (uint32_t)cfg.mysql_shard_buckets, cfg.shards.n), &ids, 0);
    if (s == NULL) {
        fprintf(stderr, "order-worker lookup: out of memory\n");
        code = OW_EXIT_FAILURE;
    } else {
        code = lookup_print(s, user, key);
    }
    ow_store_free(&s);
    ow_config_cleanup(&cfg);
    return code;
}
