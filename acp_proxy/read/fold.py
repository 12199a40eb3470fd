"""Fold: rebuild the conversation state of ACP sessions from their recorded JSON-RPC messages.

Owns: the content rules of the protocol documents, applied to a stream of already-decoded
messages in relay order, in the context the connection's protocol state machine gives
(``protocol.state``, one per connection: which request a response answers, which updates are
replayed history and of which replay window, the protocol version, when a prompt turn is
accepted and how it ends, what a cancel names) —

- v1 message chunks without ids: consecutive chunks of one kind append to the current message; a
  new timeline entry (another message kind, a tool call, a permission request, ...) ends it;
- message upserts and chunks keyed by ``messageId`` (v2, and v1 chunks that carry one): omitted
  ``content`` leaves it unchanged, ``null`` or ``[]`` clears it, an array replaces it together
  with whatever chunks accumulated, a chunk appends to whatever is current; chunk ``_meta`` is
  scoped to the chunk and patches nothing;
- tool calls (``tool_call``, ``tool_call_update``, ``tool_call_content_chunk``): omitted fields
  unchanged, ``null`` clears, arrays replace, chunks append; a v1 update for an unknown id makes a
  marked placeholder;
- plans (v1 ``plan`` replaces the session's single plan; v2 ``plan_update`` / ``plan_removed`` by
  ``planId``), terminals (``terminal_update`` snapshots, base64 ``terminal_output_chunk`` bytes
  appended; v1 client terminals from ``terminal/*`` calls), compactions (one entity per
  ``compactionId``, summary chunks, replace/clear, materialised replay patches in place);
- the latest usage, state and stop reason, session info, modes, config options and commands,
  each report also a timeline entry (``SessionState``);
- history replayed on the same connection rebuilds what is held: the first chunk of a message,
  tool call, terminal or compaction in a replay window starts its content over, so a replayed
  message is the message again, not twice;
- prompt turns (the ``session/prompt`` content; acceptance, end, stop reason and status as the
  state machine's events say), permission requests paired with the client's answer, every other
  request (set-up included) and its answer, protocol notifications (``$/cancel_request`` linked
  to the request it cancels), error responses, live notices, cancellations, requests left
  unanswered when a connection ended;
- anything it does not know (a future or ``_`` update variant, an extension method, a malformed
  payload) kept as raw JSON in an ``Unknown`` entry, for generic display.

Every entity remembers the seq of the frame that created it (its timeline position, fixed by the
first sighting of its id), the turn it belongs to, and whether it came from a history replay
window.

Must not know: pipes, SQL, the database, rich or click; it never pairs, windows or ends turns by
itself. Input is an iterable of ``FoldInput`` (a decoded message, its frame's envelope when the
caller has it, and the recorder's metadata); output is plain dataclasses. It performs no I/O
and never raises on odd traffic: a proxy meets broken peers on its users' worst days, and the
transcript of a broken conversation is exactly what they need.

Rule 1: apply updates in receive order, per id, exactly as the documents say; where a document
is silent, prefer showing what was on the wire over guessing what the peer meant.
Rule 2: never drop a frame's meaning silently: what is not understood is kept raw.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import copy
import difflib
import itertools
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

import msgspec

from acp_proxy.protocol import events as ev
from acp_proxy.protocol import output, wire
from acp_proxy.protocol.rows import FrameLike, RecordedFrame, run_events
from acp_proxy.protocol.state import ConnectionState
from acp_proxy.protocol.vocabulary import A2C, C2A

__all__ = [
    "Call",
    "Cancellation",
    "Compaction",
    "Conversation",
    "Entity",
    "ErrorResponse",
    "FoldInput",
    "Folder",
    "Message",
    "Notice",
    "Notification",
    "Permission",
    "Plan",
    "PromptTurn",
    "SessionState",
    "Subagent",
    "Terminal",
    "ToolCall",
    "Unknown",
    "Usage",
    "diff_text",
    "fold",
    "fold_rows",
    "fold_sessions",
    "text_of",
]

Json = Any
"""A decoded JSON value (dict, list, str, int, float, bool or None)."""


# --------------------------------------------------------------------------------------------
# Input


@dataclass(frozen=True, slots=True)
class FoldInput:
    """One decoded JSON-RPC message and what the recorder knows about its frame."""

    seq: int
    """Position of the frame in relay order; entities point back at it."""
    ts_ns: int
    dir: str
    """``"c2a"`` (client -> agent) or ``"a2c"`` (agent -> client)."""
    message: Json
    """The parsed JSON object (a list for a batch; anything else is ignored)."""
    replay: bool | None = None
    """True: history, whatever the protocol state says (for inputs without their restore
    request). Otherwise the connection's state machine says which updates are history (inside a
    replay window: ``session/load``, ``session/resume`` with ``replayFrom``)."""
    forwarded: bool = True
    """False when the proxy did not pass the frame on: the peer never saw it, so it changes no
    state (its seq is listed in ``Conversation.unforwarded``)."""
    run: int | str | None = None
    """The connection (recorded run) the frame belongs to. Request ids, negotiated versions and
    v1 chunk continuity are per connection; a session loaded in a later run is folded into the
    same conversation, its replayed history as new entries marked ``replay``."""
    line: bytes | None = None
    """The frame's bytes, when the caller has them (saves encoding ``message`` again)."""
    frame: FrameLike | None = None
    """The frame's envelope as recorded (a ``RecordedFrame``), when the caller has it."""


# --------------------------------------------------------------------------------------------
# Output: timeline entities


@dataclass(kw_only=True, eq=False)
class Entity:
    """What every timeline entry has. Entities are compared by identity."""

    entity: ClassVar[str] = "entity"
    """A stable name for the entry's type (``"message"``, ``"tool_call"``, ...), for renderers
    and JSON output."""

    seq: int
    """The frame that created the entry; the entry's timeline position."""
    ts_ns: int
    session_id: str | None
    turn: int
    """Index of the prompt turn the frame that created the entry belongs to (``turn_of`` of the
    connection's state: the session's oldest open turn); 0: outside any turn (before the first
    prompt, between turns, work the agent started itself, replayed history)."""
    replay: bool
    """Created by history replay (``session/load``, ``session/resume`` with ``replayFrom``)."""
    run: int | str | None = None
    updated_seq: int = -1
    """The last frame that changed the entry."""
    updated_ts_ns: int = 0
    replayed_seq: int | None = None
    """The last frame of a replay window that re-sent this (live-created) entry."""
    rebuilt_in: int | None = None
    """The replay window (its request's seq) whose history last rebuilt the entry's content."""

    def __post_init__(self) -> None:
        if self.updated_seq < 0:
            self.updated_seq = self.seq
            self.updated_ts_ns = self.ts_ns


@dataclass(kw_only=True, eq=False)
class Message(Entity):
    """A user message, an agent message, a thought, or an inter-session message."""

    entity: ClassVar[str] = "message"
    role: str
    """``"user"``, ``"agent"``, ``"thought"`` or ``"session"`` (draft ``session_message``)."""
    message_id: str | None = None
    content: list[Json] = field(default_factory=list)
    """Content blocks, in order (a chunk appends one)."""
    meta: Json = None
    """The message's ``_meta`` (from upserts; chunk ``_meta`` is chunk-scoped and not here)."""
    chunks: int = 0
    """How many chunks were appended over the message's life."""
    from_prompt: bool = False
    """The content is the client's own ``session/prompt`` submission, not (yet) reported by the
    agent. The agent's first report of the message replaces it."""
    sender_session_id: str | None = None
    recipient_session_id: str | None = None
    sender_message_id: str | None = None
    recipient_message_id: str | None = None

    @property
    def text(self) -> str:
        return text_of(self.content)


@dataclass(kw_only=True, eq=False)
class ToolCall(Entity):
    entity: ClassVar[str] = "tool_call"
    tool_call_id: str
    title: str | None = None
    name: str | None = None
    tool_kind: str | None = "other"
    """``kind`` on the wire (``read``, ``edit``, ``execute``, ...); ``other`` by default."""
    status: str | None = "pending"
    content: list[Json] = field(default_factory=list)
    """ToolCallContent items (``content``, ``diff``, ``terminal``, or unknown kept as sent)."""
    locations: list[Json] = field(default_factory=list)
    raw_input: Json = None
    raw_output: Json = None
    meta: Json = None
    capabilities: Json = None
    placeholder: bool = False
    """Created by an update for an id never announced (a v1 ``tool_call_update`` or a content
    chunk for an unknown ``toolCallId``): its fields are only what the updates said."""
    updates: int = 0
    chunks: int = 0
    permissions: list[Permission] = field(default_factory=list)
    """Permission requests that named this tool call, in order."""


@dataclass(kw_only=True, eq=False)
class Plan(Entity):
    entity: ClassVar[str] = "plan"
    plan_id: str | None
    """None for the v1 ``plan`` (one per session)."""
    plan_type: str | None = "items"
    """``items``, ``markdown``, ``file``, or a custom/future type (kept in ``raw``)."""
    entries: list[Json] = field(default_factory=list)
    markdown: str | None = None
    uri: str | None = None
    raw: Json = None
    """The plan as last sent (the v1 update, or the v2 ``plan`` object)."""
    meta: Json = None
    removed: bool = False
    removed_seq: int | None = None
    updates: int = 0


@dataclass(kw_only=True, eq=False)
class Permission(Entity):
    """A ``session/request_permission`` request and the client's answer to it."""

    entity: ClassVar[str] = "permission"
    request_id: Json
    tool_call_id: str | None = None
    title: str | None = None
    """The prompt's title (v2), else the title of the tool call it carries (v1)."""
    description: str | None = None
    tool_call: Json = None
    """The tool call update the request carries (v1 ``toolCall``, v2 ``subject.toolCall``)."""
    subject: Json = None
    options: list[Json] = field(default_factory=list)
    params: Json = None
    answered: bool = False
    answered_seq: int | None = None
    answered_ts_ns: int | None = None
    outcome: str | None = None
    """``selected``, ``cancelled``, or a custom/future outcome as sent."""
    option_id: str | None = None
    result: Json = None
    error: Json = None
    """The JSON-RPC error object when the client answered with an error."""
    cancel_requested_seq: int | None = None
    """The ``$/cancel_request`` that named this request while it was pending."""

    @property
    def option(self) -> Json:
        """The selected option object, when the answer selected one of the offered options."""
        for opt in self.options:
            if isinstance(opt, dict) and opt.get("optionId") == self.option_id:
                return opt
        return None


@dataclass(kw_only=True, eq=False)
class Terminal(Entity):
    """An agent-owned display terminal (v2) or a client terminal created by ``terminal/create``."""

    entity: ClassVar[str] = "terminal"
    terminal_id: str | None
    """None until the client answers ``terminal/create``."""
    command: str | None = None
    args: list[Json] = field(default_factory=list)
    cwd: str | None = None
    output: bytearray = field(default_factory=bytearray)
    """The bytes retained for the terminal: the last snapshot plus the chunks after it."""
    exit_status: Json = None
    """A concrete ``exitStatus`` (``exitCode`` / ``signal``): the terminal exited."""
    size: Json = None
    capabilities: Json = None
    meta: Json = None
    truncated: bool = False
    client_side: bool = False
    """Created through the v1 ``terminal/create`` method (the client runs it)."""
    killed: bool = False
    released: bool = False
    error: Json = None
    """The error answer to ``terminal/create``."""
    chunks: int = 0
    decode_errors: int = 0
    """Output chunks whose ``data`` was not valid base64 (their bytes are not in ``output``)."""
    placeholder: bool = False

    @property
    def text(self) -> str:
        return self.output.decode("utf-8", errors="replace")

    @property
    def exited(self) -> bool:
        return self.exit_status is not None


@dataclass(kw_only=True, eq=False)
class Compaction(Entity):
    entity: ClassVar[str] = "compaction"
    compaction_id: str
    status: str | None = None
    summary: list[Json] = field(default_factory=list)
    error: str | None = None
    meta: Json = None
    chunks: int = 0
    updates: int = 0
    placeholder: bool = False
    """Created by a summary chunk before any ``compaction_update`` for its id."""

    @property
    def text(self) -> str:
        return text_of(self.summary)


@dataclass(kw_only=True, eq=False)
class Notice(Entity):
    """A live advisory notice: not conversation history (``replay`` set means it was replayed
    anyway, which the documents say agents should not do)."""

    entity: ClassVar[str] = "notice"
    severity: str | None = None
    title: str | None = None
    description: str | None = None
    meta: Json = None
    live: bool = True


@dataclass(kw_only=True, eq=False)
class Subagent(Entity):
    """A draft ``subagent_update``: a child session and its patched display fields."""

    entity: ClassVar[str] = "subagent"
    child_session_id: str
    fields: dict[str, Json] = field(default_factory=dict)
    """Every field except ``sessionId``, patched (omitted: unchanged, ``null``: removed)."""

    @property
    def title(self) -> Json:
        return self.fields.get("title")


@dataclass(kw_only=True, eq=False)
class Call(Entity):
    """Any other request (fs methods, mode/config changes, extension methods) and its answer."""

    entity: ClassVar[str] = "call"
    method: str
    dir: str
    """Direction of the request."""
    request_id: Json
    params: Json = None
    answered: bool = False
    answered_seq: int | None = None
    answered_ts_ns: int | None = None
    result: Json = None
    error: Json = None
    cancel_requested_seq: int | None = None
    """The ``$/cancel_request`` that named this request while it was pending."""


@dataclass(kw_only=True, eq=False)
class Notification(Entity):
    """A known notification other than ``session/update`` and ``session/cancel``:
    ``$/cancel_request``, ``auth/status_update``, ``elicitation/complete``, the notification forms
    of ``mcp/message`` and ``proxy/successor``, ..."""

    entity: ClassVar[str] = "notification"
    method: str
    dir: str
    params: Json = None
    cancels_seq: int | None = None
    """``$/cancel_request``: the pending request it names (None when nothing pending has that id)."""
    cancels_method: str | None = None
    cancels_id: Json = None


@dataclass(kw_only=True, eq=False)
class SessionState(Entity):
    """A session state update as a timeline entry (the latest values are also on the
    ``Conversation``): usage, state, session info, current mode, config options, commands."""

    entity: ClassVar[str] = "session_state"
    variant: str
    fields: dict[str, Json] = field(default_factory=dict)
    """The update's members except ``sessionUpdate``."""


@dataclass(kw_only=True, eq=False)
class ErrorResponse(Entity):
    """A JSON-RPC error answer not shown on a ``Permission``, ``Call`` or ``Terminal`` entry."""

    entity: ClassVar[str] = "error"
    method: str | None
    """The method of the request answered; None when no request with that id was seen."""
    dir: str
    """Direction of the error response (``a2c``: the agent refused a client request)."""
    request_id: Json = None
    request_seq: int | None = None
    code: Json = None
    message: Json = None
    data: Json = None
    error: Json = None
    """The whole error object, as sent."""


@dataclass(kw_only=True, eq=False)
class Cancellation(Entity):
    """The client's ``session/cancel``."""

    entity: ClassVar[str] = "cancel"
    params: Json = None


@dataclass(kw_only=True, eq=False)
class Unknown(Entity):
    """Something the fold does not interpret, kept raw for generic display."""

    entity: ClassVar[str] = "unknown"
    method: str | None
    update_kind: str | None = None
    """The ``sessionUpdate`` value for an update (None for other messages)."""
    dir: str = A2C
    raw: Json = None
    """The update object, or the whole message for anything that is not a session update."""
    reason: str = "unknown"
    """``unknown`` (a variant or method the fold does not know) or ``malformed`` (a known one
    whose payload lacks what the rules need, e.g. an id)."""

    @property
    def extension(self) -> bool:
        name = self.update_kind if self.update_kind is not None else self.method
        return isinstance(name, str) and name.startswith("_")


E = TypeVar("E", bound=Entity)

# --------------------------------------------------------------------------------------------
# Output: turns and the conversation


@dataclass(kw_only=True, eq=False)
class PromptTurn:
    """One ``session/prompt``: what the user sent and how the agent's work on it ended."""

    index: int
    """1-based, in the order of the session's prompts; ``Entity.turn`` refers to it."""
    session_id: str | None
    seq: int
    ts_ns: int
    run: int | str | None = None
    request_id: Json = None
    prompt: list[Json] = field(default_factory=list)
    user_message: Message | None = None
    """The timeline entry of the user's message (the agent's report of it once reconciled)."""
    message_id: str | None = None
    """v2: the ``messageId`` the acceptance response returned."""
    accepted_seq: int | None = None
    """v2: the seq of the successful response (acceptance = insertion)."""
    stop_reason: str | None = None
    end_seq: int | None = None
    """The frame that ended the turn: the v1 response, the v2 idle ``state_update`` with a stop
    reason, or an error response."""
    end_ts_ns: int | None = None
    error: Json = None
    cancel_seq: int | None = None
    """The ``session/cancel`` sent while the turn was open."""
    cancel_requested_seq: int | None = None
    """A ``$/cancel_request`` that named the prompt request while it was pending."""
    usage: Json = None
    """The v1 response's (unstable) per-turn ``usage``."""
    replay: bool = False
    status: str = "running"
    """``running`` (open, the connection goes on), ``ended`` (v1 response or v2 idle), ``error``
    (an error answer) or ``unfinished`` (open when the connection ended)."""
    first_output_ns: int | None = None
    """When the agent's first output of the turn came (``TurnOutput``; ``protocol.output``)."""
    first_output_seq: int | None = None
    chunks: int = 0
    """The agent's streamed pieces counted towards the turn (``protocol.output.CHUNK``)."""

    @property
    def first_output_ms(self) -> float | None:
        """Time to first output: from the prompt to the agent's first output, in ms."""
        return None if self.first_output_ns is None else round((self.first_output_ns - self.ts_ns) / 1e6, 1)

    @property
    def open(self) -> bool:
        return self.end_seq is None

    @property
    def duration_ns(self) -> int | None:
        return None if self.end_ts_ns is None else self.end_ts_ns - self.ts_ns


@dataclass(kw_only=True)
class Usage:
    used: Json = None
    size: Json = None
    cost: Json = None
    """``{"amount": ..., "currency": ...}`` or None."""
    meta: Json = None
    seq: int = -1
    ts_ns: int = 0


@dataclass(eq=False)
class Conversation:
    """One session's reconstructed state (``session_id`` None: the connection-level part)."""

    session_id: str | None = None
    timeline: list[Entity] = field(default_factory=list)
    """Entries in order of first sighting."""
    turns: list[PromptTurn] = field(default_factory=list)
    protocol_version: int | None = None
    runs: list[int | str | None] = field(default_factory=list)
    cwd: str | None = None
    title: str | None = None
    updated_at: str | None = None
    info_meta: Json = None
    state: str | None = None
    """Latest foreground state: v2 ``state_update``; for v1, derived (``running`` from the prompt
    until its response, then ``idle``)."""
    state_seq: int | None = None
    stop_reason: str | None = None
    """The stop reason of the latest ``idle`` (None while not idle)."""
    usage: Usage | None = None
    current_mode_id: str | None = None
    modes: list[Json] | None = None
    """``availableModes`` from the session setup response."""
    config_options: list[Json] | None = None
    available_commands: list[Json] | None = None
    unforwarded: list[int] = field(default_factory=list)
    """Seqs of frames the proxy did not forward (not applied)."""
    unanswered: list[tuple[int, str | None]] = field(default_factory=list)
    """(seq, method) of the requests of the session still unanswered when their connection ended."""
    _index: dict[tuple[Any, ...], Entity] = field(default_factory=dict, init=False, repr=False)
    _latest: dict[tuple[str, str], Entity] = field(default_factory=dict, init=False, repr=False)

    # Lookups by protocol id (the latest entity with that id, whatever run created it).

    def find(self, entity: str, item_id: str) -> Entity | None:
        """E.g. ``find("tool_call", "call_1")``, ``find("terminal", "term_1")``; for messages
        the key is ``"message:<role>"``."""
        return self._latest.get((entity, item_id))

    def tool_call(self, tool_call_id: str) -> ToolCall | None:
        found = self._latest.get(("tool_call", tool_call_id))
        return found if isinstance(found, ToolCall) else None

    def terminal(self, terminal_id: str) -> Terminal | None:
        found = self._latest.get(("terminal", terminal_id))
        return found if isinstance(found, Terminal) else None

    def message(self, message_id: str, role: str = "agent") -> Message | None:
        found = self._latest.get((f"message:{role}", message_id))
        return found if isinstance(found, Message) else None

    # Views.

    def of(self, cls: type[E]) -> list[E]:
        """The timeline entries of one type, in order: ``conv.of(ToolCall)``."""
        return [e for e in self.timeline if isinstance(e, cls)]

    def in_turn(self, index: int) -> list[Entity]:
        """The entries created during turn ``index`` (0: before the first prompt)."""
        return [e for e in self.timeline if e.turn == index]

    @property
    def messages(self) -> list[Message]:
        return self.of(Message)

    @property
    def tool_calls(self) -> list[ToolCall]:
        return self.of(ToolCall)

    @property
    def plans(self) -> list[Plan]:
        return self.of(Plan)

    @property
    def plan(self) -> Plan | None:
        """The latest plan not removed (the single v1 plan, or the last updated v2 plan)."""
        live = [p for p in self.plans if not p.removed]
        return max(live, key=lambda p: p.updated_seq) if live else None

    @property
    def permissions(self) -> list[Permission]:
        return self.of(Permission)

    @property
    def errors(self) -> list[ErrorResponse]:
        return self.of(ErrorResponse)

    @property
    def current_turn(self) -> PromptTurn | None:
        return self.turns[-1] if self.turns else None

    @property
    def empty(self) -> bool:
        return not self.timeline and not self.turns


# --------------------------------------------------------------------------------------------
# The fold


def fold(
    inputs: Iterable[FoldInput], session_id: str | None = None, *, protocol_version: int | None = None
) -> Conversation:
    """Fold ``inputs`` into the conversation of ``session_id``.

    Without ``session_id`` the inputs must concern at most one session (use ``fold_sessions``
    for several; a ``ValueError`` says so otherwise). Connection-level entries (errors to
    ``initialize``, extension notifications without a session, ...) are merged into the returned
    timeline by seq. ``protocol_version`` overrides the version negotiated by ``initialize``
    (useful when the inputs do not include it); without either, the fold infers it from
    version-specific traffic and falls back to v1 rules.
    """
    convs = fold_sessions(inputs, protocol_version=protocol_version)
    connection = convs.get(None)
    if session_id is None:
        sessions = [sid for sid in convs if sid is not None]
        if len(sessions) > 1:
            raise ValueError(f"frames of {len(sessions)} sessions ({', '.join(sessions)}): name one")
        if not sessions:
            return connection or Conversation()
        session_id = sessions[0]
    conv = convs.get(session_id) or Conversation(session_id=session_id)
    if connection is None or not connection.timeline:
        return conv
    merged = copy.copy(conv)
    merged.timeline = sorted([*conv.timeline, *connection.timeline], key=lambda e: e.seq)
    return merged


def fold_rows(
    rows: Iterable[Mapping[str, Any]], *, ended: Mapping[Any, bool] | None = None
) -> dict[str | None, Conversation]:
    """Fold recorded ``frames`` rows (in run, seq order) into conversations by session.

    Each run's rows get their meaning from ``protocol.rows.run_events`` (the one rows-to-events
    adapter; a batch through its element rows, as the recorder tracked it). ``ended``: run id ->
    whether that run is over; then its unanswered requests are final and its open turns
    ``unfinished``; a run still recording keeps them ``running``. Runs not named are taken as
    ended (an import, a file).
    """
    folder = Folder()
    relayed = (r for r in rows if r["dir"] in (C2A, A2C) and r.get("kind") != "batch")
    for run, group in itertools.groupby(relayed, key=lambda r: r["run_id"]):
        for row, events, turn in run_events(group, ended=(ended or {}).get(run, True)):
            if row is None:
                folder.ended(run, 0, events)
                continue
            message = None
            raw = row.get("raw")
            if raw is not None and row.get("kind") != "invalid":
                try:
                    message = json.loads(raw)
                except ValueError:
                    message = None
            item = FoldInput(
                seq=row["seq"],
                ts_ns=row["ts_ns"],
                dir=row["dir"],
                message=message,
                forwarded=row.get("forwarded") != 0,
                run=run,
            )
            folder.apply(item, message, events, turn)
    return folder.conversations


def fold_sessions(
    inputs: Iterable[FoldInput], *, protocol_version: int | None = None
) -> dict[str | None, Conversation]:
    """Fold ``inputs`` into one conversation per session, in order of first appearance; key
    None holds what concerns no session."""
    folder = Folder(protocol_version=protocol_version)
    for item in inputs:
        folder.feed(item)
    return folder.conversations


@dataclass(slots=True)
class _At:
    """Where an effect happens: the frame being applied."""

    seq: int
    ts_ns: int
    run: int | str | None
    replay: bool
    window: int | None = None
    """The replay window the frame is history of (the seq of the request that opened it)."""
    turn_seq: int | None = None
    """The prompt seq of the turn the frame belongs to (``ConnectionState.turn_of``)."""


@dataclass(slots=True)
class _Pending:
    """A request waiting for its response."""

    method: str
    dir: str
    id: Json
    params: dict[str, Any]
    session_id: str | None
    seq: int
    ts_ns: int
    entity: Entity | None = None
    turn: PromptTurn | None = None


_MESSAGE_ROLES = {
    "user_message_chunk": "user",
    "agent_message_chunk": "agent",
    "agent_thought_chunk": "thought",
    "session_message_chunk": "session",
}
_MESSAGE_UPSERTS = {
    "user_message": "user",
    "agent_message": "agent",
    "agent_thought": "thought",
    "session_message": "session",
}
# Latest-value session state that is also a timeline entry (``SessionState``), by variant.
_STATE_VARIANTS = frozenset(
    {
        "usage_update",
        "state_update",
        "session_info_update",
        "current_mode_update",
        "config_option_update",
        "available_commands_update",
    }
)
# Session set-up answers carry modes and config options.
_SETUP_RESULTS = frozenset({"session/new", "session/load", "session/resume", "session/fork"})
_TERMINAL_METHODS = frozenset(
    {"terminal/create", "terminal/output", "terminal/wait_for_exit", "terminal/kill", "terminal/release"}
)
# ToolCall / ToolCallUpdate wire fields and the attributes they patch.
_TOOL_FIELDS = (
    ("title", "title"),
    ("name", "name"),
    ("kind", "tool_kind"),
    ("status", "status"),
    ("content", "content"),
    ("locations", "locations"),
    ("rawInput", "raw_input"),
    ("rawOutput", "raw_output"),
    ("_meta", "meta"),
    ("capabilities", "capabilities"),
)
_TOOL_DEFAULTS: dict[str, Any] = {
    "title": None,
    "name": None,
    "tool_kind": "other",
    "status": "pending",
    "raw_input": None,
    "raw_output": None,
    "meta": None,
    "capabilities": None,
}


def _id_key(value: Json) -> tuple[str, Any]:
    # JSON-RPC ids are compared as JSON values: 1 and "1" are different requests.
    if isinstance(value, (int, float, str)) or value is None:
        return (type(value).__name__, value)
    return ("other", repr(value))


def _str(value: Json) -> str | None:
    return value if isinstance(value, str) else None


def _dict(value: Json) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Json) -> list[Json]:
    # A patch array replaces the stored one; `null` (or anything that is not an array) clears.
    return list(value) if isinstance(value, list) else []


def _frames(item: FoldInput) -> list[tuple[Json, FrameLike]]:
    """The messages of ``item`` with the frame the state machine reads for each."""
    if isinstance(item.message, list):
        # A batch: each element is a frame of its own (the recorder stores them as rows).
        out: list[tuple[Json, FrameLike]] = []
        for element in item.message:
            line = msgspec.json.encode(element)
            out.append((element, _frame(item, line, wire.decode_object(line))))
        return out
    if item.frame is not None:
        return [(item.message, item.frame)]
    line = item.line if item.line is not None else msgspec.json.encode(item.message)
    return [(item.message, _frame(item, line, wire.decode(line)))]


def _frame(item: FoldInput, line: bytes, frame: wire.Frame) -> RecordedFrame:
    """A decoded message as the state machine reads it (when no recorded row came with it)."""
    return RecordedFrame(
        {
            "seq": item.seq,
            "ts_ns": item.ts_ns,
            "dir": item.dir,
            "kind": frame.kind,
            "method": frame.method,
            "rpc_id": frame.rpc_id,
            "session_id": frame.session_id,
            "update_kind": frame.update_kind,
            "raw_bytes": line,
            "forwarded": int(item.forwarded),
        }
    )


class Folder:
    """The incremental fold: ``feed`` messages in relay order, read ``conversations`` any time
    (a live ``tail`` can render as frames arrive); ``finish(run)`` when a connection has ended.

    Pairing, replay windows, versions and turns come from the events of one protocol state
    machine per connection (``protocol.state``); the fold keeps the content."""

    def __init__(self, *, protocol_version: int | None = None) -> None:
        self.protocol_version = protocol_version
        """Forced protocol version (None: negotiated per run, else inferred, else v1)."""
        self.conversations: dict[str | None, Conversation] = {}
        self._states: dict[Any, ConnectionState] = {}
        self._negotiated: dict[Any, int] = {}
        self._inferred: dict[Any, int] = {}
        self._requests: dict[tuple[Any, int], list[_Pending]] = {}
        """Requests by (run, seq); a list only because a batch given as one input shares a seq."""
        self._turns: dict[tuple[Any, int], PromptTurn] = {}
        self._turn_seq: int | None = None
        """The turn of the frame being applied (``ConnectionState.turn_of``)."""
        self._updates: dict[str, Callable[[Conversation, _At, dict[str, Any], str], bool]] = {
            "tool_call": self._tool_call,
            "tool_call_update": self._tool_call_update,
            "tool_call_content_chunk": self._tool_call_chunk,
            "plan": self._plan_v1,
            "plan_update": self._plan_update,
            "plan_removed": self._plan_removed,
            "terminal_update": self._terminal_update,
            "terminal_output_chunk": self._terminal_chunk,
            "compaction_update": self._compaction_update,
            "compaction_summary_chunk": self._compaction_chunk,
            "usage_update": self._usage,
            "state_update": self._state,
            "session_info_update": self._session_info,
            "current_mode_update": self._current_mode,
            "config_option_update": self._config_options,
            "available_commands_update": self._commands,
            "notice": self._notice,
            "subagent_update": self._subagent,
        }
        for variant in _MESSAGE_ROLES:
            self._updates[variant] = self._message_chunk
        for variant in _MESSAGE_UPSERTS:
            self._updates[variant] = self._message_upsert

    # ---- entry points

    def feed(self, item: FoldInput) -> None:
        """Apply ``item`` (a batch: each element), its meaning from this fold's state machine."""
        state = self._states.get(item.run)
        if state is None:
            state = self._states[item.run] = ConnectionState(version=self.protocol_version)
        for msg, frame in _frames(item):
            events = state.feed(frame)
            self.apply(item, msg, events, state.turn_of(frame, events))

    def apply(self, item: FoldInput, msg: Json, events: tuple[ev.Event, ...], turn: int | None) -> None:
        """Apply one frame's message given its meaning: the ``events`` and ``turn`` (prompt seq)
        its connection's state machine gave (``feed``, or ``protocol.rows.run_events``)."""
        self._turn_seq = turn
        if events:
            self._before(item, events)
        if not item.forwarded:
            # The peer never saw it: it changed nothing the peer holds. Say so where it belongs
            # (a line that is not JSON belongs nowhere: the frame list shows it).
            if msg is not None:
                unforwarded = self._conv(self._session_of(item, msg, events), item.run).unforwarded
                if not unforwarded or unforwarded[-1] != item.seq:
                    unforwarded.append(item.seq)
            if isinstance(msg, dict) and "id" in msg and isinstance(msg.get("method"), str):
                # A request kept from its receiver was still made: its sender waits for an answer
                # (the proxy may give one, e.g. an injected error), so it is in the conversation.
                self._message(item, msg, events)
        elif isinstance(msg, dict):
            self._message(item, msg, events)
        self._count(item, msg, turn)
        if events:
            self._after(item, events)

    def _count(self, item: FoldInput, msg: Json, turn_seq: int | None) -> None:
        # What the agent's update counts towards its turn: protocol.output's vocabulary.
        if turn_seq is None or item.dir != A2C or not isinstance(msg, dict) or msg.get("method") != "session/update":
            return
        mask = output.counts(_str(_dict(_dict(msg.get("params")).get("update")).get("sessionUpdate")))
        turn = self._turns.get((item.run, turn_seq))
        if turn is not None and mask & output.IS_CHUNK:
            turn.chunks += 1

    def finish(self, run: Any, ts_ns: int = 0) -> None:
        """The connection ``run`` ended: its unanswered requests and unfinished turns are final."""
        state = self._states.get(run)
        if state is None:
            return
        self.ended(run, ts_ns, state.finish(ts_ns))

    def ended(self, run: Any, ts_ns: int, events: tuple[ev.Event, ...]) -> None:
        """The events the end of connection ``run`` caused (``ConnectionState.finish``)."""
        self._after(FoldInput(seq=0, ts_ns=ts_ns, dir=A2C, message=None, run=run), events)

    def conversation(self, session_id: str | None) -> Conversation:
        return self.conversations.get(session_id) or Conversation(session_id=session_id)

    # ---- events (the protocol's meaning, from the state machine)

    def _before(self, item: FoldInput, events: tuple[ev.Event, ...]) -> None:
        """Events that set the context the frame's content is applied in."""
        run = item.run
        for e in events:
            if isinstance(e, ev.VersionNegotiated):
                if e.version is not None:
                    self._negotiated[run] = e.version
            elif isinstance(e, ev.VersionInferred):
                self._inferred.setdefault(run, e.version)

    def _after(self, item: FoldInput, events: tuple[ev.Event, ...]) -> None:
        """Events that change what the frame's content created or found."""
        run = item.run
        for e in events:
            if isinstance(e, ev.TurnAccepted):
                turn = self._turns.get((run, e.prompt_seq))
                if turn is not None:
                    turn.accepted_seq = e.seq
                    turn.message_id = e.message_id
            elif isinstance(e, ev.TurnEnded):
                self._turn_ended(item, e)
            elif isinstance(e, ev.SessionCancelled):
                for prompt_seq in e.prompt_seqs:
                    turn = self._turns.get((run, prompt_seq))
                    if turn is not None and turn.cancel_seq is None:
                        turn.cancel_seq = e.seq
            elif isinstance(e, ev.RequestCancelled) and e.request_seq is not None:
                for pending in self._requests.get((run, e.request_seq), ()):
                    target: Any = pending.entity if pending.entity is not None else pending.turn
                    if target is not None and getattr(target, "cancel_requested_seq", None) is None:
                        target.cancel_requested_seq = e.seq
            elif isinstance(e, ev.TurnOutput):
                turn = self._turns.get((run, e.prompt_seq))
                if turn is not None and turn.first_output_ns is None:
                    turn.first_output_ns, turn.first_output_seq = e.ts_ns, e.seq
            elif isinstance(e, ev.Unanswered):
                self._conv(e.session_id, run).unanswered.append((e.request_seq, e.method))

    def _turn_ended(self, item: FoldInput, e: ev.TurnEnded) -> None:
        turn = self._turns.get((item.run, e.prompt_seq))
        if turn is None:
            return
        turn.status = e.status
        if e.seq is None:
            return  # unfinished: the connection ended first
        turn.stop_reason = e.stop_reason
        turn.end_seq, turn.end_ts_ns = e.seq, e.ts_ns
        conv = self.conversations.get(turn.session_id)
        if conv is None:
            return
        if e.by == "response" or (e.by == "error" and not self._v2(item.run)):
            # v1: the prompt request was the turn; the agent is idle again. (A v2 error means the
            # prompt was never inserted: the state is whatever it was.)
            conv.state, conv.state_seq, conv.stop_reason = "idle", e.seq, e.stop_reason

    # ---- plumbing

    def _version(self, run: Any) -> int:
        # Without any evidence, v1 rules: every recorded real peer so far speaks v1.
        return self._known_version(run) or 1

    def _v2(self, run: Any) -> bool:
        return self._version(run) >= 2

    def _conv(self, session_id: str | None, run: Any) -> Conversation:
        conv = self.conversations.get(session_id)
        if conv is None:
            conv = self.conversations[session_id] = Conversation(session_id=session_id)
        if run not in conv.runs:
            conv.runs.append(run)
        conv.protocol_version = self._known_version(run) or conv.protocol_version
        return conv

    def _known_version(self, run: Any) -> int | None:
        return self.protocol_version or self._negotiated.get(run) or self._inferred.get(run)

    def _session_of(self, item: FoldInput, msg: Json, events: tuple[ev.Event, ...]) -> str | None:
        if not isinstance(msg, dict):
            return None
        sid = _str(_dict(msg.get("params")).get("sessionId"))
        if sid is not None or "method" in msg:
            return sid
        for e in events:
            if isinstance(e, ev.ResponsePaired):
                return e.session_id
        return None

    def _at(self, item: FoldInput, session_id: str | None, events: tuple[ev.Event, ...] = ()) -> _At:
        window = None
        replay = bool(item.replay)
        for e in events:
            if isinstance(e, ev.UpdateReplayed):
                # History: sent inside a replay window (session/load, session/resume + replayFrom).
                replay, window = True, e.window_seq
        return _At(item.seq, item.ts_ns, item.run, replay, window, None if replay else self._turn_seq)

    def _add(self, conv: Conversation, at: _At, cls: type[Any], **fields: Any) -> Any:
        entity = cls(
            seq=at.seq,
            ts_ns=at.ts_ns,
            session_id=conv.session_id,
            turn=self._turn_index(at),
            replay=at.replay,
            run=at.run,
            rebuilt_in=at.window,
            **fields,
        )
        conv.timeline.append(entity)
        return entity

    def _turn_index(self, at: _At) -> int:
        turn = self._turns.get((at.run, at.turn_seq)) if at.turn_seq is not None else None
        return turn.index if turn is not None else 0

    def _keyed(self, conv: Conversation, at: _At, kind: str, item_id: str) -> Any:
        return conv._index.get((kind, at.run, item_id))

    def _register(self, conv: Conversation, at: _At, kind: str, item_id: str, entity: Entity) -> None:
        conv._index[(kind, at.run, item_id)] = entity
        conv._latest[(kind, item_id)] = entity

    @staticmethod
    def _touch(entity: Entity, at: _At) -> None:
        entity.updated_seq = at.seq
        entity.updated_ts_ns = at.ts_ns
        if at.replay and not entity.replay:
            entity.replayed_seq = at.seq

    @staticmethod
    def _rebuilds(entity: Entity, at: _At) -> bool:
        """Whether this touch starts the entity's content over: the first one of a replay window.

        History replayed on the same connection re-sends what is already held (v2 resume with
        replayFrom: every message, as upserts or chunks): chunks of a replayed message rebuild
        it instead of appending to the copy already held.
        """
        if at.window is None or entity.rebuilt_in == at.window:
            return False
        entity.rebuilt_in = at.window
        return True

    # ---- messages by kind

    def _message(self, item: FoldInput, msg: dict[str, Any], events: tuple[ev.Event, ...]) -> None:
        method = msg.get("method")
        if isinstance(method, str):
            if "id" in msg:
                self._request(item, msg, method, events)
            else:
                self._notification(item, msg, method, events)
        elif "id" in msg and ("result" in msg or "error" in msg):
            self._response(item, msg, events)
        # Anything else (no method, no result) is not JSON-RPC the peers could act on; the
        # frame list shows it, the conversation has nothing to say about it.

    def _notification(self, item: FoldInput, msg: dict[str, Any], method: str, events: tuple[ev.Event, ...]) -> None:
        params = _dict(msg.get("params"))
        sid = _str(params.get("sessionId"))
        at = self._at(item, sid, events)
        if method == "session/update" and item.dir == A2C:
            self._update(self._conv(sid, item.run), at, params)
            return
        if method == "session/cancel" and item.dir == C2A:
            self._add(self._conv(sid, item.run), at, Cancellation, params=msg.get("params"))
            return
        if any(isinstance(e, ev.NameUnknown) for e in events):
            self._add(self._conv(sid, item.run), at, Unknown, method=method, dir=item.dir, raw=msg)
            return
        cancels = next((e for e in events if isinstance(e, ev.RequestCancelled)), None)
        target = None
        if cancels is not None and cancels.request_seq is not None:
            found = self._requests.get((item.run, cancels.request_seq))
            target = found[0] if found else None
        # Shown with the request it cancels, in that request's conversation.
        conv = self._conv(target.session_id if target is not None and sid is None else sid, item.run)
        self._add(
            conv,
            at,
            Notification,
            method=method,
            dir=item.dir,
            params=msg.get("params"),
            cancels_seq=target.seq if target is not None else None,
            cancels_method=target.method if target is not None else None,
            cancels_id=_dict(msg.get("params")).get("requestId") if method == "$/cancel_request" else None,
        )

    def _request(self, item: FoldInput, msg: dict[str, Any], method: str, events: tuple[ev.Event, ...]) -> None:
        params = _dict(msg.get("params"))
        sid = _str(params.get("sessionId"))
        conv = self._conv(sid, item.run)
        at = self._at(item, sid, events)
        pending = _Pending(method, item.dir, msg.get("id"), params, sid, at.seq, at.ts_ns)
        self._requests.setdefault((item.run, item.seq), []).append(pending)
        restore = item.dir == C2A and method in ("session/load", "session/resume")
        if restore and sid is not None and isinstance(params.get("cwd"), str):
            conv.cwd = params["cwd"]
        if item.dir == C2A and method == "session/prompt" and any(isinstance(e, ev.TurnStarted) for e in events):
            self._prompt(conv, at, pending, msg)
        elif item.dir == A2C and method == "session/request_permission":
            pending.entity = self._permission(conv, at, msg, params)
        elif item.dir == A2C and method in _TERMINAL_METHODS:
            if method == "terminal/create":
                pending.entity = self._add(
                    conv,
                    at,
                    Terminal,
                    terminal_id=None,
                    command=_str(params.get("command")),
                    args=_list(params.get("args")),
                    cwd=_str(params.get("cwd")),
                    client_side=True,
                )
        else:
            pending.entity = self._add(
                conv,
                at,
                Call,
                method=method,
                dir=item.dir,
                request_id=msg.get("id"),
                params=msg.get("params"),
            )

    def _pending_for(self, item: FoldInput, msg: dict[str, Any], paired: ev.ResponsePaired) -> _Pending | None:
        found = self._requests.get((item.run, paired.request_seq))
        if not found:
            return None
        key = _id_key(msg.get("id"))
        for pending in found:
            if pending.dir != item.dir and _id_key(pending.id) == key:
                found.remove(pending)
                return pending
        return None

    def _response(self, item: FoldInput, msg: dict[str, Any], events: tuple[ev.Event, ...]) -> None:
        paired = next((e for e in events if isinstance(e, ev.ResponsePaired)), None)
        pending = self._pending_for(item, msg, paired) if paired is not None else None
        error = msg.get("error")
        is_error = "error" in msg
        result = msg.get("result")
        if paired is None or pending is None:
            if is_error:
                at = self._at(item, None)
                self._error(self._conv(None, item.run), at, None, item.dir, msg.get("id"), None, error)
            return
        sid = paired.session_id if paired.session_id is not None else pending.session_id
        conv = self._conv(sid, item.run)
        at = self._at(item, sid)
        if sid is not None and pending.method == "session/new" and isinstance(pending.params.get("cwd"), str):
            conv.cwd = pending.params["cwd"]

        entity = pending.entity
        if isinstance(entity, (Call, Permission)):
            entity.answered = True
            entity.answered_seq = at.seq
            entity.answered_ts_ns = at.ts_ns
            self._touch(entity, at)
            if is_error:
                entity.error = error
            else:
                entity.result = result
                if isinstance(entity, Permission):
                    outcome = _dict(_dict(result).get("outcome"))
                    entity.outcome = _str(outcome.get("outcome"))
                    entity.option_id = _str(outcome.get("optionId"))
            if isinstance(entity, Call):
                if pending.method == "session/new" and sid is not None and entity.session_id is None:
                    self._move(entity, conv)
                if not is_error:
                    self._call_effects(conv, pending, result)
            return
        if pending.method == "terminal/create" and isinstance(entity, Terminal):
            self._touch(entity, at)
            if is_error:
                entity.error = error
            else:
                tid = _str(_dict(result).get("terminalId"))
                if tid is not None:
                    entity.terminal_id = tid
                    self._register(conv, at, "terminal", tid, entity)
            return
        if is_error:
            if pending.turn is not None:
                pending.turn.error = error
            self._error(conv, at, pending.method, item.dir, pending.id, pending.seq, error)
            return
        if pending.method == "session/prompt" and pending.turn is not None:
            self._prompt_answered(conv, at, pending.turn, _dict(result), events)
        elif pending.method in _TERMINAL_METHODS:
            self._terminal_answered(conv, at, pending, _dict(result))

    def _move(self, entity: Entity, conv: Conversation) -> None:
        """A ``session/new`` call belongs to the session it created (asked before it had an id)."""
        source = self.conversations.get(entity.session_id)
        if source is not None and entity in source.timeline:
            source.timeline.remove(entity)
        entity.session_id = conv.session_id
        entity.turn = 0
        bisect.insort(conv.timeline, entity, key=lambda e: e.seq)

    def _error(
        self,
        conv: Conversation,
        at: _At,
        method: str | None,
        direction: str,
        request_id: Json,
        request_seq: int | None,
        error: Json,
    ) -> None:
        err = _dict(error)
        self._add(
            conv,
            at,
            ErrorResponse,
            method=method,
            dir=direction,
            request_id=request_id,
            request_seq=request_seq,
            code=err.get("code"),
            message=err.get("message"),
            data=err.get("data"),
            error=error,
        )

    # ---- session setup, modes, config

    @staticmethod
    def _session_setup(conv: Conversation, result: dict[str, Any]) -> None:
        modes = result.get("modes")
        if isinstance(modes, dict):
            conv.current_mode_id = _str(modes.get("currentModeId"))
            conv.modes = _list(modes.get("availableModes"))
        if isinstance(result.get("configOptions"), list):
            conv.config_options = list(result["configOptions"])

    def _call_effects(self, conv: Conversation, pending: _Pending, result: Json) -> None:
        if pending.method in _SETUP_RESULTS:
            self._session_setup(conv, _dict(result))
        # The client's own mode/config changes take effect when the agent accepts them.
        elif pending.method == "session/set_mode" and isinstance(pending.params.get("modeId"), str):
            conv.current_mode_id = pending.params["modeId"]
        elif pending.method == "session/set_config_option":
            options = _dict(result).get("configOptions")
            if isinstance(options, list):
                conv.config_options = list(options)

    # ---- prompt turns

    def _prompt(self, conv: Conversation, at: _At, pending: _Pending, msg: dict[str, Any]) -> None:
        prompt = _list(pending.params.get("prompt"))
        turn = PromptTurn(
            index=len(conv.turns) + 1,
            session_id=conv.session_id,
            seq=at.seq,
            ts_ns=at.ts_ns,
            run=at.run,
            request_id=msg.get("id"),
            prompt=prompt,
        )
        conv.turns.append(turn)
        pending.turn = turn
        self._turns[(at.run, at.seq)] = turn
        # The user's message as the client submitted it. In v1 it is the only record of it; in
        # v2 the agent reports the inserted message (with its id) and that report replaces this.
        turn.user_message = self._add(conv, at, Message, role="user", content=list(prompt), from_prompt=True)
        if not self._v2(at.run):
            conv.state, conv.state_seq, conv.stop_reason = "running", at.seq, None

    def _prompt_answered(
        self, conv: Conversation, at: _At, turn: PromptTurn, result: dict[str, Any], events: tuple[ev.Event, ...]
    ) -> None:
        if "usage" in result:
            turn.usage = result.get("usage")
        accepted = next((e for e in events if isinstance(e, ev.TurnAccepted)), None)
        message_id = accepted.message_id if accepted is not None else None
        if message_id is not None:
            # v2: acceptance. The response and the user_message report describe the same
            # insertion, in either order; reconcile by id, never by content or arrival order.
            mine = turn.user_message
            reported = self._keyed(conv, at, "message:user", message_id)
            if reported is not None and reported is not mine:
                if mine is not None and mine.from_prompt and mine.message_id is None and mine in conv.timeline:
                    conv.timeline.remove(mine)
                turn.user_message = reported
                if not reported.replay:
                    # The agent may report a queued prompt's message while earlier work is open:
                    # it is still this prompt's message.
                    reported.turn = turn.index
            elif mine is not None and mine.message_id is None:
                mine.message_id = message_id
                self._register(conv, at, "message:user", message_id, mine)

    # ---- permission requests

    def _permission(self, conv: Conversation, at: _At, msg: dict[str, Any], params: dict[str, Any]) -> Permission:
        subject = params.get("subject")
        tool_call = params.get("toolCall")
        if not isinstance(tool_call, dict) and _dict(subject).get("type") == "tool_call":
            tool_call = _dict(subject).get("toolCall")
        tool_call_id = _str(_dict(tool_call).get("toolCallId")) or _str(_dict(subject).get("toolCallId"))
        permission = self._add(
            conv,
            at,
            Permission,
            request_id=msg.get("id"),
            tool_call_id=tool_call_id,
            title=_str(params.get("title")) or _str(_dict(tool_call).get("title")),
            description=_str(params.get("description")),
            tool_call=tool_call,
            subject=subject,
            options=_list(params.get("options")),
            params=msg.get("params"),
        )
        # The request's tool call details describe the permission prompt; they are not an
        # update of the tool call entry (v2 says so explicitly), so only link the two.
        if tool_call_id is not None:
            target = self._keyed(conv, at, "tool_call", tool_call_id)
            if isinstance(target, ToolCall):
                target.permissions.append(permission)
        return permission

    # ---- session/update

    def _update(self, conv: Conversation, at: _At, params: dict[str, Any]) -> None:
        update = params.get("update")
        variant = _dict(update).get("sessionUpdate")
        if not isinstance(update, dict) or not isinstance(variant, str):
            self._add(conv, at, Unknown, method="session/update", raw=update, reason="malformed")
            return
        conv.protocol_version = self._known_version(at.run) or conv.protocol_version
        handler = self._updates.get(variant)
        if handler is None:
            self._add(conv, at, Unknown, method="session/update", update_kind=variant, raw=update)
        elif not handler(conv, at, update, variant):
            self._add(
                conv,
                at,
                Unknown,
                method="session/update",
                update_kind=variant,
                raw=update,
                reason="malformed",
            )
        elif variant in _STATE_VARIANTS:
            fields = {k: v for k, v in update.items() if k != "sessionUpdate"}
            self._add(conv, at, SessionState, variant=variant, fields=fields)

    # Messages.

    def _message_chunk(self, conv: Conversation, at: _At, update: dict[str, Any], variant: str) -> bool:
        if "content" not in update:
            return False
        role = _MESSAGE_ROLES[variant]
        message_id = _str(update.get("messageId"))
        last = _last_entry(conv)
        # v1 continuity never crosses a replay window's edge: history is a message of its own.
        current = (
            last
            if isinstance(last, Message)
            and last.role == role
            and last.run == at.run
            and last.replay == at.replay
            and last.rebuilt_in == at.window
            else None
        )
        msg: Message | None = None
        if message_id is not None:
            msg = self._keyed(conv, at, f"message:{role}", message_id)
            adopt = current is not None and current.message_id is None and current.from_prompt
            if msg is None and current is not None and adopt and not self._v2(at.run):
                # v1: the agent echoing the prompt it just received, now with an id. In v1 arrival
                # order is all there is; v2 reconciles through the prompt response instead.
                msg = current
                msg.message_id = message_id
                self._register(conv, at, f"message:{role}", message_id, msg)
        elif current is not None and (not current.from_prompt or not self._v2(at.run)):
            # v1 without ids: consecutive chunks of one kind are one message.
            msg = current
        if msg is None:
            msg = self._add(conv, at, Message, role=role, message_id=message_id)
            if message_id is not None:
                self._register(conv, at, f"message:{role}", message_id, msg)
        else:
            self._touch(msg, at)
            if self._rebuilds(msg, at):
                msg.content = []
        if msg.from_prompt:
            # The agent's own report of the user's message supersedes the client's copy.
            msg.content = []
            msg.from_prompt = False
        # One content block per chunk; its `_meta` belongs to the chunk, not the message.
        msg.content.append(update["content"])
        msg.chunks += 1
        if role == "session":
            self._participants(msg, update)
        return True

    def _message_upsert(self, conv: Conversation, at: _At, update: dict[str, Any], variant: str) -> bool:
        message_id = _str(update.get("messageId"))
        if message_id is None:
            return False
        role = _MESSAGE_UPSERTS[variant]
        msg = self._keyed(conv, at, f"message:{role}", message_id)
        if msg is None:
            msg = self._add(conv, at, Message, role=role, message_id=message_id)
            self._register(conv, at, f"message:{role}", message_id, msg)
        else:
            self._touch(msg, at)
        if "content" in update:
            value = update["content"]
            # An array replaces everything current, chunks included; null and [] clear.
            msg.content = list(value) if isinstance(value, list) else ([] if value is None else [value])
            msg.from_prompt = False
            self._rebuilds(msg, at)
        if "_meta" in update:
            msg.meta = update["_meta"]
        if role == "session":
            self._participants(msg, update)
        return True

    @staticmethod
    def _participants(msg: Message, update: dict[str, Any]) -> None:
        # Omitted or null participant ids mean "not supplied" and keep what is known.
        for key, attr in (
            ("senderSessionId", "sender_session_id"),
            ("recipientSessionId", "recipient_session_id"),
            ("senderMessageId", "sender_message_id"),
            ("recipientMessageId", "recipient_message_id"),
        ):
            value = _str(update.get(key))
            if value is not None:
                setattr(msg, attr, value)

    # Tool calls.

    def _new_tool_call(self, conv: Conversation, at: _At, tool_call_id: str, placeholder: bool) -> ToolCall:
        tc: ToolCall = self._add(conv, at, ToolCall, tool_call_id=tool_call_id, placeholder=placeholder)
        self._register(conv, at, "tool_call", tool_call_id, tc)
        return tc

    def _patch_tool_call(self, tc: ToolCall, update: dict[str, Any], at: _At) -> None:
        v1 = not self._v2(at.run)
        for key, attr in _TOOL_FIELDS:
            if key not in update:
                continue  # omitted: unchanged
            value = update[key]
            if key in ("content", "locations"):
                value = _list(value)  # arrays replace whole; null (or []) clears
            elif key == "name" and value is None and v1:
                continue  # the v1 schema: a null name leaves the existing one unchanged
            setattr(tc, attr, value)

    def _tool_call(self, conv: Conversation, at: _At, update: dict[str, Any], _variant: str) -> bool:
        tool_call_id = _str(update.get("toolCallId"))
        if tool_call_id is None:
            return False
        tc = self._keyed(conv, at, "tool_call", tool_call_id)
        if tc is None:
            tc = self._new_tool_call(conv, at, tool_call_id, placeholder=False)
        else:
            # v1 `tool_call` announces the whole call: sent again for a known id (e.g. in a
            # replay), it replaces the call, omitted fields back to their defaults.
            self._touch(tc, at)
            for attr, default in _TOOL_DEFAULTS.items():
                setattr(tc, attr, default)
            tc.content, tc.locations, tc.placeholder = [], [], False
            self._rebuilds(tc, at)
        tc.updates += 1
        self._patch_tool_call(tc, update, at)
        return True

    def _tool_call_update(self, conv: Conversation, at: _At, update: dict[str, Any], _variant: str) -> bool:
        tool_call_id = _str(update.get("toolCallId"))
        if tool_call_id is None:
            return False
        tc = self._keyed(conv, at, "tool_call", tool_call_id)
        if tc is None:
            # v2: the first update creates the call (omitted fields take defaults). v1: an update
            # for a call never announced; keep what it says, marked as a placeholder.
            tc = self._new_tool_call(conv, at, tool_call_id, placeholder=not self._v2(at.run))
        else:
            self._touch(tc, at)
            if "content" in update:
                self._rebuilds(tc, at)  # the array replaces the content: rebuilt
        tc.updates += 1
        self._patch_tool_call(tc, update, at)
        return True

    def _tool_call_chunk(self, conv: Conversation, at: _At, update: dict[str, Any], _variant: str) -> bool:
        tool_call_id = _str(update.get("toolCallId"))
        if tool_call_id is None or "content" not in update:
            return False
        tc = self._keyed(conv, at, "tool_call", tool_call_id)
        if tc is None:
            tc = self._new_tool_call(conv, at, tool_call_id, placeholder=True)
        else:
            self._touch(tc, at)
            if self._rebuilds(tc, at):
                tc.content = []
        tc.content.append(update["content"])  # appends to whatever is current; _meta chunk-scoped
        tc.chunks += 1
        return True

    # Plans.

    def _plan_v1(self, conv: Conversation, at: _At, update: dict[str, Any], _variant: str) -> bool:
        # v1 has one plan per session, replaced completely by every `plan` update.
        plan = self._keyed(conv, at, "plan", "")
        if plan is None:
            plan = self._add(conv, at, Plan, plan_id=None)
            self._register(conv, at, "plan", "", plan)
        else:
            self._touch(plan, at)
        plan.entries = _list(update.get("entries"))
        plan.raw = update
        plan.meta = update.get("_meta")
        plan.updates += 1
        return True

    def _plan_update(self, conv: Conversation, at: _At, update: dict[str, Any], _variant: str) -> bool:
        content = _dict(update.get("plan"))
        plan_id = _str(content.get("planId"))
        if plan_id is None:
            return False
        plan = self._keyed(conv, at, "plan", plan_id)
        if plan is None:
            plan = self._add(conv, at, Plan, plan_id=plan_id)
            self._register(conv, at, "plan", plan_id, plan)
        else:
            self._touch(plan, at)
        # Each update carries the complete plan: replace everything about it.
        plan.plan_type = _str(content.get("type"))
        plan.entries = _list(content.get("entries"))
        plan.markdown = _str(content.get("content")) if plan.plan_type == "markdown" else None
        plan.uri = _str(content.get("uri"))
        plan.raw = content
        plan.meta = update.get("_meta")
        plan.removed, plan.removed_seq = False, None
        plan.updates += 1
        return True

    def _plan_removed(self, conv: Conversation, at: _At, update: dict[str, Any], _variant: str) -> bool:
        plan_id = _str(update.get("planId"))
        if plan_id is None:
            return False
        plan = self._keyed(conv, at, "plan", plan_id)
        if plan is None:
            plan = self._add(conv, at, Plan, plan_id=plan_id, plan_type=None)
            self._register(conv, at, "plan", plan_id, plan)
        else:
            self._touch(plan, at)
        plan.removed, plan.removed_seq = True, at.seq
        return True

    # Terminals.

    def _terminal(self, conv: Conversation, at: _At, terminal_id: str) -> Terminal:
        term = self._keyed(conv, at, "terminal", terminal_id)
        if term is None:
            term = self._add(conv, at, Terminal, terminal_id=terminal_id)
            self._register(conv, at, "terminal", terminal_id, term)
        else:
            self._touch(term, at)
        return term

    def _terminal_update(self, conv: Conversation, at: _At, update: dict[str, Any], _variant: str) -> bool:
        terminal_id = _str(update.get("terminalId"))
        if terminal_id is None:
            return False
        term = self._terminal(conv, at, terminal_id)
        for key, attr in (
            ("command", "command"),
            ("cwd", "cwd"),
            ("exitStatus", "exit_status"),
            ("size", "size"),
            ("capabilities", "capabilities"),
            ("_meta", "meta"),
        ):
            if key in update:
                setattr(term, attr, update[key])
        if "output" in update:
            # An authoritative snapshot: it replaces every stored byte, never merged.
            self._rebuilds(term, at)
            term.output = bytearray()
            output = update["output"]
            if output is not None:
                data = _b64(_dict(output).get("data"))
                if data is None:
                    term.decode_errors += 1
                else:
                    term.output += data
        return True

    def _terminal_chunk(self, conv: Conversation, at: _At, update: dict[str, Any], _variant: str) -> bool:
        terminal_id = _str(update.get("terminalId"))
        if terminal_id is None or "data" not in update:
            return False
        term = self._terminal(conv, at, terminal_id)
        if self._rebuilds(term, at):
            term.output = bytearray()
        # Each chunk is decoded on its own, then the bytes appended: base64 strings must never be
        # concatenated before decoding (padding), and a chunk may end inside a UTF-8 sequence.
        data = _b64(update["data"])
        term.chunks += 1
        if data is None:
            term.decode_errors += 1
        else:
            term.output += data
        return True

    def _terminal_answered(self, conv: Conversation, at: _At, pending: _Pending, result: dict[str, Any]) -> None:
        terminal_id = _str(pending.params.get("terminalId"))
        if terminal_id is None:
            return
        term = self._keyed(conv, at, "terminal", terminal_id)
        if term is None:
            # A terminal created before the recording began.
            term = self._terminal(conv, at, terminal_id)
            term.client_side = term.placeholder = True
        else:
            self._touch(term, at)
        if pending.method == "terminal/output":
            output = result.get("output")
            if isinstance(output, str):
                term.output = bytearray(output.encode("utf-8", errors="surrogatepass"))
            term.truncated = bool(result.get("truncated"))
            if isinstance(result.get("exitStatus"), dict):
                term.exit_status = result["exitStatus"]
        elif pending.method == "terminal/wait_for_exit":
            term.exit_status = {k: v for k, v in result.items() if k in ("exitCode", "signal", "_meta")}
        elif pending.method == "terminal/kill":
            term.killed = True
        elif pending.method == "terminal/release":
            term.released = True

    # Compactions.

    def _compaction(self, conv: Conversation, at: _At, compaction_id: str, placeholder: bool) -> Compaction:
        comp = self._keyed(conv, at, "compaction", compaction_id)
        if comp is None:
            # The first update fixes the position; later patches never move it.
            comp = self._add(conv, at, Compaction, compaction_id=compaction_id, placeholder=placeholder)
            self._register(conv, at, "compaction", compaction_id, comp)
        else:
            self._touch(comp, at)
        return comp

    def _compaction_update(self, conv: Conversation, at: _At, update: dict[str, Any], _variant: str) -> bool:
        compaction_id = _str(update.get("compactionId"))
        if compaction_id is None:
            return False
        comp = self._compaction(conv, at, compaction_id, placeholder=False)
        comp.placeholder = False
        comp.updates += 1
        if "status" in update:
            comp.status = _str(update["status"])
        # Patch fields: omitted unchanged, null clears, a value replaces. A materialised replay
        # entry therefore replaces (never duplicates) a summary already held.
        if "summary" in update:
            comp.summary = _list(update["summary"])
            self._rebuilds(comp, at)
        if "error" in update:
            comp.error = _str(update["error"])
        if "_meta" in update:
            comp.meta = update["_meta"]
        return True

    def _compaction_chunk(self, conv: Conversation, at: _At, update: dict[str, Any], _variant: str) -> bool:
        compaction_id = _str(update.get("compactionId"))
        if compaction_id is None or "content" not in update:
            return False
        comp = self._compaction(conv, at, compaction_id, placeholder=True)
        if self._rebuilds(comp, at):
            comp.summary = []
        if comp.placeholder and comp.status is None:
            comp.status = "in_progress"  # the schema: a first-seen id starts in progress
        comp.summary.append(update["content"])
        comp.chunks += 1
        return True

    # Latest-value state.

    def _usage(self, conv: Conversation, at: _At, update: dict[str, Any], _variant: str) -> bool:
        conv.usage = Usage(
            used=update.get("used"),
            size=update.get("size"),
            cost=update.get("cost"),
            meta=update.get("_meta"),
            seq=at.seq,
            ts_ns=at.ts_ns,
        )
        return True

    def _state(self, conv: Conversation, at: _At, update: dict[str, Any], _variant: str) -> bool:
        state = _str(update.get("state"))
        if state is None:
            return False
        conv.state, conv.state_seq = state, at.seq
        conv.stop_reason = _str(update.get("stopReason")) if state == "idle" else None
        # Which prompt turns an idle ends is the protocol state machine's (TurnEnded events).
        return True

    def _session_info(self, conv: Conversation, at: _At, update: dict[str, Any], _variant: str) -> bool:
        if "title" in update:
            conv.title = _str(update["title"])
        if "updatedAt" in update:
            conv.updated_at = _str(update["updatedAt"])
        if "_meta" in update:
            conv.info_meta = update["_meta"]
        return True

    def _current_mode(self, conv: Conversation, at: _At, update: dict[str, Any], _variant: str) -> bool:
        conv.current_mode_id = _str(update.get("currentModeId"))
        return True

    def _config_options(self, conv: Conversation, at: _At, update: dict[str, Any], _variant: str) -> bool:
        conv.config_options = _list(update.get("configOptions"))
        return True

    def _commands(self, conv: Conversation, at: _At, update: dict[str, Any], _variant: str) -> bool:
        conv.available_commands = _list(update.get("availableCommands"))
        return True

    # Live notices and subagents.

    def _notice(self, conv: Conversation, at: _At, update: dict[str, Any], _variant: str) -> bool:
        # Notices have no id and patch nothing: each one is its own event.
        self._add(
            conv,
            at,
            Notice,
            severity=_str(update.get("severity")),
            title=_str(update.get("title")),
            description=_str(update.get("description")),
            meta=update.get("_meta"),
        )
        return True

    def _subagent(self, conv: Conversation, at: _At, update: dict[str, Any], _variant: str) -> bool:
        child = _str(update.get("sessionId"))
        if child is None:
            return False
        sub = self._keyed(conv, at, "subagent", child)
        if sub is None:
            sub = self._add(conv, at, Subagent, child_session_id=child)
            self._register(conv, at, "subagent", child, sub)
        else:
            self._touch(sub, at)
        for key, value in update.items():
            if key in ("sessionUpdate", "sessionId"):
                continue
            if value is None:
                sub.fields.pop(key, None)
            else:
                sub.fields[key] = value
        return True


def _last_entry(conv: Conversation) -> Entity | None:
    """The latest timeline entry that can hold a message's continuation: session state reports
    (usage, mode, ...) are beside the conversation, they do not end a v1 message."""
    for entity in reversed(conv.timeline):
        if not isinstance(entity, SessionState):
            return entity
    return None


def _b64(data: Json) -> bytes | None:
    if not isinstance(data, str):
        return None
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return None


# --------------------------------------------------------------------------------------------
# Rendering content as plain text


def text_of(content: Json, sep: str = "") -> str:
    """Plain text of content: a block, a list of blocks, or tool-call content items.

    Text blocks give their text; images and audio a placeholder (``<image>``, ``<audio>``);
    resource links ``[name](uri)``; embedded resources their uri and text; tool-call ``content``
    items their block, ``diff`` items a unified diff (or the patch), ``terminal`` items
    ``<terminal ID>``; anything unknown ``<type>``. List items are joined with ``sep``: ""
    suits streamed message chunks (fragments of one text), "\\n" suits tool-call content.
    """
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, (list, tuple)):
        return sep.join(text_of(item) for item in content)
    if not isinstance(content, dict):
        return str(content)
    kind = content.get("type")
    if kind == "text":
        return str(content.get("text", ""))
    if kind in ("image", "audio"):
        return f"<{kind}>"
    if kind == "resource_link":
        uri = str(content.get("uri", ""))
        label = content.get("title") or content.get("name")
        return f"[{label}]({uri})" if label and label != uri else f"<{uri}>"
    if kind == "resource":
        resource = _dict(content.get("resource"))
        uri = str(resource.get("uri", ""))
        text = resource.get("text")
        return f"<resource {uri}>\n{text}\n</resource>" if isinstance(text, str) else f"<resource {uri}>"
    if kind == "content":
        return text_of(content.get("content"))
    if kind == "diff":
        return diff_text(content)
    if kind == "terminal":
        return f"<terminal {content.get('terminalId', '')}>"
    return f"<{kind}>" if isinstance(kind, str) else "<content>"


def diff_text(item: Json) -> str:
    """A tool-call ``diff`` item as text: v2's ``patch`` text when given, else a unified diff of
    v1's ``oldText``/``newText``, else the changed paths."""
    item = _dict(item)
    patch = _dict(item.get("patch"))
    if isinstance(patch.get("text"), str):
        return patch["text"]
    if "newText" in item:
        path = str(item.get("path", ""))
        old = item.get("oldText")
        new = item.get("newText")
        lines = difflib.unified_diff(
            (old if isinstance(old, str) else "").splitlines(keepends=True),
            (new if isinstance(new, str) else "").splitlines(keepends=True),
            fromfile=path if isinstance(old, str) else "/dev/null",
            tofile=path,
        )
        return "".join(line if line.endswith("\n") else line + "\n" for line in lines)
    changes = [f"{_dict(c).get('operation', '?')} {_dict(c).get('path', '?')}" for c in _list(item.get("changes"))]
    return f"<diff {', '.join(changes)}>" if changes else "<diff>"
