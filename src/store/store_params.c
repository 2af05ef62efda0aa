/*
 * A statement's bound parameters and result columns (store_parts.h): the
 * only way data reaches SQL here.
 */
#include <stdlib.h>
#include <string.h>

#include "store_parts.h"

void ow_params_reset(ow_params *p)
{
    p->n = 0;
}

void ow_params_free(ow_params *p)
{
    free(p->b);
    free(p->ival);
    free(p->len);
    free(p->text);
    free(p->time);
    free(p->isnull);
    memset(p, 0, sizeof(*p));
}

/* Makes room for extra more parameters. Must be called before the first
 * ow_param_* of an execution, because growing moves the storage that the
 * binds already point to. */
int ow_params_reserve(ow_params *p, size_t extra)
{
    size_t need = p->n + extra;
    size_t cap = p->cap != 0 ? p->cap : 64;

    if (need <= p->cap)
        return OW_OK;
    if (p->n != 0)
        return OW_EINVAL;
    while (cap < need)
        cap *= 2;
    ow_params_free(p);
    p->b = calloc(cap, sizeof(*p->b));
    p->ival = calloc(cap, sizeof(*p->ival));
    p->len = calloc(cap, sizeof(*p->len));
    p->text = calloc(cap, sizeof(*p->text));
    p->time = calloc(cap, sizeof(*p->time));
    p->isnull = calloc(cap, sizeof(*p->isnull));
    if (p->b == NULL || p->ival == NULL || p->len == NULL || p->text == NULL || p->time == NULL ||
        p->isnull == NULL) {
        ow_params_free(p);
        return OW_ENOMEM;
    }
    p->cap = cap;
    return OW_OK;
}

static MYSQL_BIND *next_bind(ow_params *p)
{
    MYSQL_BIND *b = &p->b[p->n];

    memset(b, 0, sizeof(*b));
    p->isnull[p->n] = 0;
    b->is_null = &p->isnull[p->n];
    return b;
}

void ow_param_int(ow_params *p, long long v)
{
    MYSQL_BIND *b = next_bind(p);

    p->ival[p->n] = v;
    b->buffer_type = MYSQL_TYPE_LONGLONG;
    b->buffer = &p->ival[p->n];
    p->n++;
}

void ow_param_null(ow_params *p)
{
    MYSQL_BIND *b = next_bind(p);

    b->buffer_type = MYSQL_TYPE_NULL;
    p->isnull[p->n] = 1;
    p->n++;
}

void ow_param_bytes(ow_params *p, const void *data, size_t len)
{
    MYSQL_BIND *b = next_bind(p);

    p->len[p->n] = (unsigned long)len;
    b->buffer_type = MYSQL_TYPE_BLOB;
    b->buffer = (void *)(uintptr_t)data;
    b->buffer_length = (unsigned long)len;
    b->length = &p->len[p->n];
    p->n++;
}

void ow_param_amount(ow_params *p, int64_t cents)
{
    MYSQL_BIND *b = next_bind(p);

    ow_amount_format(cents, p->text[p->n]);
    p->len[p->n] = (unsigned long)strlen(p->text[p->n]);
    b->buffer_type = MYSQL_TYPE_STRING;
    b->buffer = p->text[p->n];
    b->buffer_length = OW_AMOUNT_TEXT_MAX;
    b->length = &p->len[p->n];
    p->n++;
}

void ow_result_int(MYSQL_BIND *b, long long *v, ow_mybool *isnull)
{
    memset(b, 0, sizeof(*b));
    b->buffer_type = MYSQL_TYPE_LONGLONG;
    b->buffer = v;
    b->is_null = isnull;
}

void ow_param_time(ow_params *p, const MYSQL_TIME *t)
{
    MYSQL_BIND *b = next_bind(p);

    p->time[p->n] = *t;
    b->buffer_type = MYSQL_TYPE_DATETIME;
    b->buffer = &p->time[p->n];
    p->n++;
}

void ow_result_time(MYSQL_BIND *b, MYSQL_TIME *t, ow_mybool *isnull)
{
    memset(b, 0, sizeof(*b));
    b->buffer_type = MYSQL_TYPE_DATETIME;
    b->buffer = t;
    b->is_null = isnull;
}

void ow_result_bytes(MYSQL_BIND *b, void *buf, size_t cap, unsigned long *len, ow_mybool *isnull)
{
    memset(b, 0, sizeof(*b));
    b->buffer_type = MYSQL_TYPE_BLOB;
    b->buffer = buf;
    b->buffer_length = (unsigned long)cap;
    b->length = len;
    b->is_null = isnull;
}

size_t ow_store_text_len(unsigned long len, size_t cap)
{
    return len < cap ? (size_t)len : cap - 1;
}
