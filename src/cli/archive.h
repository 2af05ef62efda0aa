/*
 * The purge archive: each purged chunk's request records as
 * gzip-compressed JSON lines, one file per chunk, written durably before
 * the chunk's delete commits. Part of the command line front end; the only
 * code that links zlib.
 *
 * File: DIR/requests-<first id>-<last id>.jsonl.gz (19-digit ids, so the
 * names sort by id, which is time). Line: {"id", "user_id",
 * "idempotency_key", "request_digest" (hex), "status", "response_status",
 * "response_body" (the stored bytes as a string), "created_at" (database
 * time zone), "orders": [{"id", "order_no"}]}.
 *
 * Crash rule: a chunk is written to DIR/.tmp-<name>.<pid>, fsynced, renamed
 * and DIR fsynced while its transaction holds the locks of its records and
 * orders, before its delete starts; a crash after the rename and before the
 * commit leaves a file whose records are still in the database, and the
 * next purge archives them again (duplicates: allowed, and complete, since
 * each copy was read under the locks of the transaction that deleted or
 * would have deleted it). A record is never deleted before a file holding
 * it is durable (a gap: impossible). Leftover .tmp-* files are incomplete
 * and are ignored.
 */
#ifndef OW_ARCHIVE_INTERNAL_H
#define OW_ARCHIVE_INTERNAL_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "ow/store_purge.h"

#define OW_ARCHIVE_ERR_MAX 4400 /* a path (4096) and its error */

/* Checks that dir exists and is a writable directory. */
int ow_archive_check_dir(const char *dir, char err[OW_ARCHIVE_ERR_MAX]);

/* Writes c's records (c->records must be set) durably. Returns 0 or -1
 * with err set; on -1 nothing may be deleted. */
int ow_archive_write(const char *dir, const ow_purge_chunk *c, char err[OW_ARCHIVE_ERR_MAX]);

/* What ow_archive_find found for one (user, key). */
typedef struct {
    json_t *record;    /* the copy with the most orders, or NULL (owned) */
    char file[4096];   /* the file record came from */
    int copies;        /* copies of the record in the files that were read */
    int differ;        /* 1: not every copy is identical */
    char **unreadable; /* "path: why" of each file that could not be read */
    size_t n_unreadable;
} ow_archive_hit;

void ow_archive_hit_init(ow_archive_hit *h);
void ow_archive_hit_cleanup(ow_archive_hit *h);

/* Searches every archive file in dir for (user, key) and fills out (its
 * earlier contents released). A file that cannot be read to its end is
 * skipped and listed in out->unreadable. Returns 1 when a copy was found,
 * 0 when none was (look at out->n_unreadable before calling it absent),
 * -1 with err set when dir cannot be listed or memory runs out. */
int ow_archive_find(const char *dir, int64_t user, const char *key, ow_archive_hit *out,
                    char err[OW_ARCHIVE_ERR_MAX]);

#endif
