#!/usr/bin/python3
"""End to end: the client examples of examples/ against the real
broker and a worker. Each must send a batch, get its 201 by key and source
partition/offset, send it again and recognise the replay; each attempt
carries a traceparent of one trace, and each result must continue it (the
same trace id and flags, a span of the worker's, a new one per attempt).
Then the Java
example sends the Python example's batch under the same key: the same
partition (both use Kafka's murmur2 partitioner) and a replay of the
Python example's answer, with the same digest (the amount was a JSON
number there and a string here).

usage: test_examples_e2e.py SOURCE_DIR   (through ctest, from scripts/test.sh)
"""
import os
import re
import subprocess
import sys
import unittest

from owstack import BOOT, LOGS, Stack, configured

SRC = sys.argv[1] if len(sys.argv) > 1 else "."
STACK = Stack("examples")
KEY = f"example-shared-{os.getpid()}"

LINE = {
    "sent": re.compile(r"^sent: key=(\S+) partition=(\d+) offset=(\d+)$", re.M),
    "result": re.compile(r"^result: status=(\d+) code=(\w+) replayed=(true|false) orders=(\d+) "
                         r"digest=([0-9a-f]{64})$", re.M),
    "retry": re.compile(r"^retry sent: key=(\S+) partition=(\d+) offset=(\d+)$", re.M),
    "replay": re.compile(r"^replay: yes, the stored answer \(same bytes as the first\)$", re.M),
    "trace": re.compile(r"^trace: sent=00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2}) "
                        r"result=(?:00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})|none)$", re.M),
}


def run(name, argv):
    out = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    with open(os.path.join(LOGS, f"example-{name}.log"), "a") as log:
        log.write(f"$ {' '.join(argv)}\n{out.stdout}{out.stderr}\n")
    if out.returncode != 0:
        raise AssertionError(f"{name} exited {out.returncode}:\n{out.stdout}\n{out.stderr[-3000:]}")
    return out.stdout


def topics():
    return ["--bootstrap", BOOT, "--input-topic", STACK.topics["in"],
            "--results-topic", STACK.topics["out"]]


JAVA_CP = []


def java(extra):
    """Builds the Java example once (offline: scripts/deps.sh fetched every
    artifact on its first run), then runs it with extra arguments."""
    if not JAVA_CP:
        jdir = os.path.join(SRC, "examples", "java")
        target = os.path.join(LOGS, "example-java-target")
        run("java-build", ["mvn", "-o", "-B", "-q", "-f", os.path.join(jdir, "pom.xml"),
                           f"-DbuildDirectory={target}", "compile", "dependency:build-classpath",
                           f"-Dmdep.outputFile={target}/classpath.txt"])
        with open(os.path.join(target, "classpath.txt")) as f:
            JAVA_CP.append(f"{target}/classes:{f.read().strip()}")
    return run("java", ["java", "-cp", JAVA_CP[0], "example.OrderClient"] + topics() + extra)


class Examples(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not configured():
            raise unittest.SkipTest("run through scripts/test.sh (OW_TEST_* not set)")
        STACK.create()

    @classmethod
    def tearDownClass(cls):
        print(f"worker exited {STACK.destroy()}", file=sys.stderr)

    def check_flow(self, out, first_replayed):
        sent = LINE["sent"].search(out)
        retry = LINE["retry"].search(out)
        results = LINE["result"].findall(out)
        self.assertIsNotNone(sent, out)
        self.assertIsNotNone(retry, out)
        self.assertEqual(len(results), 2, out)
        self.assertEqual(results[0][:4], ("201", "CREATED", first_replayed, "2"), out)
        self.assertEqual(results[1][:4], ("201", "CREATED", "true", "2"), out)
        self.assertEqual(results[0][4], results[1][4])
        self.assertEqual(sent.group(2), retry.group(2), "a key changed partition")
        self.assertGreater(int(retry.group(3)), int(sent.group(3)))
        self.assertIsNotNone(LINE["replay"].search(out), out)
        traces = LINE["trace"].findall(out)
        self.assertEqual(len(traces), 2, out)
        for sent_trace, sent_span, sent_flags, trace, span, flags in traces:
            self.assertEqual(trace, sent_trace, f"the result is not in the sender's trace:\n{out}")
            self.assertEqual(flags, sent_flags, out)
            self.assertNotIn(span, (sent_span, "0" * 16), out)
        self.assertEqual(traces[0][0], traces[1][0], "one trace for both attempts")
        self.assertNotEqual(traces[0][4], traces[1][4], "the worker's span is new per message")
        return sent.group(2), results[0][4]

    def test_1_python(self):
        out = run("python", ["/usr/bin/python3", os.path.join(SRC, "examples/python/order_client.py"),
                             "--user", "42", "--key", KEY] + topics())
        type(self).py_partition, type(self).py_digest = self.check_flow(out, "false")

    def test_2_java(self):
        self.check_flow(java(["--user", "43"]), "false")

    def test_3_java_replays_the_python_answer(self):
        if not hasattr(type(self), "py_digest"):
            self.skipTest("needs test_1_python")
        part, digest = self.check_flow(java(["--user", "42", "--key", KEY]), "true")
        self.assertEqual(part, self.py_partition)
        self.assertEqual(digest, self.py_digest)


def main():
    result = unittest.main(argv=sys.argv[:1], verbosity=2, exit=False).result
    bad = len(result.failures) + len(result.errors)
    print(f"[==========] {result.testsRun} test(s) run.")
    print(f"[  PASSED  ] {result.testsRun - bad - len(result.skipped)} test(s).")
    return 1 if bad or result.skipped else 0


if __name__ == "__main__":
    sys.exit(main())
