/* The producer's callbacks and the delivery poller thread
 * (worker_parts.h). Delivery reports arrive here and go to the delivery
 * mode; the ledger stores offsets from this thread
 * (rd_kafka_offsets_store is thread-safe). */

#include "ow/kafka.h"
#include "ow/log.h"
#include "worker_parts.h"

/* --- Producer callbacks (poller thread) --------------------------------- */

void ow_worker_on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    ow_worker *w = opaque;

    ow_delivery_delivered(w->delivery, rk, m);
}

void ow_worker_on_error(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
    ow_worker *w = opaque;

    if (err == RD_KAFKA_RESP_ERR__FATAL) {
        char why[512];
        /* The delivery mode says whether the producer is replaced, and may
         * have said why it stops (a fenced transactional producer). */
        ow_producer_fate fate =
            rk == w->producer ? ow_delivery_producer_failed(w->delivery) : OW_PRODUCER_STOPS;
        int replace = fate == OW_PRODUCER_REPLACED;

        if (fate == OW_PRODUCER_REPORTED)
            return;
        rd_kafka_fatal_error(rk, why, sizeof(why));
        OW_LOG(OW_LOG_ERROR, "kafka_fatal", OW_F_STR("client", rd_kafka_name(rk)),
               OW_F_STR("error", why),
               OW_F_STR("then", replace ? "the producer is replaced" : NULL));
        if (replace)
            atomic_store(&w->producer_failed, 1);
        else
            ow_runstate_set_fatal(&w->rs, "fatal Kafka client error");
        return;
    }
    if (ow_kafka_refused(rk, err, reason)) {
        ow_runstate_set_fatal(&w->rs, "Kafka refused the worker's credentials or permissions");
        return;
    }
    OW_LOG(OW_LOG_WARN, "kafka_error", OW_F_STR("client", rd_kafka_name(rk)),
           OW_F_STR("error", rd_kafka_err2name((rd_kafka_resp_err_t)err)),
           OW_F_STR("reason", reason));
}

/* /readyz answers from broker_ok, refreshed here once a second, so that no
 * HTTP request waits on the broker: a metadata call inside the handler
 * would hold the HTTP thread up to a second per probe while the broker is
 * down. A
 * check returns in milliseconds while the broker answers; while it does not,
 * delivery reports wait up to BROKER_CHECK_TIMEOUT_MS more, and there are
 * none to wait for then. */
#define BROKER_CHECK_INTERVAL_MS 1000
#define BROKER_CHECK_TIMEOUT_MS 500

static int broker_reachable(ow_worker *w)
{
    const rd_kafka_metadata_t *md = NULL;
    int ok = rd_kafka_metadata(w->producer, 0, NULL, &md, BROKER_CHECK_TIMEOUT_MS) ==
                 RD_KAFKA_RESP_ERR_NO_ERROR &&
             md->broker_cnt > 0;

    if (md != NULL)
        rd_kafka_metadata_destroy(md);
    return ok;
}

void *ow_worker_poller(void *arg)
{
    ow_worker *w = arg;
    int64_t next_check = 0;

    while (!atomic_load(&w->poller_stop)) {
        rd_kafka_poll(w->producer, 100);
        ow_output_pump(&w->out);
        if (ow_clock_mono_ms() >= next_check) {
            atomic_store(&w->broker_ok, broker_reachable(w));
            next_check = ow_clock_mono_ms() + BROKER_CHECK_INTERVAL_MS;
        }
    }
    return NULL;
}
