#include "record_json.h"

int ow_json_put(json_t *obj, const char *name, json_t *value)
{
    return value == NULL || json_object_set_new(obj, name, value) != 0;
}

json_t *ow_record_json_head(const ow_record *r)
{
    json_t *j = json_object();

    if (j == NULL)
        return NULL;
    if (ow_json_put(j, "id", json_integer(r->id)) ||
        ow_json_put(j, "user_id", json_integer(r->user_id)) ||
        ow_json_put(j, "idempotency_key", json_stringn(r->key, r->key_len))) {
        json_decref(j);
        return NULL;
    }
    return j;
}
