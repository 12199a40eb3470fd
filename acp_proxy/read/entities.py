"""The conversation a fold rebuilds: its timeline entities, prompt turns and sessions, as plain data.

Owns: the output types of ``fold`` — ``FoldInput`` (what the fold reads), the timeline
entities (``Message``, ``ToolCall``, ``Plan``, ``Permission``, ``Terminal``, ``Compaction``,
``Notice``, ``Subagent``, ``Call``, ``Notification``, ``SessionState``, ``ErrorResponse``,
``Cancellation``, ``Unknown``), ``PromptTurn``, ``Usage`` and ``Conversation`` with its lookups —
and rendering content blocks as plain text (``text_of``, ``diff_text``).

Must not know: how entities are built (``fold``, ``content``), frames, SQL, rendering libraries.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from acp_proxy.protocol.rows import FrameLike
from acp_proxy.protocol.vocabulary import A2C

__all__ = [
    "Call",
    "Cancellation",
    "Compaction",
    "Conversation",
    "Entity",
    "ErrorResponse",
    "FoldInput",
    "Json",
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
    "text_of",
]

Json = Any
"""A decoded JSON value (dict, list, str, int, float, bool or None)."""


def _str(value: Json) -> str | None:
    return value if isinstance(value, str) else None


def _dict(value: Json) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Json) -> list[Json]:
    # A patch array replaces the stored one; `null` (or anything that is not an array) clears.
    return list(value) if isinstance(value, list) else []


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
    """One ``session/prompt``: what the user sent and how the agent's work on it ended; or (v2,
    ``by`` = ``agent``) foreground work the agent started itself, with no prompt (``seq`` is its
    ``running`` update, ``prompt`` is empty)."""

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
    by: str = "prompt"
    """``prompt`` (a ``session/prompt``) or ``agent`` (work the agent started itself)."""

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
    hop: int = 0
    """0: the recorded link's own conversation; n: the one carried n ``proxy/successor``
    envelopes deep (a proxy chain: what a proxy component and its successor said)."""
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
