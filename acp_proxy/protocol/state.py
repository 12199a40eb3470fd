"""The protocol state of one ACP connection: frames in, events out.

Owns: every transition of the protocol's meaning, once — pending requests per direction and the
pairing of their answers (ids reused while pending, ``$/cancel_request``, answers the proxy
withheld, answers recorded only in part, requests unanswered when the connection ends), the
negotiated (or, without an ``initialize`` answer, inferred) protocol version, session instances
(new / fork / load / resume / first seen, titles, close, delete), history replay windows
(v1 ``session/load``; ``session/resume`` with a non-null ``replayFrom``, closed by the agent's
v2 ``replay_complete`` marker, or — for a peer that does not send it — inferred from the answer),
and prompt turns (v1: request to response; v2: request, acceptance, ``running`` ... ``idle``, and
foreground work the agent starts itself with no prompt; ``unknown`` ends nothing; cancellation;
turns left open at the end), which turn a frame belongs to (``turn_of``: the session's oldest open turn)
and each turn's first output (``TurnOutput``, by ``output.OUTPUT``). The transitions are the
three tables of ``transitions.py``; the code computes a trigger from a frame, looks the
transition up, and emits what the table names. What each event means is in ``events.py``; the
payloads it decodes are in ``payloads.py``; recorded rows come in through ``rows.py``.

Must not know: SQL, rows, pipes, rendering, message content. It reads a frame's envelope fields
(kind, method, id, sessionId, variant: what ``wire.decode`` extracted) and decodes a payload a
second time only for the rare frames whose payload changes the state: ``initialize``, session
set-up and their answers, prompt answers, ``$/cancel_request``, ``state_update``,
``session_info_update``. Everything else a view needs from a payload (messages, tool calls,
plans, schema shapes) is that view's own content logic.

Rule 1: the hot path is a chunk storm. For a ``session/update`` of a known session outside any
replay window, whose oldest open turn (if any) has had its first output, and whose variant
changes no state, ``feed`` does a few set and dict lookups and returns the shared empty tuple
``NO_EVENTS``: no allocation.

Rule 2: total. Any frame — odd ids, payloads of the wrong shape, answers nobody asked for — gives
events or none, never an exception.

Rule 3: the same frames give the same events in every process (recorder, the relay's gate, the
checker, ``show``/``diff``). A frame is fed whether or not it was forwarded: a request the proxy
dropped is still pending for its sender, an answer it withheld leaves its request pending. Two
exceptions follow what was forwarded: a request reusing the id of a pending one that was never
forwarded takes its place (a held request released as a copy or an edit; a retry), and the
answer to a request the proxy sent itself (``origin`` proxy) is the proxy's, never withheld.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

import msgspec
from msgspec import UNSET, Raw

from acp_proxy.protocol import events as ev
from acp_proxy.protocol import vocabulary as acp
from acp_proxy.protocol.output import OUTPUT
from acp_proxy.protocol.payloads import (
    ACT_INFER,
    ACT_STATE,
    ACT_TITLE,
    ACTIONS,
    CREATES,
    CUT_RESPONSE,
    EVIDENCE,
    LIVE_ONLY,
    RESTORES,
    InitRequest,
    InitResponse,
    Request,
    Response,
    Update,
    as_int,
    as_str,
    decode,
    json_text,
)
from acp_proxy.protocol.transitions import (
    ACCEPT,
    AGENT_START,
    ANSWER_FRAME,
    ANSWERED,
    CANCEL,
    CREATED,
    CUT,
    END,
    END_BY,
    END_STATUS,
    ENDED_BY_CLIENT,
    FINISH,
    IDLE,
    MARKER,
    NONE,
    OPEN,
    OPEN_TURN,
    PENDING,
    REJECT,
    REPLAYING,
    REQUEST,
    REQUEST_TRANSITIONS,
    RESTORE,
    RESTORE_REPLAY,
    RESTORED,
    RESTORED_REPLAY,
    SEEN,
    SENT,
    SESSION_TRANSITIONS,
    TURN_TRANSITIONS,
    UNSEEN,
    UPDATE,
    WITHHELD,
    WORK,
)
from acp_proxy.protocol.vocabulary import A2C, C2A, OTHER
from acp_proxy.protocol.wire import canonical_id

__all__ = ["NO_EVENTS", "ConnectionState", "FrameLike"]


class FrameLike(Protocol):
    """What ``feed`` reads of a frame: a ``FrameRecord`` (live), or a ``RecordedFrame`` (a row)."""

    seq: int
    ts_ns: int
    dir: str
    kind: str | None
    method: str | None
    rpc_id: str | None
    session_id: str | None
    update_kind: str | None
    line: bytes
    forwarded: int
    cut: int


NO_EVENTS: tuple[ev.Event, ...] = ()


# == the state's entities ===========================================================================


class _Pending:
    """A request waiting for its answer."""

    __slots__ = (
        "by_proxy",
        "cancel_seq",
        "data",
        "direction",
        "forwarded",
        "later",
        "method",
        "rpc_id",
        "seq",
        "session_id",
        "ts_ns",
        "unknown",
    )

    def __init__(self, f: FrameLike, unknown: str | None) -> None:
        self.seq = f.seq
        self.ts_ns = f.ts_ns
        self.direction = f.dir
        self.rpc_id = f.rpc_id
        self.method = f.method
        self.session_id = f.session_id
        self.unknown = unknown
        self.forwarded = f.forwarded
        # Sent by the proxy itself (acp-proxy ctl send): its answer is the proxy's, never forwarded.
        self.by_proxy = getattr(f, "origin", None) == "proxy"
        self.data: Any = None
        """What the answer's transition needs from the request (cwd, title, turn, restore)."""
        self.cancel_seq: int | None = None
        self.later: list[_Pending] | None = None
        """Requests that reused this id while it was pending, answered first come first served."""


class _Restore:
    __slots__ = ("cwd", "instance", "replays", "session_id")

    def __init__(self, session_id: str | None, cwd: str | None, replays: bool, instance: _Session | None) -> None:
        self.session_id = session_id
        self.cwd = cwd
        self.replays = replays
        self.instance = instance


class _Session:
    __slots__ = ("marked", "session_id", "state", "turn_count", "turns", "window_methods", "windows")

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.state = OPEN
        self.turns: list[_Turn] = []
        """Open turns, oldest first."""
        self.turn_count = 0
        self.windows: list[int] = []
        """Seqs of the requests whose replay windows are open, oldest first."""
        self.window_methods: dict[int, str] = {}
        """Open window's request seq -> the method that opened it (the marker ends resumes only)."""
        self.marked: set[int] = set()
        """Requests whose window ``replay_complete`` closed: their answers only restore."""


class _Turn:
    __slots__ = ("index", "output", "prompt_seq", "session", "state", "version")

    def __init__(self, prompt_seq: int, session: _Session, version: int | None) -> None:
        self.prompt_seq = prompt_seq
        self.session = session
        session.turn_count += 1
        self.index = session.turn_count
        self.version = version
        self.state = SENT
        self.output = False
        """The agent's first output of the turn was seen (``TurnOutput``)."""


# == the machine =====================================================================================


class ConnectionState:
    """The protocol state of one connection. ``feed`` every c2a / a2c frame in relay order
    (batch elements as frames of their own), then ``finish`` when the connection has ended."""

    def __init__(self, *, version: int | None = None) -> None:
        """``version``: the protocol version if known in advance (e.g. from the run row); the
        agent's ``initialize`` answer overrides it."""
        self._prior = version if version in acp.PROTOCOL_VERSIONS else None
        self._negotiated: int | None = None
        self._answered = False
        """An initialize answer was seen: from then on the version is the negotiated one."""
        self._inferred: int | None = None
        self._use_vocabulary(None)
        self._pending: dict[tuple[str, str | None], _Pending] = {}
        self._sessions: dict[str, _Session] = {}
        """The current instance of each session id."""
        self._windows: dict[str, _Session] = {}
        """Sessions with a replay window open."""
        self._quiet_sessions: set[str] = set()
        """Sessions known and not replaying: their chunks change no state (the hot path's lookup)."""
        self._retired: list[_Session] = []
        """Instances replaced by a new one with the same id: their open turns end with the rest."""
        self._last_cut_seq = {C2A: 0, A2C: 0}
        self.finished = False

    # -- queries ------------------------------------------------------------------------------------

    @property
    def version(self) -> int | None:
        """The protocol version the rules follow: negotiated, else inferred, else given."""
        if self._answered:
            return self._negotiated
        return self._inferred or self._prior

    @property
    def negotiated_version(self) -> int | None:
        return self._negotiated

    def open_turn(self, session_id: str | None) -> int | None:
        """The prompt seq of ``session_id``'s oldest open turn (the work the agent is on); None."""
        session = self._sessions.get(session_id) if session_id is not None else None
        return session.turns[0].prompt_seq if session is not None and session.turns else None

    def turn_of(self, f: FrameLike, events: Iterable[ev.Event]) -> int | None:
        """The prompt turn ``f`` belongs to (its prompt's seq), given the events ``feed`` gave for
        it; None when it belongs to none. Every view asks this; none has a rule of its own.

        A frame that starts, accepts, gives the first output of, or ends a turn belongs to that
        turn (an ``idle`` ending several: the oldest). History replayed in a replay window belongs
        to no turn. Any other frame of a session (a response: its request's session) belongs to
        the session's oldest open turn on this connection — the work the agent is on; a prompt
        queued behind it gets what comes after that turn has ended — and to none when no turn is
        open (work the agent started itself, set-up between turns, a late update).
        """
        sid = f.session_id
        for e in events:
            kind = type(e)
            if kind is ev.TurnStarted or kind is ev.TurnAccepted or kind is ev.TurnEnded or kind is ev.TurnOutput:
                return e.prompt_seq  # type: ignore[attr-defined]
            if kind is ev.UpdateReplayed:
                return None
            if kind is ev.ResponsePaired and sid is None:
                sid = e.session_id  # type: ignore[attr-defined]
        return self.open_turn(sid)

    def quiet(self, update_kind: str | None, session_id: str | None) -> bool:
        """Whether a ``session/update`` notification of ``update_kind`` for ``session_id`` would
        change no state (``feed``'s hot path: it would give ``NO_EVENTS``). A caller holding a
        recorded row may ask this first and skip building a frame for ``feed`` (the checker does,
        for every chunk of a storm)."""
        return update_kind in self._quiet_updates and session_id in self._quiet_sessions

    def replaying(self, session_id: str | None = None) -> bool:
        """Whether ``session_id`` is replaying history now; for None, whether any session is."""
        if session_id is None:
            return bool(self._windows)
        return session_id in self._windows

    # -- input ---------------------------------------------------------------------------------------

    def feed(self, f: FrameLike) -> tuple[ev.Event, ...]:
        """The events ``f`` causes (``NO_EVENTS`` for most frames). Never raises."""
        kind = f.kind
        if kind == "notification":
            if f.method == "session/update":
                # The chunk storm: a known variant that changes no state, for a known session not
                # replaying history. (None is in neither set: the slow path handles it.)
                if f.update_kind in self._quiet_updates and f.session_id in self._quiet_sessions:
                    return NO_EVENTS
                return self._collect(self._update, f)
            return self._collect(self._notification, f)
        if kind == "request":
            return self._collect(self._request, f)
        if kind == "response" or kind == "error":
            return self._collect(self._response, f)
        if kind == "invalid" and f.cut:
            return self._collect(self._cut_line, f)
        # A batch line says nothing itself: its elements are fed as frames of their own.
        return NO_EVENTS

    def finish(self, ts_ns: int) -> tuple[ev.Event, ...]:
        """The connection ended at ``ts_ns``: requests still pending, turns still open."""
        if self.finished:
            return NO_EVENTS
        self.finished = True
        out: list[ev.Event] = []
        waiting: list[_Pending] = []
        for first in self._pending.values():
            waiting.append(first)
            waiting.extend(first.later or ())
        self._pending.clear()
        for p in sorted(waiting, key=lambda item: item.seq):
            self._request_transition(PENDING, END)
            out.append(
                ev.Unanswered(
                    seq=None,
                    ts_ns=ts_ns,
                    direction=p.direction,
                    rpc_id=p.rpc_id,
                    request_seq=p.seq,
                    method=p.method,
                    session_id=p.session_id,
                    maybe_cut=self._last_cut_seq[OTHER[p.direction]] > p.seq,
                )
            )
        turns = sorted((t for s in self._all_sessions() for t in s.turns), key=lambda t: t.prompt_seq)
        for turn in turns:
            self._turn(turn, FINISH, None, ts_ns, out)
        return tuple(out)

    # -- dispatch ------------------------------------------------------------------------------------

    def _collect(self, handler: Any, f: FrameLike) -> tuple[ev.Event, ...]:
        out: list[ev.Event] = []
        if f.dir not in OTHER:
            return NO_EVENTS
        handler(f, out)
        return tuple(out) if out else NO_EVENTS

    def _use_vocabulary(self, version: int | None) -> None:
        vocabulary = acp.vocabulary(version)
        self._methods = vocabulary.methods
        self._updates = vocabulary.updates
        self._quiet_updates = vocabulary.updates - ACTIONS.keys()
        """Known variants that change no state: a chunk storm's."""

    @staticmethod
    def _request_transition(state: str, trigger: str) -> tuple[str, str | None]:
        return REQUEST_TRANSITIONS[(state, trigger)]

    def _session_transition(
        self, sid: str, trigger: str, f: FrameLike, out: list[ev.Event], **facts: Any
    ) -> _Session | None:
        """Apply the session table for ``sid``; the (possibly new) instance, None if unseen."""
        session = self._sessions.get(sid)
        state = UNSEEN if session is None else session.state
        step = SESSION_TRANSITIONS.get((state, trigger))
        if step is None:
            return session
        new_state, emits = step
        for name in (emits or "").split():
            if name == "SessionOpened":
                session = self._new_instance(sid)
                out.append(
                    ev.SessionOpened(
                        seq=f.seq,
                        ts_ns=f.ts_ns,
                        session_id=sid,
                        how=facts.get("how", "seen"),
                        cwd=facts.get("cwd"),
                        parent_session_id=facts.get("parent"),
                    )
                )
            elif name == "SessionRestoring":
                out.append(
                    ev.SessionRestoring(
                        seq=f.seq,
                        ts_ns=f.ts_ns,
                        session_id=sid,
                        method=facts["method"],
                        replays=trigger == RESTORE_REPLAY,
                    )
                )
            elif name == "ReplayWindowOpened":
                assert session is not None
                session.windows.append(f.seq)
                session.window_methods[f.seq] = facts["method"]
                self._windows[sid] = session
                self._settle(session)
                out.append(ev.ReplayWindowOpened(seq=f.seq, ts_ns=f.ts_ns, session_id=sid, method=facts["method"]))
            elif name == "ReplayWindowClosed":
                assert session is not None
                request_seq = facts["request_seq"]
                if request_seq in session.windows:
                    session.windows.remove(request_seq)
                elif session.windows:
                    session.windows.pop()
                session.window_methods.pop(request_seq, None)
                if session.windows:
                    new_state = REPLAYING
                else:
                    self._windows.pop(sid, None)
                    self._settle(session)
                out.append(
                    ev.ReplayWindowClosed(
                        seq=f.seq,
                        ts_ns=f.ts_ns,
                        session_id=sid,
                        method=facts["method"],
                        request_seq=request_seq,
                        ok=facts["ok"],
                        by="marker" if trigger == MARKER else "response",
                    )
                )
            elif name == "SessionRestored":
                out.append(
                    ev.SessionRestored(
                        seq=f.seq,
                        ts_ns=f.ts_ns,
                        session_id=sid,
                        method=facts["method"],
                        request_seq=facts["request_seq"],
                        replays=facts["replays"],
                        ok=facts["ok"],
                        cwd=facts.get("cwd"),
                    )
                )
            elif name == "UpdateReplayed":
                assert session is not None
                variant = f.update_kind
                out.append(
                    ev.UpdateReplayed(
                        seq=f.seq,
                        ts_ns=f.ts_ns,
                        session_id=sid,
                        variant=variant,
                        live_only=variant in LIVE_ONLY,
                        window_seq=session.windows[-1],
                    )
                )
            elif name == "SessionClosed":
                out.append(ev.SessionClosed(seq=f.seq, ts_ns=f.ts_ns, session_id=sid, how=facts["how"]))
        if session is not None:
            session.state = new_state
        return session

    def _settle(self, session: _Session) -> None:
        """Keep the hot path's set right: a session is quiet (its chunks cost no events) unless it
        replays history or its oldest open turn still awaits the agent's first output."""
        sid = session.session_id
        if self._sessions.get(sid) is not session:
            return
        if session.windows or (session.turns and not session.turns[0].output):
            self._quiet_sessions.discard(sid)
        else:
            self._quiet_sessions.add(sid)

    def _new_instance(self, sid: str) -> _Session:
        old = self._sessions.get(sid)
        session = self._sessions[sid] = _Session(sid)
        if old is not None:
            self._retired.append(old)
            self._windows.pop(sid, None)
        self._quiet_sessions.add(sid)
        return session

    def _all_sessions(self) -> list[_Session]:
        return [*self._retired, *self._sessions.values()]

    def _seen(self, sid: str | None, f: FrameLike, out: list[ev.Event]) -> _Session | None:
        if sid is None:
            return None
        session = self._sessions.get(sid)
        if session is None:
            return self._session_transition(sid, SEEN, f, out)
        return session

    def _turn(
        self,
        turn: _Turn,
        trigger: str,
        stop: str | None,
        ts_ns: int,
        out: list[ev.Event],
        seq: int | None = None,
        message_id: str | None = None,
    ) -> None:
        step = TURN_TRANSITIONS.get((turn.state, trigger))
        if step is None:
            return
        new_state, emit = step
        was_open = turn.state in OPEN_TURN
        turn.state = new_state
        if was_open and new_state not in OPEN_TURN:
            turns = turn.session.turns
            if turn in turns:
                turns.remove(turn)
                self._settle(turn.session)
        sid = turn.session.session_id
        if emit == "TurnAccepted":
            out.append(
                ev.TurnAccepted(
                    seq=seq,
                    ts_ns=ts_ns,
                    session_id=sid,
                    prompt_seq=turn.prompt_seq,
                    message_id=message_id,
                    protocol_version=turn.version,
                )
            )
        elif emit == "TurnEnded":
            out.append(
                ev.TurnEnded(
                    seq=seq,
                    ts_ns=ts_ns,
                    session_id=sid,
                    prompt_seq=turn.prompt_seq,
                    status=END_STATUS[new_state],
                    stop_reason=stop,
                    by=END_BY[trigger],
                    protocol_version=turn.version,
                )
            )

    def _infer(self, version: int, evidence: str, f: FrameLike, out: list[ev.Event]) -> None:
        if self._answered or self._inferred is not None or version not in acp.PROTOCOL_VERSIONS:
            return
        self._inferred = version
        out.append(ev.VersionInferred(seq=f.seq, ts_ns=f.ts_ns, version=version, evidence=evidence))

    # -- session/update ---------------------------------------------------------------------------

    def _update(self, f: FrameLike, out: list[ev.Event]) -> None:
        variant = f.update_kind
        if variant is not None and variant not in self._updates:
            out.append(
                ev.NameUnknown(seq=f.seq, ts_ns=f.ts_ns, what="update", name=variant, unknown=acp.unknown_kind(variant))
            )
        sid = f.session_id
        if sid is None:
            return
        if sid not in self._sessions:
            self._seen(sid, f, out)
        action = ACTIONS.get(variant, 0) if variant is not None else 0
        if sid in self._windows:
            if variant == "replay_complete":
                self._replay_complete(sid, f, out)
                return
            # History: flagged, and never this connection's turn activity.
            self._session_transition(sid, UPDATE, f, out)
            if action & ACT_TITLE:
                self._title_update(sid, f, out)
            return
        if action & ACT_INFER and variant is not None:
            self._infer(EVIDENCE[variant], f"session/update {variant}", f, out)
        if action & ACT_STATE:
            self._state_update(sid, f, out)
        elif action & ACT_TITLE:
            self._title_update(sid, f, out)
        elif variant in OUTPUT:
            self._output(sid, variant, f, out)

    def _replay_complete(self, sid: str, f: FrameLike, out: list[ev.Event]) -> None:
        """v2 ``replay_complete``: the oldest open ``session/resume`` window of the session ends
        here. (A marker outside any resume window changes nothing: the checker says why.)"""
        session = self._windows[sid]
        window = next((w for w in session.windows if session.window_methods.get(w) == "session/resume"), None)
        if window is None:
            self._session_transition(sid, UPDATE, f, out)
            return
        session.marked.add(window)
        self._session_transition(sid, MARKER, f, out, method="session/resume", request_seq=window, ok=True)

    def _output(self, sid: str, variant: str, f: FrameLike, out: list[ev.Event]) -> None:
        session = self._sessions.get(sid)
        if session is None or not session.turns or session.turns[0].output:
            return
        turn = session.turns[0]
        turn.output = True
        self._settle(session)
        out.append(ev.TurnOutput(seq=f.seq, ts_ns=f.ts_ns, session_id=sid, prompt_seq=turn.prompt_seq, variant=variant))

    def _state_update(self, sid: str, f: FrameLike, out: list[ev.Event]) -> None:
        message = decode(Update, f.line)
        body = message.params.update if message is not None and message.params is not None else None
        if body is None:
            return
        state = as_str(body.state)
        stop = as_str(body.stopReason)
        out.append(ev.StateReported(seq=f.seq, ts_ns=f.ts_ns, session_id=sid, state=state, stop_reason=stop))
        session = self._sessions.get(sid)
        if session is None:
            return
        v2_turns = [t for t in session.turns if t.version != 1]
        if state in ("running", "requires_action"):
            # Work belongs to the oldest open prompt: a later one may be queued behind it.
            if v2_turns and v2_turns[0] is session.turns[0]:
                self._turn(v2_turns[0], WORK, None, f.ts_ns, out, f.seq)
            elif not session.turns and self.version != 1:
                # Foreground work with no prompt open: the agent started it (v2 prompt
                # lifecycle: it needs no prompt request and no user message). A turn too.
                turn = _Turn(f.seq, session, 2)
                turn.state = AGENT_START
                session.turns.append(turn)
                self._settle(session)
                out.append(
                    ev.TurnStarted(
                        seq=f.seq,
                        ts_ns=f.ts_ns,
                        session_id=sid,
                        prompt_seq=f.seq,
                        index=turn.index,
                        protocol_version=2,
                        rpc_id=None,
                        by="agent",
                    )
                )
        elif state == "idle":
            for turn in v2_turns:
                self._turn(turn, IDLE, stop, f.ts_ns, out, f.seq)

    def _title_update(self, sid: str, f: FrameLike, out: list[ev.Event]) -> None:
        message = decode(Update, f.line)
        body = message.params.update if message is not None and message.params is not None else None
        title = body.title if body is not None else UNSET
        if title is None or isinstance(title, str):  # null clears the title; absent leaves it
            out.append(ev.SessionTitled(seq=f.seq, ts_ns=f.ts_ns, session_id=sid, title=title))

    # -- requests and notifications -----------------------------------------------------------------

    def _request(self, f: FrameLike, out: list[ev.Event]) -> None:
        method = f.method
        unknown = None
        if method is not None and method not in self._methods:
            unknown = acp.unknown_kind(method)
            out.append(ev.NameUnknown(seq=f.seq, ts_ns=f.ts_ns, what="method", name=method, unknown=unknown))
        pending = _Pending(f, unknown)
        key = (f.dir, f.rpc_id)
        first = self._pending.get(key)
        replaced = None
        if first is not None and not first.forwarded and not first.later:
            # The receiver never saw the first (held, then released as a copy or an edit, or
            # dropped): the id is not reused from its side. The new one takes the first's place,
            # and its answer (or a fault's error reply) answers the sender's request.
            replaced = self._pending.pop(key)
            first = None
        self._request_transition(NONE if first is None else PENDING, REQUEST)
        if first is None:
            self._pending[key] = pending
        else:
            if first.later is None:
                first.later = []
            first.later.append(pending)
        out.append(
            ev.RequestSent(
                seq=f.seq,
                ts_ns=f.ts_ns,
                direction=f.dir,
                rpc_id=f.rpc_id,
                method=method,
                session_id=f.session_id,
                reused_id_of=first.seq if first is not None else None,
            )
        )
        sid = f.session_id
        if f.dir == C2A:
            if method == "initialize":
                self._initialize_request(f, out)
            elif method in CREATES:
                message = decode(Request, f.line)
                params = message.params if message is not None else None
                pending.data = as_str(params.cwd) if params is not None else None
            elif method in RESTORES:
                self._restore_request(f, pending, out)
            elif method == "session/set_title":
                message = decode(Request, f.line)
                if message is not None and message.params is not None and isinstance(message.params.title, str):
                    pending.data = message.params.title
            elif method == "session/prompt" and replaced is not None and isinstance(replaced.data, _Turn):
                pending.data = replaced.data  # the sender's turn began with the held prompt: it goes on
            elif method == "session/prompt" and sid is not None:
                session = self._seen(sid, f, out)
                assert session is not None
                turn = _Turn(f.seq, session, self.version)
                session.turns.append(turn)
                self._settle(session)
                pending.data = turn
                out.append(
                    ev.TurnStarted(
                        seq=f.seq,
                        ts_ns=f.ts_ns,
                        session_id=sid,
                        prompt_seq=f.seq,
                        index=turn.index,
                        protocol_version=turn.version,
                        rpc_id=f.rpc_id,
                    )
                )
        self._seen(sid, f, out)

    def _initialize_request(self, f: FrameLike, out: list[ev.Event]) -> None:
        message = decode(InitRequest, f.line)
        params = message.params if message is not None else None
        if params is None:
            return
        proposed = as_int(params.protocolVersion)
        out.append(
            ev.PeerAnnounced(
                seq=f.seq,
                ts_ns=f.ts_ns,
                side="client",
                protocol_version=proposed,
                info=json_text(params.clientInfo or params.info),
                capabilities=json_text(params.clientCapabilities or params.capabilities),
            )
        )
        if proposed is not None:
            self._infer(proposed, "initialize request", f, out)

    def _restore_request(self, f: FrameLike, pending: _Pending, out: list[ev.Event]) -> None:
        message = decode(Request, f.line)
        params = message.params if message is not None else None
        sid = f.session_id
        method = f.method or "session/load"
        # v1 session/load always replays; session/resume only when asked to (replayFrom, v2).
        replays = method == "session/load" or (params is not None and params.replayFrom is not None)
        cwd = as_str(params.cwd) if params is not None else None
        if sid is None:
            pending.data = _Restore(None, cwd, replays, None)
            return
        trigger = RESTORE_REPLAY if replays else RESTORE
        session = self._session_transition(sid, trigger, f, out, how=method, method=method)
        pending.data = _Restore(sid, cwd, replays, session)

    def _notification(self, f: FrameLike, out: list[ev.Event]) -> None:
        method = f.method
        if method is not None and method not in self._methods:
            out.append(
                ev.NameUnknown(seq=f.seq, ts_ns=f.ts_ns, what="method", name=method, unknown=acp.unknown_kind(method))
            )
        sid = f.session_id
        if method == "$/cancel_request":
            self._cancel_request(f, out)
        elif method == "session/cancel" and f.dir == C2A and sid is not None:
            session = self._seen(sid, f, out)
            assert session is not None
            requests = sorted(
                p.seq
                for first in self._pending.values()
                for p in (first, *(first.later or ()))
                if p.direction == A2C and p.session_id == sid
            )
            out.append(
                ev.SessionCancelled(
                    seq=f.seq,
                    ts_ns=f.ts_ns,
                    session_id=sid,
                    prompt_seqs=tuple(t.prompt_seq for t in session.turns),
                    request_seqs=tuple(requests),
                )
            )
        self._seen(sid, f, out)

    def _cancel_request(self, f: FrameLike, out: list[ev.Event]) -> None:
        # The sender cancels a request it sent itself: look in its own direction.
        message = decode(Request, f.line)
        raw = message.params.requestId if message is not None and message.params is not None else Raw()
        request_id: str | None = None
        if raw:
            try:
                request_id = canonical_id(raw)
            except msgspec.DecodeError:
                request_id = None
        target = self._pending.get((f.dir, request_id)) if raw else None
        self._request_transition(NONE if target is None else PENDING, CANCEL)
        if target is not None:
            target.cancel_seq = f.seq
        out.append(
            ev.RequestCancelled(
                seq=f.seq,
                ts_ns=f.ts_ns,
                direction=f.dir,
                rpc_id=request_id,
                request_seq=target.seq if target is not None else None,
                method=target.method if target is not None else None,
            )
        )

    # -- responses ------------------------------------------------------------------------------------

    def _take(self, direction: str, rpc_id: str | None) -> _Pending | None:
        key = (direction, rpc_id)
        pending = self._pending.pop(key, None)
        if pending is not None and pending.later:
            successor = pending.later.pop(0)
            successor.later = pending.later
            self._pending[key] = successor
        return pending

    def _paired(self, f: FrameLike, p: _Pending, session_id: str | None, **flags: bool) -> ev.ResponsePaired:
        return ev.ResponsePaired(
            seq=f.seq,
            ts_ns=f.ts_ns,
            direction=f.dir,
            rpc_id=f.rpc_id,
            request_seq=p.seq,
            method=p.method,
            session_id=session_id,
            latency_ns=f.ts_ns - p.ts_ns,
            error=f.kind == "error",
            cancelled_by=p.cancel_seq,
            unknown=p.unknown,
            **flags,
        )

    def _response(self, f: FrameLike, out: list[ev.Event]) -> None:
        direction = OTHER[f.dir]
        rpc_id = f.rpc_id
        if not f.forwarded:
            withheld = self._pending.get((direction, rpc_id))
            if withheld is not None and not withheld.by_proxy:
                self._request_transition(PENDING, WITHHELD)
                out.append(self._paired(f, withheld, withheld.session_id, withheld=True))
                return
        pending = self._take(direction, rpc_id)
        if pending is None:
            self._request_transition(NONE, ANSWER_FRAME)
            out.append(ev.ResponseUnpaired(seq=f.seq, ts_ns=f.ts_ns, direction=f.dir, rpc_id=rpc_id))
            return
        self._request_transition(PENDING, ANSWER_FRAME)
        after: list[ev.Event] = []
        sid = pending.session_id
        method = pending.method
        ok = f.kind == "response"
        if pending.direction == C2A:
            if method == "initialize":
                if ok:
                    self._initialize_response(f, after)
            elif method in CREATES:
                if ok:
                    sid = self._created(f, pending, after) or sid
            elif method in RESTORES:
                self._restored(f, pending, ok, after)
            elif method == "session/prompt":
                self._prompt_response(f, pending, after)
            elif method in ("session/close", "session/delete"):
                if ok and sid is not None:
                    self._seen(sid, f, after)
                    how = "closed" if method == "session/close" else "deleted"
                    self._session_transition(sid, ENDED_BY_CLIENT, f, after, how=how)
            elif method == "session/set_title" and ok and sid is not None and pending.data is not None:
                self._seen(sid, f, after)
                after.append(ev.SessionTitled(seq=f.seq, ts_ns=f.ts_ns, session_id=sid, title=pending.data))
        out.append(self._paired(f, pending, sid))
        out.extend(after)
        self._seen(sid, f, out)

    def _cut_line(self, f: FrameLike, out: list[ev.Event]) -> None:
        direction = OTHER[f.dir]
        # Remembered so that a request left pending at the end can say its answer may be here.
        previous = self._last_cut_seq[f.dir]
        self._last_cut_seq[f.dir] = f.seq
        match = CUT_RESPONSE.match(f.line)
        if match is None:
            return
        try:
            rpc_id = canonical_id(Raw(match.group(1)))
        except msgspec.DecodeError:
            return
        pending = self._take(direction, rpc_id)
        _, emit = self._request_transition(NONE if pending is None else PENDING, CUT)
        if pending is None or emit is None:
            return
        out.append(self._paired(f, pending, pending.session_id, cut=True))
        self._last_cut_seq[f.dir] = previous

    def _initialize_response(self, f: FrameLike, out: list[ev.Event]) -> None:
        message = decode(InitResponse, f.line)
        result = message.result if message is not None else None
        if result is None:
            return
        version = as_int(result.protocolVersion)
        out.append(
            ev.PeerAnnounced(
                seq=f.seq,
                ts_ns=f.ts_ns,
                side="agent",
                protocol_version=version,
                info=json_text(result.agentInfo or result.info),
                capabilities=json_text(result.agentCapabilities or result.capabilities),
                auth_methods=json_text(result.authMethods),
            )
        )
        # The latest successful initialize is authoritative (the client may repeat it).
        supported = version in acp.PROTOCOL_VERSIONS
        self._answered = True
        self._negotiated = version if supported else None
        self._use_vocabulary(self._negotiated)
        out.append(ev.VersionNegotiated(seq=f.seq, ts_ns=f.ts_ns, version=version, supported=supported))

    def _created(self, f: FrameLike, pending: _Pending, out: list[ev.Event]) -> str | None:
        message = decode(Response, f.line)
        sid = as_str(message.result.sessionId) if message is not None and message.result is not None else None
        if sid is None:
            return None
        parent = pending.session_id if pending.method == "session/fork" else None
        self._session_transition(sid, CREATED, f, out, how=pending.method, cwd=pending.data, parent=parent)
        return sid

    def _restored(self, f: FrameLike, pending: _Pending, ok: bool, out: list[ev.Event]) -> None:
        restore = pending.data
        if not isinstance(restore, _Restore) or restore.session_id is None:
            return
        sid = restore.session_id
        if restore.replays and restore.instance is not self._sessions.get(sid):
            # The instance that opened the window was replaced (a session/new with its id): the
            # window went with it.
            trigger = RESTORED
        elif restore.replays and restore.instance is not None and pending.seq in restore.instance.marked:
            # replay_complete closed the window already: the answer only restores.
            restore.instance.marked.discard(pending.seq)
            trigger = RESTORED
        else:
            trigger = RESTORED_REPLAY if restore.replays else RESTORED
        self._session_transition(
            sid,
            trigger,
            f,
            out,
            method=pending.method,
            request_seq=pending.seq,
            replays=restore.replays,
            ok=ok,
            cwd=restore.cwd if ok else None,
        )

    def _prompt_response(self, f: FrameLike, pending: _Pending, out: list[ev.Event]) -> None:
        turn = pending.data
        if not isinstance(turn, _Turn):
            return
        if f.kind == "error":
            self._turn(turn, REJECT, None, f.ts_ns, out, f.seq)
            return
        message = decode(Response, f.line)
        result = message.result if message is not None else None
        message_id = as_str(result.messageId) if result is not None else None
        has_stop = result is not None and result.stopReason is not UNSET
        stop = as_str(result.stopReason) if result is not None and has_stop else None
        if turn.version == 1:
            trigger = ANSWERED
        elif message_id is not None or (not has_stop and turn.version == 2):
            trigger = ACCEPT
        else:
            trigger = ANSWERED
        if turn.version is None:
            turn.version = 2 if trigger == ACCEPT else 1
        if message_id is not None and trigger == ACCEPT:
            self._infer(2, "prompt response", f, out)
        elif stop is not None:
            self._infer(1, "prompt response", f, out)
        self._turn(turn, trigger, stop, f.ts_ns, out, f.seq, message_id)
