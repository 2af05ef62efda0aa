/* The configuration's table of keys, shared by the files of the
 * configuration (config.c holds the table; config_print.c prints it). */
#ifndef OW_CONFIG_ROWS_H
#define OW_CONFIG_ROWS_H

#include <stddef.h>
#include <stdint.h>

#include "ow/config.h"

typedef enum { CT_STRING, CT_INT, CT_LOGLEVEL, CT_BOOL } config_type;

typedef struct {
    const char *name;
    config_type type;
    int64_t min;
    int64_t max;
    const char *def;
    int secret;
    size_t offset;
    const char *desc;
} config_row;

extern const config_row ow_config_rows[];
extern const size_t ow_config_n_rows;

static inline char **ow_config_str_field(ow_config *cfg, const config_row *row)
{
    return (char **)(void *)((char *)cfg + row->offset);
}

static inline int64_t *ow_config_int_field(ow_config *cfg, const config_row *row)
{
    return (int64_t *)(void *)((char *)cfg + row->offset);
}

/* The environment variable of a key: ORDER_WORKER_ and the key in capitals,
 * '.' as '_'. */
void ow_config_env_name(const char *key, char *out, size_t outsz);

#endif
