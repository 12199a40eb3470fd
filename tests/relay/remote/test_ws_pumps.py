"""``wspass.Passthrough``'s two ways of pumping, in one process on real loopback sockets: a
thread per direction on blocking sockets (plain TCP, up to ``MAX_THREADED`` connections) and
trio's loop (TLS, and any connection past that). Each scenario runs both ways and must end the
same: the same bytes at each peer, the same messages and events recorded."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Awaitable, Callable

import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("wsproto", reason="serve needs the remote extra (wsproto)")
from wsproto.frame_protocol import FrameProtocol, Opcode

from acp_proxy.relay.remote import wspass
from tests.relay.remote.test_wsframes import encode

TEXT, BINARY, CLOSE, PING = 0x1, 0x2, 0x8, 0x9
MODES = ("threads", "loop")


RECEIVED: dict[int, bytearray] = {}
"""What each peer has read so far, by its socket's descriptor (``read_exactly`` and
``read_until_closed`` add each chunk as it comes)."""


class RecordingRun:
    """What the relay journals: each message with its direction and note, and each event. With
    ``client`` (the client peer's descriptor) it also looks, as each agent message is journaled,
    whether the client already has it: in its socket's buffer or read (journaled before
    forwarded, DESIGN §2). Server frames are unmasked, so the message is there verbatim."""

    def __init__(self) -> None:
        self.journaled: list[tuple[str, bytes, str | None]] = []
        self.events: list[str] = []
        self.client: int | None = None
        self.early: list[bytes] = []  # agent messages the client had before they were journaled

    def messages(self, direction: str, batch: list[tuple[bytes, str | None]], *, stream: str) -> None:
        assert stream == "websocket"
        if direction == "a2c" and self.client is not None:
            with socket.socket(fileno=os.dup(self.client)) as peer:
                try:
                    waiting = peer.recv(1 << 20, socket.MSG_PEEK | socket.MSG_DONTWAIT)
                except BlockingIOError:
                    waiting = b""
            had = bytes(RECEIVED.get(self.client, b"")) + waiting
            self.early += [data for data, _ in batch if data in had]
        self.journaled.extend((direction, data, note) for data, note in batch)

    def event(self, text: str, *, stream: str) -> None:
        self.events.append(text)


Scenario = Callable[[trio.SocketStream, trio.SocketStream], Awaitable[None]]


async def relay(
    mode: str, scenario: Scenario, monkeypatch: pytest.MonkeyPatch, *, cancel: bool = False
) -> tuple[RecordingRun, list[str]]:
    """Serve's two ends (toward the client, toward the upstream) relayed by ``Passthrough``
    while ``scenario`` plays the client and the upstream; then the relay must end by itself
    (or, with ``cancel``, once cancelled, as when serve shuts down). The run, and the names
    of the threads alive while the relay ran."""
    monkeypatch.setattr(wspass, "MAX_THREADED", 32 if mode == "threads" else 0)
    listener = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
    port = listener.socket.getsockname()[1]
    client_peer = await trio.open_tcp_stream("127.0.0.1", port)
    serve_client = await listener.accept()
    serve_upstream = await trio.open_tcp_stream("127.0.0.1", port)
    upstream_peer = await listener.accept()
    run = RecordingRun()
    run.client = client_peer.socket.fileno()
    names: list[str] = []
    passthrough = wspass.Passthrough(serve_client, serve_upstream, run, 1 << 20)  # type: ignore[arg-type]
    ended = trio.Event()

    async def relaying() -> None:
        await passthrough.relay(b"", b"")
        ended.set()
        for end in (serve_client, serve_upstream):  # as serve (and hypercorn) then do
            await end.aclose()

    async def watch() -> None:
        await trio.testing.wait_all_tasks_blocked()
        for thread in threading.enumerate():
            names.append(thread.name)
            if thread.name.startswith("ws-") and thread.native_id is not None and hasattr(os, "SCHED_BATCH"):
                # Linux: the pumps' wake-ups must not preempt the peers (wspass._batch_class).
                names.append(f"{thread.name}:batch={os.sched_getscheduler(thread.native_id) == os.SCHED_BATCH}")

    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(relaying)
            nursery.start_soon(watch)
            await scenario(client_peer, upstream_peer)
            if cancel:
                nursery.cancel_scope.cancel()
            await ended.wait()
    for stream in (client_peer, upstream_peer):
        RECEIVED.pop(stream.socket.fileno(), None)  # the descriptor's number is reused after
        await stream.aclose()
    await listener.aclose()
    return run, names


async def read_until_closed(stream: trio.SocketStream) -> bytes:
    data = b""
    while chunk := await stream.receive_some(65536):
        RECEIVED.setdefault(stream.socket.fileno(), bytearray()).extend(chunk)
        data += chunk
    return data


async def read_exactly(stream: trio.SocketStream, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = await stream.receive_some(65536)
        assert chunk, f"the connection ended after {len(data)} of {size} bytes"
        RECEIVED.setdefault(stream.socket.fileno(), bytearray()).extend(chunk)
        data += chunk
    return data


@pytest.mark.parametrize("mode", MODES)
async def test_a_conversation_and_its_close_handshake_pass_byte_for_byte(
    mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from_client = [
        encode(TEXT, b'{"id":1}'[:3], fin=False, masked=True),
        encode(PING, b"hi", masked=True),
        encode(0, b'{"id":1}'[3:], masked=True),
        encode(BINARY, bytes(range(256)) * 10, masked=True),
    ]
    from_agent = [encode(TEXT, b'{"id":1,"result":{}}', masked=False) * 3]
    close = encode(CLOSE, (4000).to_bytes(2, "big") + b"bye", masked=True)
    echo = encode(CLOSE, (4000).to_bytes(2, "big"), masked=False)
    seen: dict[str, bytes] = {}

    async def scenario(client: trio.SocketStream, upstream: trio.SocketStream) -> None:
        await client.send_all(b"".join(from_client))
        seen["upstream"] = await read_exactly(upstream, len(b"".join(from_client)))
        await upstream.send_all(b"".join(from_agent))
        seen["client"] = await read_exactly(client, len(b"".join(from_agent)))
        await client.send_all(close)
        assert await read_exactly(upstream, len(close)) == close
        await upstream.send_all(echo)
        await upstream.aclose()  # the server ends the TCP connection after its close
        seen["client"] += await read_until_closed(client)

    run, names = await relay(mode, scenario, monkeypatch)
    assert ("ws-a2c" in names) == (mode == "threads")
    if mode == "threads" and hasattr(os, "SCHED_BATCH"):
        assert {"ws-a2c:batch=True", "ws-c2a:batch=True"} <= set(names)
    assert seen["upstream"] == b"".join(from_client)
    assert seen["client"] == b"".join(from_agent) + echo
    assert run.early == []  # every agent message journaled before the client had a byte of it
    assert run.journaled == [
        ("c2a", b'{"id":1}', None),
        ("c2a", bytes(range(256)) * 10, wspass.BINARY),
        *[("a2c", b'{"id":1,"result":{}}', None)] * 3,
    ]
    assert run.events == ["the client closed the WebSocket: code 4000"]


@pytest.mark.parametrize("mode", MODES)
async def test_an_upstream_that_hangs_up_gives_the_client_1011(mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    async def scenario(client: trio.SocketStream, upstream: trio.SocketStream) -> None:
        await upstream.send_all(encode(TEXT, b"last", masked=False))
        await upstream.aclose()
        received = await read_until_closed(client)
        assert received == encode(TEXT, b"last", masked=False) + wspass.wsframes.close_frame(1011)

    run, _ = await relay(mode, scenario, monkeypatch)
    assert run.journaled == [("a2c", b"last", None)]
    assert run.events == ["the agent closed the WebSocket: code 1006"]


@pytest.mark.parametrize("mode", MODES)
async def test_a_client_s_protocol_error_closes_both_sides_with_1002(
    mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def scenario(client: trio.SocketStream, upstream: trio.SocketStream) -> None:
        await client.send_all(encode(TEXT, b"fine", masked=True) + encode(TEXT, b"unmasked", masked=False))
        to_client = await read_until_closed(client)
        to_upstream = await read_until_closed(upstream)
        assert to_client == wspass.wsframes.close_frame(1002, "a client frame must be masked")
        # The upstream's copy is masked with keys of their own: read by wsproto.
        protocol = FrameProtocol(client=False, extensions=[])
        protocol.receive_bytes(to_upstream)
        assert [(f.opcode, f.payload) for f in protocol.received_frames()] == [
            (Opcode.TEXT, "fine"),
            (Opcode.CLOSE, (1002, "a client frame must be masked")),
        ]

    run, _ = await relay(mode, scenario, monkeypatch)
    assert run.journaled == [("c2a", b"fine", None)]
    assert run.events == ["the client closed the WebSocket: code 1002"]


@pytest.mark.parametrize("mode", MODES)
async def test_a_cancelled_relay_ends_at_once_even_while_both_peers_are_silent(
    mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Serve shutting down (its nursery cancelled) ends a quiet connection: the pumps blocked
    in their reads return, and the peers see the connection end."""

    async def scenario(client: trio.SocketStream, upstream: trio.SocketStream) -> None:
        await trio.testing.wait_all_tasks_blocked()

    run, names = await relay(mode, scenario, monkeypatch, cancel=True)
    assert ("ws-c2a" in names) == (mode == "threads")
    assert run.journaled == [] and run.events == []
    assert not any(name.startswith("ws-") for name in (t.name for t in threading.enumerate()))


async def test_a_pump_thread_that_cannot_start_ends_the_connection_and_says_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A process at its limit of threads: the first pump started, the second could not. The
    connection ends (the started pump is woken and returns), the run says why, nothing hangs."""
    real_start = threading.Thread.start
    calls = []

    def start(thread: threading.Thread) -> None:
        calls.append(thread.name)
        if thread.name == "ws-a2c":
            raise RuntimeError("can't start new thread")
        real_start(thread)

    monkeypatch.setattr(threading.Thread, "start", start)

    async def scenario(client: trio.SocketStream, upstream: trio.SocketStream) -> None:
        assert await read_until_closed(client) == b""
        assert await read_until_closed(upstream) == b""

    run, _ = await relay("threads", scenario, monkeypatch)
    assert calls == ["ws-c2a", "ws-a2c"]
    assert run.events == ["serve could not start a thread: can't start new thread"]
    assert not any(t.name.startswith("ws-") for t in threading.enumerate())


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(garbage=st.lists(st.binary(max_size=300), max_size=4), from_client=st.booleans())
def test_any_bytes_from_a_peer_end_the_same_way_through_both_pumps(
    garbage: list[bytes], from_client: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Any bytes from a peer, then it hangs up (total on input, DESIGN §2): each pump mode
    relays what it may and ends, with no traceback and no hang; both journal the same messages
    and events, and the peers receive the same bytes (serve's own close frames to the upstream
    carry a random mask: those are compared by length)."""
    monkeypatch.setattr(wspass, "CLOSE_SECONDS", 0.2)  # a close handshake nobody finishes
    data = b"".join(garbage)  # one write: serve reads it whole, so no reset races its reads
    outcomes = []
    for mode in MODES:
        seen: dict[str, bytes] = {}

        async def scenario(
            client: trio.SocketStream, upstream: trio.SocketStream, seen: dict[str, bytes] = seen
        ) -> None:
            sender = client if from_client else upstream

            async def reading(name: str, stream: trio.SocketStream) -> None:
                try:
                    seen[name] = await read_until_closed(stream)
                except trio.BrokenResourceError:  # reset: serve closed with bytes unread
                    seen[name] = b"<reset>"

            async with trio.open_nursery() as peers:
                peers.start_soon(reading, "client", client)
                peers.start_soon(reading, "upstream", upstream)
                if data:
                    await sender.send_all(data)
                await sender.send_eof()

        run, _ = trio.run(relay, mode, scenario, monkeypatch)
        outcomes.append((run.journaled, run.events, seen))
    (journaled, events, seen), (journaled2, events2, seen2) = outcomes
    assert (journaled, events) == (journaled2, events2)
    if b"<reset>" not in (*seen.values(), *seen2.values()):
        assert seen["client"] == seen2["client"]
        assert len(seen["upstream"]) == len(seen2["upstream"])
