"""``acp-proxy serve``: the reverse proxy for remote ACP, as an ASGI application served by
``listen`` (hypercorn's trio ``TCPServer``; HTTP/1.1 WebSocket upgrades by ``wsserver``).

Owns: the one endpoint's routing (WebSocket upgrade, POST, GET with SSE, DELETE, anything else
passed through), the upstream connections (httpx for HTTP, trio-websocket for WebSocket, TLS with
the system's certificates), the Host check, which exchange belongs to which run, and what an
upstream failure is answered with (502, one JSON line) and recorded as.

Must not know: SQL, JSON-RPC meaning, click. Bytes are forwarded as they came: the same JSON
text, the same SSE chunks (so the same event boundaries), the same WebSocket message boundaries,
the same statuses and the end-to-end headers. Recording is ``runs.RemoteRun``: a journal append
just before each message is forwarded, never a wait for the database. With fault rules, messages
go through ``faults`` (this package's: the gate, barriers, what a fault does on each transport);
without them these fast paths never build a gate, and a WebSocket on an HTTP/1.1 upgrade is
relayed frame for frame by ``wspass`` (its upstream opened by wspass too, not trio-websocket).

Why these libraries: the relay's loop is trio (the stdio relay's, and hypercorn serves under
trio with HTTP/1.1, HTTP/2 and WebSocket from one socket); httpx runs under trio through anyio
and streams raw bytes; trio-websocket (wsproto underneath) gives whole messages with their
text/binary kind and runs under trio, where the SDK's ``websockets`` is asyncio only.
"""

from __future__ import annotations

import json
import signal
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import trio
import trio_websocket

from acp_proxy.protocol import transports
from acp_proxy.relay.remote import faults as remote_faults
from acp_proxy.relay.remote import shapes, wspass, wsserver
from acp_proxy.relay.remote.asgi import (
    MAX_WEBSOCKET_MESSAGE,
    BodyTooLarge,
    Receive,
    Scope,
    Send,
    front_door,
    on_purpose,
    read_body,
    refuse,
)
from acp_proxy.relay.remote.runs import MAX_LIVE_RUNS, RemoteRun
from acp_proxy.relay.spawn import say

CONNECTION_ID = "acp-connection-id"
SESSION_ID = "acp-session-id"
UPSTREAM_CONNECT_TIMEOUT = 30.0


class _StreamDropped(remote_faults.StreamCut):
    """The upstream dropped an SSE stream: raised to the server, which then aborts the client's."""


@dataclass
class ServeOptions:
    upstream: str
    db_path: Path | None  # None: --no-record
    listen_host: str
    listen_port: int
    allowed_hosts: frozenset[str] = frozenset()
    argv: list[str] = field(default_factory=list)  # masked already
    fault_plan: Any = None  # a FaultPlan: its rules apply to every connection, each its own plan
    redact: list[str] | None = None  # serve --redact: runs store masked copies (the rules stay unrecorded)


def system_tls() -> ssl.SSLContext:
    """TLS to an https:// or wss:// upstream, verified against the system's certificates."""
    return ssl.create_default_context()


class ProxyApp:
    """The ASGI application: one per ``serve``."""

    def __init__(self, options: ServeOptions, client: httpx.AsyncClient) -> None:
        self.options = options
        self.client = client
        self.port = options.listen_port
        self.http_runs: dict[str, RemoteRun] = {}
        self.live: set[RemoteRun] = set()
        self.websockets = 0  # WebSocket connections open (each is, or is about to be, a run)
        self.refusing = False  # said once on stderr while serve is full
        self.tls = system_tls()
        self.barriers = remote_faults.Barriers()
        self.http_faults: dict[str, remote_faults.HttpFaults] = {}
        self.run_clients: dict[str, httpx.AsyncClient] = {}
        """With fault rules, each HTTP connection's own upstream client (restart= replaces it)."""

    def connection_failed(self, exc: BaseException) -> None:
        """A WebSocket connection that ended on an exception: one line on stderr (none for a
        stream a fault rule cut on purpose); the connection is closed, serve goes on."""
        if on_purpose(exc):
            return
        while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
            exc = exc.exceptions[0]
        say(f"a WebSocket connection failed: {type(exc).__name__}: {_short(exc)}")

    # -- runs --------------------------------------------------------------------------------

    def _new_plan(self) -> Any:
        """A connection's own fault plan (nth=, first= count within it), or None."""
        plan = self.options.fault_plan
        if not plan:
            return None
        from acp_proxy.faults.plan import FaultPlan

        return FaultPlan(plan.rules, plan.seed)

    def _new_run(self, transport: str, connection: str | None, plan: Any = None) -> RemoteRun | None:
        if self.options.db_path is None:
            return None
        run = RemoteRun(
            self.options.db_path,
            self.options.argv,
            {"upstream": shapes.mask_url(self.options.upstream), "connection": connection},
            transport=transport,
            connection=connection,
            fault_plan=plan,
            redact=self.options.redact,
        )
        self.live.add(run)
        return run

    def _full(self) -> bool:
        """Whether a new client connection would be one run too many (each run has a recorder
        process): it is then refused with 503, so memory and processes stay bounded."""
        others = sum(1 for run in self.live if run.transport != "websocket")
        full = self.options.db_path is not None and others + self.websockets >= MAX_LIVE_RUNS
        if full and not self.refusing:
            say(f"{MAX_LIVE_RUNS} connections are being recorded: new ones are refused (503) until one ends")
        self.refusing = full
        return full

    async def _refuse_full(self, scope: Scope, send: Send) -> None:
        await refuse(scope, send, 503, f"acp-proxy: {MAX_LIVE_RUNS} connections are being recorded; try again later")

    async def _finish(self, run: RemoteRun | None, code: int = 0) -> None:
        if run is None:
            return
        self.live.discard(run)
        await run.finish(code)

    async def finish_all(self) -> None:
        for run in list(self.live):
            with trio.CancelScope(shield=True):
                await self._finish(run)
        for client in self.run_clients.values():
            with trio.CancelScope(shield=True):
                await client.aclose()

    def _client_of(self, connection: str | None) -> httpx.AsyncClient:
        return self.run_clients.get(connection or "", self.client)

    def _faults_for(self, connection: str, faults: remote_faults.HttpFaults) -> None:
        """An HTTP connection's gate and its own upstream client (restart replaces it)."""
        self.run_clients[connection] = _upstream_client(self.tls)

        async def restart() -> None:
            old = self.run_clients.get(connection)
            self.run_clients[connection] = _upstream_client(self.tls)
            if old is not None:
                with trio.CancelScope(shield=True):
                    await old.aclose()

        faults.restart = restart
        self.http_faults[connection] = faults

    async def _faulted_initialize(self, scope: Scope, receive: Receive, send: Send, body: bytes, stream: str) -> bool:
        """A connection-less POST (an initialize) through a new connection's gate; its run and
        connection exist from the answer on. False: the gate could not judge it."""

        async def not_yet() -> None:  # restart before there is a connection: nothing to restart
            return None

        plan = self._new_plan()
        faults = remote_faults.HttpFaults(plan, None, self.barriers, not_yet)
        answer = await faults.client_message(body, stream, self._poster(scope, None), self._cut_poster(scope, None))
        if answer is None:
            return False
        established = shapes.header(answer.headers, CONNECTION_ID) if answer.status == 200 else None
        run = self._new_run("http", established, plan)
        faults.adopt(run)
        if established:
            if run is not None:
                self.http_runs[established] = run
            self._faults_for(established, faults)
        try:
            await self._give(receive, send, answer, run, stream, faults)
        finally:
            if not established:
                await self._finish(run)
        return True

    # -- routing -----------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if await front_door(scope, receive, send, self.port, self.options.allowed_hosts):
            return
        kind = scope["type"]
        if kind == "websocket":
            if self._full():
                await receive()  # websocket.connect
                await self._refuse_full(scope, send)
                return
            self.websockets += 1  # counted from here, so a flood of handshakes cannot overshoot
            try:
                await self._websocket(scope, receive, send)
            finally:
                self.websockets -= 1
        elif kind == "http":
            await self._http(scope, receive, send)

    def _upstream_target(self, scope: Scope, websocket: bool) -> str:
        """The upstream address of this request: the upstream's own path when the client asked
        for the proxy's root, else the client's path (and query) on the upstream's host."""
        base = shapes.http_url(self.options.upstream)
        path = scope.get("raw_path") or scope["path"].encode()
        query = scope.get("query_string") or b""
        parts = httpx.URL(base)
        target = parts.copy_with(raw_path=path + (b"?" + query if query else b""))
        text = str(target)
        return shapes.websocket_url(text) if websocket else text

    # -- HTTP: POST, GET (SSE), DELETE -------------------------------------------------------

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        method = scope["method"]
        headers = scope["headers"]
        try:
            body = await read_body(receive) if method != "GET" else b""
        except BodyTooLarge as exc:
            say(str(exc).removeprefix("acp-proxy: "))
            await refuse(scope, send, 413, str(exc))
            return
        connection = shapes.header(headers, CONNECTION_ID)
        if connection is None and method == "POST" and self._full():
            await self._refuse_full(scope, send)
            return
        run = self.http_runs.get(connection) if connection else None
        stream = "post" if method == "POST" else method.lower()
        if method == "GET":
            session = shapes.header(headers, SESSION_ID)
            stream = f"sse:{session}" if session else "sse"
        ts = time.time_ns()
        # A connection this serve did not see established (unknown, expired, or from before it
        # started): its messages are a run of their own rather than lost, with why beside them.
        orphan = connection is not None and run is None and self.options.db_path is not None
        if orphan:
            if self._full():
                await self._refuse_full(scope, send)
                return
            run = self._new_run("http", connection)
            if run is not None:
                run.event(f"a {method} on a connection serve did not see established", stream=stream)
        initialize = connection is None and method == "POST" and body and self.options.fault_plan
        if initialize and await self._faulted_initialize(scope, receive, send, body, stream):
            return
        faults = self.http_faults.get(connection) if connection else None
        if faults is not None and connection and body and method == "POST":
            answer = await faults.client_message(
                body, stream, self._poster(scope, connection), self._cut_poster(scope, connection)
            )
            if answer is not None:
                await self._give(receive, send, answer, run, stream, faults)
                return
        if run is not None and body:
            _record_request(run, headers, body, stream, ts)
        request = self._client_of(connection).build_request(
            method,
            self._upstream_target(scope, websocket=False),
            headers=shapes.request_headers(headers),
            content=body if method != "GET" else None,
        )
        try:
            response = await self._client_of(connection).send(request, stream=True)
        except httpx.HTTPError as exc:
            why = f"the upstream cannot be reached: {type(exc).__name__}: {_short(exc)}"
            attempt = run is None and method == "POST" and connection is None
            if attempt:  # an initialize that never reached the agent: a run of its own
                run = self._new_run("http", None)
                if run is not None:
                    _record_request(run, headers, body, stream, ts)
            if run is not None:
                run.event(f"{method} not relayed, 502 sent: {why}", stream=stream)
            await refuse(scope, send, 502, f"acp-proxy: {why}")
            if attempt or orphan:
                await self._finish(run)
            return
        known = 200 <= response.status_code < 300 and method != "DELETE"
        if orphan and known and connection is not None and run is not None:
            self.http_runs[connection] = run  # the upstream knows it: its next messages join this run
        try:
            await self._answer(scope, receive, send, response, run, stream, method, body, ts)
        finally:
            await response.aclose()
            if orphan and not known:
                await self._finish(run)

    async def _answer(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        response: httpx.Response,
        run: RemoteRun | None,
        stream: str,
        method: str,
        body: bytes,
        ts: int,
    ) -> None:
        status = response.status_code
        out_headers = shapes.response_headers(list(response.headers.raw))
        is_sse = response.headers.get("content-type", "").startswith("text/event-stream")
        if is_sse and 200 <= status < 300:
            await send({"type": "http.response.start", "status": status, "headers": out_headers})
            connection = shapes.header(scope["headers"], CONNECTION_ID)
            faults = self.http_faults.get(connection) if connection else None
            await self._relay_sse(receive, send, response, run, stream, faults)
            return
        content = b"".join([chunk async for chunk in response.aiter_raw()])
        established = response.headers.get(CONNECTION_ID)
        if run is None and method == "POST" and status == 200 and established:
            # initialize: the connection (and so the run) exists from its answer on; its request
            # is recorded at the time it came.
            run = self._new_run("http", established)
            if run is not None:
                self.http_runs[established] = run
                _record_request(run, scope["headers"], body, stream, ts)
        attempt = run is None and method == "POST" and shapes.header(scope["headers"], CONNECTION_ID) is None
        if attempt:
            # A connection-less POST (an initialize) the upstream did not answer with a connection:
            # an error status, HTML from something that is not an ACP agent... a run of its own.
            run = self._new_run("http", None)
            if run is not None:
                _record_request(run, scope["headers"], body, stream, ts)
        if run is not None and content:
            note = transports.http_answer_note(status, method, response.headers.get("content-type", ""))
            decoder = shapes.BodyDecoder(response.headers.get("content-encoding"))
            recorded = decoder.decode(content) if decoder.active else content
            if decoder.note is not None:
                note = f"{note}; {decoder.note}" if note else decoder.note
            run.message("a2c", recorded, stream=stream, note=note)
        await send({"type": "http.response.start", "status": status, "headers": out_headers})
        await send({"type": "http.response.body", "body": content})
        if attempt:
            await self._finish(run)
        if method == "DELETE" and run is not None and 200 <= status < 300:
            connection = run.connection or ""
            self.http_runs.pop(connection, None)
            self.http_faults.pop(connection, None)
            client = self.run_clients.pop(connection, None)
            if client is not None:
                await client.aclose()
            await self._finish(run)

    async def _relay_sse(
        self,
        receive: Receive,
        send: Send,
        response: httpx.Response,
        run: RemoteRun | None,
        stream: str,
        faults: remote_faults.HttpFaults | None = None,
    ) -> None:
        """Forward an SSE stream chunk by chunk; each event's message is journaled just before
        the chunk that completes it is forwarded. A client that goes away ends it."""
        events = shapes.SseEvents()
        decoder = shapes.BodyDecoder(response.headers.get("content-encoding"))
        ended = "the upstream ended the stream"
        async with trio.open_nursery() as nursery:

            async def client_gone() -> None:
                while (await receive())["type"] != "http.disconnect":
                    pass
                nursery.cancel_scope.cancel()

            nursery.start_soon(client_gone)
            try:
                if faults is not None:
                    if await faults.sse(receive, send, response.aiter_raw(), stream):
                        ended = "the stream was closed by a fault rule"
                        if run is not None:
                            run.event(ended, stream=stream)
                        ended = "the upstream ended the stream"
                else:
                    async for chunk in response.aiter_raw():
                        if run is not None:
                            for message in events.feed(decoder.decode(chunk) if decoder.active else chunk):
                                run.message("a2c", message, stream=stream, note=decoder.note)
                        await send({"type": "http.response.body", "body": chunk, "more_body": True})
            except httpx.HTTPError as exc:
                ended = f"the upstream dropped the stream: {type(exc).__name__}: {_short(exc)}"
            if run is not None and ended != "the upstream ended the stream":
                run.event(ended, stream=stream)
                say(f"{stream} of connection {run.connection}: {ended}")
            nursery.cancel_scope.cancel()
            if ended != "the upstream ended the stream":
                # Dropped upstream, dropped here: the client must see the same abrupt end
                # (no last chunk), not a stream that ended cleanly.
                raise _StreamDropped(ended)
        # Out of the cancelled nursery: inside it, this last send would be cancelled unsent.
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    # -- WebSocket ---------------------------------------------------------------------------

    async def _websocket(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (await receive())["type"] != "websocket.connect":
            return
        url = self._upstream_target(scope, websocket=True)
        tls = self.tls if url.startswith("wss:") else None
        extra = shapes.websocket_headers(scope["headers"])
        take = scope.get("extensions", {}).get(wsserver.PASSTHROUGH)
        if take is not None and not self.options.fault_plan:
            await self._websocket_passthrough(scope, send, url, tls, extra, take["take"])
            return
        async with trio.open_nursery() as nursery:
            try:
                with trio.fail_after(UPSTREAM_CONNECT_TIMEOUT):
                    upstream = await trio_websocket.connect_websocket_url(
                        nursery,
                        url,
                        ssl_context=tls,
                        extra_headers=extra,
                        subprotocols=scope.get("subprotocols") or None,
                        max_message_size=MAX_WEBSOCKET_MESSAGE,
                    )
            except (OSError, trio.TooSlowError, trio_websocket.HandshakeError) as exc:
                status = getattr(exc, "status_code", None) or 502
                await refuse(scope, send, status, f"acp-proxy: the upstream WebSocket failed: {_short(exc)}")
                return
            try:
                accepted = shapes.websocket_headers(list(upstream.handshake_headers))
                connection = shapes.header(accepted, CONNECTION_ID)
                plan = self._new_plan()
                run = self._new_run("websocket", connection, plan)
                await send({"type": "websocket.accept", "headers": accepted, "subprotocol": upstream.subprotocol})
                try:
                    if plan:

                        async def reconnect() -> trio_websocket.WebSocketConnection:
                            with trio.fail_after(UPSTREAM_CONNECT_TIMEOUT):
                                return await trio_websocket.connect_websocket_url(
                                    nursery,
                                    url,
                                    ssl_context=tls,
                                    extra_headers=extra,
                                    subprotocols=scope.get("subprotocols") or None,
                                    max_message_size=MAX_WEBSOCKET_MESSAGE,
                                )

                        faults = remote_faults.WebSocketFaults(plan, run, self.barriers, send, upstream, reconnect)
                        await remote_faults.relay_websocket(receive, faults)
                    else:
                        await self._relay_websocket(receive, send, upstream, run)
                finally:
                    await self._finish(run)
            finally:
                with trio.CancelScope(shield=True):
                    await upstream.aclose()

    async def _websocket_passthrough(
        self,
        scope: Scope,
        send: Send,
        url: str,
        tls: ssl.SSLContext | None,
        extra: list[tuple[bytes, bytes]],
        take: Callable[[], tuple[Any, bytes]],
    ) -> None:
        """A WebSocket without fault rules on an HTTP/1.1 upgrade: frames relayed as they are
        (``wspass``), no extension negotiated on either side so that they stay valid."""
        try:
            with trio.fail_after(UPSTREAM_CONNECT_TIMEOUT):
                upstream = await wspass.connect(url, tls, extra, list(scope.get("subprotocols") or []))
        except (OSError, trio.TooSlowError, trio_websocket.HandshakeError) as exc:
            status = getattr(exc, "status_code", None) or 502
            await refuse(scope, send, status, f"acp-proxy: the upstream WebSocket failed: {_short(exc)}")
            return
        try:
            accepted = shapes.websocket_headers(upstream.headers)
            run = self._new_run("websocket", shapes.header(accepted, CONNECTION_ID))
            try:
                await send({"type": "websocket.accept", "headers": accepted, "subprotocol": upstream.subprotocol})
                client, leftover = take()
                relay = wspass.Passthrough(client, upstream.stream, run, MAX_WEBSOCKET_MESSAGE)
                await relay.relay(leftover, upstream.leftover)
            finally:
                await self._finish(run)
        finally:
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(upstream.stream)

    async def _relay_websocket(
        self,
        receive: Receive,
        send: Send,
        upstream: trio_websocket.WebSocketConnection,
        run: RemoteRun | None,
    ) -> None:
        """Both directions of a WebSocket without fault rules (``remote_faults`` has them)."""

        async def carry(direction: str, message: str | bytes) -> None:
            """Journal then forward one message."""
            if run is not None:
                if isinstance(message, str):
                    run.message(direction, message.encode(), stream="websocket")
                else:
                    run.message(direction, message, stream="websocket", note="binary WebSocket message")
            if direction == "c2a":
                await upstream.send_message(message)
            elif isinstance(message, str):
                await send({"type": "websocket.send", "text": message})
            else:
                await send({"type": "websocket.send", "bytes": message})

        client_closed = False  # the agent's close that follows is the echo of the client's

        async with trio.open_nursery() as nursery:

            async def client_to_agent() -> None:
                nonlocal client_closed
                while True:
                    event = await receive()
                    if event["type"] == "websocket.disconnect":
                        client_closed = True
                        code = event.get("code", 1000)
                        if run is not None and code not in (1000, 1001, 1005):
                            run.event(f"the client closed the WebSocket: code {code}", stream="websocket")
                        await upstream.aclose(code=code if 1000 <= code < 5000 and code not in (1005, 1006) else 1000)
                        break
                    if event["type"] != "websocket.receive":
                        continue
                    text = event.get("text")
                    try:
                        await carry("c2a", text if text is not None else event.get("bytes") or b"")
                    except trio_websocket.ConnectionClosed:
                        break
                nursery.cancel_scope.cancel()

            async def agent_to_client() -> None:
                while True:
                    try:
                        message = await upstream.get_message()
                    except trio_websocket.ConnectionClosed as exc:
                        code = exc.reason.code if exc.reason is not None else 1000
                        if client_closed:
                            break
                        if run is not None and code not in (1000, 1001, 1005):
                            reason = exc.reason.reason if exc.reason is not None else None
                            said = f"the agent closed the WebSocket: code {code}" + (f" ({reason})" if reason else "")
                            run.event(said, stream="websocket")
                        # 1005 and 1006 are never sent, only observed: "no code", "no close frame".
                        await send({"type": "websocket.close", "code": {1005: 1000, 1006: 1011}.get(code, code)})
                        break
                    await carry("a2c", message)
                nursery.cancel_scope.cancel()

            nursery.start_soon(client_to_agent)
            nursery.start_soon(agent_to_client)

    # -- fault rules on HTTP -----------------------------------------------------------------

    def _poster(self, scope: Scope, connection: str | None) -> remote_faults.Post:
        """Send one message upstream as a POST of this exchange (its headers, its path)."""

        async def post(line: bytes) -> remote_faults.Got:
            client = self._client_of(connection)
            request = client.build_request(
                "POST",
                self._upstream_target(scope, websocket=False),
                headers=shapes.request_headers(scope["headers"]),
                content=line,
            )
            try:
                got = await client.send(request, stream=True)
                headers = shapes.response_headers(list(got.headers.raw))
                if got.headers.get("content-type", "").startswith("text/event-stream") and got.is_success:
                    return got.status_code, headers, got  # an SSE answer: relayed as it streams
                try:
                    return got.status_code, headers, await got.aread()
                finally:
                    await got.aclose()
            except httpx.HTTPError as exc:
                said = json.dumps({"error": f"acp-proxy: the upstream cannot be reached: {_short(exc)}"})
                return 502, [(b"content-type", b"application/json")], said.encode()

        return post

    def _cut_poster(self, scope: Scope, connection: str | None) -> Callable[[bytes], Awaitable[None]]:
        """Send the upstream a POST whose body stops after ``part`` (abort mid-frame)."""

        async def post_cut(part: bytes) -> None:
            async def body() -> Any:
                yield part
                raise remote_faults.StreamCut("cut by a fault rule")

            headers = [h for h in shapes.request_headers(scope["headers"]) if h[0].lower() != b"content-length"]
            try:
                await self._client_of(connection).post(
                    self._upstream_target(scope, websocket=False), headers=headers, content=body()
                )
            except (httpx.HTTPError, remote_faults.StreamCut):
                pass

        return post_cut

    async def _give(
        self,
        receive: Receive,
        send: Send,
        answer: remote_faults.Answer,
        run: RemoteRun | None,
        stream: str,
        faults: remote_faults.HttpFaults,
    ) -> None:
        """A POST's answer as the gate decided it; an SSE answer is relayed through the gate."""
        if answer.stream is None or answer.cut:
            await _give(send, answer)
            return
        try:
            await send({"type": "http.response.start", "status": answer.status or 200, "headers": answer.headers})
            await self._relay_sse(receive, send, answer.stream, run, stream, faults)
        finally:
            await answer.stream.aclose()


async def _give(send: Send, answer: remote_faults.Answer) -> None:
    """A POST's answer as the gate decided it; a cut one stops after half its body (or before
    any, with a length it never reaches), and the connection closes without its end."""
    headers = [h for h in answer.headers if h[0].lower() != b"content-length"]
    body = answer.body
    if answer.cut:
        length = max(len(body), 1) + 1
        await send(
            {
                "type": "http.response.start",
                "status": answer.status or 200,
                "headers": [*headers, (b"content-length", str(length).encode())],
            }
        )
        await send({"type": "http.response.body", "body": body[: len(body) // 2], "more_body": True})
        raise remote_faults.StreamCut("answer cut by a fault rule")
    headers.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": answer.status or 202, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _upstream_client(tls: ssl.SSLContext) -> httpx.AsyncClient:
    timeout = httpx.Timeout(UPSTREAM_CONNECT_TIMEOUT, read=None)
    return httpx.AsyncClient(verify=tls, timeout=timeout, http2=_has_h2(), trust_env=False)


def _record_request(run: RemoteRun, headers: list[tuple[bytes, bytes]], body: bytes, stream: str, ts: int) -> None:
    """Journal a request body: decoded when it came with a Content-Encoding, the note says so."""
    decoder = shapes.BodyDecoder(shapes.header(headers, "content-encoding"))
    if not decoder.active:
        run.message("c2a", body, stream=stream, ts_ns=ts)
        return
    run.message("c2a", decoder.decode(body), stream=stream, ts_ns=ts, note=decoder.note)


def _short(exc: BaseException) -> str:
    """An exception in one line, without the address (it may carry a token)."""
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text[:200]


async def serve(options: ServeOptions) -> None:
    """Serve until SIGINT or SIGTERM; then finish every open run's recording."""
    from acp_proxy.relay.remote import asgi

    config = asgi.config(options.listen_host, options.listen_port)
    timeout = httpx.Timeout(UPSTREAM_CONNECT_TIMEOUT, read=None)
    async with httpx.AsyncClient(verify=system_tls(), timeout=timeout, http2=_has_h2(), trust_env=False) as client:
        app = ProxyApp(options, client)
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:

            async def stop() -> None:
                async for _ in signals:
                    return

            async with trio.open_nursery() as nursery:
                binds = await nursery.start(_serve_task, app, config, stop)
                # Taken from the socket: with port 0, the one the system chose.
                app.port = int(binds[0].rsplit(":", 1)[1])
                say(f"serving {binds[0]} -> {shapes.mask_url(options.upstream)}")
        await app.finish_all()


async def _serve_task(
    app: ProxyApp, config: Any, stop: Callable[[], Awaitable[None]], task_status: Any = trio.TASK_STATUS_IGNORED
) -> None:
    from acp_proxy.relay.remote import listen

    await listen.serve(app, config, stop, task_status=task_status)


def _has_h2() -> bool:
    try:
        import h2  # noqa: F401
    except ImportError:
        return False
    return True
