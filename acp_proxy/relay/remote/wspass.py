"""``acp-proxy serve``'s WebSocket relay when serve has no fault rules: frames pass through byte
for byte, each receive buffer forwarded with one send once its messages are journaled.

Owns: the upstream's opening handshake (wsproto, on a TCP or TLS stream of our own, offering no
extension), the two pumps (client -> upstream, upstream -> client), what each whole message
is journaled as, and how a connection ends: close frames pass through (the side that sent the
first one is the one that closed; its code is recorded when it is not a normal one), a peer's
protocol error closes both sides with its code (1002, 1007 for a text message that is not
UTF-8, 1009 for one too big), a side that hangs up without a close frame is recorded as 1006
and the other side gets a close frame from serve (1011 to the client, 1000 to the upstream).

Why: relaying message by message (wsproto parsing and re-framing on both sides,
trio-websocket's reader task and queue, an ASGI event and a send per message) cost serve more
CPU per message than the agent and the client spent together, and on a machine with fewer
cores than processes serve's CPU is the stream's speed. A server's frames are unmasked and
stay valid for the client, a client's masked frames stay valid for the upstream, and with no
extension negotiated (serve offers none upstream and accepts none from the client) nothing
needs re-framing: ``wsframes`` only finds where each message ends, for the journal. Pings and
pongs pass through too, so the peers answer each other's.

Each direction is pumped by a thread of its own on blocking sockets when both sides are plain
TCP (``MAX_THREADED`` connections at a time): a read, the journal, a send, with no readiness
wait and no event loop between them. Over trio's loop, each read also cost an ``epoll_ctl``,
an ``epoll_wait`` and a pass through the scheduler, and the stream's speed on a two-core
machine followed serve's CPU and wake-ups; the threads are ``SCHED_BATCH`` so that their
wake-ups do not preempt the peers (``_batch_class``). The scope (the close handshake's deadline, a
cancel) stays on trio's side; when it ends, both sockets are shut down, which wakes a thread
blocked in either call. A TLS upstream, and connections past the limit, are pumped on trio's
loop by the same steps (``_take``, ``_hung_up``, ``_broken``).

Must not know: ASGI (``server`` hands it the client's stream once it has accepted), SQL, ACP.
With fault rules ``server`` never comes here: the gate works on whole messages (``faults``).
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import trio
import trio_websocket
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, RejectConnection, Request
from wsproto.utilities import LocalProtocolError, RemoteProtocolError

from acp_proxy.relay.remote import wsframes
from acp_proxy.relay.remote.runs import RemoteRun
from acp_proxy.relay.remote.wsframes import CLOSE, TEXT

RECEIVE = 65536  # bytes read at a time from either side
CLOSE_SECONDS = 10.0  # how long a close handshake may take once a close frame has passed
_GONE = (trio.BrokenResourceError, trio.ClosedResourceError, OSError)
_NORMAL = (1000, 1001, 1005)  # close codes that are not recorded as an event
BINARY = "binary WebSocket message"  # the note of a binary message's frame
# Connections relayed by threads of their own at once (two threads each); the rest, and any
# over TLS, are pumped on trio's loop. A thread per direction halves the system calls per
# read (no readiness wait) and takes trio's scheduling out of the stream's path.
MAX_THREADED = 32
_threaded = 0  # changed on trio's thread only


@dataclass
class Upstream:
    """The upstream's end of an accepted WebSocket: its stream, what its 101 said, and the
    bytes that came after its handshake in the same read (frames already)."""

    stream: Any
    headers: list[tuple[bytes, bytes]]
    subprotocol: str | None
    leftover: bytes


async def connect(url: str, tls: Any, headers: list[tuple[bytes, bytes]], subprotocols: list[str]) -> Upstream:
    """Open the upstream WebSocket at ``url`` (ws:// or wss:// with the ``tls`` context).
    Raises OSError when it cannot be reached, ``trio_websocket.ConnectionRejected`` (with its
    status) when it answers the handshake with something else, ``HandshakeError`` when the
    answer is no HTTP or the connection ends first."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    secure = parts.scheme == "wss"
    port = parts.port or (443 if secure else 80)
    resource = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    named = f"[{host}]" if ":" in host else host
    host_header = named if port == (443 if secure else 80) else f"{named}:{port}"
    if secure:
        stream: Any = await trio.open_ssl_over_tcp_stream(host, port, ssl_context=tls, https_compatible=True)
    else:
        stream = await trio.open_tcp_stream(host, port)
    try:
        ws = WSConnection(ConnectionType.CLIENT)
        request = Request(host=host_header, target=resource, subprotocols=subprotocols, extra_headers=headers)
        await stream.send_all(ws.send(request))
        received = b""
        while True:
            data = await stream.receive_some(RECEIVE)
            if not data:
                raise trio_websocket.HandshakeError("the upstream closed the connection during the handshake")
            received += data
            ws.receive_data(data)
            for event in ws.events():
                if isinstance(event, AcceptConnection):
                    _, _, after = received.partition(b"\r\n\r\n")
                    return Upstream(stream, list(event.extra_headers), event.subprotocol, after)
                if isinstance(event, RejectConnection):
                    raise trio_websocket.ConnectionRejected(event.status_code, tuple(event.headers), None)
    except (trio.BrokenResourceError, trio.ClosedResourceError, RemoteProtocolError, LocalProtocolError) as exc:
        await trio.aclose_forcefully(stream)
        raise trio_websocket.HandshakeError(f"the upstream's handshake failed: {exc}") from None
    except BaseException:
        await trio.aclose_forcefully(stream)
        raise


class Passthrough:
    """One accepted WebSocket relayed frame for frame between ``client`` and ``upstream``."""

    def __init__(self, client: Any, upstream: Any, run: RemoteRun | None, max_message: int) -> None:
        self.client = _Side(client)
        self.upstream = _Side(upstream)
        self.run = run
        self.max_message = max_message
        self.closer: str | None = None  # "c2a" or "a2c": who closed first (a close frame, or hung up)
        self.closed: set[str] = set()  # the directions a close frame has passed in
        self.scope: trio.CancelScope | None = None
        self._state = threading.Lock()  # closer and closed, set by either direction's pump
        self._on_trio: Callable[[Callable[[], None]], None] = _at_once  # how a pump reaches the scope
        self._stopping = False  # the relay is over: a pump woken by its socket's shutdown just ends

    async def relay(self, client_leftover: bytes, upstream_leftover: bytes) -> None:
        """Both directions, until the connection has ended."""
        detach = getattr(self.client.stream, "detach", None)
        if detach is not None:  # listen's CoalescingStream: each forward is a whole read already
            self.client.stream = await detach()
        global _threaded
        if _threaded < MAX_THREADED:
            _threaded += 1
            try:
                if self.client.to_blocking() and self.upstream.to_blocking():
                    await self._relay_by_threads(client_leftover, upstream_leftover)
                    return
            finally:
                _threaded -= 1
                self.client.unblock()
                self.upstream.unblock()
        async with trio.open_nursery() as nursery:
            self.scope = nursery.cancel_scope
            nursery.start_soon(self._pump, "c2a", self.client, self.upstream, client_leftover)
            nursery.start_soon(self._pump, "a2c", self.upstream, self.client, upstream_leftover)

    async def _relay_by_threads(self, client_leftover: bytes, upstream_leftover: bytes) -> None:
        """Both directions in threads of their own, on blocking sockets: a read, the journal and
        a send per buffer, with no event loop between them. The scope (the close handshake's
        deadline, a cancel) stays on trio's side: when it ends, both sockets are shut down,
        which wakes a pump blocked in either call."""
        token = trio.lowlevel.current_trio_token()
        self._on_trio = lambda fn: trio.from_thread.run_sync(fn, trio_token=token)
        ended = trio.Event()
        running = [2]  # pumps not ended yet (counted on trio's thread; both, before either starts)
        failures: list[BaseException] = []

        def one_ended() -> None:  # on trio's thread
            running[0] -= 1
            if not running[0]:
                ended.set()

        def pump(direction: str, source: _Side, sink: _Side, data: bytes) -> None:
            _batch_class()
            try:
                self._pump_blocking(direction, source, sink, data)
            except BaseException as exc:  # a defect: raised again on trio's side
                failures.append(exc)
            finally:
                trio.from_thread.run_sync(one_ended, trio_token=token)

        threads: list[threading.Thread] = []
        with trio.CancelScope() as scope:
            self.scope = scope
            try:
                for args in (
                    ("c2a", self.client, self.upstream, client_leftover),
                    ("a2c", self.upstream, self.client, upstream_leftover),
                ):
                    thread = threading.Thread(target=pump, args=args, name=f"ws-{args[0]}", daemon=True)
                    try:
                        thread.start()
                    except RuntimeError as exc:  # no thread to be had (a limit): the connection ends
                        if self.run is not None:
                            self.run.event(f"serve could not start a thread: {exc}", stream="websocket")
                        break
                    threads.append(thread)
                if len(threads) == 2:
                    await ended.wait()
            finally:
                self._stopping = True
                self.client.shut()
                self.upstream.shut()
                running[0] -= 2 - len(threads)  # a thread that could not start never says it ended
                if not running[0]:
                    ended.set()
                with trio.CancelScope(shield=True):
                    await ended.wait()
                    for thread in threads:  # each has said so; now its last instructions
                        await trio.to_thread.run_sync(thread.join)
        if failures:
            raise failures[0]

    async def _pump(self, direction: str, source: _Side, sink: _Side, data: bytes) -> None:
        """One direction on trio's loop (a TLS upstream, or past MAX_THREADED connections)."""
        cutter = wsframes.FrameCutter(masked=direction == "c2a", max_message=self.max_message)
        while True:
            if data:
                forward = self._take(direction, cutter, data)
                if forward and not await sink.send(forward):
                    return  # the other side is gone: its own pump ends the connection
                if cutter.error is not None:
                    for side, frame in self._broken(direction, *cutter.error):
                        await side.send(frame)
                    self._cancel()
                    return
            try:
                data = await source.stream.receive_some(RECEIVE)
            except _GONE:
                data = b""
            if not data:
                sends, cancel = self._hung_up(direction)
                for side, frame in sends:
                    await side.send(frame)
                self._wind_down()
                if cancel:
                    self._cancel()
                return

    def _pump_blocking(self, direction: str, source: _Side, sink: _Side, data: bytes) -> None:
        """``_pump`` in a thread of its own, on blocking sockets."""
        cutter = wsframes.FrameCutter(masked=direction == "c2a", max_message=self.max_message)
        while True:
            if data:
                forward = self._take(direction, cutter, data)
                if forward and not sink.send_blocking(forward):
                    return
                if cutter.error is not None:
                    for side, frame in self._broken(direction, *cutter.error):
                        side.send_blocking(frame)
                    self._on_trio(self._cancel)
                    return
            data = source.receive_blocking()
            if not data:
                if self._stopping:
                    return
                sends, cancel = self._hung_up(direction)
                for side, frame in sends:
                    side.send_blocking(frame)
                self._on_trio(self._cancel if cancel else self._wind_down)
                return

    def _take(self, direction: str, cutter: wsframes.FrameCutter, data: bytes) -> bytes:
        """The bytes of ``data`` that may leave now, their messages journaled first (the
        journal's invariant; control frames are no messages) and their close frames noted."""
        forward, items = cutter.feed(data)
        if items:
            if self.run is not None:
                batch = [(payload, None if op == TEXT else BINARY) for op, payload in items if op < CLOSE]
                self.run.messages(direction, batch, stream="websocket")
            self._closes(direction, items)
        return forward

    def _closes(self, direction: str, items: list[tuple[int, bytes]]) -> None:
        """The first close frame says who closed; the other side's answer is its echo."""
        for opcode, payload in items:
            if opcode == wsframes.CLOSE:
                with self._state:
                    self.closed.add(direction)
                    first = self.closer is None
                    if first:
                        self.closer = direction
                self._on_trio(self._wind_down)
                if first:
                    code, reason = wsframes.close_reason(payload)
                    if code not in _NORMAL:
                        self._event(direction, code, reason)

    def _wind_down(self) -> None:
        """The connection is ending: the rest of the close handshake has CLOSE_SECONDS."""
        assert self.scope is not None
        self.scope.deadline = min(self.scope.deadline, trio.current_time() + CLOSE_SECONDS)

    def _cancel(self) -> None:
        assert self.scope is not None
        self.scope.cancel()

    def _event(self, direction: str, code: int, reason: str = "") -> None:
        if self.run is None:
            return
        who = "client" if direction == "c2a" else "agent"
        said = f"the {who} closed the WebSocket: code {code}"
        if reason and direction == "a2c":
            said += f" ({reason})"
        self.run.event(said, stream="websocket")

    def _hung_up(self, direction: str) -> tuple[list[tuple[_Side, bytes]], bool]:
        """``direction``'s sender ended its connection: without a close frame first, the other
        side gets one from serve (the client 1011, the upstream 1000) and the run says 1006.
        What to send, and whether the connection is over (else it winds down)."""
        sends: list[tuple[_Side, bytes]] = []
        with self._state:
            first = self.closer is None
            if first:
                self.closer = direction
            # The upstream has hung up, or the client after the agent's close or after the
            # close handshake: nothing more can come that the other side would want. (A client
            # that hangs up first waits for the upstream's answer to its close.)
            over = direction == "a2c" or self.closer == "a2c" or len(self.closed) == 2
        if first:
            self._event(direction, 1006)
            if direction == "a2c":
                sends.append((self.client, wsframes.close_frame(1011)))
            else:
                sends.append((self.upstream, wsframes.close_frame(1000, mask=os.urandom(4))))
        return sends, over

    def _broken(self, direction: str, code: int, reason: str) -> list[tuple[_Side, bytes]]:
        """A protocol error by ``direction``'s sender: both sides get a close frame with its
        code (as wsproto closed them when it parsed the messages), the run records it; then
        the connection is over."""
        with self._state:
            first = self.closer is None
            if first:
                self.closer = direction
        if first:
            self._event(direction, code, reason)
        return [
            (self.client, wsframes.close_frame(code, reason)),
            (self.upstream, wsframes.close_frame(code, reason, mask=os.urandom(4))),
        ]


def _at_once(fn: Callable[[], None]) -> None:
    fn()


def _batch_class() -> None:
    """The calling thread into ``SCHED_BATCH`` (Linux; needs no privilege): its wake-ups no
    longer preempt a running process, they wait for a free core or the next tick. Why: with
    the agent, the client and serve on fewer cores than they need, each message waking a pump
    that preempted the peer doing the real work cost that peer a context switch per message; in
    eight paired rounds of a 100,000-chunk stream through the recording serve, the stream ran
    at a median 0.97x direct with it and 0.81x without, and serve's CPU per message halved.
    Round trips on a machine with a core free are as fast as before: a waking thread that finds
    an idle core runs at once."""
    try:
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
    except (OSError, AttributeError):  # not Linux, or refused: the default class then
        pass


class _Side:
    """One peer's stream. Its pump forwards to it while the other pump may send it a close
    frame of serve's own: one send at a time (trio refuses two at once on a stream, and two
    threads' bytes must not interleave)."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self._sending = trio.StrictFIFOLock()
        self._sock: socket.socket | None = None  # a blocking twin of the stream's socket
        self._sending_blocking = threading.Lock()

    async def send(self, data: bytes) -> bool:
        """Send ``data`` whole; False when the peer is gone."""
        async with self._sending:
            try:
                await self.stream.send_all(data)
            except _GONE:
                return False
        return True

    def to_blocking(self) -> bool:
        """Put this side in blocking mode through a twin descriptor, for a pump thread; False
        (and nothing changed) when it cannot be: no plain socket (TLS stays on trio's loop)."""
        if not isinstance(self.stream, trio.SocketStream):
            return False
        try:
            self._sock = socket.socket(fileno=os.dup(self.stream.socket.fileno()))
            self._sock.setblocking(True)
        except OSError:
            self._sock = None
            return False
        return True

    def receive_blocking(self) -> bytes:
        assert self._sock is not None
        try:
            return self._sock.recv(RECEIVE)
        except OSError:
            return b""

    def send_blocking(self, data: bytes) -> bool:
        assert self._sock is not None
        with self._sending_blocking:
            try:
                self._sock.sendall(data)
            except OSError:
                return False
        return True

    def shut(self) -> None:
        """End the connection both ways: a thread blocked on it returns."""
        if self._sock is not None:
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def unblock(self) -> None:
        """Back to non-blocking (the mode is the descriptors' shared one) for trio to close."""
        if self._sock is not None:
            try:
                self._sock.setblocking(False)
            finally:
                self._sock.close()
                self._sock = None
