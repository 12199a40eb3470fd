"""``acp-proxy serve`` relaying a WebSocket frame for frame (no fault rules): what a client on a
plain socket receives through serve is byte for byte what it receives from the upstream itself,
fragments and control frames included; every message is recorded whole; close codes, a peer
that hangs up and a peer's protocol error end the connection the way they did when serve
relayed message by message, and are recorded."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import wait_for_output, watchdog
from tests.relay.remote.conftest import TIMEOUT, frames, start_serve

pytest.importorskip("hypercorn", reason="serve needs the remote extra (hypercorn)")
pytest.importorskip("trio_websocket", reason="serve needs the remote extra (trio-websocket)")
wsproto = pytest.importorskip("wsproto", reason="serve needs the remote extra (wsproto)")
from wsproto.events import AcceptConnection, Request  # noqa: E402
from wsproto.frame_protocol import FrameProtocol, Opcode  # noqa: E402

from tests.relay.remote.test_wsframes import encode  # noqa: E402

pytestmark = pytest.mark.spawns

HERE = Path(__file__).parent
TEXT, BINARY, PING = 0x1, 0x2, 0x9


def start_echo() -> tuple[subprocess.Popen[bytes], str]:
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "echo_ws_server.py")], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    line = wait_for_output(proc.stdout, b"\n", TIMEOUT)
    return proc, f"http://127.0.0.1:{int(line.split()[1])}/acp"


@pytest.fixture
def echo() -> Iterator[str]:
    proc, url = start_echo()
    timer = watchdog(proc, 300)
    try:
        yield url
    finally:
        timer.cancel()
        proc.kill()
        proc.wait(timeout=TIMEOUT)


class RawClient:
    """A WebSocket client on a plain socket: its handshake by wsproto, then frames by hand, and
    every byte that comes after the server's 101 kept."""

    def __init__(self, url: str) -> None:
        host, port = url.removeprefix("http://").split("/")[0].rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=TIMEOUT)
        ws = wsproto.WSConnection(wsproto.ConnectionType.CLIENT)
        self.sock.sendall(ws.send(Request(host=f"{host}:{port}", target="/acp")))
        head = b""
        while b"\r\n\r\n" not in head:
            data = self.sock.recv(65536)
            assert data, "no handshake answer"
            head += data
        ws.receive_data(head)
        assert any(isinstance(e, AcceptConnection) for e in ws.events())
        self.received = head.partition(b"\r\n\r\n")[2]

    def send(self, *frames: bytes) -> None:
        self.sock.sendall(b"".join(frames))

    def read_until_closed(self) -> bytes:
        """Every byte until the server ends the connection."""
        while data := self.sock.recv(65536):
            self.received += data
        self.sock.close()
        return self.received

    def read(self, size: int) -> bytes:
        while len(self.received) < size:
            data = self.sock.recv(65536)
            assert data, f"the connection ended after {len(self.received)} of {size} bytes"
            self.received += data
        return self.received


def close_of(received: bytes) -> tuple[int, str]:
    """The code and reason of the close frame among a server's frames, read by wsproto."""
    protocol = FrameProtocol(client=True, extensions=[])
    protocol.receive_bytes(received)
    closes = [frame.payload for frame in protocol.received_frames() if frame.opcode == Opcode.CLOSE]
    assert closes, "no close frame"
    code, reason = closes[0]
    return int(code), reason


def conversation(client: RawClient) -> bytes:
    """A text message in three fragments with a ping among them, a binary message, a close."""
    text = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "x", "params": {"t": "é" * 100}}).encode()
    client.send(
        encode(TEXT, text[:7], fin=False, masked=True),
        encode(PING, b"are you there", masked=True),
        encode(0, text[7:100], fin=False, masked=True),
        encode(0, text[100:], masked=True),
        encode(BINARY, bytes(range(256)) * 300, masked=True),
    )
    # The pong, then each message echoed in one frame (the upstream closes at once on a close).
    client.read(2 + 13 + 4 + len(text) + 10 + 256 * 300)
    client.send(encode(0x8, (1000).to_bytes(2, "big") + b"done", masked=True))
    return client.read_until_closed()


def test_what_the_client_receives_through_serve_is_byte_for_byte_what_the_upstream_sent(
    echo: str, db_path: Path
) -> None:
    direct = conversation(RawClient(echo))
    server = start_serve("--upstream", echo, "--db", str(db_path))
    try:
        through = conversation(RawClient(server.url))
    finally:
        said = server.stop()
    assert "Traceback" not in said
    assert through == direct
    assert close_of(through) == (1000, "done")
    text = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "x", "params": {"t": "é" * 100}})
    rows = [(r["dir"], r["raw"], r["note"]) for r in frames(db_path)]
    binary = [(d, note) for d, raw, note in rows if note]
    assert [(d, raw) for d, raw, note in rows if not note] == [("c2a", text), ("a2c", text)]
    assert binary == [("c2a", "binary WebSocket message"), ("a2c", "binary WebSocket message")]


def test_the_agent_s_close_code_reaches_the_client_and_is_recorded(echo: str, db_path: Path) -> None:
    server = start_serve("--upstream", echo, "--db", str(db_path))
    try:
        client = RawClient(server.url)
        order = json.dumps({"method": "close", "code": 4001, "reason": "bye"}).encode()
        client.send(encode(TEXT, order, masked=True))
        closed = close_of(client.read(4))
        client.send(encode(0x8, (4001).to_bytes(2, "big"), masked=True))  # the client's echo
        client.read_until_closed()
    finally:
        said = server.stop()
    assert "Traceback" not in said
    assert closed == (4001, "bye")
    events = [r["raw"] for r in frames(db_path) if r["dir"] == "stderr"]
    assert events == ["acp-proxy: the agent closed the WebSocket: code 4001 (bye)"]


def test_a_client_s_close_code_is_recorded_and_the_upstream_answers_it(echo: str, db_path: Path) -> None:
    server = start_serve("--upstream", echo, "--db", str(db_path))
    try:
        client = RawClient(server.url)
        client.send(encode(0x8, (4002).to_bytes(2, "big") + b"leaving", masked=True))
        answer = close_of(client.read_until_closed())
    finally:
        said = server.stop()
    assert "Traceback" not in said
    assert answer[0] == 4002  # the upstream's echo, passed through
    events = [r["raw"] for r in frames(db_path) if r["dir"] == "stderr"]
    assert events == ["acp-proxy: the client closed the WebSocket: code 4002"]


def test_an_upstream_that_dies_gives_the_client_1011_and_is_recorded_as_1006(db_path: Path) -> None:
    proc, url = start_echo()
    timer = watchdog(proc, 300)
    try:
        server = start_serve("--upstream", url, "--db", str(db_path))
        try:
            client = RawClient(server.url)
            client.send(encode(TEXT, b'{"jsonrpc":"2.0","id":1,"method":"a"}', masked=True))
            client.send(encode(TEXT, b'{"method":"die"}', masked=True))
            closed = close_of(client.read_until_closed())
        finally:
            said = server.stop()
    finally:
        timer.cancel()
        proc.kill()
        proc.wait(timeout=TIMEOUT)
    assert "Traceback" not in said
    assert closed[0] == 1011
    rows = [(r["dir"], r["raw"]) for r in frames(db_path)]
    assert rows == [
        ("c2a", '{"jsonrpc":"2.0","id":1,"method":"a"}'),
        ("a2c", '{"jsonrpc":"2.0","id":1,"method":"a"}'),
        ("c2a", '{"method":"die"}'),
        ("stderr", "acp-proxy: the agent closed the WebSocket: code 1006"),
    ]


def test_a_message_over_the_limit_closes_both_sides_with_1009(echo: str, db_path: Path) -> None:
    # The limit is 256 MiB; a frame header that announces more is refused before its payload.
    server = start_serve("--upstream", echo, "--db", str(db_path))
    try:
        client = RawClient(server.url)
        client.send(bytes((0x82, 0x80 | 127)) + (300 << 20).to_bytes(8, "big") + os.urandom(4) + b"x" * 1000)
        closed = close_of(client.read_until_closed())
    finally:
        said = server.stop()
    assert "Traceback" not in said
    assert closed[0] == 1009
    events = [r["raw"] for r in frames(db_path) if r["dir"] == "stderr"]
    assert events == ["acp-proxy: the client closed the WebSocket: code 1009"]
