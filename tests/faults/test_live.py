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
from acp_proxy.protocol.framing import Line
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


def test_a_breakpoint_holds_the_frame_the_frames_behind_it_queue_the_other_direction_flows() -> None:
    live, gate = control()
    assert ok(live, gate, op="break", filter="method:session/update") == {"id": 1, "filter": "method:session/update"}
    first, second = update("one"), update("two")
    assert (
        Playbook(gate)
        >> Chunk("a2c", first + second)
        << Hold("a2c", as_line(first), 1)
        << Hold("a2c", as_line(second), 2)
        >> Chunk("c2a", prompt(3))
        << Forward("c2a", prompt(3))
    )
    held = ok(live, gate, op="held")
    assert [(h["seq"], h["dir"], h["method"], h["kind"]) for h in held] == [
        (1, "a2c", "session/update", "notification"),
        (2, "a2c", "session/update", "notification"),
    ]
    assert json.loads(held[0]["frame"]) == json.loads(first)


def test_release_forwards_the_original_and_records_how_long_it_was_held() -> None:
    live, gate = control()
    ok(live, gate, op="break", filter="method:session/update")
    steps = gate.chunk("a2c", update("one"))
    assert steps == [Hold("a2c", as_line(update("one")), 1)]
    assert live.take(1) is None  # not decided yet: the direction keeps waiting
    assert ok(live, gate, op="release", seq=1) == {"released": 1}
    decision = live.take(1)
    assert decision is not None and decision.held_ns == 1_000_000_000
    assert gate.released(steps[0], decision) == [
        Note(
            "a2c",
            as_line(update("one")),
            {"forwarded": 1, "note": "held 1.000s by a breakpoint; released by acp-proxy ctl"},
        ),
        Send("a2c", update("one")),
    ]
    assert ok(live, gate, op="held") == []


def test_release_with_an_edited_frame_records_it_beside_the_original() -> None:
    live, gate = control()
    ok(live, gate, op="break", filter="method:session/update")
    (hold,) = gate.chunk("a2c", update("one"))
    edited = update("EDITED")
    ok(live, gate, op="release", seq=1, **{"with": edited.decode()})
    decision = live.take(1)
    assert decision is not None
    assert gate.released(hold, decision) == [  # type: ignore[arg-type]
        Note(
            "a2c",
            as_line(update("one")),
            {"forwarded": 0, "note": "held 1.000s by a breakpoint; replaced by an edited frame (acp-proxy ctl)"},
        ),
        Note(
            "a2c",
            as_line(edited),
            {"forwarded": 1, "origin": "proxy", "note": "edited by acp-proxy ctl, in place of the frame before"},
        ),
        Send("a2c", edited),
    ]


def test_drop_records_the_frame_and_forwards_nothing() -> None:
    live, gate = control()
    ok(live, gate, op="break", filter="dir:c2a")
    (hold,) = gate.chunk("c2a", prompt(1))
    assert ok(live, gate, op="drop", seq=1) == {"dropped": 1}
    decision = live.take(1)
    assert decision is not None
    assert gate.released(hold, decision) == [  # type: ignore[arg-type]
        Note(
            "c2a", as_line(prompt(1)), {"forwarded": 0, "note": "held 1.000s by a breakpoint; dropped by acp-proxy ctl"}
        )
    ]


def test_clear_removes_breakpoints_and_releases_nothing_held() -> None:
    live, gate = control()
    ok(live, gate, op="break", filter="dir:a2c")
    gate.chunk("a2c", update("one"))
    assert ok(live, gate, op="clear") == {"removed": [1], "still_held": [1]}
    assert gate.chunk("a2c", update("two")) == [Forward("a2c", update("two"))]
    assert [h["seq"] for h in ok(live, gate, op="held")] == [1]
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
        ({"op": "release", "seq": 9}, "frame 9 is not held (held: none)"),
        ({"op": "drop", "seq": 9}, "frame 9 is not held"),
        ({"op": "release"}, "needs seq"),
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
    assert says in error(live, op="release", seq=1, **{"with": edited})
    assert [h["seq"] for h in ok(live, gate, op="held")] == [1]
    assert ok(live, gate, op="release", seq=1) == {"released": 1}
    assert "frame 1 is not held" in error(live, op="release", seq=1)
