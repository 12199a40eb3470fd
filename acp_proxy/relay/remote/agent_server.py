"""``acp-proxy serve -- AGENT ...``: a stdio agent served to remote clients.

Owns: one endpoint (``/acp`` or any path) for WebSocket and Streamable HTTP in front of a stdio
agent, one agent process per client connection (the simple, safe choice: no two clients ever
share an agent's state, and a connection's end is its agent's end), the relay of each WebSocket
text message to one stdio line and back, and for HTTP what the SDK's server does (the
reference: ``acp.http.server``): ``initialize`` POSTed without a connection starts one (its
answer in the POST's body, with ``Acp-Connection-Id``), every other POST is 202 and goes to the
agent, the agent's messages go out on the connection's or a session's GET SSE stream
(``protocol.http_routing.Routes``), DELETE ends the connection and its agent; the errors (400,
404, 406, 415, 501, 504) are the SDK's. A stream's messages wait in its ``Outbox``
(``relay.remote.outbox``: at most ``OUTBOX`` messages and ``OUTBOX_BYTES`` bytes): a reader that
lags holds back its own agent, never serve's memory or another connection.

With fault rules, each connection has its own gate (``relay.remote.agent_faults.AgentFaults``
on HTTP: the gate's steps on POSTed messages, the initialize's answer and SSE events, with
``relay.remote.faults``' barriers and vocabulary; on WebSocket ``AgentFaults.websocket_message``),
recorded as the same ``faults`` rows.

The agent is started and watched with ``relay.spawn`` (its own process group, its parent-death
signal, the run's marker in its environment); when its connection ends, its stdin is closed,
then it gets ``grace`` seconds, SIGTERM, ``grace`` more, SIGKILL, and what it left behind with
the marker is stopped too — never another connection's live agent (serve is every agent's
subreaper, so they are spared by pid). Its stderr goes to the proxy's and into the run, line by
line.

Must not know: SQL, click, JSON-RPC beyond the routing fields. Bytes are relayed, never
re-encoded: a WebSocket text message is written as it came (line breaks, only whitespace in JSON,
become spaces: stdio frames by lines), an agent's line is sent as it came.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from acp_proxy.protocol import http_routing as routing
from acp_proxy.protocol.framing import Line
from acp_proxy.record import journal as jr
from acp_proxy.record import supervise
from acp_proxy.relay.pumps import close_quietly, open_stream, trio_streams
from acp_proxy.relay.remote import faults as remote_faults
from acp_proxy.relay.remote import shapes
from acp_proxy.relay.remote.agent_faults import LOST, AgentFaults, Answer
from acp_proxy.relay.remote.asgi import MAX_BODY, BodyTooLarge, Receive, Scope, Send, front_door, read_body, refuse
from acp_proxy.relay.remote.outbox import Outbox, Outgoing, StreamEnd
from acp_proxy.relay.remote.runs import RemoteRun
from acp_proxy.relay.spawn import RelayError, resolve_agent, say, spawn_agent

CONNECTION_ID = "acp-connection-id"
SESSION_ID = "acp-session-id"
INITIALIZE_TIMEOUT = 30.0  # the SDK's: a hung agent must not hold the initialize POST forever
KEEPALIVE = 15.0  # an idle SSE stream's comment, as the SDK's server sends it
JSON = [(b"content-type", b"application/json")]


@dataclass
class AgentServeOptions:
    agent: list[str]
    db_path: Path | None  # None: --no-record
    listen_host: str
    listen_port: int
    allowed_hosts: frozenset[str] = frozenset()
    argv: list[str] = field(default_factory=list)
    grace: float = 2.0
    fault_plan: Any = None  # a FaultPlan: its rules apply to every connection, each its own plan
    redact: list[str] | None = None  # serve --redact: runs store masked copies (the rules stay unrecorded)


class LocalAgent:
    """One connection's agent process, its pipes as trio streams."""

    def __init__(self, argv: list[str], grace: float, siblings: set[LocalAgent] | None = None) -> None:
        self.marker = supervise.new_marker()
        agent = spawn_agent(resolve_agent(argv), argv, self.marker, attached=False)
        self.process = agent.process
        self.pid = agent.pid
        self.siblings = siblings if siblings is not None else set()
        """Every connection's agent not yet waited for, this one too: what ``stop`` must spare."""
        self.siblings.add(self)
        streams = trio_streams()
        self.stdin = open_stream(agent.stdin_fd, streams)
        self.stdout = open_stream(agent.stdout_fd, streams)
        self.stderr = open_stream(agent.stderr_fd, streams)
        self.grace = grace
        self.exited = trio.Event()
        self.returncode: int | None = None
        self.stopping = False

    async def send_line(self, data: bytes) -> bool:
        """Write one message as one line; False once the agent's stdin is gone."""
        line = routing.one_line(data) + b"\n"
        return bool(await self.stdin.send_counted(line) == len(line))

    @staticmethod
    async def lines(stream: Any, too_long: Callable[[int], None] | None = None) -> AsyncIterator[bytes]:
        """The stream's lines, each at most ``MAX_BODY`` bytes; ``too_long(size)`` for each longer
        one, which is left out (no transport would carry it as one message)."""
        cutter = shapes.LineCutter(MAX_BODY)
        while True:
            try:
                data = await stream.receive_some(65536)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                data = b""
            lines = cutter.feed(data) if data else cutter.end()
            for size in cutter.too_long:
                if too_long is not None:
                    too_long(size)
            cutter.too_long.clear()
            for line in lines:
                yield line
            if not data:
                break

    async def wait(self) -> int:
        """Its exit status (minus the signal that ended it); the one waiter."""
        try:
            pidfd = os.pidfd_open(self.pid)
        except (AttributeError, OSError):
            pidfd = -1
        if pidfd >= 0:
            try:
                await trio.lowlevel.wait_readable(pidfd)
            finally:
                os.close(pidfd)
            code = self.process.wait()
        else:
            code = await trio.to_thread.run_sync(self.process.wait, abandon_on_cancel=True)
        self.returncode = code
        self.siblings.discard(self)
        self.exited.set()
        return code

    async def stop(self) -> None:
        """stdin closed, ``grace``, SIGTERM to its group, ``grace``, SIGKILL; then the run's
        other processes (the marker's). Safe to call more than once."""
        if self.stopping:
            return
        self.stopping = True
        with trio.CancelScope(shield=True):
            await close_quietly(self.stdin)
            for sig in (signal.SIGTERM, signal.SIGKILL):
                with trio.move_on_after(self.grace):
                    await self.exited.wait()
                if self.exited.is_set():
                    break
                try:
                    os.killpg(self.pid, sig)
                except (ProcessLookupError, PermissionError):
                    pass
            # Serve is the subreaper of every connection's agent: the live ones (this one too,
            # whose status its waiter takes) are no orphans of this run to stop or reap.
            spared = [agent.pid for agent in self.siblings]
            await trio.to_thread.run_sync(supervise.stop_marked, self.marker, self.grace, spared)


def _journal_stderr(run: RemoteRun | None, line: bytes) -> None:
    """The agent's stderr line, in the run beside its messages."""
    if run is None or run.finished:
        return
    meta = {"transport": run.transport, "connection": run.connection, "stream": "stderr"}
    record = Line(line, len(line), True, False)
    run.recording.journal.record(jr.LINE, jr.STDERR, time.time_ns(), jr.line_payload(record, meta))


def _too_long(connection: str, run: RemoteRun | None, stream: str) -> Callable[[int], None]:
    """What a line of the agent's stdout over ``MAX_BODY`` bytes becomes: left out, said on
    serve's stderr and recorded as the connection's transport event."""

    def left_out(size: int) -> None:
        why = f"the agent wrote a line of {size:,} bytes (over {MAX_BODY // 2**20} MiB): not forwarded"
        say(f"connection {connection}: {why}")
        if run is not None:
            run.event(why, stream=stream)

    return left_out


async def _pass_stderr(agent: LocalAgent, run: RemoteRun | None) -> None:
    def left_out(size: int) -> None:
        say(f"the agent's stderr had a line of {size:,} bytes: left out")

    async for line in agent.lines(agent.stderr, left_out):
        _journal_stderr(run, line)
        try:
            os.write(2, line + b"\n")
        except OSError:
            pass


@dataclass(eq=False)  # one object per connection: hashable by identity
class HttpConnection:
    """One Acp-Connection-Id: its agent, its run, its streams and who waits for what."""

    id: str
    agent: LocalAgent
    run: RemoteRun | None
    routes: routing.Routes = field(default_factory=routing.Routes)
    outboxes: dict[str, Outbox] = field(default_factory=dict)
    waiters: dict[str, tuple[trio.Event, list[bytes]]] = field(default_factory=dict)
    gone: bool = False
    faults: AgentFaults[HttpConnection] | None = None  # with fault rules: this connection's gate

    def outbox(self, key: str) -> Outbox:
        if key not in self.outboxes:
            self.outboxes[key] = Outbox()
        return self.outboxes[key]


class AgentApp:
    """The ASGI application of ``serve -- AGENT``."""

    def __init__(self, options: AgentServeOptions, nursery: trio.Nursery) -> None:
        self.options = options
        self.nursery = nursery  # the connections' agents outlive the requests that started them
        self.port = options.listen_port
        self.connections: dict[str, HttpConnection] = {}
        self.live: set[HttpConnection] = set()
        self.barriers = remote_faults.Barriers()  # hold=/release= barriers: shared by every connection
        self.agents: set[LocalAgent] = set()  # the connections' agents not yet waited for

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if await front_door(scope, receive, send, self.port, self.options.allowed_hosts):
            return
        kind = scope["type"]
        if kind == "websocket":
            await self._websocket(scope, receive, send)
        elif kind == "http":
            await self._http(scope, receive, send)

    def _new_run(self, transport: str, connection: str, agent: LocalAgent, plan: Any = None) -> RemoteRun | None:
        if self.options.db_path is None:
            return None
        return RemoteRun(
            self.options.db_path,
            self.options.argv,
            {"agent": self.options.agent, "connection": connection},
            transport=transport,
            connection=connection,
            agent_pid=agent.pid,
            fault_plan=plan,
            redact=self.options.redact,
        )

    def _new_gate(self) -> tuple[Any, Any]:
        """A connection's own fault plan (nth=, first= count within it) and its gate, or Nones."""
        plan = self.options.fault_plan
        if not plan:
            return None, None
        from acp_proxy.faults.gate import Gate
        from acp_proxy.faults.plan import FaultPlan

        own = FaultPlan(plan.rules, plan.seed)
        return own, Gate(plan=own)

    def _start_agent(self) -> LocalAgent | str:
        """A new agent, or why there is none."""
        try:
            return LocalAgent(self.options.agent, self.options.grace, self.agents)
        except RelayError as exc:
            return str(exc)
        except OSError as exc:
            return f"{self.options.agent[0]}: {(exc.strerror or str(exc)).lower()}"

    # -- WebSocket: one text message, one line -----------------------------------------------

    async def _websocket(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (await receive())["type"] != "websocket.connect":
            return
        agent = self._start_agent()
        if isinstance(agent, str):
            say(f"the agent could not be started: {agent}")
            await refuse(scope, send, 502, f"acp-proxy: the agent could not be started: {agent}")
            return
        connection = uuid.uuid4().hex
        plan, _ = self._new_gate()
        run = self._new_run("websocket", connection, agent, plan)
        faults = AgentFaults(plan, run, agent, self) if plan else None
        await send({"type": "websocket.accept", "headers": [(CONNECTION_ID.encode(), connection.encode())]})
        code = 0

        async def out(direction: str, line: bytes) -> bool:
            if direction == "c2a":
                return await agent.send_line(line)
            try:
                message: dict[str, Any] = {"type": "websocket.send", "text": line.decode()}
            except UnicodeDecodeError:  # not text (a corrupt= fault): only as a binary message
                message = {"type": "websocket.send", "bytes": line}
            await send(message)
            return True

        async def close(code: int) -> None:
            """A fault rule ends the connection: the client's socket closed with ``code``, then
            the agent stopped (its end ends the relay, as when it exits on its own)."""
            try:
                await send({"type": "websocket.close", "code": code})
            except Exception:  # the client left first: nothing to close
                pass
            await agent.stop()

        async def carry(direction: str, data: bytes) -> bool:
            """Journal, then forward, one message; through the fault gate when there are rules."""
            if faults is None:
                if run is not None:
                    run.message(direction, data, stream="websocket")
                return await out(direction, data)
            return await faults.websocket_message(direction, data, out, close)

        try:
            async with trio.open_nursery() as nursery:

                async def client_to_agent() -> None:
                    while True:
                        event = await receive()
                        if event["type"] == "websocket.disconnect":
                            break
                        if event["type"] != "websocket.receive":
                            continue
                        text = event.get("text")
                        if text is None:  # the SDK's server ignores binary messages too
                            if run is not None:
                                note = "binary WebSocket message, not relayed"
                                run.message("c2a", event.get("bytes") or b"", stream="websocket", note=note)
                            continue
                        if not await carry("c2a", text.encode()):
                            break
                    await agent.stop()

                async def agent_to_client() -> None:
                    async for line in agent.lines(agent.stdout, _too_long(connection, run, "websocket")):
                        if line.strip():
                            await carry("a2c", line)
                    await agent.exited.wait()
                    why = f"the agent exited with status {agent.returncode}"
                    if not agent.stopping:  # on its own, before its connection ended
                        say(f"connection {connection}: {why}")
                        if run is not None:
                            run.event(why, stream="websocket")
                    try:
                        await send({"type": "websocket.close", "code": 1000 if agent.returncode == 0 else 1011})
                    except Exception:  # the client left first: nothing to close
                        pass
                    nursery.cancel_scope.cancel()

                nursery.start_soon(client_to_agent)
                nursery.start_soon(agent_to_client)
                nursery.start_soon(_pass_stderr, agent, run)
                code = await agent.wait()
        finally:
            with trio.CancelScope(shield=True):
                await agent.stop()
                code = agent.returncode if agent.returncode is not None else code
                if run is not None:
                    await run.finish(code if code >= 0 else 128 - code)

    # -- Streamable HTTP ---------------------------------------------------------------------

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        method = scope["method"]
        headers = scope["headers"]
        try:
            body = await read_body(receive) if method in ("POST", "DELETE") else b""
        except BodyTooLarge as exc:
            await _answer(send, 413, json.dumps({"error": str(exc)}).encode())
            return
        if method == "POST":
            await self._post(headers, body, send)
        elif method == "GET":
            await self._get(headers, receive, send)
        elif method == "DELETE":
            await self._delete(headers, send)
        else:
            await _answer(send, 405, b'{"error": "Method not allowed"}')

    async def _post(self, headers: list[tuple[bytes, bytes]], body: bytes, send: Send) -> None:
        kind = shapes.header(headers, "content-type")
        connection = self.connections.get(shapes.header(headers, CONNECTION_ID) or "")
        run = connection.run if connection is not None else None

        async def refuse(status: int, error: str) -> None:
            answer = f'{{"error": "{error}"}}'.encode()
            if run is not None:
                run.message("c2a", body, stream="post")
                run.message("a2c", answer, stream="post", note=f"HTTP {status} answer to a POST")
            await _answer(send, status, answer)

        if kind is None or not kind.lower().startswith("application/json"):
            return await refuse(415, "Content-Type must be application/json")
        fields = routing.read(body)
        if not fields.json:
            shape = _json_shape(body)
            if shape == "array":
                return await refuse(501, "Batch requests are not supported")
            return await refuse(400, "Invalid JSON" if shape == "invalid" else "Invalid JSON-RPC message")
        if routing.is_initialize(fields):
            return await self._initialize(body, fields, send)
        if shapes.header(headers, CONNECTION_ID) is None:
            return await refuse(400, "Missing connection id")
        if connection is None:
            return await refuse(404, "Unknown connection id")
        session = shapes.header(headers, SESSION_ID)
        if fields.method in routing.SESSION_SCOPED and session is None:
            return await refuse(400, "Missing session id header")
        if session is not None and session not in connection.routes.sessions:
            return await refuse(404, "Unknown session id")
        connection.routes.from_client(fields)
        if connection.faults is not None:
            answer = await connection.faults.client_message(body)
            if answer is not None:
                return await _give(send, answer)
        if connection.run is not None:
            connection.run.message("c2a", body, stream="post")
        await connection.agent.send_line(body)
        await _answer(send, 202, b"")

    async def _initialize(self, body: bytes, fields: routing.Fields, send: Send) -> None:
        agent = self._start_agent()
        if isinstance(agent, str):
            say(f"the agent could not be started: {agent}")
            return await _answer(send, 500, b'{"error": "initialize failed"}')
        connection_id = uuid.uuid4().hex
        plan, _ = self._new_gate()
        connection = HttpConnection(connection_id, agent, self._new_run("http", connection_id, agent, plan))
        waiter: tuple[trio.Event, list[bytes]] = (trio.Event(), [])
        connection.waiters[fields.id_key or ""] = waiter
        self.connections[connection.id] = connection
        if plan:
            connection.faults = AgentFaults(plan, connection.run, agent, self, connection)
        self.nursery.start_soon(self._supervise, connection)
        answer = await connection.faults.client_message(body) if connection.faults is not None else None
        if answer is None:
            if connection.run is not None:
                connection.run.message("c2a", body, stream="post")
            await agent.send_line(body)
        elif answer.status != 202 or answer.cut or not answer.delivered:
            # Refused, cut or never delivered by a fault rule: the client learns no connection.
            await self._end(connection)
            return await _give(send, answer)
        with trio.move_on_after(INITIALIZE_TIMEOUT):
            await _first(waiter[0], agent.exited)
        if waiter[1] == [LOST]:  # its answer was lost on its way (a fault rule): cut off
            await self._end(connection)
            return await _give(send, Answer(200, cut=True))
        if not waiter[1]:
            failed = b'{"error": "initialize timed out"}' if not agent.exited.is_set() else None
            await self._end(connection)
            if failed is not None:
                return await _answer(send, 504, failed)
            return await _answer(send, 500, b'{"error": "initialize failed"}')
        await _answer(send, 200, waiter[1][0], [(CONNECTION_ID.encode(), connection.id.encode())])

    async def _supervise(self, connection: HttpConnection) -> None:
        """The agent's life: its messages routed to the streams, its stderr, its exit."""
        self.live.add(connection)
        agent, run = connection.agent, connection.run
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_pass_stderr, agent, run)

            async def agent_out() -> None:
                async for line in agent.lines(agent.stdout, _too_long(connection.id, run, "sse")):
                    if line.strip():
                        await self._route(connection, line)
                for outbox in connection.outboxes.values():
                    outbox.close()
                connection.gone = True

            nursery.start_soon(agent_out)
            code = await agent.wait()
        self.connections.pop(connection.id, None)
        connection.gone = True
        for outbox in connection.outboxes.values():
            outbox.close()
        if not agent.stopping:  # on its own, before its connection ended
            say(f"connection {connection.id}: the agent exited with status {code}")
            if run is not None:
                run.event(f"the agent exited with status {code}", stream="sse")
        self.live.discard(connection)
        if run is not None:
            await run.finish(code if code >= 0 else 128 - code)

    async def _route(self, connection: HttpConnection, line: bytes) -> None:
        if connection.faults is not None and await connection.faults.agent_message(line):
            return
        await self._deliver(connection, line, record=True)

    async def _deliver(self, connection: HttpConnection, line: bytes, *, record: bool) -> None:
        """An agent's message to where the SDK's server sends it: the initialize POST's answer,
        else the connection's or a session's SSE stream; journaled first when ``record``."""
        fields = routing.read(line)
        run = connection.run if record else None
        waiter = connection.waiters.pop(fields.id_key or "", None) if fields.is_response else None
        if waiter is not None:  # initialize's answer: the POST's body
            if run is not None:
                run.message("a2c", line, stream="post")
            waiter[1].append(line)
            waiter[0].set()
            return
        key = connection.routes.to_client(fields)
        if run is not None:
            run.message("a2c", line, stream=f"sse:{key}" if key else "sse")
        await connection.outbox(key).put(line)

    async def _get(self, headers: list[tuple[bytes, bytes]], receive: Receive, send: Send) -> None:
        accept = shapes.header(headers, "accept") or ""
        if "text/event-stream" not in accept and "*/*" not in accept:
            return await _answer(send, 406, b'{"error": "Accept must include text/event-stream"}')
        connection_id = shapes.header(headers, CONNECTION_ID)
        session = shapes.header(headers, SESSION_ID)
        connection = self.connections.get(connection_id or "")
        if connection_id is None:
            return await _answer(send, 400, b'{"error": "Missing connection id"}')
        if connection is None or connection.gone:
            return await _answer(send, 404, b'{"error": "Unknown connection id"}')
        if session is not None and session not in connection.routes.sessions:
            return await _answer(send, 404, b'{"error": "Unknown session id"}')
        messages = connection.outbox(session or routing.CONNECTION)
        start = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
        await send({"type": "http.response.start", "status": 200, "headers": start})
        async with trio.open_nursery() as nursery:

            async def client_gone() -> None:
                while (await receive())["type"] != "http.disconnect":
                    pass
                nursery.cancel_scope.cancel()

            nursery.start_soon(client_gone)
            while True:
                line: Outgoing | None = None
                with trio.move_on_after(KEEPALIVE) as idle:
                    line = await messages.get()  # cancelled only while it waits: nothing is lost
                if idle.cancelled_caught:
                    await send({"type": "http.response.body", "body": b": keepalive\n\n", "more_body": True})
                    continue
                if line is None:  # the agent is gone
                    break
                if isinstance(line, StreamEnd):  # a fault rule's: closed cleanly, or cut
                    if line.partial is None:
                        break
                    await send({"type": "http.response.body", "body": line.partial, "more_body": True})
                    raise remote_faults.StreamCut("aborted mid-event by a fault rule")
                await send({"type": "http.response.body", "body": b"data: " + line + b"\n\n", "more_body": True})
            nursery.cancel_scope.cancel()
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _delete(self, headers: list[tuple[bytes, bytes]], send: Send) -> None:
        connection_id = shapes.header(headers, CONNECTION_ID)
        if connection_id is None:
            return await _answer(send, 400, b'{"error": "Missing connection id"}')
        connection = self.connections.get(connection_id)
        if connection is None:
            return await _answer(send, 404, b'{"error": "Unknown connection id"}')
        await self._end(connection)
        await _answer(send, 202, b"")

    async def _end(self, connection: HttpConnection) -> None:
        self.connections.pop(connection.id, None)
        await connection.agent.stop()

    async def finish_all(self) -> None:
        """SIGINT or SIGTERM: every connection's agent stopped, its run finished."""
        with trio.CancelScope(shield=True):
            for connection in list(self.connections.values()):
                await self._end(connection)


async def _give(send: Send, answer: Answer) -> None:
    """A POST's answer as the gate decided it; a cut one stops after half its body (or before
    any, with a length it never reaches) and the connection closes without its end."""
    headers = [*(JSON if answer.body else []), *answer.headers]
    if not answer.cut:
        await send({"type": "http.response.start", "status": answer.status, "headers": headers})
        await send({"type": "http.response.body", "body": answer.body})
        return
    length = str(max(len(answer.body), 1) + 1).encode()
    await send(
        {"type": "http.response.start", "status": answer.status, "headers": [*headers, (b"content-length", length)]}
    )
    await send({"type": "http.response.body", "body": answer.body[: len(answer.body) // 2], "more_body": True})
    raise remote_faults.StreamCut("answer cut by a fault rule")


async def _first(*events: trio.Event) -> None:
    async with trio.open_nursery() as nursery:
        for event in events:

            async def wait(event: trio.Event = event) -> None:
                await event.wait()
                nursery.cancel_scope.cancel()

            nursery.start_soon(wait)


def _json_shape(body: bytes) -> str:
    """invalid, array or other: what a POST body that is no JSON object is (the SDK's statuses)."""
    import json

    if not body:
        return "other"  # the SDK reads an empty body as null: no JSON-RPC message
    try:
        value = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return "invalid"
    return "array" if isinstance(value, list) else "other"


async def _answer(send: Send, status: int, body: bytes, extra: list[tuple[bytes, bytes]] | None = None) -> None:
    headers = [*JSON, *(extra or [])] if body else list(extra or [])
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def serve_agent(options: AgentServeOptions) -> None:
    """Serve until SIGINT or SIGTERM; then stop every connection's agent and finish its run."""
    import hypercorn.trio

    from acp_proxy.relay.remote import asgi

    config = asgi.config(options.listen_host, options.listen_port)
    supervise.become_subreaper()  # an agent's orphans are ours to find and stop
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:

        async def stop() -> None:
            async for _ in signals:
                return

        async with trio.open_nursery() as agents:
            app = AgentApp(options, agents)
            async with trio.open_nursery() as nursery:
                binds = await nursery.start(
                    lambda task_status: hypercorn.trio.serve(
                        app,  # type: ignore[arg-type]
                        config,
                        shutdown_trigger=stop,
                        task_status=task_status,
                    )
                )
                app.port = int(binds[0].rsplit(":", 1)[1])
                say(f"serving {binds[0]} -> {options.agent[0]} (one agent per connection)")
            await app.finish_all()
    sys.stderr.flush()
