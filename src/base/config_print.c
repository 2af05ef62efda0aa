/* Printing the configuration: `config --print` and the key reference of
 * --help and the README. */
#include <stdio.h>
#include <string.h>

#include "config_rows.h"
#include "ow/nodes.h"

static void print_value(const ow_config *cfg, const config_row *row, FILE *out)
{
    ow_config *c = (ow_config *)cfg;

    if (row->secret) {
        fputs(**ow_config_str_field(c, row) != '\0' ? "(redacted)" : "", out);
        return;
    }
    switch (row->type) {
    case CT_STRING:
        fputs(*ow_config_str_field(c, row), out);
        break;
    case CT_INT:
        fprintf(out, "%lld", (long long)*ow_config_int_field(c, row));
        break;
    case CT_LOGLEVEL:
        fputs(ow_log_level_name(*ow_config_int_field(c, row)), out);
        break;
    case CT_BOOL:
        fputs(*ow_config_int_field(c, row) ? "true" : "false", out);
        break;
    }
}

/* How a node list is used, after mysql.host and mysql.shards. */
static void print_nodes_note(const ow_config *cfg, const config_row *row, FILE *out)
{
    unsigned lists = 0;

    if (strcmp(row->name, "mysql.host") == 0 && ow_nodes_count(cfg->mysql_host) > 1)
        fprintf(out, "; %u nodes of one cluster, one used at a time, the first ready in order",
                ow_nodes_count(cfg->mysql_host));
    if (strcmp(row->name, "mysql.shards") != 0)
        return;
    for (unsigned i = 0; i < cfg->shards.n; i++)
        lists += ow_nodes_count(cfg->shards.addr[i].host) > 1;
    if (lists > 0)
        fprintf(out, "; %u of %u shards are clusters of several nodes, one used at a time", lists,
                cfg->shards.n);
}

void ow_config_print(const ow_config *cfg, FILE *out)
{
    for (size_t i = 0; i < ow_config_n_rows; i++) {
        fprintf(out, "%s = ", ow_config_rows[i].name);
        print_value(cfg, &ow_config_rows[i], out);
        fprintf(out, "    # %s", ow_config_source_name(cfg->sources[i]));
        if (cfg->source_where[i] != NULL && cfg->sources[i] == OW_SRC_FILE)
            fprintf(out, " (%s)", cfg->source_where[i]);
        else if (cfg->source_where[i] != NULL && cfg->sources[i] == OW_SRC_ENV)
            fprintf(out, " (%s)", cfg->source_where[i] + strlen("environment "));
        print_nodes_note(cfg, &ow_config_rows[i], out);
        fputc('\n', out);
    }
    for (size_t i = 0; i < cfg->n_passthrough; i++) {
        const ow_config_kv *kv = &cfg->passthrough[i];

        fprintf(out, "kafka.%s = %s    # %s, passed to librdkafka\n", kv->name,
                ow_config_is_secret_kafka(kv->name) ? "(redacted)" : kv->value,
                ow_config_source_name(kv->source));
    }
}

static const char *type_name(const config_row *row)
{
    switch (row->type) {
    case CT_STRING:
        return "string";
    case CT_INT:
        return "integer";
    case CT_LOGLEVEL:
        return "level";
    case CT_BOOL:
        return "boolean";
    }
    return "?";
}

void ow_config_print_reference(FILE *out, int markdown)
{
    char env[128];

    if (markdown) {
        fputs("| key | type | default | range | environment | description |\n", out);
        fputs("|---|---|---|---|---|---|\n", out);
    }
    for (size_t i = 0; i < ow_config_n_rows; i++) {
        const config_row *row = &ow_config_rows[i];
        char range[64] = "";

        ow_config_env_name(row->name, env, sizeof(env));
        if (row->type == CT_INT)
            snprintf(range, sizeof(range), "%lld..%lld", (long long)row->min, (long long)row->max);
        if (markdown)
            fprintf(out, "| `%s` | %s | %s%s%s | %s | `%s` | %s%s |\n", row->name, type_name(row),
                    row->def[0] ? "`" : "", row->def[0] ? row->def : "(empty)",
                    row->def[0] ? "`" : "", range, env, row->desc,
                    row->secret ? " Secret: never printed." : "");
        else
            fprintf(out, "  %-28s %s, default \"%s\"%s%s\n      %s\n", row->name, type_name(row),
                    row->def, range[0] != '\0' ? ", " : "", range, row->desc);
    }
    if (markdown)
        fputs("| `kafka.<property>` | string | | | `ORDER_WORKER_KAFKA_<PROPERTY>` | Passed to "
              "librdkafka as `<property>`, for the consumer and the producer; "
              "`kafka.consumer.<property>` and `kafka.producer.<property>` reach only one. |\n",
              out);
    else
        fputs("  kafka.<property>             passed to librdkafka unchanged\n", out);
}
