#!/usr/bin/python3
"""Producing to order-worker and reading the answer, with confluent-kafka.

Sends one order batch, waits for its result (matched by key and by the
source partition/offset headers), prints the outcome, then sends the very
same message again to show a retry being replayed. Each attempt carries a
W3C traceparent header (one trace, a span per attempt, as a traced client
would send); the result continues that trace with a span of the worker's.

  apt-get install python3-confluent-kafka
  examples/python/order_client.py --bootstrap 127.0.0.1:9092 [--user 42] [--key K]

Output (one line each, for people and for the e2e test):
  sent: key=K partition=P offset=O
  result: status=201 code=CREATED replayed=false orders=1 digest=...
  trace: sent=00-T-S1-01 result=00-T-W1-01
  retry sent: key=K partition=P offset=O2
  result: status=201 code=CREATED replayed=true orders=1 digest=...
  trace: sent=00-T-S2-01 result=00-T-W2-01
  replay: yes, the stored answer (same bytes as the first)
"""
import argparse
import json
import secrets
import sys
import time
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bootstrap", default="127.0.0.1:9092")
    p.add_argument("--input-topic", default="order-batches")
    p.add_argument("--results-topic", default="order-batch-results")
    p.add_argument("--user", type=int, default=42)
    p.add_argument("--key", help="idempotency key (default: a new one per run)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for a result")
    return p.parse_args()


def result_reader(bootstrap, topic):
    """A consumer positioned at the current end of every results partition,
    so that it sees every result published after this point. No group
    offsets are used: the reader is private to this client. It reads
    committed results only: with processing.guarantee = exactly_once_v2 it
    then sees each result once (librdkafka's default, said out loud)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"example-{uuid.uuid4()}",
                  "enable.auto.commit": False, "isolation.level": "read_committed"})
    parts = c.list_topics(topic, timeout=10).topics[topic].partitions
    start = []
    for p in parts:
        _, high = c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
        start.append(TopicPartition(topic, p, high))
    c.assign(start)
    return c


def traceparent(trace_id):
    """A W3C traceparent for one attempt: the request's trace, a new span
    (8 random bytes, lower-case hex), sampled. An OpenTelemetry SDK's
    propagator writes the same header from the current span."""
    return f"00-{trace_id}-{secrets.token_hex(8)}-01"


def send(producer, topic, key, value, tp):
    """Produces and waits for the broker's acknowledgement: the partition
    and offset it reports are what the result's source-* headers name."""
    acked = {}

    def on_delivery(err, msg):
        acked["err"], acked["msg"] = err, msg

    producer.produce(topic, key=key.encode(), value=value, headers=[("traceparent", tp.encode())],
                     on_delivery=on_delivery)
    producer.flush(30)
    if acked.get("err") is not None or "msg" not in acked:
        sys.exit(f"send failed: {acked.get('err')}")
    return acked["msg"].partition(), acked["msg"].offset()


def wait_result(consumer, input_topic, key, partition, offset, timeout):
    """The definitive result of one message: same key, same source
    partition and offset. A REQUEST_IN_PROGRESS is an interim answer for
    that message; its definitive result follows, so keep waiting."""
    want = {"source-topic": input_topic, "source-partition": str(partition),
            "source-offset": str(offset)}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is None or m.error() is not None or m.key() != key.encode():
            continue
        headers = {k: v.decode() for k, v in (m.headers() or [])}
        if any(headers.get(k) != v for k, v in want.items()):
            continue  # an answer to another message with this key
        body = json.loads(m.value())
        if body["code"] == "REQUEST_IN_PROGRESS":
            print(f"interim: REQUEST_IN_PROGRESS, retry_after_ms={body['retry_after_ms']}; "
                  "waiting for the definitive result")
            continue
        return headers, m.value(), body
    sys.exit(f"no result for key {key} at {partition}/{offset} within {timeout} s")


def show(headers, body, sent_tp):
    items = body.get("orders", body.get("conflicts", body.get("errors", [])))
    print(f"result: status={body['status']} code={body['code']} "
          f"replayed={headers['replayed']} orders={len(items)} "
          f"digest={body.get('request_digest', '-')}")
    # The result continues the sender's trace: the same trace id and flags,
    # the span of the worker's processing as its parent.
    print(f"trace: sent={sent_tp} result={headers.get('traceparent', 'none')}")


def main():
    a = parse_args()
    key = a.key or f"example-py-{uuid.uuid4().hex[:16]}"
    batch = {"user_id": a.user, "orders": [
        {"external_order_no": f"{key}-1", "amount": "19.90", "product_id": 101, "quantity": 1},
        {"external_order_no": f"{key}-2", "amount": 5}]}
    value = json.dumps(batch).encode()
    # murmur2_random is Java's default partitioner: with it, producers in
    # both languages put a key on the same partition (README, "Producing to
    # order-worker").
    producer = Producer({"bootstrap.servers": a.bootstrap, "enable.idempotence": True,
                         "acks": "all", "partitioner": "murmur2_random"})
    consumer = result_reader(a.bootstrap, a.results_topic)
    trace_id = secrets.token_hex(16)
    try:
        tp = traceparent(trace_id)
        part, off = send(producer, a.input_topic, key, value, tp)
        print(f"sent: key={key} partition={part} offset={off}")
        headers, first_bytes, body = wait_result(consumer, a.input_topic, key, part, off,
                                                 a.timeout)
        show(headers, body, tp)
        if body["status"] == 201:
            for o in body["orders"]:
                print(f"  order {o['external_order_no']}: {o['order_no']} id={o['order_id']} "
                      f"amount={o['amount']} existing={str(o['existing']).lower()}")

        # A retry: the same key and the same content, as after a timeout;
        # another attempt, so another span of the same trace.
        tp2 = traceparent(trace_id)
        part2, off2 = send(producer, a.input_topic, key, value, tp2)
        print(f"retry sent: key={key} partition={part2} offset={off2}")
        headers2, again_bytes, body2 = wait_result(consumer, a.input_topic, key, part2, off2,
                                                   a.timeout)
        show(headers2, body2, tp2)
        # A replay carries `replayed: true` and the stored bytes unchanged;
        # a first answer carries `replayed: false`.
        if headers2["replayed"] == "true" and again_bytes == first_bytes:
            print("replay: yes, the stored answer (same bytes as the first)")
        else:
            print("replay: NO, this is a first answer")
            return 1
    finally:
        consumer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
