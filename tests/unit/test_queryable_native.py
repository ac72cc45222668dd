"""The native answer path of a worker's query server (dataflow/queries/native.py, _answer.c)
without Spark: its key groups are key_group_of's; a server with it answers every request exactly
as the Python path does (plain lookups natively, everything else, refusals and errors included,
by the machine from the same bytes: partial and pipelined frames, other levels, states, keys,
tokens, values plain pickle cannot write); an answer larger than the socket takes arrives whole;
only served heap states without TTL are answered natively; ``EPOCHAL_NATIVE_QUERIES=0`` turns it
off."""

from __future__ import annotations

import os
import pathlib
import random
import re
import socket
import time
from typing import Any

import pytest

from epochal.dataflow.queries import native
from epochal.dataflow.queries.machine import FrameArrived
from epochal.dataflow.queries.server import KeyedSource, QueryServer
from epochal.plan.keygroups import key_group_of
from epochal.runtime.host.frames import LENGTH, TOKEN_BYTES, split_frames
from epochal.runtime.host.mailbox import Mailbox
from epochal.runtime.queries.wire import (
    READ_COMMITTED,
    Lookup,
    Scan,
    decode,
    encode,
    query_token,
    request_frame,
)
from epochal.state.descriptors import ListStateDescriptor, ValueStateDescriptor
from epochal.state.heap.backend import HeapKeyedStateBackend
from epochal.state.ttl import StateTtlConfig
from tests.unit.queryable_servers import polled_heap_server

JOB_TOKEN = b"j" * 32
TOKEN = query_token(JOB_TOKEN)
MAXP = 128
MINE = range(0, 64)  # worker 0 of 2



def owned(candidates: Any) -> Any:
    """The first of ``candidates`` whose key group worker 0 owns."""
    return next(key for key in candidates if key_group_of(key, MAXP) in MINE)


#: a bytes, a positive and a negative int key of worker 0; a key whose value only cloudpickle writes
SCALARS = (owned(b"raw%d" % i for i in range(1000)), owned(range(7, 1000)), owned(range(-3, -1000, -1)))
LAMBDA = owned(f"lambda{i}" for i in range(1000))

pytestmark = pytest.mark.skipif(os.environ.get(native.SWITCH_ENV) == "0",
                                reason="the native answer path is switched off in this environment")


def test_the_extension_is_built_and_its_key_groups_are_key_group_of():
    from epochal.dataflow.queries import _answer  # type: ignore[attr-defined]

    assert native.unavailable_reason() is None
    rng = random.Random(37)
    keys: list[Any] = ["", "a", "ünïcödé ✓", "k" * 1000, b"", b"\x00\xff" * 9, 0, -1, 2**70, -(2**64) + 3]
    keys += [f"w{rng.randrange(10**9)}" for _ in range(500)] + [rng.randbytes(rng.randrange(40)) for _ in range(200)]
    keys += [rng.randrange(-(10**12), 10**12) for _ in range(200)]
    for key in keys:
        for maxp in (1, 7, 128, 65536):
            assert _answer.key_group(key, maxp) == key_group_of(key, maxp), (key, maxp)
    for other in (True, 1.0, 2.5, None, ("a", 1), "\udc80", bytearray(b"a")):  # the machine's
        assert _answer.key_group(other, MAXP) == -1


def filled(incremental: bool = False) -> HeapKeyedStateBackend:
    backend = HeapKeyedStateBackend(MAXP, MINE, incremental=incremental)
    backend.get_state(ValueStateDescriptor("v", queryable="values"))
    backend.get_state(ListStateDescriptor("l", queryable="lists"))
    backend.get_state(ValueStateDescriptor("t", ttl=StateTtlConfig(ttl=3600.0), queryable="ttl"))
    for key in [f"k{i}" for i in range(300)] + [*SCALARS, 1.5, ("t", 1), True]:
        group = key_group_of(key, MAXP)
        if group in MINE:
            backend.owned_table("v")[group][key] = {"n": str(key), "list": [1, None]}
            backend.owned_table("l")[group][key] = [key, key]
            backend.set_current_key(key)
            backend.get_state(ValueStateDescriptor("t", ttl=StateTtlConfig(ttl=3600.0))).update(1)
    backend.owned_table("v")[key_group_of(LAMBDA, MAXP)][LAMBDA] = lambda x: x  # only cloudpickle writes it
    return backend


def server_of(backend: HeapKeyedStateBackend, monkeypatch, on: bool) -> tuple[QueryServer, list[Any]]:
    """A serving QueryServer of ``backend``, with the native path on or off, and the list of the
    frames its machine was fed (those the native path left to Python)."""
    monkeypatch.setenv(native.SWITCH_ENV, "1" if on else "0")
    server = QueryServer(JOB_TOKEN, 0, "127.0.0.1", MAXP, Mailbox())
    server.attach([KeyedSource("u", 0, 2, backend)], restored=2)
    server.serving()
    assert (server._native is not None) == on
    fed: list[Any] = []
    feed = server._feed

    def spy(event: Any) -> None:
        if isinstance(event, FrameArrived):
            fed.append(event)
        feed(event)

    server._feed = spy  # type: ignore[method-assign]
    return server, fed


def exchange(server: QueryServer, sock: socket.socket, data: list[bytes], answers: int) -> list[Any]:
    """Send ``data`` in parts (polling between them), poll until ``answers`` answers came back."""
    for part in data:
        sock.sendall(part)
        deadline = time.monotonic() + 0.05
        while time.monotonic() < deadline:
            server.poll()
    buffer, frames = bytearray(), []
    deadline = time.monotonic() + 10
    while len(frames) < answers and time.monotonic() < deadline:
        server.poll()
        try:
            buffer += sock.recv(1 << 20)
        except BlockingIOError:
            time.sleep(0.001)
        frames += split_frames(buffer)
    assert len(frames) == answers, "answers missing"
    return [decode(f) for f in frames]


def plain(rid: int, *keys: Any) -> bytes:
    return request_frame(TOKEN, encode(Lookup(rid, "values", keys)))


def cases(mine: list[str], theirs: str) -> list[tuple[str, list[bytes], int, bool]]:
    """(what, the bytes in parts, answers, answered natively)."""
    one, two = mine[0], mine[1]
    pipelined = plain(10, one) + plain(11, two)
    split = plain(12, one, two)
    return [
        ("one key", [plain(1, one)], 1, True),
        ("many keys, one absent", [plain(2, one, two, "absent")], 1, True),
        ("bytes and int keys", [plain(3, *SCALARS)], 1, True),
        ("a list state", [request_frame(TOKEN, encode(Lookup(4, "lists", (one,))))], 1, True),
        ("float, tuple and bool keys", [plain(5, 1.5), plain(6, ("t", 1)), plain(7, True)], 3, False),
        ("a key of the other worker", [plain(8, theirs)], 1, False),
        ("an unhashable key", [request_frame(TOKEN, encode(Lookup(9, "values", (["a"],))))], 1, False),
        ("two requests in one read", [pipelined], 2, False),
        ("a request in two reads", [split[:9], split[9:]], 1, False),
        ("read_committed", [request_frame(TOKEN, encode(Lookup(13, "values", (one,), READ_COMMITTED)))], 1, False),
        ("a level that is none", [request_frame(TOKEN, encode(Lookup(14, "values", (one,), "dirty")))], 1, False),
        ("an unknown state", [request_frame(TOKEN, encode(Lookup(15, "nope", (one,))))], 1, False),
        ("a state with TTL", [request_frame(TOKEN, encode(Lookup(16, "ttl", (one,))))], 1, False),
        ("a scan", [request_frame(TOKEN, encode(Scan(17, "values", limit=3)))], 1, False),
        ("a value only cloudpickle writes", [plain(18, LAMBDA)], 1, False),
        ("not a pickle", [request_frame(TOKEN, b"\x80\x05junk")], 1, False),
        ("after all that, one key", [plain(19, two)], 1, True),
    ]


def comparable(answer: Any) -> Any:
    """An answer with its values' functions replaced by what they give (functions compare by identity)."""
    values = getattr(answer, "values", None)
    if values is not None and any(callable(v) for v in values):
        return type(answer), answer.found, tuple(v(5) if callable(v) else v for v in values)
    return answer


@pytest.mark.parametrize("incremental", [False, True], ids=["heap", "incremental heap"])
def test_a_server_answers_every_request_as_the_python_path_does_and_plain_lookups_natively(monkeypatch, incremental):
    backend = filled(incremental)
    mine = sorted(k for k in (f"k{i}" for i in range(300)) if key_group_of(k, MAXP) in MINE)
    theirs = next(f"k{i}" for i in range(300) if key_group_of(f"k{i}", MAXP) not in MINE)
    answers: dict[bool, list[Any]] = {}
    for on in (True, False):
        server, fed = server_of(backend, monkeypatch, on)
        got = []
        try:
            with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
                sock.setblocking(False)
                for what, data, count, natively in cases(mine, theirs):
                    before = len(fed)
                    got.append((what, [comparable(a) for a in exchange(server, sock, data, count)]))
                    if on:
                        assert (len(fed) == before) == natively, f"{what}: natively {natively}, fed {fed[before:]}"
        finally:
            server.close()
        answers[on] = got
    assert answers[True] == answers[False]
    first = dict(answers[True])
    assert first["many keys, one absent"][0].found == (True, True, False)
    assert first["one key"][0].values == ({"n": mine[0], "list": [1, None]},)
    assert first["a value only cloudpickle writes"][0][2] == (5,)


def test_a_wrong_token_is_refused_and_the_connection_closed_by_the_python_path(monkeypatch):
    server, fed = server_of(filled(), monkeypatch, True)
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
            sock.setblocking(False)
            (refusal,) = exchange(server, sock, [request_frame(b"w" * 32, encode(Lookup(1, "values", ("k1",))))], 1)
            assert refusal.code == "unauthorized" and len(fed) == 1
            sock.setblocking(True)
            assert sock.recv(10) == b""
    finally:
        server.close()


def test_an_answer_larger_than_the_socket_takes_is_sent_whole():
    """The native path sends what the socket takes and hands the rest to the server, which sends
    it as it sends any answer (waiting for the client up to its send timeout)."""
    with polled_heap_server(None) as (backend, server):
        backend.owned_table("v")[key_group_of("big", MAXP)]["big"] = b"x" * (8 << 20)
        rests, fed = [], []
        native_answer, feed = server._native.answer, server._feed

        class Spy:  # (records the rests the native path hands over)
            def answer(self, fd: int) -> Any:
                result = native_answer(fd)
                rests.append(len(result) if type(result) is bytes else None)
                return result

        server._feed = fed.append  # type: ignore[method-assign]  (nothing may reach the machine)
        server._native = Spy()
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
            sock.sendall(plain(1, "big"))
            buffer, frames = bytearray(), []
            while not frames:
                data = sock.recv(1 << 20)
                assert data, "the server closed the connection"
                buffer += data
                frames = split_frames(buffer)
        assert decode(frames[0]).values == (b"x" * (8 << 20),)
        assert not fed and server.answered == 1
        assert any(rests), "the socket took the whole answer: nothing was handed over"
        server._feed = feed  # type: ignore[method-assign]


def test_only_served_heap_states_without_ttl_are_answered_natively(monkeypatch, tmp_path):
    from epochal.config import ROCKSDB, StateBackendConfig
    from epochal.state.backends import create_backend

    server, _ = server_of(filled(), monkeypatch, True)
    try:
        assert set(server._answerable) == {"values", "lists"}
        server.machine.serving = False
        assert native.answerable(server.machine.states, False, server._backend) == {}
    finally:
        server.close()
    rocks = create_backend(StateBackendConfig(ROCKSDB, local_dir=str(tmp_path / "r")), MAXP, MINE, "op")
    rocks.get_state(ValueStateDescriptor("v", queryable="values"))
    server, _ = server_of(rocks, monkeypatch, True)
    try:
        assert server._answerable == {}
    finally:
        server.close()
        rocks.dispose()


def test_the_switch_turns_the_native_path_off(monkeypatch):
    monkeypatch.setenv(native.SWITCH_ENV, "0")
    assert native.unavailable_reason() == f"{native.SWITCH_ENV}=0"
    assert native.answerer(memoryview(bytearray(1024)), TOKEN, {}) is None
    monkeypatch.delenv(native.SWITCH_ENV)
    assert native.unavailable_reason() is None


def test_the_native_path_frames_as_the_python_side():
    """_answer.c reads request frames and writes answer frames itself: its length prefix and token
    are those of runtime.host.frames, which frames every other read and write."""
    source = (pathlib.Path(native.__file__).parent / "_answer.c").read_text()
    defines = {name: int(value) for name, value in re.findall(r"^#define (\w+) (\d+)$", source, re.M)}
    assert defines["HEADER"] == LENGTH.size
    assert defines["TOKEN"] == TOKEN_BYTES
