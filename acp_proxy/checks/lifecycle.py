"""The lifecycle rules of the spec, over one connection's frames in relay order (``Checker``).

Owns: the rules no schema can state (a prompt's ``messageId`` and its ``user_message``,
``running`` ... ``idle`` with a stop reason, cancellation, compaction order, history replay on
restore and its v2 ``replay_complete`` marker, notices not replayed, capabilities, custom names,
JSON-RPC pairing, batches a peer refuses (one -32600; over Streamable HTTP the 501 ``serve``
records, read through ``protocol.transports``) or ignores, a peer newer than our schemas),
calling the schema validation (``schema``) of each frame's payload on the way, and checking the
conversation ``proxy/successor`` envelopes carry (``protocol.chains``) with a ``Checker`` of its own per hop.
A ``Checker`` is fed frames in relay order — ``FrameRecord`` objects (live) or ``frames`` rows
as dicts (recorded) — and runs the connection's protocol state machine (``protocol.state``) over
them: pairing, versions, sessions, replay windows and turns come from its events, never from
annotations. What the checker keeps
itself is content: message ids, tool calls, compactions, capabilities.

Rule 1: a check never raises on odd input. A frame that does not decode, a payload of the wrong
shape, a version with no schema: each is a finding or is skipped, never an exception.

Rule 2: the schema is the authority for shapes; the lifecycle rules state order and pairing,
and say nothing the schema already said about the same frame.

Must not know: SQL, pipes, processes, click or rich.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, ClassVar

import msgspec

from acp_proxy.checks.catalogue import RULES, Finding, Severity
from acp_proxy.checks.schema import SchemaSet, schemas
from acp_proxy.protocol import events as ev
from acp_proxy.protocol import transports, wire
from acp_proxy.protocol import vocabulary as acp
from acp_proxy.protocol.chains import SUCCESSOR, Unwrapper
from acp_proxy.protocol.rows import FrameLike, RecordedFrame
from acp_proxy.protocol.state import NO_EVENTS, ConnectionState
from acp_proxy.protocol.vocabulary import A2C, OTHER, RECEIVER

_OUTPUT_PREFIXES = ("agent_message", "agent_thought", "tool_call", "plan")
# What replayed history consists of, per version: messages (and, in v1, announced tool calls).
_MESSAGES = frozenset(
    {
        "user_message_chunk",
        "user_message",
        "agent_message_chunk",
        "agent_message",
        "agent_thought_chunk",
        "agent_thought",
    }
)
_HISTORY = {1: _MESSAGES | {"tool_call"}, 2: _MESSAGES}
_USER_MESSAGES = frozenset({"user_message", "user_message_chunk"})
_COMPACTION_TERMINAL = frozenset({"completed", "failed", "cancelled"})

# Capability-gated methods: (version, method) -> (who advertises it, path into their capabilities).
# v1 names from initialization.mdx / session-setup.mdx; a session capability is an object whose
# presence (non-null) means support. Only what the other side must advertise first is listed.
_GATES: dict[tuple[int, str], tuple[str, tuple[str, ...]]] = {
    (1, "session/load"): ("agent", ("loadSession",)),
    (1, "session/resume"): ("agent", ("sessionCapabilities", "resume")),
    (1, "session/list"): ("agent", ("sessionCapabilities", "list")),
    (1, "session/close"): ("agent", ("sessionCapabilities", "close")),
    (1, "session/fork"): ("agent", ("sessionCapabilities", "fork")),
    (1, "session/delete"): ("agent", ("sessionCapabilities", "delete")),
    (1, "fs/read_text_file"): ("client", ("fs", "readTextFile")),
    (1, "fs/write_text_file"): ("client", ("fs", "writeTextFile")),
    (1, "terminal/create"): ("client", ("terminal",)),
    (1, "terminal/output"): ("client", ("terminal",)),
    (1, "terminal/kill"): ("client", ("terminal",)),
    (1, "terminal/release"): ("client", ("terminal",)),
    (1, "terminal/wait_for_exit"): ("client", ("terminal",)),
    (2, "session/fork"): ("agent", ("session", "fork")),
    (2, "session/delete"): ("agent", ("session", "delete")),
    (2, "session/archive"): ("agent", ("session", "archive")),
    (2, "session/unarchive"): ("agent", ("session", "archive")),
}


# -- reading a frame, whichever shape it came in -------------------------------------------------

_PAYLOAD_KINDS = frozenset({"request", "notification", "response", "error"})


def _field(rec: Any, name: str) -> Any:
    if type(rec) is dict:  # recorded rows, the common case: no ABC check
        return rec.get(name)
    if isinstance(rec, Mapping):
        return rec.get(name)
    return getattr(rec, name, None)


def _get(value: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def _json(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return wire.decode_value(text)
    except msgspec.DecodeError:
        return None


# -- per-connection content ------------------------------------------------------------------------


@dataclass(slots=True)
class _Request:
    seq: int
    direction: str
    rpc_id: str | None
    method: str | None
    cancelled: bool = False
    """A permission request pending when its session was cancelled."""


@dataclass(slots=True)
class _Batch:
    """A JSON-RPC batch line: its element requests and what became of them."""

    seq: int
    direction: str
    requests: set[int] = field(default_factory=set)
    answered: int = 0
    rejected: bool = False


@dataclass(slots=True)
class _Turn:
    """A prompt turn between its TurnStarted and TurnEnded events."""

    seq: int
    version: int | None
    running: bool = False
    cancelled_at: int | None = None
    reported_output: bool = False
    by: str = "prompt"
    """``prompt``, or ``agent``: foreground work the agent started without a prompt."""


@dataclass(slots=True)
class _Session:
    user_ids: set[str] = field(default_factory=set)
    """messageIds of user_message(_chunk) updates seen (either order with the response)."""
    awaiting_user: dict[str, int] = field(default_factory=dict)
    """messageId -> seq of a prompt response whose user_message has not been seen yet."""
    prompt_ids: dict[str, int] = field(default_factory=dict)
    message_ids: set[str] = field(default_factory=set)
    """Ids of every message of the session seen so far (live or replayed)."""
    tools: set[str] = field(default_factory=set)
    compactions: dict[str, str] = field(default_factory=dict)
    turns: list[_Turn] = field(default_factory=list)
    """Open turns, oldest first."""
    restored: tuple[str, int] | None = None
    """(method, seq of its answer): a restore answered, and no prompt since."""
    resuming: int = 0
    """session/resume requests without replay that are still pending."""
    marked: set[int] = field(default_factory=set)
    """v2 resumes whose replay_complete was seen and whose answer has not come yet."""
    resumed_replay: bool = False
    """The last v2 resume with replayFrom of the session was answered (a marker now is late)."""


class Checker:
    """The rules, over one connection's frames in relay order. ``feed`` each, then ``finish``."""

    def __init__(self, *, version: int | None = None, schema: bool = True, unstable: bool = True) -> None:
        """``version``: the protocol version if known in advance (e.g. from the run row); the
        ``initialize`` exchange overrides it. ``schema``: validate payloads (the slow part).
        ``unstable``: validate against the draft schema (a superset of the stable one)."""
        self.state = ConnectionState(version=version)
        self._schema = schema
        self._unstable = unstable
        self._requests: dict[int, _Request] = {}
        """Pending requests by seq."""
        self._turns: dict[int, _Turn] = {}
        self._sessions: dict[str, _Session] = {}
        self._capabilities: dict[str, Any] = {}
        self._unanswered: set[int] = set()
        self._run_id: int | None = None
        self._ended_at: int | None = None
        """The frame whose TurnEnded events were last seen: one idle may end several turns."""
        self._schema_flagged = False
        """The schema already found the frame's result wrong (one finding per broken fact)."""
        self.turns: dict[int, tuple[str, str | None, int | None]] = {}
        """The checker's view of the prompt turns: prompt seq -> (status, stop reason, end seq)."""
        self.frames = 0
        self._schema_of: tuple[int | None, SchemaSet | None] = (None, None)
        """(version, its schema): the last ``_schema_set`` answer."""
        self._replays: dict[int, str] = {}
        """v2 session/resume replay windows still open: request seq -> session id."""
        self._replayed: set[int] = set()
        """Windows (request seqs) in which a replayed update was seen."""
        self._live: dict[int, list[Finding]] = {}
        """Window -> live updates seen in it after replayed history: reported when the marker
        proves the window was the agent's replay (without it the end is only inferred, and a
        state_update before the answer is the state snapshot that follows a replay)."""
        self._marker_seq: int | None = None
        """The frame whose replay_complete closed a window."""
        self._batches: dict[int, _Batch] = {}
        """Batch lines by seq (rare: most peers never send one)."""
        self._batch_of: dict[int, _Batch] = {}
        """Element request seq -> its batch."""
        self._chain: Unwrapper | None = None
        """Made at the first ``proxy/successor``: the envelopes this connection carries."""
        self._inner: Checker | None = None
        """The conversation of the next hop (what the envelopes carry), checked as any."""
        self._hop = 0
        self._newer_than_ours: int | None = None
        """``acp.NEWEST`` when the negotiated version is newer than every schema we ship."""

    @property
    def version(self) -> int | None:
        """The version the rules follow (the state machine's: negotiated, else inferred); for a
        peer that negotiated a version newer than our schemas, the newest we have."""
        return self._newer_than_ours or self.state.version

    # -- interface -------------------------------------------------------------------------------

    def _schema_name(self) -> str:
        return f"v{self.version}" if self.version is not None else "v1 or v2"

    def feed(self, rec: Any) -> list[Finding]:
        out: list[Finding] = []
        try:
            self._feed(rec, out)
        except Exception as exc:  # Rule 1: a checker bug must not stop a check or a recording.
            out.append(
                self._finding("jsonrpc/not-json", rec, f"checker could not read this frame: {exc!r}", severity="info")
            )
        return out

    def finish(self, *, ended: bool = True) -> list[Finding]:
        """The connection ended (``ended``) or the recording stops here (a run still going):
        only an ended connection has unanswered requests and unfinished turns."""
        out: list[Finding] = []
        if self._inner is not None:
            out += self._hop_findings(self._inner.finish(ended=ended))
        if not ended:
            return out
        for event in self.state.finish(0):
            if isinstance(event, ev.Unanswered):
                self._unanswered.add(event.request_seq)
                self._requests.pop(event.request_seq, None)
                out.append(
                    self._at(
                        "jsonrpc/unanswered",
                        event.request_seq,
                        f"{event.method} request (id {event.rpc_id}) never answered",
                    )
                )
            elif isinstance(event, ev.TurnEnded):
                self.turns[event.prompt_seq] = (event.status, event.stop_reason, event.seq)
                turn = self._turns.pop(event.prompt_seq, None)
                # A prompt never answered is one fact, reported as unanswered; an accepted v2
                # prompt that never reached idle is another.
                if event.protocol_version == 2 and event.prompt_seq not in self._unanswered:
                    what = "agent-initiated work" if turn is not None and turn.by == "agent" else "prompt"
                    out.append(
                        self._at(
                            "turn/unfinished",
                            event.prompt_seq,
                            f"{what} never reached idle before the connection ended",
                        )
                    )
                session = self._session(event.session_id)
                if turn is not None and turn in session.turns:
                    session.turns.remove(turn)
        for request_seq, sid in self._replays.items():
            out.append(
                self._at(
                    "replay/truncated",
                    request_seq,
                    f"session/resume replay of {sid} ended with the connection, without replay_complete",
                )
            )
        self._replays.clear()
        for batch in self._batches.values():
            if batch.requests and not batch.answered and not batch.rejected:
                receiver = RECEIVER[batch.direction]
                out.append(
                    self._at(
                        "batch/ignored",
                        batch.seq,
                        f"the {receiver} answered none of the {len(batch.requests)} request(s) of this batch: "
                        f"it does not read JSON-RPC batch arrays",
                    )
                )
        for sid, session in self._sessions.items():
            for message_id, seq in session.awaiting_user.items():
                out.append(
                    self._at(
                        "prompt/user-message", seq, f"no user_message with messageId {message_id!r} in session {sid}"
                    )
                )
        out.sort(key=lambda f: f.seq or 0)
        return out

    # -- dispatch --------------------------------------------------------------------------------

    def _feed(self, rec: Any, out: list[Finding]) -> None:
        self.frames += 1
        # Recorded rows (dicts) are read with .get, live frames by attribute; the shape is
        # decided once per frame, not per field (this loop runs for every chunk of a storm).
        row = type(rec) is dict or isinstance(rec, Mapping)
        get = rec.get if row else partial(getattr, rec)
        self._run_id = get("run_id", None)
        direction = get("dir", None)
        if direction not in OTHER:
            return
        kind = get("kind", None)
        method = get("method", None)
        if (
            kind == "notification"
            and method == "session/update"
            and self.state.quiet(get("update_kind", None), get("session_id", None))
        ):
            # The chunk storm: the state machine would answer NO_EVENTS (its own hot path), so
            # the row is not copied into a frame for it to say so.
            events: tuple[ev.Event, ...] = NO_EVENTS
        else:
            frame: FrameLike = RecordedFrame(rec) if row else rec
            events = self.state.feed(frame)
        self._schema_flagged = False
        if kind == "batch":
            seq = get("seq", None)
            self._batches[seq] = _Batch(seq, direction)
            return
        batch_seq = get("batch_seq", None)
        if batch_seq is not None and kind == "request":
            batch = self._batches.get(batch_seq)
            if batch is not None:
                batch.requests.add(get("seq", None))
                self._batch_of[get("seq", None)] = batch
        if kind == "invalid":
            if not get("cut", None):
                sender = "agent's stdout" if direction == A2C else "client's output (agent's stdin)"
                faulted = get("fault", None)
                out.append(
                    self._finding(
                        "jsonrpc/not-json",
                        rec,
                        f"a line on the {sender} is not JSON-RPC"
                        + (f" (injected by the proxy: {faulted})" if faulted else ""),
                        severity="info" if faulted else None,
                    )
                )
            return
        message = None
        if kind in _PAYLOAD_KINDS and not get("cut", None):
            line = get("raw" if row else "line", None)
            if line is not None:
                try:
                    message = wire.decode_value(line)
                except (msgspec.DecodeError, UnicodeError):
                    message = None
                if not isinstance(message, dict):
                    message = None
        for event in events:
            handler = self._handlers.get(type(event))
            if handler is not None:
                handler(self, rec, event, message, out)
        if message is not None and kind == "notification":
            self._notification(rec, get, method, direction, message, out)
        if self._chain is not None or method == SUCCESSOR:
            self._unwrap(rec, get, row, out)

    # -- proxy chains: the next hop's conversation -----------------------------------------------

    def _unwrap(self, rec: Any, get: Callable[[str, Any], Any], row: bool, out: list[Finding]) -> None:
        if self._chain is None:
            self._chain = Unwrapper()
        if row:
            inner = self._chain.unwrap(rec)
        else:
            fields = ("run_id", "seq", "ts_ns", "dir", "kind", "method", "rpc_id", "cut", "forwarded")
            inner = self._chain.unwrap({name: get(name, None) for name in fields}, get("line", None))
        if inner is None:
            return
        if self._inner is None:
            self._inner = Checker(schema=self._schema, unstable=self._unstable)
            self._inner._hop = self._hop + 1
        out += self._hop_findings(self._inner.feed(inner))

    def _hop_findings(self, found: list[Finding]) -> list[Finding]:
        hop = self._hop + 1
        # An inner checker's findings already name their own deeper hops.
        return [f if f.message.startswith("hop ") else replace(f, message=f"hop {hop}: {f.message}") for f in found]

    def _finding(
        self, rule_id: str, rec: Any, message: str, severity: Severity | None = None, spec: str | None = None
    ) -> Finding:
        rule = RULES[rule_id]
        return Finding(
            rule_id,
            severity or rule.severity,
            message,
            spec or rule.spec_for(self.version),
            _field(rec, "run_id"),
            _field(rec, "seq"),
        )

    def _at(self, rule_id: str, seq: int | None, message: str) -> Finding:
        rule = RULES[rule_id]
        return Finding(rule_id, rule.severity, message, rule.spec_for(self.version), self._run_id, seq)

    def _schema_set(self, version: int | None = None) -> SchemaSet | None:
        """The schema of ``version`` (default: the rules' version now), None when not validating."""
        if version is None:
            version = self.version
        if version is not self._schema_of[0]:  # per frame twice: looked up once per version
            found = schemas(version, self._unstable) if self._schema and version in acp.PROTOCOL_VERSIONS else None
            self._schema_of = (version, found)
        return self._schema_of[1]

    def _validate(
        self,
        rule_id: str,
        rec: Any,
        name: str | None,
        instance: Any,
        subject: str,
        out: list[Finding],
        checker: SchemaSet | None,
    ) -> bool:
        """Validate against ``checker`` (the caller's ``_schema_set()``); True when a finding
        was added. ``subject``: the method or variant."""
        if checker is None or name is None:
            return False
        # The compiled verdict straight away (``first_error`` asks it again, then jsonschema):
        # two calls fewer for each valid payload, i.e. every chunk of a storm.
        fast = checker.verdicts.get(name)  # None: not compiled yet, or not compilable
        if fast is not None:
            try:
                if fast(instance):
                    return False
            except Exception:
                pass  # e.g. nesting too deep for the compiled code: jsonschema decides
        error = checker.first_error(name, instance)
        if error is None:
            return False
        shown = name.removeprefix("_acp_proxy_")
        what = f"{subject} {rule_id.removeprefix('schema/')}"  # "session/prompt params", "plan update"
        out.append(
            self._finding(
                rule_id,
                rec,
                f"{what} (v{checker.version} {shown}): {error}",
                spec=f"schema/{checker.file}#/$defs/{checker.source_def(name)}",
            )
        )
        return True

    def _session(self, sid: str) -> _Session:
        session = self._sessions.get(sid)
        if session is None:
            session = self._sessions[sid] = _Session()
        return session

    # -- events ----------------------------------------------------------------------------------

    def _on_peer(self, rec: Any, e: ev.PeerAnnounced, message: Any, out: list[Finding]) -> None:
        self._capabilities[e.side] = _json(e.capabilities)

    def _on_negotiated(self, rec: Any, e: ev.VersionNegotiated, message: Any, out: list[Finding]) -> None:
        # One finding says it, instead of a flood of "unknown method" and schema errors: the
        # newest schema we have is the best guess at a newer version's surface.
        newer = e.version is not None and e.version > acp.NEWEST
        self._newer_than_ours = acp.NEWEST if newer else None
        if newer:
            out.append(
                self._finding(
                    "version/newer",
                    rec,
                    f"the agent negotiated protocol version {e.version}, newer than our schemas: "
                    f"checked against v{acp.NEWEST} (scripts/refresh_schemas.py fetches newer ones)",
                )
            )

    def _on_request(self, rec: Any, e: ev.RequestSent, message: Any, out: list[Finding]) -> None:
        method = e.method
        if e.reused_id_of is not None:
            first = self._requests.get(e.reused_id_of)
            out.append(
                self._finding(
                    "jsonrpc/duplicate-id",
                    rec,
                    f"id {e.rpc_id} reused while request seq {e.reused_id_of}"
                    f" ({first.method if first else '?'}) is pending",
                )
            )
        self._requests[_field(rec, "seq")] = _Request(_field(rec, "seq"), e.direction, e.rpc_id, method)
        self._gate(rec, method, out)
        schema = self._schema_set()
        if schema is not None and isinstance(method, str) and message is not None:
            self._validate(
                "schema/params",
                rec,
                schema.params.get((method, RECEIVER[e.direction])),
                message.get("params"),
                method,
                out,
                schema,
            )

    def _on_unknown(self, rec: Any, e: ev.NameUnknown, message: Any, out: list[Finding]) -> None:
        if e.unknown != "future":
            return
        if e.what == "method":
            out.append(
                self._finding(
                    "ext/method-name",
                    rec,
                    f"method {e.name!r} is not in the {self._schema_name()} schema and does not start with _",
                )
            )
        else:
            out.append(
                self._finding(
                    "ext/update-name",
                    rec,
                    f"update {e.name!r} is not in the {self._schema_name()} schema and does not start with _",
                )
            )

    def _on_unpaired(self, rec: Any, e: ev.ResponseUnpaired, message: Any, out: list[Finding]) -> None:
        if e.rpc_id in (None, "null") and self._batches and _field(rec, "batch_seq") is None:
            self._batch_rejected(rec, e, message, out)
        if e.rpc_id is not None and e.rpc_id != "null":
            out.append(
                self._finding("jsonrpc/unknown-id", rec, f"response to id {e.rpc_id}, which no pending request has")
            )

    def _batch_rejected(self, rec: Any, e: ev.ResponseUnpaired, message: Any, out: list[Finding]) -> None:
        # One Invalid Request with id null, alone on its line, answering the other side's
        # latest batch that nothing else answered: the whole array was refused. (An invalid
        # entry of a batch gets its own -32600 inside the response array: batch_seq is set.)
        code = _get(message, "error", "code")
        batch = next((b for b in reversed(self._batches.values()) if b.direction == OTHER[e.direction]), None)
        if batch is None or batch.answered or batch.rejected:
            return
        # Over Streamable HTTP the POST of the array is answered 501 (the Python SDK's server:
        # {"error": "..."}); serve records that body with its status in the note.
        status = transports.http_status(_field(rec, "note"))
        if status == 501:
            batch.rejected = True
            out.append(
                self._finding(
                    "batch/http-501",
                    rec,
                    f"the {RECEIVER[batch.direction]} answered the POST of the batch of seq {batch.seq} with HTTP 501: "
                    f"Streamable HTTP does not carry JSON-RPC batch arrays, so these two peers cannot use them",
                )
            )
            return
        if code != -32600:
            return
        batch.rejected = True
        receiver = RECEIVER[batch.direction]
        out.append(
            self._finding(
                "batch/rejected",
                rec,
                f"the {receiver} refused the batch of seq {batch.seq} with one -32600 Invalid Request: "
                f"it does not accept JSON-RPC batch arrays, so these two peers cannot use them",
            )
        )

    def _on_paired(self, rec: Any, e: ev.ResponsePaired, message: Any, out: list[Finding]) -> None:
        batch = self._batch_of.pop(e.request_seq, None) if self._batch_of else None
        if batch is not None and not e.withheld:
            batch.answered += 1
        if e.withheld:
            return  # the requester never saw it: its request is still pending
        request = self._requests.pop(e.request_seq, None)
        if e.cut or message is None:
            return
        method = e.method
        result = message.get("result")
        schema = self._schema_set()
        if not e.error and schema is not None and isinstance(method, str):
            # The result type belongs to the side that received the request, i.e. the response's sender.
            side = RECEIVER[OTHER[e.direction]]
            self._schema_flagged = self._validate(
                "schema/result", rec, schema.results.get((method, side)), result, method, out, schema
            )
        if method == "session/request_permission" and request is not None and request.cancelled:
            outcome = _get(result, "outcome", "outcome") if not e.error else None
            if outcome != "cancelled":
                what = "an error" if e.error else f"outcome {outcome!r}"
                out.append(
                    self._finding(
                        "cancel/permission",
                        rec,
                        f"permission request seq {request.seq} answered with {what} after session/cancel",
                    )
                )

    def _on_restoring(self, rec: Any, e: ev.SessionRestoring, message: Any, out: list[Finding]) -> None:
        if e.method == "session/resume" and not e.replays:
            self._session(e.session_id).resuming += 1

    def _on_window_opened(self, rec: Any, e: ev.ReplayWindowOpened, message: Any, out: list[Finding]) -> None:
        if e.method == "session/resume" and self.version == 2 and e.seq is not None:
            self._replays[e.seq] = e.session_id

    def _on_window_closed(self, rec: Any, e: ev.ReplayWindowClosed, message: Any, out: list[Finding]) -> None:
        sid = self._replays.pop(e.request_seq, None)
        self._replayed.discard(e.request_seq)
        live = self._live.pop(e.request_seq, [])
        if sid is None:
            return
        if e.by == "marker":
            out.extend(live)
            self._marker_seq = _field(rec, "seq")
            self._session(sid).marked.add(e.request_seq)
        elif e.ok:
            out.append(
                self._finding(
                    "replay/complete-missing",
                    rec,
                    f"session/resume (seq {e.request_seq}) with replayFrom answered without replay_complete"
                    " (the replay's end is inferred from the response)",
                )
            )
        else:
            out.append(
                self._finding(
                    "replay/truncated",
                    rec,
                    f"session/resume (seq {e.request_seq}) failed before replay_complete: its replay is truncated",
                )
            )

    def _on_restored(self, rec: Any, e: ev.SessionRestored, message: Any, out: list[Finding]) -> None:
        session = self._session(e.session_id)
        if e.method == "session/resume" and e.replays:
            session.marked.discard(e.request_seq)
            session.resumed_replay = True
        if e.method == "session/resume" and not e.replays:
            session.resuming = max(0, session.resuming - 1)
        if e.ok:
            session.restored = (e.method, _field(rec, "seq"))

    def _on_turn_started(self, rec: Any, e: ev.TurnStarted, message: Any, out: list[Finding]) -> None:
        session = self._session(e.session_id)
        session.restored = None
        self.turns[e.prompt_seq] = ("running", None, None)
        # Work the agent started itself begins with its running: it is worked on from the start.
        turn = self._turns[e.prompt_seq] = _Turn(e.prompt_seq, e.protocol_version, running=e.by == "agent", by=e.by)
        session.turns.append(turn)

    def _on_accepted(self, rec: Any, e: ev.TurnAccepted, message: Any, out: list[Finding]) -> None:
        session = self._session(e.session_id)
        raw = _get(message, "result", "messageId")
        message_id = e.message_id
        if not message_id:
            # The schema says what a missing or non-string id is; the empty string is this rule's.
            # Whether the id is required at all is the negotiated version's schema's to say.
            required = self._requires_message_id()
            if raw is None and not required:
                return
            if raw == "" or not self._schema_flagged:
                out.append(
                    self._finding(
                        "prompt/message-id",
                        rec,
                        f"prompt response carries messageId {raw!r}, not a non-empty string",
                    )
                )
            return
        earlier = session.prompt_ids.get(message_id)
        if earlier is not None:
            out.append(
                self._finding(
                    "prompt/distinct-message-id",
                    rec,
                    f"messageId {message_id!r} already given to the prompt of seq {earlier}",
                )
            )
        session.prompt_ids.setdefault(message_id, e.prompt_seq)
        if message_id not in session.user_ids:
            session.awaiting_user[message_id] = _field(rec, "seq")

    def _on_state(self, rec: Any, e: ev.StateReported, message: Any, out: list[Finding]) -> None:
        if e.state in ("running", "requires_action"):
            for turn in self._session(e.session_id).turns:
                turn.running = True

    def _on_cancelled(self, rec: Any, e: ev.SessionCancelled, message: Any, out: list[Finding]) -> None:
        seq = _field(rec, "seq")
        for prompt_seq in e.prompt_seqs:
            turn = self._turns.get(prompt_seq)
            if turn is not None and turn.cancelled_at is None:
                turn.cancelled_at = seq
        for request_seq in e.request_seqs:
            request = self._requests.get(request_seq)
            if request is not None and request.method == "session/request_permission":
                request.cancelled = True

    def _on_turn_ended(self, rec: Any, e: ev.TurnEnded, message: Any, out: list[Finding]) -> None:
        self.turns[e.prompt_seq] = (e.status, e.stop_reason, e.seq)
        turn = self._turns.pop(e.prompt_seq, None)
        session = self._session(e.session_id)
        if turn is not None and turn in session.turns:
            session.turns.remove(turn)
        seq = _field(rec, "seq")
        first_of_frame = self._ended_at != seq
        self._ended_at = seq
        if e.by == "idle" and e.stop_reason is None:
            if first_of_frame:
                out.append(
                    self._finding("turn/idle-stop-reason", rec, "idle ends foreground work without a stopReason")
                )
        elif e.stop_reason is not None and first_of_frame:
            self._stop_reason(rec, e.stop_reason, out)
        if turn is None or turn.cancelled_at is None or e.by == "finish" or e.stop_reason == "cancelled":
            return
        if e.by == "error":
            out.append(
                self._finding(
                    "cancel/stop-reason",
                    rec,
                    f"prompt cancelled at seq {turn.cancelled_at} ended with an error, not stopReason cancelled",
                )
            )
        else:
            out.append(
                self._finding(
                    "cancel/stop-reason-race",
                    rec,
                    f"prompt cancelled at seq {turn.cancelled_at} ended with stopReason {e.stop_reason!r}",
                )
            )

    def _on_replayed(self, rec: Any, e: ev.UpdateReplayed, message: Any, out: list[Finding]) -> None:
        if e.window_seq in self._replays:
            # A live update sent before the resume may still arrive first; once the replay has
            # begun, the agent holds its live updates until replay_complete.
            if e.variant == "state_update" and e.window_seq in self._replayed:
                self._live.setdefault(e.window_seq, []).append(
                    self._finding(
                        "replay/live-update",
                        rec,
                        f"state_update inside the replay of session/resume seq {e.window_seq}, after replayed history",
                    )
                )
            self._replayed.add(e.window_seq)
        if e.live_only:
            out.append(
                self._finding(
                    "replay/notice",
                    rec,
                    f"live-only {e.variant} sent inside a history replay window"
                    + ("" if _field(rec, "forwarded") != 0 else " (withheld by the proxy)"),
                )
            )

    _handlers: ClassVar[dict[type[ev.Event], Any]] = {
        ev.PeerAnnounced: _on_peer,
        ev.VersionNegotiated: _on_negotiated,
        ev.RequestSent: _on_request,
        ev.NameUnknown: _on_unknown,
        ev.ResponseUnpaired: _on_unpaired,
        ev.ResponsePaired: _on_paired,
        ev.SessionRestoring: _on_restoring,
        ev.ReplayWindowOpened: _on_window_opened,
        ev.ReplayWindowClosed: _on_window_closed,
        ev.SessionRestored: _on_restored,
        ev.TurnStarted: _on_turn_started,
        ev.TurnAccepted: _on_accepted,
        ev.StateReported: _on_state,
        ev.SessionCancelled: _on_cancelled,
        ev.TurnEnded: _on_turn_ended,
        ev.UpdateReplayed: _on_replayed,
    }

    def _gate(self, rec: Any, method: Any, out: list[Finding]) -> None:
        gate = _GATES.get((self.version, method)) if self.version is not None else None
        if gate is None:
            return
        side, path = gate
        if side not in self._capabilities:
            return  # the initialize exchange was not seen: nothing to hold against
        value = _get(self._capabilities[side], *path)
        if value is None or value is False:
            out.append(
                self._finding(
                    "capability/missing",
                    rec,
                    f"{method} used but the {side} did not advertise {side}Capabilities." + ".".join(path),
                )
            )

    def _requires_message_id(self) -> bool:
        version = self.version
        if version not in acp.PROTOCOL_VERSIONS:
            return True
        return schemas(version, self._unstable).prompt_message_id

    def _stop_reason(self, rec: Any, stop: str, out: list[Finding]) -> None:
        schema = schemas(self.version, self._unstable) if self.version in acp.PROTOCOL_VERSIONS else None
        if schema is not None and stop not in schema.stop_reasons and not stop.startswith("_"):
            out.append(
                self._finding(
                    "ext/stop-reason",
                    rec,
                    f"stop reason {stop!r} is not in the {self._schema_name()} schema and does not start with _",
                )
            )

    # -- notifications: content ------------------------------------------------------------------

    def _notification(
        self,
        rec: Any,
        get: Callable[[str, Any], Any],
        method: Any,
        direction: str,
        message: dict[str, Any],
        out: list[Finding],
    ) -> None:
        params = message.get("params")
        version = self.version  # once per frame: it does not change within the notification's rules
        schema = self._schema_set(version)
        if schema is not None and isinstance(method, str):
            name = schema.notifications.get((method, RECEIVER[direction]))
            # The compiled verdict in place (every chunk of a storm passes here and is valid);
            # ``_validate`` for anything else, which asks it again and words a finding.
            fast = schema.verdicts.get(name) if name is not None else None
            try:
                valid = fast is not None and fast(params)
            except Exception:
                valid = False
            if not valid:
                self._validate("schema/params", rec, name, params, method, out, schema)
        if method == "session/update" and isinstance(params, dict):
            self._update(rec, get, schema, version, params, out)

    def _update(
        self,
        rec: Any,
        get: Callable[[str, Any], Any],
        schema: SchemaSet | None,
        version: int | None,
        params: dict[str, Any],
        out: list[Finding],
    ) -> None:
        update = params.get("update")
        if not isinstance(update, dict):
            return
        variant = get("update_kind", None)
        if schema is not None and isinstance(variant, str):
            name = schema.variants.get(variant)
            fast = schema.verdicts.get(name) if name is not None else None  # as in _notification
            try:
                valid = fast is not None and fast(update)
            except Exception:
                valid = False
            if not valid:
                self._validate("schema/update", rec, name, update, variant, out, schema)
        sid = get("session_id", None)
        if sid is None or not isinstance(variant, str):
            return
        session = self._sessions.get(sid) or self._session(sid)
        if variant == "replay_complete" and self._marker_seq != get("seq", None):
            self._stray_marker(rec, session, out)
            return
        item = get("item_id", None)
        message_id = update.get("messageId")
        if self.state.replaying(sid):
            if variant in _MESSAGES and isinstance(message_id, str):
                session.message_ids.add(message_id)
            if variant == "tool_call" and isinstance(item, str):
                session.tools.add(item)
            return
        history = _HISTORY.get(version or 1, _MESSAGES)
        if session.resuming and variant in history:
            out.append(
                self._finding("resume/replayed", rec, f"{variant} sent while session/resume (no replay) was pending")
            )
        elif session.restored is not None and variant in history:
            method, answered = session.restored
            if version == 1 and method == "session/load":
                out.append(
                    self._finding(
                        "load/replay-after-response",
                        rec,
                        f"{variant} after the session/load response (seq {answered}) and before any prompt",
                    )
                )
            elif (
                version == 2
                and method == "session/resume"
                and (variant in _USER_MESSAGES or (isinstance(message_id, str) and message_id in session.message_ids))
            ):
                # A user message before any prompt, or a message already replayed: history, late.
                out.append(
                    self._finding(
                        "resume/replay-after-response",
                        rec,
                        f"{variant} after the session/resume response (seq {answered}) and before any prompt",
                    )
                )
        if variant in _MESSAGES and isinstance(message_id, str):
            session.message_ids.add(message_id)
        if variant in _USER_MESSAGES:
            if isinstance(message_id, str):
                session.user_ids.add(message_id)
                session.awaiting_user.pop(message_id, None)
        elif version == 2 and variant.startswith(_OUTPUT_PREFIXES):
            for turn in session.turns:
                if not turn.running and not turn.reported_output:
                    turn.reported_output = True
                    out.append(
                        self._finding(
                            "turn/running-before-output",
                            rec,
                            f"{variant} for the prompt of seq {turn.seq} before state_update running",
                        )
                    )
        if variant == "tool_call" and isinstance(item, str):
            session.tools.add(item)
        elif variant == "tool_call_update" and version == 1 and isinstance(item, str) and item not in session.tools:
            out.append(self._finding("tool/unknown-call", rec, f"tool_call_update for unannounced toolCallId {item!r}"))
        elif variant in ("compaction_update", "compaction_summary_chunk"):
            self._compaction(rec, session, variant, update, out)

    def _stray_marker(self, rec: Any, session: _Session, out: list[Finding]) -> None:
        if session.marked:
            why = f"a second replay_complete for session/resume seq {min(session.marked)}"
        elif session.resuming:
            why = "replay_complete for a session/resume without replayFrom"
        elif session.resumed_replay:
            why = "replay_complete after the session/resume response"
        else:
            why = "replay_complete with no session/resume with replayFrom pending"
        out.append(self._finding("replay/complete-unexpected", rec, why))

    def _compaction(
        self, rec: Any, session: _Session, variant: str, update: dict[str, Any], out: list[Finding]
    ) -> None:
        cid = update.get("compactionId")
        if not isinstance(cid, str):
            return  # the schema check reports the missing id
        state = session.compactions.get(cid)
        if variant == "compaction_summary_chunk":
            if state is None:
                out.append(
                    self._finding("compaction/order", rec, f"summary chunk before any compaction_update for {cid!r}")
                )
            elif state != "in_progress":
                out.append(
                    self._finding("compaction/order", rec, f"summary chunk for {cid!r} after its {state} status")
                )
            return
        status = update.get("status")
        if not isinstance(status, str):
            return
        if state is not None and state != "in_progress":
            out.append(
                self._finding(
                    "compaction/terminal",
                    rec,
                    f"compaction {cid!r} updated ({status}) after its terminal status {state}",
                )
            )
            return
        session.compactions[cid] = (
            status if (status in _COMPACTION_TERMINAL or status == "in_progress") else (state or status)
        )
