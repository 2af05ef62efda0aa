/*
 * order-worker send: produces one document to topic.input and, with --wait,
 * reads topic.results until the result of that very message arrives, and
 * topic.dlq for the OUTPUT_TOO_LARGE notice that stands in for a result the
 * results topic refused for its size (docs/contract.md, "Output sizes").
 *
 * Both are matched by their source-partition and source-offset headers,
 * which the worker copies from the input message. So that nothing is
 * missed, the consumer is assigned every partition of both topics at its
 * current end (the high watermark, an explicit offset) before anything is
 * produced: what answers our message, published after it was consumed,
 * lies beyond it. The consumer never joins or commits to a group.
 */
#include <errno.h>
#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "ow/json.h"
#include "ow/kafka.h"
#include "ow/kafka_conf.h"

#define SEND_KEY_MAX 4096
#define SEND_TIMEOUT_DEFAULT_MS 30000
#define SEND_TIMEOUT_MAX_MS 3600000
#define SEND_POLL_MS 100
#define METADATA_RETRY_MS 5000 /* how long a missing topic may be a new one */

void ow_help_send(void)
{
    puts("usage: order-worker send --user U --key K [FILE|-] [--wait] [--timeout-ms N]\n"
         "                         [--config FILE]\n"
         "\n"
         "Produces the JSON document in FILE (or stdin when FILE is - or absent; at\n"
         "most request.max_bytes) to topic.input with message key K, with the\n"
         "worker's producer settings (idempotent, acks=all), waits for the broker's\n"
         "acknowledgement and prints \"sent: partition P offset O\" on stderr.\n"
         "\n"
         "The document is sent byte for byte and not validated (the worker does\n"
         "that, so invalid input can be tested). One check only: when it is a JSON\n"
         "object with a top-level user_id, that user_id must be the integer U;\n"
         "otherwise send refuses. A document without a user_id is sent as it is\n"
         "(the worker will answer 400). Neither is the key checked, beyond being\n"
         "non-empty: a warning says when the worker will reject it.\n"
         "\n"
         "  --wait          then wait for the message's result on topic.results and\n"
         "                  print its value on stdout and its headers (replayed,\n"
         "                  user-id, source-*) on stderr; interim answers (409\n"
         "                  REQUEST_IN_PROGRESS) go to stderr as \"interim: ...\" and\n"
         "                  the wait goes on until the definitive one. When\n"
         "                  topic.results refused the result for its size, the\n"
         "                  OUTPUT_TOO_LARGE notice on topic.dlq that stands in for\n"
         "                  it ends the wait: its headers go to stderr, nothing to\n"
         "                  stdout, and `order-worker lookup` shows a recorded decision\n"
         "  --timeout-ms N  give up after N ms in all (default 30000)\n"
         "\n"
         "Exit status: 0 sent (with --wait: the result arrived, whatever its status),\n"
         "1 not acknowledged, no result in time, or interrupted, 2 bad arguments,\n"
         "configuration or document, 5 (--wait) the result was too large for\n"
         "topic.results and an OUTPUT_TOO_LARGE notice came in its place.");
}

typedef struct {
    const ow_config *cfg;
    const volatile sig_atomic_t *stop;
    const char *key;
    size_t key_len;
    ow_buf doc;
    int64_t deadline; /* ow_clock_mono_ms() */
    rd_kafka_t *producer;
    rd_kafka_t *consumer;
    /* The delivery report. */
    int delivered;
    rd_kafka_resp_err_t derr;
    int32_t partition;
    int64_t offset;
    int notice; /* an OUTPUT_TOO_LARGE notice came instead of the result */
} send_ctx;

static int64_t time_left(const send_ctx *c)
{
    int64_t left = c->deadline - ow_clock_mono_ms();

    return left > 0 ? left : 0;
}

/* --- Arguments and the document ------------------------------------------ */

typedef struct {
    int64_t user;
    const char *key;
    const char *path; /* NULL or "-": stdin */
    int64_t timeout_ms;
    int wait;
} send_args;

static void warn_bad_key(const char *key)
{
    ow_field_errors errs;

    ow_field_errors_init(&errs);
    if (ow_request_check_key(key, strlen(key), &errs) != OW_OK)
        fprintf(stderr,
                "order-worker send: warning: --key: %s; the worker will answer 400 "
                "INVALID_REQUEST\n",
                errs.count > 0 ? errs.items[0].message : "is not a valid idempotency key");
}

static int parse_send_args(int argc, char **argv, send_args *a)
{
    static const char *const known[] = {"--config", "--user",       "--key",
                                        "--wait!",  "--timeout-ms", NULL};
    const char *pos[1] = {NULL};
    const char *t;

    if (ow_cli_args(argc, argv, known, "send", pos, 1) < 0 ||
        ow_cli_user(argc, argv, "send", &a->user) != 0)
        return OW_EXIT_USAGE;
    a->key = ow_cli_required(argc, argv, "--key", "send");
    if (a->key == NULL)
        return OW_EXIT_USAGE;
    if (strlen(a->key) > SEND_KEY_MAX) {
        fprintf(stderr, "order-worker send: --key: longer than %d bytes\n", SEND_KEY_MAX);
        return OW_EXIT_USAGE;
    }
    t = ow_cli_opt(argc, argv, "--timeout-ms");
    a->timeout_ms = SEND_TIMEOUT_DEFAULT_MS;
    if (t != NULL && ow_cli_int_range("send", "--timeout-ms", t, 1, SEND_TIMEOUT_MAX_MS, "",
                                      &a->timeout_ms) != OW_EXIT_OK)
        return OW_EXIT_USAGE;
    a->path = pos[0];
    a->wait = ow_cli_flag(argc, argv, "--wait");
    warn_bad_key(a->key);
    return OW_EXIT_OK;
}

/* Reads at most max bytes of path (stdin for NULL or "-"). */
static int read_document(const char *path, size_t max, ow_buf *out)
{
    int use_stdin = path == NULL || strcmp(path, "-") == 0;
    const char *name = use_stdin ? "stdin" : path;
    FILE *f = use_stdin ? stdin : fopen(path, "rb");
    char chunk[65536];
    int code = OW_EXIT_OK;

    if (f == NULL) {
        fprintf(stderr, "order-worker send: %s: cannot open: %s\n", name, strerror(errno));
        return OW_EXIT_USAGE;
    }
    while (code == OW_EXIT_OK) {
        size_t n = fread(chunk, 1, sizeof(chunk), f);

        if (n == 0)
            break;
        if (out->len + n > max) {
            fprintf(stderr, "order-worker send: %s: larger than request.max_bytes (%zu bytes)\n",
                    name, max);
            code = OW_EXIT_USAGE;
        } else if (ow_buf_append(out, chunk, n) != OW_OK) {
            fprintf(stderr, "order-worker send: out of memory\n");
            code = OW_EXIT_FAILURE;
        }
    }
    if (code == OW_EXIT_OK && ferror(f)) {
        fprintf(stderr, "order-worker send: %s: read error\n", name);
        code = OW_EXIT_USAGE;
    }
    if (!use_stdin)
        fclose(f);
    return code;
}

/* A top-level user_id, when the document has one, must be the integer --user. */
static int check_user(const ow_buf *doc, int64_t user)
{
    ow_json_doc *d = NULL;
    const ow_json_node *uid = NULL;
    int64_t v = 0;
    int code = OW_EXIT_OK;

    if (ow_json_parse(doc->data, doc->len, NULL, &d, NULL) != OW_JSON_OK)
        return OW_EXIT_OK; /* not JSON: sent as it is, for the worker to reject */
    if (ow_json_root(d)->type == OW_JSON_OBJECT)
        uid = ow_json_member(ow_json_root(d), "user_id");
    if (uid != NULL && (uid->type != OW_JSON_NUMBER || !ow_json_number_is_integer(uid) ||
                        ow_parse_int64(uid->str, &v) != OW_OK)) {
        fprintf(stderr,
                "order-worker send: the document's user_id is not an integer; --user is "
                "%lld\n",
                (long long)user);
        code = OW_EXIT_USAGE;
    } else if (uid != NULL && v != user) {
        fprintf(stderr, "order-worker send: the document's user_id is %lld but --user is %lld\n",
                (long long)v, (long long)user);
        code = OW_EXIT_USAGE;
    }
    ow_json_free(&d);
    return code;
}

/* --- The results consumer ------------------------------------------------- */

static rd_kafka_t *new_consumer(const ow_config *cfg, ow_error *err)
{
    char errstr[512];
    rd_kafka_conf_t *conf = ow_kafka_conf_new(cfg, OW_KAFKA_CONSUMER, err);
    rd_kafka_t *rk = NULL;
    int rc = conf != NULL ? OW_OK : OW_EINVAL;

    /* Never the worker's group, and nothing is ever committed. */
    if (rc == OW_OK)
        rc = ow_kafka_conf_set(conf, "group.id", "order-worker-send", err);
    if (rc == OW_OK)
        rc = ow_kafka_conf_set(conf, "enable.auto.commit", "false", err);
    if (rc == OW_OK)
        rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof(errstr));
    if (rc == OW_OK && rk == NULL)
        ow_error_set(err, OW_ERRCLASS_FATAL, 0, "results consumer: %s", errstr);
    if (rk == NULL && conf != NULL)
        rd_kafka_conf_destroy(conf);
    return rk; /* conf is owned by rk when rk is not NULL */
}

/* Errors that a topic created a moment ago can still give. */
static int is_metadata_lag(rd_kafka_resp_err_t e)
{
    return e == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART ||
           e == RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE || e == RD_KAFKA_RESP_ERR__TIMED_OUT;
}

static rd_kafka_resp_err_t topic_partitions(rd_kafka_t *rk, rd_kafka_topic_t *t, int timeout_ms,
                                            int *n)
{
    const rd_kafka_metadata_t *md = NULL;
    rd_kafka_resp_err_t e = rd_kafka_metadata(rk, 0, t, &md, timeout_ms);

    if (e == RD_KAFKA_RESP_ERR_NO_ERROR && md->topic_cnt != 1)
        e = RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART;
    if (e == RD_KAFKA_RESP_ERR_NO_ERROR)
        e = md->topics[0].err;
    if (e == RD_KAFKA_RESP_ERR_NO_ERROR)
        *n = md->topics[0].partition_cnt;
    if (md != NULL)
        rd_kafka_metadata_destroy(md);
    return e;
}

/* The partition count of topic, which errors name with its configuration
 * key; retries for a few seconds while the broker may not know a topic
 * created a moment ago. */
static int partition_count(send_ctx *c, const char *key, const char *topic, ow_error *err)
{
    rd_kafka_topic_t *t = rd_kafka_topic_new(c->consumer, topic, NULL);
    int64_t give_up = ow_clock_mono_ms() + METADATA_RETRY_MS;
    rd_kafka_resp_err_t e;
    int n = -1;

    if (t == NULL)
        return ow_error_set(err, OW_ERRCLASS_FATAL, 0, "%s: cannot create a topic handle", topic);
    for (;;) {
        e = topic_partitions(c->consumer, t, (int)time_left(c), &n);
        if (e == RD_KAFKA_RESP_ERR_NO_ERROR || !is_metadata_lag(e) || *c->stop ||
            ow_clock_mono_ms() + SEND_POLL_MS >= give_up || time_left(c) <= SEND_POLL_MS)
            break;
        ow_sleep_ms(SEND_POLL_MS, c->stop);
    }
    rd_kafka_topic_destroy(t);
    if (e != RD_KAFKA_RESP_ERR_NO_ERROR)
        return ow_error_set(err, OW_ERRCLASS_FATAL, (int)e, "%s %s: %s", key, topic,
                            rd_kafka_err2str(e));
    return n;
}

/* Adds every partition of topic (configuration key key) at its high
 * watermark to list. */
static int add_topic_end(send_ctx *c, const char *key, const char *topic,
                         rd_kafka_topic_partition_list_t *list, ow_error *err)
{
    rd_kafka_resp_err_t e = RD_KAFKA_RESP_ERR_NO_ERROR;
    int n = partition_count(c, key, topic, err);

    if (n < 0)
        return n;
    for (int p = 0; p < n && e == RD_KAFKA_RESP_ERR_NO_ERROR; p++) {
        int64_t lo = 0, hi = 0;

        e = rd_kafka_query_watermark_offsets(c->consumer, topic, p, &lo, &hi, (int)time_left(c));
        rd_kafka_topic_partition_list_add(list, topic, p)->offset = hi;
    }
    if (e != RD_KAFKA_RESP_ERR_NO_ERROR)
        return ow_error_set(err, OW_ERRCLASS_FATAL, (int)e, "%s %s: %s", key, topic,
                            rd_kafka_err2str(e));
    return OW_OK;
}

/* Assigns every partition of topic.results and topic.dlq at its end. */
static int assign_outputs_end(send_ctx *c, ow_error *err)
{
    rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new(8);
    rd_kafka_resp_err_t e;
    int rc = add_topic_end(c, "topic.results", c->cfg->topic_results, list, err);

    if (rc == OW_OK)
        rc = add_topic_end(c, "topic.dlq", c->cfg->topic_dlq, list, err);
    if (rc == OW_OK) {
        e = rd_kafka_assign(c->consumer, list);
        if (e != RD_KAFKA_RESP_ERR_NO_ERROR)
            rc = ow_error_set(err, OW_ERRCLASS_FATAL, (int)e, "assigning %s and %s: %s",
                              c->cfg->topic_results, c->cfg->topic_dlq, rd_kafka_err2str(e));
    }
    rd_kafka_topic_partition_list_destroy(list);
    return rc;
}

/* A header's value as a NUL-terminated string in out; 0 when absent. */
static int header_text(const rd_kafka_message_t *m, const char *name, char *out, size_t outsz)
{
    size_t len = 0;
    const char *v = ow_kafka_header(m, name, &len);

    if (v == NULL || len >= outsz)
        return 0;
    memcpy(out, v, len);
    out[len] = '\0';
    return 1;
}

static int is_our_result(const send_ctx *c, const rd_kafka_message_t *m)
{
    char topic[256], part[32], off[32];
    int64_t p = -1, o = -1;

    if (header_text(m, "source-topic", topic, sizeof(topic)) &&
        strcmp(topic, c->cfg->topic_input) != 0)
        return 0;
    return header_text(m, "source-partition", part, sizeof(part)) &&
           header_text(m, "source-offset", off, sizeof(off)) && ow_parse_int64(part, &p) == OW_OK &&
           ow_parse_int64(off, &o) == OW_OK && p == c->partition && o == c->offset;
}

static void print_headers(const rd_kafka_message_t *m)
{
    rd_kafka_headers_t *h = NULL;
    const char *name = NULL;
    const void *v = NULL;
    size_t len = 0;

    if (rd_kafka_message_headers(m, &h) != RD_KAFKA_RESP_ERR_NO_ERROR)
        return;
    for (size_t i = 0; rd_kafka_header_get_all(h, i, &name, &v, &len) == RD_KAFKA_RESP_ERR_NO_ERROR;
         i++)
        fprintf(stderr, "%s: %.*s\n", name, (int)len, v != NULL ? (const char *)v : "");
}

static void print_result(const rd_kafka_message_t *m)
{
    fwrite(m->payload, 1, m->len, stdout);
    fputc('\n', stdout);
    fflush(stdout);
    print_headers(m);
}

/* 1 for the OUTPUT_TOO_LARGE notice that replaced the result (its
 * error-message names the output, docs/asyncapi.yaml). The dead-letter
 * topic also carries the copy of an invalid message and a notice for that
 * copy: a result is published beside both, so they do not end the wait. */
static int is_result_notice(const rd_kafka_message_t *m)
{
    static const char prefix[] = "the result (";
    char code[32];
    size_t len = 0;
    const char *msg = ow_kafka_header(m, "error-message", &len);

    return header_text(m, "error-code", code, sizeof(code)) &&
           strcmp(code, "OUTPUT_TOO_LARGE") == 0 && msg != NULL && len >= sizeof(prefix) - 1 &&
           memcmp(msg, prefix, sizeof(prefix) - 1) == 0;
}

/* 1 for a 409 REQUEST_IN_PROGRESS: an interim answer; the worker keeps
 * retrying and publishes the definitive result for the same offset later. */
static int is_interim(const rd_kafka_message_t *m)
{
    ow_json_doc *d = NULL;
    const ow_json_node *code = NULL;
    int interim = 0;

    if (m->payload == NULL || ow_json_parse(m->payload, m->len, NULL, &d, NULL) != OW_JSON_OK)
        return 0;
    if (ow_json_root(d)->type == OW_JSON_OBJECT)
        code = ow_json_member(ow_json_root(d), "code");
    interim = code != NULL && code->type == OW_JSON_STRING &&
              strcmp(code->str, "REQUEST_IN_PROGRESS") == 0;
    ow_json_free(&d);
    return interim;
}

/* Prints what m is to our message; 1 when it ends the wait. */
static int handle_output(send_ctx *c, const rd_kafka_message_t *m)
{
    if (m->err != RD_KAFKA_RESP_ERR_NO_ERROR || !is_our_result(c, m))
        return 0;
    if (strcmp(rd_kafka_topic_name(m->rkt), c->cfg->topic_dlq) == 0) {
        c->notice = is_result_notice(m);
        if (c->notice)
            print_headers(m);
        return c->notice;
    }
    if (is_interim(m)) {
        fprintf(stderr, "interim: %.*s\n", (int)m->len, (const char *)m->payload);
        return 0;
    }
    print_result(m);
    return 1;
}

/* Waits for the definitive result of our message, or the notice that
 * stands in for it; interim answers (REQUEST_IN_PROGRESS) go to stderr and
 * the wait goes on. */
static int await_result(send_ctx *c, ow_error *err)
{
    while (!*c->stop && time_left(c) > 0) {
        int64_t wait = time_left(c) < SEND_POLL_MS ? time_left(c) : SEND_POLL_MS;
        rd_kafka_message_t *m = rd_kafka_consumer_poll(c->consumer, (int)wait);
        int done;

        if (m == NULL)
            continue;
        done = handle_output(c, m);
        rd_kafka_message_destroy(m);
        if (done)
            return OW_OK;
    }
    if (*c->stop)
        return ow_error_set(err, OW_ERRCLASS_FATAL, 0, "interrupted while waiting for the result");
    return ow_error_set(err, OW_ERRCLASS_RETRIABLE, 0,
                        "no result for partition %d offset %lld on %s within the timeout "
                        "(is a worker running?)",
                        (int)c->partition, (long long)c->offset, c->cfg->topic_results);
}

/* --- The producer --------------------------------------------------------- */

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    send_ctx *c = m->_private;

    (void)rk;
    (void)opaque;
    c->delivered = 1;
    c->derr = m->err;
    c->partition = m->partition;
    c->offset = m->offset;
}

static int new_producer(send_ctx *c, ow_error *err)
{
    char errstr[512], timeout[32];
    rd_kafka_conf_t *conf = ow_kafka_conf_new(c->cfg, OW_KAFKA_PRODUCER, err);
    int rc = conf != NULL ? OW_OK : OW_EINVAL;

    /* The worker's producer never gives up; send gives up at its deadline. */
    snprintf(timeout, sizeof(timeout), "%lld", (long long)(time_left(c) > 0 ? time_left(c) : 1));
    if (rc == OW_OK)
        rc = ow_kafka_conf_set(conf, "message.timeout.ms", timeout, err);
    if (rc == OW_OK) {
        rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
        c->producer = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
        if (c->producer == NULL)
            rc = ow_error_set(err, OW_ERRCLASS_FATAL, 0, "producer: %s", errstr);
    }
    if (c->producer == NULL && conf != NULL)
        rd_kafka_conf_destroy(conf);
    return rc; /* conf is owned by the producer when it was created */
}

static int produce_and_confirm(send_ctx *c, ow_error *err)
{
    rd_kafka_resp_err_t e = rd_kafka_producev(
        c->producer, RD_KAFKA_V_TOPIC(c->cfg->topic_input), RD_KAFKA_V_KEY(c->key, c->key_len),
        /* An empty document is an empty value, not a tombstone. */
        RD_KAFKA_V_VALUE(c->doc.data != NULL ? c->doc.data : "", c->doc.len),
        RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_OPAQUE(c), RD_KAFKA_V_END);

    if (e != RD_KAFKA_RESP_ERR_NO_ERROR)
        return ow_error_set(err, OW_ERRCLASS_FATAL, (int)e, "produce to %s: %s",
                            c->cfg->topic_input, rd_kafka_err2str(e));
    while (!c->delivered && !*c->stop && time_left(c) > 0)
        rd_kafka_poll(c->producer, SEND_POLL_MS);
    if (!c->delivered)
        return ow_error_set(err, OW_ERRCLASS_FATAL, 0,
                            "%s before the broker acknowledged the message (it may still arrive)",
                            *c->stop ? "interrupted" : "timed out");
    if (c->derr != RD_KAFKA_RESP_ERR_NO_ERROR)
        return ow_error_set(err, OW_ERRCLASS_FATAL, (int)c->derr, "delivery to %s failed: %s",
                            c->cfg->topic_input, rd_kafka_err2str(c->derr));
    fprintf(stderr, "sent: partition %d offset %lld\n", (int)c->partition, (long long)c->offset);
    return OW_OK;
}

/* --- The command ---------------------------------------------------------- */

static int send_doc(send_ctx *c, int wait)
{
    ow_error err;
    int rc = OW_OK;

    ow_error_clear(&err);
    if (wait) {
        c->consumer = new_consumer(c->cfg, &err);
        rc = c->consumer != NULL ? assign_outputs_end(c, &err) : OW_EFATAL;
    }
    if (rc == OW_OK)
        rc = new_producer(c, &err);
    if (rc == OW_OK)
        rc = produce_and_confirm(c, &err);
    if (rc == OW_OK && wait)
        rc = await_result(c, &err);
    if (c->producer != NULL)
        rd_kafka_destroy(c->producer);
    if (c->consumer != NULL) {
        rd_kafka_consumer_close(c->consumer);
        rd_kafka_destroy(c->consumer);
    }
    if (rc == OW_OK && c->notice) {
        fprintf(stderr,
                "order-worker send: the result of partition %d offset %lld was refused by %s "
                "for its size; an OUTPUT_TOO_LARGE notice on %s stands in for it (a decision "
                "that was recorded is shown by order-worker lookup)\n",
                (int)c->partition, (long long)c->offset, c->cfg->topic_results, c->cfg->topic_dlq);
        return OW_EXIT_OUTPUT_TOO_LARGE;
    }
    if (rc == OW_OK)
        return OW_EXIT_OK;
    fprintf(stderr, "order-worker send: %s\n", err.msg);
    return err.cls == OW_ERRCLASS_INVALID_INPUT ? OW_EXIT_USAGE : OW_EXIT_FAILURE;
}

int ow_cmd_send(int argc, char **argv, const volatile sig_atomic_t *stop)
{
    send_args a = {0};
    send_ctx c = {0};
    ow_config cfg;
    int code = parse_send_args(argc, argv, &a);

    if (code == OW_EXIT_OK)
        code = ow_cli_load_config(ow_cli_opt(argc, argv, "--config"), &cfg);
    if (code != OW_EXIT_OK)
        return code;
    c.cfg = &cfg;
    c.stop = stop;
    c.key = a.key;
    c.key_len = strlen(a.key);
    c.deadline = ow_clock_mono_ms() + a.timeout_ms;
    ow_buf_init(&c.doc);
    code = read_document(a.path, (size_t)cfg.request_max_bytes, &c.doc);
    if (code == OW_EXIT_OK)
        code = check_user(&c.doc, a.user);
    if (code == OW_EXIT_OK)
        code = send_doc(&c, a.wait);
    ow_buf_cleanup(&c.doc);
    ow_config_cleanup(&cfg);
    return code;
}
