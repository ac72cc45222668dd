"""The chaos tests of jobs with keyed state run once per state backend (issue: every exactly-once
test passes on heap-full, heap-incremental and RocksDB-incremental): ``make_env`` here wraps the
session's and sets the backend of the test's ``state_backend`` parameter. CEC and graph jobs keep
no keyed state in a backend, so their modules are not multiplied."""

from __future__ import annotations

import pytest

#: name -> ``Environment.set_state_backend`` arguments; heap uses the default snapshot (fork)
BACKENDS = {
    "heap": {},
    "heap-incremental": {"incremental": True, "full_every": 3},  # short chains: full ones in every run
    "rocksdb": {"kind": "rocksdb"},
}
KEYED_STATE_MODULES = {"test_exactly_once", "test_sink_guarantees", "test_checkpoint_recovery", "test_windows",
                       "test_loops", "test_upgrade_restore", "test_counters", "test_queryable_state"}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    module = metafunc.module.__name__.rsplit(".", 1)[-1]
    if "state_backend" in metafunc.fixturenames and module in KEYED_STATE_MODULES:
        metafunc.parametrize("state_backend", list(BACKENDS), indirect=True)


@pytest.fixture
def state_backend(request) -> str:
    """The state backend of this test (parametrised in the modules of jobs with keyed state)."""
    return getattr(request, "param", "heap")


@pytest.fixture
def make_env(make_env, state_backend, tmp_path):
    backend = state_backend
    options = dict(BACKENDS[backend])
    if backend == "rocksdb":
        options["local_dir"] = str(tmp_path / "rocksdb")

    def factory(*args, **kwargs):
        env = make_env(*args, **kwargs)
        env.set_state_backend(**options)
        return env

    return factory
