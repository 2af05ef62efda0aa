#!/usr/bin/python3
"""Checks what order-worker publishes against docs/asyncapi.yaml.

usage: check_contract.py ASYNCAPI_YAML [--capture FILE] [--markdown FILE]...

Validates, as JSON Schema 2020-12 (Debian's python3-jsonschema):
  * every example of every message in the document (payload and headers);
  * every ```json block of the given Markdown files: a body with "status"
    against the Result schema, any other against the OrderBatch schema;
  * the request digest example (x-request-digest): the canonical text of
    the example request, and its SHA-256;
  * with --capture, every result body and dead-letter header set the e2e
    tier read (tools/kit/kit_kafka.c writes them, one JSON line each, with
    bytes as hex): a body must be UTF-8 JSON, match the Result schema and
    the schema of its own code, its headers the headers schema of its
    code's message (ResultHeaders, with replayed 'false' for the answers
    computed for each message); dead-letter headers DeadLetterHeaders (the
    branch its error-code names). A record read twice counts once. At
    least one result and one dead letter must carry a traceparent;
  * in every header set, what a JSON Schema pattern cannot say of a
    tracestate: at most 32 members, no key twice (W3C Trace Context).
Prints one line per failure and a summary; exits 1 on any failure.
"""
import hashlib
import json
import os
import re
import sys

import jsonschema
import yaml

CODE_SCHEMA = {
    "CREATED": "ResultCreated",
    "ORDER_ALREADY_EXISTS": "ResultOrderAlreadyExists",
    "IDEMPOTENCY_KEY_REUSED": "ResultIdempotencyKeyReused",
    "REQUEST_IN_PROGRESS": "ResultRequestInProgress",
    "INVALID_REQUEST": "ResultInvalidRequest",
}
# The message of each code, whose headers schema a result's headers must
# match: answers computed for each message are never replayed.
CODE_MESSAGE = {
    "CREATED": "Created",
    "ORDER_ALREADY_EXISTS": "OrderAlreadyExists",
    "IDEMPOTENCY_KEY_REUSED": "IdempotencyKeyReused",
    "REQUEST_IN_PROGRESS": "RequestInProgress",
    "INVALID_REQUEST": "InvalidRequest",
}


class Checker:
    def __init__(self, doc):
        self.doc = doc
        self.failures = []
        self.resolver = jsonschema.RefResolver.from_schema(doc)
        cls = jsonschema.Draft202012Validator
        for name, schema in doc["components"]["schemas"].items():
            try:
                cls.check_schema(schema)
            except jsonschema.SchemaError as e:
                self.fail(f"schema {name} is not valid JSON Schema 2020-12: {e.message}")
        self.validators = {}

    def fail(self, msg):
        self.failures.append(msg)

    def validator(self, schema):
        key = json.dumps(schema, sort_keys=True)
        if key not in self.validators:
            self.validators[key] = jsonschema.Draft202012Validator(
                schema, resolver=self.resolver)
        return self.validators[key]

    def check(self, what, instance, schema):
        errors = sorted(self.validator(schema).iter_errors(instance), key=lambda e: list(e.path))
        for e in errors[:3]:
            path = "/".join(str(p) for p in e.path) or "(root)"
            self.fail(f"{what}: {path}: {e.message[:300]}")
        return not errors

    @staticmethod
    def ref(name):
        return {"$ref": f"#/components/schemas/{name}"}


def canonical(req):
    """The canonical text of docs/contract.md, version 1."""
    def amount(a):
        s = a if isinstance(a, str) else format(a, "f")
        units, _, frac = s.partition(".")
        return f"{int(units)}.{(frac + '00')[:2]}"

    def esc(s):
        return s.replace("\\", "\\\\").replace('"', '\\"')

    items = []
    for o in req["orders"]:
        pid = o.get("product_id")
        qty = o.get("quantity")
        items.append('{"amount":"%s","external_order_no":"%s","product_id":%s,"quantity":%d}'
                     % (amount(o["amount"]), esc(o["external_order_no"]),
                        "null" if pid is None else str(pid), 1 if qty is None else qty))
    return '{"orders":[%s],"user_id":%d}' % (",".join(items), req["user_id"])


def check_tracestate(c, what, headers):
    """The rules of a W3C tracestate list that its schema's pattern cannot
    state: at most 32 non-empty members, each key once."""
    ts = headers.get("tracestate") if isinstance(headers, dict) else None
    if not isinstance(ts, str):
        return
    keys = [m.strip(" \t").split("=", 1)[0] for m in ts.split(",") if m.strip(" \t")]
    if len(keys) > 32:
        c.fail(f"{what}: tracestate has {len(keys)} members, at most 32")
    repeated = sorted({k for k in keys if keys.count(k) > 1})
    if repeated:
        c.fail(f"{what}: tracestate repeats {repeated}")


def check_document_examples(c):
    n = 0
    for name, msg in c.doc["components"]["messages"].items():
        payload = msg.get("payload")
        headers = msg.get("headers")
        for i, ex in enumerate(msg.get("examples", [])):
            what = f"asyncapi example {name}[{ex.get('name', i)}]"
            if "payload" in ex:
                c.check(what + " payload", ex["payload"], payload)
            if "headers" in ex:
                if headers is None:
                    c.fail(f"{what}: has headers but the message declares none")
                else:
                    c.check(what + " headers", ex["headers"], headers)
                    check_tracestate(c, what + " headers", ex["headers"])
            n += 1
    return n


def check_digest(c):
    d = c.doc["info"].get("x-request-digest")
    if d is None:
        c.fail("asyncapi: info.x-request-digest is missing")
        return
    c.check("x-request-digest example-request", d["example-request"], c.ref("OrderBatch"))
    text = canonical(d["example-request"])
    if text != d["example-canonical"]:
        c.fail(f"x-request-digest: canonical text of the example is {text}, "
               f"the document says {d['example-canonical']}")
    digest = hashlib.sha256(d["example-canonical"].encode()).hexdigest()
    if digest != d["example-digest"]:
        c.fail(f"x-request-digest: SHA-256 of the canonical text is {digest}, "
               f"the document says {d['example-digest']}")


def check_markdown(c, path, digest):
    text = open(path, encoding="utf-8").read()
    blocks = re.findall(r"```json\n(.*?)```", text, re.S)
    n = 0
    for i, block in enumerate(blocks):
        what = f"{path} json block {i + 1}"
        try:
            value = json.loads(block)
        except ValueError as e:
            c.fail(f"{what}: not JSON: {e}")
            continue
        schema = "Result" if isinstance(value, dict) and "status" in value else "OrderBatch"
        c.check(f"{what} ({schema})", value, c.ref(schema))
        n += 1
    canon = c.doc["info"]["x-request-digest"]["example-canonical"]
    for block in re.findall(r"```\n(\{\"orders\".*?)\n```", text, re.S):
        if block != canon:
            c.fail(f"{path}: canonical text {block} differs from the document's {canon}")
        n += 1
    for stated in re.findall(r"digest of the example is\s+`([0-9a-f]{64})`", text):
        if stated != digest:
            c.fail(f"{path}: digest {stated} differs from the document's {digest}")
        n += 1
    return n


def parse_headers(raw):
    headers = {}
    for line in raw.split("\n"):
        if line:
            name, _, value = line.partition("=")
            if name in headers:
                headers.setdefault("__repeated__", []).append(name)
            headers[name] = value
    return headers


def check_capture(c, path):
    seen = {}
    with open(path, encoding="ascii") as f:
        for line in f:
            r = json.loads(line)
            seen[(r["topic"], r["partition"], r["offset"])] = r
    counts = {"result": 0, "dead_letter": 0}
    traced = {"result": 0, "dead_letter": 0}
    codes = {}
    for (topic, part, off), r in sorted(seen.items()):
        what = f"{r['kind']} {topic}/{part}@{off}"
        headers = parse_headers(bytes.fromhex(r["headers"]).decode("utf-8", "replace"))
        if "__repeated__" in headers:
            c.fail(f"{what}: repeated headers {headers['__repeated__']}")
            headers.pop("__repeated__")
        counts[r["kind"]] += 1
        traced[r["kind"]] += "traceparent" in headers
        check_tracestate(c, what + " headers", headers)
        if r["kind"] == "dead_letter":
            # DeadLetterHeaders is a oneOf; checking the branch the error code
            # names gives messages that name the field.
            branch = ("OutputTooLargeHeaders" if headers.get("error-code") == "OUTPUT_TOO_LARGE"
                      else "InvalidMessageHeaders")
            if c.check(what + " headers", headers, c.ref(branch)):
                c.check(what + " headers (DeadLetterHeaders)", headers, c.ref("DeadLetterHeaders"))
            continue
        try:
            body = json.loads(bytes.fromhex(r["value"]).decode("utf-8"))
        except ValueError as e:
            c.check(what + " headers", headers, c.ref("ResultHeaders"))
            c.fail(f"{what}: body is not UTF-8 JSON: {e}")
            continue
        code = body.get("code") if isinstance(body, dict) else None
        codes[code] = codes.get(code, 0) + 1
        if code not in CODE_SCHEMA:
            c.check(what + " headers", headers, c.ref("ResultHeaders"))
            c.fail(f"{what}: unknown code {code!r}")
            continue
        c.check(f"{what} headers ({code})", headers,
                c.doc["components"]["messages"][CODE_MESSAGE[code]]["headers"])
        if c.check(what + " body", body, c.ref(CODE_SCHEMA[code])):
            c.check(what + " body (Result)", body, c.ref("Result"))
        if "user-id" in headers and str(body.get("user_id")) != headers["user-id"]:
            c.fail(f"{what}: header user-id {headers['user-id']} but body user_id "
                   f"{body.get('user_id')}")
    return counts, codes, traced


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    doc = yaml.safe_load(open(argv[1], encoding="utf-8"))
    c = Checker(doc)
    capture = None
    markdown = []
    args = argv[2:]
    while args:
        opt = args.pop(0)
        if opt == "--capture":
            capture = args.pop(0)
        elif opt == "--markdown":
            markdown.append(args.pop(0))
        else:
            print(f"check_contract: unknown argument {opt}", file=sys.stderr)
            return 2
    n_doc = check_document_examples(c)
    check_digest(c)
    digest = doc["info"]["x-request-digest"]["example-digest"]
    md = {p: check_markdown(c, p, digest) for p in markdown}
    summary = [f"{n_doc} document examples"] + [
        f"{n} examples in {os.path.relpath(p)}" for p, n in md.items()]
    if capture is not None:
        counts, codes, traced = check_capture(c, capture)
        if counts["result"] == 0 or counts["dead_letter"] == 0:
            c.fail(f"{capture}: {counts['result']} results and {counts['dead_letter']} dead "
                   "letters captured; the e2e tier should have produced both")
        if traced["result"] == 0 or traced["dead_letter"] == 0:
            c.fail(f"{capture}: {traced['result']} results and {traced['dead_letter']} dead "
                   "letters with a traceparent captured; the e2e tier (e2e.trace) produces both")
        for code in CODE_SCHEMA:
            if code not in codes:
                c.fail(f"{capture}: no {code} result was captured; the e2e tier produces each")
        summary.append(f"{counts['result']} result bodies ("
                       + ", ".join(f"{k} {v}" for k, v in sorted(codes.items(), key=str))
                       + f") and {counts['dead_letter']} dead-letter header sets from e2e, "
                       + f"{traced['result']} and {traced['dead_letter']} of them with a "
                       + "traceparent")
    for f in c.failures:
        print(f"contract: FAIL {f}")
    status = "FAILED" if c.failures else "ok"
    print(f"contract: {status}: validated " + "; ".join(summary)
          + (f"; {len(c.failures)} failure(s)" if c.failures else ""))
    return 1 if c.failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
