"""Freeing a finished subtask's containers in the background (epochal.state.postgres.release)."""

from __future__ import annotations

import gc
import os
import time
import weakref

from epochal.state.postgres import release


class Value:
    """A value whose freeing can be observed (weakref-able, unlike bytes)."""


def wait_released(timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while release.pending_entries():
        assert time.monotonic() < deadline, "the release thread did not free the containers"
        time.sleep(0.01)


def test_containers_are_emptied_by_the_release_thread_and_their_entries_freed():
    values = [Value() for _ in range(50_000)]
    alive = [weakref.ref(v) for v in values[::1000]]
    groups = [{i: values[i] for i in range(start, start + 5_000)} for start in range(0, 50_000, 5_000)]
    known = set(range(30_000))
    del values
    assert release.release_later([*groups, known, {}, set()]) == 80_000  # empty ones are skipped
    wait_released()
    assert all(len(group) == 0 for group in groups) and not known
    gc.collect()
    assert all(ref() is None for ref in alive)  # nothing else held them: freed with the entries


def test_the_release_thread_pauses_after_each_slice(monkeypatch):
    monkeypatch.setattr(release, "SLICE", 1_000)
    monkeypatch.setattr(release, "PAUSE_S", 0.3)
    groups = [dict.fromkeys(range(1_000)) for _ in range(3)]
    release.release_later(groups)
    deadline = time.monotonic() + 10
    while release.pending_entries() == 3_000:
        assert time.monotonic() < deadline
        time.sleep(0.001)
    assert release.pending_entries() == 2_000  # one slice freed, then a pause in which others run
    wait_released()
    assert not any(groups)


def test_a_forked_child_has_nothing_pending_and_releases_on_its_own():
    pid = os.fork()
    if pid == 0:  # the child: fresh state; a release there works without the parent's thread
        code = 1
        try:
            if release.pending_entries() == 0 and release.release_later([dict.fromkeys(range(10))]) == 10:
                deadline = time.monotonic() + 5
                while release.pending_entries() and time.monotonic() < deadline:
                    time.sleep(0.01)
                code = 0 if release.pending_entries() == 0 else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
