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

The module split: ``entities`` holds the output types, ``content`` the rules per update variant;
this module holds the entry points, the protocol's meaning (events, turns) and the requests,
responses and prompt turns.
"""

from __future__ import annotations

import bisect
import copy
import itertools
from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

from acp_proxy.protocol import events as ev
from acp_proxy.protocol import output, wire
from acp_proxy.protocol.chains import SUCCESSOR, Unwrapper
from acp_proxy.protocol.rows import FrameLike, RecordedFrame, run_events
from acp_proxy.protocol.state import ConnectionState
from acp_proxy.protocol.vocabulary import A2C, C2A
from acp_proxy.read.content import SETUP_RESULTS, TERMINAL_METHODS, ContentRules, _At, _id_key, _Pending
from acp_proxy.read.entities import (
    Call,
    Cancellation,
    Compaction,
    Conversation,
    Entity,
    ErrorResponse,
    FoldInput,
    Json,
    Message,
    Notice,
    Notification,
    Permission,
    Plan,
    PromptTurn,
    SessionState,
    Subagent,
    Terminal,
    ToolCall,
    Unknown,
    Usage,
    _dict,
    _list,
    _str,
    diff_text,
    text_of,
)

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
    relayed = [r for r in rows if r["dir"] in (C2A, A2C) and r.get("kind") != "batch"]
    for run, group in itertools.groupby(relayed, key=lambda r: r["run_id"]):
        for row, events, turn in run_events(group, ended=(ended or {}).get(run, True)):
            if row is None:
                folder.ended(run, 0, events)
                continue
            folder.apply_row(run, row, events, turn)
    return _with_inner_hops(folder.conversations, relayed, ended)


def _with_inner_hops(
    conversations: dict[str | None, Conversation], rows: list[Mapping[str, Any]], ended: Mapping[Any, bool] | None
) -> dict[str | None, Conversation]:
    """The conversations ``proxy/successor`` envelopes carry, folded as any (a deeper hop the
    same way), after the link's own: keyed ``<session> @hop<n>``, ``Conversation.hop`` = n."""
    if not any(r.get("method") == SUCCESSOR for r in rows):
        return conversations
    inner: list[Mapping[str, Any]] = []
    for _run, group in itertools.groupby(rows, key=lambda r: r["run_id"]):
        unwrapper = Unwrapper()
        inner += [found for row in group if (found := unwrapper.unwrap(row)) is not None]
    out = dict(conversations)
    for conv in fold_rows(inner, ended=ended).values():
        conv.hop += 1
        out[f"{conv.session_id or 'connection'} @hop{conv.hop}"] = conv
    return out


def fold_sessions(
    inputs: Iterable[FoldInput], *, protocol_version: int | None = None
) -> dict[str | None, Conversation]:
    """Fold ``inputs`` into one conversation per session, in order of first appearance; key
    None holds what concerns no session."""
    folder = Folder(protocol_version=protocol_version)
    for item in inputs:
        folder.feed(item)
    return folder.conversations


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


class Folder(ContentRules):
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
        self._updates = self._content_rules()

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

    def apply_row(self, run: Any, row: Mapping[str, Any], events: tuple[ev.Event, ...], turn: int | None) -> None:
        """Apply one recorded ``frames`` row of ``run`` given its meaning (``protocol.rows``): how
        ``fold_rows`` feeds each row, and ``read.checkpoints`` a row at a time."""
        message = None
        raw = row.get("raw")
        if raw is not None and row.get("kind") != "invalid":
            try:
                message = wire.loads(raw)
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
        self.apply(item, message, events, turn)

    def _count(self, item: FoldInput, msg: Json, turn_seq: int | None) -> None:
        # What the agent's update counts towards its turn: protocol.output's vocabulary.
        if turn_seq is None or item.dir != A2C or not isinstance(msg, dict) or msg.get("method") != "session/update":
            return
        if not item.forwarded:  # what the client received counts (a held chunk: its copy)
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
            elif isinstance(e, ev.TurnStarted) and e.by == "agent" and e.seq is not None:
                # v2 work the agent started itself: a turn with no prompt, from its running.
                conv = self._conv(e.session_id, run)
                turn = PromptTurn(
                    index=len(conv.turns) + 1,
                    session_id=e.session_id,
                    seq=e.seq,
                    ts_ns=e.ts_ns,
                    run=run,
                    by="agent",
                )
                conv.turns.append(turn)
                self._turns[(run, e.seq)] = turn

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
        elif item.dir == A2C and method in TERMINAL_METHODS:
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
        elif pending.method in TERMINAL_METHODS:
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
        if pending.method in SETUP_RESULTS:
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
