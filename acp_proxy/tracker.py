"""The per-connection protocol state machine: frames in, protocol facts and row changes out.

Owns: what one connection's frames mean together — pending requests per direction and the
pairing of responses (method, request seq, latency), the negotiated protocol version and both
sides' info and capabilities, the sessions seen (new / load / resume / fork / close / delete,
titles), history replay windows, prompt turns (v1: request to response; v2: request, acceptance,
``state_update`` to ``idle``), and the classing of unknown methods and update variants.

Must not know: SQL, pipes, processes, time sources or the database's row ids. It annotates the
``FrameRecord`` it is given in place (the recorder inserts that row right after) and describes
everything else as ``Change``s — upserts keyed by run, frame seq or a tracker-local key — that
the recorder applies in order. It reads nothing but the frames it is shown.

Rule 1: the hot path is a chunk storm. ``session/update`` frames are handled from the fields the
envelope decoder already extracted (method, sessionId, variant, item id) with set and dict
lookups only; a frame's own bytes are decoded a second time (with msgspec, into small structs)
only for the rare frames whose payload matters: initialize, session lifecycle requests and their
responses, prompt responses, ``state_update``, ``session_info_update``, ``$/cancel_request``.

Rule 2: nothing is dropped for being odd. A response nobody asked for, a reused id, a draft or a
``_vendor`` variant are all recorded as they are and annotated (``note``, ``unknown``).

How the recorder applies Changes (in the order ``drain`` returns them):

- ``runs``: key ``{"id": run_id}``; update that run row with ``values``.
- ``frames``: key ``{"run_id", "seq"}``; update that frame row with ``values`` (``unanswered``,
  sometimes ``note``). The row was handed to the recorder before the Change was made.
- ``sessions``: key ``{"session_key": k}``, a tracker-local integer, one per session instance
  in this run (a ``session/new`` that returns an id already seen in this run is a new instance).
  ``values`` always holds ``session_id``; other columns appear only when this run knows them
  (a present ``None`` clears, e.g. a title set to null). The first Change for a key decides the
  row: when ``created_by`` is ``session/new`` or ``session/fork``, insert a new row; otherwise
  (``session/load``, ``session/resume``, ``seen``) reuse the newest existing row with the same
  ``session_id`` from an earlier run if there is one — the same ACP session seen again is the
  same row — and insert one only if there is none. ``created_run_id``, ``created_by``,
  ``parent_session_id`` and ``first_seen_ns`` are written only when the row is inserted (or
  where the stored value is NULL); every other present column overwrites. Keep the map
  session_key -> row id for the rest of the run.
- ``session_runs``: key ``{"session_key": k, "run_id": run_id}``, values ``how`` and
  ``first_seq``; insert-or-ignore with ``session_row`` resolved from the key.
- ``turns``: key ``{"turn_key": k}`` (tracker-local; ``(run_id, prompt_seq)`` is unique too);
  ``values`` is the whole row except ``session_row``: it carries ``session_key`` instead, which
  the recorder resolves (and does not store). Insert on the first Change for a key, update after.

A session's and a turn's Change holds its state at ``drain`` time: many updates to one entity
between two drains come out as one Change, placed where the entity first changed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import msgspec
from msgspec import UNSET, Raw, Struct

from .protocol import vocabulary as acp
from .protocol.wire import canonical_id
from .record import FrameRecord

_OTHER = {"c2a": "a2c", "a2c": "c2a"}

NOTE_UNKNOWN_ID = "response to unknown id"
NOTE_NOTICE_REPLAYED = "notice inside replay window"

# -- what a session/update variant means for the open turn --------------------------------------
# Derived from the vocabulary of every version, so a draft variant counts as soon as the schema
# ships it. A bit mask per variant keeps the per-chunk work to one dict lookup.
_CHUNK = 1  # a streamed piece of the agent's output (user_message_chunk is the prompt's echo)
_OUTPUT = 2  # the agent answering: message, thought or tool call
_TOOL = 4  # a tool call, counted once per toolCallId
_STATE = 8  # v2 state_update: running / requires_action / idle ends the turn
_TITLE = 16  # session_info_update: the session's title


def _actions(variants: frozenset[str]) -> dict[str, int]:
    table: dict[str, int] = {}
    for name in variants:
        mask = 0
        if name.endswith("_chunk") and name != "user_message_chunk":
            mask |= _CHUNK
        if name.startswith(("agent_message", "agent_thought", "tool_call")):
            mask |= _OUTPUT
        if name.startswith("tool_call"):
            mask |= _TOOL
        if name == "state_update":
            mask |= _STATE
        if name == "session_info_update":
            mask |= _TITLE
        if mask:
            table[name] = mask
    return table


_ACTIONS = _actions(acp.vocabulary().updates)
_LIVE_ONLY = acp.vocabulary().live_only


@dataclass(slots=True)
class Change:
    """One upsert for the recorder: ``table``, the ``key`` columns naming the row, ``values``."""

    table: str
    key: dict[str, Any]
    values: dict[str, Any]


# -- decoders for the rare frames whose payload the tracker reads --------------------------------
# Members are Any (or Raw, to keep a JSON object's text verbatim): a peer sending a number where a
# string belongs must not make the frame undecodable; the handlers check types themselves.


class _InitParams(Struct):
    protocolVersion: Any = None
    clientInfo: Raw = Raw()
    info: Raw = Raw()
    clientCapabilities: Raw = Raw()
    capabilities: Raw = Raw()


class _InitResult(Struct):
    protocolVersion: Any = None
    agentInfo: Raw = Raw()
    info: Raw = Raw()
    agentCapabilities: Raw = Raw()
    capabilities: Raw = Raw()
    authMethods: Raw = Raw()


class _InitRequest(Struct):
    params: _InitParams | None = None


class _InitResponse(Struct):
    result: _InitResult | None = None


class _Info(Struct):
    name: Any = None
    version: Any = None


class _Params(Struct):
    cwd: Any = None
    replayFrom: Any = None
    title: Any = UNSET
    requestId: Raw = Raw()


class _Request(Struct):
    params: _Params | None = None


class _Result(Struct):
    sessionId: Any = None
    stopReason: Any = UNSET
    messageId: Any = UNSET


class _Response(Struct):
    result: _Result | None = None


class _UpdateBody(Struct):
    state: Any = None
    stopReason: Any = None
    title: Any = UNSET


class _UpdateParams(Struct):
    update: _UpdateBody | None = None


class _Update(Struct):
    params: _UpdateParams | None = None


_decoders: dict[type, msgspec.json.Decoder[Any]] = {}


def _decode(kind: type, line: bytes) -> Any:
    """The frame decoded as ``kind``; None when it does not fit (never raises)."""
    decoder = _decoders.get(kind)
    if decoder is None:
        decoder = _decoders[kind] = msgspec.json.Decoder(kind)
    try:
        return decoder.decode(line)
    except Exception:  # DecodeError and ValidationError; RecursionError for a hostile nesting depth
        return None


def _json_text(raw: Raw) -> str | None:
    """A member's JSON text exactly as sent (absent and null give None)."""
    if not raw:
        return None
    data = bytes(raw)
    return None if data == b"null" else data.decode("utf-8", "replace")


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _add_note(rec: FrameRecord, text: str) -> None:
    # A note may already be there (the gate's "stripped: ..."): add to it, never repeat it.
    if rec.note is None:
        rec.note = text
    elif text not in rec.note:
        rec.note = f"{rec.note}; {text}"


# A line recorded only in part (--max-record-bytes) does not decode; when its head shows it to be
# a response, its id still pairs it, so a huge result is not reported as a missing answer.
_CUT_RESPONSE = re.compile(
    rb'\s*\{\s*(?:"jsonrpc"\s*:\s*"2\.0"\s*,\s*)?"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.)*"|null)\s*,'
    rb'\s*(?:"jsonrpc"\s*:\s*"2\.0"\s*,\s*)?"(?:result|error)"\s*:'
)


# -- tracked entities ----------------------------------------------------------------------------


class _Pending:
    """A request waiting for its response."""

    __slots__ = ("cancel_seq", "data", "later", "method", "note", "seq", "session_id", "ts_ns", "unknown")

    def __init__(self, rec: FrameRecord) -> None:
        self.seq = rec.seq
        self.ts_ns = rec.ts_ns
        self.method = rec.method
        self.session_id = rec.session_id
        self.unknown: str | None = rec.unknown
        self.note: str | None = None
        self.data: Any = None
        """What the response handler needs from the request (cwd, turn, replay window...)."""
        self.cancel_seq: int | None = None
        self.later: list[_Pending] | None = None
        """Requests that reused this id while it was pending, answered first come first served."""


class _RunRow:
    __slots__ = ("dirty", "values")

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.dirty = False

    def change(self, run_id: int) -> Change:
        return Change("runs", {"id": run_id}, dict(self.values))


class _Session:
    __slots__ = ("dirty", "key", "session_id", "turn_count", "turns", "values")

    def __init__(self, key: int, session_id: str, values: dict[str, Any]) -> None:
        self.key = key
        self.session_id = session_id
        self.values = values
        self.dirty = False
        self.turns: list[_Turn] = []
        """Open turns, oldest first; output is counted into the oldest."""
        self.turn_count = 0

    def change(self, run_id: int) -> Change:
        return Change("sessions", {"session_key": self.key}, dict(self.values))


class _Turn:
    __slots__ = (
        "accepted_ns",
        "chunks",
        "dirty",
        "end_ns",
        "end_seq",
        "first_output_ns",
        "key",
        "message_id",
        "permission_requests",
        "prompt_seq",
        "protocol_version",
        "saw_work",
        "session",
        "start_ns",
        "status",
        "stop_reason",
        "tool_calls",
        "tool_ids",
        "turn_index",
    )

    def __init__(self, key: int, session: _Session, rec: FrameRecord, version: int | None) -> None:
        self.key = key
        self.session = session
        session.turn_count += 1
        self.turn_index = session.turn_count
        self.protocol_version = version
        self.prompt_seq = rec.seq
        self.start_ns = rec.ts_ns
        self.accepted_ns: int | None = None
        self.message_id: str | None = None
        self.first_output_ns: int | None = None
        self.end_ns: int | None = None
        self.end_seq: int | None = None
        self.stop_reason: str | None = None
        self.status = "running"
        self.chunks = 0
        self.tool_calls = 0
        self.permission_requests = 0
        self.tool_ids: set[str] = set()
        self.saw_work = False
        """v2: a running / requires_action state was reported since the prompt."""
        self.dirty = False

    def change(self, run_id: int) -> Change:
        return Change(
            "turns",
            {"turn_key": self.key},
            {
                "run_id": run_id,
                "session_key": self.session.key,
                "session_id": self.session.session_id,
                "turn_index": self.turn_index,
                "protocol_version": self.protocol_version,
                "prompt_seq": self.prompt_seq,
                "start_ns": self.start_ns,
                "accepted_ns": self.accepted_ns,
                "message_id": self.message_id,
                "first_output_ns": self.first_output_ns,
                "end_ns": self.end_ns,
                "end_seq": self.end_seq,
                "stop_reason": self.stop_reason,
                "status": self.status,
                "chunks": self.chunks,
                "tool_calls": self.tool_calls,
                "permission_requests": self.permission_requests,
            },
        )


_Entity = _RunRow | _Session | _Turn


class _Window:
    """A history replay window opened by a session/load or session/resume request."""

    __slots__ = ("cwd", "opened", "session_id")

    def __init__(self, session_id: str | None, cwd: str | None, opened: bool) -> None:
        self.session_id = session_id
        self.cwd = cwd
        self.opened = opened


class Tracker:
    """Protocol state of one connection. Feed it every c2a/a2c frame in relay order."""

    def __init__(self, run_id: int, *, changes: bool = True) -> None:
        """``changes=False`` keeps the state without describing rows (for the relay's gate,
        which needs replay windows and pairing but records nothing): ``drain`` returns []."""
        self.run_id = run_id
        self._emit = changes
        self.version: int | None = None
        """The negotiated protocol version (the agent's initialize answer); None before."""
        self._use_vocabulary(None)
        self._pending: dict[tuple[str, str | None], _Pending] = {}
        self._sessions: dict[str, _Session] = {}
        """The current session instance of each ACP session id in this run."""
        self._windows: dict[str, int] = {}
        """Open replay windows per session id (a count: loads may overlap)."""
        self._open_turns: dict[int, _Turn] = {}
        self._queue: list[Change | _Entity] = []
        self._run = _RunRow()
        self._next_session_key = 0
        self._next_turn_key = 0
        self._unpaired = 0
        self._last_cut_seq = {"c2a": 0, "a2c": 0}
        self._request_handlers = {
            "initialize": self._initialize_request,
            "session/new": self._remember_cwd,
            "session/fork": self._remember_cwd,
            "session/load": self._load_request,
            "session/resume": self._load_request,
            "session/set_title": self._title_request,
            "session/prompt": self._prompt_request,
            "session/request_permission": self._permission_request,
        }
        self._response_handlers = {
            "initialize": self._initialize_response,
            "session/new": self._new_response,
            "session/fork": self._new_response,
            "session/load": self._load_response,
            "session/resume": self._load_response,
            "session/close": self._close_response,
            "session/delete": self._delete_response,
            "session/set_title": self._title_response,
            "session/prompt": self._prompt_response,
        }

    # -- the interface ---------------------------------------------------------------------------

    def observe(self, rec: FrameRecord) -> None:
        """Annotate ``rec`` in place and note what it changes. Call once per frame, in order."""
        kind = rec.kind
        if kind == "notification":
            if rec.method == "session/update":
                self._update(rec)
            else:
                self._notification(rec)
        elif kind == "request":
            self._request(rec)
        elif kind == "response" or kind == "error":
            self._response(rec)
        elif kind == "invalid" and rec.cut:
            self._cut_line(rec)
        # A batch line says nothing itself: its elements follow as frames of their own.

    def should_strip(self, rec: FrameRecord) -> str | None:
        """Why this a2c frame could be withheld: a live-only notice inside a replay window.

        Call before ``observe`` (which may close the window); the caller decides whether to strip.
        """
        if (
            self._windows
            and rec.kind == "notification"
            and rec.dir == "a2c"
            and rec.method == "session/update"
            and rec.update_kind in _LIVE_ONLY
            and rec.session_id in self._windows
        ):
            return NOTE_NOTICE_REPLAYED
        return None

    def in_replay_window(self, session_id: str | None) -> bool:
        """Whether ``session_id`` is replaying history now; for None, whether any session is."""
        if session_id is None:
            return bool(self._windows)
        return session_id in self._windows

    def finish(self, ts_ns: int) -> None:
        """The run ended at ``ts_ns``: mark requests still pending, close open turns."""
        pending: list[tuple[str, _Pending]] = []
        for (direction, _), first in self._pending.items():
            pending.append((direction, first))
            pending.extend((direction, p) for p in first.later or ())
        self._pending.clear()
        for direction, p in sorted(pending, key=lambda item: item[1].seq):
            values: dict[str, Any] = {"unanswered": 1}
            if self._last_cut_seq[_OTHER[direction]] > p.seq:
                why = "a line recorded only in part may hold its response"
                values["note"] = f"{p.note}; {why}" if p.note else why
            self._queue.append(Change("frames", {"run_id": self.run_id, "seq": p.seq}, values))
        self._set_run("unanswered_requests", len(pending))
        self._set_run("unpaired_responses", self._unpaired)
        for turn in sorted(self._open_turns.values(), key=lambda t: t.key):
            turn.status = "unfinished"
            turn.session.turns.clear()
            self._dirty(turn)
        self._open_turns.clear()

    def drain(self) -> list[Change]:
        """The Changes since the last drain, in the order their rows first changed."""
        queue = self._queue
        if not queue:
            return []
        self._queue = []
        if not self._emit:
            # Dirty flags stay set, so each entity is queued once, not once per frame.
            return []
        run_id = self.run_id
        out: list[Change] = []
        for item in queue:
            if isinstance(item, Change):
                out.append(item)
            else:
                item.dirty = False
                out.append(item.change(run_id))
        return out

    # -- session/update: the hot path -------------------------------------------------------------

    def _update(self, rec: FrameRecord) -> None:
        variant = rec.update_kind
        if variant is not None and variant not in self._updates:
            rec.unknown = acp.unknown_kind(variant)
        sid = rec.session_id
        if sid is None:
            return
        session = self._sessions.get(sid)
        if session is None:
            session = self._open_session(sid, rec, "seen")
        ts = rec.ts_ns
        session.values["last_seen_ns"] = ts
        if not session.dirty:
            session.dirty = True
            self._queue.append(session)
        action = _ACTIONS.get(variant, 0)  # type: ignore[arg-type]
        if self._windows and sid in self._windows:
            # History: flagged, and never counted as this run's turn activity.
            rec.replay = 1
            if variant in _LIVE_ONLY:
                _add_note(rec, NOTE_NOTICE_REPLAYED)
            if action & _TITLE:
                self._title_update(session, rec)
            return
        if not action:
            return
        if session.turns:
            turn = session.turns[0]
            if action & _CHUNK:
                turn.chunks += 1
            if action & _OUTPUT and turn.first_output_ns is None:
                turn.first_output_ns = ts
            if action & _TOOL:
                item = rec.item_id
                if item is not None and item not in turn.tool_ids:
                    turn.tool_ids.add(item)
                    turn.tool_calls += 1
            if not turn.dirty:
                turn.dirty = True
                self._queue.append(turn)
        if action & _STATE:
            self._state_update(session, rec)
        elif action & _TITLE:
            self._title_update(session, rec)

    def _state_update(self, session: _Session, rec: FrameRecord) -> None:
        message = _decode(_Update, rec.line)
        body = message.params.update if message is not None and message.params is not None else None
        if body is None:
            return
        if body.state in ("running", "requires_action"):
            for turn in session.turns:
                turn.saw_work = True
        elif body.state == "idle":
            # Idle ends the foreground work that an accepted prompt (or one the agent has been
            # working on) contributed to. A prompt not yet accepted and not yet worked on may be
            # queued behind that work: it stays open. A repeated idle snapshot finds no turn.
            for turn in list(session.turns):
                if turn.protocol_version != 1 and (turn.accepted_ns is not None or turn.saw_work):
                    self._end_turn(turn, rec, _str(body.stopReason), "ended")

    def _title_update(self, session: _Session, rec: FrameRecord) -> None:
        message = _decode(_Update, rec.line)
        body = message.params.update if message is not None and message.params is not None else None
        title = body.title if body is not None else UNSET
        if title is None or isinstance(title, str):
            session.values["title"] = title  # null clears the title; absent leaves it

    # -- requests and notifications ---------------------------------------------------------------

    def _request(self, rec: FrameRecord) -> None:
        method = rec.method
        if method is not None and method not in self._methods:
            rec.unknown = acp.unknown_kind(method)
        pending = _Pending(rec)
        handler = self._request_handlers.get(method)  # type: ignore[arg-type]
        if handler is not None:
            handler(rec, pending)
        if rec.session_id is not None:
            self._touch(rec.session_id, rec)
        key = (rec.dir, rec.rpc_id)
        first = self._pending.get(key)
        if first is None:
            self._pending[key] = pending
        else:
            # JSON-RPC forbids it; if it happens anyway, answers are taken in order.
            _add_note(rec, f"id reused while request seq {first.seq} is pending")
            if first.later is None:
                first.later = []
            first.later.append(pending)
        pending.note = rec.note

    def _notification(self, rec: FrameRecord) -> None:
        method = rec.method
        if method is not None and method not in self._methods:
            rec.unknown = acp.unknown_kind(method)
        if method == "$/cancel_request":
            self._cancel_request(rec)
        if rec.session_id is not None:
            self._touch(rec.session_id, rec)

    def _cancel_request(self, rec: FrameRecord) -> None:
        # The sender cancels a request it sent itself: look in its own direction.
        message = _decode(_Request, rec.line)
        raw = message.params.requestId if message is not None and message.params is not None else Raw()
        if not raw:
            _add_note(rec, "cancels no request (requestId missing)")
            return
        try:
            request_id = canonical_id(raw)
        except msgspec.DecodeError:
            request_id = None
        target = self._pending.get((rec.dir, request_id))
        if target is None:
            _add_note(rec, f"cancels no pending request (id {request_id})")
            return
        target.cancel_seq = rec.seq
        _add_note(rec, f"cancels request seq {target.seq} ({target.method})")

    def _initialize_request(self, rec: FrameRecord, pending: _Pending) -> None:
        message = _decode(_InitRequest, rec.line)
        params = message.params if message is not None else None
        if params is None:
            return
        info = params.clientInfo or params.info
        capabilities = params.clientCapabilities or params.capabilities
        self._negotiated("client", _int(params.protocolVersion), info, capabilities)

    def _remember_cwd(self, rec: FrameRecord, pending: _Pending) -> None:
        message = _decode(_Request, rec.line)
        if message is not None and message.params is not None:
            pending.data = _str(message.params.cwd)

    def _load_request(self, rec: FrameRecord, pending: _Pending) -> None:
        message = _decode(_Request, rec.line)
        params = message.params if message is not None else None
        sid = rec.session_id
        # v1 session/load always replays; session/resume only when asked to (v2 replayFrom).
        replays = rec.method == "session/load" or (params is not None and params.replayFrom is not None)
        window = _Window(sid, _str(params.cwd) if params is not None else None, replays and sid is not None)
        pending.data = window
        if sid is None:
            return
        session = self._sessions.get(sid)
        if session is None:
            session = self._open_session(sid, rec, rec.method or "seen")
        if window.opened:
            self._windows[sid] = self._windows.get(sid, 0) + 1

    def _title_request(self, rec: FrameRecord, pending: _Pending) -> None:
        message = _decode(_Request, rec.line)
        if message is not None and message.params is not None and isinstance(message.params.title, str):
            pending.data = message.params.title

    def _prompt_request(self, rec: FrameRecord, pending: _Pending) -> None:
        sid = rec.session_id
        if sid is None:
            return
        session = self._touch(sid, rec)
        self._next_turn_key += 1
        turn = _Turn(self._next_turn_key, session, rec, self.version)
        session.turns.append(turn)
        self._open_turns[turn.key] = turn
        self._dirty(turn)
        pending.data = turn

    def _permission_request(self, rec: FrameRecord, pending: _Pending) -> None:
        session = self._sessions.get(rec.session_id) if rec.session_id is not None else None
        if session is not None and session.turns:
            turn = session.turns[0]
            turn.permission_requests += 1
            self._dirty(turn)

    # -- responses -------------------------------------------------------------------------------

    def _response(self, rec: FrameRecord) -> None:
        direction = _OTHER.get(rec.dir)
        if direction is None:
            return
        rpc_id = rec.rpc_id
        if rec.forwarded == 0:
            withheld = self._pending.get((direction, rpc_id))
            if withheld is not None:
                # The proxy withheld this answer (a fault): for the requester the request is
                # still waiting, so it stays pending and can end the run unanswered.
                self._paired(rec, withheld)
                _add_note(rec, "not forwarded: the request stays unanswered for its sender")
                return
        pending = self._take_pending(direction, rpc_id)
        if pending is None:
            if rpc_id is None or rpc_id == "null":
                _add_note(rec, "response without a request id")
            else:
                _add_note(rec, NOTE_UNKNOWN_ID)
            self._unpaired += 1
            self._set_run("unpaired_responses", self._unpaired)
            return
        self._paired(rec, pending)
        handler = self._response_handlers.get(pending.method)  # type: ignore[arg-type]
        if handler is not None:
            handler(rec, pending)
        if rec.session_id is not None:
            self._touch(rec.session_id, rec)

    def _take_pending(self, direction: str, rpc_id: str | None) -> _Pending | None:
        key = (direction, rpc_id)
        pending = self._pending.pop(key, None)
        if pending is not None and pending.later:
            successor = pending.later.pop(0)
            successor.later = pending.later
            self._pending[key] = successor
        return pending

    def _paired(self, rec: FrameRecord, pending: _Pending) -> None:
        rec.method = pending.method
        rec.request_seq = pending.seq
        rec.latency_ns = rec.ts_ns - pending.ts_ns
        if rec.session_id is None:
            rec.session_id = pending.session_id
        if pending.unknown is not None:
            rec.unknown = pending.unknown
        if pending.cancel_seq is not None:
            _add_note(rec, f"answers a request cancelled by $/cancel_request seq {pending.cancel_seq}")

    def _cut_line(self, rec: FrameRecord) -> None:
        direction = _OTHER.get(rec.dir)
        if direction is None:
            return
        # Remembered so that a request left pending at the end can say its answer may be here.
        previous = self._last_cut_seq[rec.dir]
        self._last_cut_seq[rec.dir] = rec.seq
        match = _CUT_RESPONSE.match(rec.line)
        if match is None:
            return
        try:
            rpc_id = canonical_id(Raw(match.group(1)))
        except msgspec.DecodeError:
            return
        pending = self._take_pending(direction, rpc_id)
        if pending is None:
            return
        # Paired for latency and unanswered; its payload is lost, so no handler runs.
        self._paired(rec, pending)
        self._last_cut_seq[rec.dir] = previous

    def _initialize_response(self, rec: FrameRecord, pending: _Pending) -> None:
        if rec.kind != "response":
            return
        message = _decode(_InitResponse, rec.line)
        result = message.result if message is not None else None
        if result is None:
            return
        version = _int(result.protocolVersion)
        info, capabilities = result.agentInfo or result.info, result.agentCapabilities or result.capabilities
        self._negotiated("agent", version, info, capabilities)
        if result.authMethods:
            self._set_run("auth_methods", _json_text(result.authMethods))
        # The latest successful initialize is authoritative (the client may repeat it).
        self._set_run("protocol_version", version)
        self.version = version if version in acp.PROTOCOL_VERSIONS else None
        self._use_vocabulary(self.version)

    def _new_response(self, rec: FrameRecord, pending: _Pending) -> None:
        if rec.kind != "response":
            return
        message = _decode(_Response, rec.line)
        sid = _str(message.result.sessionId) if message is not None and message.result is not None else None
        if sid is None:
            return
        rec.session_id = sid
        session = self._open_session(sid, rec, pending.method or "session/new")
        if pending.data is not None:
            session.values["cwd"] = pending.data
        if pending.method == "session/fork" and pending.session_id is not None:
            session.values["parent_session_id"] = pending.session_id

    def _load_response(self, rec: FrameRecord, pending: _Pending) -> None:
        window = pending.data
        if not isinstance(window, _Window) or window.session_id is None:
            return
        sid = window.session_id
        if window.opened:
            count = self._windows.get(sid, 0) - 1
            if count > 0:
                self._windows[sid] = count
            else:
                self._windows.pop(sid, None)
        if rec.kind == "response" and window.cwd is not None:
            session = self._sessions.get(sid)
            if session is not None:
                session.values["cwd"] = window.cwd
                self._dirty(session)

    def _close_response(self, rec: FrameRecord, pending: _Pending) -> None:
        self._session_time(rec, pending, "closed_ns")

    def _delete_response(self, rec: FrameRecord, pending: _Pending) -> None:
        self._session_time(rec, pending, "deleted_ns")

    def _session_time(self, rec: FrameRecord, pending: _Pending, column: str) -> None:
        if rec.kind == "response" and pending.session_id is not None:
            session = self._touch(pending.session_id, rec)
            session.values[column] = rec.ts_ns

    def _title_response(self, rec: FrameRecord, pending: _Pending) -> None:
        if rec.kind == "response" and pending.session_id is not None and pending.data is not None:
            self._touch(pending.session_id, rec).values["title"] = pending.data

    def _prompt_response(self, rec: FrameRecord, pending: _Pending) -> None:
        turn = pending.data
        if not isinstance(turn, _Turn):
            return
        if rec.kind == "error":
            if turn.status == "running":
                self._end_turn(turn, rec, None, "error")
            return
        message = _decode(_Response, rec.line)
        result = message.result if message is not None else None
        message_id = _str(result.messageId) if result is not None else None
        has_stop = result is not None and result.stopReason is not UNSET
        if message_id is not None or (not has_stop and turn.protocol_version == 2):
            # v2: the response is acceptance (the user message was inserted), not the end.
            turn.accepted_ns = rec.ts_ns
            turn.message_id = message_id
            if turn.protocol_version is None:
                turn.protocol_version = 2
            self._dirty(turn)
        elif turn.status == "running":
            # v1: the response ends the turn with its stop reason.
            if turn.protocol_version is None:
                turn.protocol_version = 1
            stop = _str(result.stopReason) if result is not None else None
            self._end_turn(turn, rec, stop, "ended")

    # -- bookkeeping -----------------------------------------------------------------------------

    def _use_vocabulary(self, version: int | None) -> None:
        vocabulary = acp.vocabulary(version)
        self._methods = vocabulary.methods
        self._updates = vocabulary.updates

    def _negotiated(self, side: str, version: int | None, info: Raw, capabilities: Raw) -> None:
        self._set_run(f"{side}_protocol_version", version)
        if info:
            self._set_run(f"{side}_info", _json_text(info))
            details = _decode(_Info, info)
            if details is not None:
                self._set_run(f"{side}_name", _str(details.name))
                self._set_run(f"{side}_version", _str(details.version))
        if capabilities:
            self._set_run(f"{side}_capabilities", _json_text(capabilities))

    def _set_run(self, column: str, value: Any) -> None:
        self._run.values[column] = value
        self._dirty(self._run)

    def _dirty(self, entity: _Entity) -> None:
        if not entity.dirty:
            entity.dirty = True
            self._queue.append(entity)

    def _touch(self, sid: str, rec: FrameRecord) -> _Session:
        session = self._sessions.get(sid)
        if session is None:
            return self._open_session(sid, rec, "seen")
        session.values["last_seen_ns"] = rec.ts_ns
        self._dirty(session)
        return session

    def _open_session(self, sid: str, rec: FrameRecord, how: str) -> _Session:
        """A new session instance of this run; it replaces an earlier one with the same id."""
        self._next_session_key += 1
        values: dict[str, Any] = {
            "session_id": sid,
            "created_run_id": self.run_id,
            "created_by": how,
            "first_seen_ns": rec.ts_ns,
            "last_seen_ns": rec.ts_ns,
        }
        session = _Session(self._next_session_key, sid, values)
        self._sessions[sid] = session
        self._dirty(session)
        self._queue.append(
            Change(
                "session_runs",
                {"session_key": session.key, "run_id": self.run_id},
                {"how": how, "first_seq": rec.seq},
            )
        )
        return session

    def _end_turn(self, turn: _Turn, rec: FrameRecord, stop_reason: str | None, status: str) -> None:
        turn.end_ns = rec.ts_ns
        turn.end_seq = rec.seq
        turn.stop_reason = stop_reason
        turn.status = status
        turns = turn.session.turns
        if turn in turns:
            turns.remove(turn)
        self._open_turns.pop(turn.key, None)
        self._dirty(turn)
