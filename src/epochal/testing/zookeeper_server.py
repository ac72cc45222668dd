"""A real ZooKeeper server for tests and benchmarks: one standalone node on a free loopback port.

Its jars come from Maven Central, as the Kafka test broker's do
(:mod:`epochal.testing.kafka_broker`): the first :meth:`ZooKeeperServer.start` resolves
``org.apache.zookeeper:zookeeper`` (with the metrics and snappy jars a standalone server loads)
with ``mvn dependency:copy-dependencies`` into ``~/.cache/epochal/zookeeper-<version>/``
(``EPOCHAL_ZOOKEEPER_JARS`` overrides the directory); later starts reuse them. Needs Java 17
and Maven on the PATH, nothing else.

    with ZooKeeperServer(tick_ms=500) as zk:     # session timeouts from 1 s (2 ticks) up
        env.enable_high_availability(zk.uri("/epochal"))
"""

from __future__ import annotations

import logging
import os
import pathlib
import shutil
import signal
import subprocess
import tempfile
import time
from typing import Any

from epochal.testing.kafka_broker import free_port
from epochal.testing.maven import resolved_jars

ZOOKEEPER_VERSION = "3.9.3"

#: the readiness probe's client logs every refused connection while the server starts: not shown
_QUIET = logging.getLogger("epochal.testing.zookeeper-probe")
_QUIET.addHandler(logging.NullHandler())
_QUIET.propagate = False

_POM = """<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>epochal.testing</groupId>
  <artifactId>zookeeper-server</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.zookeeper</groupId><artifactId>zookeeper</artifactId>
      <version>{version}</version></dependency>
    <dependency><groupId>io.dropwizard.metrics</groupId><artifactId>metrics-core</artifactId>
      <version>4.1.12.1</version></dependency>
    <dependency><groupId>org.xerial.snappy</groupId><artifactId>snappy-java</artifactId>
      <version>1.1.10.5</version></dependency>
    <dependency><groupId>org.slf4j</groupId><artifactId>slf4j-nop</artifactId>
      <version>1.7.30</version></dependency>
  </dependencies>
</project>
"""


def jars_directory(version: str = ZOOKEEPER_VERSION) -> pathlib.Path:
    """The server's jars, resolved from Maven Central on first use (seconds to a minute, once)."""
    return resolved_jars(f"zookeeper-{version}", _POM.format(version=version), "EPOCHAL_ZOOKEEPER_JARS",
                         "ZooKeeper test server")


class ZooKeeperServer:
    """One standalone ZooKeeper on ``127.0.0.1``; ``tick_ms`` sets the session timeouts it grants
    (2 to 20 ticks)."""

    def __init__(self, tick_ms: int = 500, version: str = ZOOKEEPER_VERSION, heap: str = "256m") -> None:
        self.directory = pathlib.Path(tempfile.mkdtemp(prefix="epochal-zookeeper-"))
        self.port = free_port()
        self.tick_ms = tick_ms
        self.version = version
        self.heap = heap
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def hosts(self) -> str:
        return f"127.0.0.1:{self.port}"

    def uri(self, root: str = "/epochal") -> str:
        return f"zookeeper://{self.hosts}{root}"

    def start(self, timeout: float = 60.0) -> ZooKeeperServer:
        jars = jars_directory(self.version)
        log = open(self.directory / "server.log", "ab")
        self.process = subprocess.Popen(
            ["java", f"-Xmx{self.heap}", "-XX:TieredStopAtLevel=1", "-Dzookeeper.admin.enableServer=false",
             "-cp", f"{jars}/*", "org.apache.zookeeper.server.ZooKeeperServerMain", str(self.port),
             str(self.directory / "data"), str(self.tick_ms)],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        self._wait_ready(timeout)
        return self

    def _wait_ready(self, timeout: float) -> None:
        from kazoo.client import KazooClient

        deadline = time.monotonic() + timeout
        while True:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"ZooKeeper exited with {self.process.returncode}: {self.log_tail()}")
            client = KazooClient(hosts=self.hosts, timeout=5.0, connection_retry={"max_tries": 1}, logger=_QUIET)
            try:
                client.start(timeout=2.0)
                client.stop()
                return
            except Exception:
                if time.monotonic() > deadline:
                    self.close()
                    raise RuntimeError(f"ZooKeeper did not answer within {timeout} s: {self.log_tail()}") from None
                time.sleep(0.3)
            finally:
                client.close()

    def log_tail(self, chars: int = 3000) -> str:
        path = self.directory / "server.log"
        return path.read_text(errors="replace")[-chars:] if path.exists() else ""

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> ZooKeeperServer:
        return self.start() if self.process is None else self

    def __exit__(self, *exc: Any) -> None:
        self.close()
