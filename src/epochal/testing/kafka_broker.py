"""A real Apache Kafka broker for tests and benchmarks: one KRaft node (broker and controller in
one JVM, no ZooKeeper) on free loopback ports.

Its jars come from Maven Central: the first :meth:`KafkaBroker.start` writes a small ``pom.xml``
and resolves ``org.apache.kafka:kafka_2.13`` with ``mvn dependency:copy-dependencies`` into
``~/.cache/epochal/kafka-<version>/`` (``EPOCHAL_KAFKA_JARS`` overrides the directory); later
starts reuse them. Needs Java 17 and Maven on the PATH, nothing else.

    with KafkaBroker() as broker:
        broker.create_topic("events", partitions=4)
        ... KafkaSource(broker.bootstrap, topics=["events"]) ...

:meth:`stop` and :meth:`start` again keep the data (same log directory, same ports): the test of
a broker restarted while a job runs.
"""

from __future__ import annotations

import base64
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from typing import Any

from epochal.testing.maven import resolved_jars

KAFKA_VERSION = "4.1.1"

_POM = """<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>epochal.testing</groupId>
  <artifactId>kafka-broker</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_2.13</artifactId>
      <version>{version}</version>
    </dependency>
  </dependencies>
</project>
"""


def jars_directory(version: str = KAFKA_VERSION) -> pathlib.Path:
    """The broker's jars, resolved from Maven Central on first use (a few minutes, once)."""
    return resolved_jars(f"kafka-{version}", _POM.format(version=version), "EPOCHAL_KAFKA_JARS", "Kafka test broker")


def free_port() -> int:
    """A port of 127.0.0.1 that nothing listens on now."""
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """``count`` distinct free ports: all bound at once, so the kernel cannot hand out one twice
    (asked one after the other, a port freed by the first probe may come back for the second)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for s in sockets:
            s.close()


class KafkaBroker:
    """One KRaft broker+controller process on ``127.0.0.1``; ``bootstrap`` is its address.

    ``properties`` add to or override the broker's configuration (``server.properties`` keys).
    """

    def __init__(self, directory: str | None = None, properties: dict[str, Any] | None = None,
                 version: str = KAFKA_VERSION, heap: str = "768m") -> None:
        self._owned_directory = directory is None
        self.directory = pathlib.Path(directory or tempfile.mkdtemp(prefix="epochal-kafka-"))
        self.version = version
        self.heap = heap
        self.port, self.controller_port = free_ports(2)
        self.properties = {
            "process.roles": "broker,controller",
            "node.id": 1,
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(self.directory / "data"),
            "num.partitions": 1,
            "auto.create.topics.enable": "false",
            "offsets.topic.replication.factor": 1,
            "offsets.topic.num.partitions": 4,
            "transaction.state.log.replication.factor": 1,
            "transaction.state.log.min.isr": 1,
            "transaction.state.log.num.partitions": 4,
            "group.initial.rebalance.delay.ms": 0,
            "share.coordinator.state.topic.replication.factor": 1,
            "share.coordinator.state.topic.min.isr": 1,
            # aborted transactions of killed producers become visible quickly in the tests
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": 1000,
            "log.flush.interval.messages": 1_000_000,
            # records keep whatever timestamps a test gives them (event times from 1970 too): a
            # retention check deleting them mid-test would make the job read nothing
            "log.retention.ms": -1,
            **(properties or {}),
        }
        self.process: subprocess.Popen[bytes] | None = None
        self._formatted = False

    @property
    def bootstrap(self) -> str:
        """``host:port`` for ``bootstrap.servers``."""
        return f"127.0.0.1:{self.port}"

    def _java(self, main: str, *args: str) -> list[str]:
        jars = jars_directory(self.version)
        return ["java", f"-Xmx{self.heap}", "-Xms256m", "-XX:+UseG1GC", "-XX:TieredStopAtLevel=1",
                "-Djava.awt.headless=true", "-cp", f"{jars}/*", main, *args]

    def start(self, timeout: float = 90.0) -> KafkaBroker:
        """Start the broker (formatting its storage the first time); returns once it answers."""
        config = self.directory / "server.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in self.properties.items()))
        if not self._formatted:
            cluster = "-"
            while cluster.startswith("-"):  # the tool would take a leading "-" for an option (as Kafka's Uuid avoids)
                cluster = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
            result = subprocess.run(self._java("kafka.tools.StorageTool", "format", "-t", cluster, "-c", str(config)),
                                    capture_output=True, text=True, timeout=120)
            if result.returncode != 0:
                raise RuntimeError(f"formatting the Kafka storage failed: {result.stdout}{result.stderr}")
            self._formatted = True
        log = open(self.directory / "broker.log", "ab")
        self.process = subprocess.Popen(self._java("kafka.Kafka", str(config)), stdout=log, stderr=subprocess.STDOUT,
                                        start_new_session=True)
        log.close()
        self._wait_ready(timeout)
        return self

    def _wait_ready(self, timeout: float) -> None:
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + timeout
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        while True:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"the Kafka broker exited with {self.process.returncode}: {self.log_tail()}")
            try:
                admin.list_topics(timeout=2)
                return
            except Exception:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"the Kafka broker did not answer within {timeout} s: "
                                       f"{self.log_tail()}") from None
                time.sleep(0.5)

    def log_tail(self, chars: int = 3000) -> str:
        path = self.directory / "broker.log"
        return path.read_text(errors="replace")[-chars:] if path.exists() else ""

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the broker (SIGTERM, then SIGKILL); its data stays for a later :meth:`start`."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()

    def close(self) -> None:
        """Stop the broker and delete its directory (if this object made it)."""
        self.stop()
        if self._owned_directory:
            shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> KafkaBroker:
        return self.start() if self.process is None else self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------------ helpers for tests
    def create_topic(self, name: str, partitions: int = 1, **config: str) -> None:
        """Create a topic (replication factor 1) and wait until it exists."""
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        futures = admin.create_topics([NewTopic(name, partitions, 1, config=config)], operation_timeout=30)
        futures[name].result(timeout=60)
