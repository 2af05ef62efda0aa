/* The output gate (issue 12); see gate_internal.h. */
#include "gate_internal.h"

#include <stdlib.h>
#include <string.h>

#include "ow/util.h"

void ow_gate_init(ow_gate *g, int on, int64_t linger_us, ow_gate_hand_fn hand, void *ctx)
{
    memset(g, 0, sizeof(*g));
    g->on = on;
    g->linger_us = linger_us;
    g->max_hold_us = OW_GATE_MAX_HOLD_US;
    g->hand = hand;
    g->ctx = ctx;
    pthread_mutex_init(&g->mu, NULL);
    atomic_init(&g->in_flight, 0);
}

static void free_list(ow_gate_msg *n)
{
    while (n != NULL) {
        ow_gate_msg *next = n->next;

        if (n->h != NULL)
            rd_kafka_headers_destroy(n->h);
        free(n);
        n = next;
    }
}

void ow_gate_destroy(ow_gate *g)
{
    free_list(g->held);
    g->held = g->held_tail = NULL;
    pthread_mutex_destroy(&g->mu);
}

static rd_kafka_resp_err_t hand_over(ow_gate *g, const char *topic, const void *key, size_t key_len,
                                     const void *value, size_t len, rd_kafka_headers_t *h,
                                     void *opaque)
{
    rd_kafka_resp_err_t e = g->hand(g->ctx, topic, key, key_len, value, len, h, opaque);

    if (e == RD_KAFKA_RESP_ERR_NO_ERROR)
        atomic_fetch_add(&g->in_flight, 1);
    return e;
}

/* Under mu: whether an output may go to the producer now. The first output
 * after the producer went idle opens a window of one linger, so that one
 * request per partition carries everything of that window. */
static int is_open(ow_gate *g)
{
    int64_t now = ow_clock_mono_us();

    if (g->held != NULL)
        return 0; /* behind the held ones, in order */
    if (atomic_load(&g->in_flight) == 0) {
        g->window_until_us = now + g->linger_us;
        return 1;
    }
    return now < g->window_until_us;
}

/* Under mu: appends a copy of one output after those already held. */
static int hold(ow_gate *g, const char *topic, const void *key, size_t key_len, const void *value,
                size_t len, rd_kafka_headers_t *h, void *opaque)
{
    ow_gate_msg *n;

    if (g->max_held_bytes > 0 && g->held_bytes + key_len + len > g->max_held_bytes)
        return 0; /* refused as full */
    n = malloc(sizeof(*n) + key_len + len);
    if (n == NULL)
        return -1;
    n->next = NULL;
    n->topic = topic;
    n->opaque = opaque;
    n->h = h;
    n->err = RD_KAFKA_RESP_ERR_NO_ERROR;
    n->since_us = ow_clock_mono_us();
    n->has_key = key != NULL;
    n->has_value = value != NULL;
    n->key_len = key_len;
    n->len = len;
    if (key_len > 0)
        memcpy(n->data, key, key_len);
    if (len > 0)
        memcpy(n->data + key_len, value, len);
    if (g->held_tail != NULL)
        g->held_tail->next = n;
    else
        g->held = n;
    g->held_tail = n;
    g->n_held++;
    g->held_bytes += key_len + len;
    return 1;
}

int ow_gate_send(ow_gate *g, const char *topic, const void *key, size_t key_len, const void *value,
                 size_t len, rd_kafka_headers_t *h, void *opaque, rd_kafka_resp_err_t *e)
{
    int rc = 0;

    *e = RD_KAFKA_RESP_ERR_NO_ERROR;
    if (!g->on) {
        *e = hand_over(g, topic, key, key_len, value, len, h, opaque);
        return 0;
    }
    pthread_mutex_lock(&g->mu);
    if (is_open(g))
        *e = hand_over(g, topic, key, key_len, value, len, h, opaque);
    else if ((rc = hold(g, topic, key, key_len, value, len, h, opaque)) == 0)
        *e = RD_KAFKA_RESP_ERR__QUEUE_FULL;
    pthread_mutex_unlock(&g->mu);
    if (rc < 0)
        rd_kafka_headers_destroy(h);
    return rc;
}

void ow_gate_count(ow_gate *g, int n)
{
    atomic_fetch_add(&g->in_flight, n);
}

void ow_gate_acked(ow_gate *g)
{
    atomic_fetch_sub(&g->in_flight, 1);
}

ow_gate_msg *ow_gate_release(ow_gate *g, int stop_on_full)
{
    ow_gate_msg *refused = NULL, **tail = &refused;

    int64_t now = ow_clock_mono_us();

    pthread_mutex_lock(&g->mu);
    if (g->held == NULL ||
        (atomic_load(&g->in_flight) > 0 && now - g->held->since_us < g->max_hold_us)) {
        pthread_mutex_unlock(&g->mu);
        return NULL;
    }
    g->window_until_us = now + g->linger_us;
    while (g->held != NULL) {
        ow_gate_msg *n = g->held;

        n->err = hand_over(g, n->topic, n->has_key ? n->data : NULL, n->key_len,
                           n->has_value ? n->data + n->key_len : NULL, n->len, n->h, n->opaque);
        if (n->err == RD_KAFKA_RESP_ERR__QUEUE_FULL && stop_on_full)
            break; /* the rest after the next delivery poll */
        g->held = n->next;
        g->n_held--;
        g->held_bytes -= n->key_len + n->len;
        if (n->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
            free(n);
            continue;
        }
        rd_kafka_headers_destroy(n->h);
        n->h = NULL;
        n->next = NULL;
        *tail = n;
        tail = &n->next;
    }
    if (g->held == NULL)
        g->held_tail = NULL;
    pthread_mutex_unlock(&g->mu);
    return refused;
}

ow_gate_msg *ow_gate_take(ow_gate *g)
{
    ow_gate_msg *list;

    pthread_mutex_lock(&g->mu);
    list = g->held;
    g->held = g->held_tail = NULL;
    g->n_held = 0;
    g->held_bytes = 0;
    pthread_mutex_unlock(&g->mu);
    return list;
}

size_t ow_gate_held(ow_gate *g)
{
    size_t n;

    pthread_mutex_lock(&g->mu);
    n = g->n_held;
    pthread_mutex_unlock(&g->mu);
    return n;
}
