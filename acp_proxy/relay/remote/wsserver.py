"""The WebSocket door of ``acp-proxy serve`` for HTTP/1.1 upgrades: the ASGI WebSocket protocol,
served straight over wsproto on the connection's (coalescing) stream.

Owns: telling an HTTP/1.1 WebSocket upgrade from anything else by its request head, the
handshake (accept, or an HTTP answer when the application denies it), turning the client's
frames into ``websocket.receive`` events and the application's ``websocket.send`` into frames,
pings, close codes. Why: under hypercorn each message the proxy sends went through its protocol
layers (a lock, a shielded cancel scope, idle-timer events), which cost more than the relay's own
work per message; here a message is one wsproto call and a buffer append. Everything else (HTTP/2,
POST, SSE) is still hypercorn's. An application may instead take the connection's stream once it
has accepted (the ``PASSTHROUGH`` scope extension): serve without fault rules relays the frames
themselves (``wspass``), and the door then reads and writes nothing more. The client's frames
are only read from the application's first ``receive`` that finds no event waiting, so that
nothing past the handshake was read when it takes the stream.

Must not know: the upstream, the journal, ACP. It serves any ASGI application's WebSocket scope.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

import h11
import trio
from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Ping,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)
from wsproto.utilities import LocalProtocolError, RemoteProtocolError

MAX_HEAD = 64 * 1024  # the request head a WebSocket upgrade may have
INBOX = 16  # client messages read ahead of the application: then the client waits (backpressure)
# The scope extension through which an application takes the connection's stream after its
# accept, to relay frames as they are (``scope["extensions"][PASSTHROUGH]["take"]()``).
PASSTHROUGH = "acp-proxy.websocket.take"


def is_upgrade(head: bytes) -> bool:
    """Whether a complete HTTP/1.1 request head asks for a WebSocket (a GET with
    ``Upgrade: websocket``)."""
    if not head.startswith(b"GET "):
        return False
    lines = head.split(b"\r\n")
    return any(
        name.strip().lower() == b"upgrade" and b"websocket" in value.lower()
        for name, _, value in (line.partition(b":") for line in lines[1:])
    )


class WebSocketDoor:
    """One HTTP/1.1 WebSocket connection served to an ASGI application."""

    def __init__(self, app: Any, stream: Any, head: bytes, max_message: int) -> None:
        self.app = app
        self.stream = stream
        self.head = head
        self.max_message = max_message
        self.ws = WSConnection(ConnectionType.SERVER)
        self.accepted = False
        self.closed = False  # a close frame was sent, or the connection is gone
        self.answered = False  # the handshake was answered (accepted or denied)
        self.reading = False  # the client's frames are being read (from the application's first receive on)
        self.taken = False  # the application took the stream (``take``): the door does nothing more
        self.nursery: trio.Nursery | None = None
        self.inbox_send, self.inbox = trio.open_memory_channel[dict[str, Any]](INBOX)

    def scope(self, request: h11.Request, ws_request: Request) -> dict[str, Any]:
        target = request.target
        path, _, query = target.partition(b"?")
        sock = getattr(self.stream, "socket", None)
        return {
            "type": "websocket",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1",
            "scheme": "ws",
            "path": unquote(path.decode("latin-1")),
            "raw_path": path,
            "query_string": query,
            "root_path": "",
            "headers": [(bytes(name).lower(), bytes(value)) for name, value in request.headers],
            "client": _address(sock, "getpeername"),
            "server": _address(sock, "getsockname"),
            "subprotocols": ws_request.subprotocols,
            "extensions": {"websocket.http.response": {}, PASSTHROUGH: {"take": self.take}},
        }

    async def serve(self) -> None:
        parser = h11.Connection(h11.SERVER)
        parser.receive_data(self.head)
        request = parser.next_event()
        self.ws.receive_data(self.head)
        ws_request = next((e for e in self.ws.events() if isinstance(e, Request)), None)
        if not isinstance(request, h11.Request) or ws_request is None:
            await self.stream.send_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
            return
        await self.inbox_send.send({"type": "websocket.connect"})
        async with trio.open_nursery() as nursery:
            self.nursery = nursery
            try:
                await self.app(self.scope(request, ws_request), self._receive, self._send)
            finally:
                if not self.answered:
                    await self._send({"type": "websocket.http.response.start", "status": 500, "headers": []})
                    await self._send({"type": "websocket.http.response.body", "body": b""})
                elif self.accepted and not self.closed and not self.taken:
                    await self._send({"type": "websocket.close", "code": 1011})
                nursery.cancel_scope.cancel()

    async def _receive(self) -> dict[str, Any]:
        """The ASGI ``receive``: the client's frames are read from the first call that finds no
        event waiting (``websocket.connect`` is), so an application may ``take`` the stream
        after its accept without a reader having read past the handshake."""
        if not self.reading:
            try:
                return self.inbox.receive_nowait()
            except trio.WouldBlock:
                pass
            if self.taken:
                raise RuntimeError("the WebSocket's stream was taken by the application")
            assert self.nursery is not None
            self.reading = True
            self.nursery.start_soon(self._read)
        return await self.inbox.receive()

    def take(self) -> tuple[Any, bytes]:
        """The connection's stream and the bytes the client sent after its handshake, for an
        application that relays the frames itself once it has accepted (``wspass``): the door
        then reads and writes nothing more on it."""
        if not self.accepted or self.reading or self.taken:
            raise RuntimeError("the WebSocket's stream can be taken once, after the accept, before any receive")
        self.taken = self.closed = True
        return self.stream, self.head.partition(b"\r\n\r\n")[2]

    async def _read(self) -> None:
        """The client's frames, as ASGI events, until it closes or goes away."""
        parts: list[Any] = []  # the fragments of the message being read: all str, or all bytes
        size = 0
        code = 1006  # the connection ended without a close frame
        try:
            while True:
                data = await self.stream.receive_some(65536)
                if not data:
                    break
                self.ws.receive_data(data)
                for event in self.ws.events():
                    if isinstance(event, TextMessage | BytesMessage):
                        parts.append(event.data)
                        size += len(event.data)
                        if size > self.max_message:
                            await self._frame(CloseConnection(code=1009, reason="message too big"))
                            code = 1009
                            return
                        if event.message_finished:
                            message = "".join(parts) if isinstance(event, TextMessage) else b"".join(parts)
                            parts, size = [], 0
                            key = "text" if isinstance(message, str) else "bytes"
                            await self.inbox_send.send({"type": "websocket.receive", key: message})
                    elif isinstance(event, Ping):
                        await self._frame(event.response())
                    elif isinstance(event, CloseConnection):
                        code = event.code
                        if not self.closed:
                            await self._frame(event.response())
                        return
        except (trio.BrokenResourceError, trio.ClosedResourceError, RemoteProtocolError, OSError):
            pass
        finally:
            self.closed = True
            with trio.CancelScope(shield=True):
                await self.inbox_send.send({"type": "websocket.disconnect", "code": code})

    async def _frame(self, event: Any) -> None:
        try:
            data = self.ws.send(event)
        except LocalProtocolError:
            return
        if isinstance(event, CloseConnection):
            self.closed = True
        try:
            await self.stream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self.closed = True

    async def _send(self, message: dict[str, Any]) -> None:
        kind = message["type"]
        if kind == "websocket.send":
            if self.closed or not self.accepted:
                return
            text = message.get("text")
            await self._frame(TextMessage(data=text) if text is not None else BytesMessage(data=message["bytes"]))
        elif kind == "websocket.accept":
            self.accepted = self.answered = True
            await self._frame(
                AcceptConnection(subprotocol=message.get("subprotocol"), extra_headers=message.get("headers") or [])
            )
        elif kind == "websocket.close":
            if not self.answered:  # a close before the handshake: a denial
                self.answered = True
                await self._frame(RejectConnection(status_code=403))
            elif not self.closed:
                await self._frame(CloseConnection(code=int(message.get("code", 1000)), reason=message.get("reason")))
        elif kind == "websocket.http.response.start":
            self.answered = True
            headers = list(message.get("headers") or [])
            await self._frame(RejectConnection(status_code=message["status"], headers=headers, has_body=True))
        elif kind == "websocket.http.response.body":
            await self._frame(RejectData(data=message.get("body", b""), body_finished=not message.get("more_body")))


def _address(sock: Any, which: str) -> tuple[str, int] | None:
    try:
        host, port = getattr(sock, which)()[:2]
    except (OSError, AttributeError, TypeError, ValueError):
        return None
    return str(host), int(port)


async def read_head(stream: Any, timeout: float) -> bytes:
    """The bytes up to the end of the first request head (or what came before ``timeout``, EOF
    or ``MAX_HEAD``): enough to tell an upgrade, all of it handed on to whoever serves it."""
    head = b""
    with trio.move_on_after(timeout):
        while b"\r\n\r\n" not in head and len(head) < MAX_HEAD:
            data = await stream.receive_some(65536)
            if not data:
                break
            head += data
    return head
