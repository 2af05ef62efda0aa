/* The purge archive: durable gzip JSON-lines files (archive.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "archive.h"
#include "record_json.h"

#define ARCHIVE_PREFIX "requests-"
#define ARCHIVE_SUFFIX ".jsonl.gz"

static int fail(char err[OW_ARCHIVE_ERR_MAX], const char *what, const char *path)
{
    snprintf(err, OW_ARCHIVE_ERR_MAX, "archive: %s %s: %s", what, path, strerror(errno));
    return -1;
}

int ow_archive_check_dir(const char *dir, char err[OW_ARCHIVE_ERR_MAX])
{
    struct stat st;
    const char *why = NULL;

    if (stat(dir, &st) != 0)
        why = strerror(errno);
    else if (!S_ISDIR(st.st_mode))
        why = "not a directory";
    else if (access(dir, W_OK | X_OK) != 0)
        why = strerror(errno);
    if (why == NULL)
        return 0;
    snprintf(err, OW_ARCHIVE_ERR_MAX, "--archive: cannot write archive files to %s: %s", dir, why);
    return -1;
}

/* The body as a JSON string; bytes that are not UTF-8 (the worker never
 * stores such) go out as response_body_hex instead, so nothing is lost. */
static int put_body(json_t *j, const ow_buf *body)
{
    json_t *s = json_stringn(body->data != NULL ? body->data : "", body->len);
    char *hex;
    int bad;

    if (s != NULL)
        return json_object_set_new(j, "response_body", s) != 0;
    hex = malloc(body->len * 2 + 1);
    if (hex == NULL)
        return 1;
    ow_hex((const unsigned char *)body->data, body->len, hex);
    bad = ow_json_put(j, "response_body_hex", json_string(hex));
    free(hex);
    return bad;
}

static json_t *orders_json(const ow_record *r)
{
    json_t *a = json_array();

    for (size_t i = 0; a != NULL && i < r->n_orders; i++) {
        json_t *o = json_object();
        int bad = o == NULL || ow_json_put(o, "id", json_integer(r->orders[i].id)) ||
                  ow_json_put(o, "order_no", json_string(r->orders[i].order_no));

        if (bad || json_array_append_new(a, o) != 0) {
            if (bad)
                json_decref(o);
            json_decref(a);
            return NULL;
        }
    }
    return a;
}

static json_t *record_json(const ow_record *r)
{
    char created[OW_TIMESTAMP_TEXT_MAX];
    json_t *j = ow_record_json_head(r);
    int bad = j == NULL;

    if (bad)
        return NULL;
    ow_timestamp_format(&r->created_at, created);
    bad |= ow_json_put(j, "request_digest", json_string(r->digest_hex));
    bad |= ow_json_put(j, "status", json_string(r->status));
    bad |= ow_json_put(j, "response_status", json_integer(r->response_status));
    bad |= put_body(j, &r->response);
    bad |= ow_json_put(j, "created_at", json_string(created));
    bad |= ow_json_put(j, "orders", orders_json(r));
    if (bad)
        json_decref(j);
    return bad ? NULL : j;
}

static int write_lines(gzFile gz, const ow_purge_chunk *c)
{
    for (size_t i = 0; i < c->n; i++) {
        json_t *j = record_json(&c->records[i]);
        char *line = j != NULL ? json_dumps(j, JSON_COMPACT) : NULL;
        size_t len = line != NULL ? strlen(line) : 0;
        int ok = line != NULL && gzwrite(gz, line, (unsigned)len) == (int)len &&
                 gzputc(gz, '\n') == '\n';

        free(line);
        json_decref(j);
        if (!ok)
            return -1;
    }
    return 0;
}

/* Writes the compressed chunk to tmp and fsyncs it. */
static int write_tmp(const char *tmp, const ow_purge_chunk *c, char err[OW_ARCHIVE_ERR_MAX])
{
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0640);
    int gzfd;
    gzFile gz;
    int rc;

    if (fd < 0)
        return fail(err, "cannot create", tmp);
    gzfd = dup(fd);
    gz = gzfd >= 0 ? gzdopen(gzfd, "wb6") : NULL;
    if (gz == NULL) {
        if (gzfd >= 0)
            close(gzfd);
        close(fd);
        return fail(err, "cannot start compressing", tmp);
    }
    rc = write_lines(gz, c);
    if (gzclose(gz) != Z_OK)
        rc = -1;
    if (rc != 0) {
        close(fd);
        return fail(err, "cannot write", tmp);
    }
    if (fsync(fd) != 0) {
        close(fd);
        return fail(err, "cannot fsync", tmp);
    }
    return close(fd) == 0 ? 0 : fail(err, "cannot close", tmp);
}

static int fsync_dir(const char *dir, char err[OW_ARCHIVE_ERR_MAX])
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int rc;

    if (fd < 0)
        return fail(err, "cannot open", dir);
    rc = fsync(fd);
    close(fd);
    return rc == 0 ? 0 : fail(err, "cannot fsync", dir);
}

int ow_archive_write(const char *dir, const ow_purge_chunk *c, char err[OW_ARCHIVE_ERR_MAX])
{
    char name[96], path[4096], tmp[4096];

    if (c->n == 0)
        return 0;
    snprintf(name, sizeof(name), ARCHIVE_PREFIX "%019lld-%019lld" ARCHIVE_SUFFIX, c->ids[0],
             c->ids[c->n - 1]);
    if (snprintf(path, sizeof(path), "%s/%s", dir, name) >= (int)sizeof(path) ||
        snprintf(tmp, sizeof(tmp), "%s/.tmp-%s.%ld", dir, name, (long)getpid()) >=
            (int)sizeof(tmp)) {
        snprintf(err, OW_ARCHIVE_ERR_MAX, "archive: the path %s is too long", dir);
        return -1;
    }
    unlink(tmp); /* a previous process with our pid that crashed */
    if (write_tmp(tmp, c, err) != 0) {
        unlink(tmp);
        return -1;
    }
    /* The same name again: this transaction holds the locks of its first
     * and last records, so the transaction that wrote the earlier file
     * never committed (its delete would have removed them). Each record of
     * that file is still in the database, and then in this file (a chunk
     * holds every record left between its first and last), or was deleted
     * since by another chunk, whose file has other first or last ids. */
    if (rename(tmp, path) != 0) {
        fail(err, "cannot rename into place", path);
        unlink(tmp);
        return -1;
    }
    return fsync_dir(dir, err);
}

/* --- Reading ------------------------------------------------------------- */

/* One line of gz into *buf (grown as needed); 1 line, 0 end, -1 error. */
static int read_line(gzFile gz, char **buf, size_t *cap)
{
    size_t len = 0;

    for (;;) {
        if (*cap - len < 2) {
            size_t ncap = *cap ? *cap * 2 : 65536;
            char *p = realloc(*buf, ncap);

            if (p == NULL)
                return -1;
            *buf = p;
            *cap = ncap;
        }
        if (gzgets(gz, *buf + len, (int)(*cap - len)) == NULL) {
            int zerr = 0;

            gzerror(gz, &zerr);
            if (zerr != Z_OK && zerr != Z_STREAM_END)
                return -1;
            return len > 0 ? 1 : 0;
        }
        len += strlen(*buf + len);
        if (len > 0 && (*buf)[len - 1] == '\n')
            return 1;
    }
}

static int record_matches(const json_t *j, int64_t user, const char *key)
{
    json_t *u = json_object_get(j, "user_id");
    json_t *k = json_object_get(j, "idempotency_key");

    return json_is_integer(u) && json_integer_value(u) == user && json_is_string(k) &&
           strcmp(json_string_value(k), key) == 0;
}

void ow_archive_hit_init(ow_archive_hit *h)
{
    memset(h, 0, sizeof(*h));
}

void ow_archive_hit_cleanup(ow_archive_hit *h)
{
    json_decref(h->record);
    for (size_t i = 0; i < h->n_unreadable; i++)
        free(h->unreadable[i]);
    free(h->unreadable);
    ow_archive_hit_init(h);
}

/* Notes that path could not be read (why: its reason). 0, or -1 when out
 * of memory. */
static int add_unreadable(ow_archive_hit *h, const char *path, const char *why)
{
    size_t len = strlen(path) + strlen(why) + 3;
    char **list = realloc(h->unreadable, (h->n_unreadable + 1) * sizeof(*list));
    char *line = malloc(len);

    if (list != NULL)
        h->unreadable = list;
    if (list == NULL || line == NULL) {
        free(line);
        return -1;
    }
    snprintf(line, len, "%s: %s", path, why);
    h->unreadable[h->n_unreadable++] = line;
    return 0;
}

static size_t orders_of(const json_t *record)
{
    return json_array_size(json_object_get(record, "orders"));
}

/* Counts one copy of the record, from path. The copy with the most orders
 * is kept: a purge from before chunks were locked could archive a record
 * whose orders another purge had just detached, with none. Copies with as
 * many orders should be identical; the first one read is kept. */
static void take_copy(ow_archive_hit *h, json_t *copy, const char *path)
{
    h->copies++;
    if (h->record != NULL && !json_equal(copy, h->record))
        h->differ = 1;
    if (h->record != NULL && orders_of(copy) <= orders_of(h->record))
        return;
    json_decref(h->record);
    h->record = json_incref(copy);
    snprintf(h->file, sizeof(h->file), "%s", path);
}

/* zlib's reason for a read error, without the path it puts in front. */
static const char *zlib_reason(gzFile gz, const char *path)
{
    int zerr = Z_OK;
    const char *msg = gzerror(gz, &zerr);
    size_t n = strlen(path);

    if (zerr == Z_OK || msg == NULL || *msg == '\0')
        return "cannot read";
    if (strncmp(msg, path, n) == 0 && strncmp(msg + n, ": ", 2) == 0)
        msg += n + 2;
    return msg;
}

/* Reads every line of gz, appending the copies of (user, key) to matches.
 * NULL when it reached the end of a complete gzip stream, else why not. */
static const char *scan_lines(gzFile gz, const char *path, int64_t user, const char *key,
                              json_t *matches)
{
    const char *why = NULL;
    char *line = NULL;
    size_t cap = 0;
    int rc = 0;

    while (why == NULL && (rc = read_line(gz, &line, &cap)) == 1) {
        json_t *j = json_loads(line, 0, NULL);

        if (j == NULL)
            why = "a line is not JSON";
        else if (record_matches(j, user, key) && json_array_append(matches, j) != 0)
            why = "out of memory";
        json_decref(j);
    }
    if (why == NULL && rc < 0)
        why = zlib_reason(gz, path);
    free(line);
    return why;
}

/* Searches one file. A file that cannot be read to the end of its gzip
 * stream (truncated, damaged, not gzip, no permission) is noted in
 * h->unreadable and none of its lines count, since what it holds cannot
 * be trusted. Returns 0, or -1 when out of memory. */
static int search_file(const char *dir, const char *name, int64_t user, const char *key,
                       ow_archive_hit *h)
{
    char path[4096];
    const char *why = NULL;
    json_t *matches = json_array();
    gzFile gz;
    int rc = 0;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    errno = 0;
    gz = matches != NULL ? gzopen(path, "rb") : NULL;
    if (matches == NULL)
        rc = -1;
    else if (gz == NULL)
        why = strerror(errno != 0 ? errno : ENOMEM);
    else if (gzdirect(gz))
        why = "not gzip data (empty or overwritten)";
    else
        why = scan_lines(gz, path, user, key, matches);
    if (rc == 0 && why != NULL)
        rc = add_unreadable(h, path, why);
    for (size_t i = 0; rc == 0 && why == NULL && i < json_array_size(matches); i++)
        take_copy(h, json_array_get(matches, i), path);
    if (gz != NULL)
        gzclose(gz);
    json_decref(matches);
    return rc;
}

static int is_archive_name(const char *name)
{
    size_t n = strlen(name), p = strlen(ARCHIVE_PREFIX), x = strlen(ARCHIVE_SUFFIX);

    return n > p + x && strncmp(name, ARCHIVE_PREFIX, p) == 0 &&
           strcmp(name + n - x, ARCHIVE_SUFFIX) == 0;
}

static int by_name(const struct dirent **a, const struct dirent **b)
{
    return strcmp((*a)->d_name, (*b)->d_name);
}

static int archive_filter(const struct dirent *d)
{
    return is_archive_name(d->d_name);
}

int ow_archive_find(const char *dir, int64_t user, const char *key, ow_archive_hit *out,
                    char err[OW_ARCHIVE_ERR_MAX])
{
    struct dirent **names = NULL;
    int n = scandir(dir, &names, archive_filter, by_name);
    int rc = 0;

    ow_archive_hit_cleanup(out);
    err[0] = '\0';
    if (n < 0)
        return fail(err, "cannot list", dir);
    /* In name order only so that the output is the same from run to run:
     * the copy printed is chosen by its content. */
    for (int i = 0; i < n; i++) {
        if (rc == 0)
            rc = search_file(dir, names[i]->d_name, user, key, out);
        free(names[i]);
    }
    free(names);
    if (rc != 0) {
        ow_archive_hit_cleanup(out);
        snprintf(err, OW_ARCHIVE_ERR_MAX, "archive: out of memory while searching %s", dir);
        return -1;
    }
    return out->record != NULL ? 1 : 0;
}
