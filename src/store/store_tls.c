/* Store: TLS to MySQL/MariaDB.
 *
 * mysql.ssl_mode has the meanings of the MySQL client's --ssl-mode. MariaDB
 * Connector/C (Debian's libmysqlclient) has no MYSQL_OPT_SSL_MODE; it has
 * MYSQL_OPT_SSL_ENFORCE (try TLS), MYSQL_OPT_SSL_VERIFY_SERVER_CERT (chain
 * and host name) and, when a CA is given, verifies the chain by itself. MySQL
 * 8's libmysqlclient has only MYSQL_OPT_SSL_MODE. Whatever the library does,
 * a mode from `required` up is also checked after the connect: a session
 * without a cipher is closed and refused (docs/operations.md, "Deploying
 * securely"). */
#include <errmsg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "ow/log.h"
#include "store_parts.h"

#ifndef MYSQL_UNIX_ADDR
#define MYSQL_UNIX_ADDR "(the client library's default)"
#endif

/* MySQL's client libraries, MariaDB Connector/C among them, take the host
 * name "localhost" to mean their Unix socket and then never use the port.
 * The socket is MYSQL_UNIX_PORT's, else MARIADB_UNIX_PORT's (Connector/C
 * reads both once, at its initialisation), else the library's built-in
 * path. */
void ow_store_server_text(const ow_store *s, char *out, size_t outsz)
{
    const char *sock = getenv("MYSQL_UNIX_PORT");

    if (strcmp(s->host, "localhost") != 0) {
        snprintf(out, outsz, "%s:%u", s->host, s->port);
        return;
    }
    if (sock == NULL)
        sock = getenv("MARIADB_UNIX_PORT");
    snprintf(out, outsz, "localhost (Unix socket %s; mysql.port is not used)",
             sock != NULL ? sock : MYSQL_UNIX_ADDR);
}

static const char *const mode_names[] = {"disabled", "preferred", "required", "verify_ca",
                                         "verify_identity"};

int ow_ssl_mode_parse(const char *name)
{
    for (size_t i = 0; i < sizeof(mode_names) / sizeof(mode_names[0]); i++) {
        if (strcmp(name, mode_names[i]) == 0)
            return (int)i;
    }
    return -1;
}

const char *ow_ssl_mode_name(ow_ssl_mode mode)
{
    if ((unsigned)mode >= sizeof(mode_names) / sizeof(mode_names[0]))
        return "?";
    return mode_names[mode];
}

static int set(const char *v)
{
    return v != NULL && *v != '\0';
}

/* The settings that are text, and the client option each one sets. */
static const struct {
    size_t offset;
    enum mysql_option option;
} tls_texts[] = {
    {offsetof(ow_store_tls, ca), MYSQL_OPT_SSL_CA},
    {offsetof(ow_store_tls, capath), MYSQL_OPT_SSL_CAPATH},
    {offsetof(ow_store_tls, cert), MYSQL_OPT_SSL_CERT},
    {offsetof(ow_store_tls, key), MYSQL_OPT_SSL_KEY},
    {offsetof(ow_store_tls, crl), MYSQL_OPT_SSL_CRL},
    {offsetof(ow_store_tls, tls_version), MYSQL_OPT_TLS_VERSION},
    {offsetof(ow_store_tls, cipher), MYSQL_OPT_SSL_CIPHER},
};
#define N_TLS_TEXTS (sizeof(tls_texts) / sizeof(tls_texts[0]))

static const char **tls_text(const ow_store_tls *t, size_t i)
{
    return (const char **)((const char *)t + tls_texts[i].offset);
}

int ow_store_tls_copy(ow_store_tls *dst, const ow_store_tls *src)
{
    memset(dst, 0, sizeof(*dst));
    dst->mode = src->mode;
    for (size_t i = 0; i < N_TLS_TEXTS; i++) {
        const char *v = *tls_text(src, i);

        if (set(v) && (*tls_text(dst, i) = strdup(v)) == NULL) {
            ow_store_tls_free(dst);
            return OW_ENOMEM;
        }
    }
    return OW_OK;
}

void ow_store_tls_free(ow_store_tls *t)
{
    for (size_t i = 0; i < N_TLS_TEXTS; i++)
        free((char *)*tls_text(t, i));
    memset(t, 0, sizeof(*t));
}

static void file_options(MYSQL *db, const ow_store_tls *t)
{
    for (size_t i = 0; i < N_TLS_TEXTS; i++) {
        const char *v = *tls_text(t, i);

        if (set(v))
            mysql_options(db, tls_texts[i].option, v);
    }
}

#ifdef MARIADB_BASE_VERSION
void ow_store_tls_options(ow_store *s)
{
    ow_mybool on = 1;
    ow_mybool verify = s->tls.mode == OW_SSL_VERIFY_IDENTITY;

    if (s->tls.mode == OW_SSL_DISABLED)
        return;
    file_options(s->db, &s->tls);
    /* Connector/C's "enforce" asks for TLS; it still falls back to plaintext
     * when the server offers none, which is `preferred`. `required` and up
     * are refused after the connect (ow_store_tls_check_session). */
    mysql_options(s->db, MYSQL_OPT_SSL_ENFORCE, &on);
    mysql_options(s->db, MYSQL_OPT_SSL_VERIFY_SERVER_CERT, &verify);
}
#else
void ow_store_tls_options(ow_store *s)
{
    static const unsigned modes[] = {SSL_MODE_DISABLED, SSL_MODE_PREFERRED, SSL_MODE_REQUIRED,
                                     SSL_MODE_VERIFY_CA, SSL_MODE_VERIFY_IDENTITY};
    unsigned mode = modes[s->tls.mode];

    if (s->tls.mode != OW_SSL_DISABLED)
        file_options(s->db, &s->tls);
    mysql_options(s->db, MYSQL_OPT_SSL_MODE, &mode);
}
#endif

/* One db_tls_failed line per process: every lane fails the same way. */
static atomic_int tls_failure_logged;
static atomic_int session_logged;
static atomic_int refused_logged;
static atomic_int handshake_losses; /* consecutive, process-wide */

static int tls_fatal(ow_store *s, int code, const char *reason, ow_error *err)
{
    char server[OW_STORE_SERVER_TEXT_MAX];

    ow_store_server_text(s, server, sizeof(server));
    if (atomic_exchange(&tls_failure_logged, 1) == 0)
        OW_LOG(OW_LOG_ERROR, "db_tls_failed", OW_F_STR("server", s->host),
               OW_F_INT("port", s->port), OW_F_STR("ssl_mode", ow_ssl_mode_name(s->tls.mode)),
               OW_F_INT("code", code), OW_F_STR("reason", reason));
    return ow_error_set(err, OW_ERRCLASS_FATAL, code,
                        "TLS to MySQL at %s failed (mysql.ssl_mode=%s): %s", server,
                        ow_ssl_mode_name(s->tls.mode), reason);
}

/* A certificate, a CA or a protocol mismatch does not heal by itself:
 * retrying it forever would look like an outage. Connector/C
 * reports every failed handshake and verification as 2026. */
int ow_store_tls_connect_failed(ow_store *s, unsigned e, ow_error *err)
{
    if (s->tls.mode == OW_SSL_DISABLED)
        return OW_OK;
    if (e == CR_SSL_CONNECTION_ERROR)
        return tls_fatal(s, (int)e, mysql_error(s->db), err);
    /* With TLS 1.3 the server checks the client certificate after the
     * client's side of the handshake; a rejected one (expired, revoked,
     * another CA) may then show as a connection lost while "sending
     * authentication information", which is also what a server restart
     * looks like. One such loss may be an outage; three in a row are
     * taken for the certificate. */
    if (e == CR_SERVER_LOST && set(s->tls.cert) &&
        strstr(mysql_error(s->db), "authentication") != NULL) {
        if (atomic_fetch_add(&handshake_losses, 1) + 1 >= 3)
            return tls_fatal(s, (int)e,
                             "the server closed the connection during the TLS handshake three "
                             "times in a row: is mysql.ssl_cert expired, revoked or signed by a CA "
                             "the server does not trust?",
                             err);
        return OW_OK;
    }
    atomic_store(&handshake_losses, 0);
    return OW_OK;
}

int ow_store_tls_refused(ow_store *s, unsigned e, ow_error *err)
{
    char server[OW_STORE_SERVER_TEXT_MAX];

    ow_store_server_text(s, server, sizeof(server));
    if (atomic_exchange(&refused_logged, 1) == 0)
        OW_LOG(OW_LOG_ERROR, "db_connect_failed", OW_F_STR("server", s->host),
               OW_F_INT("port", s->port), OW_F_STR("user", s->user),
               OW_F_STR("ssl_mode", ow_ssl_mode_name(s->tls.mode)), OW_F_INT("code", e),
               OW_F_STR("error", mysql_error(s->db)));
    return ow_error_set(err, OW_ERRCLASS_FATAL, (int)e, "cannot connect to MySQL at %s as %s: %s",
                        server, s->user, mysql_error(s->db));
}

static int loopback(const char *host)
{
    return strcmp(host, "localhost") == 0 || strncmp(host, "127.", 4) == 0 ||
           strcmp(host, "::1") == 0;
}

static const char *tls_version(MYSQL *db)
{
    const char *v = NULL;

#ifdef MARIADB_BASE_VERSION
    if (mariadb_get_infov(db, MARIADB_CONNECTION_TLS_VERSION, &v) != 0)
        v = NULL;
#else
    (void)db;
#endif
    return v != NULL ? v : "unknown";
}

int ow_store_tls_check_session(ow_store *s, ow_error *err)
{
    const char *cipher = mysql_get_ssl_cipher(s->db);
    int first = atomic_exchange(&session_logged, 1) == 0;

    atomic_store(&handshake_losses, 0);
    if (cipher == NULL && s->tls.mode >= OW_SSL_REQUIRED)
        return tls_fatal(s, 0, "the server did not start TLS (does it have a certificate?)", err);
    if (cipher == NULL) {
        if (first && s->tls.mode == OW_SSL_PREFERRED && !loopback(s->host))
            OW_LOG(OW_LOG_WARN, "db_plaintext", OW_F_STR("server", s->host),
                   OW_F_INT("port", s->port), OW_F_STR("ssl_mode", "preferred"),
                   OW_F_STR("hint",
                            "the session is unencrypted; set mysql.ssl_mode=verify_identity "
                            "and mysql.ssl_ca"));
        OW_LOG(first ? OW_LOG_INFO : OW_LOG_DEBUG, "db_session", OW_F_STR("server", s->host),
               OW_F_INT("port", s->port), OW_F_STR("ssl_mode", ow_ssl_mode_name(s->tls.mode)),
               OW_F_STR("tls", "none"));
        return OW_OK;
    }
    OW_LOG(first ? OW_LOG_INFO : OW_LOG_DEBUG, "db_session", OW_F_STR("server", s->host),
           OW_F_INT("port", s->port), OW_F_STR("ssl_mode", ow_ssl_mode_name(s->tls.mode)),
           OW_F_STR("tls", tls_version(s->db)), OW_F_STR("cipher", cipher));
    return OW_OK;
}
