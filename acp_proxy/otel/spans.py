"""Spans from a recorded conversation: frame rows in, OpenTelemetry span descriptions out.

Owns: the shape of acp-proxy's traces, following the OpenTelemetry semantic conventions for
generative-AI agents and for JSON-RPC:

- one trace per prompt turn, rooted in an ``invoke_agent`` span (kind CLIENT) from the
  ``session/prompt`` request to the frame that ended the turn: ``gen_ai.operation.name``,
  ``gen_ai.provider.name`` (``acp``), ``gen_ai.conversation.id`` (the ACP session id),
  ``gen_ai.agent.id`` / ``gen_ai.agent.name`` / ``gen_ai.agent.version`` (the agent's
  ``initialize`` answer), ``gen_ai.response.finish_reasons`` (the stop reason),
  ``gen_ai.usage.*`` where the agent reported token usage (the unstable ``usage`` of a prompt
  response or of an ``idle`` state update), ``gen_ai.response.time_to_first_chunk``;
- ``execute_tool`` children (kind INTERNAL) for the turn's tool calls, from their first
  ``tool_call`` update to the one that made them ``completed`` or ``failed``:
  ``gen_ai.tool.name``, ``gen_ai.tool.call.id``, ``gen_ai.tool.type`` (``extension``: the agent
  runs them), ``acp.tool.kind``, ``acp.tool.status``;
- every JSON-RPC request as an RPC span (kind CLIENT: the caller's view, whichever side called;
  ``acp.direction`` says which): ``rpc.system.name`` (and the older ``rpc.system``) ``jsonrpc``,
  ``rpc.method``, ``jsonrpc.request.id``, ``network.transport`` (``pipe``),
  ``rpc.response.status_code`` / ``error.type`` on an error answer. Requests of a session with
  a turn open are children of that turn (a permission request of the tool call it names: the
  permission wait, ``acp.permission.outcome``); the rest
  are children of the run's ``acp.connection`` span, a trace of its own that also holds what
  belongs to no turn;
- span events: ``acp.notice`` (live notices), ``acp.cancel``, ``acp.fault`` and ``acp.finding``
  (given with ``annotate``), ``acp.response_unpaired``;
- a proxy chain's inner conversation (what ``proxy/successor`` envelopes carry, unwrapped by
  ``protocol.chains``) as spans of its own, from a builder of its own fed the inner frames, each
  span and measurement with ``acp.hop`` (1 and deeper; the recorded link's own have none);
- metric measurements (``Point``): ``rpc.client.call.duration`` per answered request,
  ``gen_ai.client.operation.duration`` and ``gen_ai.client.operation.time_to_first_chunk`` per
  turn, ``gen_ai.client.token.usage`` per reported count.

Span times are the recorded frame times (ns), so a live trace and an export of the same run have
the same shape. Message text (prompts, agent messages and thoughts, tool input and output) is
in spans only with ``content=True``, as ``gen_ai.input.messages`` / ``gen_ai.output.messages`` /
``gen_ai.tool.call.arguments`` / ``gen_ai.tool.call.result``; every string taken from the wire
passes the redactor.

Where the structure comes from: the protocol's meaning (pairs, turns, cancellations, requests
left unanswered, the negotiated peers) is the events of the connection's state machine
(``protocol.state``), as for every other view; the builder decodes only the payloads it takes
facts from (tool call updates, permission answers, usage, notices, and message text with
``content``). Which turn a frame belongs to, and its first output (``TurnOutput``), are the state
machine's (``protocol.rows.RunReader``), and what counts is ``protocol.output``'s: the same
numbers as the turns table, ``show`` and ``diff``.

Must not know: the OpenTelemetry SDK, HTTP, SQL, clocks. ``ids`` makes span and trace ids:
``recording_ids`` derives them from the recording (the run's identity and the order in which the
builder asks), so exporting a run again sends the same ids and a backend keeps one copy, and a
live trace has the ids a later export of its run sends.

Rule: total and bounded. Any rows give spans or none, never an exception; state is kept only
for what is open (pending requests, open turns and their tool calls).
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec

from acp_proxy.protocol import events as ev
from acp_proxy.protocol import output, wire
from acp_proxy.protocol.chains import SUCCESSOR, Unwrapper
from acp_proxy.protocol.redact import Redactor
from acp_proxy.protocol.rows import RecordedFrame, RunReader
from acp_proxy.protocol.vocabulary import A2C, OTHER

__all__ = ["Annotation", "Point", "Span", "SpanBuilder", "SpanEvent", "build", "fault_annotation", "finding_annotation"]

INTERNAL, CLIENT = "internal", "client"
PROVIDER = "acp"
"""``gen_ai.provider.name`` (required on GenAI spans and metrics): the conventions' value is the
"telemetry flavour" the spans carry; none of the well-known ones (openai, anthropic, ...) is
known to a proxy that sees only ACP, and the ``acp.*`` attributes are ACP's, so ``acp``."""
TOOL_TYPE = "extension"
"""``gen_ai.tool.type``: ACP's tool calls run on the agent's side ("extension" in the
conventions; "function" is a tool the client runs)."""
TRANSPORT = "pipe"
"""``network.transport`` of every JSON-RPC call: ACP runs over the agent's stdin and stdout."""
_TERMINAL_TOOL_STATUS = frozenset({"completed", "failed"})


@dataclass(slots=True)
class SpanEvent:
    name: str
    ts_ns: int
    attributes: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Span:
    """A finished span, ready for any exporter."""

    name: str
    trace_id: int
    span_id: int
    parent_id: int | None
    kind: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any] = field(default_factory=dict)
    events: list[SpanEvent] = field(default_factory=list)
    links: list[tuple[int, int]] = field(default_factory=list)
    """(trace id, span id) of related spans in other traces."""
    error: str | None = None
    """Set: the span's status is ERROR, with this description."""
    session_id: str | None = None
    """The ACP session it concerns (not exported: it selects a session's spans)."""


@dataclass(frozen=True, slots=True)
class Point:
    """One measurement of a histogram metric (seconds, or tokens for the token usage)."""

    metric: str
    value: float
    attributes: dict[str, Any]


def _random_ids(bits: int) -> int:
    return random.getrandbits(bits) or 1


def recording_ids(identity: str) -> Callable[[int], int]:
    """Ids for ``SpanBuilder``: the nth id asked for is a hash of ``identity`` (what names the
    run wherever its database is copied: see ``read.queries.run_identity``) and n, never 0. The
    builder asks in the order of the frames, so the same rows give the same ids."""
    count = 0

    def ids(bits: int) -> int:
        nonlocal count
        count += 1
        digest = hashlib.sha256(f"{identity}\0{count}".encode()).digest()
        return int.from_bytes(digest[: bits // 8], "big") or 1

    return ids


# -- what is open ------------------------------------------------------------------------------


@dataclass(slots=True)
class _Open:
    span: Span


@dataclass(slots=True)
class _Tool(_Open):
    tool_call_id: str
    named: bool = False
    """Its name came from a ``name`` field, which a later ``title`` does not replace."""


@dataclass(slots=True)
class _Turn(_Open):
    prompt_seq: int
    first_output_ns: int | None = None
    chunks: int = 0
    tools: dict[str, _Tool] = field(default_factory=dict)
    output: list[dict[str, Any]] = field(default_factory=list)
    """With content: the agent's message and thought parts, in order."""
    usage: Any = None


@dataclass(slots=True)
class _Request(_Open):
    method: str | None
    direction: str
    tool: _Tool | None = None


class SpanBuilder:
    """Feed a run's frame rows in seq order (``feed``), then ``finish`` when the run is over.

    Each call returns the spans it finished; ``take_points`` hands over the metric
    measurements made so far.
    """

    def __init__(
        self,
        *,
        run_id: int | None = None,
        content: bool = False,
        redactor: Redactor | None = None,
        ids: Callable[[int], int] = _random_ids,
        start_ns: int | None = None,
        hop: int = 0,
    ) -> None:
        self.run_id = run_id
        self.hop = hop
        """0: the recorded link's conversation; n: the one n ``proxy/successor`` envelopes deep."""
        self._chain: Unwrapper | None = None
        self._next: SpanBuilder | None = None
        """The builder of the next hop, once an envelope was seen."""
        self.content = content
        self.redactor = redactor if redactor is not None else Redactor()
        self._ids = ids
        self.reader = RunReader()
        self.state = self.reader.state
        self._agent: dict[str, str] = {}
        self._client: dict[str, str] = {}
        self._version: int | None = None
        self._connection = Span(
            name="acp.connection",
            trace_id=ids(128),
            span_id=ids(64),
            parent_id=None,
            kind=INTERNAL,
            start_ns=start_ns if start_ns is not None else -1,
            end_ns=-1,
            attributes={} if run_id is None else {"acp.run.id": run_id},
        )
        if hop:
            self._connection.attributes["acp.hop"] = hop
        self._turns: dict[int, _Turn] = {}
        """Open turns by the seq of their prompt."""
        self._requests: dict[int, _Request] = {}
        """Pending requests by seq."""
        self._annotations: dict[int, list[SpanEvent]] = {}
        self._last_seq = 0
        self._last_ts = 0
        self._points: list[Point] = []
        self._turn_links: list[tuple[int, int]] = []
        self.finished = False

    # -- input ----------------------------------------------------------------------------------

    def annotate(self, seq: int | None, name: str, ts_ns: int | None, attributes: Mapping[str, Any]) -> None:
        """A fault or finding on frame ``seq`` (at ``ts_ns``; None: the latest frame's time): an
        event on the span that frame belongs to when given before the frame is fed, else on the
        connection span."""
        event = SpanEvent(
            name, -1 if ts_ns is None else ts_ns, {k: self._clean(v) for k, v in attributes.items() if v is not None}
        )
        if seq is not None:
            event.attributes["acp.frame.seq"] = seq
        if seq is None or seq <= self._last_seq:
            if event.ts_ns < 0:
                event.ts_ns = self._last_ts
            self._connection.events.append(event)
        else:
            self._annotations.setdefault(seq, []).append(event)  # its time: the frame's, if not given

    def feed(self, row: Mapping[str, Any]) -> list[Span]:
        """The spans ``row`` (a ``frames`` row) finished, its hop's among them."""
        own = self._hop_marked(self._feed(row))
        if self.finished or (self._chain is None and row.get("method") != SUCCESSOR):
            return own
        if self._chain is None:
            self._chain = Unwrapper()
        inner = self._chain.unwrap(row)
        if inner is None:
            return own
        if self._next is None:
            self._next = SpanBuilder(
                run_id=self.run_id, content=self.content, redactor=self.redactor, ids=self._ids, hop=self.hop + 1
            )
        return own + self._next.feed(inner)

    def _hop_marked(self, spans: list[Span]) -> list[Span]:
        if self.hop:
            for span in spans:
                span.attributes["acp.hop"] = self.hop
        return spans

    def _feed(self, row: Mapping[str, Any]) -> list[Span]:
        if self.finished or row.get("dir") not in OTHER or row.get("kind") == "batch":
            return []
        meaning = self.reader.feed(row)
        frame = RecordedFrame(row)
        self._last_seq = max(self._last_seq, frame.seq)
        self._last_ts = max(self._last_ts, frame.ts_ns)
        if self._connection.start_ns < 0:
            self._connection.start_ns = frame.ts_ns
        out: list[Span] = []
        events = meaning.events
        target: _Open | None = None
        replayed = False
        for e in events:
            if isinstance(e, ev.TurnStarted):
                self._turn_started(e, row)
        for e in events:
            if isinstance(e, ev.RequestSent):
                target = self._request_sent(e, row, meaning.turn)
            elif isinstance(e, ev.ResponsePaired):
                target = self._requests.get(e.request_seq) or target
                out.extend(self._response_paired(e, row))
            elif isinstance(e, ev.TurnEnded):
                out.extend(self._turn_ended(e, row))
            elif isinstance(e, ev.UpdateReplayed):
                replayed = True
            elif isinstance(e, ev.TurnOutput):
                found = self._turns.get(e.prompt_seq)
                if found is not None and found.first_output_ns is None:
                    found.first_output_ns = e.ts_ns
            elif isinstance(e, ev.PeerAnnounced):
                self._peer(e)
            elif isinstance(e, ev.VersionNegotiated):
                self._version = e.version
            elif isinstance(e, ev.SessionCancelled):
                for prompt_seq in e.prompt_seqs:
                    turn = self._turns.get(prompt_seq)
                    if turn is not None:
                        turn.span.events.append(SpanEvent("acp.cancel", e.ts_ns, {"acp.frame.seq": e.seq}))
            elif isinstance(e, ev.ResponseUnpaired):
                self._connection.events.append(
                    SpanEvent(
                        "acp.response_unpaired",
                        e.ts_ns,
                        {"acp.frame.seq": e.seq, "acp.direction": e.direction, "jsonrpc.request.id": _id(e.rpc_id)},
                    )
                )
        turn = self._turns.get(meaning.turn) if meaning.turn is not None else None
        if frame.kind == "notification" and frame.method == "session/update" and frame.dir == A2C and not replayed:
            target = self._update(frame, row, out, turn) or target
        elif target is None:
            target = turn
        pending = self._annotations.pop(frame.seq, None)
        if pending:
            for event in pending:
                if event.ts_ns < 0:
                    event.ts_ns = frame.ts_ns
            (target.span if target is not None else self._connection).events.extend(pending)
        return out

    def finish(self, ts_ns: int | None = None) -> list[Span]:
        """The run is over (at ``ts_ns``, else its last frame): requests never answered, turns
        left open and the connection span (its hop's too)."""
        if self.finished:
            return []
        inner = self._next.finish(ts_ns if ts_ns is not None else self._last_ts) if self._next is not None else []
        return self._hop_marked(self._finish(ts_ns)) + inner

    def _finish(self, ts_ns: int | None) -> list[Span]:
        end = ts_ns if ts_ns is not None else self._last_ts
        out: list[Span] = []
        for e in self.reader.finish(end):
            if isinstance(e, ev.Unanswered):
                request = self._requests.pop(e.request_seq, None)
                if request is not None:
                    request.span.attributes["acp.unanswered"] = True
                    request.span.error = "unanswered when the run ended"
                    out.append(self._close(request.span, end))
            elif isinstance(e, ev.TurnEnded):
                out.extend(self._turn_ended(e, None))
        for request in self._requests.values():
            out.append(self._close(request.span, end))
        for events in self._annotations.values():  # about frames never fed (e.g. stderr lines)
            for event in events:
                event.ts_ns = event.ts_ns if event.ts_ns >= 0 else end
                self._connection.events.append(event)
        self._annotations.clear()
        self._requests.clear()
        self.finished = True
        connection = self._connection
        if connection.start_ns < 0:
            connection.start_ns = end
        connection.attributes.update(self._peer_attributes())
        connection.links.extend(self._turn_links)
        out.append(self._close(connection, max(end, connection.start_ns)))
        return out

    def take_points(self) -> list[Point]:
        points, self._points = self._points, []
        if self.hop:
            points = [Point(p.metric, p.value, {**p.attributes, "acp.hop": self.hop}) for p in points]
        return points + (self._next.take_points() if self._next is not None else [])

    # -- turns ----------------------------------------------------------------------------------

    def _turn_started(self, e: ev.TurnStarted, row: Mapping[str, Any]) -> None:
        agent = self._agent.get("name")
        span = Span(
            name=f"invoke_agent {agent}" if agent else "invoke_agent",
            trace_id=self._ids(128),
            span_id=self._ids(64),
            parent_id=None,
            kind=CLIENT,
            start_ns=e.ts_ns,
            end_ns=-1,
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.provider.name": PROVIDER,
                "gen_ai.conversation.id": e.session_id,
                "acp.turn.index": e.index,
                "acp.prompt.seq": e.prompt_seq,
                # v2 work the agent started itself has no prompt: its seq is the running update's.
                **({"acp.turn.initiator": "agent"} if e.by == "agent" else {}),
                **({} if self.run_id is None else {"acp.run.id": self.run_id}),
            },
            links=[(self._connection.trace_id, self._connection.span_id)],
            session_id=e.session_id,
        )
        turn = _Turn(span, e.prompt_seq)
        if self.content:
            params = _params(row)
            prompt = params.get("prompt") if isinstance(params, dict) else None
            if isinstance(prompt, list):
                parts = [self._part(block) for block in prompt]
                span.attributes["gen_ai.input.messages"] = _json([{"role": "user", "parts": parts}])
        self._turns[e.prompt_seq] = turn
        self._turn_links.append((span.trace_id, span.span_id))

    def _turn_ended(self, e: ev.TurnEnded, row: Mapping[str, Any] | None) -> list[Span]:
        turn = self._turns.pop(e.prompt_seq, None)
        if turn is None:
            return []
        span = turn.span
        attrs = span.attributes
        attrs.update(self._peer_attributes())
        attrs["acp.turn.status"] = e.status
        attrs["acp.turn.ended_by"] = e.by
        if e.protocol_version is not None:
            attrs["acp.protocol.version"] = e.protocol_version
        if e.stop_reason is not None:
            attrs["gen_ai.response.finish_reasons"] = [e.stop_reason]
        if row is not None and e.by == "idle" and turn.usage is None:
            turn.usage = _update_of(row).get("usage")
        usage = self._usage(turn.usage)
        attrs.update(usage)
        attrs["acp.turn.chunks"] = turn.chunks
        if turn.first_output_ns is not None:
            attrs["gen_ai.response.time_to_first_chunk"] = (turn.first_output_ns - span.start_ns) / 1e9
        if self.content and turn.output:
            message: dict[str, Any] = {"role": "assistant", "parts": turn.output}
            if e.stop_reason is not None:
                message["finish_reason"] = e.stop_reason
            attrs["gen_ai.output.messages"] = _json([message])
        if e.status == "error":
            request = row if row is not None else {}
            code = request.get("error_code")
            attrs["error.type"] = str(code) if code is not None else "error"
            span.error = self._clean(request.get("error_message")) or "the prompt was answered with an error"
        elif e.status == "unfinished":
            attrs["error.type"] = "unfinished"
            span.error = "the run ended before the turn did"
        # Tool calls still open (no completed or failed status) end with their turn.
        out = [self._close(tool.span, e.ts_ns) for tool in turn.tools.values() if tool.span.end_ns < 0]
        out.append(self._close(span, e.ts_ns))
        if e.status != "unfinished":
            metric = {"gen_ai.operation.name": "invoke_agent", **self._agent_metric_attributes()}
            if "error.type" in attrs:
                metric["error.type"] = attrs["error.type"]
            self._points.append(Point("gen_ai.client.operation.duration", (e.ts_ns - span.start_ns) / 1e9, metric))
            if turn.first_output_ns is not None:
                self._points.append(
                    Point(
                        "gen_ai.client.operation.time_to_first_chunk",
                        (turn.first_output_ns - span.start_ns) / 1e9,
                        metric,
                    )
                )
            for kind, name in (("input", "gen_ai.usage.input_tokens"), ("output", "gen_ai.usage.output_tokens")):
                if name in usage:
                    self._points.append(
                        Point("gen_ai.client.token.usage", usage[name], {**metric, "gen_ai.token.type": kind})
                    )
        return out

    # -- requests -------------------------------------------------------------------------------

    def _request_sent(self, e: ev.RequestSent, row: Mapping[str, Any], turn_seq: int | None) -> _Request:
        parent: _Open = _Open(self._connection)
        tool: _Tool | None = None
        sid = e.session_id
        turn = self._turns.get(turn_seq) if turn_seq is not None else None
        if turn is not None:
            parent = turn
            if e.method == "session/request_permission":
                tool = self._permission_tool(turn, row)
                if tool is not None:
                    parent = tool
        attrs: dict[str, Any] = {
            "rpc.system.name": "jsonrpc",
            "rpc.system": "jsonrpc",
            "rpc.method": e.method or "",
            "jsonrpc.protocol.version": "2.0",
            "jsonrpc.request.id": _id(e.rpc_id),
            "network.transport": TRANSPORT,
            "acp.direction": e.direction,
            "acp.frame.seq": e.seq,
        }
        if sid is not None:
            attrs["gen_ai.conversation.id"] = sid
        if e.reused_id_of is not None:
            attrs["acp.reused_id_of"] = e.reused_id_of
        span = self._child(parent.span, e.method or "jsonrpc", CLIENT, e.ts_ns, attrs, sid)
        request = _Request(span, e.method, e.direction, tool)
        if e.seq is not None:
            self._requests[e.seq] = request
        return request

    def _response_paired(self, e: ev.ResponsePaired, row: Mapping[str, Any]) -> list[Span]:
        if e.withheld:
            return []  # not forwarded: for the requester the request is still pending
        request = self._requests.pop(e.request_seq, None)
        if request is None:
            return []
        attrs = request.span.attributes
        attrs["acp.response.seq"] = e.seq
        if e.session_id is not None:
            request.span.session_id = request.span.session_id or e.session_id
            attrs.setdefault("gen_ai.conversation.id", e.session_id)
        if e.cut:
            attrs["acp.response.cut"] = True
        if e.cancelled_by is not None:
            attrs["acp.cancelled_by"] = e.cancelled_by
        metric = {"rpc.system.name": "jsonrpc", "rpc.method": e.method or "", "acp.direction": request.direction}
        if e.error:
            code = row.get("error_code")
            status = str(code) if code is not None else "error"
            attrs["rpc.response.status_code"] = status
            attrs["error.type"] = status
            metric["error.type"] = status
            metric["rpc.response.status_code"] = status
            request.span.error = self._clean(row.get("error_message")) or "error"
        elif request.method == "session/request_permission":
            self._permission_answer(request, row)
        self._points.append(Point("rpc.client.call.duration", e.latency_ns / 1e9, metric))
        if request.method == "session/prompt" and not e.error:
            turn = self._turns.get(e.request_seq)
            if turn is not None:
                result = _result(row)
                if isinstance(result, dict) and result.get("usage") is not None:
                    turn.usage = result["usage"]
                if isinstance(result, dict) and isinstance(result.get("messageId"), str):
                    turn.span.attributes["acp.message.id"] = result["messageId"]
        return [self._close(request.span, e.ts_ns)]

    def _permission_tool(self, turn: _Turn, row: Mapping[str, Any]) -> _Tool | None:
        params = _params(row)
        if not isinstance(params, dict):
            return None
        tool_call = params.get("toolCall")
        subject = params.get("subject")
        if not isinstance(tool_call, dict) and isinstance(subject, dict):
            tool_call = subject.get("toolCall") if isinstance(subject.get("toolCall"), dict) else subject
        tool_call_id = tool_call.get("toolCallId") if isinstance(tool_call, dict) else None
        return turn.tools.get(tool_call_id) if isinstance(tool_call_id, str) else None

    def _permission_answer(self, request: _Request, row: Mapping[str, Any]) -> None:
        result = _result(row)
        outcome = result.get("outcome") if isinstance(result, dict) else None
        if isinstance(outcome, dict):
            if isinstance(outcome.get("outcome"), str):
                request.span.attributes["acp.permission.outcome"] = outcome["outcome"]
            if isinstance(outcome.get("optionId"), str):
                request.span.attributes["acp.permission.option_id"] = self._clean(outcome["optionId"])
        elif isinstance(outcome, str):
            request.span.attributes["acp.permission.outcome"] = outcome

    # -- session updates ------------------------------------------------------------------------

    def _update(
        self, frame: RecordedFrame, row: Mapping[str, Any], out: list[Span], turn: _Turn | None
    ) -> _Open | None:
        variant = frame.update_kind
        if variant == "notice":
            update = _update_of(row)
            attrs: dict[str, Any] = {"acp.frame.seq": frame.seq}
            if isinstance(update.get("severity"), str):
                attrs["acp.notice.severity"] = update["severity"]
            if self.content:
                for name in ("title", "description"):
                    if isinstance(update.get(name), str):
                        attrs[f"acp.notice.{name}"] = self._clean(update[name])
            (turn.span if turn is not None else self._connection).events.append(
                SpanEvent("acp.notice", frame.ts_ns, attrs)
            )
            return turn
        if turn is None or variant is None:
            return None
        if output.counts(variant) & output.IS_CHUNK:
            turn.chunks += 1
        if variant in ("tool_call", "tool_call_update"):
            return self._tool_update(turn, frame, row, out) or turn
        if variant == "usage_update":
            update = _update_of(row)
            for name, attr in (("used", "acp.context.used"), ("size", "acp.context.size")):
                if isinstance(update.get(name), int):
                    turn.span.attributes[attr] = update[name]
        elif self.content and variant in ("agent_message_chunk", "agent_thought_chunk"):
            content = _update_of(row).get("content")
            if isinstance(content, dict) and isinstance(content.get("text"), str):
                kind = "text" if variant == "agent_message_chunk" else "reasoning"
                if turn.output and turn.output[-1]["type"] == kind:
                    turn.output[-1]["content"] += self._clean(content["text"])
                else:
                    turn.output.append({"type": kind, "content": self._clean(content["text"])})
        return turn

    def _tool_update(self, turn: _Turn, frame: RecordedFrame, row: Mapping[str, Any], out: list[Span]) -> _Tool | None:
        update = _update_of(row)
        tool_call_id = update.get("toolCallId")
        if not isinstance(tool_call_id, str):
            return None
        tool = turn.tools.get(tool_call_id)
        if tool is None:
            attrs = {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.type": TOOL_TYPE,
                "gen_ai.tool.call.id": self._clean(tool_call_id),
                "gen_ai.conversation.id": turn.span.session_id,
                "acp.tool.kind": "other",
                "acp.tool.status": "pending",
            }
            span = self._child(turn.span, "execute_tool", INTERNAL, frame.ts_ns, attrs, turn.span.session_id)
            tool = turn.tools[tool_call_id] = _Tool(span, tool_call_id)
        span = tool.span
        if span.end_ns >= 0:
            return tool  # already completed or failed: later updates change nothing exported
        attrs = span.attributes
        named = isinstance(update.get("name"), str)
        name = update["name"] if named else update.get("title")
        if isinstance(name, str) and (named or not tool.named):
            attrs["gen_ai.tool.name"] = self._clean(name)
            span.name = f"execute_tool {attrs['gen_ai.tool.name']}"
            tool.named = tool.named or named
        if isinstance(update.get("kind"), str):
            attrs["acp.tool.kind"] = update["kind"]
        status = update.get("status")
        if isinstance(status, str):
            attrs["acp.tool.status"] = status
        if self.content:
            for key, attr in (("rawInput", "gen_ai.tool.call.arguments"), ("rawOutput", "gen_ai.tool.call.result")):
                if update.get(key) is not None:
                    attrs[attr] = _json(self.redactor.value(update[key]))
        if status in _TERMINAL_TOOL_STATUS:
            if status == "failed":
                attrs["error.type"] = "failed"
                span.error = "the tool call failed"
            out.append(self._close(span, frame.ts_ns))
        return tool

    # -- helpers --------------------------------------------------------------------------------

    def _child(
        self, parent: Span, name: str, kind: str, start_ns: int, attrs: dict[str, Any], session_id: str | None
    ) -> Span:
        """A new open span in ``parent``'s trace."""
        return Span(
            name, parent.trace_id, self._ids(64), parent.span_id, kind, start_ns, -1, attrs, session_id=session_id
        )

    def _close(self, span: Span, end_ns: int) -> Span:
        if span.end_ns < 0:
            span.end_ns = max(end_ns, span.start_ns)
        return span

    def _peer(self, e: ev.PeerAnnounced) -> None:
        info = _loads(e.info)
        if not isinstance(info, dict):
            return
        target = self._agent if e.side == "agent" else self._client
        for key in ("name", "version", "title"):
            if isinstance(info.get(key), str):
                target[key] = self._clean(info[key])

    def _peer_attributes(self) -> dict[str, Any]:
        attrs: dict[str, Any] = {}
        if "name" in self._agent:  # ACP's agents have no other identity than their name
            attrs["gen_ai.agent.name"] = attrs["gen_ai.agent.id"] = self._agent["name"]
        if "version" in self._agent:
            attrs["gen_ai.agent.version"] = self._agent["version"]
        if "name" in self._client:
            attrs["acp.client.name"] = self._client["name"]
        if "version" in self._client:
            attrs["acp.client.version"] = self._client["version"]
        if self._version is not None:
            attrs["acp.protocol.version"] = self._version
        return attrs

    def _agent_metric_attributes(self) -> dict[str, Any]:
        attrs: dict[str, Any] = {"gen_ai.provider.name": PROVIDER}
        if "name" in self._agent:
            attrs["gen_ai.agent.name"] = self._agent["name"]
        return attrs

    def _usage(self, usage: Any) -> dict[str, Any]:
        if not isinstance(usage, dict):
            return {}
        out: dict[str, Any] = {}
        for key, attr in (
            ("inputTokens", "gen_ai.usage.input_tokens"),
            ("outputTokens", "gen_ai.usage.output_tokens"),
            ("thoughtTokens", "gen_ai.usage.reasoning.output_tokens"),
            ("cachedReadTokens", "gen_ai.usage.cache_read.input_tokens"),
            ("cachedWriteTokens", "gen_ai.usage.cache_creation.input_tokens"),
            ("totalTokens", "acp.usage.total_tokens"),
        ):
            value = usage.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**63:
                out[attr] = value
        return out

    def _part(self, block: Any) -> dict[str, Any]:
        if isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str):
            return {"type": "text", "content": self._clean(block["text"])}
        if isinstance(block, dict):
            part: dict[str, Any] = {"type": block.get("type") if isinstance(block.get("type"), str) else "unknown"}
            resource: dict[str, Any] = block["resource"] if isinstance(block.get("resource"), dict) else block
            for key in ("uri", "mimeType", "name"):
                if isinstance(resource.get(key), str):
                    part[key] = self._clean(resource[key])
            return part
        return {"type": "unknown"}

    def _clean(self, value: Any) -> Any:
        return self.redactor.text(value) if isinstance(value, str) else value


def build(
    rows: Iterable[Mapping[str, Any]],
    *,
    annotations: Iterable[Annotation] = (),
    end_ns: int | None = None,
    **options: Any,
) -> tuple[list[Span], list[Point]]:
    """Every span and measurement of one recorded run (``options``: as for ``SpanBuilder``)."""
    builder = SpanBuilder(**options)
    for seq, name, ts, attrs in annotations:
        builder.annotate(seq, name, ts, attrs)
    spans: list[Span] = []
    for row in rows:
        spans.extend(builder.feed(row))
    spans.extend(builder.finish(end_ns))
    return spans, builder.take_points()


Annotation = tuple[int | None, str, int | None, dict[str, Any]]
"""What ``annotate`` takes: (frame seq, event name, time or None, attributes)."""


def fault_annotation(row: Mapping[str, Any]) -> Annotation:
    """A ``faults`` row (seq, ts_ns, rule, action, detail) as an ``acp.fault`` span event."""
    attrs = {"acp.fault.action": row["action"], "acp.fault.detail": row["detail"], "acp.fault.rule": row["rule"]}
    return (row["seq"], "acp.fault", row["ts_ns"], attrs)


def finding_annotation(row: Mapping[str, Any]) -> Annotation:
    """A ``findings`` row (seq, rule, severity, message; ts_ns of its frame) as an ``acp.finding`` event."""
    attrs = {
        "acp.finding.rule": row["rule"],
        "acp.finding.severity": row["severity"],
        "acp.finding.message": row["message"],
    }
    return (row["seq"], "acp.finding", row["ts_ns"], attrs)


# -- payloads (the rare frames whose content becomes attributes) ---------------------------------


def _loads(text: Any) -> Any:
    if not isinstance(text, str):
        return None
    try:
        return wire.decode_value(text)
    except msgspec.DecodeError:
        return None


def _message(row: Mapping[str, Any]) -> dict[str, Any]:
    value = _loads(row.get("raw"))
    return value if isinstance(value, dict) else {}


def _params(row: Mapping[str, Any]) -> Any:
    return _message(row).get("params")


def _result(row: Mapping[str, Any]) -> Any:
    return _message(row).get("result")


def _update_of(row: Mapping[str, Any]) -> dict[str, Any]:
    params = _params(row)
    update = params.get("update") if isinstance(params, dict) else None
    return update if isinstance(update, dict) else {}


def _id(rpc_id: str | None) -> str:
    """A JSON-RPC id as ``jsonrpc.request.id`` spells it: the id's value, as text."""
    if rpc_id is None:
        return ""
    if rpc_id.startswith('"'):
        value = _loads(rpc_id)
        if isinstance(value, str):
            return value
    return rpc_id


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)
