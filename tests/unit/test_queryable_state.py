"""Queryable state without Spark: the worker's pure QueryMachine (token before unpickling, unknown
states, unhashable keys, keys of other workers, read_committed from the committed views, pages),
the committed views' rules (promoted on completion only, never backwards, never a savepoint), the
client's routing, the wire format, the declaration by descriptor and by as_queryable_state, and
a QueryServer answering a real client over TCP."""

from __future__ import annotations

import pickle
import socket
import threading
import time

import pytest

import epochal
from epochal.dataflow.checkpointing.messages import CheckpointAbort, CheckpointComplete
from epochal.dataflow.queries.committed import CommittedViews
from epochal.dataflow.queries.machine import (
    CloseConnection,
    FrameArrived,
    QueryMachine,
    ReadLive,
    Reply,
    Restored,
    ScanLive,
    Served,
    Serving,
    SnapshotTaken,
    StatesDeclared,
    page,
)
from epochal.dataflow.queries.server import KeyedSource, QueryServer
from epochal.dataflow.queries.shown import views_of
from epochal.errors import PlanError, QueryKeyTypeError, StateUnavailableError, UnknownQueryableStateError
from epochal.plan.keygroups import key_group_of, key_group_range
from epochal.rest.state_routes import Routes
from epochal.runtime.host.frames import split_frames
from epochal.runtime.host.mailbox import Mailbox
from epochal.runtime.queries import local as local_sockets
from epochal.runtime.queries.wire import (
    BAD_KEY,
    BAD_REQUEST,
    NOT_OWNER,
    NOT_READY,
    READ_COMMITTED,
    UNAUTHORIZED,
    UNKNOWN_STATE,
    Lookup,
    Page,
    QueryFailed,
    Scan,
    Values,
    decode,
    encode,
    query_token,
    request_frame,
)
from epochal.state.descriptors import ListStateDescriptor, ValueStateDescriptor
from epochal.state.heap.backend import HeapKeyedStateBackend
from tests.unit.queryable_servers import polled_heap_server

TOKEN = query_token(b"j" * 32)
MAXP = 128
GROUPS = key_group_range(0, 2, MAXP)  # worker 0 of 2: groups 0..63


def mine(count: int, owned: range = GROUPS) -> list[str]:
    """``count`` keys whose key groups ``owned`` holds."""
    keys, i = [], 0
    while len(keys) < count:
        key = f"k{i}"
        if key_group_of(key, MAXP) in owned:
            keys.append(key)
        i += 1
    return keys


def machine(serving: bool = True) -> QueryMachine:
    m = QueryMachine(TOKEN, 0)
    m.handle(StatesDeclared({"counts": Served("sum", "aggregate", 0, 2, GROUPS, MAXP)}))
    if serving:
        m.handle(Serving())
    return m


def frame(request, token: bytes = TOKEN) -> FrameArrived:
    return FrameArrived(7, token + encode(request))


def test_a_request_without_the_token_is_refused_before_it_is_unpickled():
    class Boom:
        def __reduce__(self):
            return (pytest.fail, ("unpickled a request with a wrong token",))

    out = machine().handle(FrameArrived(7, b"x" * 32 + pickle.dumps(Boom())))
    assert isinstance(out[0], Reply) and out[0].answer.code == UNAUTHORIZED
    assert out[1] == CloseConnection(7)
    assert machine().handle(FrameArrived(7, b"short"))[0].answer.code == UNAUTHORIZED


def test_unknown_state_unhashable_key_bad_level_and_not_ready_are_refused_clearly():
    m = machine()
    (reply,) = m.handle(frame(Lookup(1, "nope", ("a",))))
    assert reply.answer.code == UNKNOWN_STATE and "counts" in reply.answer.detail
    (reply,) = m.handle(frame(Lookup(2, "counts", (["a"],))))
    assert reply.answer.code == BAD_KEY and "unhashable" in reply.answer.detail
    (reply,) = m.handle(frame(Lookup(3, "counts", ("a",), "dirty")))
    assert reply.answer.code == BAD_REQUEST
    (reply,) = machine(serving=False).handle(frame(Lookup(4, "counts", ("a",))))
    assert reply.answer.code == NOT_READY and reply.answer.retriable
    (reply,) = m.handle(FrameArrived(7, TOKEN + b"not a pickle"))
    assert reply.answer.code == BAD_REQUEST


def test_messages_travel_as_tuples_of_their_fields_and_anything_else_is_refused():
    """A payload is the pickle of (kind, *fields), not of the dataclass (pickling the class by name
    cost 4-5 µs a message on each side); decoding gives the same message back, of its class."""
    messages = [Lookup(1, "counts", ("a", (1, 2.5)), READ_COMMITTED), Scan(2, "counts", cursor=(3, 4), limit=7),
                Values(3, (True, False), ({"x": [1]}, None), 9), Page(4, [("a", 1)], None),
                QueryFailed(5, BAD_KEY, "no")]
    for message in messages:
        payload = encode(message)
        assert pickle.loads(payload)[1:] == tuple(getattr(message, f) for f in type(message).__dataclass_fields__)
        assert type(decode(payload)) is type(message) and decode(payload) == message
    assert b"Lookup" not in encode(messages[0])  # no class name on the wire
    m = machine()
    for payload in (pickle.dumps(messages[0]), pickle.dumps((99, "x")), pickle.dumps((0, 1)), pickle.dumps("a"),
                    encode(messages[2])):  # a pickled dataclass, an unknown kind, too few fields, no tuple, an answer
        (reply,) = m.handle(FrameArrived(7, TOKEN + payload))
        assert reply.answer.code == BAD_REQUEST and reply.answer.request_id == 0


def test_a_key_of_another_worker_is_answered_not_owner_which_is_retriable():
    other = mine(1, key_group_range(1, 2, MAXP))[0]
    (reply,) = machine().handle(frame(Lookup(1, "counts", (other,))))
    assert reply.answer.code == NOT_OWNER and reply.answer.retriable


def test_read_uncommitted_asks_the_driver_to_read_the_live_state():
    keys = mine(2)
    (read,) = machine().handle(frame(Lookup(5, "counts", tuple(keys))))
    assert isinstance(read, ReadLive) and read.conn == 7 and read.request.keys == tuple(keys)
    assert read.groups == tuple(key_group_of(k, MAXP) for k in keys)
    (scan,) = machine().handle(frame(Scan(6, "counts", limit=10)))
    assert isinstance(scan, ScanLive)


def test_read_committed_answers_from_the_last_completed_checkpoint_only():
    m = machine()
    a, b = mine(2)
    ga, gb = key_group_of(a, MAXP), key_group_of(b, MAXP)

    def committed(key):
        (reply,) = m.handle(frame(Lookup(9, "counts", (key,), READ_COMMITTED)))
        assert isinstance(reply.answer, Values)
        return reply.answer.checkpoint_id, reply.answer.found[0], reply.answer.values[0]

    assert committed(a) == (None, False, None)  # nothing completed yet
    m.handle(SnapshotTaken(1, {"counts": {ga: {a: 1}}}))
    assert committed(a) == (None, False, None)  # taken, not completed
    m.handle(CheckpointComplete(1))
    assert committed(a) == (1, True, 1)
    m.handle(SnapshotTaken(2, {"counts": {ga: {a: 2}, gb: {b: 5}}}))
    m.handle(CheckpointAbort(2))
    m.handle(CheckpointComplete(2))  # (an aborted checkpoint never completes; nothing to promote)
    assert committed(a) == (1, True, 1)
    m.handle(SnapshotTaken(3, {"counts": {ga: {a: 3}}}))
    m.handle(SnapshotTaken(4, {"counts": {ga: {a: 4}}}))
    m.handle(CheckpointComplete(4, savepoint=True))  # a savepoint is never the committed view
    assert committed(a) == (1, True, 1)
    m.handle(CheckpointComplete(3))
    assert committed(a) == (3, True, 3)
    m.handle(CheckpointComplete(1))  # late and older: never backwards
    assert committed(a) == (3, True, 3)
    m.handle(Restored(3, {"counts": {ga: {a: 3}}}))
    assert committed(a) == (3, True, 3) and committed(b) == (3, False, None)


def test_committed_views_merge_the_subtasks_of_a_worker_and_restores_replace_them():
    views = CommittedViews()
    views.taken(5, {"s": {1: {"x": 1}}})
    views.taken(5, {"s": {2: {"y": 2}}, "t": {1: {"z": 3}}})
    views.completed(5)
    assert views.checkpoint_id == 5 and views.groups("s") == {1: {"x": 1}, 2: {"y": 2}}
    views.taken(4, {"s": {1: {"x": 0}}})  # older than the committed one: ignored
    assert 4 not in views.pending
    views.restored(7, {"s": {1: {"x": 9}}})
    views.restored(7, {"s": {3: {"w": 1}}})
    assert views.checkpoint_id == 7 and views.groups("s") == {1: {"x": 9}, 3: {"w": 1}}


def test_pages_cover_every_entry_once_in_key_group_order():
    groups = {g: {f"{g}-{i}": i for i in range(g % 4)} for g in GROUPS}
    everything = [(k, v) for g in GROUPS for k, v in groups[g].items()]
    for limit in (1, 2, 3, 7, 1000):
        seen, cursor = [], None
        while True:
            items, cursor = page(groups, GROUPS, cursor, limit)
            assert len(items) <= limit
            seen.extend(items)
            if cursor is None:
                break
        assert seen == everything
    m = machine()
    m.handle(Restored(1, {"counts": groups}))
    (reply,) = m.handle(frame(Scan(3, "counts", READ_COMMITTED, None, 5)))
    assert isinstance(reply.answer, Page) and reply.answer.items == everything[:5]
    assert machine().handle(frame(Scan(3, "counts", limit=0)))[0].answer.code == BAD_REQUEST


def test_frames_are_split_as_they_arrive():
    body = b"abc"
    data = bytearray(request_frame(TOKEN, body) * 2)
    partial = bytearray(data[:10])
    assert split_frames(partial) == [] and len(partial) == 10
    assert split_frames(data) == [TOKEN + body, TOKEN + body] and data == bytearray()
    with pytest.raises(ValueError):
        split_frames(bytearray(b"\xff\xff\xff\xff"))


def routes(**overrides) -> Routes:
    document = {"job_id": "j", "status": "RUNNING", "attempt": 0, "serving": True, "max_parallelism": MAXP,
                "token": TOKEN.hex(), "states": {"counts": {"parallelism": 2,
                                                            "workers": {"0": "10.0.0.1:5000", "1": "10.0.0.2:6000"}}}}
    return Routes.from_document({**document, **overrides})


def test_routing_sends_a_key_to_the_worker_owning_its_key_group():
    r = routes()
    for key in mine(5):
        assert r.owner("counts", key) == ("10.0.0.1", 5000)
    for key in mine(5, key_group_range(1, 2, MAXP)):
        assert r.owner("counts", key) == ("10.0.0.2", 6000)
    rescaled = routes(states={"counts": {"parallelism": 3, "workers": {"0": "h:1", "1": "h:2", "2": "h:3"}}})
    for key in mine(20, range(MAXP)):
        subtask = key_group_of(key, MAXP) * 3 // MAXP
        assert rescaled.owner("counts", key) == ("h", subtask + 1)
        assert key_group_of(key, MAXP) in key_group_range(subtask, 3, MAXP)


def test_routing_errors_unknown_state_unhashable_key_and_not_serving():
    with pytest.raises(UnknownQueryableStateError, match="its queryable states: counts"):
        routes().owner("nope", "a")
    with pytest.raises(QueryKeyTypeError, match="unhashable"):
        routes().owner("counts", {"a": 1})
    with pytest.raises(StateUnavailableError, match="not serving"):
        routes(serving=False, status="RESTARTING").owner("counts", "a")


def test_descriptors_and_as_queryable_state_declare_query_names():
    backend = HeapKeyedStateBackend(MAXP, GROUPS)
    backend.get_state(ValueStateDescriptor("total", queryable="totals"))
    backend.get_state(ListStateDescriptor("seen"))
    assert backend.queryable == {"totals": "total"}
    with pytest.raises(PlanError, match="names one state"):
        backend.get_state(ValueStateDescriptor("other", queryable="totals"))
    with pytest.raises(PlanError, match="non-empty"):
        backend.make_queryable("", "total")
    env = epochal.Environment(1)
    keyed = env.from_collection([("a", 1)]).key_by(lambda kv: kv[0])
    stream = keyed.as_queryable_state("sums").sum(lambda kv: kv[1])
    assert stream.node.operator.queryable_name == "sums"
    assert keyed.count().node.operator.queryable_name is None  # the original stream is unchanged
    with pytest.raises(PlanError):
        keyed.as_queryable_state("")


def test_views_share_a_full_snapshot_and_copy_lists_deeper():
    backend = HeapKeyedStateBackend(MAXP, GROUPS)
    backend.get_state(ListStateDescriptor("seen", queryable="seen"))
    key = mine(1)[0]
    group = key_group_of(key, MAXP)
    backend.owned_table("seen")[group][key] = [1]
    copied = views_of(backend)
    backend.owned_table("seen")[group][key].append(2)  # changed in place after the barrier
    assert copied == {"seen": {group: {key: [1]}}}
    captured = backend.capture()
    assert views_of(backend, captured)["seen"][group] is captured[group]["seen"]


def answer(sock: socket.socket, request) -> object:
    sock.sendall(request_frame(TOKEN, encode(request)))
    buffer = bytearray()
    while True:
        data = sock.recv(65536)
        assert data, "the server closed the connection"
        buffer += data
        frames = split_frames(buffer)
        if frames:
            return decode(frames[0])


def test_a_query_server_answers_a_client_over_tcp_between_polls():
    backend = HeapKeyedStateBackend(MAXP, GROUPS)
    backend.get_state(ValueStateDescriptor("v", queryable="values"))
    keys = mine(3)
    for i, key in enumerate(keys):
        backend.owned_table("v")[key_group_of(key, MAXP)][key] = i
    server = QueryServer(b"j" * 32, 0, "127.0.0.1", MAXP, Mailbox())
    server.attach([KeyedSource("u", 0, 2, backend)], restored=4)
    server.serving()
    stop = threading.Event()

    def processing_thread():
        while not stop.is_set():
            server.poll()
            time.sleep(0.001)

    thread = threading.Thread(target=processing_thread, daemon=True)
    thread.start()
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
            got = answer(sock, Lookup(1, "values", (*keys, "absent")))
            assert isinstance(got, Values) and got.found == (True, True, True, False) and got.values[:3] == (0, 1, 2)
            committed = answer(sock, Lookup(2, "values", (keys[1],), READ_COMMITTED))
            assert committed.checkpoint_id == 4 and committed.values == (1,)  # the restored state
            in_group_order = sorted(((k, i) for i, k in enumerate(keys)), key=lambda kv: key_group_of(kv[0], MAXP))
            assert answer(sock, Scan(3, "values", limit=2)).items == in_group_order[:2]
            assert isinstance(answer(sock, Lookup(4, "nope", ("a",))), QueryFailed)
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
            sock.sendall(request_frame(b"w" * 32, encode(Lookup(1, "values", (keys[0],)))))
            data = sock.recv(65536)
            assert decode(split_frames(bytearray(data))[0]).code == UNAUTHORIZED
            assert sock.recv(65536) == b""  # and closed
    finally:
        stop.set()
        thread.join()
        server.close()


def test_a_sleeping_processing_thread_wakes_for_a_query_and_for_a_mailbox_event_and_nothing_else():
    """:meth:`QueryServer.wait` sleeps in one epoll over the query sockets and the mailbox's
    eventfd: a client's request or an event put by another thread ends it at once, a timeout
    otherwise; a put while nobody sleeps writes no eventfd (the next sleep is not cut short)."""
    backend = HeapKeyedStateBackend(MAXP, GROUPS)
    backend.get_state(ValueStateDescriptor("v", queryable="values"))
    mailbox = Mailbox()
    server = QueryServer(b"j" * 32, 0, "127.0.0.1", MAXP, mailbox)
    server.attach([KeyedSource("u", 0, 2, backend)], restored=None)
    server.serving()
    try:
        started = time.monotonic()
        server.wait(0.05)
        assert 0.04 <= time.monotonic() - started < 1.0  # nothing came: the timeout
        mailbox.put("early")  # queued while nobody sleeps: the next sleep returns at once, no eventfd
        started = time.monotonic()
        server.wait(5.0)
        assert time.monotonic() - started < 0.5 and mailbox.get_nowait() == "early"
        server.wait(0.01)  # (and nothing is left to cut the next one short)
        threading.Timer(0.1, mailbox.put, ("late",)).start()
        started = time.monotonic()
        server.wait(5.0)
        assert 0.05 < time.monotonic() - started < 2.0 and mailbox.get_nowait() == "late"
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
            for _ in range(2):  # the connection, then its request
                started = time.monotonic()
                if _ == 1:
                    threading.Timer(0.1, sock.sendall, (request_frame(TOKEN, encode(
                        Lookup(1, "values", ("k0",)))),)).start()
                server.wait(5.0)
                assert time.monotonic() - started < 2.0
                server.poll()
            assert server.answered == 1
    finally:
        server.close()
        mailbox.close()


def test_a_client_that_stops_reading_is_dropped_within_the_send_timeout_and_others_are_served(monkeypatch):
    """Answers are sent on non-blocking sockets: one ``send`` when the client's buffer takes it;
    a client that asks for more than it reads holds the processing thread at most
    SEND_TIMEOUT_S, then loses its connection, and other clients are answered as before."""
    from epochal.dataflow.queries import server as server_module

    monkeypatch.setattr(server_module, "SEND_TIMEOUT_S", 0.2)
    backend = HeapKeyedStateBackend(MAXP, GROUPS)
    backend.get_state(ValueStateDescriptor("v", queryable="values"))
    keys = mine(50)
    for key in keys:
        backend.owned_table("v")[key_group_of(key, MAXP)][key] = "x" * 20_000
    server = QueryServer(b"j" * 32, 0, "127.0.0.1", MAXP)
    server.attach([KeyedSource("u", 0, 2, backend)], restored=None)
    server.serving()
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as greedy, \
                socket.create_connection(("127.0.0.1", server.port), timeout=5) as polite:
            greedy.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            frame_ = request_frame(TOKEN, encode(Lookup(1, "values", tuple(keys))))
            greedy.sendall(frame_ * 40)  # ~40 MB of answers asked, none read
            started = time.monotonic()
            while time.monotonic() - started < 5 and len(server.connections) < 2:
                server.poll()
            taken = 0.0
            while time.monotonic() - started < 5 and len(server.connections) == 2:
                before = time.monotonic()
                server.poll()
                taken = max(taken, time.monotonic() - before)
            assert len(server.connections) == 1, "the client that does not read was not dropped"
            assert taken < 0.2 + 2.0  # the timeout, and a loaded machine's scheduling
            polite.sendall(request_frame(TOKEN, encode(Lookup(2, "values", (keys[0],)))))
            deadline = time.monotonic() + 5
            buffer = bytearray()
            polite.setblocking(False)
            while not (frames := split_frames(buffer)) and time.monotonic() < deadline:
                server.poll()
                try:
                    buffer += polite.recv(65536)
                except BlockingIOError:
                    time.sleep(0.001)
            assert frames and decode(frames[0]).found == (True,)
    finally:
        server.close()


def test_states_with_ttl_are_shown_without_timestamps_and_expired_values():
    from epochal.dataflow.queries.machine import ReadLive as Read
    from epochal.state.ttl import StateTtlConfig, set_clock

    now = [1000.0]
    previous = set_clock(lambda: now[0])
    try:
        backend = HeapKeyedStateBackend(MAXP, GROUPS)
        fresh, stale = mine(2)
        for key, at in ((fresh, 1000.0), (stale, 900.0)):
            now[0] = at
            backend.set_current_key(key)
            backend.get_state(ValueStateDescriptor("v", ttl=StateTtlConfig(ttl=50.0), queryable="ttl")).update(key)
        now[0] = 1010.0
        assert views_of(backend) == {"ttl": {key_group_of(fresh, MAXP): {fresh: fresh}}}
        server = QueryServer(b"j" * 32, 0, "127.0.0.1", MAXP)
        server.attach([KeyedSource("u", 0, 2, backend)], restored=None)
        server.serving()
        (read,) = server.machine.handle(frame(Lookup(1, "ttl", (fresh, stale))))
        assert isinstance(read, Read)
        server.connections[7] = None  # type: ignore[assignment]  (only the answer is looked at)
        server._read_live(read)
        answer = decode(server.outgoing[7][0][4:])
        assert answer.found == (True, False) and answer.values == (fresh, None)
        server.connections.clear()
        server.close()
    finally:
        set_clock(previous)


@pytest.fixture
def served_heap():
    """:func:`polled_heap_server` restored from checkpoint 3; yields (backend, client), the client
    a real QueryableStateClient routed to it."""
    from epochal.rest.state_client import QueryableStateClient

    with polled_heap_server(3) as (backend, server):
        document = {"job_id": "j", "status": "RUNNING", "attempt": 0, "serving": True, "max_parallelism": MAXP,
                    "token": TOKEN.hex(),
                    "states": {name: {"parallelism": 1, "workers": {"0": f"127.0.0.1:{server.port}"}}
                               for name in ("values", "elsewhere")}}
        client = QueryableStateClient.__new__(QueryableStateClient)
        client._setup(lambda: document, "read_uncommitted", 5.0)
        try:
            yield backend, client
        finally:
            client.close()


def test_requests_and_answers_larger_than_one_read_arrive_whole(served_heap):
    """Both sides read into one reused buffer of RECV_BYTES (no fresh 1 MiB object per read): a
    request and an answer of many reads' length are put together again, and small ones after
    them on the same connection still are."""
    from epochal.runtime.queries.wire import RECV_BYTES

    backend, client = served_heap
    keys = [f"key-{i:06d}-" + "k" * 40 for i in range(4000)]  # a request of ~4 reads
    for i, key in enumerate(keys):
        backend.owned_table("v")[key_group_of(key, MAXP)][key] = ("v" * 100, i)  # an answer of ~8 reads
    assert len(pickle.dumps(tuple(keys))) > 3 * RECV_BYTES
    got = client.get_many("values", [*keys, "absent"])
    assert got == {key: ("v" * 100, i) for i, key in enumerate(keys)}
    assert client.get("values", keys[7]) == ("v" * 100, 7)
    assert client.get("values", "absent", default="none") == "none"


def test_a_blocking_get_keeps_the_levels_defaults_and_errors_of_get_many(served_heap):
    """get() asks its one worker without get_many's dictionaries; what it answers and raises is
    get_many's: the value or the default, read_committed from the committed view with its
    checkpoint id, the errors of the worker and of the client, and retries until the timeout."""
    backend, client = served_heap
    key, absent = mine(2, range(MAXP))
    backend.owned_table("v")[key_group_of(key, MAXP)][key] = 41
    assert client.get("values", key) == 41 == client.get_many("values", [key, absent])[key]
    assert client.get("values", absent) is None and client.get("values", absent, "none") == "none"
    assert client.get("values", key, level=READ_COMMITTED, default="not yet") == "not yet"  # restored empty
    assert client.checkpoint_id == 3
    with pytest.raises(UnknownQueryableStateError, match="queryable here: values"):
        client.get("elsewhere", key)  # the routes say so, the worker does not
    with pytest.raises(QueryKeyTypeError, match="unhashable"):
        client.get("values", [key])
    with pytest.raises(ValueError, match="isolation level"):
        client.get("values", key, level="dirty")
    client.routes = None
    client._fetch = lambda: {"job_id": "j", "status": "RESTARTING", "attempt": 1, "serving": False,
                             "max_parallelism": MAXP, "token": TOKEN.hex(), "states": {}}
    started = time.monotonic()
    with pytest.raises(StateUnavailableError, match="not serving"):
        client.get("values", key, timeout=0.1)
    assert time.monotonic() - started < 3.0


@pytest.mark.skipif(local_sockets.host_identity() is None, reason="no abstract Unix sockets on this system")
def test_a_client_of_the_workers_host_uses_its_local_socket_and_tcp_otherwise():
    """A worker listens on a local Unix socket beside its TCP port and reports it with its host's
    identity. A client of the same identity talks over the local socket; with transport="tcp", or
    of another identity, or when the local socket cannot be reached, over TCP: the same answers."""
    from epochal.rest.state_client import QueryableStateClient

    with polled_heap_server(None) as (backend, server):
        backend.owned_table("v")[key_group_of("k", MAXP)]["k"] = 7
        assert server.routes["local"] == {"host": local_sockets.host_identity(), "socket": server.local_name}
        ask_over_each_transport(server)
    with pytest.raises(OSError):  # closed with the server: nothing left listening under its name
        local_sockets.connect(server.local_name, 1.0)
    with pytest.raises(ValueError, match="transport"):
        QueryableStateClient("j", address="127.0.0.1:1", token="t", transport="udp")


def ask_over_each_transport(server: QueryServer) -> None:
    """Ask ``server`` for key "k" (7) with clients of each transport and routes: the local socket
    where the host's identity is the client's, TCP otherwise or when it cannot be reached."""
    from epochal.rest.state_client import QueryableStateClient

    address = f"127.0.0.1:{server.port}"

    cases = [(server.routes["local"], "auto", "unix"),
             (server.routes["local"], "tcp", "tcp"),
             ({**server.routes["local"], "host": "another-host/1"}, "auto", "tcp"),
             ({**server.routes["local"], "socket": "epochal-query-gone"}, "auto", "tcp"),
             (None, "auto", "tcp")]
    for local, transport, expected in cases:
        document = {"job_id": "j", "status": "RUNNING", "attempt": 0, "serving": True, "max_parallelism": MAXP,
                    "token": TOKEN.hex(), "states": {"values": {"parallelism": 1, "workers": {"0": address}}},
                    **({"local_sockets": {address: local}} if local is not None else {})}
        assert Routes.from_document(document).local_sockets == (
            {("127.0.0.1", server.port): (local["host"], local["socket"])} if local else {})
        client = QueryableStateClient.__new__(QueryableStateClient)
        client._setup(lambda document=document: document, "read_uncommitted", 5.0, transport)
        try:
            assert client.get("values", "k") == 7
            assert client.get_many("values", ["k", "absent"]) == {"k": 7}
            (connection,) = client._connections.values()
            assert connection.transport == expected, (local, transport)
        finally:
            client.close()
