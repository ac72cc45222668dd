"""Shared fixtures: one SparkSession (local[4]) for the whole integration test session."""

from __future__ import annotations

import itertools
import os
import pathlib

import pytest

INTEGRATION_DIR = pathlib.Path(__file__).parent / "integration"
CHAOS_DIR = pathlib.Path(__file__).parent / "chaos"


def pytest_collection_modifyitems(config, items):
    for item in items:
        parents = pathlib.Path(str(item.fspath)).parents
        if INTEGRATION_DIR in parents:
            item.add_marker(pytest.mark.integration)
        if CHAOS_DIR in parents:
            item.add_marker(pytest.mark.integration)
            item.add_marker(pytest.mark.chaos)
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session", autouse=True)
def job_registry(tmp_path_factory):
    """Every job a test starts is served over REST and written to a job registry
    (epochal.control.job_registry): the session's own, never the user's. Tests that look at the
    registry set EPOCHAL_HOME to a directory of their own."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("EPOCHAL_HOME", str(tmp_path_factory.mktemp("epochal-home")))
        yield


@pytest.fixture(scope="session")
def spark():
    """The one SparkSession all integration tests share (4 task slots, enough for parallelism 4)."""
    from epochal.control.spark import create_session

    session = create_session(os.environ.get("EPOCHAL_TEST_MASTER", "local[4]"), 4, "epochal-tests")
    yield session
    session.stop()


@pytest.fixture
def make_env(spark):
    """Build an Environment on the shared session: ``make_env(parallelism, **config)``."""
    import epochal

    def factory(parallelism: int = 2, **overrides):
        overrides.setdefault("registration_timeout", 60.0)
        return epochal.Environment(parallelism, spark=spark, **overrides)

    return factory


@pytest.fixture
def make_rocksdb(tmp_path):
    """Makes RocksDB keyed-state backends under ``tmp_path`` and disposes of them when the test
    ends: ``make_rocksdb(key_groups=range(128), name="db", max_parallelism=128, **options)``."""
    from epochal.state.rocksdb.backend import RocksDBKeyedStateBackend

    made = []

    def make(key_groups: range = range(128), name: str = "db", max_parallelism: int = 128, **options):
        backend = RocksDBKeyedStateBackend(max_parallelism, key_groups, str(tmp_path / name), **options)
        made.append(backend)
        return backend

    yield make
    for backend in made:
        backend.dispose()


@pytest.fixture(scope="session")
def kafka_broker():
    """One real Kafka broker (KRaft, on free ports) for the whole test session; started on first
    use (its jars are resolved from Maven Central once, into ~/.cache/epochal/)."""
    from epochal.testing.kafka_broker import KafkaBroker

    broker = KafkaBroker().start()
    yield broker
    broker.close()


@pytest.fixture(scope="session")
def postgres(tmp_path_factory):
    """A real PostgreSQL server (tests/postgres_server.py) for the whole test session, with
    prepared transactions enabled; stopped and removed at the end."""
    from tests.postgres_server import PostgresServer

    server = PostgresServer(tmp_path_factory.mktemp("postgres")).start()
    yield server
    server.destroy()


_PG_TABLES = itertools.count()


@pytest.fixture
def make_pg_table(postgres):
    """Creates a table on the session's PostgreSQL server: ``make_pg_table("id int, n int", "items")``
    returns its name, unique in the test session."""

    def make(columns: str, prefix: str = "t") -> str:
        name = f"{prefix}_{next(_PG_TABLES)}"
        with postgres.connect() as conn:
            conn.execute(f"CREATE TABLE {name} ({columns})")
        return name

    return make
