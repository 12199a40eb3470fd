"""Run-time control in-process: control requests and chunks in, answers and the gate's steps out.

``LiveControl.handle`` is what the proxy's control socket runs for each ``acp-proxy ctl``
request; the gate asks it whether a frame is held and builds the steps of a release. The relay
(``test_control_e2e.py``) only carries these steps out and waits on held frames.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from acp_proxy.faults.gate import Forward, Gate, Hold, Note, Send
from acp_proxy.faults.live import LiveControl
from acp_proxy.faults.plan import FaultPlan
from acp_proxy.protocol import wire
from acp_proxy.protocol.frames import FrameRecord
from acp_proxy.protocol.framing import Line
from acp_proxy.protocol.state import ConnectionState
from acp_proxy.protocol.tracker import Tracker
from tests.faults.test_gate_playbook import Chunk, Playbook

S = "sess_1"


def line(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode() + b"\n"


def prompt(rpc_id: int, text: str = "hi") -> bytes:
    params = {"sessionId": S, "prompt": [{"type": "text", "text": text}]}
    return line({"jsonrpc": "2.0", "id": rpc_id, "method": "session/prompt", "params": params})


def update(text: str) -> bytes:
    chunk = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}
    return line({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": S, "update": chunk}})


def as_line(data: bytes) -> Line:
    body = data.rstrip(b"\n")
    return Line(body, len(body), True, False)


def ticking(step: int = 1_000_000_000) -> Iterator[int]:
    now = 0
    while True:
        now += step
        yield now


def control(plan: FaultPlan | None = None) -> tuple[LiveControl, Gate]:
    clock = ticking().__next__
    live = LiveControl(plan, clock)
    return live, Gate(plan=plan, clock=clock, live=live)


def ok(live: LiveControl, gate: Gate, **request: Any) -> Any:
    answer, changes = live.handle(request)
    assert "ok" in answer, answer
    if changes.plan:
        gate.plan = live.plan  # what the control server does
    return answer["ok"]


def error(live: LiveControl, **request: Any) -> str:
    answer, changes = live.handle(request)
    assert "error" in answer and not changes.plan and not changes.decided, answer
    assert "\n" not in answer["error"]
    return str(answer["error"])


def test_without_breakpoints_every_frame_is_forwarded_whole() -> None:
    _live, gate = control()
    assert gate.judged("c2a") and gate.judged("a2c")  # ready for a breakpoint from the start
    assert Playbook(gate) >> Chunk("c2a", prompt(1)) << Forward("c2a", prompt(1))


def held_note(point: int = 1, hold: int = 1) -> dict[str, Any]:
    note = f"held by breakpoint {point} (acp-proxy ctl); forwarded only if released"
    return {"forwarded": 0, "note": note, "hold": hold}


def test_a_breakpoint_holds_the_frame_the_frames_behind_it_queue_the_other_direction_flows() -> None:
    live, gate = control()
    assert ok(live, gate, op="break", filter="method:session/update") == {"id": 1, "filter": "method:session/update"}
    first, second = update("one"), update("two")
    # Each held frame is recorded at once, not forwarded, with its hold's time as its key
    # (the breakpoint's own record took the clock's 2 s).
    assert (
        Playbook(gate)
        >> Chunk("a2c", first + second)
        << Note("a2c", as_line(first), held_note(), 3_000_000_000)
        << Note("a2c", as_line(second), held_note(hold=2), 4_000_000_000)  # recorded before the wait
        << Hold("a2c", as_line(first), 1)
        << Hold("a2c", as_line(second), 2)
        >> Chunk("c2a", prompt(3))
        << Forward("c2a", prompt(3))
    )
    held = ok(live, gate, op="held")
    assert [(h["hold"], h["ts_ns"], h["dir"], h["method"], h["kind"]) for h in held] == [
        (1, 3_000_000_000, "a2c", "session/update", "notification"),
        (2, 4_000_000_000, "a2c", "session/update", "notification"),
    ]
    assert json.loads(held[0]["frame"]) == json.loads(first)


def test_two_holds_in_one_instant_get_distinct_keys() -> None:
    live = LiveControl(None, lambda: 5)
    gate = Gate(plan=None, clock=lambda: 5, live=live)
    ok(live, gate, op="break", filter="dir:a2c")
    steps = gate.chunk("a2c", update("one") + update("two"))
    keys = [s.ts_ns for s in steps if isinstance(s, Note)]
    assert keys == [5, 6]


def test_release_forwards_a_copy_and_records_how_long_it_was_held() -> None:
    live, gate = control()
    ok(live, gate, op="break", filter="method:session/update")
    steps = gate.chunk("a2c", update("one"))
    assert steps == [
        Note("a2c", as_line(update("one")), held_note(), 3_000_000_000),
        Hold("a2c", as_line(update("one")), 1),
    ]
    assert live.take(1) is None  # not decided yet: the direction keeps waiting
    assert ok(live, gate, op="release", hold=1) == {"released": 1}
    decision = live.take(1)
    assert decision is not None and decision.held_ns == 1_000_000_000
    assert gate.released(steps[1], decision) == [  # type: ignore[arg-type]
        Note(
            "a2c",
            as_line(update("one")),
            {
                "forwarded": 1,
                "note": "released by acp-proxy ctl after it was held 1.000s by a breakpoint",
                "control": 2,  # the release (the breakpoint was action 1): the recorder links them
            },
        ),
        Send("a2c", update("one")),
    ]
    assert ok(live, gate, op="held") == []


def test_release_with_an_edited_frame_records_the_edit_after_the_held_original() -> None:
    live, gate = control()
    ok(live, gate, op="break", filter="method:session/update")
    (_note, hold) = gate.chunk("a2c", update("one"))
    edited = update("EDITED")
    ok(live, gate, op="release", hold=1, **{"with": edited.decode()})
    decision = live.take(1)
    assert decision is not None
    assert gate.released(hold, decision) == [  # type: ignore[arg-type]
        Note(
            "a2c",
            as_line(edited),
            {
                "origin": "proxy",
                "note": "edited by acp-proxy ctl in place of a frame held 1.000s by a breakpoint",
                "control": 2,
                "forwarded": 1,
            },
        ),
        Send("a2c", edited),
    ]


def test_a_released_frame_meets_the_fault_rules_in_force_then() -> None:
    """Breakpoints first, faults on what is finally forwarded: a rule added while the frame
    was held applies to it, to the edit as to the original."""
    live, gate = control()
    ok(live, gate, op="break", filter="method:session/prompt")
    (_n1, first) = gate.chunk("c2a", prompt(1))
    (_n2, second) = gate.chunk("c2a", prompt(2))
    ok(live, gate, op="fault-add", rule="drop if method:session/prompt")
    ok(live, gate, op="release", hold=1)
    ok(live, gate, op="release", hold=2, **{"with": prompt(2, "edited").decode()})
    origins = []
    for hold in (first, second):
        decision = live.take(hold.number)  # type: ignore[union-attr]
        assert decision is not None
        steps = gate.released(hold, decision)  # type: ignore[arg-type]
        assert not any(isinstance(s, Send) for s in steps)  # dropped by the rule
        (note,) = steps
        assert isinstance(note, Note) and note.meta["fault"] == "drop" and note.meta["forwarded"] == 0
        assert note.meta["note"].startswith(("released by acp-proxy ctl", "edited by acp-proxy ctl"))
        assert note.meta["note"].endswith("dropped")
        origins.append(note.meta["origin"])
    assert origins == [None, "proxy"]


def test_drop_adds_nothing_the_held_row_is_the_one_not_forwarded() -> None:
    live, gate = control()
    ok(live, gate, op="break", filter="dir:c2a")
    (_note, hold) = gate.chunk("c2a", prompt(1))
    assert ok(live, gate, op="drop", hold=1) == {"dropped": 1}
    decision = live.take(1)
    assert decision is not None
    assert gate.released(hold, decision) == []  # type: ignore[arg-type]


def test_send_writes_a_request_with_an_id_of_the_proxys_own_and_keeps_its_answer() -> None:
    live, gate = control()
    ok(live, gate, op="break", filter="dir:a2c")  # the answer is kept before any breakpoint
    answer, changes = live.handle({"op": "send", "to": "agent", "frame": prompt(1, "again").decode()})
    assert answer == {"ok": {"sent": "agent", "id": "acp-proxy-ctl-1", "method": "session/prompt"}}
    ((direction, data, note, number),) = changes.send
    assert direction == "c2a" and json.loads(data)["id"] == "acp-proxy-ctl-1" and "sent by acp-proxy ctl" in note
    assert [c["action"] for c in changes.control] == ["send"] and changes.control[0]["number"] == number == 2
    steps = gate.sent(direction, data, note, number)
    meta = {"forwarded": 1, "origin": "proxy", "note": note, "control": 2}
    assert steps == [
        Note("c2a", Line(data, len(data), True, False), meta),
        Send("c2a", data + b"\n"),
    ]
    reply = line({"jsonrpc": "2.0", "id": "acp-proxy-ctl-1", "result": {"stopReason": "end_turn"}})
    kept = "the answer to a request acp-proxy ctl sent: kept by the proxy, not forwarded"
    assert gate.chunk("a2c", reply) == [Note("a2c", as_line(reply), {"forwarded": 0, "note": kept})]
    assert ok(live, gate, op="sent") == [
        {
            "id": "acp-proxy-ctl-1",
            "to": "agent",
            "method": "session/prompt",
            "resend_of": None,
            "answered": True,
            "answer": reply.decode().rstrip("\n"),
        }
    ]
    # The peer's own id 1 is not the proxy's: its answer is the client's, as always.
    assert gate.chunk("a2c", line({"jsonrpc": "2.0", "id": 1, "result": {}}))[1].__class__ is Hold


def test_a_resend_is_a_send_that_names_its_original_notifications_keep_no_id() -> None:
    live, gate = control()
    _answer, changes = live.handle({"op": "send", "to": "agent", "frame": prompt(7).decode(), "resend_of": 7})
    assert "resent by acp-proxy ctl (frame 7 again)" in changes.send[0][2]
    assert ok(live, gate, op="send", to="client", frame=update("x").decode()) == {
        "sent": "client",
        "id": None,
        "method": "session/update",
    }


def test_clear_removes_breakpoints_and_releases_nothing_held() -> None:
    live, gate = control()
    ok(live, gate, op="break", filter="dir:a2c")
    gate.chunk("a2c", update("one"))
    assert ok(live, gate, op="clear") == {"removed": [1], "still_held": [1]}
    assert gate.chunk("a2c", update("two")) == [Forward("a2c", update("two"))]
    assert [h["hold"] for h in ok(live, gate, op="held")] == [1]
    assert ok(live, gate, op="breaks") == []


def test_a_fault_added_at_run_time_applies_from_the_next_frame_and_removing_it_stops_it() -> None:
    live, gate = control()
    assert gate.chunk("c2a", prompt(1)) == [Forward("c2a", prompt(1))]
    added = ok(live, gate, op="fault-add", rule="error if method:session/prompt")
    assert added == {"id": 1, "rule": "error if method:session/prompt"}
    steps = gate.chunk("c2a", prompt(2))
    sent = [s for s in steps if isinstance(s, Send)]
    assert [s.direction for s in sent] == ["a2c"]  # answered with an error, never forwarded
    assert json.loads(sent[0].data)["id"] == 2 and "error" in json.loads(sent[0].data)
    listed = ok(live, gate, op="fault-list")
    assert [(r["id"], r["source"], r["added_ns"] > 0) for r in listed] == [(1, "ctl", True)]
    assert ok(live, gate, op="fault-remove", id=1) == {"removed": 1}
    assert gate.chunk("c2a", prompt(3)) == [Forward("c2a", prompt(3))]
    spec = live.spec()
    assert spec["rules"] == [] and [r["id"] for r in spec["runtime"]] == [1]
    assert spec["runtime"][0]["removed_ns"] > spec["runtime"][0]["added_ns"]


def test_a_rule_keeps_its_counters_when_other_rules_come_and_go() -> None:
    live, gate = control(FaultPlan.build(["drop nth=2 if method:session/prompt"], seed=7))
    assert gate.chunk("c2a", prompt(1)) == [Forward("c2a", prompt(1))]  # its first match
    ok(live, gate, op="fault-add", rule="delay=1ms if method:session/update")
    ok(live, gate, op="fault-clear")
    steps = gate.chunk("c2a", prompt(2))  # its second match, counted across two rebuilds
    assert not any(isinstance(s, Send | Forward) for s in steps)
    assert steps[0].meta["fault"] == "drop"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("request_", "says"),
    [
        ({"op": "fault-add", "rule": "explode if dir:c2a"}, "explode"),
        ({"op": "fault-remove", "id": 4}, "no run-time fault rule 4"),
        ({"op": "break", "filter": "method:("}, ""),
        ({"op": "release", "hold": 9}, "hold 9 is not held (holds: none)"),
        ({"op": "drop", "hold": 9}, "hold 9 is not held"),
        ({"op": "release"}, "needs hold"),
        ({"op": "send", "to": "editor", "frame": "{}"}, "send needs --to agent or --to client"),
        ({"op": "send", "to": "agent", "frame": "{nope"}, "the frame is not JSON"),
        ({"op": "send", "to": "agent", "frame": "[]"}, "must be a JSON object"),
        ({"op": "send", "to": "agent", "frame": '{"jsonrpc": "2.0"}'}, "neither a request"),
        ({"op": "send", "to": "agent"}, "needs frame"),
        ({"op": "launch"}, "unknown control request 'launch'"),
    ],
)
def test_bad_requests_are_one_line_and_change_nothing(request_: dict[str, Any], says: str) -> None:
    live, _gate = control()
    assert says in error(live, **request_)
    assert live.plan is None and live.breakpoints == []


@pytest.mark.parametrize(("edited", "says"), [("{not json", "--with is not JSON"), ("[1]", "a JSON object")])
def test_a_malformed_edited_frame_is_refused_and_the_frame_stays_held(edited: str, says: str) -> None:
    live, gate = control()
    ok(live, gate, op="break", filter="dir:c2a")
    gate.chunk("c2a", prompt(1))
    assert says in error(live, op="release", hold=1, **{"with": edited})
    assert [h["hold"] for h in ok(live, gate, op="held")] == [1]
    assert ok(live, gate, op="release", hold=1) == {"released": 1}
    assert "hold 1 is not held" in error(live, op="release", hold=1)


def recorded(seq: int, direction: str, data: bytes, forwarded: int = 1, origin: str | None = None) -> FrameRecord:
    body = data.rstrip(b"\n")
    rec = FrameRecord(1, seq, seq, direction, body, wire.decode(body))
    rec.forwarded = forwarded
    rec.origin = origin
    return rec


def test_pairing_follows_what_was_forwarded_a_released_copy_or_edit_takes_the_held_requests_place() -> None:
    """What the recorder's tracker makes of a held request (not forwarded) and its released
    edit with the same id: no "id reused", the answer pairs with the edit, nothing unanswered."""
    tracker = Tracker(1)
    init = line({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}})
    ready = line({"jsonrpc": "2.0", "id": 0, "result": {"protocolVersion": 1}})
    held, edit = recorded(3, "c2a", prompt(1), forwarded=0), recorded(4, "c2a", prompt(1, "edited"))
    answer = recorded(5, "a2c", line({"jsonrpc": "2.0", "id": 1, "result": {"stopReason": "end_turn"}}))
    for rec in (recorded(1, "c2a", init), recorded(2, "a2c", ready), held, edit, answer):
        tracker.observe(rec)
    tracker.finish(10)
    assert not (edit.note or "").count("id reused")
    assert answer.request_seq == 4 and answer.method == "session/prompt"


def test_the_answer_to_a_request_the_proxy_sent_is_not_withheld_from_anyone() -> None:
    tracker = Tracker(1)
    sent = recorded(1, "c2a", prompt(1).replace(b'"id":1', b'"id":"acp-proxy-ctl-1"'), origin="proxy")
    reply = line({"jsonrpc": "2.0", "id": "acp-proxy-ctl-1", "result": {"stopReason": "end_turn"}})
    answer = recorded(2, "a2c", reply, forwarded=0)
    for rec in (sent, answer):
        tracker.observe(rec)
    assert answer.request_seq == 1 and "unanswered" not in (answer.note or "")


def test_a_held_prompt_released_as_an_edit_is_one_turn_begun_by_the_held_prompt() -> None:
    state = ConnectionState()
    init = line({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}})
    ready = line({"jsonrpc": "2.0", "id": 0, "result": {"protocolVersion": 1}})
    new = line({"jsonrpc": "2.0", "id": 9, "method": "session/new", "params": {"cwd": "/", "mcpServers": []}})
    opened = line({"jsonrpc": "2.0", "id": 9, "result": {"sessionId": S}})
    answer = line({"jsonrpc": "2.0", "id": 1, "result": {"stopReason": "end_turn"}})
    frames = [
        *(recorded(1, "c2a", init), recorded(2, "a2c", ready), recorded(3, "c2a", new), recorded(4, "a2c", opened)),
        *(recorded(5, "c2a", prompt(1), forwarded=0), recorded(6, "c2a", prompt(1, "edited"))),
        recorded(7, "a2c", answer),
    ]
    turns = [(f.seq, type(e).__name__) for f in frames for e in state.feed(f) if "Turn" in type(e).__name__]
    assert turns == [(5, "TurnStarted"), (7, "TurnEnded")]
    assert state.finish(100) == ()  # nothing left unfinished
