/* Client configuration: fixed guarantees, passthrough, role prefixes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "ow/kafka_conf.h"

static const char *get(rd_kafka_conf_t *c, const char *name, char *buf, size_t sz)
{
    size_t len = sz;

    if (rd_kafka_conf_get(c, name, buf, &len) != RD_KAFKA_CONF_OK)
        return NULL;
    return buf;
}

/* A finished configuration from text. */
static void load(ow_config *cfg, const char *text)
{
    ow_error err;

    assert_int_equal(ow_config_init(cfg, &err), OW_OK);
    assert_int_equal(ow_config_load_string(cfg, text, "t", &err), OW_OK);
    assert_int_equal(ow_config_finish(cfg, &err), OW_OK);
}

static void test_roles_and_guarantees(void **state)
{
    ow_config cfg;
    ow_error err;
    rd_kafka_conf_t *c, *p;
    char buf[256];

    (void)state;
    load(&cfg, "kafka.socket.timeout.ms = 12345\n"
               "kafka.consumer.session.timeout.ms = 7000\n"
               "kafka.producer.linger.ms = 9\n");
    c = ow_kafka_conf_new(&cfg, OW_KAFKA_CONSUMER, &err);
    p = ow_kafka_conf_new(&cfg, OW_KAFKA_PRODUCER, &err);
    assert_non_null(c);
    assert_non_null(p);
    /* Both clients get plain kafka.* properties. */
    assert_string_equal(get(c, "socket.timeout.ms", buf, sizeof(buf)), "12345");
    assert_string_equal(get(p, "socket.timeout.ms", buf, sizeof(buf)), "12345");
    /* Role-prefixed ones reach one client only. */
    assert_string_equal(get(c, "session.timeout.ms", buf, sizeof(buf)), "7000");
    assert_string_equal(get(p, "session.timeout.ms", buf, sizeof(buf)), "45000");
    assert_string_equal(get(p, "linger.ms", buf, sizeof(buf)), "9");
    /* Results are compressed unless the configuration says otherwise. */
    assert_string_equal(get(p, "compression.type", buf, sizeof(buf)), "lz4");
    assert_string_equal(get(c, "compression.type", buf, sizeof(buf)), "none");
    /* The consumer joins the configured group; settings taken from other
     * keys carry their values. */
    assert_string_equal(get(c, "group.id", buf, sizeof(buf)), cfg.kafka_group_id);
    assert_string_equal(get(c, "auto.commit.interval.ms", buf, sizeof(buf)), "1000");
    assert_string_equal(get(c, "queued.max.messages.kbytes", buf, sizeof(buf)), "14336");
    /* What the guarantees rest on. */
    assert_string_equal(get(c, "enable.auto.offset.store", buf, sizeof(buf)), "false");
    assert_string_equal(get(c, "enable.partition.eof", buf, sizeof(buf)), "true");
    /* Partitions added to the input are seen within 10 s, not 5 minutes. */
    assert_string_equal(get(c, "topic.metadata.refresh.interval.ms", buf, sizeof(buf)), "10000");
    assert_string_equal(get(p, "topic.metadata.refresh.interval.ms", buf, sizeof(buf)), "300000");
    assert_string_equal(get(c, "partition.assignment.strategy", buf, sizeof(buf)),
                        "cooperative-sticky");
    assert_string_equal(get(p, "enable.idempotence", buf, sizeof(buf)), "true");
    assert_string_equal(get(p, "acks", buf, sizeof(buf)), "-1");
    rd_kafka_conf_destroy(c);
    rd_kafka_conf_destroy(p);
    ow_config_cleanup(&cfg);
}

/* The defaults give way to the configuration. */
static void test_compression_override(void **state)
{
    ow_config cfg;
    ow_error err;
    rd_kafka_conf_t *p;
    char buf[64];

    (void)state;
    load(&cfg, "kafka.producer.compression.type = zstd\n");
    p = ow_kafka_conf_new(&cfg, OW_KAFKA_PRODUCER, &err);
    assert_non_null(p);
    assert_string_equal(get(p, "compression.type", buf, sizeof(buf)), "zstd");
    rd_kafka_conf_destroy(p);
    ow_config_cleanup(&cfg);
    /* So do the consumer's metadata refresh, and another name of its
     * offset reset. */
    load(&cfg, "kafka.consumer.topic.metadata.refresh.interval.ms = 60000\n"
               "kafka.consumer.auto.offset.reset = smallest\n");
    p = ow_kafka_conf_new(&cfg, OW_KAFKA_CONSUMER, &err);
    assert_non_null(p);
    assert_string_equal(get(p, "topic.metadata.refresh.interval.ms", buf, sizeof(buf)), "60000");
    rd_kafka_conf_destroy(p);
    ow_config_cleanup(&cfg);
}

/* exactly_once_v2: a transactional producer named after the group and the
 * replica, offsets only through its transactions, and no infinite message
 * timeout (librdkafka bounds it by the transaction's). */
static void test_exactly_once_settings(void **state)
{
    ow_config cfg;
    ow_error err;
    rd_kafka_conf_t *c, *p;
    char buf[256];

    (void)state;
    load(&cfg, "processing.guarantee = exactly_once_v2\nworker.replica_id = r-7\n"
               "kafka.group.id = orders-g\n");
    c = ow_kafka_conf_new(&cfg, OW_KAFKA_CONSUMER, &err);
    p = ow_kafka_conf_new(&cfg, OW_KAFKA_PRODUCER, &err);
    assert_non_null(c);
    assert_non_null(p);
    assert_string_equal(get(p, "transactional.id", buf, sizeof(buf)), "orders-g-r-7");
    assert_string_equal(get(c, "enable.auto.commit", buf, sizeof(buf)), "false");
    assert_string_not_equal(get(p, "message.timeout.ms", buf, sizeof(buf)), "0");
    assert_string_equal(get(p, "enable.idempotence", buf, sizeof(buf)), "true");
    rd_kafka_conf_destroy(c);
    rd_kafka_conf_destroy(p);
    ow_config_cleanup(&cfg);
    /* at_least_once keeps its settings. */
    load(&cfg, "");
    c = ow_kafka_conf_new(&cfg, OW_KAFKA_CONSUMER, &err);
    p = ow_kafka_conf_new(&cfg, OW_KAFKA_PRODUCER, &err);
    assert_string_equal(get(c, "enable.auto.commit", buf, sizeof(buf)), "true");
    assert_string_equal(get(p, "message.timeout.ms", buf, sizeof(buf)), "0");
    assert_null(get(p, "transactional.id", buf, sizeof(buf)));
    rd_kafka_conf_destroy(c);
    rd_kafka_conf_destroy(p);
    ow_config_cleanup(&cfg);
}

static void test_refused_and_bad_properties(void **state)
{
    ow_config cfg;
    ow_error err;

    (void)state;
    assert_int_equal(ow_config_init(&cfg, &err), OW_OK);
    assert_int_equal(ow_config_load_string(&cfg, "kafka.producer.acks = 1\n", "t", &err), OW_OK);
    assert_int_equal(ow_config_finish(&cfg, &err), OW_EINVAL);
    assert_string_equal(err.msg, "kafka.producer.acks: is fixed by order-worker's delivery guarantees");
    ow_config_cleanup(&cfg);

    load(&cfg, "kafka.no.such.property = 1\n");
    assert_null(ow_kafka_conf_new(&cfg, OW_KAFKA_CONSUMER, &err));
    assert_non_null(strstr(err.msg, "kafka.no.such.property"));
    ow_config_cleanup(&cfg);
}

/* Every kafka.* property is checked against librdkafka when the
 * configuration is loaded, and the error says where it was set. */
static void test_check_config_names_the_line(void **state)
{
    static const struct {
        const char *text;
        int rc;
        const char *error;
    } cases[] = {
        {"kafka.socket.timeout.ms = 12345\nkafka.consumer.session.timeout.ms = 7000\n", OW_OK,
         ""},
        {"kafka.socket.timeout.ms = 12345\nkafka.no.such.property = 1\n", OW_EINVAL,
         "t:2: kafka.no.such.property: No such configuration property"},
        {"kafka.consumer.no.such = 1\n", OW_EINVAL,
         "t:1: kafka.consumer.no.such: No such configuration property"},
        {"kafka.socket.timeout.ms = soon\n", OW_EINVAL, "t:1: kafka.socket.timeout.ms: Invalid value"},
    };

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        ow_config cfg;
        ow_error err;

        ow_error_clear(&err);
        assert_int_equal(ow_config_init(&cfg, &err), OW_OK);
        assert_int_equal(ow_config_load_string(&cfg, cases[i].text, "t", &err), OW_OK);
        assert_int_equal(ow_config_finish(&cfg, &err), OW_OK);
        assert_int_equal(ow_kafka_check_config(&cfg, &err), cases[i].rc);
        if (strstr(err.msg, cases[i].error) == NULL)
            fail_msg("%s: got \"%s\", want \"%s\"", cases[i].text, err.msg, cases[i].error);
        ow_config_cleanup(&cfg);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roles_and_guarantees),
        cmocka_unit_test(test_compression_override),
        cmocka_unit_test(test_exactly_once_settings),
        cmocka_unit_test(test_refused_and_bad_properties),
        cmocka_unit_test(test_check_config_names_the_line),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
