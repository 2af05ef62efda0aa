"""Shared by the Python e2e tests: the variables scripts/test.sh
sets, a fresh database with the schema, the worker's topics, and a running
`order-worker run` for them."""
import os
import subprocess
import time

BIN = os.environ.get("OW_TEST_WORKER_BIN", "")
BUILD = os.path.dirname(BIN)
LOGS = os.environ.get("OW_TEST_LOG_DIR", "/tmp")
PORT = os.environ.get("OW_TEST_MYSQL_PORT", "")
BOOT = os.environ.get("OW_TEST_KAFKA_BOOTSTRAP", "")


def configured():
    return bool(BIN and PORT and BOOT)


def sql(stmt):
    """Runs SQL as the test server's root; returns the tab-separated rows."""
    out = subprocess.run(["mariadb", "-h127.0.0.1", f"-P{PORT}", "-uroot", "-N", "-B", "-e", stmt],
                         check=True, capture_output=True, text=True)
    return out.stdout


class Stack:
    """A database and topics named after prefix, and a worker on them."""

    def __init__(self, prefix, partitions=2):
        sfx = f"{os.getpid()}_{int(time.time())}"
        self.prefix = prefix
        self.db = f"{prefix}_{sfx}"
        self.topics = {k: f"{prefix}-{k}-{sfx}" for k in ("in", "out", "dlq")}
        self.group = f"{prefix}-group-{sfx}"
        self.partitions = partitions
        self.worker = None

    def env(self):
        env = dict(os.environ)
        env.update({
            "ORDER_WORKER_KAFKA_BOOTSTRAP_SERVERS": BOOT,
            "ORDER_WORKER_KAFKA_GROUP_ID": self.group,
            "ORDER_WORKER_TOPIC_INPUT": self.topics["in"],
            "ORDER_WORKER_TOPIC_RESULTS": self.topics["out"],
            "ORDER_WORKER_TOPIC_DLQ": self.topics["dlq"],
            "ORDER_WORKER_MYSQL_HOST": "127.0.0.1",
            "ORDER_WORKER_MYSQL_PORT": PORT,
            "ORDER_WORKER_MYSQL_USER": "root",
            "ORDER_WORKER_MYSQL_PASSWORD": "",
            "ORDER_WORKER_MYSQL_DATABASE": self.db,
        })
        return env

    def create(self):
        sql(f"CREATE DATABASE {self.db}")
        subprocess.run([BIN, "migrate"], env=self.env(), check=True, capture_output=True)
        kit = os.path.join(BUILD, "ow-kit")
        for t, n in (("in", self.partitions), ("out", self.partitions), ("dlq", 1)):
            subprocess.run([kit, "create-topic", BOOT, self.topics[t], str(n)], check=True,
                           capture_output=True)
        with open(os.path.join(LOGS, f"{self.prefix}-worker.log"), "ab") as log:
            self.worker = subprocess.Popen([BIN, "run"], env=self.env(), stderr=log)

    def destroy(self):
        """Stops the worker (SIGTERM; it must exit 0) and drops the database.
        Returns the worker's exit status."""
        rc = 0
        if self.worker is not None:
            self.worker.terminate()
            try:
                rc = self.worker.wait(60)
            except subprocess.TimeoutExpired:
                self.worker.kill()
                rc = self.worker.wait()
        if PORT:
            sql(f"DROP DATABASE IF EXISTS {self.db}")
        return rc
