"""Every ``acp-proxy ctl`` action recorded as a row, in-process: control requests and chunks in,
the gate's steps journaled as the relay journals them (LINE records, a META record per
request), the real indexer's batches committed to a real database, then read back as the
doors read it (``read.controls``): each action a ``controls`` row with the frames it acted on
and wrote, held rows with their fate, chunk counts that count what the client received.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from acp_proxy.faults.gate import Forward, Gate, Hold, Note, Step
from acp_proxy.faults.live import LiveControl
from acp_proxy.protocol import controls as pc
from acp_proxy.protocol import filters
from acp_proxy.protocol.output import IS_CHUNK, counts
from acp_proxy.record import journal as jr
from acp_proxy.record import writer
from acp_proxy.record.indexer import Indexer
from acp_proxy.record.journal import Record
from acp_proxy.store import database as store
from tests.faults.test_live import S, line, prompt, ticking, update

DIRS = {"c2a": jr.C2A, "a2c": jr.A2C}


class Recorded:
    """A gate with live control whose steps are journaled into an indexer, as the relay and
    its recorder do, and committed to ``path``."""

    def __init__(self, path: Path) -> None:
        clock = ticking().__next__
        self.live = LiveControl(None, clock)
        self.gate = Gate(plan=None, clock=clock, live=self.live)
        self.indexer = Indexer(1, None)
        self.path = path
        self.offset = 0
        self.holds: dict[int, Hold] = {}
        db = store.open_for_writing(path)
        db.execute("insert into runs (id, started_ns, status) values (1, 1, 'running')")
        db.conn.commit()
        db.close()

    def _feed(self, kind: int, direction: int, ts: int, payload: bytes) -> None:
        self.offset += 1
        self.indexer.feed(Record(kind, direction, ts, payload, self.offset, self.offset))

    def steps(self, steps: list[Step]) -> None:
        for step in steps:
            if isinstance(step, Note):
                ts = step.ts_ns if step.ts_ns is not None else self.gate.clock()
                self._feed(jr.LINE, DIRS[step.direction], ts, jr.line_payload(step.line, step.meta))
            elif isinstance(step, Forward):  # as read: the recorder frames it
                self._feed(jr.DATA, DIRS[step.direction], self.gate.clock(), step.data)
            elif isinstance(step, Hold):
                self.holds[step.number] = step

    def chunk(self, direction: str, data: bytes) -> list[Step]:
        steps = self.gate.chunk(direction, data)
        self.steps(steps)
        return steps

    def ctl(self, **request: Any) -> Any:
        """One control request, carried out as ``relay.control.ControlServer.handle`` does."""
        answer, changes = self.live.handle(request)
        assert "ok" in answer, answer
        if changes.plan:
            self.gate.plan = self.live.plan
        if changes.control:
            self._feed(jr.META, 0, self.gate.clock(), json.dumps({"control": changes.control}).encode())
        for direction, data, note, number in changes.send:
            self.steps(self.gate.sent(direction, data, note, number))
        for number in changes.decided:  # the waiting direction wakes and carries out the release
            decision = self.live.take(number)
            assert decision is not None
            self.steps(self.gate.released(self.holds[number], decision))
        return answer["ok"]

    def commit(self) -> sqlite3.Connection:
        message = self.indexer.message(self.offset)
        db = store.open_for_writing(self.path)
        with db.conn:
            for sql, rows in message["batches"]:
                db.conn.executemany(sql, rows)
            writer.FactsApplier(db, 1).apply(message["changes"])
        db.close()
        conn = sqlite3.connect(self.path)
        conn.row_factory = sqlite3.Row
        return conn


def held_seq(conn: sqlite3.Connection, text: str) -> int:
    (seq,) = conn.execute("select seq from frames where forwarded = 0 and raw like ?", [f"%{text}%"]).fetchone()
    return int(seq)


def test_each_action_is_a_row_linked_to_the_frames_it_held_and_wrote(tmp_path: Path) -> None:
    run = Recorded(tmp_path / "r.db")
    run.ctl(op="break", filter="method:session/update")
    run.chunk("c2a", prompt(1))
    run.chunk("a2c", update("one"))
    run.chunk("a2c", update("two"))
    run.ctl(op="fault-add", rule="delay=1ms if method:session/prompt")
    run.ctl(op="fault-remove", id=1)
    run.ctl(op="release", hold=1)
    run.ctl(op="release", hold=2, **{"with": update("EDITED").decode()})
    run.chunk("a2c", update("three"))
    run.ctl(op="drop", hold=3)
    run.ctl(op="clear")
    run.ctl(op="send", to="client", frame=update("from ctl").decode())
    conn = run.commit()

    rows = [dict(r) for r in conn.execute("select * from controls order by number")]
    assert [r["action"] for r in rows] == [
        "break",
        "fault-add",
        "fault-remove",
        "release",
        "release",
        "drop",
        "clear",
        "send",
    ]
    assert [r["number"] for r in rows] == list(range(1, 9)) and all(r["run_id"] == 1 for r in rows)
    assert [r["ts_ns"] for r in rows] == sorted(r["ts_ns"] for r in rows)
    assert rows[0]["argument"] == "#1 method:session/update"
    assert rows[1]["argument"] == "#1 delay=1ms if method:session/prompt"
    one, two, three = held_seq(conn, '"one"'), held_seq(conn, '"two"'), held_seq(conn, '"three"')
    (copy_one,) = conn.execute("select seq from frames where forwarded = 1 and raw like '%\"one\"%'").fetchone()
    (edited,) = conn.execute("select seq, origin from frames where raw like '%EDITED%'").fetchall()
    (sent,) = conn.execute("select seq from frames where raw like '%from ctl%'").fetchone()
    release, release_edited, drop = rows[3], rows[4], rows[5]
    assert (release["hold"], release["seq"], release["result_seq"]) == (1, one, copy_one)
    assert (release_edited["seq"], release_edited["result_seq"]) == (two, edited[0])
    assert release_edited["argument"] == "edited"
    assert edited[1] == "proxy"
    assert (drop["hold"], drop["seq"], drop["result_seq"]) == (3, three, None)
    assert all(r["held_ns"] > 0 for r in (release, release_edited, drop))
    assert (rows[7]["result_seq"], rows[7]["argument"]) == (sent, "to client session/update")
    assert rows[6]["argument"] == "#1"  # the breakpoint clear removed


def test_frames_list_controls_by_time_and_held_rows_say_what_became_of_them(tmp_path: Path) -> None:
    from acp_proxy.read import controls

    run = Recorded(tmp_path / "r.db")
    run.ctl(op="break", filter="method:session/update")
    run.chunk("c2a", prompt(1))
    run.chunk("a2c", update("one"))
    run.ctl(op="release", hold=1)
    run.chunk("a2c", update("two"))
    run.ctl(op="drop", hold=2)
    conn = run.commit()
    frames = [dict(r) for r in conn.execute("select * from frames order by seq")]
    db = store.open_for_reading(run.path)
    listed = list(controls.with_controls(iter(frames), controls.control_rows(db)))
    kinds = [(r["kind"], r.get("action") or r.get("method")) for r in listed]
    assert kinds == [
        ("control", "break"),
        ("request", "session/prompt"),
        ("notification", "session/update"),  # held
        ("control", "release"),
        ("notification", "session/update"),  # its copy
        ("notification", "session/update"),  # held, then dropped
        ("control", "drop"),
    ]
    held = [r for r in listed if r.get("held")]
    assert [r["held"] for r in held] == [f"held 1.000s, released as #{listed[4]['seq']}", "held 1.000s, dropped"]
    # The filter term selects the actions and every frame an action touched, nothing else.
    expr = filters.parse("control")
    chosen = [r for r in listed if r["kind"] == "control" or expr.matches(_rec(r))]
    assert [r["kind"] for r in chosen] == ["control", "notification", "control"] + ["notification"] * 2 + ["control"]
    only = list(controls.with_controls(iter([]), controls.control_rows(db), filters.parse("control run:1")))
    assert [r["action"] for r in only] == ["break", "release", "drop"]
    assert list(controls.with_controls(iter([]), controls.control_rows(db), filters.parse("method:x"))) == []
    assert all(pc.CTL in r["text"] for r in only)


def _rec(row: dict[str, Any]) -> Any:
    from types import SimpleNamespace

    return SimpleNamespace(**{**row, "mark": None, "findings": []})


def test_a_held_chunk_counts_once_as_the_copy_its_client_received(tmp_path: Path) -> None:
    run = Recorded(tmp_path / "r.db")
    run.chunk("c2a", line({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}}))
    run.chunk("a2c", line({"jsonrpc": "2.0", "id": 0, "result": {"protocolVersion": 1}}))
    new = {"cwd": "/", "mcpServers": []}
    run.chunk("c2a", line({"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": new}))
    run.chunk("a2c", line({"jsonrpc": "2.0", "id": 1, "result": {"sessionId": S}}))
    run.ctl(op="break", filter="method:session/update")
    run.chunk("c2a", prompt(2))
    run.chunk("a2c", update("one"))
    run.ctl(op="release", hold=1)
    run.chunk("a2c", update("two"))
    run.ctl(op="drop", hold=2)
    run.ctl(op="clear")
    run.chunk("a2c", update("three"))
    run.chunk("a2c", line({"jsonrpc": "2.0", "id": 2, "result": {"stopReason": "end_turn"}}))
    run.indexer.tracker.finish(10**12)
    conn = run.commit()
    assert counts("agent_message_chunk") & IS_CHUNK
    forwarded = conn.execute(
        "select count(*) from frames where update_kind = 'agent_message_chunk' and forwarded = 1"
    ).fetchone()[0]
    (chunks,) = conn.execute("select chunks from turns").fetchone()
    assert forwarded == chunks == 2  # "one" (its copy) and "three"; "two" was dropped

    from acp_proxy.read import conversation, queries

    db = store.open_for_reading(run.path)
    folded = conversation.conversations(db, queries.resolve(db, "1"))
    (turn,) = [t for c in folded.conversations for t in c.turns]
    assert turn.chunks == 2


def test_show_keeps_a_held_request_beside_its_copy_and_counts_what_was_forwarded(tmp_path: Path) -> None:
    from acp_proxy.read import conversation, queries

    run = Recorded(tmp_path / "r.db")
    run.chunk("c2a", line({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}}))
    run.chunk("a2c", line({"jsonrpc": "2.0", "id": 0, "result": {"protocolVersion": 1}}))
    new = {"cwd": "/", "mcpServers": []}
    run.chunk("c2a", line({"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": new}))
    run.chunk("a2c", line({"jsonrpc": "2.0", "id": 1, "result": {"sessionId": S}}))
    run.ctl(op="break", filter="kind:request OR update:agent_message_chunk")
    run.chunk("c2a", prompt(2, "as sent"))
    run.ctl(op="release", hold=1, **{"with": prompt(2, "as edited").decode()})
    run.chunk("a2c", update("answer"))
    run.ctl(op="release", hold=2)
    run.chunk("a2c", line({"jsonrpc": "2.0", "id": 2, "result": {"stopReason": "end_turn"}}))
    run.indexer.tracker.finish(10**12)
    conn = run.commit()
    held = held_seq(conn, "as sent")
    db = store.open_for_reading(run.path)
    folded = conversation.conversations(db, queries.resolve(db, "1"))
    (conv,) = [c for c in folded.conversations if c.session_id == S]
    (turn,) = conv.turns
    assert turn.chunks == 1 and held in conv.unforwarded  # the held chunk and its copy: one chunk
    shown = json.dumps(conversation.conversation_json(conv))
    assert "as sent" in shown and "as edited" in shown  # both listed; the controls say which went
    fates = controls_fates(db)
    (copy,) = conn.execute("select seq from frames where raw like '%as edited%'").fetchone()
    assert fates[(1, held)] == f"held 1.000s, released edited as #{copy}"


def controls_fates(db: Any) -> dict[tuple[Any, Any], str]:
    from acp_proxy.read import controls

    return controls.held_fates(controls.control_rows(db))
