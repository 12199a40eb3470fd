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

Must not know: ASGI (``server`` hands it the client's stream once it has accepted), SQL, ACP.
With fault rules ``server`` never comes here: the gate works on whole messages (``faults``).
"""

from __future__ import annotations

import os
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

    async def relay(self, client_leftover: bytes, upstream_leftover: bytes) -> None:
        """Both directions, until the connection has ended."""
        detach = getattr(self.client.stream, "detach", None)
        if detach is not None:  # listen's CoalescingStream: each forward is a whole read already
            self.client.stream = await detach()
        async with trio.open_nursery() as nursery:
            self.scope = nursery.cancel_scope
            nursery.start_soon(self._pump, "c2a", self.client, self.upstream, client_leftover)
            nursery.start_soon(self._pump, "a2c", self.upstream, self.client, upstream_leftover)

    async def _pump(self, direction: str, source: _Side, sink: _Side, data: bytes) -> None:
        cutter = wsframes.FrameCutter(masked=direction == "c2a", max_message=self.max_message)
        run = self.run
        while True:
            if data:
                forward, items = cutter.feed(data)
                if items:
                    if run is not None:
                        # Journaled before a byte of them leaves (the journal's invariant);
                        # control frames are no messages.
                        batch = [(payload, None if op == TEXT else BINARY) for op, payload in items if op < CLOSE]
                        run.messages(direction, batch, stream="websocket")
                    self._closes(direction, items)
                if forward and not await sink.send(forward):
                    return  # the other side is gone: its own pump ends the connection
                if cutter.error is not None:
                    await self._broken(direction, *cutter.error)
                    return
            try:
                data = await source.stream.receive_some(RECEIVE)
            except _GONE:
                data = b""
            if not data:
                await self._hung_up(direction)
                return

    def _closes(self, direction: str, items: list[tuple[int, bytes]]) -> None:
        """The first close frame says who closed; the other side's answer is its echo."""
        for opcode, payload in items:
            if opcode == wsframes.CLOSE:
                self.closed.add(direction)
                self._wind_down()
                if self.closer is None:
                    self.closer = direction
                    code, reason = wsframes.close_reason(payload)
                    if code not in _NORMAL:
                        self._event(direction, code, reason)

    def _wind_down(self) -> None:
        """The connection is ending: the rest of the close handshake has CLOSE_SECONDS."""
        assert self.scope is not None
        self.scope.deadline = min(self.scope.deadline, trio.current_time() + CLOSE_SECONDS)

    def _event(self, direction: str, code: int, reason: str = "") -> None:
        if self.run is None:
            return
        who = "client" if direction == "c2a" else "agent"
        said = f"the {who} closed the WebSocket: code {code}"
        if reason and direction == "a2c":
            said += f" ({reason})"
        self.run.event(said, stream="websocket")

    async def _hung_up(self, direction: str) -> None:
        """``direction``'s sender ended its connection: without a close frame first, the other
        side gets one from serve (the client 1011, the upstream 1000) and the run says 1006."""
        if self.closer is None:
            self.closer = direction
            self._event(direction, 1006)
            if direction == "a2c":
                await self.client.send(wsframes.close_frame(1011))
            else:
                await self.upstream.send(wsframes.close_frame(1000, mask=os.urandom(4)))
        self._wind_down()
        if direction == "a2c" or self.closer == "a2c" or len(self.closed) == 2:
            # The upstream has hung up, or the client after the agent's close or after the
            # close handshake: nothing more can come that the other side would want. (A client
            # that hangs up first waits for the upstream's answer to its close.)
            assert self.scope is not None
            self.scope.cancel()

    async def _broken(self, direction: str, code: int, reason: str) -> None:
        """A protocol error by ``direction``'s sender: both sides get a close frame with its
        code (as wsproto closed them when it parsed the messages), the run records it."""
        if self.closer is None:
            self.closer = direction
            self._event(direction, code, reason)
        await self.client.send(wsframes.close_frame(code, reason))
        await self.upstream.send(wsframes.close_frame(code, reason, mask=os.urandom(4)))
        assert self.scope is not None
        self.scope.cancel()


class _Side:
    """One peer's stream. Its pump forwards to it while the other pump may send it a close
    frame of serve's own: one send at a time (trio refuses two at once on a stream)."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self._sending = trio.StrictFIFOLock()

    async def send(self, data: bytes) -> bool:
        """Send ``data`` whole; False when the peer is gone."""
        async with self._sending:
            try:
                await self.stream.send_all(data)
            except _GONE:
                return False
        return True
