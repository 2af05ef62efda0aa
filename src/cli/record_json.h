/* A request record as JSON, the parts that lookup's output and the purge
 * archive share (record_json.c). */
#ifndef OW_CLI_RECORD_JSON_H
#define OW_CLI_RECORD_JSON_H

#include <jansson.h>

#include "ow/store_lookup.h"

/* Adds value under name; a NULL value (jansson out of memory) counts as a
 * failure. Returns 0 or 1 (failed). */
int ow_json_put(json_t *obj, const char *name, json_t *value);
/* A new object with the record's id, user_id and idempotency_key, in that
 * order; NULL when out of memory. */
json_t *ow_record_json_head(const ow_record *r);

#endif
