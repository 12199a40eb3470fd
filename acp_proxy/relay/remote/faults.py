"""Fault rules on the remote wire: the gate's steps carried out on WebSocket messages, POSTed
client messages, SSE events and JSON answers, and the barriers of ``hold=``/``release=``.

Owns: a connection's ``Gate`` (one per run: nth=, first= count within it), what each step does
on each transport (a ``Forward``/``Send`` becomes a WebSocket message, a POST upstream, an SSE
event or the answer to a POST; ``Wire`` steps restart the upstream connection, close or abort a
stream, answer an HTTP status, half-close a direction), the ``Barriers`` every connection of one
serve shares, and cutting a stream without its end (``StreamCut``).

Must not know: the rule language, SQL, JSON-RPC meaning (the gate and its tracker know it),
hypercorn beyond ASGI. ``server`` hands messages here only when serve has fault rules; without
them its fast paths forward bytes as they came. What a fault did is recorded through the gate's
``Note``s (``RemoteRun.noted``): the same ``faults`` rows as a stdio run's.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import trio
import trio_websocket

from acp_proxy.faults import actions as fl
from acp_proxy.faults.gate import (
    AwaitBarrier,
    ClosePipe,
    Forward,
    Gate,
    Note,
    Pause,
    ReleaseBarrier,
    Send,
    Step,
    Wire,
)
from acp_proxy.protocol import transports
from acp_proxy.relay.remote.runs import RemoteRun

Receive = Callable[[], Awaitable[dict[str, Any]]]
SendAsgi = Callable[[dict[str, Any]], Awaitable[None]]
WEBSOCKET_TRY_AGAIN_LATER = 1013  # RFC 6455 registry: the WebSocket's transient "come back later"


class StreamCut(Exception):
    """A stream cut on purpose (a dropped upstream stream, an abort fault): raised to the ASGI
    server so the client sees the same abrupt end; never logged as a failure."""


class Barriers:
    """Named barriers for hold=NAME: released once, they stay released."""

    def __init__(self) -> None:
        self._events: dict[str, trio.Event] = {}

    def _event(self, name: str) -> trio.Event:
        return self._events.setdefault(name, trio.Event())

    def release(self, name: str) -> None:
        self._event(name).set()

    async def wait(self, name: str, seconds: float | None) -> bool:
        """True when released, False when ``seconds`` passed first."""
        with trio.move_on_after(seconds if seconds is not None else float("inf")):
            await self._event(name).wait()
            return True
        return False


class Lines:
    """What the gate writes in one direction, as whole messages: a message transport has no
    partial lines, so pieces (split=) are joined again and a line is sent once complete."""

    def __init__(self) -> None:
        self.pending = b""

    def feed(self, data: bytes) -> list[bytes]:
        buffer = self.pending + data
        *lines, self.pending = buffer.split(b"\n")
        return lines


class ConnectionFaults:
    """One remote connection's gate and what its steps do that is the same on both transports."""

    def __init__(self, plan: Any, run: RemoteRun | None, barriers: Barriers) -> None:
        self.gate = Gate(plan=plan)
        self.plan = plan
        self.run = run
        self.barriers = barriers
        self.lines = {"c2a": Lines(), "a2c": Lines()}
        self.pending: list[Callable[[RemoteRun], None]] = []
        """What happened before the run existed (an HTTP initialize), recorded once it does."""

    # What is recorded goes to the run, or waits for it with the time it happened.

    def _record(self, write: Callable[[RemoteRun, int], None]) -> None:
        now = time.time_ns()
        if self.run is not None:
            write(self.run, now)
        else:
            self.pending.append(lambda run: write(run, now))

    def message(self, direction: str, data: bytes, stream: str, note: str | None = None) -> None:
        self._record(lambda run, ts: run.message(direction, data, stream=stream, ts_ns=ts, note=note))

    def noted(self, direction: str, line: Any, meta: dict[str, Any], stream: str) -> None:
        self._record(lambda run, ts: run.noted(direction, line, meta, stream=stream, ts_ns=ts))

    def event(self, text: str, stream: str) -> None:
        self._record(lambda run, ts: run.event(text, stream=stream, ts_ns=ts))

    def adopt(self, run: RemoteRun | None) -> None:
        """The run now exists: what waited for it is recorded."""
        self.run = run
        pending, self.pending = self.pending, []
        if run is not None:
            for write in pending:
                write(run)

    def judge(self, direction: str, message: bytes) -> list[Step] | None:
        """The gate's steps for one message; None when the gate cannot judge it as one line
        (several lines in one message: it passes by, as a multi-line stdio write would not)."""
        if b"\n" in message or b"\r" in message:
            return None
        return self.gate.chunk(direction, message + b"\n")

    async def common(self, step: Step, stream: str) -> bool:
        """Carry out a step that means the same on every transport; False if it is not one."""
        if isinstance(step, Note):
            self.noted(step.direction, step.line, step.meta, stream)
        elif isinstance(step, Pause):
            await trio.sleep(step.seconds)
        elif isinstance(step, AwaitBarrier):
            released = await self.barriers.wait(step.barrier, step.seconds)
            if not released:
                self.event(f"hold={step.barrier}: not released in time, the frame goes on", stream)
        elif isinstance(step, ReleaseBarrier):
            self.barriers.release(step.barrier)
            self.event(f"barrier {step.barrier} released by a fault rule", stream)
        elif isinstance(step, Wire) and isinstance(step.action, fl.HalfClose):
            self.event(f"{step.action.direction} half-closed by a fault rule", stream)
        elif isinstance(step, Wire) and isinstance(step.action, fl.Drop):
            pass  # drop=after on a transport without a per-message answer: the gate loses the response
        elif not isinstance(step, Forward | Send | Wire | ClosePipe):
            pass  # Signal: a remote agent is no process of ours
        else:
            return False
        return True


# -- WebSocket -------------------------------------------------------------------------------


class WebSocketFaults(ConnectionFaults):
    """A WebSocket connection through the gate. ``reconnect`` opens a new upstream socket (the
    same address and headers) for restart."""

    def __init__(
        self,
        plan: Any,
        run: RemoteRun | None,
        barriers: Barriers,
        send: SendAsgi,
        upstream: trio_websocket.WebSocketConnection,
        reconnect: Callable[[], Awaitable[trio_websocket.WebSocketConnection]],
    ) -> None:
        super().__init__(plan, run, barriers)
        self.send = send
        self.upstream = upstream
        self.reconnect = reconnect
        self.ended = trio.Event()
        """Set when a fault closed or aborted the connection: the relay stops."""

    async def out(self, direction: str, message: str | bytes) -> None:
        if direction == "c2a":
            await self.upstream.send_message(message)
        elif isinstance(message, str):
            await self.send({"type": "websocket.send", "text": message})
        else:
            await self.send({"type": "websocket.send", "bytes": message})

    async def carry(self, direction: str, message: str | bytes) -> None:
        steps = None if isinstance(message, bytes) else self.judge(direction, message.encode())
        if steps is None:
            if self.run is not None:
                data = message.encode() if isinstance(message, str) else message
                note = None if isinstance(message, str) else "binary WebSocket message"
                self.run.message(direction, data, stream="websocket", note=note)
            await self.out(direction, message)
            return
        closing: list[Step] = []  # a close comes before its frame's Note: it is done after it
        for step in steps:
            if self.ended.is_set():
                return
            if isinstance(step, ClosePipe) or (isinstance(step, Wire) and isinstance(step.action, fl.Close)):
                closing.append(step)
                continue
            if await self.common(step, "websocket"):
                continue
            if isinstance(step, Forward | Send):
                for line in self.lines[step.direction].feed(step.data):
                    if isinstance(step, Forward) and self.run is not None:
                        self.run.message(step.direction, line, stream="websocket")
                    try:
                        text: str | bytes = line.decode()
                    except UnicodeDecodeError:  # a corrupt= fault: it can only travel as binary
                        text = line
                    await self.out(step.direction, text)
            elif isinstance(step, Wire):
                await self.wire(step.action)
        for step in closing:
            if isinstance(step, ClosePipe):
                self._event(f"close={step.pipe}: the {'agent' if step.pipe == 'agent-stdin' else 'client'} side closed")
                await self.close(upstream=step.pipe == "agent-stdin", client=step.pipe == "client-stdout")
            else:
                self._event("the WebSocket was closed by a fault rule (1000, both sides)")
                await self.close(upstream=True, client=True)

    async def wire(self, action: fl.Action) -> None:
        if isinstance(action, fl.Restart):
            old = self.upstream
            self.upstream = await self.reconnect()  # before the old one closes: its reader moves on
            with trio.CancelScope(shield=True):
                await old.aclose()
            accepted = dict((k.decode("latin-1").lower(), v) for k, v in self.upstream.handshake_headers)
            named = accepted.get("acp-connection-id", b"").decode("latin-1")
            self._event(
                "the upstream WebSocket was restarted by a fault rule: a new connection " + (named or "(no id)")
            )
        elif isinstance(action, fl.Status):
            self._event(f"closed with {WEBSOCKET_TRY_AGAIN_LATER} (try again later) for status={action.code}")
            await self.close(upstream=True, client=True, code=WEBSOCKET_TRY_AGAIN_LATER)
        elif isinstance(action, fl.Abort):
            # ASGI cannot write half a WebSocket frame: the record boundary is where it is cut
            # (as the RFD's WebSocket proxy does). The agent's socket is dropped without a close
            # frame; the client's ends as an ASGI server ends a socket its app abandoned (1011).
            self._event("connection aborted by a fault rule (no close handshake)")
            stream = getattr(self.upstream, "_stream", None)
            if stream is not None:
                with trio.CancelScope(shield=True):
                    await stream.aclose()
            self.ended.set()
            raise StreamCut("aborted by a fault rule")

    async def close(self, *, upstream: bool, client: bool, code: int = 1000) -> None:
        if client:
            await self.send({"type": "websocket.close", "code": code})
            self.ended.set()
        if upstream:
            with trio.CancelScope(shield=True):
                await self.upstream.aclose(code=1000)
            self.ended.set()

    def _event(self, text: str) -> None:
        if self.run is not None:
            self.run.event(text, stream="websocket")


async def relay_websocket(receive: Receive, faults: WebSocketFaults) -> None:
    """Both directions of a WebSocket through the gate, until either side closes (or a fault
    ends the connection)."""
    run = faults.run
    send = faults.send
    try:
        async with trio.open_nursery() as nursery:

            async def ended() -> None:
                await faults.ended.wait()
                nursery.cancel_scope.cancel()

            async def client_to_agent() -> None:
                while True:
                    event = await receive()
                    if event["type"] == "websocket.disconnect":
                        code = event.get("code", 1000)
                        if run is not None and code not in (1000, 1001, 1005):
                            run.event(f"the client closed the WebSocket: code {code}", stream="websocket")
                        good = 1000 <= code < 5000 and code not in (1005, 1006)
                        with trio.CancelScope(shield=True):
                            await faults.upstream.aclose(code=code if good else 1000)
                        break
                    if event["type"] != "websocket.receive":
                        continue
                    text = event.get("text")
                    try:
                        await faults.carry("c2a", text if text is not None else event.get("bytes") or b"")
                    except trio_websocket.ConnectionClosed:
                        if not faults.ended.is_set():
                            break
                nursery.cancel_scope.cancel()

            async def agent_to_client() -> None:
                while True:
                    upstream = faults.upstream
                    try:
                        message = await upstream.get_message()
                    except trio_websocket.ConnectionClosed as exc:
                        if upstream is not faults.upstream:
                            continue  # restarted: read the new one
                        if faults.ended.is_set():
                            return
                        code = exc.reason.code if exc.reason is not None else 1000
                        if run is not None and code not in (1000, 1001, 1005):
                            reason = exc.reason.reason if exc.reason is not None else None
                            said = f"the agent closed the WebSocket: code {code}" + (f" ({reason})" if reason else "")
                            run.event(said, stream="websocket")
                        await send({"type": "websocket.close", "code": {1005: 1000, 1006: 1011}.get(code, code)})
                        break
                    await faults.carry("a2c", message)
                nursery.cancel_scope.cancel()

            nursery.start_soon(ended)
            nursery.start_soon(client_to_agent)
            nursery.start_soon(agent_to_client)
    finally:
        with trio.CancelScope(shield=True):
            await faults.upstream.aclose()  # the one in use: a restart made a new one


# -- Streamable HTTP -------------------------------------------------------------------------


class Answer:
    """What the client of one POST is answered, once the gate has spoken."""

    def __init__(self) -> None:
        self.status: int | None = None
        self.headers: list[tuple[bytes, bytes]] = []
        self.body = b""
        self.cut = False  # the answer is cut off: no complete response reaches the client
        self.stream: Any = None  # an SSE answer, open: the server relays it through the gate


Got = tuple[int, list[tuple[bytes, bytes]], Any]
"""An upstream answer: status, headers, and its body (bytes), or an open SSE response."""
Post = Callable[[bytes], Awaitable[Got]]


class HttpFaults(ConnectionFaults):
    """One Streamable HTTP connection (a run) through the gate. ``restart`` gives the
    connection new upstream HTTP connections; a ``Post`` sends one message upstream (with the
    headers of the exchange at hand) and returns its (status, headers, body)."""

    def __init__(
        self, plan: Any, run: RemoteRun | None, barriers: Barriers, restart: Callable[[], Awaitable[None]]
    ) -> None:
        super().__init__(plan, run, barriers)
        self.restart = restart
        self.post: Post | None = None
        self.post_cut: Callable[[bytes], Awaitable[None]] | None = None

    async def client_message(
        self, body: bytes, stream: str, post: Post, post_cut: Callable[[bytes], Awaitable[None]]
    ) -> Answer | None:
        """A POSTed client message through the gate: what its client is answered, or None when
        the gate cannot judge it (the caller relays it as usual). ``post_cut`` sends a POST
        whose body is cut off after the bytes given."""
        self.post, self.post_cut = post, post_cut
        steps = self.judge("c2a", body)
        if steps is None:
            return None
        answer = Answer()
        delivered: list[tuple[bytes, Got]] = []
        lose_answer = False
        for step in steps:
            if await self.common(step, stream):
                if isinstance(step, Wire) and isinstance(step.action, fl.Drop):
                    lose_answer = True
                continue
            if isinstance(step, Forward | Send) and step.direction == "c2a":
                for line in self.lines["c2a"].feed(step.data):
                    if isinstance(step, Forward):
                        self.message("c2a", line, stream)
                    delivered.append((line, await post(line)))
            elif isinstance(step, Send):  # an error reply to the client: the POST's answer
                for line in self.lines["a2c"].feed(step.data):
                    answer.status, answer.body = 200, line
                    answer.headers = [(b"content-type", b"application/json")]
            elif isinstance(step, Wire):
                await self._wire_post(step.action, answer, stream)
            elif isinstance(step, ClosePipe):
                pass  # no pipes on this wire: close=stream says it
        # The answer of the POST that carried the client's own message (not a copy or an
        # injected one), else of the last one; none delivered (drop): accepted, as if it was.
        own = next((got for line, got in delivered if line == body), delivered[-1][1] if delivered else None)
        taken = own if answer.status is None and not answer.cut and not lose_answer else None
        for _, got in delivered:
            if got is not taken and not isinstance(got[2], bytes):
                await got[2].aclose()  # an SSE answer nobody will read (a copy's, a lost one)
        if answer.status is None and not answer.cut:
            if own is None:
                answer.status = 202
            elif not isinstance(own[2], bytes):
                answer.status, answer.headers = own[0], own[1]
                answer.stream = own[2] if taken is not None else None
            else:
                answer.status, answer.headers, answer.body = own
                if answer.body:
                    await self._answer_body(answer, stream)
        if lose_answer:
            answer.cut = True
        return answer

    async def _answer_body(self, answer: Answer, stream: str) -> None:
        """The upstream's answer to a POST, when it has a body: a JSON-RPC message judged like
        any other (dropped: the answer is lost, cut off), else recorded as what it was."""
        status = answer.status or 200
        kind = next((v.decode("latin-1") for k, v in answer.headers if k.lower() == b"content-type"), "")
        steps = self.judge("a2c", answer.body) if 200 <= status < 300 and "json" in kind else None
        if steps is None:
            self.message("a2c", answer.body, stream, transports.http_answer_note(status, "POST", kind))
            return
        body: bytes | None = None
        for step in steps:
            if await self.common(step, stream):
                continue
            if isinstance(step, Forward | Send) and step.direction == "a2c":
                for line in self.lines["a2c"].feed(step.data):
                    if isinstance(step, Forward):
                        self.message("a2c", line, stream)
                    body = line if body is None else body  # one message per body: copies cannot follow
            elif isinstance(step, Wire) and isinstance(step.action, fl.Abort):
                answer.cut = True
            elif isinstance(step, Wire) and isinstance(step.action, fl.Close):
                answer.status, answer.body, body = 202, b"", b""
            elif isinstance(step, Wire) and isinstance(step.action, fl.Restart):
                await self.restart()
                self.event("the upstream HTTP connections were restarted by a fault rule", stream)
        if body is None:
            answer.cut, answer.body = True, b""  # dropped: the answer is lost on its way
        elif not answer.cut:
            answer.body = body

    async def _wire_post(self, action: fl.Action, answer: Answer, stream: str) -> None:
        if isinstance(action, fl.Status):
            answer.status = action.code
            said = {"error": f"acp-proxy: HTTP {action.code} by a fault rule ({action.rule_text})"}
            answer.body = json.dumps(said).encode()
            answer.headers = [(b"content-type", b"application/json")]
            if action.retry_after is not None:
                answer.headers.append((b"retry-after", str(action.retry_after).encode()))
        elif isinstance(action, fl.Abort):
            if self.post_cut is not None:
                await self.post_cut(action.partial)
            answer.cut = True
        elif isinstance(action, fl.Restart):
            await self.restart()
            self.event("the upstream HTTP connections were restarted by a fault rule", stream)
        elif isinstance(action, fl.Close):  # close=stream: the POST's exchange ends, accepted
            answer.status = 202

    async def sse(self, receive: Receive, send: SendAsgi, chunks: Any, stream: str) -> str:
        """An SSE stream through the gate: each event with one data line is judged; comments,
        keepalives and the bytes between events go as they came. Returns how it ended."""
        blocks = SseBlocks()
        async for chunk in chunks:
            for raw, data in blocks.feed(chunk):
                steps = None if data is None else self.judge("a2c", data)
                if steps is None or data is None:
                    if data is not None:
                        self.message("a2c", data, stream)
                    await send({"type": "http.response.body", "body": raw, "more_body": True})
                    continue
                ended = await self._event_steps(steps, raw, data, send, stream)
                if ended:
                    return ended
        tail = blocks.rest()
        if tail:
            await send({"type": "http.response.body", "body": tail, "more_body": True})
        return ""

    async def _event_steps(self, steps: list[Step], raw: bytes, data: bytes, send: SendAsgi, stream: str) -> str:
        closed = ""  # a close comes before its frame's Note: the stream ends once that is recorded
        for step in steps:
            if closed and not isinstance(step, Note):
                continue
            if await self.common(step, stream):
                continue
            if isinstance(step, Forward | Send) and step.direction == "a2c":
                for line in self.lines["a2c"].feed(step.data):
                    if isinstance(step, Forward):
                        self.message("a2c", line, stream)
                    # The event as it came when its message is unchanged, else a plain one.
                    body = raw if line == data else b"data: " + line + b"\n\n"
                    await send({"type": "http.response.body", "body": body, "more_body": True})
            elif isinstance(step, Send):  # an error reply to the agent's request: a POST of its own
                for line in self.lines["c2a"].feed(step.data):
                    if self.post is not None:  # the last client POST's headers (its connection)
                        await self.post(line)
            elif isinstance(step, ClosePipe) and step.pipe == "client-stdout":
                closed = "closed"
            elif isinstance(step, Wire):
                action = step.action
                if isinstance(action, fl.Close):
                    closed = "closed"
                if isinstance(action, fl.Abort):
                    await send({"type": "http.response.body", "body": raw[: len(raw) // 2], "more_body": True})
                    raise StreamCut("aborted mid-event by a fault rule")
                if isinstance(action, fl.Restart):
                    await self.restart()
                    self.event("the upstream HTTP connections were restarted by a fault rule", stream)
        return closed


class SseBlocks:
    """An SSE byte stream cut into whole events, each with its raw bytes (forwarded unchanged)
    and its data (None for comments and keepalives). Bytes are never changed: joined, the raw
    blocks and ``rest`` are the stream."""

    def __init__(self) -> None:
        self.pending = b""

    def feed(self, chunk: bytes) -> list[tuple[bytes, bytes | None]]:
        self.pending += chunk
        found: list[tuple[bytes, bytes | None]] = []
        while True:
            end, size = _event_end(self.pending)
            if end < 0:
                return found
            raw, self.pending = self.pending[: end + size], self.pending[end + size :]
            found.append((raw, _data_of(raw[:end])))

    def rest(self) -> bytes:
        rest, self.pending = self.pending, b""
        return rest


def _event_end(buffer: bytes) -> tuple[int, int]:
    """Where the first blank line (the end of an event) starts, and its length; (-1, 0)."""
    best = (-1, 0)
    for sep in (b"\r\n\r\n", b"\n\n", b"\r\r"):
        at = buffer.find(sep)
        if at >= 0 and (best[0] < 0 or at < best[0]):
            best = (at, len(sep))
    return best


def _data_of(block: bytes) -> bytes | None:
    data = [
        line[5:].removeprefix(b" ")
        for line in block.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")
        if line.startswith(b"data:")
    ]
    return b"\n".join(data) if data else None
