/* order-worker serve: the result query service. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ow/serve.h"
#include "cli.h"
#include "ow/log.h"
#include "ow/util.h"

/* A token shorter than this is refused: it would be guessable. */
#define TOKEN_MIN 16
/* A longer token is refused rather than cut to a prefix the clients do
 * not send. */
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
         "(its first line without trailing blanks, 16 to 4096 bytes; others may not use\n"
         "the file, and its group may only read it when that is the process's own group,\n"
         "as a Kubernetes Secret mounted for the pod's fsGroup is). A wrong token is 401,\n"
         "before any database query and\n"
         "without counting against the rate limit. Path segments follow the message\n"
         "rules (user id 1..2^63-1; key 1..80 of A-Z a-z 0-9 - _ . :; external_order_no\n"
         "1..64 printable ASCII, percent-encoded as needed); a bad one is 400. Only GET\n"
         "and HEAD are served (405 otherwise), without a body (400). A lookup is\n"
         "answered within api.lookup_timeout_ms: a database that cannot be reached or\n"
         "does not answer gives 503 with Retry-After, and /healthz never waits for it.\n"
         "More than api.rate_limit requests/s from one client address get 429; behind\n"
         "api.trusted_proxies the client is the right-most X-Forwarded-For address that\n"
         "is not a trusted proxy. A request must arrive whole within\n"
         "api.request_timeout_s, and one address may hold\n"
         "api.max_connections_per_address connections.\n"
         "\n"
         "Settings: api.address, api.port, api.token_file, api.threads,\n"
         "api.max_connections, api.max_connections_per_address, api.request_timeout_s,\n"
         "api.lookup_timeout_ms, api.rate_limit, api.trusted_proxies, and mysql.* for a\n"
         "user with SELECT only (sql/api_user.sql). With mysql.shards set, each lookup\n"
         "reads the user's shard. Runs until SIGTERM or SIGINT.\n"
         "\n"
         "Exit status: 0 after a clean stop, 1 when it cannot start (port in use, wrong\n"
         "database credentials), 2 for a configuration error (a token file or trusted\n"
         "proxy included).");
}

/* The first line of f without its line end and trailing blanks, into out
 * (max + 1 bytes, NUL-terminated). Returns 0, or -1 when what is left is
 * longer than max bytes (*len is then the length it has). */
static int read_first_line(FILE *f, char *out, size_t max, size_t *len)
{
    size_t n = 0;
    size_t kept = 0;
    int c;

    while ((c = getc(f)) != EOF && c != '\n') {
        if (n < max)
            out[n] = (char)c;
        n++;
        if (c != ' ' && c != '\t' && c != '\r')
            kept = n;
    }
    *len = kept;
    if (kept > max)
        return -1;
    out[kept] = '\0';
    return 0;
}

/* The token is a password: serve refuses a file that others may use, or
 * that its group may write or run, and one its group may read unless that
 * group is one of the process's own (a Kubernetes Secret mounted for the
 * pod's fsGroup is 0440, root's, of the pod's group). A directory gets its
 * own message instead of a misleading one about the token's length. */
static int own_group(gid_t gid)
{
    gid_t groups[256];
    int n = getgroups(256, groups);

    if (gid == getegid())
        return 1;
    for (int i = 0; i < n; i++)
        if (groups[i] == gid)
            return 1;
    return 0;
}

static int token_mode_ok(const struct stat *st)
{
    if ((st->st_mode & (S_IRWXO | S_IWGRP | S_IXGRP)) != 0)
        return 0;
    return (st->st_mode & S_IRGRP) == 0 || own_group(st->st_gid);
}

static FILE *open_token_file(const char *path)
{
    struct stat st;
    FILE *f;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);

    if (fd < 0 || fstat(fd, &st) != 0) {
        fprintf(stderr, "order-worker serve: api.token_file: cannot read %s: %s\n", path,
                strerror(errno));
    } else if (S_ISDIR(st.st_mode)) {
        fprintf(stderr, "order-worker serve: api.token_file: %s is a directory, not a file\n",
                path);
    } else if (!token_mode_ok(&st)) {
        fprintf(stderr,
                "order-worker serve: api.token_file: %s has mode %04o: others must have no "
                "access to the token, and its group at most read it when the group is this "
                "process's own (chmod 600 %s)\n",
                path, (unsigned)(st.st_mode & 07777), path);
    } else {
        f = fdopen(fd, "r");
        if (f != NULL) {
            setvbuf(f, NULL, _IONBF, 0); /* no copy of the token in a stdio buffer */
            return f;
        }
        fprintf(stderr, "order-worker serve: api.token_file: cannot read %s: %s\n", path,
                strerror(errno));
    }
    if (fd >= 0)
        close(fd);
    return NULL;
}

static int check_token(const char *token, size_t len)
{
    if (len < TOKEN_MIN) {
        fprintf(stderr, "order-worker serve: api.token_file: the token must be at least %d bytes\n",
                TOKEN_MIN);
        return OW_EXIT_USAGE;
    }
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)token[i];

        if (c < 0x20 || c == 0x7f) {
            fprintf(stderr,
                    "order-worker serve: api.token_file: byte %zu of the token is a control "
                    "character; a client could not send it in a header\n",
                    i + 1);
            return OW_EXIT_USAGE;
        }
    }
    return OW_EXIT_OK;
}

/* The token of api.token_file (its first line, without trailing blanks)
 * into out[0..TOKEN_MAX]. */
static int read_token(const char *path, char *out, size_t *len)
{
    FILE *f;
    int too_long;

    if (path == NULL || *path == '\0') {
        fprintf(stderr, "order-worker serve: api.token_file: is required\n");
        return OW_EXIT_USAGE;
    }
    f = open_token_file(path);
    if (f == NULL)
        return OW_EXIT_USAGE;
    too_long = read_first_line(f, out, TOKEN_MAX, len);
    fclose(f);
    if (too_long) {
        fprintf(stderr,
                "order-worker serve: api.token_file: the token is %zu bytes, more than the "
                "maximum of %d\n",
                *len, TOKEN_MAX);
        return OW_EXIT_USAGE;
    }
    return check_token(out, *len);
}

/* What the query service needs of a database: a connection per thread,
 * reads only. */
static void serve_needs(const ow_config *cfg, ow_store_params *p)
{
    p->needs.connections = (unsigned)cfg->api_threads;
    p->needs.connections_key = "api.threads";
    p->needs.writes = 0;
    p->needs.decides = 0;
}

static int serve(const ow_config *cfg, const char *token, size_t token_len,
                 const volatile sig_atomic_t *stop)
{
    ow_store_params shards[OW_SHARD_MAX];
    ow_serve_params p;
    ow_serve *api = NULL;
    ow_error err;

    memset(&p, 0, sizeof(p));
    p.address = cfg->api_address;
    p.port = (unsigned)cfg->api_port;
    p.threads = (unsigned)cfg->api_threads;
    p.max_connections = (unsigned)cfg->api_max_connections;
    p.max_per_address = (unsigned)cfg->api_max_connections_per_address;
    p.timeout_s = (unsigned)cfg->api_request_timeout_s;
    p.lookup_timeout_ms = (unsigned)cfg->api_lookup_timeout_ms;
    p.rate_limit = (unsigned)cfg->api_rate_limit;
    p.trusted_proxies = cfg->api_trusted_proxies;
    p.token = token;
    p.token_len = token_len;
    ow_store_params_from_config(cfg, &p.store);
    serve_needs(cfg, &p.store);
    /* Sharded: every lookup reads the user's shard, routed like the
     * workers route. A shard that was down at start has its recorded map
     * checked by its connections when they connect: until then, and if
     * it disagrees, its users get an error instead of a false "no record". */
    for (unsigned i = 0; i < cfg->shards.n; i++) {
        ow_store_params_for_shard(cfg, i, &shards[i]);
        serve_needs(cfg, &shards[i]);
    }
    p.shards = shards;
    p.n_shards = cfg->shards.n;
    p.shard_buckets = (uint32_t)cfg->mysql_shard_buckets;
    if (ow_serve_start(&p, &api, &err) != OW_OK) {
        fprintf(stderr, "order-worker serve: %s\n", err.msg);
        return err.cls == OW_ERRCLASS_INVALID_INPUT ? OW_EXIT_USAGE : OW_EXIT_FAILURE;
    }
    OW_LOG(OW_LOG_INFO, "api_listening", OW_F_STR("address", cfg->api_address),
           OW_F_INT("port", cfg->api_port), OW_F_INT("threads", cfg->api_threads));
    while (!*stop)
        ow_sleep_ms(100, NULL);
    ow_serve_stop(&api);
    OW_LOG(OW_LOG_INFO, "api_stopped", OW_F_INT("port", cfg->api_port));
    return OW_EXIT_OK;
}

int ow_cmd_serve(int argc, char **argv, const volatile sig_atomic_t *stop)
{
    static const char *const known[] = {"--config", NULL};
    char token[TOKEN_MAX + 1];
    size_t token_len = 0;
    ow_config cfg;
    int code;

    code = ow_cli_begin(argc, argv, known, "serve", &cfg);
    if (code != OW_EXIT_OK)
        return code;
    code = read_token(cfg.api_token_file, token, &token_len);
    if (code == OW_EXIT_OK)
        code = ow_cli_check_shard_maps(&cfg, "serve");
    if (code == OW_EXIT_OK)
        code = serve(&cfg, token, token_len, stop);
    memset(token, 0, sizeof(token));
    ow_config_cleanup(&cfg);
    return code;
}
