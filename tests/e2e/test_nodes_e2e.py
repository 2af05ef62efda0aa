#!/usr/bin/python3
"""End to end: a database given as a list of nodes (mysql.host = A,B).

No cluster is needed: node A is 127.0.0.2 on the test MariaDB's port, where
nothing listens until the test starts a TCP proxy there that leads to the
same MariaDB (node B, 127.0.0.1). The worker, serve and the subcommands
must

  * use B while A refuses connections (and say so: db_node, /readyz);
  * return to A once it answers again, with every connection of the worker
    (the proxy counts them), and decide through it;
  * take a 1047 from A (the error a Galera node that is not ready answers,
    which the proxy injects) as a reason to retry, not to stop;
  * when A is lost with its connections cut, go on through B within
    seconds, without a fatal error, and exit 0 when stopped.

The Galera-specific part (a node that answers but is not ready) is the
galera tier's (scripts/galera.sh).

usage: test_nodes_e2e.py   (through ctest, from scripts/test.sh)
"""
import http.client
import json
import os
import secrets
import socket
import subprocess
import threading
import time
import unittest

from owstack import BIN, LOGS, PORT, Stack, configured

NODE_A, NODE_B = "127.0.0.2", "127.0.0.1"
TOKEN = secrets.token_hex(24)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Proxy:
    """TCP from NODE_A:PORT to NODE_B:PORT; stop() cuts every connection."""

    def __init__(self):
        self.lsock = None
        self.conns = []
        self.accepted = 0
        self.live = 0  # connections whose both directions still run
        self.inject = 0  # commands still to be answered 1047
        self.mu = threading.Lock()

    def start(self):
        self.lsock = socket.socket()
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lsock.bind((NODE_A, int(PORT)))
        self.lsock.listen(64)
        threading.Thread(target=self._accept, args=(self.lsock,), daemon=True).start()

    def _accept(self, lsock):
        while True:
            try:
                c, _ = lsock.accept()
            except OSError:
                return
            try:
                u = socket.create_connection((NODE_B, int(PORT)))
            except OSError:
                c.close()
                continue
            done = [False]
            with self.mu:
                self.accepted += 1
                self.live += 1
                self.conns += [c, u]
            threading.Thread(target=self._pump, args=(c, u, done, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(u, c, done, False), daemon=True).start()

    def _pump(self, a, b, done, from_client):
        buf = b""
        try:
            while True:
                data = a.recv(65536)
                if not data:
                    break
                if not from_client:
                    b.sendall(data)
                    continue
                buf = self._client_packets(buf + data, a, b)
        except OSError:
            pass
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        with self.mu:
            if not done[0]:
                done[0] = True
                self.live -= 1

    def _client_packets(self, buf, client, server):
        """Forwards the client's whole packets; while inject > 0, answers a
        command that reads or writes (COM_QUERY, COM_STMT_PREPARE,
        COM_STMT_EXECUTE) with the error a Galera node that is not ready
        gives, 1047, instead of forwarding it. Returns what is left over."""
        while len(buf) >= 4:
            n = int.from_bytes(buf[:3], "little")
            if len(buf) < 4 + n:
                break
            pkt, buf = buf[:4 + n], buf[4 + n:]
            with self.mu:
                take = self.inject > 0 and pkt[3] == 0 and n > 0 and pkt[4] in (0x03, 0x16, 0x17)
                self.inject -= take
            if take:
                body = (b"\xff" + (1047).to_bytes(2, "little") + b"#08S01"
                        + b"WSREP has not yet prepared node for application use")
                client.sendall(len(body).to_bytes(3, "little") + b"\x01" + body)
            else:
                server.sendall(pkt)
        return buf

    def stop(self):
        if self.lsock is not None:
            self.lsock.close()
            self.lsock = None
        with self.mu:
            for s in self.conns:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()
            self.conns = []


STACK = Stack("nodes")
PROXY = Proxy()
METRICS = free_port()


def env():
    e = STACK.env_base()
    e.update({"ORDER_WORKER_MYSQL_HOST": f"{NODE_A},{NODE_B}",
              "ORDER_WORKER_MYSQL_SSL_MODE": "disabled",
              "ORDER_WORKER_METRICS_PORT": str(METRICS),
              "ORDER_WORKER_RETRY_BACKOFF_MAX_MS": "1000"})
    return e


STACK.env_base, STACK.env = STACK.env, env


def http_get(port, path, token=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", path, headers={"Authorization": f"Bearer {token}"} if token else {})
    r = c.getresponse()
    body = r.read()
    c.close()
    return r.status, body.decode()


def readyz():
    try:
        return http_get(METRICS, "/readyz")
    except OSError as e:
        return 0, str(e)


def wait_for(what, check, timeout_s):
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        ok, last = check()
        if ok:
            return last
        time.sleep(0.2)
    raise AssertionError(f"{what}: not within {timeout_s} s (last: {last!r})")


def send(user, key, timeout_s=60, host=None):
    """`order-worker send --wait` (its check of the shard map through host,
    by default the list): the status of the definitive result, and how
    long it took."""
    doc = {"user_id": user, "orders": [{"external_order_no": key, "amount": "1.00"}]}
    e = env()
    if host is not None:
        e["ORDER_WORKER_MYSQL_HOST"] = host
    t0 = time.monotonic()
    out = subprocess.run([BIN, "send", "--user", str(user), "--key", key, "-", "--wait",
                          "--timeout-ms", str(timeout_s * 1000)], input=json.dumps(doc).encode(),
                         env=e, capture_output=True, timeout=timeout_s + 30)
    if out.returncode != 0:
        raise AssertionError(f"send {key}: {out.stderr.decode()}")
    return json.loads(out.stdout)["status"], time.monotonic() - t0


def log_events(event):
    with open(os.path.join(LOGS, "nodes-worker.log")) as f:
        return [json.loads(l) for l in f if f'"event":"{event}"' in l]


class NodesE2E(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not configured():
            raise unittest.SkipTest("run through scripts/test.sh (OW_TEST_* not set)")
        open(os.path.join(LOGS, "nodes-worker.log"), "w").close()
        STACK.create()  # migrate too goes through the list: A refuses, B answers

    @classmethod
    def tearDownClass(cls):
        PROXY.stop()
        STACK.destroy()

    def test_1_second_node_while_the_first_refuses(self):
        body = wait_for("/readyz 200", lambda: ((r := readyz())[0] == 200, r), 60)[1]
        self.assertIn(f"node {NODE_B}", body)
        self.assertEqual(send(1, "nodes-b")[0], 201)
        self.assertEqual([e["node"] for e in log_events("db_node")], [NODE_B])

    def test_2_returns_to_the_first_node(self):
        PROXY.start()
        t0 = time.monotonic()
        wait_for("the worker's connections through node A",
                 lambda: (PROXY.accepted >= 2 and f"node {NODE_A}" in readyz()[1],
                          (PROXY.accepted, readyz())), 20)
        back_s = time.monotonic() - t0
        self.assertEqual(send(2, "nodes-a")[0], 201)
        # The deciding lane's connection and, from its next round, the watch's.
        wait_for("two connections through node A", lambda: (PROXY.live >= 2, PROXY.live), 5)
        moves = log_events("db_node")
        self.assertEqual(moves[-1]["node"], NODE_A, moves)
        print(f"nodes: back on node A {back_s:.1f} s after it answered", flush=True)

    def test_2b_a_node_that_answers_1047(self):
        """The error a Galera node out of the Primary component gives to a
        read: retried on a new connection, never fatal."""
        retries, moves = len(log_events("db_retry")), len(log_events("db_node"))
        time.sleep(1.5)  # the watch's round after the return: its connection to A is made
        with PROXY.mu:
            PROXY.inject = 1
        # send itself reads the shard map: through B, so that the worker
        # meets the error: a lane (db_retry), or if the watch was connecting
        # again at that moment, the watch (db_node, to B).
        self.assertEqual(send(4, "nodes-1047", host=NODE_B)[0], 201)
        self.assertEqual(PROXY.inject, 0)
        met = [e["code"] for e in log_events("db_retry")[retries:]] + \
            [1047 for e in log_events("db_node")[moves:] if "1047" in e["reason"]]
        self.assertIn(1047, met)
        self.assertEqual(log_events("db_fatal"), [])
        self.assertIsNone(STACK.worker.poll())

    def test_3_first_node_lost(self):
        PROXY.stop()
        t0 = time.monotonic()
        status, took = send(3, "nodes-lost")
        self.assertEqual(status, 201)
        wait_for("/readyz naming node B", lambda: (f"node {NODE_B}" in (r := readyz())[1]
                                                   and r[0] == 200, r), 10)
        self.assertLess(took, 15)
        self.assertEqual(log_events("db_node")[-1]["node"], NODE_B)
        self.assertEqual(log_events("db_fatal"), [])
        print(f"nodes: decided through node B {took:.1f} s after node A was cut", flush=True)

    def test_4_serve_uses_the_second_node(self):
        port = free_port()
        tok = os.path.join(LOGS, f"nodes-{os.getpid()}.token")
        with open(tok, "w") as f:
            f.write(TOKEN + "\n")
        os.chmod(tok, 0o600)
        e = env()
        e.update({"ORDER_WORKER_API_PORT": str(port), "ORDER_WORKER_API_TOKEN_FILE": tok,
                  "ORDER_WORKER_METRICS_PORT": "0"})
        with open(os.path.join(LOGS, "nodes-serve.log"), "ab") as log:
            proc = subprocess.Popen([BIN, "serve"], env=e, stderr=log)
        try:
            # The stored answer, with its own status.
            status, body = wait_for("serve's lookup", lambda: (
                (r := self._lookup(port))[0] == 201, r), 30)
            self.assertIn('"idempotency_key":"nodes-b"', body)
        finally:
            proc.terminate()
            self.assertEqual(proc.wait(30), 0)

    @staticmethod
    def _lookup(port):
        try:
            return http_get(port, "/v1/requests/1/nodes-b", TOKEN)
        except OSError as e:
            return 0, str(e)

    def test_5_stops_cleanly(self):
        STACK.worker.terminate()
        self.assertEqual(STACK.worker.wait(60), 0)
        STACK.worker = None


if __name__ == "__main__":
    unittest.main(verbosity=2)
