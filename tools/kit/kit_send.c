/*
 * kit_sender: the kit's producer for long runs against brokers that are
 * killed and restarted. An idempotent producer can end in a fatal error
 * (librdkafka before 2.3.0 does so after a leader change with a request in
 * flight: "sequence desynchronization"), after which it takes nothing more.
 * An upstream service then does what this does: it keeps every message
 * until its delivery report, replaces the producer, and sends again the
 * messages the old one reported as not delivered. Such a message may have
 * been written after all (its request timed out), so a replacement may
 * write one twice, and one sent again comes after later messages of its
 * partition; the worker treats such a copy as a retry.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kit.h"
#include "ow/util.h"

/* A replacement that fails again this many times ends the sending. */
#define KIT_SENDER_MAX_REPLACED 10

typedef struct pending {
    struct pending *next;
    int has_key;
    size_t key_len;
    size_t len;
    char data[]; /* key, then value */
} pending;

struct kit_sender {
    char *bootstrap;
    char *topic;
    char *extra_conf;
    rd_kafka_t *p;
    pending *redo; /* reported as not delivered, in report order */
    pending **redo_tail;
    kit_send_stats st;
};

static void redo_append(kit_sender *s, pending *msg)
{
    msg->next = NULL;
    *s->redo_tail = msg;
    s->redo_tail = &msg->next;
}

static void on_report(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    kit_sender *s = opaque;
    pending *msg = m->_private;

    (void)rk;
    if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
        free(msg);
        return;
    }
    redo_append(s, msg);
}

static rd_kafka_t *new_producer(kit_sender *s)
{
    rd_kafka_conf_t *c = kit_producer_conf(s->bootstrap, s->extra_conf);
    char errstr[256];
    rd_kafka_t *p;

    rd_kafka_conf_set_dr_msg_cb(c, on_report);
    rd_kafka_conf_set_opaque(c, s);
    p = rd_kafka_new(RD_KAFKA_PRODUCER, c, errstr, sizeof(errstr));
    if (p == NULL) {
        rd_kafka_conf_destroy(c);
        fprintf(stderr, "kit: producer: %s\n", errstr);
    }
    return p;
}

/* Hands msg to the producer; on an error the message stays the caller's. */
static rd_kafka_resp_err_t produce(kit_sender *s, pending *msg)
{
    return kit_produce_with(s->p, s->topic, -1, msg->has_key ? msg->data : NULL, msg->key_len,
                            msg->data + msg->key_len, msg->len, msg);
}

/* Appends chain (ending in NULL) to the redo list. */
static void redo_append_chain(kit_sender *s, pending *chain)
{
    while (chain != NULL) {
        pending *next = chain->next;

        redo_append(s, chain);
        chain = next;
    }
}

/* Ends a failed producer with a report for every message it held. It
 * sends nothing more, so what waits in its queues is purged, again and
 * again, because a request that fails comes back there; what is in flight
 * gets its answer, for at most 30 s. A message whose outcome librdkafka
 * cannot know (its request timed out or its connection broke) is reported
 * as not delivered and is sent again, written or not. So is what is left
 * after 30 s, purged in flight. A message the producer holds even then (a
 * leader change can move one between a purge's steps) gets no report from
 * rd_kafka_destroy: it is counted as lost. */
static void drain(kit_sender *s, rd_kafka_t *p)
{
    int64_t end = ow_clock_mono_ms() + 30000;
    int left;

    while (rd_kafka_outq_len(p) > 0 && ow_clock_mono_ms() < end) {
        rd_kafka_purge(p, RD_KAFKA_PURGE_F_QUEUE);
        rd_kafka_poll(p, 100);
    }
    end = ow_clock_mono_ms() + 2000;
    while (rd_kafka_outq_len(p) > 0 && ow_clock_mono_ms() < end) {
        rd_kafka_purge(p, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
        rd_kafka_poll(p, 100);
    }
    left = rd_kafka_outq_len(p);
    if (left > 0) {
        fprintf(stderr, "kit: a failed producer still holds %d message(s) or event(s)\n", left);
        s->st.lost += left;
    }
    rd_kafka_destroy(p);
}

/* Sends the redo list through the current producer and returns how many
 * it took; what it refuses goes to *held, in order. */
static long resend(kit_sender *s, pending **held)
{
    pending *list = s->redo;
    long n = 0;

    s->redo = NULL;
    s->redo_tail = &s->redo;
    while (list != NULL) {
        pending *next = list->next;
        rd_kafka_resp_err_t e = produce(s, list);

        if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
            if (e != RD_KAFKA_RESP_ERR__FATAL)
                fprintf(stderr,
                        "kit: produce to %s: %s; the messages not sent are counted as failed\n",
                        s->topic, rd_kafka_err2str(e));
            *held = list;
            break;
        }
        n++;
        list = next;
    }
    return n;
}

/* Replaces the producer while it is in a fatal error, and sends again
 * what it reported as not delivered, then held (messages it refused,
 * which come after its reports so that each keeps its place behind older
 * messages of its key; or NULL). Returns 0, or -1 when no producer can be
 * had or they keep failing: then everything not delivered is on the redo
 * list. */
static int replace(kit_sender *s, pending *held)
{
    char why[512];
    int rc = 0;

    while (rc == 0 && rd_kafka_fatal_error(s->p, why, sizeof(why)) != RD_KAFKA_RESP_ERR_NO_ERROR) {
        long n;

        drain(s, s->p);
        s->p = NULL;
        redo_append_chain(s, held);
        held = NULL;
        if (s->st.replaced >= KIT_SENDER_MAX_REPLACED) {
            fprintf(stderr, "kit: producer failed %ld times; the last: %s\n", s->st.replaced + 1,
                    why);
            rc = -1;
        } else if ((s->p = new_producer(s)) == NULL) {
            rc = -1;
        } else {
            s->st.replaced++;
            n = resend(s, &held);
            s->st.resent += n;
            fprintf(stderr,
                    "kit: producer replaced after a fatal error (%s); %ld message(s) sent again\n",
                    why, n);
        }
    }
    redo_append_chain(s, held);
    return rc;
}

kit_sender *kit_sender_new(const char *bootstrap, const char *topic, const char *extra_conf)
{
    kit_sender *s = calloc(1, sizeof(*s));

    if (s == NULL)
        return NULL;
    s->bootstrap = strdup(bootstrap);
    s->topic = strdup(topic);
    s->extra_conf = extra_conf != NULL ? strdup(extra_conf) : NULL;
    s->redo_tail = &s->redo;
    if (s->bootstrap == NULL || s->topic == NULL || (extra_conf != NULL && s->extra_conf == NULL))
        goto fail;
    s->p = new_producer(s);
    if (s->p == NULL)
        goto fail;
    return s;
fail:
    free(s->bootstrap);
    free(s->topic);
    free(s->extra_conf);
    free(s);
    return NULL;
}

int kit_send(kit_sender *s, const void *key, size_t key_len, const void *value, size_t len)
{
    size_t klen = key != NULL ? key_len : 0;
    pending *msg;
    rd_kafka_resp_err_t e;

    if (s->p == NULL)
        return -1;
    msg = malloc(sizeof(*msg) + klen + len);
    if (msg == NULL)
        return -1;
    msg->next = NULL;
    msg->has_key = key != NULL;
    msg->key_len = klen;
    msg->len = len;
    if (klen > 0)
        memcpy(msg->data, key, klen);
    if (len > 0)
        memcpy(msg->data + klen, value, len);
    e = produce(s, msg);
    if (e == RD_KAFKA_RESP_ERR_NO_ERROR)
        return 0;
    if (e != RD_KAFKA_RESP_ERR__FATAL) {
        fprintf(stderr, "kit: produce to %s: %s\n", s->topic, rd_kafka_err2str(e));
        free(msg);
        return -1;
    }
    return replace(s, msg);
}

int kit_sender_poll(kit_sender *s, int timeout_ms)
{
    if (s->p == NULL)
        return -1;
    rd_kafka_poll(s->p, timeout_ms);
    return replace(s, NULL);
}

long kit_sender_close(kit_sender *s, int timeout_ms, kit_send_stats *st)
{
    int64_t end = ow_clock_mono_ms() + timeout_ms;
    long failed;

    if (s == NULL)
        return 0;
    /* In slices, so that a fatal error is met at once, not at the end. */
    while (s->p != NULL && rd_kafka_outq_len(s->p) > 0 && ow_clock_mono_ms() < end) {
        rd_kafka_flush(s->p, 100);
        if (replace(s, NULL) != 0)
            break;
    }
    if (s->p != NULL) {
        drain(s, s->p); /* what is left is reported as not delivered, into redo */
        s->p = NULL;
    }
    failed = s->st.lost;
    while (s->redo != NULL) {
        pending *next = s->redo->next;

        free(s->redo);
        s->redo = next;
        failed++;
    }
    if (st != NULL)
        *st = s->st;
    free(s->bootstrap);
    free(s->topic);
    free(s->extra_conf);
    free(s);
    return failed;
}

long kit_sender_outq(const kit_sender *s)
{
    return s->p != NULL ? rd_kafka_outq_len(s->p) : 0;
}

int kit_sender_test_fatal(kit_sender *s)
{
    if (s->p == NULL)
        return -1;
    return rd_kafka_test_fatal_error(s->p, RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER,
                                     "planted by kit_sender_test_fatal") ==
                   RD_KAFKA_RESP_ERR_NO_ERROR
               ? 0
               : -1;
}
