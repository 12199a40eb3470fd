"""One truth: every view tells the same story of every turn.

Hypothesis writes conversations of both protocol versions — queued prompts, cancels,
``$/cancel_request``, history replays (v1 ``session/load``, v2 ``session/resume`` with and without
``replayFrom``, ended by ``replay_complete`` or by the answer), idle with and without a stop
reason, plans, tool calls, permission requests, agent work without a prompt (a turn too),
prompts the proxy answered with an injected error, batches, unknown variants and methods, errors,
answers the proxy withheld, stray answers, lines that are not JSON —
and records each as the recorder does (``wire.decode`` into ``FrameRecord``s, batch lines then
their elements, the tracker annotating each). Then every view is built from what was recorded,
each by its own code: the tracker's row changes (in memory, and through the recorder's
``FactsApplier`` into a real database: ``stats``), the folded conversations that ``show --json``
prints, ``diff --json``, the checker, the OpenTelemetry spans, the inspector's run page, the MCP
tools, and replay's view (the recording served as a fake agent to its own client lines). They
must agree turn by turn: the same prompts, status, stop reason and end frame, the same chunk
counts and first output, the same permission requests, and every entity in the turn the one
rows-to-events adapter (``protocol.rows.run_events``) gives its frame.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from acp_proxy.checks.rules import Checker, check
from acp_proxy.cli import transcript
from acp_proxy.mcp.tools import Tools
from acp_proxy.otel import spans
from acp_proxy.protocol import rows as rw
from acp_proxy.protocol import wire
from acp_proxy.protocol.frames import FrameRecord
from acp_proxy.protocol.redact import Redactor
from acp_proxy.protocol.tracker import Change, Tracker
from acp_proxy.read import diff as df
from acp_proxy.record.writer import FactsApplier
from acp_proxy.replay import replayer as rp
from acp_proxy.store import database as store
from acp_proxy.web import model, timeline

RUN = 1
MS = 1_000_000
"""Frame n is recorded at n ms: every time difference is a whole number of ms."""
Turns = dict[int, tuple[str, str | None, int | None]]


# -- writing conversations -------------------------------------------------------------------------


@dataclass
class Script:
    """A conversation as it is written, step by step; ``frames`` are (direction, message, forwarded)."""

    version: int
    frames: list[tuple[str, Any, bool]] = field(default_factory=list)
    next_id: int = 10
    sessions: list[str] = field(default_factory=list)
    pending: dict[int, tuple[str, str | None]] = field(default_factory=dict)
    """Client requests not answered yet: id -> (method, session)."""
    agent_pending: list[int] = field(default_factory=list)
    messages: int = 0

    def send(self, direction: str, message: Any, forwarded: bool = True) -> None:
        self.frames.append((direction, message, forwarded))

    def ask(self, method: str, params: dict[str, Any], session: str | None = None) -> None:
        rid = self.next_id
        self.next_id += 1
        self.pending[rid] = (method, session)
        self.send("c2a", {"jsonrpc": "2.0", "id": rid, "method": method, "params": params})

    def update(self, session: str, body: dict[str, Any]) -> None:
        self.send(
            "a2c", {"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": session, "update": body}}
        )


def _text(value: str) -> dict[str, str]:
    return {"type": "text", "text": value}


ACTIONS = (
    "new",
    "prompt",
    "prompt",
    "answer",
    "answer",
    "answer",
    "answer",
    "update",
    "update",
    "state",
    "state",
    "state",
    "cancel",
    "cancel_request",
    "restore",
    "permission",
    "permission_answer",
    "stray",
    "odd",
    "output",
    "output",
    "injected",
)


_SESSIONLESS = frozenset({"new", "answer", "cancel_request", "permission_answer", "stray", "odd"})

# The agent's output as each version spells it (protocol.output), besides the chunks above.
_OUTPUT = {
    1: ["plan", "tool_call", "tool_call_update", "agent_message_chunk", "agent_thought_chunk"],
    2: ["plan_update", "tool_call_update", "tool_call_content_chunk", "agent_message", "agent_thought", "plan_removed"],
}


def _step(draw: Any, s: Script) -> None:
    action = draw(st.sampled_from(ACTIONS))
    sid = draw(st.sampled_from(s.sessions)) if s.sessions else None
    if sid is None and action not in _SESSIONLESS:
        action = "answer" if s.pending and draw(st.booleans()) else "new"
    if action == "new":
        s.ask("session/new", {"cwd": "/w"})
    elif action == "prompt":
        s.ask("session/prompt", {"sessionId": sid, "prompt": [_text("hi")]}, sid)
    elif action == "answer" and s.pending:
        rid = draw(st.sampled_from(sorted(s.pending)))
        method, _session = s.pending[rid]
        withheld = draw(st.integers(0, 9)) == 0  # the proxy withheld it (a fault): still pending
        if draw(st.integers(0, 5)) == 0:
            answer: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "error": {"code": -32603, "message": "no"}}
        elif method == "session/new":
            new = draw(st.sampled_from([f"s{len(s.sessions) + 1}", *s.sessions[:1]]))
            if not withheld and new not in s.sessions:
                s.sessions.append(new)
            answer = {"jsonrpc": "2.0", "id": rid, "result": {"sessionId": new}}
        elif method == "session/prompt":
            if s.version == 1 or draw(st.integers(0, 7)) == 0:  # a v1-shaped answer, whatever the version
                stop = draw(st.sampled_from(["end_turn", "cancelled", "max_tokens", "_custom", None]))
                answer = {"jsonrpc": "2.0", "id": rid, "result": {} if stop is None else {"stopReason": stop}}
            else:
                s.messages += 1
                answer = {"jsonrpc": "2.0", "id": rid, "result": {"messageId": f"m{s.messages}"}}
        else:
            answer = {"jsonrpc": "2.0", "id": rid, "result": {}}
        if not withheld:
            del s.pending[rid]
        s.send("a2c", answer, forwarded=not withheld)
    elif action == "update":
        variant = draw(
            st.sampled_from(
                [
                    "agent_message_chunk",
                    "agent_thought_chunk",
                    "user_message_chunk",
                    "tool_call_update",
                    "notice",
                    "usage_update",
                    "_vendor_thing",
                    "future_thing",
                    "session_info_update",
                ]
                + (
                    ["tool_call", "plan"]
                    if s.version == 1
                    else ["agent_message", "compaction_update", "replay_complete"]
                )
            )
        )
        body: dict[str, Any] = {"sessionUpdate": variant, "messageId": "a1", "toolCallId": "t1", "content": _text("x")}
        if variant == "notice":
            body = {"sessionUpdate": "notice", "severity": "info", "title": "n"}
        s.update(sid, body)
    elif action == "state":
        state = draw(st.sampled_from(["running", "requires_action", "idle", "idle", "unknown"]))
        body = {"sessionUpdate": "state_update", "state": state}
        if state == "idle" and draw(st.booleans()):
            body["stopReason"] = draw(st.sampled_from(["end_turn", "cancelled", "refusal"]))
        s.update(sid, body)
    elif action == "cancel":
        s.send("c2a", {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}})
    elif action == "cancel_request":
        target = draw(st.sampled_from(sorted(s.pending) or [99]))
        s.send("c2a", {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": target}})
    elif action == "restore":
        if s.version == 1 and draw(st.booleans()):
            s.ask("session/load", {"sessionId": sid, "cwd": "/w", "mcpServers": []}, sid)
        else:
            params: dict[str, Any] = {"sessionId": sid, "cwd": "/w"}
            if draw(st.booleans()):
                params["replayFrom"] = {"type": "start"}
            s.ask("session/resume", params, sid)
    elif action == "permission":
        rid = len(s.agent_pending)
        s.agent_pending.append(rid)
        s.send(
            "a2c",
            {
                "jsonrpc": "2.0",
                "id": rid,
                "method": "session/request_permission",
                "params": {"sessionId": sid, "options": []},
            },
        )
    elif action == "permission_answer" and s.agent_pending:
        rid = s.agent_pending.pop(0)
        outcome = draw(st.sampled_from(["cancelled", "selected"]))
        s.send("c2a", {"jsonrpc": "2.0", "id": rid, "result": {"outcome": {"outcome": outcome, "optionId": "o"}}})
    elif action == "output":
        variant = draw(st.sampled_from(_OUTPUT[s.version]))
        body = {"sessionUpdate": variant, "messageId": "a2", "toolCallId": f"t{draw(st.integers(1, 3))}"}
        if variant.startswith("plan"):
            body = {"sessionUpdate": variant, "entries": [], "planId": "p", "plan": {"type": "items", "planId": "p"}}
        else:
            body["content"] = _text("y") if variant.endswith("_chunk") else [_text("y")]
        s.update(sid, body)
    elif action == "injected":
        # The proxy kept a prompt from the agent and answered it with an error (a fault rule).
        rid = s.next_id
        s.next_id += 1
        prompt = {"sessionId": sid, "prompt": [_text("hi")]}
        s.send("c2a", {"jsonrpc": "2.0", "id": rid, "method": "session/prompt", "params": prompt}, forwarded=False)
        s.send("a2c", {"jsonrpc": "2.0", "id": rid, "error": {"code": -32603, "message": "injected"}})
    elif action == "stray":
        s.send("a2c", {"jsonrpc": "2.0", "id": 777, "result": {}})
    elif action == "odd":
        odd = draw(
            st.sampled_from(
                [
                    ("a2c", b"Loading model..."),
                    ("c2a", {"jsonrpc": "2.0", "method": "_vendor/ping", "params": {}}),
                    ("c2a", {"jsonrpc": "2.0", "id": 555, "method": "future/method", "params": {}}),
                    ("a2c", {"jsonrpc": "2.0", "method": "session/update", "params": {"update": 5}}),
                ]
            )
        )
        s.send(odd[0], odd[1])


@st.composite
def conversations(draw: Any) -> tuple[list[tuple[str, Any, bool]], bool]:
    """The frames of one connection (batches as lists) and whether it ended."""
    version = draw(st.sampled_from([1, 2]))
    s = Script(version)
    if draw(st.integers(0, 4)):  # mostly, but not always, the connection starts with initialize
        s.send("c2a", {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": version}})
        s.send("a2c", {"jsonrpc": "2.0", "id": 0, "result": {"protocolVersion": version}})
    for _ in range(draw(st.integers(1, 40))):
        _step(draw, s)
    frames = s.frames
    # Some runs of frames going the same way travel as one batch line.
    out: list[tuple[str, Any, bool]] = []
    i = 0
    while i < len(frames):
        direction, _message, forwarded = frames[i]
        size = draw(st.sampled_from([1, 1, 1, 1, 2, 3]))
        group = [f for f in frames[i : i + size] if f[0] == direction and f[2] and isinstance(f[1], dict)]
        if size > 1 and len(group) == size and forwarded:
            out.append((direction, [f[1] for f in group], True))
            i += size
        else:
            out.append(frames[i])
            i += 1
    return out, draw(st.booleans())


# -- recording them as the recorder does ------------------------------------------------------------


def record(frames: list[tuple[str, Any, bool]], ended: bool) -> tuple[list[FrameRecord], list[Change]]:
    tracker = Tracker(RUN)
    records: list[FrameRecord] = []
    changes: list[Change] = []
    seq = 0

    def add(direction: str, line: bytes, frame: wire.Frame, forwarded: bool) -> FrameRecord:
        nonlocal seq
        seq += 1
        rec = FrameRecord(RUN, seq, seq * MS, direction, line, frame)
        rec.raw = line.decode(errors="replace")
        rec.forwarded = int(forwarded)
        records.append(rec)
        return rec

    for direction, message, forwarded in frames:
        line = message if isinstance(message, bytes) else json.dumps(message).encode()
        head = add(direction, line, wire.decode(line), forwarded)
        tracker.observe(head)
        for index, (raw, element) in enumerate(head.frame.elements or []):  # type: ignore[union-attr]
            rec = add(direction, raw, element, forwarded)
            rec.batch_seq, rec.batch_index = head.seq, index
            tracker.observe(rec)
        changes.extend(tracker.drain())
    if ended:
        tracker.finish(seq * MS + 1)
        changes.extend(tracker.drain())
    return records, changes


def rows_of(records: list[FrameRecord]) -> list[dict[str, Any]]:
    return [{**rec.as_dict(), "raw": rec.raw} for rec in records]


# -- the three views -----------------------------------------------------------------------------------


def turns_table(changes: list[Change]) -> Turns:
    rows: dict[int, dict[str, Any]] = {}
    for change in changes:
        if change.table == "turns":
            rows.setdefault(change.key["turn_key"], {}).update(change.values)
    return {r["prompt_seq"]: (r["status"], r["stop_reason"], r["end_seq"]) for r in rows.values()}


def show_json(rows: list[dict[str, Any]], ended: bool) -> Turns:
    conversations = transcript.fold_rows(rows, ended={RUN: ended})
    out: Turns = {}
    for conv in conversations.values():
        for turn in transcript.conversation_json(conv)["turns"]:
            out[turn["seq"]] = (turn["status"], turn["stop_reason"], turn["end_seq"])
    return out


def checker_view(rows: list[dict[str, Any]], ended: bool) -> tuple[Turns, list[Any]]:
    checker = Checker(schema=False)
    findings = [f for row in rows for f in checker.feed(row)]
    findings += checker.finish(ended=ended)
    return dict(checker.turns), findings


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conversations())
def test_rows_show_and_check_tell_the_same_turns(conversation: tuple[list[tuple[str, Any, bool]], bool]) -> None:
    frames, ended = conversation
    records, changes = record(frames, ended)
    rows = rows_of(records)
    table = turns_table(changes)
    shown = show_json(rows, ended)
    checked, findings = checker_view(rows, ended)
    assert shown == table
    assert checked == table
    # An open turn is open only while the connection goes on.
    assert all(status != "running" for status, _, _ in table.values()) or not ended
    # The checker's findings say what the turns say, once per fact.
    by_seq = {r.seq: r for r in records}
    idle_without_stop = {
        end
        for status, stop, end in table.values()
        if status == "ended" and stop is None and end is not None and by_seq[end].update_kind == "state_update"
    }
    assert {f.seq for f in findings if f.rule_id == "turn/idle-stop-reason"} == idle_without_stop
    unanswered = {f.seq for f in findings if f.rule_id == "jsonrpc/unanswered"}
    unfinished = {f.seq for f in findings if f.rule_id == "turn/unfinished"}
    assert not unfinished & unanswered  # one finding per broken fact
    assert unfinished <= {seq for seq, (status, _, _) in table.items() if status == "unfinished"}
    # The live check (rows) and a check of the live frames give the same findings.
    assert list(check(records, ended={RUN: ended}, schema=False)) == list(check(rows, ended={RUN: ended}, schema=False))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conversations())
def test_the_turns_table_in_a_real_database_agrees_with_show(
    conversation: tuple[list[tuple[str, Any, bool]], bool],
) -> None:
    frames, ended = conversation
    records, changes = record(frames, ended)
    with tempfile.TemporaryDirectory() as tmp:
        db = store.open_for_writing(Path(tmp) / "rec.db")
        with db.conn:
            run_id = db["runs"].insert({"started_ns": 1, "status": "ended" if ended else "running"}).last_pk
            assert run_id == RUN
            db["frames"].insert_all(rec.as_dict() for rec in records)
            FactsApplier(db, RUN).apply([{"table": c.table, "key": c.key, "values": c.values} for c in changes])
        stored = {
            r["prompt_seq"]: (r["status"], r["stop_reason"], r["end_seq"])
            for r in db.query("select prompt_seq, status, stop_reason, end_seq from turns where run_id = ?", [RUN])
        }
        rows = list(db.query("select * from frames where run_id = ? order by seq", [RUN]))
        db.conn.close()
    assert stored == turns_table(changes)
    assert show_json(rows, ended) == stored


# -- every view: the same turns, entities' turns, chunk counts, first output and end states ----------

Facts = dict[int, tuple[str, int, float | None]]
"""prompt seq -> (status, chunks, time to first output in ms)."""


def _ms(ns: int | None, start: int) -> float | None:
    return None if ns is None else round((ns - start) / 1e6, 1)


def tracker_facts(changes: list[Change]) -> Facts:
    """What the turns table says (what ``stats`` reads)."""
    rows: dict[int, dict[str, Any]] = {}
    for change in changes:
        if change.table == "turns":
            rows.setdefault(change.key["turn_key"], {}).update(change.values)
    return {
        r["prompt_seq"]: (r["status"], r["chunks"], _ms(r["first_output_ns"], r["start_ns"])) for r in rows.values()
    }


def permissions_per_turn(changes: list[Change]) -> dict[int, int]:
    rows: dict[int, dict[str, Any]] = {}
    for change in changes:
        if change.table == "turns":
            rows.setdefault(change.key["turn_key"], {}).update(change.values)
    return {r["prompt_seq"]: r["permission_requests"] for r in rows.values()}


def conversation_facts(pages: list[dict[str, Any]]) -> tuple[Facts, dict[int, int], dict[int, int | None]]:
    """``show --json`` (and the inspector's conversations): the turns, the permission requests
    made in each, and the turn (its prompt seq) of every live entity by its frame."""
    facts: Facts = {}
    permissions: dict[int, int] = {}
    entity_turns: dict[int, int | None] = {}
    for page in pages:
        by_index = {t["index"]: t["seq"] for t in page["turns"]}
        for t in page["turns"]:
            facts[t["seq"]] = (t["status"], t["chunks"], _ms(t["first_output_ns"], t["ts_ns"]))
            permissions.setdefault(t["seq"], 0)
        for e in page["timeline"]:
            if e["replay"]:
                continue
            turn = by_index.get(e["turn"])
            entity_turns[e["seq"]] = turn
            if e["entity"] == "permission" and turn is not None:
                permissions[turn] += 1
    return facts, permissions, entity_turns


def show_pages(rows: list[dict[str, Any]], ended: bool) -> list[dict[str, Any]]:
    folded = transcript.fold_rows(rows, ended={RUN: ended})
    return [transcript.conversation_json(c) for c in folded.values()]


def diff_facts(rows: list[dict[str, Any]], ended: bool) -> dict[int, tuple[str, float | None]]:
    """``diff --json`` of the recording against itself: each turn's outcome and first output."""
    convs = list(transcript.fold_rows(rows, ended={RUN: ended}).values())
    out: dict[int, tuple[str, float | None]] = {}
    for conv in convs:
        for turn in conv.turns:
            summary = df.summarise_turn(conv, turn)
            out[turn.seq] = (summary["outcome"], summary["first_output_ms"])
    # What the diff prints: every turn paired with itself, nothing differs.
    assert not df.any_difference(df.diff_conversations(convs, convs))
    return out


def span_facts(rows: list[dict[str, Any]], ended: bool) -> Facts:
    """The OpenTelemetry ``invoke_agent`` spans of the turns that ended (all of them once the run has)."""
    builder = spans.SpanBuilder(run_id=RUN)
    finished = [span for row in rows for span in builder.feed(row)]
    if ended:
        finished += builder.finish(len(rows) * MS + 1)
    out: Facts = {}
    for span in finished:
        attrs = span.attributes
        if attrs.get("gen_ai.operation.name") != "invoke_agent":
            continue
        first = attrs.get("gen_ai.response.time_to_first_chunk")
        out[attrs["acp.prompt.seq"]] = (
            attrs["acp.turn.status"],
            attrs["acp.turn.chunks"],
            None if first is None else round(first * 1e3, 1),
        )
    return out


def meaning_of_each_frame(rows: list[dict[str, Any]]) -> dict[int, int | None]:
    """The turn of each frame, as the one rows-to-events adapter gives it."""
    return {m.row["seq"]: m.turn for m in rw.run_events(rows, ended=False) if m.row is not None}


def replayed(rows: list[dict[str, Any]]) -> list[tuple[str, Any, bool]]:
    """Replay's view of the recording: a client sending the recorded client lines to the
    recording served as a fake agent (``acp_proxy.replay``), and what it answers, in order."""
    fake = rp.Replayer(rows)
    out: list[tuple[str, Any, bool]] = [("a2c", _json_or_bytes(s.data), True) for s in fake.start()]
    for row in rows:
        if row["dir"] != "c2a" or row.get("batch_seq") is not None:
            continue
        out.append(("c2a", _json_or_bytes(row["raw"].encode()), True))
        out.extend(("a2c", _json_or_bytes(s.data), True) for s in fake.receive(row["raw"].encode() + b"\n"))
    return out


def _json_or_bytes(data: bytes) -> Any:
    try:
        return json.loads(data)
    except ValueError:
        return data.rstrip(b"\n")


def assert_views_agree(frames: list[tuple[str, Any, bool]], ended: bool) -> Facts:
    records, changes = record(frames, ended)
    rows = rows_of(records)
    table = tracker_facts(changes)
    pages = show_pages(rows, ended)
    shown, permissions, entity_turns = conversation_facts(pages)
    assert shown == table
    assert permissions == permissions_per_turn(changes)
    turns_of_frames = meaning_of_each_frame(rows)
    for seq, turn in entity_turns.items():
        if seq in turns_of_frames:
            assert turn == turns_of_frames[seq], seq
    assert diff_facts(rows, ended) == {seq: (status, first) for seq, (status, _, first) in table.items()}
    from_spans = span_facts(rows, ended)
    assert from_spans == {seq: facts for seq, facts in table.items() if seq in from_spans}
    if ended:
        assert set(from_spans) == set(table)
        assert all(status != "running" for status, _, _ in table.values())
    # Replayed, the recording tells the same turns in the same order: end states, chunk counts and
    # whether there was output (its times are the replay's). An answer the proxy withheld is left
    # out: the replay sends it (the client of the recording never saw it), which changes the turns.
    if all(forwarded for direction, _, forwarded in frames if direction == "a2c"):
        _, again = record(replayed(rows), ended)
        assert [(status, chunks, first is None) for _, (status, chunks, first) in sorted(table.items())] == [
            (status, chunks, first is None) for _, (status, chunks, first) in sorted(tracker_facts(again).items())
        ]
    return table


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conversations())
def test_every_view_tells_the_same_turns(conversation: tuple[list[tuple[str, Any, bool]], bool]) -> None:
    frames, ended = conversation
    assert_views_agree(frames, ended)


def _recorded_database(path: Path, records: list[FrameRecord], changes: list[Change], ended: bool) -> None:
    db = store.open_for_writing(path)
    with db.conn:
        run_id = db["runs"].insert({"started_ns": 1, "status": "ended" if ended else "running"}).last_pk
        assert run_id == RUN
        db["frames"].insert_all(rec.as_dict() for rec in records)
        FactsApplier(db, RUN).apply([{"table": c.table, "key": c.key, "values": c.values} for c in changes])
    db.conn.close()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conversations())
def test_the_database_doors_tell_the_same_turns(conversation: tuple[list[tuple[str, Any, bool]], bool]) -> None:
    """``stats`` (the ``turn_metrics`` view), the inspector's run page and the MCP tools, each
    reading a real database, tell what the tracker and every in-memory view tell."""
    frames, ended = conversation
    records, changes = record(frames, ended)
    table = tracker_facts(changes)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "rec.db"
        _recorded_database(path, records, changes, ended)
        read = store.open_for_reading(path)
        page = model.conversation(read, "run", str(RUN), Redactor(), parts=("summary", "conversation", "charts"))
        read.conn.close()
        tools = Tools(path, Redactor())
        stats = tools.stats(str(RUN)).model_dump(mode="json")
        diffed = tools.diff(str(RUN), str(RUN)).model_dump(mode="json")
    # The inspector's conversations are show's.
    inspected, permissions, inspected_turns = conversation_facts(page["conversations"])
    assert inspected == table and permissions == permissions_per_turn(changes)
    # ... and every entity is in the turn show puts it in (and run_events gives its frame).
    assert inspected_turns == conversation_facts(show_pages(rows_of(records), ended))[2]
    firsts = sorted(first for _, _, first in table.values() if first is not None)
    marks = sorted(m["start_ms"] for m in page["waterfall"] if m["kind"] == "first output")
    assert [round(m, 1) for m in marks] == firsts
    bars = sorted(m["detail"] for m in page["waterfall"] if m["kind"] == "turn" and m["end_ms"] is None)
    assert bars == sorted(status for status, _, _ in table.values() if status in ("running", "unfinished"))
    # stats (and the MCP stats tool): the turns table through its view; turns known by their start.
    started = {timeline.iso(seq * MS): seq for seq in table}
    stats_turns = stats["turns"]["items"]
    metrics = {started[t["started"]]: (t["status"], t["chunks"], t["to_first_output_ms"]) for t in stats_turns}
    assert metrics == table
    # The MCP diff tool: every turn's outcome and first output.
    turns = sorted(((t["left"]["outcome"], t["left"]["first_output_ms"]) for t in diffed["turns"]["items"]), key=repr)
    assert not diffed["differ"]
    assert turns == sorted(((status, first) for status, _, first in table.values()), key=repr)
