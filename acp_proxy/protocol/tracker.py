"""The recorder's view of the protocol: frames in, protocol annotations and row changes out.

Owns: turning the events of the connection's state machine (``protocol.state``; every rule of
pairing, negotiation, sessions, replay windows and prompt turns lives there) into what the
recorder stores — annotations of the ``FrameRecord`` being recorded (a response's ``method``,
``request_seq``, ``latency_ns`` and ``session_id``; ``replay``; ``unknown``; ``note``) and
``Change``s to the ``runs``, ``frames``, ``sessions``, ``session_runs`` and ``turns`` rows — plus the
per-turn counters (chunks, distinct tool calls, permission requests, the time of the first
agent output), counted by ``protocol.output``'s vocabulary into the turn ``ConnectionState.turn_of``
names, and the first output as ``TurnOutput`` says.

Must not know: SQL, pipes, processes, time sources or the database's row ids. It annotates the
``FrameRecord`` it is given in place (the recorder inserts that row right after) and describes
everything else as ``Change``s — upserts keyed by run, frame seq or a tracker-local key — that
the recorder applies in order. It reads nothing but the frames it is shown and their events.

Rule 1: the hot path is a chunk storm. For a ``session/update`` that the state machine gives no
event (``NO_EVENTS``), the tracker does one dict lookup for the session row, one for the variant's
counters and a few attribute updates.

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

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec

from acp_proxy.protocol import events as ev
from acp_proxy.protocol import output, wire
from acp_proxy.protocol.frames import FrameRecord
from acp_proxy.protocol.state import ConnectionState
from acp_proxy.protocol.vocabulary import A2C

NOTE_UNKNOWN_ID = "response to unknown id"
NOTE_NOTICE_REPLAYED = "notice inside replay window"

# What an update counts towards its turn (chunks, first output, tool calls) is ``protocol.output``'s
# one vocabulary; which turn it counts towards is the state's ``turn_of``.


@dataclass(slots=True)
class Change:
    """One upsert for the recorder: ``table``, the ``key`` columns naming the row, ``values``."""

    table: str
    key: dict[str, Any]
    values: dict[str, Any]


class _Info(msgspec.Struct):
    name: Any = None
    version: Any = None


_info_decoder = msgspec.json.Decoder(_Info)


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _add_note(rec: FrameRecord, text: str) -> None:
    # A note may already be there (the gate's "stripped: ..."): add to it, never repeat it.
    if rec.note is None:
        rec.note = text
    elif text not in rec.note:
        rec.note = f"{rec.note}; {text}"


# -- rows ------------------------------------------------------------------------------------------


class _RunRow:
    __slots__ = ("dirty", "values")

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.dirty = False

    def change(self, run_id: int) -> Change:
        return Change("runs", {"id": run_id}, dict(self.values))


class _Session:
    __slots__ = ("dirty", "key", "session_id", "values")

    def __init__(self, key: int, session_id: str, values: dict[str, Any]) -> None:
        self.key = key
        self.session_id = session_id
        self.values = values
        self.dirty = False

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
        "session",
        "start_ns",
        "status",
        "stop_reason",
        "tool_calls",
        "tool_ids",
        "turn_index",
    )

    def __init__(self, key: int, session: _Session, event: ev.TurnStarted) -> None:
        self.key = key
        self.session = session
        self.turn_index = event.index
        self.protocol_version = event.protocol_version
        self.prompt_seq = event.prompt_seq
        self.start_ns = event.ts_ns
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


class Tracker:
    """Protocol annotations and rows of one connection. Feed it every c2a/a2c frame in relay order."""

    def __init__(self, run_id: int, *, changes: bool = True) -> None:
        """``changes=False`` keeps the state and annotates frames without describing rows (the
        relay's gate needs replay windows and pairing but records nothing): ``drain`` returns []."""
        self.run_id = run_id
        self._emit = changes
        self.state = ConnectionState()
        self._feed = self.state.feed
        self._sessions: dict[str | None, _Session] = {}
        """The current session instance of each ACP session id in this run."""
        self._turns: dict[int, _Turn] = {}
        """Every turn of the run by its prompt's seq (an acceptance may come after the end)."""
        self._queue: list[Change | _Entity] = []
        self._run = _RunRow()
        self._next_session_key = 0
        self._unpaired = 0
        self._unanswered = 0
        self._request_notes: dict[int, str] = {}
        """Notes of requests (e.g. a reused id), repeated when the request ends up unanswered."""
        handlers: dict[type[ev.Event], Callable[[FrameRecord | None, Any], None]] = {
            ev.RequestSent: self._request_sent,
            ev.ResponsePaired: self._response_paired,
            ev.ResponseUnpaired: self._response_unpaired,
            ev.RequestCancelled: self._request_cancelled,
            ev.Unanswered: self._unanswered_request,
            ev.PeerAnnounced: self._peer,
            ev.VersionNegotiated: self._negotiated,
            ev.NameUnknown: self._name_unknown,
            ev.SessionOpened: self._session_opened,
            ev.SessionRestored: self._session_restored,
            ev.SessionTitled: self._session_titled,
            ev.SessionClosed: self._session_closed,
            ev.UpdateReplayed: self._update_replayed,
            ev.TurnStarted: self._turn_started,
            ev.TurnAccepted: self._turn_accepted,
            ev.TurnOutput: self._turn_output,
            ev.TurnEnded: self._turn_ended,
        }
        self._handlers = handlers

    @property
    def version(self) -> int | None:
        """The negotiated protocol version (the agent's initialize answer); None before."""
        return self.state.negotiated_version

    # -- the interface ---------------------------------------------------------------------------

    def observe(self, rec: FrameRecord) -> tuple[ev.Event, ...]:
        """Annotate ``rec`` in place and note what it changes; its events. Once per frame, in order."""
        events = self._feed(rec)
        if events:
            handlers = self._handlers
            for event in events:
                handler = handlers.get(type(event))
                if handler is not None:
                    handler(rec, event)
            if rec.kind == "request" and rec.note is not None:
                self._request_notes[rec.seq] = rec.note
        session = self._sessions.get(rec.session_id)
        if session is None:
            return events
        session.values["last_seen_ns"] = rec.ts_ns
        if not session.dirty:
            session.dirty = True
            self._queue.append(session)
        # Content, not protocol: what the agent's updates count towards their turn (history, in a
        # replay window, belongs to no turn: ``turn_of`` says None).
        action = output.COUNTS.get(rec.update_kind, 0)  # type: ignore[arg-type]
        # What a peer received counts: a held chunk is counted once, as the copy released.
        if action and rec.forwarded and rec.kind == "notification" and rec.method == "session/update":
            turn = self._turns.get(self.state.turn_of(rec, events))  # type: ignore[arg-type]
            if turn is not None:
                if action & output.IS_CHUNK:
                    turn.chunks += 1
                if action & output.IS_TOOL:
                    item = rec.item_id
                    if item is not None and item not in turn.tool_ids:
                        turn.tool_ids.add(item)
                        turn.tool_calls += 1
                if not turn.dirty:
                    turn.dirty = True
                    self._queue.append(turn)
        return events

    def in_replay_window(self, session_id: str | None) -> bool:
        """Whether ``session_id`` is replaying history now; for None, whether any session is."""
        return self.state.replaying(session_id)

    def finish(self, ts_ns: int) -> tuple[ev.Event, ...]:
        """The run ended at ``ts_ns``: mark requests still pending, close open turns."""
        events = self.state.finish(ts_ns)
        for event in events:
            handler = self._handlers.get(type(event))
            if handler is not None:
                handler(None, event)
        self._set_run("unanswered_requests", self._unanswered)
        self._set_run("unpaired_responses", self._unpaired)
        return events

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

    # -- events -> annotations and rows ----------------------------------------------------------

    def _request_sent(self, rec: FrameRecord | None, e: ev.RequestSent) -> None:
        if rec is None:
            return
        if e.reused_id_of is not None:
            _add_note(rec, f"id reused while request seq {e.reused_id_of} is pending")
        if e.method == "session/request_permission" and e.direction == A2C:
            turn = self._turns.get(self.state.open_turn(e.session_id))  # type: ignore[arg-type]
            if turn is not None:
                turn.permission_requests += 1
                self._dirty(turn)

    def _response_paired(self, rec: FrameRecord | None, e: ev.ResponsePaired) -> None:
        if rec is None:
            return
        rec.method = e.method
        rec.request_seq = e.request_seq
        rec.latency_ns = e.latency_ns
        if rec.session_id is None:
            rec.session_id = e.session_id
        if e.unknown is not None:
            rec.unknown = e.unknown
        if e.cancelled_by is not None:
            _add_note(rec, f"answers a request cancelled by $/cancel_request seq {e.cancelled_by}")
        if e.withheld:
            # The proxy withheld this answer (a fault): for the requester the request is still
            # waiting, so it stays pending and can end the run unanswered.
            _add_note(rec, "not forwarded: the request stays unanswered for its sender")

    def _response_unpaired(self, rec: FrameRecord | None, e: ev.ResponseUnpaired) -> None:
        if rec is not None:
            _add_note(rec, "response without a request id" if e.rpc_id in (None, "null") else NOTE_UNKNOWN_ID)
        self._unpaired += 1
        self._set_run("unpaired_responses", self._unpaired)

    def _request_cancelled(self, rec: FrameRecord | None, e: ev.RequestCancelled) -> None:
        if rec is None:
            return
        if e.rpc_id is None:
            _add_note(rec, "cancels no request (requestId missing)")
        elif e.request_seq is None:
            _add_note(rec, f"cancels no pending request (id {e.rpc_id})")
        else:
            _add_note(rec, f"cancels request seq {e.request_seq} ({e.method})")

    def _unanswered_request(self, rec: FrameRecord | None, e: ev.Unanswered) -> None:
        self._unanswered += 1
        values: dict[str, Any] = {"unanswered": 1}
        if e.maybe_cut:
            why = "a line recorded only in part may hold its response"
            note = self._request_notes.get(e.request_seq)
            values["note"] = f"{note}; {why}" if note else why
        self._queue.append(Change("frames", {"run_id": self.run_id, "seq": e.request_seq}, values))

    def _peer(self, rec: FrameRecord | None, e: ev.PeerAnnounced) -> None:
        side = e.side
        self._set_run(f"{side}_protocol_version", e.protocol_version)
        if e.info is not None:
            self._set_run(f"{side}_info", e.info)
            try:
                details = wire.decode_as(_info_decoder, e.info)
            except Exception:  # DecodeError, a member of the wrong type
                details = None
            if details is not None:
                self._set_run(f"{side}_name", _str(details.name))
                self._set_run(f"{side}_version", _str(details.version))
        if e.capabilities is not None:
            self._set_run(f"{side}_capabilities", e.capabilities)
        if e.auth_methods is not None:
            self._set_run("auth_methods", e.auth_methods)

    def _negotiated(self, rec: FrameRecord | None, e: ev.VersionNegotiated) -> None:
        # The latest successful initialize is authoritative (the client may repeat it).
        self._set_run("protocol_version", e.version)

    def _name_unknown(self, rec: FrameRecord | None, e: ev.NameUnknown) -> None:
        if rec is not None:
            rec.unknown = e.unknown

    def _session_opened(self, rec: FrameRecord | None, e: ev.SessionOpened) -> None:
        """A new session instance of this run; it replaces an earlier one with the same id."""
        self._next_session_key += 1
        values: dict[str, Any] = {
            "session_id": e.session_id,
            "created_run_id": self.run_id,
            "created_by": e.how,
            "first_seen_ns": e.ts_ns,
            "last_seen_ns": e.ts_ns,
        }
        if e.cwd is not None:
            values["cwd"] = e.cwd
        if e.parent_session_id is not None:
            values["parent_session_id"] = e.parent_session_id
        session = _Session(self._next_session_key, e.session_id, values)
        self._sessions[e.session_id] = session
        self._dirty(session)
        self._queue.append(
            Change(
                "session_runs",
                {"session_key": session.key, "run_id": self.run_id},
                {"how": e.how, "first_seq": e.seq},
            )
        )

    def _session_restored(self, rec: FrameRecord | None, e: ev.SessionRestored) -> None:
        session = self._sessions.get(e.session_id)
        if session is not None and e.ok and e.cwd is not None:
            session.values["cwd"] = e.cwd
            self._dirty(session)

    def _session_titled(self, rec: FrameRecord | None, e: ev.SessionTitled) -> None:
        session = self._sessions.get(e.session_id)
        if session is not None:
            session.values["title"] = e.title  # null clears the title
            self._dirty(session)

    def _session_closed(self, rec: FrameRecord | None, e: ev.SessionClosed) -> None:
        session = self._sessions.get(e.session_id)
        if session is not None:
            session.values["closed_ns" if e.how == "closed" else "deleted_ns"] = e.ts_ns
            self._dirty(session)

    def _update_replayed(self, rec: FrameRecord | None, e: ev.UpdateReplayed) -> None:
        if rec is None:
            return
        # History: flagged, and never counted as this run's turn activity.
        rec.replay = 1
        if e.live_only:
            _add_note(rec, NOTE_NOTICE_REPLAYED)

    def _turn_started(self, rec: FrameRecord | None, e: ev.TurnStarted) -> None:
        session = self._sessions.get(e.session_id)
        if session is None:
            return
        turn = _Turn(len(self._turns) + 1, session, e)
        self._turns[e.prompt_seq] = turn
        self._dirty(turn)

    def _turn_output(self, rec: FrameRecord | None, e: ev.TurnOutput) -> None:
        turn = self._turns.get(e.prompt_seq)
        if turn is not None and turn.first_output_ns is None:
            # Marked dirty by ``observe``'s counting (output is always counted), after the session.
            turn.first_output_ns = e.ts_ns

    def _turn_accepted(self, rec: FrameRecord | None, e: ev.TurnAccepted) -> None:
        turn = self._turns.get(e.prompt_seq)
        if turn is None:
            return
        # v2: the response is acceptance (the user message was inserted), not the end.
        turn.accepted_ns = e.ts_ns
        turn.message_id = e.message_id
        turn.protocol_version = e.protocol_version
        self._dirty(turn)

    def _turn_ended(self, rec: FrameRecord | None, e: ev.TurnEnded) -> None:
        turn = self._turns.get(e.prompt_seq)
        if turn is None:
            return
        turn.status = e.status
        turn.protocol_version = e.protocol_version
        if e.seq is not None:
            turn.end_ns = e.ts_ns
            turn.end_seq = e.seq
            turn.stop_reason = e.stop_reason
        self._dirty(turn)

    # -- bookkeeping -----------------------------------------------------------------------------

    def _set_run(self, column: str, value: Any) -> None:
        self._run.values[column] = value
        self._dirty(self._run)

    def _dirty(self, entity: _Entity) -> None:
        if not entity.dirty:
            entity.dirty = True
            self._queue.append(entity)
