"""One writer per exactly-once sink directory (epochal.control.sink_claims), without Spark: a second
claim of a held directory is refused naming the holder, a released or dead holder's directory is
free at once, and on remote filesystems an unrenewed lease expires."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from epochal.control import sink_claims
from epochal.control.sink_claims import CLAIM_FILE, SinkClaims, read_holder
from epochal.errors import SinkInUseError


def test_a_held_directory_is_refused_to_a_second_job_until_the_first_releases_it(tmp_path):
    out = str(tmp_path / "out")
    first = SinkClaims("aaaa1111", "orders", {out: "ExactlyOnceFileSink"})
    first.acquire()
    holder = read_holder(out)
    assert holder is not None and (holder.job_id, holder.pid) == ("aaaa1111", os.getpid())
    second = SinkClaims("bbbb2222", "orders-fork", {out: "ExactlyOnceFileSink"})
    with pytest.raises(SinkInUseError, match="being written by job 'orders' \\(id aaaa1111") as error:
        second.acquire()
    assert error.value.location == out and error.value.holder == "aaaa1111"
    assert "epochal stop orders --savepoint-dir" in str(error.value)
    first.release()
    assert read_holder(out) is None
    second.acquire()
    assert read_holder(out).job_id == "bbbb2222"
    second.release()


def test_claims_are_all_or_none(tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    holder = SinkClaims("held", "other", {b: "ParquetFileSink"})
    holder.acquire()
    both = SinkClaims("new", "job", {a: "ExactlyOnceFileSink", b: "ParquetFileSink"})
    with pytest.raises(SinkInUseError):
        both.acquire()
    assert read_holder(a) is None  # the one taken first was given back
    SinkClaims("third", "job", {a: "ExactlyOnceFileSink"}).acquire()
    holder.release()


def test_a_dead_drivers_claim_is_free_at_once(tmp_path):
    out = str(tmp_path / "out")
    script = textwrap.dedent(f"""
        import sys, time
        from epochal.control.sink_claims import SinkClaims
        claims = SinkClaims("dead0000", "crashed", {{{out!r}: "ExactlyOnceFileSink"}})
        claims.acquire()
        print("held", flush=True)
        time.sleep(60)
    """)
    driver = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        assert driver.stdout.readline().strip() == "held"
        with pytest.raises(SinkInUseError, match="job 'crashed'"):
            SinkClaims("next0000", "next", {out: "ExactlyOnceFileSink"}).acquire()
        driver.send_signal(signal.SIGKILL)
        driver.wait(10)
        assert read_holder(out).job_id == "dead0000"  # its claim file stays behind ...
        claims = SinkClaims("next0000", "next", {out: "ExactlyOnceFileSink"})
        claims.acquire()  # ... but its lock died with it
        assert read_holder(out).job_id == "next0000"
        claims.release()
    finally:
        driver.kill()


def test_a_remote_claim_is_a_lease_renewed_while_the_job_runs_and_taken_over_once_expired(tmp_path, monkeypatch):
    monkeypatch.setattr(sink_claims, "LEASE_S", 0.9)  # renewed every 0.3 s: room for a loaded machine
    out = f"file://{tmp_path}/out"
    first = SinkClaims("lease111", "remote", {out: "ParquetFileSink"})
    first.acquire()
    first.renew_while_held()
    time.sleep(1.2)  # past one lease: the renewals keep it
    with pytest.raises(SinkInUseError, match="job 'remote'"):
        SinkClaims("lease222", "fork", {out: "ParquetFileSink"}).acquire()
    first.release()
    time.sleep(0.4)  # a renewal due now does not bring it back
    assert read_holder(out) is None  # released when the job ended

    stale = SinkClaims("lease333", "vanished", {out: "ParquetFileSink"})
    stale.acquire()  # and never renewed: its driver is gone
    time.sleep(1.0)
    taker = SinkClaims("lease444", "next", {out: "ParquetFileSink"})
    taker.acquire()
    assert read_holder(out).job_id == "lease444"
    stale.release()  # the old holder's release leaves the new claim alone
    assert read_holder(out).job_id == "lease444"
    with open(tmp_path / "out" / CLAIM_FILE) as claim:
        assert json.load(claim)["job_name"] == "next"
