"""What both servers of ``acp-proxy serve`` do the same way at their door: ``server`` (``--upstream
URL``) and ``agent_server`` (``-- AGENT``).

Owns: the ASGI types, the lifespan protocol and the Host check every request passes first
(``front_door``), a refusal as one JSON object (``refuse``; on a WebSocket handshake as a denial
response), a request body read with a bound (``read_body``, ``BodyTooLarge``, ``MAX_BODY``), the
message size limit, hypercorn's configuration (``config``) and its error log on stderr as one of
ours, without the tracebacks of streams cut on purpose (``server_log``).

Must not know: the upstream, the agent, the journal, SQL, JSON-RPC.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from acp_proxy.relay.remote import shapes
from acp_proxy.relay.remote.faults import StreamCut

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

MAX_WEBSOCKET_MESSAGE = 256 * 1024 * 1024  # what one message may be; larger ones close the socket (1009)
MAX_BODY = MAX_WEBSOCKET_MESSAGE  # what one HTTP request body may be; larger ones get a 413
HOST_REFUSED = "acp-proxy: this Host is not allowed (see serve --allow-host)"


class BodyTooLarge(Exception):
    """A request body over ``MAX_BODY``: answered 413, never read whole into memory."""


async def front_door(scope: Scope, receive: Receive, send: Send, port: int, allowed: frozenset[str]) -> bool:
    """The lifespan protocol, and the Host check (a DNS-rebinding page must not reach a loopback
    agent): True when the request was answered here and the app has nothing more to do."""
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return True
    if not shapes.host_allowed(shapes.header(scope["headers"], "host"), port, allowed):
        await refuse(scope, send, 403, HOST_REFUSED)
        return True
    return False


async def read_body(receive: Receive, limit: int | None = None) -> bytes:
    """A request's whole body; over ``limit`` (``MAX_BODY``) bytes it raises ``BodyTooLarge``
    once the limit is passed, so a client cannot make the proxy hold an unbounded body."""
    limit = MAX_BODY if limit is None else limit
    chunks: list[bytes] = []
    size = 0
    while True:
        event = await receive()
        if event["type"] == "http.disconnect":
            break
        chunk = event.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(f"acp-proxy: a request body over {limit // (1024 * 1024)} MiB is refused")
        chunks.append(chunk)
        if not event.get("more_body", False):
            break
    return b"".join(chunks)


async def refuse(scope: Scope, send: Send, status: int, message: str) -> None:
    """Answer here, as one JSON object: on a WebSocket handshake as a denial response when the
    server can send one (hypercorn can), else by closing."""
    body = json.dumps({"error": message}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if scope["type"] == "websocket":
        if "websocket.http.response" in scope.get("extensions", {}):
            await send({"type": "websocket.http.response.start", "status": status, "headers": headers})
            await send({"type": "websocket.http.response.body", "body": body})
        else:
            await send({"type": "websocket.close", "code": 1011})
        return
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def config(host: str, port: int) -> Any:
    """hypercorn's configuration for serve: one socket for HTTP/1.1, h2c and WebSocket, no
    access log, its errors through ``server_log``."""
    from hypercorn.config import Config

    conf = Config()
    conf.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    conf.alpn_protocols = ["h2", "http/1.1"]
    conf.accesslog = None
    conf.loglevel = "WARNING"
    conf.errorlog = server_log()
    conf.websocket_max_message_size = MAX_WEBSOCKET_MESSAGE
    return conf


def server_log() -> logging.Logger:
    """hypercorn's error log: its words on stderr as one of ours, without the tracebacks of
    the streams this proxy cuts on purpose (``StreamCut``)."""
    log = logging.getLogger("acp_proxy.serve.hypercorn")
    log.propagate = False
    log.setLevel(logging.WARNING)
    if not log.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("acp-proxy: hypercorn: %(message)s"))
        handler.addFilter(_not_cut)
        log.addHandler(handler)
    return log


def _not_cut(record: logging.LogRecord) -> bool:
    return not on_purpose(record.exc_info[1] if record.exc_info else None)


def on_purpose(exc: BaseException | None) -> bool:
    """Whether an exception is a stream this proxy cut on purpose (a fault rule's abort)."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return isinstance(exc, StreamCut)
