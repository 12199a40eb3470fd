"""Regressions of issue 25 ("One read model"): cases where the views used to disagree.

Each conversation is recorded as the recorder does (``wire.decode``, the tracker), written to a
real database, and then read back by every door through its public code: ``stats`` (the turns
table and its ``turn_metrics`` view), ``show --json``, ``diff --json``, the inspector's run page
(``web.model``), the MCP tools and the OpenTelemetry spans. Only interfaces that predate the fix
are used, so each test also runs against the code before it (where it fails).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from acp_proxy.cli import transcript
from acp_proxy.mcp.tools import Tools
from acp_proxy.otel import spans
from acp_proxy.protocol import wire
from acp_proxy.protocol.frames import FrameRecord
from acp_proxy.protocol.redact import Redactor
from acp_proxy.protocol.tracker import Tracker
from acp_proxy.read import diff as df
from acp_proxy.read import queries
from acp_proxy.record.writer import FactsApplier
from acp_proxy.store import database as store
from acp_proxy.web import model

RUN = 1
MS = 1_000_000
S = "sess_1"


def req(rid: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}


def res(rid: int, result: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "result": result}


def upd(body: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": S, "update": body}}


def text(value: str) -> dict[str, str]:
    return {"type": "text", "text": value}


def opening(version: int) -> list[tuple[str, Any, bool, int]]:
    return [
        ("c2a", req(0, "initialize", {"protocolVersion": version}), True, 0),
        ("a2c", res(0, {"protocolVersion": version}), True, 0),
        ("c2a", req(1, "session/new", {"cwd": "/w", "mcpServers": []}), True, 0),
        ("a2c", res(1, {"sessionId": S}), True, 0),
    ]


@dataclass
class Doors:
    """What each door says, read from one recorded database."""

    rows: list[dict[str, Any]]
    turns_table: list[dict[str, Any]]
    shown: list[dict[str, Any]]
    page: dict[str, Any]
    mcp_stats: dict[str, Any]
    mcp_show: str
    mcp_diff: dict[str, Any]
    diffed: list[dict[str, Any]]
    spans: list[spans.Span]


def record(tmp: Path, frames: list[tuple[str, Any, bool, int]], *, ended: bool) -> Doors:
    """Record ``frames`` (direction, message, forwarded, ms after the previous frame) into a
    database at ``tmp``; the run is over when ``ended``."""
    tracker = Tracker(RUN)
    records: list[FrameRecord] = []
    changes = []
    ts = 1_000 * MS
    for seq, (direction, message, forwarded, gap) in enumerate(frames, start=1):
        ts += gap * MS
        line = json.dumps(message).encode()
        rec = FrameRecord(RUN, seq, ts, direction, line, wire.decode(line))
        rec.raw = line.decode()
        rec.forwarded = int(forwarded)
        if not forwarded:
            rec.note = "answered with an error by acp-proxy"
        tracker.observe(rec)
        records.append(rec)
        changes.extend(tracker.drain())
    if ended:
        tracker.finish(ts + 1)
        changes.extend(tracker.drain())
    path = tmp / "rec.db"
    db = store.open_for_writing(path)
    with db.conn:
        db["runs"].insert(
            {"started_ns": 1, "status": "ended" if ended else "running", "ended_ns": ts + 1 if ended else None}
        )
        db["frames"].insert_all(rec.as_dict() for rec in records)
        FactsApplier(db, RUN).apply([{"table": c.table, "key": c.key, "values": c.values} for c in changes])
    db.conn.close()
    read = store.open_for_reading(path)
    try:
        rows = queries.rows(read, "select * from frames where run_id = ? order by seq", [RUN])
        turns_table = queries.rows(read, "select * from turns order by prompt_seq")
        page = model.conversation(read, "run", str(RUN), Redactor(), parts=("summary", "conversation", "charts"))
    finally:
        read.conn.close()
    # show --json and diff --json, as the CLI computes them (the run's end state passed, as they do).
    folded = transcript.fold_rows(rows, ended={RUN: ended})
    shown = [transcript.conversation_json(c) for c in folded.values() if c.session_id is not None]
    convs = [c for c in folded.values() if c.session_id is not None]
    diffed = [t.as_json() for t in df.diff_conversations(convs, convs)]
    tools = Tools(path, Redactor())
    built, _points = spans.build(rows, end_ns=ts + 1, run_id=RUN) if ended else (_live_spans(rows), [])
    return Doors(
        rows=rows,
        turns_table=turns_table,
        shown=shown,
        page=page,
        mcp_stats=tools.stats(str(RUN)).model_dump(mode="json"),
        mcp_show=tools.show(str(RUN)).text,
        mcp_diff=tools.diff(str(RUN), str(RUN)).model_dump(mode="json"),
        diffed=diffed,
        spans=built,
    )


def _live_spans(rows: list[dict[str, Any]]) -> list[spans.Span]:
    builder = spans.SpanBuilder(run_id=RUN)
    return [span for row in rows for span in builder.feed(row)]


def session_pages(doors: Doors) -> list[dict[str, Any]]:
    """The inspector's conversations of sessions (the connection's part left out)."""
    return [c for c in doors.page["conversations"] if c["session_id"] is not None]


def turn_spans(doors: Doors) -> list[spans.Span]:
    return [s for s in doors.spans if s.attributes.get("gen_ai.operation.name") == "invoke_agent"]


def test_a_queued_prompts_predecessors_answer_stays_in_its_turn(tmp_path: Path) -> None:
    """v2: prompt A accepted and running, prompt B sent, then A's answer, A's idle, B's acceptance.
    A's answer came before B was accepted, while A was the work in progress: it is turn 1's."""
    frames = [
        *opening(2),
        ("c2a", req(2, "session/prompt", {"sessionId": S, "prompt": [text("A")]}), True, 10),
        ("a2c", res(2, {"messageId": "u1"}), True, 10),
        ("a2c", upd({"sessionUpdate": "state_update", "state": "running"}), True, 10),
        ("c2a", req(3, "session/prompt", {"sessionId": S, "prompt": [text("B")]}), True, 10),
        ("a2c", upd({"sessionUpdate": "agent_message_chunk", "messageId": "m1", "content": text("A!")}), True, 10),
        ("a2c", upd({"sessionUpdate": "state_update", "state": "idle", "stopReason": "end_turn"}), True, 10),
        ("a2c", res(3, {"messageId": "u2"}), True, 10),
    ]
    doors = record(tmp_path, frames, ended=False)
    first, second = doors.turns_table
    assert (first["chunks"], second["chunks"]) == (1, 0)
    assert (first["first_output_ns"] - first["start_ns"], second["first_output_ns"]) == (40 * MS, None)
    (conv,) = doors.shown
    answer = next(e for e in conv["timeline"] if e["entity"] == "message" and e["role"] == "agent")
    assert answer["turn"] == 1  # show --json used to say 2 (the latest prompt), leaving turn 1 empty
    (page_conv,) = session_pages(doors)
    page_answer = next(e for e in page_conv["timeline"] if e["entity"] == "message" and e["role"] == "agent")
    assert page_answer["turn"] == 1
    (one, two) = doors.diffed
    assert (one["left"]["agent"], two["left"]["agent"]) == ("A!", "")
    assert (one["left"]["first_output_ms"], two["left"]["first_output_ms"]) == (40.0, None)
    assert [(t["left"]["agent"]) for t in doors.mcp_diff["turns"]["items"]] == ["A!", ""]
    assert [t["chunks"] for t in doors.mcp_stats["turns"]["items"]] == [1, 0]
    # The OpenTelemetry span of turn 1 (ended by the idle) has its time to first chunk.
    (span,) = turn_spans(doors)
    assert span.attributes["acp.prompt.seq"] == 5
    assert span.attributes["gen_ai.response.time_to_first_chunk"] == 0.04


def test_first_output_is_the_plan_in_every_view(tmp_path: Path) -> None:
    """v1: the agent sends a plan (+100 ms), a permission request (+200 ms) and a message chunk
    (+300 ms). The plan is the model's output (the prompt lifecycle says so); the permission
    request is a question. Every door says 100 ms."""
    frames = [
        *opening(1),
        ("c2a", req(2, "session/prompt", {"sessionId": S, "prompt": [text("go")]}), True, 10),
        (
            "a2c",
            upd({"sessionUpdate": "plan", "entries": [{"content": "x", "priority": "low", "status": "pending"}]}),
            True,
            100,
        ),
        (
            "a2c",
            req(0, "session/request_permission", {"sessionId": S, "toolCall": {"toolCallId": "t"}, "options": []}),
            True,
            100,
        ),
        ("a2c", upd({"sessionUpdate": "agent_message_chunk", "content": text("hi")}), True, 100),
        ("c2a", res(0, {"outcome": {"outcome": "cancelled"}}), True, 10),
        ("a2c", res(2, {"stopReason": "end_turn"}), True, 10),
    ]
    doors = record(tmp_path, frames, ended=True)
    (turn,) = doors.turns_table
    assert turn["first_output_ns"] - turn["start_ns"] == 100 * MS  # stats said 301 ms
    assert [t["to_first_output_ms"] for t in doors.mcp_stats["turns"]["items"]] == [100.0]
    (one,) = doors.diffed
    assert one["left"]["first_output_ms"] == 100.0  # diff said 200 ms (the permission request)
    (mark,) = [m for m in doors.page["waterfall"] if m["kind"] == "first output"]
    assert mark["start_ms"] == 100.0
    (span,) = turn_spans(doors)
    assert span.attributes["gen_ai.response.time_to_first_chunk"] == 0.1  # OpenTelemetry said 0.301 s


def test_a_turn_of_a_live_run_is_running_in_the_inspector_too(tmp_path: Path) -> None:
    frames = [
        *opening(1),
        ("c2a", req(2, "session/prompt", {"sessionId": S, "prompt": [text("go")]}), True, 10),
        ("a2c", upd({"sessionUpdate": "agent_message_chunk", "content": text("working")}), True, 10),
    ]
    doors = record(tmp_path, frames, ended=False)
    assert [t["status"] for t in doors.turns_table] == ["running"]
    assert [t["status"] for t in doors.shown[0]["turns"]] == ["running"]
    assert [t["status"] for (c,) in [session_pages(doors)] for t in c["turns"]] == ["running"]  # was unfinished
    (bar,) = [m for m in doors.page["waterfall"] if m["kind"] == "turn"]
    assert (bar["end_ms"], bar["detail"]) == (None, "running")
    assert "running" in doors.mcp_show
    (tmp_path / "ended").mkdir()
    ended = record(tmp_path / "ended", frames, ended=True)
    assert [t["status"] for (c,) in [session_pages(ended)] for t in c["turns"]] == ["unfinished"]
    assert [t["status"] for t in ended.turns_table] == ["unfinished"]


def test_a_prompt_answered_by_an_injected_error_stays_in_the_conversation(tmp_path: Path) -> None:
    """The proxy kept the prompt from the agent and answered it with an error (a fault rule):
    the client prompted and got an error; every door shows that turn."""
    frames = [
        *opening(1),
        ("c2a", req(2, "session/prompt", {"sessionId": S, "prompt": [text("go")]}), False, 10),
        ("a2c", {"jsonrpc": "2.0", "id": 2, "error": {"code": -32603, "message": "injected"}}, True, 1),
    ]
    doors = record(tmp_path, frames, ended=True)
    assert [(t["prompt_seq"], t["status"]) for t in doors.turns_table] == [(5, "error")]
    assert [(t["seq"], t["status"]) for t in doors.shown[0]["turns"]] == [(5, "error")]
    (page_conv,) = session_pages(doors)
    assert [(t["seq"], t["status"]) for t in page_conv["turns"]] == [(5, "error")]  # it vanished
    prompt = next(e for e in page_conv["timeline"] if e["entity"] == "message" and e["role"] == "user")
    assert prompt["seq"] == 5 and prompt["turn"] == 1
    errors = [e for e in page_conv["timeline"] if e["entity"] == "error"]
    assert [(e["seq"], e["turn"], e["message"]) for e in errors] == [(6, 1, "injected")]
    assert [t["left"]["outcome"] for t in doors.mcp_diff["turns"]["items"]] == ["error"]
    (span,) = turn_spans(doors)
    assert span.attributes["acp.turn.status"] == "error"
