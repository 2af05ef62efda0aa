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
    p->rows = p->cols = 0;
}

void ow_params_free(ow_params *p)
{
    free(p->b);
    free(p->ival);
    free(p->len);
    free(p->text);
    free(p->time);
    free(p->isnull);
    free(p->ptr);
    free(p->ind);
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
    p->ptr = calloc(cap, sizeof(*p->ptr));
    p->ind = calloc(cap, sizeof(*p->ind));
    if (p->b == NULL || p->ival == NULL || p->len == NULL || p->text == NULL || p->time == NULL ||
        p->isnull == NULL || p->ptr == NULL || p->ind == NULL) {
        ow_params_free(p);
        return OW_ENOMEM;
    }
    p->cap = cap;
    return OW_OK;
}

int ow_params_bulk(ow_params *p, size_t rows, size_t cols)
{
    ow_params_reset(p);
    if (ow_params_reserve(p, rows * cols) != OW_OK)
        return OW_ENOMEM;
    p->rows = rows;
    p->cols = cols;
    memset(p->b, 0, cols * sizeof(*p->b));
    memset(p->ind, 0, rows * cols * sizeof(*p->ind));
    return OW_OK;
}

/* Where the next parameter's value goes: its own place, or in a bulk
 * execution the place of its row in its column's array. */
static size_t next_slot(const ow_params *p)
{
    size_t col, row;

    if (p->rows == 0)
        return p->n;
    col = p->n % p->cols;
    row = p->n / p->cols;
    return col * p->rows + row;
}

/* The bind of the next parameter: its own, or its column's, which the
 * column's first row sets up to point at the column's arrays. type is
 * the value's; a column keeps the type of its first value that is not
 * NULL (NULLs travel as indicators). */
static MYSQL_BIND *next_bind(ow_params *p, enum enum_field_types type)
{
    size_t slot = next_slot(p);
    MYSQL_BIND *b;

    if (p->rows == 0) {
        b = &p->b[p->n];
        memset(b, 0, sizeof(*b));
        p->isnull[slot] = 0;
        b->is_null = &p->isnull[slot];
        b->buffer_type = type;
        return b;
    }
    b = &p->b[p->n % p->cols];
#if OW_HAVE_BULK
    if (p->n < p->cols) {
        b->u.indicator = &p->ind[slot];
        b->length = &p->len[slot];
        b->buffer_type = MYSQL_TYPE_NULL;
    }
    if (type != MYSQL_TYPE_NULL && b->buffer_type == MYSQL_TYPE_NULL) {
        size_t first = (p->n % p->cols) * p->rows;

        /* Integers as an array of values, texts as an array of addresses. */
        b->buffer_type = type;
        b->buffer = type == MYSQL_TYPE_LONGLONG ? (void *)&p->ival[first] : (void *)&p->ptr[first];
    }
#endif
    return b;
}

void ow_param_int(ow_params *p, long long v)
{
    size_t slot = next_slot(p);
    MYSQL_BIND *b = next_bind(p, MYSQL_TYPE_LONGLONG);

    p->ival[slot] = v;
    if (p->rows == 0)
        b->buffer = &p->ival[slot];
    p->n++;
}

void ow_param_null(ow_params *p)
{
    size_t slot = next_slot(p);

    next_bind(p, MYSQL_TYPE_NULL);
    p->isnull[slot] = 1;
#if OW_HAVE_BULK
    p->ind[slot] = STMT_INDICATOR_NULL;
#endif
    p->n++;
}

static void param_text(ow_params *p, const void *data, size_t len, enum enum_field_types type)
{
    size_t slot = next_slot(p);
    MYSQL_BIND *b = next_bind(p, type);

    p->len[slot] = (unsigned long)len;
    p->ptr[slot] = data;
    if (p->rows == 0) {
        b->buffer = (void *)(uintptr_t)data;
        b->buffer_length = (unsigned long)len;
        b->length = &p->len[slot];
    }
    p->n++;
}

void ow_param_bytes(ow_params *p, const void *data, size_t len)
{
    param_text(p, data, len, MYSQL_TYPE_BLOB);
}

void ow_param_amount(ow_params *p, int64_t cents)
{
    size_t slot = next_slot(p);

    ow_amount_format(cents, p->text[slot]);
    param_text(p, p->text[slot], strlen(p->text[slot]), MYSQL_TYPE_STRING);
}

void ow_result_int(MYSQL_BIND *b, long long *v, ow_mybool *isnull)
{
    memset(b, 0, sizeof(*b));
    b->buffer_type = MYSQL_TYPE_LONGLONG;
    b->buffer = v;
    b->is_null = isnull;
}

/* Not for a bulk execution: no bulk statement has a time column. */
void ow_param_time(ow_params *p, const MYSQL_TIME *t)
{
    size_t slot = next_slot(p);
    MYSQL_BIND *b = next_bind(p, MYSQL_TYPE_DATETIME);

    p->time[slot] = *t;
    if (p->rows == 0)
        b->buffer = &p->time[slot];
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
