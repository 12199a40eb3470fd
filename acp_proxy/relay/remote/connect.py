"""``acp-proxy run --connect URL``: a stdio client (an editor) talks to a remote agent.

Owns: the bridge between the proxy's stdin/stdout (one JSON-RPC message a line) and one remote
connection: a WebSocket (``ws://``, ``wss://``: one text message a line) or Streamable HTTP
(``http://``, ``https://``: each line POSTed with the ``Acp-Connection-Id``/``Acp-Session-Id``
headers the transport RFD asks for, the agent's messages read from the POST answers and from the
GET SSE streams — the connection's, and each session's once a message names it), the extra
request headers (credentials: relayed, never recorded), what an upstream that is down, answers
something that is not ACP or goes away ends with (one line on stderr, exit 1, recorded), and
the fault gate on the messages when rules are given.

Must not know: SQL, click, the recorder. Recording is ``runs.RemoteRun`` (journal first, then
forward); routing fields come from ``protocol.http_routing``. Bytes are forwarded as they came,
except that a message the agent sends with line breaks becomes one line (``one_line``): stdio
frames messages by lines.
"""

from __future__ import annotations

import os
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import trio
import trio_websocket

from acp_proxy.protocol import http_routing as routing
from acp_proxy.relay.pumps import close_quietly, open_stream, trio_streams
from acp_proxy.relay.remote import shapes
from acp_proxy.relay.remote.runs import RemoteRun
from acp_proxy.relay.spawn import say

CONNECTION_ID = "acp-connection-id"
SESSION_ID = "acp-session-id"
CONNECT_TIMEOUT = 30.0
CLOSE_TIMEOUT = 5.0  # the agent's side of a closing handshake, awaited this long at most
MAX_WEBSOCKET_MESSAGE = 256 * 1024 * 1024
FAILED = 1  # the exit status when the remote side failed the conversation
PROXY_ERROR = -32603  # JSON-RPC "internal error": a request the upstream refused over HTTP


@dataclass
class ConnectOptions:
    url: str
    headers: list[tuple[str, str]] = field(default_factory=list)  # sent upstream, never recorded
    db_path: Path | None = None  # None: --no-record
    argv: list[str] = field(default_factory=list)  # masked already
    fault_plan: Any = None


class Bridge:
    """One stdio client, one remote connection, one run."""

    def __init__(self, options: ConnectOptions) -> None:
        self.options = options
        self.url = options.url
        self.masked = shapes.mask_url(options.url)
        scheme = urlsplit(options.url).scheme
        self.transport = "websocket" if scheme in ("ws", "wss") else "http"
        self.secure = scheme in ("https", "wss")
        self.run: RemoteRun | None = None
        if options.db_path is not None:
            self.run = RemoteRun(
                options.db_path,
                options.argv,
                {"upstream": self.masked, "connection": None, "bridge": "run --connect"},
                transport=self.transport,
                connection=None,
                fault_plan=options.fault_plan,
            )
        self.gate: Any = None
        if options.fault_plan:
            from acp_proxy.faults.gate import Gate

            self.gate = Gate(plan=options.fault_plan)
        self.failure: str | None = None
        self.closing = False  # the client ended: what the upstream does next is no failure
        self.connection: str | None = None
        self.unnamed: list[Callable[[RemoteRun], None]] = []
        """Journal writes that wait for the connection's name (see ``_journal``)."""
        self.session_streams: set[str] = set()
        self.client_out: Any = None
        self.scope = trio.CancelScope()
        # http
        self.client: httpx.AsyncClient | None = None
        self.nursery: trio.Nursery | None = None
        # websocket
        self.socket: trio_websocket.WebSocketConnection | None = None

    # -- the end -----------------------------------------------------------------------------

    def fail(self, why: str, stream: str) -> None:
        """The remote side failed the conversation: say it once, record it, stop."""
        if self.closing:
            return  # the client's end came first: the rest is the orderly close
        self._named()
        if self.failure is None:
            self.failure = why
            say(why)
            if self.run is not None:
                self.run.event(why, stream=stream)
        self.scope.cancel()

    async def main(self) -> int:
        streams = trio_streams()
        client_in = open_stream(os.dup(0), streams)
        self.client_out = open_stream(os.dup(1), streams)
        try:
            with self.scope:
                if self.transport == "websocket":
                    await self._websocket(client_in)
                else:
                    await self._http(client_in)
        finally:
            await close_quietly(client_in)
            await close_quietly(self.client_out)
            for fd in (0, 1):
                try:
                    os.set_blocking(fd, True)  # the pipes' descriptions are shared with the client
                except OSError:
                    pass
        code = FAILED if self.failure is not None else 0
        self._named()
        if self.run is not None:
            with trio.CancelScope(shield=True):
                await self.run.finish(code)
        return code

    # -- both transports: lines in, messages out ---------------------------------------------

    async def _read_client(self, client_in: Any) -> None:
        """Each line of stdin is one message upstream (through the gate when there is one)."""
        pending = b""
        while True:
            try:
                data = await client_in.receive_some(65536)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                data = b""
            if not data:
                break
            if self.gate is not None:
                await self._carry_out(self.gate.chunk("c2a", data), "c2a")
                continue
            pending += data
            *lines, pending = pending.split(b"\n")
            for line in lines:
                await self._forward("c2a", line, self._c2a_stream())
        if self.gate is not None:
            await self._carry_out(self.gate.end("c2a"), "c2a")
        elif pending.strip():
            await self._forward("c2a", pending, self._c2a_stream())
        self.closing = True

    def _c2a_stream(self) -> str:
        return "websocket" if self.transport == "websocket" else "post"

    async def _forward(self, direction: str, line: bytes, stream: str) -> None:
        """Journal, then deliver, one message."""
        line = line.rstrip(b"\r")
        if not line.strip():
            return
        self._journal(lambda run, ts: run.message(direction, line, stream=stream, ts_ns=ts))
        await self._deliver(direction, line)

    def _journal(self, write: Callable[[RemoteRun, int], None]) -> None:
        """Journal now, with the time it is now. Over HTTP the connection is named by the answer
        to the first POST (the initialize), after that message went: it is journaled once the
        answer's head is here, before the answer is passed on, with the time it went, so it
        carries the connection as the later messages do (a proxy killed in between loses it)."""
        if self.run is None:
            return
        now = time.time_ns()
        if self.transport == "http" and self.connection is None and self.failure is None:
            self.unnamed.append(lambda run: write(run, now))
        else:
            write(self.run, now)

    def _named(self) -> None:
        """What waited for the connection's name is journaled (with it, if there is one)."""
        waiting, self.unnamed = self.unnamed, []
        if self.run is not None:
            for write in waiting:
                write(self.run)

    async def _from_agent(self, message: bytes, stream: str) -> None:
        """A message of the agent, towards stdin's writer."""
        if self.transport == "http":
            session = routing.read(message).session
            if session is not None and session not in self.session_streams and self.nursery is not None:
                # The SDK client's rule: a message naming a new session opens that session's stream.
                self.session_streams.add(session)
                self.nursery.start_soon(self._sse, session)
        if self.gate is not None:
            await self._carry_out(self.gate.chunk("a2c", routing.one_line(message) + b"\n"), "a2c", stream)
        else:
            await self._forward("a2c", message, stream)

    async def _deliver(self, direction: str, line: bytes) -> None:
        if direction == "a2c":
            data = routing.one_line(line) + b"\n"
            if await self.client_out.send_counted(data) < len(data):
                self.closing = True  # the client stopped reading: the conversation is over
                self.scope.cancel()
        elif self.transport == "websocket":
            assert self.socket is not None
            try:
                text: str | bytes = line.decode()
            except UnicodeDecodeError:  # not text: it can only travel as a binary message
                text = line
            try:
                await self.socket.send_message(text)
            except trio_websocket.ConnectionClosed:
                self.fail(f"the agent at {self.masked} closed the WebSocket", "websocket")
        else:
            await self._post(line)

    async def _carry_out(self, steps: list[Any], direction: str, stream: str | None = None) -> None:
        """The gate's steps: each line it writes is one message."""
        from acp_proxy.faults.gate import Forward, Note, Pause, Send

        where = stream or self._c2a_stream()
        for step in steps:
            if isinstance(step, Forward | Send):
                for line in step.data.split(b"\n"):
                    if not line.strip():
                        continue
                    if isinstance(step, Forward):
                        await self._forward(step.direction, line, where if step.direction == direction else "proxy")
                    else:
                        await self._deliver(step.direction, line)
            elif isinstance(step, Note):
                self._journal(_noted(step, where))
            elif isinstance(step, Pause):
                await trio.sleep(step.seconds)
            # A Signal or a ClosePipe has no process or pipe to act on here: skipped.

    # -- WebSocket ---------------------------------------------------------------------------

    async def _websocket(self, client_in: Any) -> None:
        # A refused handshake is raised by the socket's reader task too: out of the nursery.
        try:
            await self._websocket_session(client_in)
        except* trio_websocket.ConnectionRejected as group:
            exc = _first(group)
            assert isinstance(exc, trio_websocket.ConnectionRejected)
            kind = shapes.header(list(exc.headers or ()), "content-type") or "no content-type"
            why = f"the agent at {self.masked} refused the WebSocket: HTTP {exc.status_code} ({kind})"
            self.fail(why, "websocket")
        except* (OSError, trio.TooSlowError, trio_websocket.HandshakeError) as group:
            self.fail(f"the agent at {self.masked} cannot be reached: {_short(_first(group))}", "websocket")

    async def _websocket_session(self, client_in: Any) -> None:
        extra = [(name.encode("latin-1"), value.encode("latin-1")) for name, value in self.options.headers]
        async with trio.open_nursery() as nursery:
            with trio.fail_after(CONNECT_TIMEOUT):
                self.socket = await trio_websocket.connect_websocket_url(
                    nursery,
                    self.url,
                    ssl_context=ssl.create_default_context() if self.secure else None,
                    extra_headers=extra,
                    max_message_size=MAX_WEBSOCKET_MESSAGE,
                )
            socket = self.socket
            self._established(shapes.header(list(socket.handshake_headers), CONNECTION_ID))

            async def agent_to_client() -> None:
                while True:
                    try:
                        message = await socket.get_message()
                    except trio_websocket.ConnectionClosed as exc:
                        code = exc.reason.code if exc.reason is not None else 1006
                        self.fail(f"the agent at {self.masked} closed the WebSocket (code {code})", "websocket")
                        return
                    data = message.encode() if isinstance(message, str) else message
                    await self._from_agent(data, "websocket")

            nursery.start_soon(agent_to_client)
            try:
                await self._read_client(client_in)
            finally:
                with trio.CancelScope(shield=True), trio.move_on_after(CLOSE_TIMEOUT):
                    await socket.aclose(code=1000)
                nursery.cancel_scope.cancel()

    def _established(self, connection: str | None) -> None:
        self.connection = connection
        if self.run is not None and connection is not None:
            self.run.connected(connection)
        self._named()

    # -- Streamable HTTP ---------------------------------------------------------------------

    def _headers(self, session: str | None = None, **extra: str) -> dict[str, str]:
        headers = dict(self.options.headers)
        if self.connection is not None:
            headers[CONNECTION_ID] = self.connection
        if session is not None:
            headers[SESSION_ID] = session
        headers.update(extra)
        return headers

    async def _http(self, client_in: Any) -> None:
        timeout = httpx.Timeout(CONNECT_TIMEOUT, read=None)
        async with (
            httpx.AsyncClient(verify=ssl.create_default_context(), timeout=timeout, http2=_has_h2()) as client,
            trio.open_nursery() as nursery,
        ):
            self.client, self.nursery = client, nursery
            try:
                await self._read_client(client_in)
            finally:
                nursery.cancel_scope.cancel()
                if self.connection is not None:
                    with trio.CancelScope(shield=True), trio.move_on_after(5):
                        try:
                            await client.request("DELETE", self.url, headers=self._headers())
                        except httpx.HTTPError:
                            pass

    async def _post(self, line: bytes) -> None:
        assert self.client is not None
        fields = routing.read(line)
        headers = self._headers(routing.session_header(fields), **{"content-type": "application/json"})
        try:
            response = await self.client.post(self.url, content=line, headers=headers)
        except httpx.HTTPError as exc:
            self.fail(f"the agent at {self.masked} cannot be reached: {type(exc).__name__}: {_short(exc)}", "post")
            return
        status = response.status_code
        kind = response.headers.get("content-type", "")
        if self.connection is None:
            connection = response.headers.get(CONNECTION_ID)
            if status != 200 or not connection or "json" not in kind:
                self._named()  # the message that was answered so, before its answer
                self._refused(response, fields)
                self.fail(
                    f"the agent at {self.masked} answered the first POST with HTTP {status} "
                    f"({kind or 'no content-type'}), not an ACP connection",
                    "post",
                )
                return
            self._established(connection)
            assert self.nursery is not None
            self.nursery.start_soon(self._sse, None)
        if 200 <= status < 300:
            if response.content.strip():
                await self._from_agent(response.content, "post")
            return
        self._refused(response, fields)
        if fields.is_request:
            # The client waits for an answer the agent never got: it gets one, made here, so
            # that it does not wait forever.
            why = f"acp-proxy: the agent's endpoint answered HTTP {status}: {response.text[:200]}"
            made = routing.error_response(line, PROXY_ERROR, why)
            if made is not None:
                await self._forward("a2c", made, "proxy")

    def _refused(self, response: httpx.Response, fields: routing.Fields) -> None:
        """Record an HTTP error answer as what it is."""
        status, kind = response.status_code, response.headers.get("content-type") or "no content-type"
        if self.run is not None and response.content:
            self.run.message("a2c", response.content, stream="post", note=f"HTTP {status} answer to a POST ({kind})")
        if self.connection is not None:
            say(f"the agent's endpoint answered a POST ({fields.method or 'a response'}) with HTTP {status}")

    async def _sse(self, session: str | None) -> None:
        """One GET SSE stream, its messages to the client. The connection's stream ending is
        the agent going away; a session's may end."""
        assert self.client is not None
        stream = f"sse:{session}" if session else "sse"
        headers = self._headers(session, accept="text/event-stream")
        ended = f"the agent at {self.masked} ended the connection's event stream"
        try:
            async with self.client.stream("GET", self.url, headers=headers) as response:
                if response.status_code != 200:
                    await response.aread()
                    self._refused(response, routing.Fields(False))
                    ended = f"the agent at {self.masked} refused the event stream: HTTP {response.status_code}"
                else:
                    events = shapes.SseEvents()
                    async for chunk in response.aiter_raw():
                        for message in events.feed(chunk):
                            await self._from_agent(message, stream)
        except httpx.HTTPError as exc:
            ended = f"the agent at {self.masked} dropped the event stream: {type(exc).__name__}: {_short(exc)}"
        if session is None:
            self.fail(ended, stream)
        else:
            self.session_streams.discard(session)
            if self.run is not None and not self.closing:
                self.run.event(ended.replace("connection's", f"session {session}'s"), stream=stream)


def _noted(note: Any, stream: str) -> Callable[[RemoteRun, int], None]:
    """Journal the gate's ``Note`` (bound now: it may be written later, see ``Bridge._journal``)."""
    return lambda run, ts: run.noted(note.direction, note.line, note.meta, stream=stream, ts_ns=ts)


def _first(group: BaseExceptionGroup[Any]) -> BaseException:
    """The first leaf of an exception group."""
    exc: BaseException = group
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc


def _short(exc: BaseException) -> str:
    """An exception in one line, without an address (it may carry a token)."""
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text.split(" for url ")[0][:200]


def _has_h2() -> bool:
    try:
        import h2  # noqa: F401
    except ImportError:
        return False
    return True


def run_connected(options: ConnectOptions) -> int:
    """Bridge stdin/stdout to ``options.url`` until stdin ends or the agent goes; the exit status."""
    return trio.run(Bridge(options).main)
