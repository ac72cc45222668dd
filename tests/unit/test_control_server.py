"""The JobMaster's control server on localhost (no Spark): the token check before anything is
unpickled, connection ids, inbox events for frames and for a connection's end, sends and closes."""

from __future__ import annotations

import pickle
import queue
import socket

import pytest

from epochal.control.inbox import Disconnected, Received
from epochal.control.server import ControlServer
from epochal.messages import Heartbeat, Ready, Start
from epochal.runtime.host import frames as protocol

TOKEN = b"t" * protocol.TOKEN_BYTES


class _Bomb:
    """Unpickling it would be the breach: it records that it happened."""

    unpickled = False

    def __reduce__(self):
        return (_Bomb._explode, ())

    @staticmethod
    def _explode():
        _Bomb.unpickled = True
        return "boom"


@pytest.fixture
def server():
    events: queue.SimpleQueue = queue.SimpleQueue()
    control = ControlServer("127.0.0.1", TOKEN, events.put)
    control.start()
    yield control, events
    control.close_all()


def _connect(control: ControlServer, token: bytes = TOKEN, index: int = 3) -> socket.socket:
    sock = socket.create_connection(control.address, timeout=5)
    protocol.send_frame(sock, protocol.HELLO, 0, protocol.hello_payload(token, index))
    return sock


def _frames(sock: socket.socket):
    return sock.makefile("rb")


def test_frames_become_inbox_events_with_a_connection_id_and_replies_arrive(server):
    control, events = server
    sock = _connect(control)
    try:
        protocol.send_frame(sock, protocol.CONTROL, 0, protocol.dumps(Ready(3)))
        event = events.get(timeout=5)
        assert isinstance(event, Received) and event.worker == 3 and event.message == Ready(3)
        assert isinstance(event.connection, int)
        control.send(event.connection, Start())
        frame = protocol.read_frame(_frames(sock))
        assert frame is not None and frame[0] == protocol.CONTROL and protocol.loads(frame[2]) == Start()
        other = _connect(control, index=4)
        protocol.send_frame(other, protocol.CONTROL, 0, protocol.dumps(Heartbeat({})))
        second = events.get(timeout=5)
        assert second.worker == 4 and second.connection != event.connection
        other.close()
        assert events.get(timeout=5) == Disconnected(4, second.connection)
    finally:
        sock.close()


def test_a_wrong_token_is_hung_up_on_before_anything_is_unpickled(server):
    control, events = server
    hello = protocol.hello_payload(b"x" * protocol.TOKEN_BYTES, 3)
    bomb = pickle.dumps(_Bomb())
    sock = socket.create_connection(control.address, timeout=5)
    try:  # the HELLO with a wrong token and a pickle behind it, in one go
        sock.sendall(protocol.HEADER.pack(protocol.HELLO, 0, len(hello)) + hello
                     + protocol.HEADER.pack(protocol.CONTROL, 0, len(bomb)) + bomb)
        try:
            assert sock.recv(1) == b""  # the JobMaster hung up
        except ConnectionResetError:
            pass  # hung up with the pickle unread
        with pytest.raises(queue.Empty):
            events.get(timeout=0.2)  # and told nobody
        assert not _Bomb.unpickled
    finally:
        sock.close()


def test_a_frame_that_is_not_control_ends_the_connection(server):
    control, events = server
    sock = _connect(control)
    try:
        protocol.send_frame(sock, protocol.DATA, 0, b"junk")
        event = events.get(timeout=5)
        assert isinstance(event, Disconnected) and event.worker == 3
    finally:
        sock.close()


def test_a_closed_connection_is_forgotten_and_sends_to_it_are_ignored(server):
    control, events = server
    sock = _connect(control)
    try:
        protocol.send_frame(sock, protocol.CONTROL, 0, protocol.dumps(Ready(3)))
        connection = events.get(timeout=5).connection
        control.close([connection])
        control.send(connection, Start())  # closed: nothing, no error
        control.send(12345, Start())  # unknown: nothing, no error
        control.close([connection, 12345])  # twice, or unknown: nothing
    finally:
        sock.close()
