"""The chaos tests of jobs with keyed state run once per state backend (issue: every exactly-once
test passes on heap-full, heap-incremental and RocksDB-incremental): ``make_env`` here wraps the
session's and sets the backend of the test's ``state_backend`` parameter. CEC and graph jobs keep
no keyed state in a backend, so their modules are not multiplied.

To keep CI under its time limit, the tests of ``ROTATED_MODULES`` (whose subject is a sink, a
loop, windows, a restart or an upgrade, not the backend) run each case on **one** backend: the backends take
turns over the cases of a test and over the tests of a module, so every backend still runs part
of every module. ``EPOCHAL_CHAOS_BACKENDS=all`` runs every case on every backend (before a
release, or after a change to a backend)."""

from __future__ import annotations

import os

import pytest

#: name -> ``Environment.set_state_backend`` arguments; heap uses the default snapshot (fork)
BACKENDS = {
    "heap": {},
    "heap-incremental": {"incremental": True, "full_every": 3},  # short chains: full ones in every run
    "rocksdb": {"kind": "rocksdb"},
}
KEYED_STATE_MODULES = {"test_exactly_once", "test_sink_guarantees", "test_checkpoint_recovery", "test_windows",
                       "test_loops", "test_upgrade_restore", "test_counters", "test_queryable_state"}
ROTATED_MODULES = {"test_sink_guarantees", "test_checkpoint_recovery", "test_windows", "test_loops",
                   "test_upgrade_restore"}
ALL_BACKENDS_ENV = "EPOCHAL_CHAOS_BACKENDS"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    module = metafunc.module.__name__.rsplit(".", 1)[-1]
    if "state_backend" in metafunc.fixturenames and module in KEYED_STATE_MODULES:
        metafunc.parametrize("state_backend", list(BACKENDS), indirect=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get(ALL_BACKENDS_ENV) == "all":
        return
    cases: dict[tuple[str, str], dict[tuple, int]] = {}  # (module, test) -> its cases, in order
    tests: dict[str, list[str]] = {}  # module -> its tests, in order
    kept, dropped = [], []
    for item in items:
        module = item.module.__name__.rsplit(".", 1)[-1] if isinstance(item, pytest.Function) else ""
        params = getattr(getattr(item, "callspec", None), "params", {})
        if module not in ROTATED_MODULES or "state_backend" not in params:
            kept.append(item)
            continue
        name = item.originalname
        names = tests.setdefault(module, [])
        if name not in names:
            names.append(name)
        case = tuple(sorted((k, repr(v)) for k, v in params.items() if k != "state_backend"))
        numbered = cases.setdefault((module, name), {})
        number = numbered.setdefault(case, len(numbered))
        turn = (number + names.index(name)) % len(BACKENDS)
        (kept if params["state_backend"] == list(BACKENDS)[turn] else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


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
