package example;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.nio.charset.StandardCharsets;
import java.security.SecureRandom;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.UUID;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * Producing to order-worker and reading the answer with the Java client.
 *
 * <p>Sends one order batch, waits for its result (matched by key and by the source
 * partition/offset headers), prints the outcome, then sends the same message again to show a
 * retry being replayed. Each attempt carries a W3C traceparent header (one trace, a span per
 * attempt); the result continues that trace with a span of the worker's. Prints the same lines as
 * examples/python/order_client.py.
 */
public final class OrderClient {
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final SecureRandom RANDOM = new SecureRandom();

  private final Map<String, String> opts = new HashMap<>();

  private OrderClient(String[] args) {
    opts.put("bootstrap", "127.0.0.1:9092");
    opts.put("input-topic", "order-batches");
    opts.put("results-topic", "order-batch-results");
    opts.put("user", "42");
    opts.put("timeout", "60");
    for (int i = 0; i + 1 < args.length; i += 2) {
      if (!args[i].startsWith("--")) {
        throw new IllegalArgumentException("expected --name value, got " + args[i]);
      }
      opts.put(args[i].substring(2), args[i + 1]);
    }
  }

  /** The result of one message: its headers, its exact bytes, its parsed body. */
  private record Result(Map<String, String> headers, byte[] bytes, JsonNode body) {}

  public static void main(String[] args) throws Exception {
    System.setProperty("org.slf4j.simpleLogger.defaultLogLevel", "warn");
    System.exit(new OrderClient(args).run());
  }

  private int run() throws Exception {
    String key = opts.getOrDefault("key", "example-java-" + UUID.randomUUID().toString().substring(0, 16));
    long user = Long.parseLong(opts.get("user"));
    byte[] value = batch(user, key);
    Duration timeout = Duration.ofSeconds(Long.parseLong(opts.get("timeout")));
    String traceId = randomHex(16);
    try (KafkaProducer<String, byte[]> producer = producer();
        KafkaConsumer<String, byte[]> consumer = resultReader()) {
      String tp1 = traceparent(traceId);
      RecordMetadata first = send(producer, key, value, tp1);
      System.out.printf("sent: key=%s partition=%d offset=%d%n", key, first.partition(), first.offset());
      Result r1 = waitResult(consumer, key, first, timeout);
      show(r1, tp1);
      if (r1.body().path("status").asInt() == 201) {
        for (JsonNode o : r1.body().path("orders")) {
          // order_id is a 63-bit integer: read it as a long.
          System.out.printf("  order %s: %s id=%d amount=%s existing=%s%n",
              o.path("external_order_no").asText(), o.path("order_no").asText(),
              o.path("order_id").asLong(), o.path("amount").asText(), o.path("existing").asBoolean());
        }
      }

      // A retry: the same key and the same content, as after a timeout; another attempt, so
      // another span of the same trace.
      String tp2 = traceparent(traceId);
      RecordMetadata again = send(producer, key, value, tp2);
      System.out.printf("retry sent: key=%s partition=%d offset=%d%n", key, again.partition(), again.offset());
      Result r2 = waitResult(consumer, key, again, timeout);
      show(r2, tp2);
      // A replay carries `replayed: true` and the stored bytes unchanged.
      if ("true".equals(r2.headers().get("replayed")) && Arrays.equals(r1.bytes(), r2.bytes())) {
        System.out.println("replay: yes, the stored answer (same bytes as the first)");
        return 0;
      }
      System.out.println("replay: NO, this is a first answer");
      return 1;
    }
  }

  private static byte[] batch(long user, String key) throws Exception {
    ObjectNode doc = JSON.createObjectNode();
    doc.put("user_id", user);
    ArrayNode orders = doc.putArray("orders");
    // Amounts as decimal strings: never a binary floating-point number.
    orders.addObject().put("external_order_no", key + "-1").put("amount", "19.90")
        .put("product_id", 101).put("quantity", 1);
    orders.addObject().put("external_order_no", key + "-2").put("amount", "5");
    return JSON.writeValueAsBytes(doc);
  }

  private KafkaProducer<String, byte[]> producer() {
    Properties p = new Properties();
    p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, opts.get("bootstrap"));
    p.put(ProducerConfig.ACKS_CONFIG, "all");
    p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, true);
    p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
    p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
    return new KafkaProducer<>(p);
  }

  private static String randomHex(int bytes) {
    byte[] b = new byte[bytes];
    RANDOM.nextBytes(b);
    return HexFormat.of().formatHex(b);
  }

  /**
   * A W3C traceparent for one attempt: the request's trace, a new span (8 random bytes, lower-case
   * hex), sampled. OpenTelemetry's Kafka instrumentation writes the same header from the current
   * span.
   */
  private static String traceparent(String traceId) {
    return "00-" + traceId + "-" + randomHex(8) + "-01";
  }

  /** Produces with the key (the default partitioner hashes it) and waits for the ack. */
  private RecordMetadata send(KafkaProducer<String, byte[]> producer, String key, byte[] value,
      String traceparent) throws Exception {
    ProducerRecord<String, byte[]> rec = new ProducerRecord<>(opts.get("input-topic"), key, value);
    rec.headers().add("traceparent", traceparent.getBytes(StandardCharsets.UTF_8));
    return producer.send(rec).get();
  }

  /** A private reader at the current end of every results partition (no group offsets). */
  private KafkaConsumer<String, byte[]> resultReader() {
    Properties p = new Properties();
    p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, opts.get("bootstrap"));
    p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
    // Committed results only: with processing.guarantee = exactly_once_v2 each
    // result is then seen once (the Java client reads uncommitted by default).
    p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
    p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
    p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
    KafkaConsumer<String, byte[]> c = new KafkaConsumer<>(p);
    List<TopicPartition> parts = new ArrayList<>();
    for (PartitionInfo info : c.partitionsFor(opts.get("results-topic"))) {
      parts.add(new TopicPartition(info.topic(), info.partition()));
    }
    c.assign(parts);
    c.seekToEnd(parts);
    parts.forEach(c::position); // resolve the end now, before anything is sent
    return c;
  }

  /**
   * The definitive result of one message: same key, same source partition and offset. A
   * REQUEST_IN_PROGRESS is an interim answer for that message; its definitive result follows.
   */
  private Result waitResult(KafkaConsumer<String, byte[]> consumer, String key, RecordMetadata sent,
      Duration timeout) throws Exception {
    long deadline = System.nanoTime() + timeout.toNanos();
    while (System.nanoTime() < deadline) {
      for (ConsumerRecord<String, byte[]> rec : consumer.poll(Duration.ofMillis(500))) {
        if (!key.equals(rec.key())) {
          continue;
        }
        Map<String, String> headers = new HashMap<>();
        for (Header h : rec.headers()) {
          headers.put(h.key(), new String(h.value(), StandardCharsets.UTF_8));
        }
        if (!opts.get("input-topic").equals(headers.get("source-topic"))
            || !String.valueOf(sent.partition()).equals(headers.get("source-partition"))
            || !String.valueOf(sent.offset()).equals(headers.get("source-offset"))) {
          continue; // an answer to another message with this key
        }
        JsonNode body = JSON.readTree(rec.value());
        if ("REQUEST_IN_PROGRESS".equals(body.path("code").asText())) {
          System.out.printf("interim: REQUEST_IN_PROGRESS, retry_after_ms=%d; waiting for the definitive result%n",
              body.path("retry_after_ms").asLong());
          continue;
        }
        return new Result(headers, rec.value(), body);
      }
    }
    throw new IllegalStateException("no result for key " + key + " at " + sent.partition() + "/" + sent.offset());
  }

  private static void show(Result r, String sentTraceparent) {
    JsonNode b = r.body();
    JsonNode items = b.has("orders") ? b.get("orders") : b.has("conflicts") ? b.get("conflicts") : b.path("errors");
    System.out.printf("result: status=%d code=%s replayed=%s orders=%d digest=%s%n",
        b.path("status").asInt(), b.path("code").asText(), r.headers().get("replayed"), items.size(),
        b.has("request_digest") ? b.get("request_digest").asText() : "-");
    // The result continues the sender's trace: the same trace id and flags, the span of the
    // worker's processing as its parent.
    System.out.printf("trace: sent=%s result=%s%n", sentTraceparent,
        r.headers().getOrDefault("traceparent", "none"));
  }
}
