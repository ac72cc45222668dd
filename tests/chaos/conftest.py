"""The chaos tests of jobs with keyed state run once per state backend (issue: every exactly-once
test passes on heap-full, heap-incremental and RocksDB-incremental): ``make_env`` here wraps the
session's and sets the backend of the test's ``state_backend`` parameter. CEC and graph jobs keep
no keyed state in a backend, so their modules are not multiplied.

To keep CI under its time limit, the tests of ``ROTATED_MODULES`` (whose subject is a sink, a
loop, windows, a restart or an upgrade, not the backend) run each case on **one** backend: the backends take
turns over the cases of a test and over the tests of a module, so every backend still runs part
of every module. ``EPOCHAL_CHAOS_BACKENDS=all`` runs every case on every backend (before a
release, or after a change to a backend).

The PostgreSQL backend (a real server: the session's ``postgres`` fixture) takes its turn in the
rotation only: in the other keyed modules it runs with ``EPOCHAL_CHAOS_BACKENDS=all``, and its
own kills, rescaling and server restarts are ``test_postgres_state.py``'s."""

from __future__ import annotations

import os

import pytest

#: name -> ``Environment.set_state_backend`` arguments; heap uses the default snapshot (fork)
BACKENDS = {
    "heap": {},
    "heap-incremental": {"incremental": True, "full_every": 3},  # short chains: full ones in every run
    "rocksdb": {"kind": "rocksdb"},
    "postgres": {"kind": "postgres"},  # dsn: the session's server
    "postgres-mvcc": {"kind": "postgres", "mvcc": True},
}
#: backends that run in ROTATED_MODULES only (unless EPOCHAL_CHAOS_BACKENDS=all): CI time
ROTATION_ONLY = {"postgres", "postgres-mvcc"}
KEYED_STATE_MODULES = {"test_exactly_once", "test_sink_guarantees", "test_checkpoint_recovery", "test_windows",
                       "test_loops", "test_upgrade_restore", "test_counters", "test_queryable_state",
                       "test_columnar"}
ROTATED_MODULES = {"test_sink_guarantees", "test_checkpoint_recovery", "test_windows", "test_loops",
                   "test_upgrade_restore", "test_columnar"}
ALL_BACKENDS_ENV = "EPOCHAL_CHAOS_BACKENDS"


#: backends whose keyed state is in no checkpoint file (tests marked ``keyed_state_files`` skip them)
EXTERNAL = {"postgres", "postgres-mvcc"}


def backends_for(function: object) -> list[str]:
    """The backends a test runs on: those its ``backends`` mark names, else all, but the external
    ones for a test of keyed-state files."""
    marks = getattr(function, "pytestmark", [])
    for mark in marks:
        if getattr(mark, "name", "") == "backends":
            return list(mark.args)
    files = any(getattr(m, "name", "") == "keyed_state_files" for m in marks)
    return [b for b in BACKENDS if not (files and b in EXTERNAL)]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "keyed_state_files: the test reads or damages keyed state's checkpoint "
                                       "files (not run on backends that keep keyed state in a database)")
    config.addinivalue_line("markers", "backends(*names): the only backends the test runs on (a test that shows a "
                                       "mechanism is necessary needs one; CI time)")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    module = metafunc.module.__name__.rsplit(".", 1)[-1]
    if "state_backend" in metafunc.fixturenames and module in KEYED_STATE_MODULES:
        metafunc.parametrize("state_backend", backends_for(metafunc.function), indirect=True)


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
            (dropped if params.get("state_backend") in ROTATION_ONLY else kept).append(item)
            continue
        name = item.originalname
        names = tests.setdefault(module, [])
        if name not in names:
            names.append(name)
        case = tuple(sorted((k, repr(v)) for k, v in params.items() if k != "state_backend"))
        numbered = cases.setdefault((module, name), {})
        number = numbered.setdefault(case, len(numbered))
        candidates = backends_for(item.function)
        turn = (number + names.index(name)) % len(candidates)
        (kept if params["state_backend"] == candidates[turn] else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


@pytest.fixture
def state_backend(request) -> str:
    """The state backend of this test (parametrised in the modules of jobs with keyed state)."""
    return getattr(request, "param", "heap")


@pytest.fixture
def make_env(make_env, state_backend, tmp_path, request):
    backend = state_backend
    options = dict(BACKENDS[backend])
    if backend == "rocksdb":
        options["local_dir"] = str(tmp_path / "rocksdb")
    if options.get("kind") == "postgres":
        options["dsn"] = request.getfixturevalue("postgres").dsn

    def factory(*args, **kwargs):
        env = make_env(*args, **kwargs)
        env.set_state_backend(**options)
        return env

    return factory
