"""State TTL on Spark workers, on the heap and the RocksDB backend: values expire by the worker's
wall clock, and with ``cleanup_for_every_record`` the records of other keys sweep expired values
that nothing reads any more (Flink's ``cleanupIncrementally(n, true)``).

The job: 40 users log in at the start of a 1.6 s input, then only clicks of other keys arrive
(they use no state), and at the end each user is checked. TTL is 0.2 s and the state's visibility
is ``return_expired_if_not_cleaned_up``, so a check returns the expired login exactly when no
cleanup removed it before: whether the background sweep ran is visible in the job's output."""

from __future__ import annotations

import pytest

from epochal import MapStateDescriptor, ProcessFunction, StateTtlConfig

USERS = 40
RECORDS = 1_600  # at 1,000 per second: logins in the first 40 ms, checks in the last 40 ms


def record(i: int) -> tuple[str, str]:
    if i < USERS:
        return ("login", f"user-{i}")
    if i >= RECORDS - USERS:
        return ("check", f"user-{i - (RECORDS - USERS)}")
    return ("click", f"page-{i}")


class Sessions(ProcessFunction):
    def __init__(self, ttl: StateTtlConfig) -> None:
        self.descriptor = MapStateDescriptor("session", ttl=ttl)

    def process_element(self, value, ctx):
        kind, user = value
        if kind == "login":
            ctx.get_state(self.descriptor).put("login", user)
        elif kind == "check":
            yield (user, ctx.get_state(self.descriptor).get("login"))


def run(make_env, tmp_path, backend: str, ttl: StateTtlConfig) -> dict[str, str | None]:
    env = make_env(2)
    if backend == "rocksdb":
        env.set_state_backend("rocksdb", local_dir=str(tmp_path / "rocksdb"))
    events = env.from_generator(record, count=RECORDS, rate=1_000.0)
    checks = events.key_by(lambda r: r[1]).process(Sessions(ttl)).collect()
    env.execute(f"state ttl on {backend}")
    return dict(checks.get())


@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_records_of_other_keys_sweep_expired_state_in_the_background(make_env, tmp_path, backend):
    ttl = StateTtlConfig(0.2, visibility="return_expired_if_not_cleaned_up", cleanup_incrementally=10,
                         cleanup_for_every_record=True)
    assert run(make_env, tmp_path, backend, ttl) == {f"user-{i}": None for i in range(USERS)}


def test_without_the_sweep_expired_logins_are_still_stored_when_checked(make_env, tmp_path):
    """The necessity of the sweep above: without it every expired login is still stored when its
    user is checked, and ``return_expired_if_not_cleaned_up`` returns it (once, removing it)."""
    ttl = StateTtlConfig(0.2, visibility="return_expired_if_not_cleaned_up")
    assert run(make_env, tmp_path, "heap", ttl) == {f"user-{i}": f"user-{i}" for i in range(USERS)}


def test_expired_state_is_invisible_by_default(make_env, tmp_path):
    """The default visibility on a real worker: a login older than the TTL is gone when checked."""
    assert run(make_env, tmp_path, "rocksdb", StateTtlConfig(0.2)) == {f"user-{i}": None for i in range(USERS)}
