"""The persisted output queue of CEC (papers/002 Appendix): frames with sequence numbers,
timestamps and checksums, an index reconciled with the log on open, torn and corrupt tails cut,
lookup by timestamp and sequence, segments trimmed, asynchronous bounded writes."""

from __future__ import annotations

import os
import threading
import time

import pytest

from epochal.cec.log_writer import LogWriter
from epochal.cec.output_log import LogError, OutputLog, encode


def fill(log: OutputLog, seqs: range, width: float = 10.0) -> None:
    for seq in seqs:
        log.append(seq, seq * width, seq * width + width - 1, f"payload-{seq}".encode() * 3)


def payloads(log: OutputLog) -> list[bytes]:
    return [payload for _, payload in log.read_from()]


def test_frames_come_back_in_order_and_backwards_across_segments(tmp_path):
    log = OutputLog.open(tmp_path, segment_bytes=200)
    fill(log, range(10))
    assert len({f.segment for f in log.frames}) > 2  # rolled over
    assert payloads(log) == [f"payload-{s}".encode() * 3 for s in range(10)]
    assert [f.seq for f, _ in log.read_backwards()] == list(range(9, -1, -1))
    log.close()
    again = OutputLog.open(tmp_path, segment_bytes=200)
    assert again.frames == log.frames and all(r.cut_bytes == 0 and r.recovered == 0 for r in again.repairs)
    fill(again, range(10, 12))  # a reopened log continues after its last frame
    assert [f.seq for f in again.frames] == list(range(12))


def test_lookup_by_timestamp_and_by_sequence_number(tmp_path):
    log = OutputLog.open(tmp_path, segment_bytes=300)
    fill(log, range(20))  # frame s holds timestamps [10 s, 10 s + 9]
    assert log.find(ts=55.0) == 5 and log.find(ts=59.0) == 5 and log.find(ts=60.0) == 6
    assert log.find(ts=-1.0) == 0 and log.find(ts=1000.0) == 20
    assert log.find(seq=7) == 7 and log.find(seq=25) == 20
    assert [f.seq for f, _ in log.read_from(ts=185.0)] == [18, 19]
    assert [f.seq for f, _ in log.read_from(seq=17)] == [17, 18, 19]


def test_sequence_and_timestamp_order_are_enforced(tmp_path):
    log = OutputLog.open(tmp_path)
    log.append(5, 1.0, 2.0, b"a")
    with pytest.raises(LogError, match="sequence number 5 does not follow 5"):
        log.append(5, 3.0, 4.0, b"b")
    with pytest.raises(LogError, match="breaks timestamp order"):
        log.append(6, 1.5, 4.0, b"b")
    log.append(6, 2.0, 2.0, b"b")  # a shared timestamp at the boundary is fine


def test_a_torn_tail_is_cut_at_the_last_intact_frame(tmp_path):
    log = OutputLog.open(tmp_path)
    fill(log, range(5))
    log.close()
    segment = next(tmp_path.glob("seg-*.log"))
    whole = segment.stat().st_size
    with open(segment, "ab") as f:  # a frame whose write was cut short by a SIGKILL
        f.write(encode(5, 50.0, 59.0, b"x" * 100)[:40])
    again = OutputLog.open(tmp_path)
    assert [f.seq for f in again.frames] == list(range(5))
    assert again.repairs[0].cut_bytes == 40 and segment.stat().st_size == whole
    fill(again, range(5, 7))  # appends go where the torn frame was
    assert [f.seq for f in OutputLog.open(tmp_path).frames] == list(range(7))


def test_a_corrupt_frame_ends_the_log_and_later_segments_are_dropped(tmp_path):
    log = OutputLog.open(tmp_path, segment_bytes=200)
    fill(log, range(10))
    log.close()
    victim = log.frames[4]
    path = tmp_path / f"seg-{victim.segment:020d}.log"
    data = bytearray(path.read_bytes())
    data[victim.offset + victim.length - 1] ^= 0xFF  # one flipped payload byte
    path.write_bytes(bytes(data))
    again = OutputLog.open(tmp_path, segment_bytes=200)
    assert [f.seq for f in again.frames] == [0, 1, 2, 3]
    assert not any(int(p.stem.split("-")[1]) > victim.segment for p in tmp_path.glob("seg-*.log"))
    with pytest.raises(LogError, match="fails its checksum"):
        OutputLog(tmp_path, 200, True).read(victim)


def test_the_index_is_reconciled_with_the_log(tmp_path):
    log = OutputLog.open(tmp_path)
    fill(log, range(6))
    log.close()
    index = next(tmp_path.glob("seg-*.idx"))
    entries = index.read_bytes()
    entry = len(entries) // 6
    index.write_bytes(entries[:2 * entry] + entries[2 * entry:3 * entry][:7])  # lagging, torn entry
    again = OutputLog.open(tmp_path)
    assert [f.seq for f in again.frames] == list(range(6))
    assert (again.repairs[0].indexed, again.repairs[0].recovered) == (2, 4)
    assert len(index.read_bytes()) == 6 * entry  # rewritten whole
    # an index ahead of its log (the log lost its tail, the index did not)
    segment = next(tmp_path.glob("seg-*.log"))
    with open(segment, "r+b") as f:
        f.truncate(again.frames[3].offset)
    third = OutputLog.open(tmp_path)
    assert [f.seq for f in third.frames] == [0, 1, 2] and third.repairs[0].indexed == 3


def test_trim_removes_only_whole_segments_every_reader_passed(tmp_path):
    log = OutputLog.open(tmp_path, segment_bytes=200)
    fill(log, range(12))
    segments = sorted({f.segment for f in log.frames})
    second = segments[1]
    assert log.trim(second) == 1  # the first segment's frames are all below `second`
    assert log.frames[0].seq == second and payloads(log)[0] == f"payload-{second}".encode() * 3
    assert log.trim(10**9) == len(segments) - 2  # never the segment being written
    assert {f.segment for f in log.frames} == {segments[-1]}
    assert [f.seq for f in OutputLog.open(tmp_path, segment_bytes=200).frames] == [f.seq for f in log.frames]


def test_the_writer_calls_back_in_order_once_durable_and_bounds_what_waits(tmp_path):
    durable: list[int] = []
    gate = threading.Event()

    def on_durable(frame):
        gate.wait(5)  # a slow disk: the writer is held here
        durable.append(frame.seq)

    writer = LogWriter(OutputLog.open(tmp_path), max_outstanding=2, on_durable=on_durable)
    writer.submit(0, 0.0, 1.0, b"a")
    writer.submit(1, 1.0, 2.0, b"b")
    deadline = time.monotonic() + 5
    while not writer._pending.qsize() == 1 and time.monotonic() < deadline:
        time.sleep(0.001)  # the writer took 0 and is held writing it
    assert not writer.full()  # one waits: a submit now would not block
    writer.submit(2, 2.0, 3.0, b"c")  # 0 is being written, 1 and 2 wait: the bound is reached
    assert writer.full()  # what the G_check path asks before it produces a frame
    blocked = threading.Thread(target=writer.submit, args=(3, 3.0, 4.0, b"d"))
    blocked.start()
    blocked.join(0.3)
    assert blocked.is_alive()  # back-pressure on the operator thread
    gate.set()
    blocked.join(5)
    writer.close()
    assert durable == [0, 1, 2, 3]
    assert payloads(OutputLog.open(tmp_path)) == [b"a", b"b", b"c", b"d"]


def test_a_failed_write_is_raised_on_the_operator_thread_and_nothing_after_it_is_written(tmp_path):
    forwarded: list[int] = []
    writer = LogWriter(OutputLog.open(tmp_path), on_durable=lambda f: forwarded.append(f.seq))
    writer.submit(0, 0.0, 1.0, b"a")
    writer.submit(0, 1.0, 2.0, b"again")  # refused by the log: the writer stops there
    with pytest.raises(OSError, match="persisted output queue .* failed: sequence number 0"):
        writer.flush()
    with pytest.raises(OSError):
        writer.submit(1, 2.0, 3.0, b"b")  # nothing more is taken
    with pytest.raises(OSError):
        writer.close()  # still reported, and the thread ends
    assert forwarded == [0] and not writer._thread.is_alive()
    assert [f.seq for f in OutputLog.open(tmp_path).frames] == [0]


def test_fsync_can_be_turned_off_and_files_are_where_the_docstring_says(tmp_path):
    log = OutputLog.open(tmp_path / "op-3", fsync=False)
    fill(log, range(2))
    log.close()
    names = sorted(os.listdir(tmp_path / "op-3"))
    assert names == ["seg-00000000000000000000.idx", "seg-00000000000000000000.log"]


WRITER = """
import sys
from epochal.cec.output_log import OutputLog
log = OutputLog.open(sys.argv[1], segment_bytes=4096, fsync=False)
seq = log.last_seq + 1
while True:
    log.append(seq, float(seq), float(seq), (b"%d;" % seq) * (seq % 97 + 1))
    if seq % 50 == 49:
        print(seq, flush=True)  # this frame is written (in the page cache: a SIGKILL keeps it)
    seq += 1
"""


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_writer_killed_at_random_moments_leaves_an_intact_prefix_that_goes_on(tmp_path, seed):
    """SIGKILL the writing process mid-stream, three times: each reopen finds frames 0..m intact
    (every payload as written), cuts whatever was torn, and the next writer continues at m + 1."""
    import random
    import signal
    import subprocess
    import sys

    rng = random.Random(seed)
    for _ in range(3):
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path)], stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        for _ in range(rng.randint(1, 6)):
            written = int(proc.stdout.readline())  # it has written at least this far
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        log = OutputLog.open(tmp_path, segment_bytes=4096)
        seqs = [f.seq for f in log.frames]
        assert seqs == list(range(len(seqs))) and seqs[-1] >= written
        for frame, payload in log.read_from():
            assert payload == (b"%d;" % frame.seq) * (frame.seq % 97 + 1)
        log.close()
