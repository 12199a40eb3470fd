"""The events of one ACP connection: what ``ConnectionState.feed`` says a frame means.

Owns: the vocabulary of protocol facts every view shares — pairing (``RequestSent``,
``ResponsePaired``, ``ResponseUnpaired``, ``RequestCancelled``, ``Unanswered``), negotiation
(``PeerAnnounced``, ``VersionNegotiated``, ``VersionInferred``, ``NameUnknown``), sessions
(``SessionOpened``, ``SessionRestoring``, ``SessionRestored``, ``SessionTitled``,
``SessionClosed``), history replay (``ReplayWindowOpened``, ``UpdateReplayed``,
``ReplayWindowClosed``) and prompt turns (``TurnStarted``, ``TurnAccepted``, ``StateReported``,
``TurnOutput``, ``SessionCancelled``, ``TurnEnded``).

Must not know: how they are computed (``state.py``), rows, rendering, SQL, pipes.

Rules: an event is a frozen ``msgspec.Struct`` (cheap to build, hashable, JSON-encodable with its
type name under ``"event"``: ``msgspec.json.encode(event)``). Every event names the frame that
caused it (``seq``, ``ts_ns``); the events the end of a connection causes (``Unanswered``, an
unfinished ``TurnEnded``) have ``seq`` None and the time the connection ended. Other frames an
event concerns are named by their seq (``request_seq``, ``prompt_seq``): a prompt turn is known by
the seq of its ``session/prompt`` request everywhere (rows, ``show``, checks). Directions are
``"c2a"`` / ``"a2c"``; ids are JSON text, as the envelope decoder gives them (``1`` != ``"1"``).
"""

from __future__ import annotations

from msgspec import Struct


class Event(Struct, frozen=True, kw_only=True, tag_field="event", tag=True, gc=False):
    seq: int | None
    """The frame that caused the event; None when the end of the connection did."""
    ts_ns: int


# -- JSON-RPC pairing ------------------------------------------------------------------------------


class RequestSent(Event, frozen=True, kw_only=True, gc=False):
    """A request is pending for its sender until a response with its id comes back."""

    direction: str
    rpc_id: str | None
    method: str | None
    session_id: str | None
    reused_id_of: int | None = None
    """The seq of a request with the same id still pending (JSON-RPC ids must not be reused)."""


class ResponsePaired(Event, frozen=True, kw_only=True, gc=False):
    """A response (or error) answered the pending request ``request_seq``."""

    direction: str
    """The response's direction (the opposite of its request's)."""
    rpc_id: str | None
    request_seq: int
    method: str | None
    """The request's method: a response carries none of its own."""
    session_id: str | None
    """The request's session (for ``session/new``/``fork``: the session the result names)."""
    latency_ns: int
    error: bool
    withheld: bool = False
    """The proxy did not forward it (a fault): for the requester the request is still pending."""
    cut: bool = False
    """Only a prefix was recorded: paired by the id in its head, its payload is lost."""
    cancelled_by: int | None = None
    """The seq of a ``$/cancel_request`` that named the request while it was pending."""
    unknown: str | None = None
    """How the request's method was classed when it is not in the vocabulary."""


class ResponseUnpaired(Event, frozen=True, kw_only=True, gc=False):
    """A response whose id no pending request of the other direction has (or no id at all)."""

    direction: str
    rpc_id: str | None


class RequestCancelled(Event, frozen=True, kw_only=True, gc=False):
    """``$/cancel_request``: the sender cancels one of its own pending requests."""

    direction: str
    rpc_id: str | None
    """The ``requestId`` named (None when missing)."""
    request_seq: int | None
    """The pending request it names; None when nothing pending has that id."""
    method: str | None


class Unanswered(Event, frozen=True, kw_only=True, gc=False):
    """At the end of the connection the request ``request_seq`` had no answer."""

    direction: str
    rpc_id: str | None
    request_seq: int
    method: str | None
    session_id: str | None
    maybe_cut: bool = False
    """A line recorded only in part came back after it: its answer may be in there."""


# -- negotiation -----------------------------------------------------------------------------------


class PeerAnnounced(Event, frozen=True, kw_only=True, gc=False):
    """One side's half of ``initialize``: the client's request or the agent's successful answer.

    The JSON members are kept as the peer sent them (text), None when absent or null.
    """

    side: str
    """``"client"`` or ``"agent"``."""
    protocol_version: int | None
    info: str | None
    capabilities: str | None
    auth_methods: str | None = None


class VersionNegotiated(Event, frozen=True, kw_only=True, gc=False):
    """The agent's ``initialize`` answer fixed the protocol version (the latest answer wins)."""

    version: int | None
    """The version answered (None when it is not an integer)."""
    supported: bool
    """Whether a schema of that version ships with acp-proxy (if not, rules fall back to v1)."""


class VersionInferred(Event, frozen=True, kw_only=True, gc=False):
    """No ``initialize`` answer seen yet: the traffic shows which version is spoken."""

    version: int
    evidence: str
    """What showed it: ``initialize request``, ``prompt response`` or ``session/update VARIANT``."""


class NameUnknown(Event, frozen=True, kw_only=True, gc=False):
    """A method or ``sessionUpdate`` variant outside the negotiated version's vocabulary."""

    what: str
    """``"method"`` or ``"update"``."""
    name: str
    unknown: str
    """``"extension"`` (``_``-prefixed) or ``"future"``."""


# -- sessions --------------------------------------------------------------------------------------


class SessionOpened(Event, frozen=True, kw_only=True, gc=False):
    """A session instance of this connection: created, restored, or first seen in any frame.

    A ``session/new`` that names an id already seen in this connection opens a new instance.
    """

    session_id: str
    how: str
    """``session/new``, ``session/fork``, ``session/load``, ``session/resume`` or ``seen``."""
    cwd: str | None = None
    parent_session_id: str | None = None


class SessionRestoring(Event, frozen=True, kw_only=True, gc=False):
    """``session/load`` or ``session/resume`` sent; ``replays``: history is asked for (v1 load
    always replays; resume replays only with a non-null ``replayFrom``)."""

    session_id: str
    method: str
    replays: bool


class SessionRestored(Event, frozen=True, kw_only=True, gc=False):
    """The answer to a ``session/load`` / ``session/resume`` request (``ok``: not an error)."""

    session_id: str
    method: str
    request_seq: int
    replays: bool
    ok: bool
    cwd: str | None = None


class SessionTitled(Event, frozen=True, kw_only=True, gc=False):
    """The title changed: ``session/set_title`` accepted, or ``session_info_update`` (None clears)."""

    session_id: str
    title: str | None


class SessionClosed(Event, frozen=True, kw_only=True, gc=False):
    """``session/close`` or ``session/delete`` accepted."""

    session_id: str
    how: str
    """``"closed"`` or ``"deleted"``."""


# -- history replay --------------------------------------------------------------------------------


class ReplayWindowOpened(Event, frozen=True, kw_only=True, gc=False):
    """From this request to its answer, the agent's updates for the session are history."""

    session_id: str
    method: str


class UpdateReplayed(Event, frozen=True, kw_only=True, gc=False):
    """A ``session/update`` inside a replay window: history, not this connection's activity."""

    session_id: str
    variant: str | None
    live_only: bool
    """A live-only variant (``notice``): it should not be replayed."""
    window_seq: int
    """The request that opened the window."""


class ReplayWindowClosed(Event, frozen=True, kw_only=True, gc=False):
    """The replay window of the request ``request_seq`` is closed: by the agent's v2
    ``replay_complete`` marker (``by`` = ``marker``, the end it states), or by the request's
    answer (``by`` = ``response``: for a peer that does not send the marker, the end is inferred)."""

    session_id: str
    method: str
    request_seq: int
    ok: bool
    by: str = "response"


# -- prompt turns ----------------------------------------------------------------------------------


class TurnStarted(Event, frozen=True, kw_only=True, gc=False):
    """A ``session/prompt`` request (``by`` = ``prompt``; ``prompt_seq`` is its seq), or, in v2,
    foreground work the agent started itself (``by`` = ``agent``: a live ``running`` or
    ``requires_action`` while the session has no open turn; ``prompt_seq`` is that update's seq
    and ``rpc_id`` is None). Either way a turn, in every view."""

    session_id: str
    prompt_seq: int
    index: int
    """1-based, per session instance of this connection."""
    protocol_version: int | None
    rpc_id: str | None
    by: str = "prompt"


class TurnAccepted(Event, frozen=True, kw_only=True, gc=False):
    """v2: the prompt response accepted the prompt (the user message was inserted)."""

    session_id: str
    prompt_seq: int
    message_id: str | None
    protocol_version: int | None


class TurnOutput(Event, frozen=True, kw_only=True, gc=False):
    """The agent's first output of a prompt turn: the first live ``session/update`` of a variant in
    ``protocol.output.OUTPUT`` while the turn is its session's oldest open one. ``ts_ns`` minus
    the prompt's time is the turn's time to first output; every view reads it from here."""

    session_id: str
    prompt_seq: int
    variant: str


class StateReported(Event, frozen=True, kw_only=True, gc=False):
    """v2: a live ``state_update`` (``running``, ``requires_action``, ``idle``, ...)."""

    session_id: str
    state: str | None
    stop_reason: str | None


class SessionCancelled(Event, frozen=True, kw_only=True, gc=False):
    """``session/cancel``: the open prompt turns and the agent's pending requests it concerns."""

    session_id: str
    prompt_seqs: tuple[int, ...]
    request_seqs: tuple[int, ...]
    """Pending agent -> client requests of the session (permission requests must then be
    answered ``cancelled``)."""


class TurnEnded(Event, frozen=True, kw_only=True, gc=False):
    """A prompt turn is over.

    ``status``: ``ended`` (v1 response, or v2 idle), ``error`` (an error response), or
    ``unfinished`` (the connection ended first). ``by``: ``response``, ``idle``, ``error`` or
    ``finish``. ``seq`` is the frame that ended it (None for ``unfinished``).
    """

    session_id: str
    prompt_seq: int
    status: str
    stop_reason: str | None
    by: str
    protocol_version: int | None


EVENT_TYPES: tuple[type[Event], ...] = (
    RequestSent,
    ResponsePaired,
    ResponseUnpaired,
    RequestCancelled,
    Unanswered,
    PeerAnnounced,
    VersionNegotiated,
    VersionInferred,
    NameUnknown,
    SessionOpened,
    SessionRestoring,
    SessionRestored,
    SessionTitled,
    SessionClosed,
    ReplayWindowOpened,
    UpdateReplayed,
    ReplayWindowClosed,
    TurnStarted,
    TurnAccepted,
    TurnOutput,
    StateReported,
    SessionCancelled,
    TurnEnded,
)
