"""The connection state machine: frames in, events out — every transition of the three tables.

Frames are built exactly as the recorder builds them (``wire.decode`` into a ``FrameRecord``);
nothing here spawns.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from acp_proxy.protocol import events as ev
from acp_proxy.protocol import rows as rw
from acp_proxy.protocol import transitions as sm
from acp_proxy.protocol import wire
from acp_proxy.protocol.frames import FrameRecord
from acp_proxy.protocol.rows import RecordedFrame
from acp_proxy.protocol.state import NO_EVENTS, ConnectionState

S = "sess_1"
MS = 1_000_000


class Conn:
    """Frames fed to one ConnectionState in relay order (seq from 1, 1 ms apart)."""

    def __init__(self, version: int | None = None) -> None:
        self.state = ConnectionState(version=version)
        self.seq = 0
        self.log: list[ev.Event] = []

    def send(self, direction: str, message: Any, *, forwarded: bool = True) -> tuple[ev.Event, ...]:
        line = message if isinstance(message, bytes) else json.dumps(message).encode()
        self.seq += 1
        rec = FrameRecord(1, self.seq, self.seq * MS, direction, line, wire.decode(line))
        rec.forwarded = int(forwarded)
        events = self.state.feed(rec)
        self.log.extend(events)
        return events

    def c2a(self, message: Any, **kw: Any) -> tuple[ev.Event, ...]:
        return self.send("c2a", message, **kw)

    def a2c(self, message: Any, **kw: Any) -> tuple[ev.Event, ...]:
        return self.send("a2c", message, **kw)

    def finish(self) -> tuple[ev.Event, ...]:
        events = self.state.finish((self.seq + 1) * MS)
        self.log.extend(events)
        return events

    def of(self, kind: type[ev.Event]) -> list[Any]:
        return [e for e in self.log if isinstance(e, kind)]


def req(i: Any, method: str, params: Any = None) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": i, "method": method, "params": params if params is not None else {}}


def res(i: Any, result: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": i, "result": result}


def err(i: Any, code: int = -32603) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": i, "error": {"code": code, "message": "failed"}}


def note(method: str, params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": method, "params": params}


def upd(body: dict[str, Any], sid: str = S) -> dict[str, Any]:
    return note("session/update", {"sessionId": sid, "update": body})


def chunk(text: str = "x", sid: str = S) -> dict[str, Any]:
    return upd({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}, sid)


def state(value: str, stop: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"sessionUpdate": "state_update", "state": value}
    if stop is not None:
        body["stopReason"] = stop
    return upd(body)


def start(conn: Conn, version: int = 1) -> None:
    conn.c2a(req(0, "initialize", {"protocolVersion": version}))
    conn.a2c(res(0, {"protocolVersion": version}))
    conn.c2a(req(1, "session/new", {"cwd": "/w"}))
    conn.a2c(res(1, {"sessionId": S}))


def kinds(events: tuple[ev.Event, ...]) -> list[str]:
    return [type(e).__name__ for e in events]


# -- pairing ---------------------------------------------------------------------------------------


def test_a_response_pairs_with_its_request_per_direction() -> None:
    conn = Conn()
    (sent,) = conn.c2a(req(7, "session/list"))
    assert isinstance(sent, ev.RequestSent) and (sent.direction, sent.rpc_id, sent.method) == (
        "c2a",
        "7",
        "session/list",
    )
    # An agent request with the same id is another request: ids are per direction.
    other = conn.a2c(req(7, "fs/read_text_file", {"sessionId": S, "path": "/a"}))[0]
    assert other.reused_id_of is None
    answered = conn.a2c(res(7, {"sessions": []}))
    paired = answered[0]
    assert isinstance(paired, ev.ResponsePaired)
    assert (paired.request_seq, paired.method, paired.latency_ns, paired.error) == (1, "session/list", 2 * MS, False)
    paired = conn.c2a(err(7))[0]
    assert isinstance(paired, ev.ResponsePaired) and (paired.request_seq, paired.error) == (2, True)
    assert conn.finish() == NO_EVENTS


def test_numeric_and_string_ids_do_not_pair_and_strays_are_unpaired() -> None:
    conn = Conn()
    conn.c2a(req(1, "session/list"))
    (stray,) = conn.a2c(res("1", {}))
    assert isinstance(stray, ev.ResponseUnpaired) and stray.rpc_id == '"1"'
    (null,) = conn.a2c({"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error"}})
    assert isinstance(null, ev.ResponseUnpaired) and null.rpc_id == "null"
    (unanswered,) = conn.finish()
    assert isinstance(unanswered, ev.Unanswered) and (unanswered.request_seq, unanswered.seq) == (1, None)


def test_a_reused_pending_id_is_flagged_and_answers_come_in_order() -> None:
    conn = Conn()
    conn.c2a(req(5, "session/list"))
    (again,) = conn.c2a(req(5, "session/list"))
    assert again.reused_id_of == 1
    assert conn.a2c(res(5, {}))[0].request_seq == 1
    assert conn.a2c(res(5, {}))[0].request_seq == 2


def test_a_withheld_answer_leaves_its_request_pending() -> None:
    conn = Conn()
    conn.c2a(req(3, "session/list"))
    (withheld,) = conn.a2c(res(3, {}), forwarded=False)
    assert isinstance(withheld, ev.ResponsePaired) and withheld.withheld
    (unanswered,) = conn.finish()
    assert isinstance(unanswered, ev.Unanswered) and unanswered.request_seq == 1


def test_a_cut_response_pairs_by_the_id_in_its_head() -> None:
    conn = Conn()
    conn.a2c(req(3, "fs/read_text_file", {"path": "/big"}))
    conn.seq += 1
    rec = FrameRecord(1, conn.seq, conn.seq * MS, "c2a", b'{"jsonrpc":"2.0","id":3,"result":{"content":"aaa', None)
    rec.kind, rec.cut = "invalid", 1
    (paired,) = conn.state.feed(rec)
    assert isinstance(paired, ev.ResponsePaired) and (paired.cut, paired.request_seq) == (True, 1)
    assert conn.finish() == NO_EVENTS


def test_a_request_left_pending_behind_a_cut_line_may_have_its_answer_there() -> None:
    conn = Conn()
    conn.a2c(req(3, "fs/read_text_file", {"path": "/big"}))
    conn.seq += 1
    rec = FrameRecord(1, conn.seq, conn.seq * MS, "c2a", b'{"result":{"content":"aa', None)
    rec.kind, rec.cut = "invalid", 1
    assert conn.state.feed(rec) == NO_EVENTS
    (unanswered,) = conn.finish()
    assert unanswered.maybe_cut


def test_cancel_request_names_a_pending_request_of_its_own_sender() -> None:
    conn = Conn()
    start(conn, 2)
    conn.a2c(req(4, "session/request_permission", {"sessionId": S, "options": []}))
    (cancel,) = conn.a2c(note("$/cancel_request", {"requestId": 4}))
    assert isinstance(cancel, ev.RequestCancelled)
    assert (cancel.request_seq, cancel.method, cancel.rpc_id) == (5, "session/request_permission", "4")
    assert conn.c2a(err(4, -32800))[0].cancelled_by == 6
    conn.c2a(req(9, "session/list"))
    (wrong_way,) = conn.a2c(note("$/cancel_request", {"requestId": 9}))
    assert (wrong_way.request_seq, wrong_way.rpc_id) == (None, "9")
    (missing,) = conn.a2c(note("$/cancel_request", {}))
    assert (missing.request_seq, missing.rpc_id) == (None, None)


# -- negotiation -----------------------------------------------------------------------------------


def test_initialize_announces_both_peers_and_negotiates() -> None:
    conn = Conn()
    asked = conn.c2a(req(0, "initialize", {"protocolVersion": 2, "info": {"name": "c"}, "capabilities": {}}))
    assert kinds(asked) == ["RequestSent", "PeerAnnounced", "VersionInferred"]
    assert (asked[1].side, asked[1].protocol_version, json.loads(asked[1].info)) == ("client", 2, {"name": "c"})
    assert conn.state.version == 2  # the proposal, until the agent answers
    answered = conn.a2c(res(0, {"protocolVersion": 1, "agentCapabilities": {"loadSession": True}, "authMethods": []}))
    assert kinds(answered) == ["ResponsePaired", "PeerAnnounced", "VersionNegotiated"]
    assert (answered[1].side, json.loads(answered[1].capabilities), answered[1].auth_methods) == (
        "agent",
        {"loadSession": True},
        "[]",
    )
    assert (answered[2].version, answered[2].supported) == (1, True)
    assert conn.state.version == conn.state.negotiated_version == 1


def test_an_unsupported_version_falls_back_to_the_union_of_every_vocabulary() -> None:
    conn = Conn()
    conn.c2a(req(0, "initialize", {"protocolVersion": 9}))
    (_, _, negotiated) = conn.a2c(res(0, {"protocolVersion": 9}))
    assert (negotiated.version, negotiated.supported, conn.state.version) == (9, False, None)
    # Nothing is called unknown for being of one version rather than the other.
    events = conn.a2c(upd({"sessionUpdate": "state_update", "state": "idle"}))
    assert events and not any(isinstance(e, ev.NameUnknown) for e in events)


def test_without_initialize_the_traffic_shows_the_version() -> None:
    conn = Conn()
    conn.c2a(req(1, "session/prompt", {"sessionId": S, "prompt": []}))
    assert conn.state.version is None
    inferred = [
        e
        for e in conn.a2c(upd({"sessionUpdate": "user_message", "messageId": "m"}))
        if isinstance(e, ev.VersionInferred)
    ]
    assert [(e.version, e.evidence) for e in inferred] == [(2, "session/update user_message")]
    conn2 = Conn()
    conn2.c2a(req(1, "session/prompt", {"sessionId": S, "prompt": []}))
    events = conn2.a2c(res(1, {"stopReason": "end_turn"}))
    assert [(e.version, e.evidence) for e in events if isinstance(e, ev.VersionInferred)] == [(1, "prompt response")]
    assert conn2.of(ev.TurnEnded)[0].protocol_version == 1


def test_unknown_names_are_classed_by_the_negotiated_vocabulary() -> None:
    conn = Conn()
    start(conn, 1)
    found = [
        *conn.c2a(req(5, "future/method")),
        *conn.c2a(note("_zed/hello", {})),
        *conn.a2c(upd({"sessionUpdate": "future_thing"})),
    ]
    unknown = [(e.what, e.name, e.unknown) for e in found if isinstance(e, ev.NameUnknown)]
    assert unknown == [
        ("method", "future/method", "future"),
        ("method", "_zed/hello", "extension"),
        ("update", "future_thing", "future"),
    ]
    # A v2-only variant is unknown to a v1 connection.
    assert isinstance(conn.a2c(state("idle"))[0], ev.NameUnknown)
    assert conn.a2c(res(5, {}))[0].unknown == "future"


# -- sessions and replay windows --------------------------------------------------------------------


def test_sessions_are_opened_by_new_fork_load_resume_or_first_sight() -> None:
    conn = Conn()
    start(conn, 1)
    conn.c2a(req(2, "session/fork", {"sessionId": S, "cwd": "/f"}))
    conn.a2c(res(2, {"sessionId": "s-fork"}))
    conn.c2a(req(3, "session/load", {"sessionId": "s-old", "cwd": "/o"}))
    conn.a2c(chunk(sid="s-seen"))
    opened = [(e.session_id, e.how, e.cwd, e.parent_session_id) for e in conn.of(ev.SessionOpened)]
    assert opened == [
        (S, "session/new", "/w", None),
        ("s-fork", "session/fork", "/f", S),
        ("s-old", "session/load", None, None),
        ("s-seen", "seen", None, None),
    ]
    # A session/new naming an id already seen is a new instance of it.
    conn.c2a(req(4, "session/new", {"cwd": "/again"}))
    assert kinds(conn.a2c(res(4, {"sessionId": S}))) == ["ResponsePaired", "SessionOpened"]


def test_titles_close_and_delete() -> None:
    conn = Conn()
    start(conn, 1)
    conn.c2a(req(2, "session/set_title", {"sessionId": S, "title": "T"}))
    assert conn.a2c(res(2, {}))[1].title == "T"
    assert conn.a2c(upd({"sessionUpdate": "session_info_update", "title": None}))[0].title is None
    conn.c2a(req(3, "session/close", {"sessionId": S}))
    conn.c2a(req(4, "session/delete", {"sessionId": S}))
    assert [e.how for e in (*conn.a2c(res(3, {})), *conn.a2c(res(4, {}))) if isinstance(e, ev.SessionClosed)] == [
        "closed",
        "deleted",
    ]


def test_load_opens_a_replay_window_until_its_answer() -> None:
    conn = Conn()
    start(conn, 1)
    opened = conn.c2a(req(2, "session/load", {"sessionId": S, "cwd": "/w"}))
    assert kinds(opened) == ["RequestSent", "SessionRestoring", "ReplayWindowOpened"]
    assert opened[1].replays and conn.state.replaying(S) and conn.state.replaying()
    (replayed,) = conn.a2c(chunk("old"))
    assert isinstance(replayed, ev.UpdateReplayed) and (replayed.live_only, replayed.window_seq) == (False, 5)
    (notice,) = conn.a2c(upd({"sessionUpdate": "notice", "severity": "info", "title": "t"}))
    assert notice.live_only
    # The window is the session's: another session's updates are live.
    assert not any(isinstance(e, ev.UpdateReplayed) for e in conn.a2c(chunk(sid="other")))
    closed = conn.a2c(res(2, {}))
    assert kinds(closed) == ["ResponsePaired", "ReplayWindowClosed", "SessionRestored"]
    assert (closed[2].ok, closed[2].cwd, closed[2].replays) == (True, "/w", True)
    assert not conn.state.replaying(S)
    assert conn.a2c(chunk("new")) is NO_EVENTS


def test_resume_replays_only_with_a_replay_cursor_and_windows_nest() -> None:
    conn = Conn()
    start(conn, 2)
    plain = conn.c2a(req(2, "session/resume", {"sessionId": S, "cwd": "/w"}))
    assert kinds(plain) == ["RequestSent", "SessionRestoring"] and not plain[1].replays
    assert conn.a2c(chunk()) is NO_EVENTS
    conn.a2c(res(2, {}))
    conn.c2a(req(3, "session/resume", {"sessionId": S, "cwd": "/w", "replayFrom": {"type": "start"}}))
    conn.c2a(req(4, "session/resume", {"sessionId": S, "cwd": "/w", "replayFrom": {"type": "start"}}))
    assert conn.a2c(chunk())[0].window_seq == 9
    conn.a2c(res(4, {}))
    assert conn.state.replaying(S)  # the first window is still open
    assert conn.a2c(chunk())[0].window_seq == 8
    failed = conn.a2c(err(3))
    assert [(type(e).__name__, getattr(e, "ok", None)) for e in failed[1:]] == [
        ("ReplayWindowClosed", False),
        ("SessionRestored", False),
    ]
    assert not conn.state.replaying()


# -- turns -----------------------------------------------------------------------------------------


def test_v1_turn_from_request_to_response() -> None:
    conn = Conn()
    start(conn, 1)
    (_, started) = conn.c2a(req(2, "session/prompt", {"sessionId": S, "prompt": []}))
    assert isinstance(started, ev.TurnStarted) and (started.index, started.protocol_version) == (1, 1)
    (first,) = conn.a2c(chunk())
    assert isinstance(first, ev.TurnOutput) and (first.prompt_seq, first.variant) == (5, "agent_message_chunk")
    assert conn.a2c(chunk()) is NO_EVENTS  # only the first output is an event: the storm stays quiet
    # v1 knows no state_update: an idle is not its end.
    conn.a2c(state("idle", "end_turn"))
    ended = conn.a2c(res(2, {"stopReason": "max_tokens"}))[-1]
    assert isinstance(ended, ev.TurnEnded)
    assert (ended.status, ended.stop_reason, ended.by, ended.seq) == ("ended", "max_tokens", "response", 9)
    conn.c2a(req(3, "session/prompt", {"sessionId": S, "prompt": []}))
    failed = conn.a2c(err(3))[-1]
    assert (failed.status, failed.by, failed.stop_reason) == ("error", "error", None)


def test_v2_turn_accepted_worked_on_and_ended_by_idle() -> None:
    conn = Conn()
    start(conn, 2)
    conn.c2a(req(2, "session/prompt", {"sessionId": S, "prompt": []}))
    (_, accepted) = conn.a2c(res(2, {"messageId": "m1"}))
    assert isinstance(accepted, ev.TurnAccepted) and accepted.message_id == "m1"
    (running,) = conn.a2c(state("running"))
    assert isinstance(running, ev.StateReported) and running.state == "running"
    _reported, ended = conn.a2c(state("idle", "end_turn"))
    assert (ended.prompt_seq, ended.status, ended.stop_reason, ended.by) == (5, "ended", "end_turn", "idle")
    # A repeated idle snapshot is not a second completion.
    assert kinds(conn.a2c(state("idle", "end_turn"))) == ["StateReported"]


def test_v2_idle_without_a_stop_reason_still_ends_the_work() -> None:
    conn = Conn()
    start(conn, 2)
    conn.c2a(req(2, "session/prompt", {"sessionId": S, "prompt": []}))
    conn.a2c(res(2, {"messageId": "m1"}))
    ended = conn.a2c(state("idle"))[-1]
    assert (ended.status, ended.stop_reason, ended.by) == ("ended", None, "idle")


def test_v2_a_queued_prompt_is_not_ended_by_the_idle_of_the_work_before_it() -> None:
    conn = Conn()
    start(conn, 2)
    conn.c2a(req(2, "session/prompt", {"sessionId": S, "prompt": []}))
    conn.a2c(res(2, {"messageId": "m1"}))
    conn.a2c(state("running"))
    conn.c2a(req(3, "session/prompt", {"sessionId": S, "prompt": []}))  # queued, not accepted
    conn.a2c(state("requires_action"))  # work of the first prompt: not the queued one's
    conn.a2c(state("running"))
    first = [e for e in conn.a2c(state("idle", "end_turn")) if isinstance(e, ev.TurnEnded)]
    assert [e.prompt_seq for e in first] == [5]
    conn.a2c(state("running"))  # now the queued prompt is the oldest open one: its work
    second = [e for e in conn.a2c(state("idle", "end_turn")) if isinstance(e, ev.TurnEnded)]
    assert [e.prompt_seq for e in second] == [8]
    # Its acceptance came late: still its acceptance.
    assert isinstance(conn.a2c(res(3, {"messageId": "m2"}))[-1], ev.TurnAccepted)


def test_v2_rejected_prompt_and_an_error_after_the_end() -> None:
    conn = Conn()
    start(conn, 2)
    conn.c2a(req(2, "session/prompt", {"sessionId": S, "prompt": []}))
    assert conn.a2c(err(2))[-1].status == "error"
    conn.c2a(req(3, "session/prompt", {"sessionId": S, "prompt": []}))
    conn.a2c(state("running"))
    conn.a2c(state("idle", "end_turn"))
    assert kinds(conn.a2c(err(3))) == ["ResponsePaired"]  # ended already: nothing changes


def test_session_cancel_names_the_open_turns_and_the_agents_pending_requests() -> None:
    conn = Conn()
    start(conn, 2)
    conn.c2a(req(2, "session/prompt", {"sessionId": S, "prompt": []}))
    conn.a2c(req(0, "session/request_permission", {"sessionId": S, "options": []}))
    conn.a2c(req(1, "fs/read_text_file", {"sessionId": "elsewhere", "path": "/a"}))
    (cancelled,) = conn.c2a(note("session/cancel", {"sessionId": S}))
    assert isinstance(cancelled, ev.SessionCancelled) and (cancelled.prompt_seqs, cancelled.request_seqs) == (
        (5,),
        (6,),
    )


def test_the_end_leaves_requests_unanswered_and_turns_unfinished() -> None:
    conn = Conn()
    start(conn, 2)
    conn.c2a(req(2, "session/prompt", {"sessionId": S, "prompt": []}))
    conn.a2c(res(2, {"messageId": "m1"}))
    conn.a2c(req(0, "session/request_permission", {"sessionId": S, "options": []}))
    events = conn.finish()
    assert kinds(events) == ["Unanswered", "TurnEnded"]
    assert (events[1].status, events[1].by, events[1].seq, events[1].stop_reason) == (
        "unfinished",
        "finish",
        None,
        None,
    )
    assert conn.state.finish(0) == NO_EVENTS  # once


# -- the hot path and the events themselves ----------------------------------------------------


def test_a_chunk_of_a_known_session_outside_windows_costs_no_events() -> None:
    conn = Conn()
    start(conn, 1)
    conn.c2a(req(2, "session/prompt", {"sessionId": S, "prompt": []}))
    # Until the turn's first output the session is not quiet: what is not output stays an event-less
    # slow path, the first output is an event, and then every chunk is the hot path.
    assert conn.a2c(upd({"sessionUpdate": "usage_update"})) is NO_EVENTS
    assert kinds(conn.a2c(upd({"sessionUpdate": "plan", "entries": []}))) == ["TurnOutput"]
    for variant in ("agent_message_chunk", "agent_thought_chunk", "tool_call_update", "usage_update", "plan"):
        assert conn.a2c(upd({"sessionUpdate": variant, "toolCallId": "t"})) is NO_EVENTS
    assert S in conn.state._quiet_sessions


def test_events_are_frozen_and_encode_as_json_with_their_name() -> None:
    event = ev.TurnStarted(seq=3, ts_ns=9, session_id=S, prompt_seq=3, index=1, protocol_version=2, rpc_id="2")
    assert msgspec.json.decode(msgspec.json.encode(event)) == {
        "event": "TurnStarted",
        "seq": 3,
        "ts_ns": 9,
        "session_id": S,
        "prompt_seq": 3,
        "index": 1,
        "protocol_version": 2,
        "rpc_id": "2",
        "by": "prompt",
    }
    try:
        event.seq = 4  # type: ignore[misc]
    except AttributeError:
        pass
    else:
        raise AssertionError("events must be immutable")
    assert hash(event) == hash(
        ev.TurnStarted(seq=3, ts_ns=9, session_id=S, prompt_seq=3, index=1, protocol_version=2, rpc_id="2")
    )


def test_every_table_entry_names_a_known_event_and_state() -> None:
    names = {cls.__name__ for cls in ev.EVENT_TYPES}
    for table, states in (
        (sm.REQUEST_TRANSITIONS, {sm.NONE, sm.PENDING}),
        (sm.SESSION_TRANSITIONS, {sm.UNSEEN, sm.OPEN, sm.REPLAYING}),
        (sm.TURN_TRANSITIONS, {sm.SENT, sm.WORKING, sm.ACCEPTED, sm.ENDED, sm.ERROR, sm.UNFINISHED}),
    ):
        for (before, _trigger), (after, emits) in table.items():
            assert before in states and after in states
            for word in (emits or "").split():
                assert word in names or word in ("reused", "withheld", "cut", "unmatched"), word
    # Once a turn has ended nothing but a late acceptance touches it.
    closed = {s for s in (sm.ENDED, sm.ERROR, sm.UNFINISHED)}
    assert [k for k in sm.TURN_TRANSITIONS if k[0] in closed] == [(sm.ENDED, sm.ACCEPT)]


def test_recorded_rows_give_the_same_events_as_live_frames() -> None:
    live = Conn()
    rows = []
    trace = [
        ("c2a", req(0, "initialize", {"protocolVersion": 2})),
        ("a2c", res(0, {"protocolVersion": 2})),
        ("c2a", req(1, "session/new", {"cwd": "/w"})),
        ("a2c", res(1, {"sessionId": S})),
        ("c2a", req(2, "session/prompt", {"sessionId": S, "prompt": []})),
        ("a2c", res(2, {"messageId": "m"})),
        ("a2c", state("idle", "end_turn")),
    ]
    for direction, message in trace:
        live.send(direction, message)
        line = json.dumps(message).encode()
        frame = wire.decode(line)
        rows.append(
            {
                "seq": live.seq,
                "ts_ns": live.seq * MS,
                "dir": direction,
                "kind": frame.kind,
                "rpc_id": frame.rpc_id,
                # What the recorder's tracker annotates on a response must not matter.
                "method": "annotated/method" if frame.kind == "response" else frame.method,
                "session_id": "annotated-session" if frame.kind == "response" else frame.session_id,
                "update_kind": frame.update_kind,
                "raw": line.decode(),
                "forwarded": 1,
                "cut": 0,
            }
        )
    recorded = ConnectionState()
    replayed = [e for row in rows for e in recorded.feed(RecordedFrame(row))]
    assert replayed == live.log


# -- totality ------------------------------------------------------------------------------------

_IDS = st.one_of(st.integers(0, 3), st.sampled_from(["0", "1", "a"]), st.none())
_SIDS = st.sampled_from([S, "s2", None])
_METHODS = st.sampled_from(
    [
        "initialize",
        "session/new",
        "session/load",
        "session/resume",
        "session/prompt",
        "session/cancel",
        "session/close",
        "session/set_title",
        "session/request_permission",
        "$/cancel_request",
        "_vendor/x",
        "future/x",
    ]
)
_UPDATES = st.fixed_dictionaries(
    {
        "sessionUpdate": st.sampled_from(
            ["agent_message_chunk", "state_update", "notice", "session_info_update", "_x", "user_message"]
        )
    },
    optional={
        "state": st.sampled_from(["running", "idle", "requires_action", 5]),
        "stopReason": st.sampled_from(["end_turn", "cancelled", 3]),
        "title": st.one_of(st.none(), st.text(max_size=3), st.integers()),
    },
)
_PARAMS = st.one_of(
    st.none(),
    st.integers(),
    st.fixed_dictionaries(
        {},
        optional={
            "sessionId": _SIDS,
            "protocolVersion": st.sampled_from([1, 2, 9, "2"]),
            "replayFrom": st.sampled_from([None, {"type": "start"}]),
            "requestId": _IDS,
            "cwd": st.sampled_from(["/w", 5]),
            "title": st.text(max_size=3),
            "update": _UPDATES,
        },
    ),
)
_RESULTS = st.one_of(
    st.none(),
    st.lists(st.integers(), max_size=2),
    st.fixed_dictionaries(
        {},
        optional={
            "sessionId": _SIDS,
            "protocolVersion": st.sampled_from([1, 2, 9]),
            "messageId": st.sampled_from(["m1", "", 5]),
            "stopReason": st.sampled_from(["end_turn", "cancelled", None]),
        },
    ),
)
_MESSAGES = st.one_of(
    st.builds(lambda i, m, p: {"jsonrpc": "2.0", "id": i, "method": m, "params": p}, _IDS, _METHODS, _PARAMS),
    st.builds(
        lambda m, p: {"jsonrpc": "2.0", "method": m, "params": p},
        st.sampled_from(["session/update", "session/cancel", "$/cancel_request", "_n"]),
        _PARAMS,
    ),
    st.builds(lambda i, r: {"jsonrpc": "2.0", "id": i, "result": r}, _IDS, _RESULTS),
    st.builds(lambda i: {"jsonrpc": "2.0", "id": i, "error": {"code": -1, "message": "x"}}, _IDS),
)
_FRAMES = st.tuples(
    st.sampled_from(["c2a", "a2c"]),
    st.one_of(_MESSAGES.map(lambda m: json.dumps(m).encode()), st.binary(max_size=40)),
    st.booleans(),
)


@settings(max_examples=400, deadline=None)
@given(st.lists(_FRAMES, max_size=40))
def test_any_frames_give_consistent_events_and_never_raise(frames: list[tuple[str, bytes, bool]]) -> None:
    conn = Conn()
    for direction, line, forwarded in frames:
        conn.send(direction, line, forwarded=forwarded)
    conn.finish()
    sent = {e.seq: e for e in conn.of(ev.RequestSent)}
    for paired in conn.of(ev.ResponsePaired):
        asked = sent[paired.request_seq]
        assert asked.direction != paired.direction and asked.rpc_id == paired.rpc_id
        assert paired.seq > asked.seq and paired.latency_ns >= 0
    started = {e.prompt_seq for e in conn.of(ev.TurnStarted)}
    ended = [e.prompt_seq for e in conn.of(ev.TurnEnded)]
    # Every turn ends exactly once by the end of the connection.
    assert sorted(ended) == sorted(started)
    answered = {e.request_seq for e in conn.of(ev.ResponsePaired) if not e.withheld}
    for unanswered in conn.of(ev.Unanswered):
        assert unanswered.request_seq in sent and unanswered.request_seq not in answered
    windows = conn.of(ev.ReplayWindowOpened)
    assert len(conn.of(ev.ReplayWindowClosed)) <= len(windows)


def test_a_recorded_run_gives_every_row_with_its_events_then_the_end() -> None:
    rows = [
        {
            "seq": 1,
            "ts_ns": 10,
            "dir": "c2a",
            "kind": "request",
            "rpc_id": "1",
            "method": "session/prompt",
            "session_id": S,
            "raw": json.dumps(req(1, "session/prompt", {"sessionId": S, "prompt": []})),
        },
        {"seq": 2, "ts_ns": 20, "dir": "stderr", "kind": "stderr", "raw": "booting"},
        {
            "seq": 3,
            "ts_ns": 30,
            "dir": "a2c",
            "kind": "notification",
            "method": "session/update",
            "session_id": S,
            "update_kind": "agent_message_chunk",
            "raw": json.dumps(chunk()),
        },
    ]
    out = list(rw.run_events(rows))
    assert [row["seq"] if row else None for row, _, _ in out] == [1, 2, 3, None]
    assert kinds(out[0].events) == ["RequestSent", "SessionOpened", "TurnStarted"]
    assert out[1].events is NO_EVENTS
    # The chunk is the turn's first output; the turn of each frame comes with it.
    assert kinds(out[2].events) == ["TurnOutput"]
    assert [m.turn for m in out] == [1, None, 1, None]
    (unanswered, unfinished) = out[3].events
    assert isinstance(unanswered, ev.Unanswered) and isinstance(unfinished, ev.TurnEnded)
    assert unfinished.ts_ns == 30
    assert [m.row for m in rw.run_events(rows, ended=False)] == rows


def test_replay_complete_closes_the_oldest_resume_window_and_the_answer_only_restores() -> None:
    conn = Conn()
    start(conn, 2)
    replay = {"sessionId": S, "cwd": "/w", "replayFrom": {"type": "start"}}
    conn.c2a(req(3, "session/resume", replay))
    conn.c2a(req(4, "session/resume", replay))
    assert isinstance(conn.a2c(chunk())[0], ev.UpdateReplayed)
    (closed,) = conn.a2c(upd({"sessionUpdate": "replay_complete"}))
    assert isinstance(closed, ev.ReplayWindowClosed)
    assert (closed.by, closed.request_seq, closed.ok) == ("marker", 5, True)
    assert conn.state.replaying(S)  # the second resume's window is still open
    assert kinds(conn.a2c(res(3, {}))) == ["ResponsePaired", "SessionRestored"]
    assert conn.state.replaying(S)
    conn.a2c(upd({"sessionUpdate": "replay_complete"}))
    assert not conn.state.replaying(S)
    # Updates after the marker and before the answer are live: the marker states the end.
    assert conn.a2c(chunk()) is NO_EVENTS
    assert kinds(conn.a2c(res(4, {}))) == ["ResponsePaired", "SessionRestored"]


def test_without_replay_complete_the_answer_closes_the_window_and_says_so() -> None:
    conn = Conn()
    start(conn, 2)
    conn.c2a(req(3, "session/resume", {"sessionId": S, "cwd": "/w", "replayFrom": {"type": "start"}}))
    closed = conn.a2c(res(3, {}))[1]
    assert isinstance(closed, ev.ReplayWindowClosed) and closed.by == "response"
    # A marker outside any window changes nothing.
    assert conn.a2c(upd({"sessionUpdate": "replay_complete"})) is NO_EVENTS or not conn.state.replaying()


def test_v2_work_the_agent_starts_without_a_prompt_is_a_turn() -> None:
    conn = Conn()
    start(conn, 2)
    _reported, started = conn.a2c(state("running"))
    assert isinstance(started, ev.TurnStarted)
    assert (started.by, started.prompt_seq, started.index, started.rpc_id) == ("agent", 5, 1, None)
    (first,) = conn.a2c(chunk())
    assert isinstance(first, ev.TurnOutput) and first.prompt_seq == 5
    # unknown: activity cannot be determined now; the work is not over.
    assert kinds(conn.a2c(state("unknown"))) == ["StateReported"]
    assert conn.state.open_turn(S) == 5
    ended = conn.a2c(state("idle", "end_turn"))[-1]
    assert isinstance(ended, ev.TurnEnded) and (ended.prompt_seq, ended.by, ended.status) == (5, "idle", "ended")
    # A prompt's running is the prompt's, not a turn of the agent's own.
    conn.c2a(req(2, "session/prompt", {"sessionId": S, "prompt": []}))
    assert kinds(conn.a2c(state("running"))) == ["StateReported"]
    # v1 knows no agent-initiated work.
    v1 = Conn()
    start(v1, 1)
    assert not v1.of(ev.TurnStarted) and not any(isinstance(e, ev.TurnStarted) for e in v1.a2c(state("running")))
