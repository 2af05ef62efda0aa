/* order-worker serve: the result query service (issue 15). */
#include <stdio.h>
#include <string.h>

#include "ow/api.h"
#include "ow/cli.h"
#include "ow/log.h"
#include "ow/util.h"

/* A token shorter than this is refused: it would be guessable. */
#define TOKEN_MIN 16
#define TOKEN_MAX 4096

void ow_help_serve(void)
{
    puts("usage: order-worker serve --config FILE\n"
         "\n"
         "A read-only HTTP service for the services that read results:\n"
         "  GET /v1/requests/{user_id}/{key}   the stored result of a request, byte for\n"
         "      byte as it was published, with its status (201 or 409) as the HTTP\n"
         "      status and headers Idempotency-Replayed: true and Request-Digest;\n"
         "      404 (JSON body) when there is no record: send the message again\n"
         "  GET /v1/orders/{user_id}/{external_order_no}   the order (200 or 404)\n"
         "  GET /healthz                        200 while the process runs\n"
         "\n"
         "/v1 needs 'Authorization: Bearer TOKEN' with the token of api.token_file\n"
         "(401 otherwise, before any database query). Path segments follow the message\n"
         "rules (user id 1..2^63-1; key 1..80 of A-Z a-z 0-9 - _ . :; external_order_no\n"
         "1..64 printable ASCII, percent-encoded as needed); a bad one is 400. A database\n"
         "that cannot be reached gives 503 with Retry-After; the service reconnects by\n"
         "itself. More than api.rate_limit requests/s from one address get 429.\n"
         "\n"
         "Settings: api.address, api.port, api.token_file, api.threads,\n"
         "api.max_connections, api.request_timeout_s, api.rate_limit, and mysql.* for a\n"
         "user with SELECT only (sql/api_user.sql). With mysql.shards set, each lookup\n"
         "reads the user's shard. Runs until SIGTERM or SIGINT.\n"
         "\n"
         "Exit status: 0 after a clean stop, 1 when it cannot start (port in use, wrong\n"
         "database credentials), 2 for a configuration error.");
}

/* The first line of api.token_file, without its line end. */
static int read_token(const char *path, char *out, size_t size, size_t *len)
{
    FILE *f;
    size_t n;

    if (path == NULL || *path == '\0') {
        fprintf(stderr, "order-worker serve: api.token_file: is required\n");
        return OW_EXIT_USAGE;
    }
    f = fopen(path, "r");
    if (f == NULL) {
        fprintf(stderr, "order-worker serve: api.token_file: cannot read %s\n", path);
        return OW_EXIT_USAGE;
    }
    n = fread(out, 1, size - 1, f);
    fclose(f);
    out[n] = '\0';
    out[strcspn(out, "\r\n")] = '\0';
    *len = strlen(out);
    if (*len < TOKEN_MIN) {
        fprintf(stderr, "order-worker serve: api.token_file: the token must be at least %d bytes\n",
                TOKEN_MIN);
        return OW_EXIT_USAGE;
    }
    return OW_EXIT_OK;
}

static int serve(const ow_config *cfg, const char *token, size_t token_len,
                 const volatile sig_atomic_t *stop)
{
    ow_store_params shards[OW_SHARD_MAX];
    ow_api_params p;
    ow_api *api = NULL;
    ow_error err;

    memset(&p, 0, sizeof(p));
    p.address = cfg->api_address;
    p.port = (unsigned)cfg->api_port;
    p.threads = (unsigned)cfg->api_threads;
    p.max_connections = (unsigned)cfg->api_max_connections;
    p.timeout_s = (unsigned)cfg->api_request_timeout_s;
    p.rate_limit = (unsigned)cfg->api_rate_limit;
    p.token = token;
    p.token_len = token_len;
    ow_store_params_from_config(cfg, &p.store);
    /* Sharded: every lookup reads the user's shard, routed like the
     * workers route. A shard that was down at start has its recorded map
     * checked by its connections when they connect: until then, and if
     * it disagrees, its users get an error instead of a false "no record". */
    for (unsigned i = 0; i < cfg->shards.n; i++)
        ow_store_params_for_shard(cfg, i, &shards[i]);
    p.shards = shards;
    p.n_shards = cfg->shards.n;
    p.shard_buckets = (uint32_t)cfg->mysql_shard_buckets;
    if (ow_api_start(&p, &api, &err) != OW_OK) {
        fprintf(stderr, "order-worker serve: %s\n", err.msg);
        return err.cls == OW_ERRCLASS_INVALID_INPUT ? OW_EXIT_USAGE : OW_EXIT_FAILURE;
    }
    OW_LOG(OW_LOG_INFO, "api_listening", OW_F_STR("address", cfg->api_address),
           OW_F_INT("port", cfg->api_port), OW_F_INT("threads", cfg->api_threads));
    while (!*stop)
        ow_sleep_ms(100, NULL);
    ow_api_stop(&api);
    OW_LOG(OW_LOG_INFO, "api_stopped", OW_F_INT("port", cfg->api_port));
    return OW_EXIT_OK;
}

int ow_cmd_serve(int argc, char **argv, const volatile sig_atomic_t *stop)
{
    static const char *const known[] = {"--config", NULL};
    char token[TOKEN_MAX];
    size_t token_len = 0;
    ow_config cfg;
    int code;

    if (ow_cli_check_args(argc, argv, known, "serve") != 0)
        return OW_EXIT_USAGE;
    code = ow_cli_load_config(ow_cli_opt(argc, argv, "--config"), &cfg);
    if (code != OW_EXIT_OK)
        return code;
    code = ow_cli_check_shard_maps(&cfg, "serve");
    if (code == OW_EXIT_OK)
        code = read_token(cfg.api_token_file, token, sizeof(token), &token_len);
    if (code == OW_EXIT_OK)
        code = serve(&cfg, token, token_len, stop);
    memset(token, 0, sizeof(token));
    ow_config_cleanup(&cfg);
    return code;
}
