"""The gate in-process, as a playbook: chunks in, steps out, every fault action and notice stripping.

A ``Playbook`` is a script of what the relay hands the gate (``>> Chunk(...)``, ``>> End(...)``)
and the exact steps it must answer with (``<< Forward(...)``, ``<< Send(...)``, ``<< Note(...)``,
``<< Pause(...)``, ``<< Signal(...)``, ``<< ClosePipe(...)``); ``assert playbook`` plays it and says
where the gate's answer went another way. The subprocess tests (``test_faults_e2e.py``) are then
for the relay only: that it carries the steps out on real pipes.
"""

from __future__ import annotations

import json
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from acp_proxy.faults import plan as fl
from acp_proxy.faults.gate import ClosePipe, Forward, Gate, Note, Pause, Send, Signal, Step
from acp_proxy.protocol.framing import Line

S = "sess_1"


@dataclass(frozen=True)
class Chunk:
    """Bytes the relay read from ``direction``'s sender."""

    direction: str
    data: bytes


@dataclass(frozen=True)
class End:
    """``direction``'s sender closed its end."""

    direction: str


class Playbook:
    """Events in (``>>``), expected steps out (``<<``), in order; ``bool()`` plays it."""

    def __init__(self, gate: Gate) -> None:
        self.gate = gate
        self.script: list[tuple[str, Any]] = []
        self.played: list[str] = []

    def __rshift__(self, event: Chunk | End) -> Playbook:
        self.script.append(("in", event))
        return self

    def __lshift__(self, step: Step) -> Playbook:
        self.script.append(("out", step))
        return self

    def __bool__(self) -> bool:
        expected: list[Step] = []
        actual: list[Step] = []
        for kind, item in self.script:
            if kind == "out":
                expected.append(item)
                continue
            steps = (
                self.gate.chunk(item.direction, item.data) if isinstance(item, Chunk) else self.gate.end(item.direction)
            )
            actual.extend(steps)
            self.played.append(f">> {item}")
            self.played.extend(f"<< {s}" for s in steps)
        if expected != actual:
            where = next((i for i, (a, b) in enumerate(zip(expected, actual, strict=False)) if a != b), None)
            if where is None:
                where = min(len(expected), len(actual))
            raise AssertionError(
                "the gate answered otherwise at step {}:\n  expected {}\n  got      {}\nplayed:\n  {}".format(
                    where,
                    expected[where] if where < len(expected) else "(nothing more)",
                    actual[where] if where < len(actual) else "(nothing more)",
                    "\n  ".join(self.played),
                )
            )
        return True


# -- frames --------------------------------------------------------------------------------------


def frame(message: dict[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode() + b"\n"


def req(i: int, method: str, params: dict[str, Any] | None = None) -> bytes:
    return frame({"jsonrpc": "2.0", "id": i, "method": method, "params": params or {}})


def res(i: int, result: Any) -> bytes:
    return frame({"jsonrpc": "2.0", "id": i, "result": result})


def upd(body: dict[str, Any]) -> bytes:
    return frame({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": S, "update": body}})


PROMPT = req(2, "session/prompt", {"sessionId": S, "prompt": [{"type": "text", "text": "hi"}]})
ANSWER = res(2, {"stopReason": "end_turn"})
CHUNK = upd({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "hello"}})
NOTICE = upd({"sessionUpdate": "notice", "severity": "info", "title": "Rate limit"})
LOAD = req(3, "session/load", {"sessionId": S, "cwd": "/w", "mcpServers": []})
LOADED = res(3, {})


def line(data: bytes) -> Line:
    body = data[:-1] if data.endswith(b"\n") else data
    return Line(body, len(body), data.endswith(b"\n"), False)


class Clock:
    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        self.now += 1_000_000
        return self.now


def gate(*rules: str, strip: bool = False) -> Gate:
    plan = fl.FaultPlan.build(rules, seed=7) if rules else None
    return Gate(strip_replayed_notices=strip, plan=plan, clock=Clock())


def meta(rule: str, action: str, *, forwarded: int = 1, note: str | None = None, detail: str = "") -> dict[str, Any]:
    """What the gate tells the recorder about a frame one rule's action was applied to."""
    out: dict[str, Any] = {
        "forwarded": forwarded,
        "fault": action,
        "faults": [{"rule": rule, "action": action, "detail": detail}],
    }
    if note is not None:
        out["note"] = note
    return out


# -- forwarding without faults --------------------------------------------------------------------


def test_no_rule_touches_a_direction_so_its_chunks_go_as_read() -> None:
    g = gate("drop if dir:a2c kind:response")
    half = PROMPT[:10]
    assert (
        Playbook(g)
        >> Chunk("c2a", half)
        << Forward("c2a", half)  # not judged: forwarded at once, even mid-line
        >> Chunk("c2a", PROMPT[10:])
        << Forward("c2a", PROMPT[10:])
    )
    # ...and still observed: the response pairs with that prompt.
    assert g.tracker.state.replaying() is False
    rec_steps = g.chunk("a2c", ANSWER)
    assert rec_steps == [
        Note("a2c", line(ANSWER), meta("drop if dir:a2c kind:response", "drop", forwarded=0, note="dropped"))
    ]


def test_plain_lines_of_a_judged_direction_go_out_as_one_write() -> None:
    g = gate("drop if method:nothing/here")
    both = CHUNK + CHUNK
    assert Playbook(g) >> Chunk("a2c", both) << Forward("a2c", both)


def test_a_line_split_across_reads_is_judged_whole() -> None:
    g = gate("drop if dir:a2c")
    rule = "drop if dir:a2c"
    assert (
        Playbook(g)
        >> Chunk("a2c", CHUNK[:7])
        >> Chunk("a2c", CHUNK[7:])
        << Note("a2c", line(CHUNK), meta(rule, "drop", forwarded=0, note="dropped"))
    )


def test_an_unterminated_last_line_is_judged_at_the_end() -> None:
    rule = "drop if dir:a2c"
    g = gate(rule)
    tail = CHUNK[:-1]
    assert (
        Playbook(g)
        >> Chunk("a2c", tail)
        >> End("a2c")
        << Note("a2c", line(tail), meta(rule, "drop", forwarded=0, note="dropped"))
    )


# -- every fault action --------------------------------------------------------------------------


def test_drop_the_answer_to_a_prompt_a_fact_only_pairing_knows() -> None:
    rule = "drop if method:session/prompt kind:response"
    g = gate(rule)
    assert (
        Playbook(g)
        >> Chunk("c2a", PROMPT)
        << Forward("c2a", PROMPT)
        >> Chunk("a2c", CHUNK + ANSWER)
        << Forward("a2c", CHUNK)
        << Note("a2c", line(ANSWER), meta(rule, "drop", forwarded=0, note="dropped"))
    )


def test_delay_pauses_then_writes() -> None:
    rule = "delay=300ms if update:agent_message_chunk"
    g = gate(rule)
    assert (
        Playbook(g)
        >> Chunk("a2c", CHUNK)
        << Pause(0.3)
        << Note("a2c", line(CHUNK), meta(rule, "delay", detail="300ms"))  # recorded before it is written
        << Send("a2c", CHUNK)
    )


def test_duplicate_writes_copies() -> None:
    rule = "duplicate=2 if update:agent_message_chunk"
    g = gate(rule)
    assert (
        Playbook(g)
        >> Chunk("a2c", CHUNK)
        << Note("a2c", line(CHUNK), meta(rule, "duplicate", note="written 3 times", detail="2 extra"))
        << Send("a2c", CHUNK)
        << Send("a2c", CHUNK)
        << Send("a2c", CHUNK)
    )


def test_reorder_holds_a_frame_until_the_next_one_has_gone() -> None:
    rule = "reorder if update:agent_message_chunk nth=1"
    g = gate(rule)
    assert (
        Playbook(g)
        >> Chunk("a2c", CHUNK)  # held
        >> Chunk("a2c", ANSWER)
        << Forward("a2c", ANSWER)
        << Note("a2c", line(CHUNK), meta(rule, "reorder"))
        << Send("a2c", CHUNK)
    )
    # A frame still held when its direction ends goes out then.
    g = gate(rule)
    assert (
        Playbook(g)
        >> Chunk("a2c", CHUNK)
        >> End("a2c")
        << Note("a2c", line(CHUNK), meta(rule, "reorder"))
        << Send("a2c", CHUNK)
    )


def test_corrupt_and_truncate_replace_the_bytes() -> None:
    rule = "corrupt if update:agent_message_chunk"
    corrupted = fl.corrupt_line(CHUNK[:-1]) + b"\n"
    assert corrupted != CHUNK and len(corrupted) == len(CHUNK)
    assert (
        Playbook(gate(rule))
        >> Chunk("a2c", CHUNK)
        << Note(
            "a2c",
            line(CHUNK),
            meta(rule, "corrupt", note="forwarded corrupted", detail=f"byte {corrupted.index(0x1A)} -> 0x1a"),
        )
        << Send("a2c", corrupted)
    )
    rule = "truncate=10 if update:agent_message_chunk"
    assert (
        Playbook(gate(rule))
        >> Chunk("a2c", CHUNK)
        << Note("a2c", line(CHUNK), meta(rule, "truncate", note="forwarded truncated", detail="kept 10 bytes"))
        << Send("a2c", CHUNK[:10] + b"\n")
    )


def test_split_writes_one_line_in_pieces() -> None:
    rule = "split=3@5ms if update:agent_message_chunk"
    third = len(CHUNK) // 3
    parts = fl._cut(CHUNK, 3)
    assert b"".join(parts) == CHUNK and len(parts[0]) >= third
    assert (
        Playbook(gate(rule))
        >> Chunk("a2c", CHUNK)
        << Note("a2c", line(CHUNK), meta(rule, "split", detail="3 writes, 5ms apart"))
        << Send("a2c", parts[0])
        << Pause(0.005)
        << Send("a2c", parts[1])
        << Pause(0.005)
        << Send("a2c", parts[2])
    )


def test_error_answers_a_request_back_to_its_sender() -> None:
    rule = 'error=-32000:"Authentication required" if method:session/prompt kind:request'
    reply = fl.error_line("2", -32000, "Authentication required")
    assert (
        Playbook(gate(rule))
        >> Chunk("c2a", PROMPT)
        << Note(
            "c2a",
            line(PROMPT),
            meta(
                rule,
                "error",
                forwarded=0,
                note="answered with an error by acp-proxy",
                detail="reply " + reply.decode().strip(),
            ),
        )
        << Note(
            "a2c",
            line(reply),
            {
                "forwarded": 1,
                "fault": "error",
                "origin": "proxy",
                "note": f"error reply sent by acp-proxy (rule 1: {rule})",
            },
        )
        << Send("a2c", reply)
    )


def test_error_replaces_a_response() -> None:
    rule = "error if method:session/prompt kind:response"
    replaced = fl.error_line("2", -32603, "Internal error")
    assert (
        Playbook(gate(rule))
        >> Chunk("c2a", PROMPT)
        << Forward("c2a", PROMPT)
        >> Chunk("a2c", ANSWER)
        << Note(
            "a2c",
            line(ANSWER),
            meta(rule, "error", note="result replaced by an error", detail="replace " + replaced.decode().strip()),
        )
        << Send("a2c", replaced)
    )


def test_inject_before_and_after() -> None:
    stray = b"Loading model..."
    for position in ("before", "after"):
        rule = f"inject='{stray.decode()}' {position} if kind:response"
        proxy_note = Note(
            "a2c",
            line(stray + b"\n"),
            {"forwarded": 1, "fault": "inject", "origin": "proxy", "note": f"injected by acp-proxy (rule 1: {rule})"},
        )
        own = Note("a2c", line(ANSWER), meta(rule, "inject", detail=f"{position}: {stray.decode()}"))
        book = Playbook(gate(rule)) >> Chunk("c2a", PROMPT) << Forward("c2a", PROMPT) >> Chunk("a2c", ANSWER)
        if position == "before":
            book = book << proxy_note << Send("a2c", stray + b"\n") << own << Send("a2c", ANSWER)
        else:
            book = book << own << Send("a2c", ANSWER) << proxy_note << Send("a2c", stray + b"\n")
        assert book


def test_kill_signals_the_agent_and_still_forwards_the_frame() -> None:
    rule = "kill=SIGTERM if update:agent_message_chunk"
    assert (
        Playbook(gate(rule))
        >> Chunk("a2c", CHUNK)
        << Signal(signal.SIGTERM)
        << Note("a2c", line(CHUNK), meta(rule, "kill", detail="SIGTERM"))
        << Send("a2c", CHUNK)
    )


def test_close_the_frames_own_pipe_then_nothing_more_reaches_it() -> None:
    rule = "close if update:agent_message_chunk nth=1"
    assert (
        Playbook(gate(rule))
        >> Chunk("a2c", CHUNK)
        << ClosePipe("client-stdout")
        << Note(
            "a2c", line(CHUNK), meta(rule, "close", forwarded=0, note="its pipe was closed", detail="client-stdout")
        )
        >> Chunk("a2c", ANSWER)
        << Note("a2c", line(ANSWER), {"forwarded": 0, "note": "pipe closed by a fault"})
    )


def test_close_the_other_pipe_forwards_the_frame() -> None:
    rule = "close=agent-stdin if update:agent_message_chunk"
    assert (
        Playbook(gate(rule))
        >> Chunk("a2c", CHUNK)
        << ClosePipe("agent-stdin")
        << Note("a2c", line(CHUNK), meta(rule, "close", detail="agent-stdin"))
        << Send("a2c", CHUNK)
    )


def test_stall_stops_a_direction_for_good() -> None:
    rule = "stall if kind:request dir:c2a"
    assert (
        Playbook(gate(rule))
        >> Chunk("c2a", PROMPT)
        << Note("c2a", line(PROMPT), meta(rule, "stall", forwarded=0, note="c2a stalled", detail="c2a"))
        >> Chunk("c2a", LOAD)
        << Note("c2a", line(LOAD), {"forwarded": 0, "note": "direction stalled by a fault"})
    )


# -- notice stripping ----------------------------------------------------------------------------


def test_replayed_notices_are_stripped_only_inside_the_replay_window() -> None:
    stripped = Note("a2c", line(NOTICE), {"forwarded": 0, "note": "stripped: notice inside replay window"})
    assert (
        Playbook(gate(strip=True))
        >> Chunk("c2a", LOAD)
        << Forward("c2a", LOAD)  # the client's side is not judged: only observed
        >> Chunk("a2c", CHUNK + NOTICE + CHUNK)
        << Forward("a2c", CHUNK)
        << stripped
        << Forward("a2c", CHUNK)
        >> Chunk("a2c", LOADED + NOTICE)
        << Forward("a2c", LOADED + NOTICE)  # the window closed with the answer: a live notice
    )


def test_without_the_option_a_replayed_notice_is_forwarded() -> None:
    g = gate("drop if method:nothing/here")
    assert Playbook(g) >> Chunk("c2a", LOAD) << Forward("c2a", LOAD) >> Chunk("a2c", NOTICE) << Forward("a2c", NOTICE)


def test_a_resume_without_replay_opens_no_window() -> None:
    resume = req(4, "session/resume", {"sessionId": S, "cwd": "/w"})
    replaying = req(5, "session/resume", {"sessionId": S, "cwd": "/w", "replayFrom": {"type": "start"}})
    stripped = Note("a2c", line(NOTICE), {"forwarded": 0, "note": "stripped: notice inside replay window"})
    assert (
        Playbook(gate(strip=True))
        >> Chunk("c2a", resume)
        << Forward("c2a", resume)
        >> Chunk("a2c", NOTICE)
        << Forward("a2c", NOTICE)
        >> Chunk("c2a", replaying)
        << Forward("c2a", replaying)
        >> Chunk("a2c", NOTICE)
        << stripped
    )


def test_a_fault_and_stripping_together_strip_first() -> None:
    rule = "delay=1s if update:notice"
    stripped = Note("a2c", line(NOTICE), {"forwarded": 0, "note": "stripped: notice inside replay window"})
    g = Gate(strip_replayed_notices=True, plan=fl.FaultPlan.build([rule], seed=7), clock=Clock())
    assert Playbook(g) >> Chunk("c2a", LOAD) << Forward("c2a", LOAD) >> Chunk("a2c", NOTICE) << stripped


@pytest.mark.parametrize("rule", ["split=3", "duplicate", "corrupt", "delay=1ms", "split=2 if kind:notification"])
def test_a_fault_on_an_unterminated_last_line_adds_no_newline(rule: str) -> None:
    # The agent's last line had no newline: whatever a fault writes in its place has none either.
    last = CHUNK[:-1]
    g = gate(rule if " if " in rule else f"{rule} if dir:a2c")
    steps = [*g.chunk("a2c", CHUNK + last), *g.end("a2c")]
    written = b"".join(s.data for s in steps if isinstance(s, (Send, Forward)))
    assert not written.endswith(b"\n"), written[-40:]


def test_the_example_file_splits_the_second_permission_request_as_it_says() -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "faults.toml"
    g = Gate(strip_replayed_notices=False, plan=fl.FaultPlan.build((), example), clock=Clock())
    permission = {"sessionId": S, "toolCall": {"toolCallId": "t"}, "options": []}
    traffic = [
        ("a2c", req(1, "session/request_permission", permission)),
        ("c2a", res(1, {"outcome": {"outcome": "cancelled"}})),
        ("a2c", req(2, "session/request_permission", permission)),
        ("c2a", res(2, {"outcome": {"outcome": "cancelled"}})),
    ]
    split = []
    for direction, data in traffic:
        steps = g.chunk(direction, data)
        if any(isinstance(step, Pause) for step in steps):
            split.append(data)
    assert split == [traffic[2][1]]
