"""The tracker: pairing, negotiation, sessions, replay windows, turns, unknowns — frames in, facts out.

Frames are built with ``wire.decode`` exactly as the recorder builds them; nothing here spawns.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from acp_proxy.protocol import wire
from acp_proxy.protocol.frames import FrameRecord
from acp_proxy.protocol.tracker import NOTE_NOTICE_REPLAYED, NOTE_UNKNOWN_ID, Change, Tracker
from acp_proxy.record.writer import FactsApplier
from acp_proxy.store import database as store
from tests.conftest import TRAFFIC

MS = 1_000_000
SESSION = "sess_abc123def456"


class Conn:
    """One connection's frames, fed to a tracker in order (seq from 1, 1 ms apart by default)."""

    def __init__(self, run_id: int = 1, tracker: Tracker | None = None) -> None:
        self.run_id = run_id
        self.tracker = tracker or Tracker(run_id)
        self.seq = 0
        self.ts = 0
        self.records: list[FrameRecord] = []
        self.log: list[Change] = []

    def send(self, direction: str, message: Any, *, after_ms: float = 1) -> FrameRecord:
        line = message if isinstance(message, bytes) else json.dumps(message, separators=(",", ":")).encode()
        rec = self._record(direction, line, wire.decode(line), after_ms)
        self.tracker.observe(rec)
        return rec

    def c2a(self, message: Any, **kw: Any) -> FrameRecord:
        return self.send("c2a", message, **kw)

    def a2c(self, message: Any, **kw: Any) -> FrameRecord:
        return self.send("a2c", message, **kw)

    def batch(self, direction: str, messages: list[Any]) -> list[FrameRecord]:
        """A batch line, then each element as its own frame, as the recorder hands them over."""
        line = json.dumps(messages, separators=(",", ":")).encode()
        frame = wire.decode(line)
        head = self._record(direction, line, frame, 1)
        self.tracker.observe(head)
        out = []
        for index, (raw, element) in enumerate(frame.elements or []):
            rec = self._record(direction, raw, element, 0)
            rec.batch_seq, rec.batch_index = head.seq, index
            self.tracker.observe(rec)
            out.append(rec)
        return out

    def _record(self, direction: str, line: bytes, frame: wire.Frame, after_ms: float) -> FrameRecord:
        self.seq += 1
        self.ts += int(after_ms * MS)
        rec = FrameRecord(self.run_id, self.seq, self.ts, direction, line, frame)
        self.records.append(rec)
        return rec

    def drain(self) -> list[Change]:
        changes = self.tracker.drain()
        self.log.extend(changes)
        return changes

    def rows(self, table: str) -> dict[tuple, dict[str, Any]]:
        """Every Change so far folded per key: the row each key ends up with."""
        self.drain()
        out: dict[tuple, dict[str, Any]] = {}
        for change in self.log:
            if change.table == table:
                out.setdefault(tuple(sorted(change.key.items())), {}).update(change.values)
        return out

    def run_row(self) -> dict[str, Any]:
        return next(iter(self.rows("runs").values()), {})

    def sessions(self) -> list[dict[str, Any]]:
        return list(self.rows("sessions").values())

    def turns(self) -> list[dict[str, Any]]:
        return list(self.rows("turns").values())


def request(rpc_id: Any, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rpc_id, "method": method, "params": params or {}}


def notification(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": method, "params": params}


def result(rpc_id: Any, value: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rpc_id, "result": value}


def error(rpc_id: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rpc_id, "error": {"code": code, "message": message}}


def update(body: dict[str, Any], session: str = SESSION) -> dict[str, Any]:
    return notification("session/update", {"sessionId": session, "update": body})


def text(value: str) -> dict[str, str]:
    return {"type": "text", "text": value}


def replay_fixture(path: Path, run_id: int = 1) -> Conn:
    conn = Conn(run_id)
    for line in path.read_text().splitlines():
        entry = json.loads(line)
        frame = entry["frame"].encode()
        conn.seq += 1
        rec = FrameRecord(run_id, conn.seq, int(entry["t"] * 1e9), entry["dir"], frame, wire.decode(frame))
        conn.records.append(rec)
        conn.tracker.observe(rec)
    return conn


def v1_session(conn: Conn, session: str = SESSION) -> None:
    conn.c2a(request(0, "initialize", {"protocolVersion": 1, "clientCapabilities": {}}))
    conn.a2c(result(0, {"protocolVersion": 1, "agentCapabilities": {"loadSession": True}}))
    conn.c2a(request(1, "session/new", {"cwd": "/home/user/project", "mcpServers": []}))
    conn.a2c(result(1, {"sessionId": session}))


V2_INITIALIZE = request(
    0,
    "initialize",
    {
        "protocolVersion": 2,
        "capabilities": {"auth": {"terminal": {}}},
        "info": {"name": "my-client", "title": "My Client", "version": "1.0.0"},
    },
)
V2_INITIALIZED = result(
    0,
    {
        "protocolVersion": 2,
        "capabilities": {"session": {"prompt": {"image": {}}, "mcp": {"stdio": {}, "http": {}}}},
        "info": {"name": "my-agent", "title": "My Agent", "version": "1.0.0"},
        "authMethods": [],
    },
)


def v2_session(conn: Conn) -> None:
    conn.c2a(V2_INITIALIZE)
    conn.a2c(V2_INITIALIZED)
    conn.c2a(request(1, "session/new", {"cwd": "/home/user/project", "mcpServers": []}))
    conn.a2c(result(1, {"sessionId": SESSION}))


# -- pairing ---------------------------------------------------------------------------------------


def test_response_gets_method_request_seq_and_latency() -> None:
    conn = Conn()
    asked = conn.c2a(request(1, "session/new", {"cwd": "/p"}))
    answer = conn.a2c(result(1, {"sessionId": "s1"}), after_ms=7)
    assert (answer.method, answer.request_seq, answer.latency_ns) == ("session/new", asked.seq, 7 * MS)
    assert answer.note is None and asked.unanswered is None


def test_ids_are_per_direction_an_agent_request_may_reuse_a_pending_client_id() -> None:
    conn = Conn()
    v1_session(conn)
    prompt = conn.c2a(request(0, "session/prompt", {"sessionId": SESSION, "prompt": [text("hi")]}))
    permission = conn.a2c(request(0, "session/request_permission", {"sessionId": SESSION, "options": []}))
    granted = conn.c2a(result(0, {"outcome": {"outcome": "selected", "optionId": "allow"}}), after_ms=3)
    ended = conn.a2c(result(0, {"stopReason": "end_turn"}), after_ms=2)
    assert (granted.method, granted.request_seq, granted.latency_ns) == (
        "session/request_permission",
        permission.seq,
        3 * MS,
    )
    assert (ended.method, ended.request_seq, ended.latency_ns) == ("session/prompt", prompt.seq, 6 * MS)
    conn.tracker.finish(conn.ts)
    assert not conn.rows("frames")
    assert conn.run_row()["unanswered_requests"] == 0


def test_numeric_and_string_ids_do_not_pair() -> None:
    conn = Conn()
    conn.c2a(request(1, "session/list"))
    stray = conn.a2c(result("1", {"sessions": []}))
    assert stray.request_seq is None and stray.note == NOTE_UNKNOWN_ID


def test_error_response_keeps_code_and_message() -> None:
    conn = Conn()
    asked = conn.c2a(request(5, "authenticate", {"methodId": "x"}))
    failed = conn.a2c(error(5, -32000, "Authentication required"))
    assert (failed.kind, failed.method, failed.request_seq) == ("error", "authenticate", asked.seq)
    assert (failed.error_code, failed.error_message) == (-32000, "Authentication required")


def test_cancel_request_names_the_request_it_cancels() -> None:
    conn = Conn()
    v2_session(conn)
    asked = conn.a2c(request(2, "session/request_permission", {"sessionId": SESSION, "options": []}))
    cancel = conn.a2c(notification("$/cancel_request", {"requestId": 2}))
    assert cancel.note == f"cancels request seq {asked.seq} (session/request_permission)"
    answered = conn.c2a(error(2, -32800, "Cancelled"))
    assert answered.request_seq == asked.seq and answered.error_code == -32800
    assert f"cancelled by $/cancel_request seq {cancel.seq}" in (answered.note or "")
    # The client's requests are not the agent's to cancel: ids are per direction.
    conn.c2a(request(3, "session/prompt", {"sessionId": SESSION, "prompt": []}))
    wrong_way = conn.a2c(notification("$/cancel_request", {"requestId": 3}))
    assert wrong_way.note == "cancels no pending request (id 3)"


def test_response_to_unknown_id_is_kept_and_flagged() -> None:
    conn = Conn()
    stray = conn.a2c(result(42, {}))
    assert (stray.kind, stray.method, stray.request_seq) == ("response", None, None)
    assert stray.note == NOTE_UNKNOWN_ID
    assert conn.run_row()["unpaired_responses"] == 1
    null = conn.a2c({"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error"}})
    assert null.note == "response without a request id" and null.error_code == -32700
    assert conn.run_row()["unpaired_responses"] == 2


def test_requests_pending_at_the_end_are_marked_unanswered() -> None:
    conn = Conn(run_id=9)
    v1_session(conn)
    prompt = conn.c2a(request(2, "session/prompt", {"sessionId": SESSION, "prompt": []}))
    conn.a2c(update({"sessionUpdate": "agent_message_chunk", "content": text("wor")}))
    read = conn.a2c(request(0, "fs/read_text_file", {"sessionId": SESSION, "path": "/a"}))
    conn.drain()
    conn.tracker.finish(conn.ts + MS)
    frames = conn.rows("frames")
    assert list(frames) == [(("run_id", 9), ("seq", prompt.seq)), (("run_id", 9), ("seq", read.seq))]
    assert all(values == {"unanswered": 1} for values in frames.values())
    assert conn.run_row()["unanswered_requests"] == 2
    (turn,) = conn.turns()
    assert turn["status"] == "unfinished" and turn["end_ns"] is None and turn["chunks"] == 1


def test_reused_pending_id_is_noted_and_answers_come_in_order() -> None:
    conn = Conn()
    first = conn.c2a(request(7, "session/list"))
    second = conn.c2a(request(7, "session/list"))
    assert second.note == f"id reused while request seq {first.seq} is pending"
    assert conn.a2c(result(7, {"sessions": []})).request_seq == first.seq
    assert conn.a2c(result(7, {"sessions": []})).request_seq == second.seq


def test_cut_response_still_answers_its_request() -> None:
    conn = Conn()
    asked = conn.a2c(request(3, "fs/read_text_file", {"path": "/big"}))
    prefix = b'{"jsonrpc":"2.0","id":3,"result":{"content":"aaaaaaaa'
    rec = FrameRecord(1, 99, conn.ts + MS, "c2a", prefix, wire.invalid("recorded prefix only"))
    rec.cut = 1
    conn.tracker.observe(rec)
    assert (rec.method, rec.request_seq) == ("fs/read_text_file", asked.seq)
    conn.tracker.finish(conn.ts + 2 * MS)
    assert not conn.rows("frames")


def test_unanswered_request_says_when_a_cut_line_may_hold_its_answer() -> None:
    conn = Conn()
    asked = conn.a2c(request(3, "fs/read_text_file", {"path": "/big"}))
    rec = FrameRecord(1, 99, conn.ts + MS, "c2a", b'{"result":{"content":"aaa', wire.invalid("recorded prefix only"))
    rec.cut = 1
    conn.tracker.observe(rec)
    conn.tracker.finish(conn.ts + 2 * MS)
    (values,) = conn.rows("frames").values()
    assert values["unanswered"] == 1 and "recorded only in part" in values["note"]
    assert asked.seq < rec.seq


# -- negotiation -----------------------------------------------------------------------------------


def test_v1_negotiation_from_recorded_traffic() -> None:
    conn = replay_fixture(TRAFFIC / "py-client_py-agent.jsonl")
    run = conn.run_row()
    assert (run["protocol_version"], run["client_protocol_version"], run["agent_protocol_version"]) == (
        1,
        1,
        1,
    )
    assert (run["client_name"], run["client_version"]) == ("example-client", "0.1.0")
    assert (run["agent_name"], run["agent_version"]) == ("example-agent", "0.1.0")
    assert json.loads(run["client_info"])["title"] == "Example Client"
    assert json.loads(run["agent_capabilities"]) == {}
    assert conn.tracker.version == 1
    caps = replay_fixture(TRAFFIC / "ts-client_ts-agent.jsonl").run_row()
    assert json.loads(caps["client_capabilities"]) == {"fs": {"readTextFile": True, "writeTextFile": True}}
    assert json.loads(caps["agent_capabilities"]) == {"loadSession": False}
    assert "client_name" not in caps  # the TypeScript example client sends no clientInfo


def test_v2_negotiation_uses_info_and_capabilities() -> None:
    conn = Conn()
    conn.c2a(V2_INITIALIZE)
    conn.a2c(V2_INITIALIZED)
    run = conn.run_row()
    assert (run["protocol_version"], run["client_protocol_version"], run["agent_protocol_version"]) == (
        2,
        2,
        2,
    )
    assert (run["client_name"], run["client_version"], run["agent_name"]) == (
        "my-client",
        "1.0.0",
        "my-agent",
    )
    assert json.loads(run["client_capabilities"]) == {"auth": {"terminal": {}}}
    assert json.loads(run["agent_capabilities"])["session"]["mcp"] == {"stdio": {}, "http": {}}
    assert run["auth_methods"] == "[]"
    assert json.loads(run["agent_info"])["title"] == "My Agent"
    assert conn.tracker.version == 2


def test_version_asked_and_answered_differ() -> None:
    conn = Conn()
    conn.c2a(request(0, "initialize", {"protocolVersion": 2, "info": {"name": "c", "version": "1"}}))
    conn.a2c(result(0, {"protocolVersion": 1, "agentInfo": {"name": "old-agent", "version": "0.9"}}))
    run = conn.run_row()
    assert (run["client_protocol_version"], run["agent_protocol_version"], run["protocol_version"]) == (
        2,
        1,
        1,
    )
    assert run["agent_name"] == "old-agent"
    # v1 vocabulary now: a v2-only variant is not part of it.
    assert conn.a2c(update({"sessionUpdate": "state_update", "state": "idle"})).unknown == "future"


def test_unknowns_are_judged_by_the_union_before_initialize() -> None:
    conn = Conn()
    assert conn.a2c(update({"sessionUpdate": "state_update", "state": "idle"})).unknown is None
    assert conn.a2c(update({"sessionUpdate": "tool_call", "toolCallId": "c"})).unknown is None


# -- sessions and replay windows ----------------------------------------------------------------


def test_session_new_records_id_cwd_and_run_link() -> None:
    conn = Conn(run_id=4)
    v1_session(conn)
    answer = conn.records[3]
    assert answer.session_id == SESSION  # the response announcing it belongs to the session
    (session,) = conn.sessions()
    assert session["session_id"] == SESSION and session["cwd"] == "/home/user/project"
    assert (session["created_by"], session["created_run_id"]) == ("session/new", 4)
    assert session["first_seen_ns"] == answer.ts_ns
    (link,) = conn.rows("session_runs").items()
    assert link == ((("run_id", 4), ("session_key", 1)), {"how": "session/new", "first_seq": answer.seq})


def test_v1_load_replay_window_flags_history_and_notices() -> None:
    conn = Conn(run_id=2)
    conn.c2a(request(0, "initialize", {"protocolVersion": 1}))
    conn.a2c(result(0, {"protocolVersion": 1, "agentCapabilities": {"loadSession": True}}))
    tracker = conn.tracker
    assert not tracker.in_replay_window(SESSION) and not tracker.in_replay_window(None)
    load = conn.c2a(request(1, "session/load", {"sessionId": SESSION, "cwd": "/w", "mcpServers": []}))
    assert tracker.in_replay_window(SESSION) and tracker.in_replay_window(None)
    assert not tracker.in_replay_window("other")
    history = conn.a2c(update({"sessionUpdate": "user_message_chunk", "content": text("hello")}))
    notice_line = update({"sessionUpdate": "notice", "severity": "info", "title": "Rate limit at 80%"})
    replayed_notice = conn.a2c(notice_line)
    chunk = update({"sessionUpdate": "agent_message_chunk", "content": text("hi")})
    conn.a2c(chunk)
    done = conn.a2c(result(1, None))
    assert (history.replay, replayed_notice.replay) == (1, 1)
    assert replayed_notice.note == NOTE_NOTICE_REPLAYED and history.note is None
    assert done.method == "session/load" and done.replay == 0 and done.request_seq == load.seq
    assert not tracker.in_replay_window(SESSION)
    live_notice = conn.a2c(notice_line)
    assert live_notice.replay == 0 and live_notice.note is None
    (session,) = conn.sessions()
    assert (session["created_by"], session["cwd"]) == ("session/load", "/w")
    assert conn.rows("session_runs")[(("run_id", 2), ("session_key", 1))]["how"] == "session/load"
    # Replayed history is not this run's turn activity.
    assert conn.turns() == []


def test_notice_note_adds_to_the_gates_strip_note() -> None:
    conn = Conn()
    conn.c2a(request(1, "session/load", {"sessionId": SESSION, "cwd": "/w", "mcpServers": []}))
    line = json.dumps(update({"sessionUpdate": "notice", "severity": "info", "title": "t"})).encode()
    rec = FrameRecord(1, 2, MS, "a2c", line, wire.decode(line))
    rec.forwarded, rec.note = 0, f"stripped: {NOTE_NOTICE_REPLAYED}"
    conn.tracker.observe(rec)
    assert rec.note == "stripped: notice inside replay window" and rec.replay == 1


def test_failed_load_closes_its_window() -> None:
    conn = Conn()
    conn.c2a(request(1, "session/load", {"sessionId": SESSION, "cwd": "/w", "mcpServers": []}))
    conn.a2c(error(1, -32002, "Resource not found"))
    assert not conn.tracker.in_replay_window(SESSION)


def test_v2_resume_replays_only_with_replay_from() -> None:
    conn = Conn()
    v2_session(conn)
    conn.c2a(request(2, "session/resume", {"sessionId": SESSION, "cwd": "/home/user/project"}))
    assert not conn.tracker.in_replay_window(SESSION)
    assert conn.a2c(update({"sessionUpdate": "state_update", "state": "idle"})).replay == 0
    conn.a2c(result(2, {}))
    conn.c2a(request(3, "session/resume", {"sessionId": SESSION, "cwd": "/home/user/project", "replayFrom": None}))
    assert not conn.tracker.in_replay_window(SESSION)
    conn.a2c(result(3, {}))
    resume = conn.c2a(
        request(
            4,
            "session/resume",
            {"sessionId": SESSION, "cwd": "/home/user/project", "replayFrom": {"type": "start"}},
        )
    )
    assert conn.tracker.in_replay_window(SESSION)
    user = conn.a2c(update({"sessionUpdate": "user_message", "messageId": "msg_user_8f7a1", "content": [text("Q")]}))
    notice = conn.a2c(update({"sessionUpdate": "notice", "severity": "warning", "title": "MCP server unavailable"}))
    agent = conn.a2c(update({"sessionUpdate": "agent_message", "messageId": "msg_agent_c42b9", "content": [text("A")]}))
    answered = conn.a2c(result(4, {}))
    assert (user.replay, notice.replay, agent.replay, answered.replay) == (1, 1, 1, 0)
    assert notice.note == NOTE_NOTICE_REPLAYED and (user.item_id, agent.item_id) == (
        "msg_user_8f7a1",
        "msg_agent_c42b9",
    )
    assert answered.request_seq == resume.seq and not conn.tracker.in_replay_window(SESSION)


def test_resume_of_a_session_from_an_earlier_run_links_it() -> None:
    conn = Conn(run_id=5)
    conn.c2a(V2_INITIALIZE)
    conn.a2c(V2_INITIALIZED)
    conn.c2a(request(1, "session/resume", {"sessionId": "old", "cwd": "/w", "replayFrom": {"type": "start"}}))
    conn.a2c(result(1, {}))
    (session,) = conn.sessions()
    assert (session["session_id"], session["created_by"], session["cwd"]) == ("old", "session/resume", "/w")
    assert conn.rows("session_runs")[(("run_id", 5), ("session_key", 1))]["how"] == "session/resume"


def test_fork_close_delete_and_titles() -> None:
    conn = Conn()
    v2_session(conn)
    conn.a2c(update({"sessionUpdate": "session_info_update", "title": "Fix the parser"}))
    conn.c2a(request(2, "session/fork", {"sessionId": SESSION, "cwd": "/fork"}))
    forked = conn.a2c(result(2, {"sessionId": "sess_fork"}))
    assert forked.session_id == "sess_fork"
    conn.c2a(request(3, "session/set_title", {"sessionId": "sess_fork", "title": "A fork"}))
    conn.a2c(result(3, {}))
    conn.c2a(request(4, "session/close", {"sessionId": SESSION}))
    closed = conn.a2c(result(4, {}))
    conn.c2a(request(5, "session/delete", {"sessionId": "sess_fork"}))
    deleted = conn.a2c(result(5, {}))
    conn.c2a(request(6, "session/delete", {"sessionId": "gone"}))
    conn.a2c(error(6, -32002, "Resource not found"))
    sessions = {s["session_id"]: s for s in conn.sessions()}
    parent, fork = sessions[SESSION], sessions["sess_fork"]
    assert parent["title"] == "Fix the parser" and parent["closed_ns"] == closed.ts_ns
    assert (fork["created_by"], fork["parent_session_id"], fork["cwd"]) == ("session/fork", SESSION, "/fork")
    assert fork["title"] == "A fork" and fork["deleted_ns"] == deleted.ts_ns
    assert "deleted_ns" not in sessions["gone"] and sessions["gone"]["created_by"] == "seen"
    conn.a2c(update({"sessionUpdate": "session_info_update", "title": None}))
    conn.a2c(update({"sessionUpdate": "session_info_update", "updatedAt": "2026-01-01T00:00:00Z"}))
    assert {s["session_id"]: s for s in conn.sessions()}[SESSION]["title"] is None


def test_session_new_reusing_an_id_is_a_new_session() -> None:
    conn = Conn()
    v1_session(conn)
    conn.c2a(request(2, "session/new", {"cwd": "/again"}))
    conn.a2c(result(2, {"sessionId": SESSION}))
    rows = conn.rows("sessions")
    assert len(rows) == 2 and [r["cwd"] for r in rows.values()] == ["/home/user/project", "/again"]


# -- turns -----------------------------------------------------------------------------------------


def test_v1_turn_from_recorded_traffic() -> None:
    conn = replay_fixture(TRAFFIC / "ts-client_ts-agent.jsonl")
    (turn,) = conn.turns()
    prompt = conn.records[4]
    first_output = conn.records[5]
    end = conn.records[-1]
    assert (turn["prompt_seq"], turn["start_ns"], turn["end_seq"], turn["end_ns"]) == (
        prompt.seq,
        prompt.ts_ns,
        end.seq,
        end.ts_ns,
    )
    assert turn["first_output_ns"] == first_output.ts_ns and turn["accepted_ns"] is None
    assert (turn["stop_reason"], turn["status"], turn["protocol_version"]) == ("end_turn", "ended", 1)
    assert (turn["chunks"], turn["tool_calls"], turn["permission_requests"]) == (3, 2, 1)
    assert turn["turn_index"] == 1 and turn["session_id"] == prompt.session_id


def test_v1_turn_ending_in_an_error_response() -> None:
    conn = replay_fixture(TRAFFIC / "py-client-no-permission_ts-agent.jsonl")
    (turn,) = conn.turns()
    assert (turn["status"], turn["stop_reason"]) == ("error", None)
    assert conn.records[-1].error_code == -32601 and conn.records[-1].method == "session/prompt"


def test_v1_turns_are_numbered_within_their_session() -> None:
    conn = replay_fixture(TRAFFIC / "py-client_py-agent.jsonl")
    assert [(t["turn_index"], t["stop_reason"], t["chunks"]) for t in conn.turns()] == [
        (1, "end_turn", 2),
        (2, "end_turn", 2),
    ]


def test_v1_cancelled_turn() -> None:
    conn = Conn()
    v1_session(conn)
    conn.c2a(request(2, "session/prompt", {"sessionId": SESSION, "prompt": [text("go")]}))
    conn.a2c(update({"sessionUpdate": "agent_thought_chunk", "content": text("hmm")}))
    conn.c2a(notification("session/cancel", {"sessionId": SESSION}))
    conn.a2c(update({"sessionUpdate": "tool_call_update", "toolCallId": "c1", "status": "cancelled"}))
    end = conn.a2c(result(2, {"stopReason": "cancelled"}))
    (turn,) = conn.turns()
    assert (turn["stop_reason"], turn["status"], turn["end_seq"]) == ("cancelled", "ended", end.seq)
    assert (turn["chunks"], turn["tool_calls"]) == (1, 1)


def v2_first_turn(conn: Conn) -> dict[str, FrameRecord]:
    """The seed document's walkthrough (prompt-lifecycle.md), one frame per step."""
    marks: dict[str, FrameRecord] = {}
    marks["prompt"] = conn.c2a(
        request(2, "session/prompt", {"sessionId": SESSION, "prompt": [text("Can you analyze this code?")]})
    )
    marks["accepted"] = conn.a2c(result(2, {"messageId": "msg_user_8f7a1"}))
    conn.a2c(update({"sessionUpdate": "user_message", "messageId": "msg_user_8f7a1", "content": [text("Can you?")]}))
    conn.a2c(update({"sessionUpdate": "state_update", "state": "running"}))
    # The plan is the model's first output (protocol.output: "This may include the Agent's plan").
    marks["output"] = conn.a2c(
        update(
            {
                "sessionUpdate": "plan_update",
                "plan": {"type": "items", "planId": "plan-1", "entries": []},
            }
        )
    )
    conn.a2c(update({"sessionUpdate": "agent_message", "messageId": "msg_agent_c42b9", "content": [text("A")]}))
    conn.a2c(update({"sessionUpdate": "agent_message_chunk", "messageId": "msg_agent_c42b9", "content": text("B")}))
    conn.a2c(update({"sessionUpdate": "tool_call_update", "toolCallId": "call_001", "status": "pending"}))
    marks["permission"] = conn.a2c(
        request(0, "session/request_permission", {"sessionId": SESSION, "toolCall": {"toolCallId": "call_001"}})
    )
    conn.a2c(update({"sessionUpdate": "state_update", "state": "requires_action"}))
    conn.c2a(result(0, {"outcome": {"outcome": "selected", "optionId": "allow-once"}}))
    conn.a2c(update({"sessionUpdate": "state_update", "state": "running"}))
    conn.a2c(update({"sessionUpdate": "tool_call_update", "toolCallId": "call_001", "status": "in_progress"}))
    conn.a2c(
        update(
            {
                "sessionUpdate": "tool_call_content_chunk",
                "toolCallId": "call_001",
                "content": {"type": "content", "content": text("Checked syntax...")},
            }
        )
    )
    conn.a2c(update({"sessionUpdate": "tool_call_update", "toolCallId": "call_001", "status": "completed"}))
    conn.a2c(update({"sessionUpdate": "usage_update", "used": 53000, "size": 200000}))
    conn.a2c(update({"sessionUpdate": "compaction_update", "compactionId": "cmp_001", "status": "in_progress"}))
    conn.a2c(update({"sessionUpdate": "compaction_summary_chunk", "compactionId": "cmp_001", "content": text("##")}))
    conn.a2c(update({"sessionUpdate": "compaction_update", "compactionId": "cmp_001", "status": "completed"}))
    marks["notice"] = conn.a2c(update({"sessionUpdate": "notice", "severity": "info", "title": "Rate limit at 80%"}))
    marks["idle"] = conn.a2c(update({"sessionUpdate": "state_update", "state": "idle", "stopReason": "end_turn"}))
    return marks


def test_v2_turn_acceptance_work_and_idle() -> None:
    conn = Conn()
    v2_session(conn)
    marks = v2_first_turn(conn)
    (turn,) = conn.turns()
    assert turn["protocol_version"] == 2 and turn["prompt_seq"] == marks["prompt"].seq
    assert (turn["accepted_ns"], turn["message_id"]) == (marks["accepted"].ts_ns, "msg_user_8f7a1")
    assert turn["first_output_ns"] == marks["output"].ts_ns
    assert (turn["end_ns"], turn["end_seq"]) == (marks["idle"].ts_ns, marks["idle"].seq)
    assert (turn["stop_reason"], turn["status"]) == ("end_turn", "ended")
    # agent_message_chunk, tool_call_content_chunk, compaction_summary_chunk
    assert (turn["chunks"], turn["tool_calls"], turn["permission_requests"]) == (3, 1, 1)
    assert marks["notice"].replay == 0 and marks["notice"].note is None
    assert all(rec.unknown is None for rec in conn.records)
    assert marks["accepted"].method == "session/prompt" and marks["accepted"].session_id == SESSION


def test_v2_cancelled_turn_then_resume_replay_leaves_turns_alone() -> None:
    conn = Conn()
    v2_session(conn)
    v2_first_turn(conn)
    conn.c2a(request(3, "session/prompt", {"sessionId": SESSION, "prompt": [text("Now fix them")]}))
    conn.a2c(result(3, {"messageId": "msg_user_2"}))
    conn.a2c(
        update(
            {
                "sessionUpdate": "user_message_chunk",
                "messageId": "msg_user_2",
                "content": text("Now fix them"),
            }
        )
    )
    conn.a2c(update({"sessionUpdate": "state_update", "state": "running"}))
    conn.a2c(update({"sessionUpdate": "agent_message_chunk", "messageId": "msg_agent_2", "content": text("Fixing")}))
    conn.c2a(notification("session/cancel", {"sessionId": SESSION}))
    conn.a2c(update({"sessionUpdate": "tool_call_update", "toolCallId": "call_002", "status": "cancelled"}))
    idle = conn.a2c(update({"sessionUpdate": "state_update", "state": "idle", "stopReason": "cancelled"}))
    conn.c2a(request(4, "session/resume", {"sessionId": SESSION, "cwd": "/w", "replayFrom": {"type": "start"}}))
    conn.a2c(update({"sessionUpdate": "user_message", "messageId": "msg_user_8f7a1", "content": [text("Q")]}))
    conn.a2c(update({"sessionUpdate": "agent_message_chunk", "messageId": "msg_agent_c42b9", "content": text("C")}))
    conn.a2c(update({"sessionUpdate": "state_update", "state": "idle", "stopReason": "end_turn"}))
    conn.a2c(result(4, {}))
    first, second = conn.turns()
    assert (first["stop_reason"], first["chunks"]) == ("end_turn", 3)
    assert (second["turn_index"], second["message_id"], second["stop_reason"]) == (
        2,
        "msg_user_2",
        "cancelled",
    )
    assert (second["end_seq"], second["status"], second["chunks"], second["tool_calls"]) == (
        idle.seq,
        "ended",
        1,
        1,
    )


def test_v2_rejected_prompt_is_an_error_turn() -> None:
    conn = Conn()
    v2_session(conn)
    conn.c2a(request(2, "session/prompt", {"sessionId": SESSION, "prompt": []}))
    conn.a2c(error(2, -32602, "Invalid params"))
    (turn,) = conn.turns()
    assert (turn["status"], turn["accepted_ns"], turn["stop_reason"]) == ("error", None, None)


def test_v2_idle_ends_only_accepted_or_worked_on_prompts() -> None:
    conn = Conn()
    v2_session(conn)
    conn.c2a(request(2, "session/prompt", {"sessionId": SESSION, "prompt": []}))
    # An idle snapshot for earlier work, before this prompt was accepted or worked on.
    conn.a2c(update({"sessionUpdate": "state_update", "state": "idle", "stopReason": "end_turn"}))
    assert conn.turns()[0]["status"] == "running"
    conn.a2c(update({"sessionUpdate": "state_update", "state": "running"}))
    conn.a2c(update({"sessionUpdate": "state_update", "state": "idle", "stopReason": "max_tokens"}))
    # Acceptance may come after the updates; it still marks the (ended) turn.
    conn.a2c(result(2, {"messageId": "m1"}))
    (turn,) = conn.turns()
    assert (turn["status"], turn["stop_reason"], turn["message_id"]) == ("ended", "max_tokens", "m1")
    # A repeated idle snapshot is not a new completion.
    conn.a2c(update({"sessionUpdate": "state_update", "state": "idle", "stopReason": "max_tokens"}))
    assert conn.turns()[0]["end_seq"] == turn["end_seq"]


def test_interleaved_sessions_keep_their_own_turns() -> None:
    conn = Conn()
    v1_session(conn, "s-a")
    conn.c2a(request(2, "session/new", {"cwd": "/b"}))
    conn.a2c(result(2, {"sessionId": "s-b"}))
    conn.c2a(request(3, "session/prompt", {"sessionId": "s-a", "prompt": []}))
    conn.c2a(request(4, "session/prompt", {"sessionId": "s-b", "prompt": []}))
    for session in ("s-a", "s-b", "s-b", "s-a", "s-b"):
        conn.a2c(update({"sessionUpdate": "agent_message_chunk", "content": text(".")}, session=session))
    conn.a2c(result(4, {"stopReason": "end_turn"}))
    conn.a2c(update({"sessionUpdate": "agent_message_chunk", "content": text(".")}, session="s-b"))
    conn.a2c(result(3, {"stopReason": "max_tokens"}))
    by_session = {t["session_id"]: t for t in conn.turns()}
    assert (by_session["s-a"]["chunks"], by_session["s-a"]["stop_reason"]) == (2, "max_tokens")
    assert (by_session["s-b"]["chunks"], by_session["s-b"]["stop_reason"]) == (3, "end_turn")
    assert by_session["s-a"]["session_key"] != by_session["s-b"]["session_key"]


# -- batches and unknowns --------------------------------------------------------------------------


def test_batch_elements_are_paired_like_frames() -> None:
    conn = Conn()
    asks = conn.batch(
        "c2a",
        [
            request(1, "session/new", {"cwd": "/a"}),
            request(2, "_vendor/ping"),
            notification("_vendor/log", {}),
        ],
    )
    assert [(r.kind, r.batch_index, r.batch_seq) for r in asks] == [
        ("request", 0, 1),
        ("request", 1, 1),
        ("notification", 2, 1),
    ]
    answers = conn.batch("a2c", [result(2, {}), result(1, {"sessionId": "s-batch"})])
    assert [(a.method, a.request_seq) for a in answers] == [
        ("_vendor/ping", asks[1].seq),
        ("session/new", asks[0].seq),
    ]
    assert answers[1].session_id == "s-batch" and conn.sessions()[0]["session_id"] == "s-batch"
    assert (asks[1].unknown, asks[2].unknown, answers[0].unknown) == ("extension", "extension", "extension")
    conn.tracker.finish(conn.ts)
    assert not conn.rows("frames")


def test_unknown_update_variants_and_methods_are_classed() -> None:
    conn = Conn()
    v2_session(conn)
    vendor = conn.a2c(update({"sessionUpdate": "_vendor_progress", "percent": 40}))
    future = conn.a2c(update({"sessionUpdate": "future_thing", "x": 1}))
    known = conn.a2c(update({"sessionUpdate": "agent_message_chunk", "messageId": "m", "content": text("x")}))
    assert (vendor.unknown, future.unknown, known.unknown) == ("extension", "future", None)
    assert conn.c2a(request(9, "future/method")).unknown == "future"
    assert conn.a2c(result(9, {})).unknown == "future"
    assert conn.c2a(notification("_zed.dev/hello", {})).unknown == "extension"
    assert conn.c2a(request(10, "session/list")).unknown is None
    assert conn.a2c(notification("$/cancel_request", {"requestId": 99})).unknown is None


def test_frames_with_odd_payloads_do_not_break_the_tracker() -> None:
    conn = Conn()
    conn.c2a(request(0, "initialize", {"protocolVersion": "one", "clientInfo": "not an object"}))
    conn.a2c(result(0, ["not", "an", "object"]))
    conn.c2a(request(1, "session/new", {"cwd": 5}))
    conn.a2c(result(1, {"sessionId": 7}))
    conn.c2a({"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": [1, 2]})
    conn.a2c(b'{"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}')  # truncated: invalid
    conn.a2c(update({"sessionUpdate": "state_update", "state": 5, "stopReason": 3}))
    conn.a2c(update({"sessionUpdate": "session_info_update", "title": 12}))
    conn.a2c(notification("$/cancel_request", {}))
    conn.tracker.finish(conn.ts)
    assert conn.run_row()["unanswered_requests"] == 1  # the prompt: its answer was not JSON
    assert conn.run_row().get("protocol_version") is None


# -- changes ---------------------------------------------------------------------------------------


def test_a_chunk_storm_comes_out_as_one_change_per_row() -> None:
    conn = Conn()
    v1_session(conn)
    conn.c2a(request(2, "session/prompt", {"sessionId": SESSION, "prompt": []}))
    conn.drain()
    for _ in range(1000):
        conn.a2c(update({"sessionUpdate": "agent_message_chunk", "content": text("x")}))
    changes = conn.drain()
    assert [c.table for c in changes] == ["sessions", "turns"]
    assert changes[1].values["chunks"] == 1000
    assert changes[0].values["last_seen_ns"] == conn.ts
    assert conn.tracker.drain() == []


def test_changes_come_in_dependency_order() -> None:
    conn = Conn()
    v1_session(conn)
    conn.c2a(request(2, "session/prompt", {"sessionId": SESSION, "prompt": []}))
    tables = [c.table for c in conn.drain()]
    assert tables.index("sessions") < tables.index("session_runs") < tables.index("turns")


def test_without_changes_the_state_is_still_kept() -> None:
    conn = Conn(tracker=Tracker(0, changes=False))
    v1_session(conn)
    conn.c2a(request(1, "session/load", {"sessionId": SESSION, "cwd": "/w"}))
    assert conn.tracker.in_replay_window(SESSION)
    assert conn.a2c(result(1, None)).method == "session/load"
    assert conn.tracker.drain() == []


@pytest.mark.parametrize("path", sorted(TRAFFIC.glob("*.jsonl")), ids=lambda p: p.stem)
def test_recorded_traffic_every_response_paired_nothing_unanswered(path: Path) -> None:
    conn = replay_fixture(path)
    conn.tracker.finish(conn.records[-1].ts_ns)
    answers = [r for r in conn.records if r.kind in ("response", "error")]
    assert answers
    requests = {r.seq: r for r in conn.records if r.kind == "request"}
    for answer in answers:
        assert answer.request_seq in requests, answer
        asked = requests[answer.request_seq]
        assert (answer.method, answer.dir != asked.dir, answer.rpc_id) == (asked.method, True, asked.rpc_id)
        assert answer.latency_ns is not None and answer.latency_ns >= 0
        assert answer.note is None
    assert not conn.rows("frames")
    run = conn.run_row()
    assert (run["unanswered_requests"], run["unpaired_responses"], run["protocol_version"]) == (0, 0, 1)
    assert all(r.unknown is None and r.replay == 0 for r in conn.records)
    assert all(t["status"] != "running" for t in conn.turns())


# -- applying changes to the store (the recorder's side, as a reference) ---------------------------


def over_the_link(changes: list[Change]) -> list[dict[str, Any]]:
    """Changes as the recorder's writer process receives them: msgpack-encoded dicts."""
    as_dicts = [{"table": c.table, "key": dict(c.key), "values": dict(c.values)} for c in changes]
    return msgspec.msgpack.decode(msgspec.msgpack.encode(as_dicts))


def test_changes_apply_to_the_store_and_a_loaded_session_is_the_same_row(tmp_path: Path) -> None:
    db = store.open_for_writing(tmp_path / "rec.db")
    ids = []
    for run in (1, 2):
        run_id = db["runs"].insert({"started_ns": run, "status": "running"}).last_pk
        ids.append(run_id)
        conn = Conn(run_id)
        applier = FactsApplier(db, run_id)
        if run == 1:
            v1_session(conn)
            conn.a2c(update({"sessionUpdate": "session_info_update", "title": "First title"}))
        else:
            conn.c2a(request(0, "initialize", {"protocolVersion": 1}))
            conn.a2c(result(0, {"protocolVersion": 1}))
            conn.c2a(request(1, "session/load", {"sessionId": SESSION, "cwd": "/moved", "mcpServers": []}))
            conn.a2c(update({"sessionUpdate": "agent_message_chunk", "content": text("old")}))
            conn.a2c(result(1, None))
        conn.c2a(request(2, "session/prompt", {"sessionId": SESSION, "prompt": []}))
        conn.a2c(update({"sessionUpdate": "agent_message_chunk", "content": text("new")}))
        conn.a2c(result(2, {"stopReason": "end_turn"}))
        conn.c2a(request(3, "session/list"))
        conn.tracker.finish(conn.ts)
        with db.conn:
            db["frames"].insert_all(rec.as_dict() for rec in conn.records)
            applier.apply(over_the_link(conn.tracker.drain()))
    (session,) = list(db["sessions"].rows)
    assert session["session_id"] == SESSION and session["title"] == "First title"
    assert (session["created_by"], session["created_run_id"], session["cwd"]) == (
        "session/new",
        ids[0],
        "/moved",
    )
    links = [(r["run_id"], r["how"]) for r in db["session_runs"].rows]
    assert links == [(ids[0], "session/new"), (ids[1], "session/load")]
    turns = list(db.query("select run_id, session_row, stop_reason, chunks from turns order by id"))
    assert [(t["run_id"], t["session_row"], t["chunks"]) for t in turns] == [(ids[0], 1, 1), (ids[1], 1, 1)]
    unanswered = list(db.query("select run_id, method from unanswered order by run_id"))
    assert unanswered == [
        {"run_id": ids[0], "method": "session/list"},
        {"run_id": ids[1], "method": "session/list"},
    ]
    run = db["runs"].get(ids[1])
    assert (run["protocol_version"], run["unanswered_requests"], run["unpaired_responses"]) == (1, 1, 0)
    replayed = list(db.query("select replay from frames where run_id = ? and update_kind is not null", [ids[1]]))
    assert [r["replay"] for r in replayed] == [1, 0]
    pairs = list(db.query("select method, latency_ms from rpc_pairs where run_id = ? order by request_seq", [ids[1]]))
    assert [p["method"] for p in pairs] == ["initialize", "session/load", "session/prompt", "session/list"]
    assert pairs[-1]["latency_ms"] is None


def test_changes_survive_the_link_to_the_writer() -> None:
    # The recorder ships Changes to its writer process as msgpack dicts.
    conn = Conn()
    v2_session(conn)
    v2_first_turn(conn)
    conn.tracker.finish(conn.ts)
    for change in conn.drain():
        message = {"table": change.table, "key": dict(change.key), "values": dict(change.values)}
        assert msgspec.msgpack.decode(msgspec.msgpack.encode(message)) == message
