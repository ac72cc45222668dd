"""Queryable state without Spark: the CPU one lookup costs the client and the worker's query server.

A ``QueryServer`` of one heap backend (10,000 keys, every key group) runs in a process of its own;
a ``QueryableStateClient`` of this process, routed to it, asks single keys with ``get``:

* ``client back to back``: the client's CPU (user + system, ``time.process_time``) per blocking
  ``get``, one call after the other, the server's process sleeping in ``QueryServer.wait`` between
  requests as an idle worker does;
* ``client at 1,000/s``: the same, one call a millisecond (the client sleeps between calls, as the
  cost experiment's client of ``benchmarks/queryable_state.py`` does), and the CPU of that pacing
  loop alone (``pacing alone``), which is not the client's;
* ``worker poll``: the CPU of ``QueryServer.poll`` per request on the polling thread
  (``time.thread_time``): the request sent, then polled until answered, in one process, over TCP
  and over the worker's local socket;
* ``busy worker`` (``--busy``: only this): the same path among a busy processing thread's work
  (a word count polling the server after each batch of 1,000, on core 0; a client on core 1 asking
  back to back, or ``--pace N`` a second): the loop's lost time per answer, over TCP and over the
  local socket, by the native answer path and by the Python path;
* ``raw socket floor``: what any client and server of this machine pay, without epochal: a
  blocking request-answer of 60 bytes over loopback TCP to an echo server in another process,
  back to back and at 1,000/s, its CPU on each side per round trip (``--floor-only``: only this).

``--src DIR`` measures another revision's ``src`` (``git archive REV src | tar -x -C DIR``), so
that two revisions can be compared side by side, e.g. alternating::

    python -m benchmarks.queryable_state_cpu                       # this tree, 3 rounds
    python -m benchmarks.queryable_state_cpu --src /tmp/base/src   # another revision

Prints one line per measurement and round; nothing is written.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import pickle
import random
import socket
import sys
import time
from collections.abc import Sequence
from typing import Any

MAXP = 128
KEYS = 10_000
STATE = "counts"
JOB_TOKEN = b"j" * 32


def server(src: str | None, ports: Any) -> None:
    """The query server's process: serve until killed."""
    if src:
        sys.path.insert(0, src)
    query_server = make_server()
    ports.put((query_server.port, query_server.routes.get("local")))
    while True:
        query_server.wait(1.0)
        query_server.poll()


def make_server() -> Any:
    from epochal.dataflow.queries.server import KeyedSource, QueryServer
    from epochal.plan.keygroups import key_group_of
    from epochal.runtime.host.mailbox import Mailbox
    from epochal.state.descriptors import ValueStateDescriptor
    from epochal.state.heap.backend import HeapKeyedStateBackend

    backend = HeapKeyedStateBackend(MAXP, range(MAXP))
    backend.get_state(ValueStateDescriptor("v", queryable=STATE))
    for i in range(KEYS):
        backend.owned_table("v")[key_group_of(f"w{i}", MAXP)][f"w{i}"] = i
    query_server = QueryServer(JOB_TOKEN, 0, "127.0.0.1", MAXP, Mailbox())
    query_server.attach([KeyedSource("u", 0, 1, backend)], restored=None)
    query_server.serving()
    return query_server


def client_of(port: int, local: dict[str, str] | None, transport: str) -> Any:
    """A client routed to the server at ``port`` (and its local socket ``local``, where it has one,
    which ``transport="auto"`` uses; an older revision has none)."""
    from epochal.rest.state_client import QueryableStateClient
    from epochal.runtime.queries.wire import query_token

    address = f"127.0.0.1:{port}"
    routes = {"job_id": "j", "status": "RUNNING", "attempt": 0, "serving": True, "max_parallelism": MAXP,
              "token": query_token(JOB_TOKEN).hex(), "states": {STATE: {"parallelism": 1, "workers": {"0": address}}},
              **({"local_sockets": {address: local}} if local else {})}
    client = QueryableStateClient.__new__(QueryableStateClient)
    if local:
        client._setup(lambda: routes, "read_uncommitted", 10.0, transport)
    else:
        client._setup(lambda: routes, "read_uncommitted", 10.0)
    return client


def paced(calls: int, rate: float, call: Any) -> float:
    """CPU seconds per turn of a loop making ``calls`` calls at ``rate`` a second."""
    cpu = time.process_time()
    due = time.monotonic()
    for i in range(calls):
        call(i)
        due += 1 / rate
        wait = due - time.monotonic()
        if wait > 0:
            time.sleep(wait)
    return (time.process_time() - cpu) / calls


def client_rounds(port: int, local: dict[str, str] | None, transport: str, calls: int, rounds: int) -> None:
    client = client_of(port, local, transport)
    assert client.get(STATE, "w5") == 5
    (connection,) = client._connections.values()
    over = getattr(connection, "transport", "tcp")
    rng = random.Random(1)
    keys = [f"w{rng.randrange(KEYS)}" for _ in range(calls)]
    assert client.get(STATE, "w5") == 5
    slow = keys[:calls // 5]
    for round_ in range(rounds):
        cpu, started = time.process_time(), time.perf_counter()
        for key in keys:
            client.get(STATE, key)
        seconds = time.perf_counter() - started
        print(f"[{round_}] client back to back ({over}): "
              f"{(time.process_time() - cpu) / calls * 1e6:6.1f} us CPU per get "
              f"({calls / seconds:,.0f} gets/s)", flush=True)
        per_get = paced(len(slow), 1000.0, lambda i: client.get(STATE, slow[i]))
        alone = paced(len(slow), 1000.0, lambda i: None)
        print(f"[{round_}] client at 1,000/s ({over}):   {per_get * 1e6:6.1f} us CPU per get "
              f"(pacing alone {alone * 1e6:.1f} us)", flush=True)
    client.close()


def servers_by_path() -> dict[str, Any]:
    """A query server per answer path: ``native`` and ``python`` (``EPOCHAL_NATIVE_QUERIES=0``)
    where the native path is built, else ``python`` alone (or an older revision's one server)."""
    first = make_server()
    if getattr(first, "_native", None) is None:
        return {"python": first}
    python = make_server()
    python._native = None
    return {"native": first, "python": python}


def poll_rounds(calls: int, rounds: int) -> None:
    for path, query_server in servers_by_path().items():
        local = query_server.routes.get("local")
        for over in ("tcp", "unix") if local else ("tcp",):
            if over == "unix":
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.connect("\0" + local["socket"])
            else:
                sock = socket.create_connection(("127.0.0.1", query_server.port))
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            poll_connection(query_server, sock, f"{over}, {path}", calls, rounds)
        query_server.close()


def poll_connection(query_server: Any, sock: socket.socket, over: str, calls: int, rounds: int) -> None:
    """``QueryServer.poll``'s CPU per request of connection ``sock`` (``over``: its transport)."""
    from epochal.runtime.queries.wire import Lookup, query_token, request_frame

    try:
        from epochal.runtime.queries.wire import encode
    except ImportError:  # a revision before messages were encoded as tuples
        def encode(message: Any) -> bytes:
            return pickle.dumps(message, protocol=5)

    token = query_token(JOB_TOKEN)
    frames = [request_frame(token, encode(Lookup(i, STATE, (f"w{i % KEYS}",)))) for i in range(calls)]
    buffer = bytearray(1 << 16)
    before = set(query_server.connections.values())
    while not set(query_server.connections.values()) - before:  # accepted (an earlier one may close meanwhile)
        query_server.poll()
    for round_ in range(rounds):
        cpu = 0.0
        for frame in frames:
            sock.sendall(frame)
            answered = query_server.answered
            before = time.thread_time()
            while query_server.answered == answered:
                query_server.poll()
            cpu += time.thread_time() - before
            sock.recv_into(buffer)
        print(f"[{round_}] worker poll ({over}): {cpu / calls * 1e6:6.1f} us CPU per request", flush=True)
    sock.close()


def echo(ports: Any, results: Any) -> None:
    """The floor's server process: answer every read with its bytes; put its CPU seconds per
    answer (``time.process_time``) on ``results`` after each client's connection closed."""
    listener = socket.create_server(("127.0.0.1", 0))
    ports.put(listener.getsockname()[1])
    buffer = bytearray(1 << 16)
    while True:
        connection, _ = listener.accept()
        connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        answered, cpu = 0, time.process_time()
        while received := connection.recv_into(buffer):
            connection.sendall(buffer[:received])
            answered += 1
        results.put((time.process_time() - cpu) / max(answered, 1))
        connection.close()


def busy_client(port: int, local: dict[str, str] | None, transport: str, seconds: float, pace: float) -> None:
    """A client process on core 1 (forked from the loop's process, pinned to core 0): single-key
    ``get`` for ``seconds``, back to back, or ``pace`` a second."""
    if (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {1})
    client = client_of(port, local, transport)
    rng = random.Random(1)
    due = time.monotonic()
    end = due + seconds
    while time.monotonic() < end:
        client.get(STATE, f"w{rng.randrange(KEYS)}")
        if pace:
            due += 1 / pace
            time.sleep(max(0.0, due - time.monotonic()))
    client.close()


def busy_rounds(rounds: int, pace: float = 0.0, seconds: float = 5.0) -> None:
    """``--busy``: the query path among a busy processing thread's work, whose caches it finds
    cold. This process (on core 0) counts words in batches of 1,000 and polls its query server
    after each batch, as a worker does; a client process on core 1 asks single keys back to back,
    or ``pace`` a second. The loop's time per answer, with against without the client, is what
    one lookup costs a busy worker (the hot path alone: ``worker poll``). Paced lookups find the
    query path colder and cost more each (docs/queryable_state.md). Where the native answer path
    is built, each round measures it and the Python path (``EPOCHAL_NATIVE_QUERIES=0``) in turn,
    each with its own server."""
    if (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {0})
    servers = servers_by_path()
    rng = random.Random(2)
    words = [f"word{i}" for i in range(10_000)]
    batches = [[rng.choice(words) for _ in range(1000)] for _ in range(200)]
    counts: dict[str, int] = {}
    context = multiprocessing.get_context("fork")

    def loop(query_server: Any, client: Any) -> tuple[float, float]:
        answered, records = query_server.answered, 0
        started = time.monotonic()
        while time.monotonic() - started < seconds:
            for word in batches[records // 1000 % 200]:
                counts[word] = counts.get(word, 0) + 1
            records += 1000
            query_server.poll()
        elapsed = time.monotonic() - started
        answers = (query_server.answered - answered) / elapsed
        while client is not None and client.is_alive():  # answer it until it ends
            query_server.poll()
            time.sleep(0.0005)
        return records / elapsed, answers

    for round_ in range(rounds):
        for path, query_server in servers.items():
            local = query_server.routes.get("local")
            alone, _ = loop(query_server, None)
            for transport in ("tcp", "auto") if local else ("tcp",):
                client = context.Process(target=busy_client,
                                         args=(query_server.port, local, transport, seconds + 1, pace))
                client.start()
                time.sleep(0.5)
                rate, answers = loop(query_server, client)
                client.join()
                cost = (1000 / rate - 1000 / alone) / (1000 * answers / rate)  # the loop's extra time per answer
                print(f"[{round_}] busy worker ({'unix' if transport == 'auto' else 'tcp'}, {path}"
                      f"{f', {pace:,.0f}/s' if pace else ''}): {cost * 1e6:6.1f} us per lookup ({answers:,.0f} "
                      f"answers/s; {rate:,.0f} records/s against {alone:,.0f} alone)", flush=True)
    for query_server in servers.values():
        query_server.close()


def floor_rounds(calls: int, rounds: int) -> None:
    """The raw socket floor: a plain blocking round trip to :func:`echo`, back to back and paced."""
    context = multiprocessing.get_context("spawn")
    ports, results = context.Queue(), context.Queue()
    process = context.Process(target=echo, args=(ports, results), daemon=True)
    process.start()
    port = ports.get(timeout=60)
    message, buffer = b"x" * 60, bytearray(1 << 16)
    try:
        for round_ in range(rounds):
            for rate in (None, 1000.0):
                sock = socket.create_connection(("127.0.0.1", port))
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

                def trip(_: int, sock: socket.socket = sock) -> None:
                    sock.sendall(message)
                    sock.recv_into(buffer)

                if rate is None:
                    cpu = time.process_time()
                    for i in range(calls):
                        trip(i)
                    client = (time.process_time() - cpu) / calls
                else:
                    client = paced(calls // 5, rate, trip)
                sock.close()
                served = results.get(timeout=60)
                how = "back to back" if rate is None else "at 1,000/s  "
                print(f"[{round_}] raw socket floor, {how}: client {client * 1e6:5.1f} us, server "
                      f"{served * 1e6:5.1f} us CPU per round trip", flush=True)
    finally:
        process.kill()
        process.join()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.queryable_state_cpu",
                                     description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--src", help="the src directory of another revision to measure")
    parser.add_argument("--calls", type=int, default=20_000, help="lookups per measurement (default 20,000)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (default 3)")
    parser.add_argument("--floor-only", action="store_true", help="measure only the raw socket floor")
    parser.add_argument("--busy", action="store_true", help="measure only the query path in a busy loop (--busy)")
    parser.add_argument("--pace", type=float, default=0.0,
                        help="with --busy: the client's lookups a second (default 0: back to back)")
    args = parser.parse_args(argv)
    if args.floor_only:
        floor_rounds(args.calls, args.rounds)
        return 0
    if args.src:
        sys.path.insert(0, args.src)
    import epochal

    if args.busy:
        busy_rounds(args.rounds, args.pace)
        return 0
    print(f"queryable state CPU ({os.path.dirname(epochal.__file__)}); load {os.getloadavg()[0]:.1f}", flush=True)
    context = multiprocessing.get_context("spawn")
    ports = context.Queue()
    process = context.Process(target=server, args=(args.src, ports), daemon=True)
    process.start()
    try:
        port, local = ports.get(timeout=60)
        for transport in ("tcp", "auto") if local else ("tcp",):
            client_rounds(port, local, transport, args.calls, args.rounds)
    finally:
        process.kill()
        process.join()
    poll_rounds(args.calls, args.rounds)
    floor_rounds(args.calls, args.rounds)
    print(f"load {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
