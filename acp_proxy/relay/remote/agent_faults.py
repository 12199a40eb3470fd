"""Fault rules on a served stdio agent's connections (``serve -- AGENT`` with rules).

Owns: ``AgentFaults``, one connection's gate (a ``relay.remote.faults.ConnectionFaults``) and
what its steps mean for a served agent: on a POSTed client message (the POST's ``Answer``), on
an agent's line on its way to a POST's answer or an SSE stream (a ``StreamEnd`` in the
stream's outbox; ``LOST`` for an initialize whose answer a rule lost), and on each WebSocket
message; ``kill=`` and ``close=agent-stdin`` act on the agent, a process of serve's own.

Must not know: ASGI and HTTP (``agent_server`` answers the POST as the ``Answer`` says), how
the agent is started, watched or stopped, SQL, the rule language. What it needs of the agent,
the connection and the app is the ``ServedAgent``, ``Connection`` and ``Server`` protocols
(``agent_server``'s ``LocalAgent``, ``HttpConnection`` and ``AgentApp``), so this module does
not import the server that uses it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

import trio

from acp_proxy.faults import actions as fl
from acp_proxy.protocol import http_routing as routing
from acp_proxy.relay.pumps import close_quietly
from acp_proxy.relay.remote import faults as remote_faults
from acp_proxy.relay.remote.outbox import Outbox, StreamEnd
from acp_proxy.relay.remote.runs import RemoteRun


class ServedAgent(Protocol):
    """What a fault rule acts on in a connection's agent process."""

    @property
    def pid(self) -> int: ...

    @property
    def stdin(self) -> Any: ...

    async def send_line(self, data: bytes) -> bool: ...


class Connection(Protocol):
    """An HTTP connection as its faults see it: its agent, its routes, its streams' outboxes and
    the initialize POSTs waiting for their answer."""

    @property
    def agent(self) -> ServedAgent: ...

    @property
    def routes(self) -> routing.Routes: ...

    @property
    def outboxes(self) -> dict[str, Outbox]: ...

    @property
    def waiters(self) -> dict[str, tuple[trio.Event, list[bytes]]]: ...

    def outbox(self, key: str) -> Outbox: ...


C = TypeVar("C", bound=Connection)
C_contra = TypeVar("C_contra", bound=Connection, contravariant=True)


class Server(Protocol[C_contra]):
    """The app the connections belong to: the barriers they share, and where an agent's line
    goes (a POST's answer or an SSE stream)."""

    @property
    def barriers(self) -> remote_faults.Barriers: ...

    async def _deliver(self, connection: C_contra, line: bytes, *, record: bool) -> None: ...


LOST = b""
"""Put in an initialize's waiter when a fault rule lost its answer: the POST's answer is cut off."""


@dataclass
class Answer:
    """What the client of one POST is answered once the fault gate has spoken."""

    status: int = 202
    body: bytes = b""
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    cut: bool = False  # no complete response reaches the client
    delivered: bool = False  # the client's message reached the agent


class AgentFaults(remote_faults.ConnectionFaults, Generic[C]):
    """One Streamable HTTP connection of a served stdio agent through the fault gate: a POSTed
    client message, or an agent's line on its way to a POST's answer or an SSE stream.

    What each step means here: a Forward goes on (to the agent's stdin, or routed to the
    client); a Send is a line the gate made (an error answer) sent the same way; ``status=``
    answers the POST with that status; ``abort`` cuts the POST's answer, or the SSE stream the
    frame travels on, mid-event; ``close=stream`` answers the POST 202, or ends the frame's SSE
    stream cleanly; ``drop=after`` delivers the message and cuts its POST's answer; ``kill=``
    signals the agent's process group and ``close=agent-stdin`` closes its stdin (a served agent
    is a process of ours); ``close=client-stdout`` ends the connection's SSE streams; ``restart``
    has no upstream connection to restart here and says so in the run."""

    def __init__(
        self,
        plan: Any,
        run: RemoteRun | None,
        agent: ServedAgent,
        app: Server[C],
        connection: C | None = None,
    ) -> None:
        super().__init__(plan, run, app.barriers)
        self.agent = agent
        self.app = app
        self._connection = connection  # None: a WebSocket
        self.ended = False  # a fault rule closed the WebSocket: nothing more goes either way

    @property
    def connection(self) -> C:
        assert self._connection is not None, "an HTTP connection's faults only"
        return self._connection

    async def _process(self, step: Any, stream: str) -> bool:
        """The steps only a served agent has a meaning for; False if ``step`` is not one."""
        from acp_proxy.faults.gate import ClosePipe, Signal

        agent = self.agent
        if isinstance(step, Signal):
            self.event(f"signal {step.signum} sent to the agent by a fault rule", stream)
            try:
                os.killpg(agent.pid, step.signum)
            except (ProcessLookupError, PermissionError):
                pass
        elif isinstance(step, ClosePipe) and step.pipe == "agent-stdin":
            self.event("the agent's stdin was closed by a fault rule", stream)
            await close_quietly(agent.stdin)
        elif isinstance(step, ClosePipe):
            self.event("the connection's event streams were closed by a fault rule", stream)
            for outbox in list(self.connection.outboxes.values()):
                outbox.end(StreamEnd())
        else:
            return False
        return True

    async def client_message(self, body: bytes) -> Answer | None:
        """A POSTed client message through the gate: what its POST is answered, or None when the
        gate cannot judge it (the caller relays it as usual)."""
        from acp_proxy.faults.gate import Forward, Wire
        from acp_proxy.faults.gate import Send as Write

        steps = self.judge("c2a", body)
        if steps is None:
            return None
        answer = Answer()
        for step in steps:
            if await self._process(step, "post"):
                continue
            if await self.common(step, "post"):
                if isinstance(step, Wire) and isinstance(step.action, fl.Drop):
                    answer.cut = True  # drop=after: delivered, its answer lost on the way
                continue
            if isinstance(step, Forward | Write) and step.direction == "c2a":
                for line in self.lines["c2a"].feed(step.data):
                    if isinstance(step, Forward):
                        self.message("c2a", line, "post")
                    answer.delivered = await self.connection.agent.send_line(line) or answer.delivered
            elif isinstance(step, Write):  # an answer made by the gate (error=): where the agent's would go
                for line in self.lines["a2c"].feed(step.data):
                    await self.app._deliver(self.connection, line, record=False)
            elif isinstance(step, Wire):
                self._wire_post(step.action, answer)
        return answer

    async def websocket_message(
        self,
        direction: str,
        data: bytes,
        out: Callable[[str, bytes], Awaitable[bool]],
        close: Callable[[int], Awaitable[None]],
    ) -> bool:
        """One WebSocket message through the gate, either way; False once nothing more goes
        that way. ``close=stream`` (and close=client-stdout) close the socket with 1000,
        ``status=`` with 1013 (try again later), after the frame's note is recorded; ``abort``
        drops it without a close frame (the client sees 1006 or 1011)."""
        from acp_proxy.faults.gate import ClosePipe, Forward, Wire
        from acp_proxy.faults.gate import Send as Write

        if self.ended:
            return False
        steps = self.judge(direction, routing.one_line(data))
        if steps is None:
            self.message(direction, data, "websocket")
            return await out(direction, data)
        going = True
        closing: list[tuple[str, int]] = []
        for step in steps:
            if isinstance(step, ClosePipe) and step.pipe == "client-stdout":
                closing.append(("close=client-stdout: the client side closed", 1000))
            elif isinstance(step, Wire) and isinstance(step.action, fl.Close):
                closing.append(("the WebSocket was closed by a fault rule (1000, both sides)", 1000))
            elif isinstance(step, Wire) and isinstance(step.action, fl.Status):
                text = f"closed with {remote_faults.WEBSOCKET_TRY_AGAIN_LATER} (try again later) for status="
                closing.append((f"{text}{step.action.code}", remote_faults.WEBSOCKET_TRY_AGAIN_LATER))
            elif await self._process(step, "websocket") or await self.common(step, "websocket"):
                continue
            elif isinstance(step, Forward | Write):
                for line in self.lines[step.direction].feed(step.data):
                    if isinstance(step, Forward):
                        self.message(step.direction, line, "websocket")
                    going = await out(step.direction, line) and going
            elif isinstance(step, Wire) and isinstance(step.action, fl.Abort):
                self.event("connection aborted by a fault rule (no close handshake)", "websocket")
                self.ended = True
                raise remote_faults.StreamCut("aborted by a fault rule")
            elif isinstance(step, Wire) and isinstance(step.action, fl.Restart):
                self.event("restart: a served stdio agent has no upstream connection to restart", "websocket")
        for text, code in closing[:1]:
            self.event(text, "websocket")
            self.ended = True
            await close(code)
            going = False
        return going

    def _wire_post(self, action: fl.Action, answer: Answer) -> None:
        if isinstance(action, fl.Status):
            said = {"error": f"acp-proxy: HTTP {action.code} by a fault rule ({action.rule_text})"}
            answer.status, answer.body = action.code, json.dumps(said).encode()
            if action.retry_after is not None:
                answer.headers.append((b"retry-after", str(action.retry_after).encode()))
        elif isinstance(action, fl.Abort):
            answer.cut = True
        elif isinstance(action, fl.Restart):
            self.event("restart: a served stdio agent has no upstream connection to restart", "post")
        # close=stream: the POST's exchange ends, accepted (202, the answer it gets anyway)

    async def agent_message(self, line: bytes) -> bool:
        """An agent's line through the gate; False when the gate cannot judge it (the caller
        routes it as usual)."""
        from acp_proxy.faults.gate import Forward, Wire
        from acp_proxy.faults.gate import Send as Write

        steps = self.judge("a2c", line)
        if steps is None:
            return False
        connection = self.connection
        fields = routing.read(line)
        initialize = fields.is_response and (fields.id_key or "") in connection.waiters
        stream = "post" if initialize else _stream_of(connection.routes.peek(fields))
        forwarded = False
        for step in steps:
            if await self._process(step, stream):
                continue
            if await self.common(step, stream):
                continue
            if isinstance(step, Forward | Write) and step.direction == "a2c":
                for out in self.lines["a2c"].feed(step.data):
                    forwarded = True
                    await self.app._deliver(connection, out, record=isinstance(step, Forward))
            elif isinstance(step, Write):  # an error answer to the agent's request: to its stdin
                for out in self.lines["c2a"].feed(step.data):
                    await connection.agent.send_line(out)
            elif isinstance(step, Wire) and isinstance(step.action, fl.Abort | fl.Close) and not initialize:
                key = connection.routes.peek(fields)
                end = StreamEnd(None if isinstance(step.action, fl.Close) else _half_event(line))
                if end.partial is None:
                    self.event("the stream was closed by a fault rule", stream)
                connection.outbox(key).end(end)
                forwarded = True  # the frame went with its stream, as far as it got
            elif isinstance(step, Wire) and isinstance(step.action, fl.Restart):
                self.event("restart: a served stdio agent has no upstream connection to restart", stream)
        if initialize and not forwarded:
            waiter = connection.waiters.pop(fields.id_key or "", None)
            if waiter is not None:  # the initialize's answer lost on its way: its POST is cut off
                waiter[1].append(LOST)
                waiter[0].set()
        return True


def _stream_of(key: str) -> str:
    return f"sse:{key}" if key else "sse"


def _half_event(line: bytes) -> bytes:
    event = b"data: " + line + b"\n\n"
    return event[: len(event) // 2]
