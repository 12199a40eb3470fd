"""Fold: conversation state rebuilt from frames, rule by rule as the protocol documents state them.

Tables follow the ACP documents: the v2 draft's ``prompt-lifecycle.md`` (message upserts
and chunks, compaction, usage, state), the v1 and v2 tool-call and plan pages, and the recorded
traffic of real SDK peers in ``fixtures/traffic`` (each folds into what its client printed).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from acp_proxy.read.fold import (
    Call,
    Cancellation,
    Compaction,
    Conversation,
    ErrorResponse,
    Folder,
    FoldInput,
    Message,
    Notice,
    Permission,
    Plan,
    SessionState,
    Subagent,
    Terminal,
    ToolCall,
    Unknown,
    diff_text,
    fold,
    fold_sessions,
    text_of,
)
from tests import v2_traffic

TRAFFIC = Path(__file__).parents[1] / "fixtures" / "traffic"
SID = "sess_abc123def456"

# ---------------------------------------------------------------------------------------------
# Building traffic


def upd(body: dict[str, Any], sid: str = SID) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": sid, "update": body}}


def txt(value: str) -> dict[str, str]:
    return {"type": "text", "text": value}


def texts(blocks: Iterable[Any]) -> list[str]:
    return [b["text"] if isinstance(b, dict) and "text" in b else b for b in blocks]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


class Replay:
    """Marks a step as sent inside a history replay window."""

    def __init__(self, message: dict[str, Any]) -> None:
        self.message = message


def inputs(*steps: Any) -> list[FoldInput]:
    """Steps: a message (agent -> client), ("c2a", message), ("a2c", message), or Replay(message)."""
    out = []
    for seq, step in enumerate(steps, 1):
        replay = None
        if isinstance(step, Replay):
            step, replay = step.message, True
        direction, message = step if isinstance(step, tuple) else ("a2c", step)
        out.append(FoldInput(seq=seq, ts_ns=seq * 1000, dir=direction, message=message, replay=replay))
    return out


def run(*steps: Any, version: int | None = 2) -> Conversation:
    return fold(inputs(*steps), protocol_version=version)


def prompt(rid: int, text: str, sid: str = SID) -> tuple[str, dict[str, Any]]:
    params = {"sessionId": sid, "prompt": [txt(text)]}
    return ("c2a", {"jsonrpc": "2.0", "id": rid, "method": "session/prompt", "params": params})


def response(rid: int, result: Any, direction: str = "a2c") -> tuple[str, dict[str, Any]]:
    return (direction, {"jsonrpc": "2.0", "id": rid, "result": result})


def am(mid: str, content: Any = ..., meta: Any = ..., kind: str = "agent_message") -> dict[str, Any]:
    body: dict[str, Any] = {"sessionUpdate": kind, "messageId": mid}
    if content is not ...:
        body["content"] = [txt(c) for c in content] if isinstance(content, list) else content
    if meta is not ...:
        body["_meta"] = meta
    return upd(body)


def ac(mid: str | None, text: str, kind: str = "agent_message_chunk", meta: Any = ...) -> dict[str, Any]:
    body: dict[str, Any] = {"sessionUpdate": kind, "content": txt(text)}
    if mid is not None:
        body["messageId"] = mid
    if meta is not ...:
        body["_meta"] = meta
    return upd(body)


def tcu(tool_call_id: str = "call_1", variant: str = "tool_call_update", **fields: Any) -> dict[str, Any]:
    return upd({"sessionUpdate": variant, "toolCallId": tool_call_id, **fields})


def tcc(tool_call_id: str, text: str, **extra: Any) -> dict[str, Any]:
    item = {"type": "content", "content": txt(text)}
    return upd({"sessionUpdate": "tool_call_content_chunk", "toolCallId": tool_call_id, "content": item, **extra})


def item(text: str) -> dict[str, Any]:
    return {"type": "content", "content": txt(text)}


def only(conv: Conversation, cls: type) -> Any:
    found = conv.of(cls)
    assert len(found) == 1, found
    return found[0]


# ---------------------------------------------------------------------------------------------
# Message upserts and chunks (prompt-lifecycle.md, "Agent Reports Output"; v2 message-updates RFD)

MESSAGE_RULES = [
    # The seed document's example: [A] + chunk B -> [A, B]; then [C] -> [C]; chunks append to [C].
    ("update [A] then chunk B renders [A, B]", [am("m1", ["A"]), ac("m1", "B")], ["A", "B"]),
    (
        "a later update [C] replaces content and chunks",
        [am("m1", ["A"]), ac("m1", "B"), am("m1", ["C"])],
        ["C"],
    ),
    (
        "a chunk after [C] appends to it",
        [am("m1", ["A"]), ac("m1", "B"), am("m1", ["C"]), ac("m1", "D")],
        ["C", "D"],
    ),
    ("chunks then an update: the update replaces", [ac("m1", "A"), ac("m1", "B"), am("m1", ["C"])], ["C"]),
    ("chunks alone accumulate", [ac("m1", "A"), ac("m1", "B"), ac("m1", "C")], ["A", "B", "C"]),
    ("omitted content leaves content unchanged", [am("m1", ["A"]), am("m1", meta={"k": 1})], ["A"]),
    ("omitted content after chunks leaves them", [ac("m1", "A"), am("m1", meta={"k": 1})], ["A"]),
    ("content null clears", [am("m1", ["A"]), ac("m1", "B"), am("m1", None)], []),
    ("content [] clears", [am("m1", ["A"]), ac("m1", "B"), am("m1", [])], []),
    ("a chunk after a clear appends to nothing", [am("m1", ["A"]), am("m1", None), ac("m1", "B")], ["B"]),
    ("a first update without content starts empty", [am("m1")], []),
    ("a first update with null content starts empty", [am("m1", None)], []),
    ("an update with several blocks replaces with all", [ac("m1", "A"), am("m1", ["B", "C"])], ["B", "C"]),
]


@pytest.mark.parametrize(
    ("kind", "role"), [("agent_message", "agent"), ("agent_thought", "thought"), ("user_message", "user")]
)
@pytest.mark.parametrize(("name", "steps", "expected"), MESSAGE_RULES, ids=[r[0] for r in MESSAGE_RULES])
def test_message_upsert_and_chunk_rules(
    name: str, steps: list[dict], expected: list[str], kind: str, role: str
) -> None:
    # The same rules hold for user messages, agent messages and thoughts.
    def retarget(frame: dict) -> dict:
        frame = json.loads(json.dumps(frame))
        body = frame["params"]["update"]
        body["sessionUpdate"] = body["sessionUpdate"].replace("agent_message", kind)
        return frame

    conv = run(*(retarget(s) for s in steps))
    msg = only(conv, Message)
    assert (msg.role, msg.message_id) == (role, "m1")
    assert texts(msg.content) == expected


META_RULES = [
    ("an update's _meta is the message's", [am("m1", ["A"], meta={"a": 1})], {"a": 1}),
    (
        "a chunk's _meta is chunk-scoped",
        [am("m1", ["A"], meta={"a": 1}), ac("m1", "B", meta={"b": 2})],
        {"a": 1},
    ),
    ("a chunk's _meta never becomes the message's", [ac("m1", "A", meta={"b": 2})], None),
    ("omitted _meta leaves it", [am("m1", ["A"], meta={"a": 1}), am("m1", ["B"])], {"a": 1}),
    ("_meta null clears", [am("m1", ["A"], meta={"a": 1}), am("m1", meta=None)], None),
    ("a concrete _meta replaces", [am("m1", meta={"a": 1}), am("m1", meta={"c": 3})], {"c": 3}),
]


@pytest.mark.parametrize(("name", "steps", "expected"), META_RULES, ids=[r[0] for r in META_RULES])
def test_message_meta_rules(name: str, steps: list[dict], expected: Any) -> None:
    assert only(run(*steps), Message).meta == expected


def test_message_position_is_fixed_by_first_sighting() -> None:
    conv = run(ac("m1", "A"), tcu("call_1", title="t"), ac("m2", "X"), am("m1", ["B"]), ac("m1", "C"))
    assert [(e.entity, getattr(e, "message_id", None)) for e in conv.timeline] == [
        ("message", "m1"),
        ("tool_call", None),
        ("message", "m2"),
    ]
    m1 = conv.message("m1")
    assert m1 is not None
    assert texts(m1.content) == ["B", "C"]
    assert (m1.seq, m1.updated_seq, m1.chunks) == (1, 5, 2)


def test_changed_message_id_is_a_new_message() -> None:
    conv = run(ac("m1", "A"), ac("m2", "B"), ac("m1", "C"))
    assert [(m.message_id, texts(m.content)) for m in conv.messages] == [("m1", ["A", "C"]), ("m2", ["B"])]


def test_message_ids_are_scoped_by_role() -> None:
    conv = run(ac("x", "said"), ac("x", "thought", kind="agent_thought_chunk"))
    assert [(m.role, m.text) for m in conv.messages] == [("agent", "said"), ("thought", "thought")]


# v1 chunks (prompt-turn.mdx, message-id RFD): without ids, consecutive chunks of one kind are one
# message and a new timeline entry (another kind, a tool call, ...) ends it; with ids, the id decides.
TOOL = upd({"sessionUpdate": "tool_call", "toolCallId": "call_1", "title": "Read", "kind": "read"})
PLAN = upd({"sessionUpdate": "plan", "entries": [{"content": "x", "priority": "high", "status": "pending"}]})
USAGE = upd({"sessionUpdate": "usage_update", "used": 1, "size": 2})

V1_CHUNK_RULES = [
    ("consecutive agent chunks are one message", [ac(None, "A"), ac(None, "B")], ["agent:AB"]),
    (
        "a thought between agent chunks splits them",
        [ac(None, "A"), ac(None, "T", kind="agent_thought_chunk"), ac(None, "B")],
        ["agent:A", "thought:T", "agent:B"],
    ),
    (
        "a user chunk ends the agent message",
        [ac(None, "A"), ac(None, "U", kind="user_message_chunk"), ac(None, "B")],
        ["agent:A", "user:U", "agent:B"],
    ),
    (
        "a tool call ends the message",
        [ac(None, "A"), TOOL, ac(None, "B")],
        ["agent:A", "tool_call", "agent:B"],
    ),
    ("a status-only update does not", [ac(None, "A"), USAGE, ac(None, "B")], ["agent:AB"]),
    (
        "a first plan is a new entry and ends it",
        [ac(None, "A"), PLAN, ac(None, "B")],
        ["agent:A", "plan", "agent:B"],
    ),
    (
        "replacing the existing plan does not",
        [PLAN, ac(None, "A"), PLAN, ac(None, "B")],
        ["plan", "agent:AB"],
    ),
    (
        "a tool call update for a known call does not",
        [TOOL, ac(None, "A"), tcu(status="completed"), ac(None, "B")],
        ["tool_call", "agent:AB"],
    ),
    (
        "thought chunks accumulate too",
        [ac(None, "T1", kind="agent_thought_chunk"), ac(None, "T2", kind="agent_thought_chunk")],
        ["thought:T1T2"],
    ),
    (
        "same id appends, a changed id is a new message",
        [ac("m1", "A"), ac("m1", "B"), ac("m2", "C")],
        ["agent:AB", "agent:C"],
    ),
    (
        "a known id appends where it was first seen",
        [ac("m1", "A"), TOOL, ac("m1", "B")],
        ["agent:AB", "tool_call"],
    ),
    ("a chunk without id continues the message with one", [ac("m1", "A"), ac(None, "B")], ["agent:AB"]),
    (
        "a chunk with a new id after id-less chunks is new",
        [ac(None, "A"), ac("m1", "B")],
        ["agent:A", "agent:B"],
    ),
]


def describe(conv: Conversation) -> list[str]:
    """The conversation's entries, without the session state reports beside it (usage, mode...)."""
    return [
        f"{e.role}:{e.text}" if isinstance(e, Message) else e.entity
        for e in conv.timeline
        if not isinstance(e, SessionState)
    ]


@pytest.mark.parametrize(("name", "steps", "expected"), V1_CHUNK_RULES, ids=[r[0] for r in V1_CHUNK_RULES])
def test_v1_chunk_rules(name: str, steps: list[dict], expected: list[str]) -> None:
    assert describe(run(*steps, version=1)) == expected


def test_v1_prompt_is_the_user_message_and_an_echo_replaces_rather_than_doubles_it() -> None:
    conv = run(prompt(2, "hi"), ac(None, "hi", kind="user_message_chunk"), ac(None, "hello"), version=1)
    assert describe(conv) == ["user:hi", "agent:hello"]
    user = conv.messages[0]
    assert not user.from_prompt and conv.turns[0].user_message is user
    # Without an echo the prompt itself is the user message, marked as the client's copy.
    conv = run(prompt(2, "hi"), ac(None, "hello"), version=1)
    assert describe(conv) == ["user:hi", "agent:hello"]
    assert conv.messages[0].from_prompt


def test_v1_chunks_do_not_continue_across_runs() -> None:
    first = FoldInput(seq=1, ts_ns=1, dir="a2c", message=ac(None, "A"), run=1)
    second = FoldInput(seq=2, ts_ns=2, dir="a2c", message=ac(None, "B"), run=2)
    assert describe(fold([first, second], protocol_version=1)) == ["agent:A", "agent:B"]


# ---------------------------------------------------------------------------------------------
# Prompt acceptance and completion (prompt-lifecycle.md §2, §4; prompt-turn.mdx §4)


def test_v2_acceptance_response_before_the_user_message_report() -> None:
    conv = run(
        prompt(2, "Can you analyze this code?"),
        response(2, {"messageId": "msg_user_1"}),
        am("msg_user_1", ["Can you analyze this code?"], kind="user_message"),
        upd({"sessionUpdate": "state_update", "state": "running"}),
    )
    user = only(conv, Message)
    assert (user.message_id, user.text, user.from_prompt, user.seq) == (
        "msg_user_1",
        "Can you analyze this code?",
        False,
        1,
    )
    turn = conv.turns[0]
    assert (turn.message_id, turn.accepted_seq, turn.user_message, turn.open) == ("msg_user_1", 2, user, True)
    assert conv.state == "running"


def test_v2_acceptance_report_before_the_response_reconciles_instead_of_duplicating() -> None:
    conv = run(
        prompt(2, "hi"),
        am("msg_user_1", ["hi"], kind="user_message"),
        response(2, {"messageId": "msg_user_1"}),
    )
    user = only(conv, Message)
    assert (user.message_id, user.seq, user.from_prompt) == ("msg_user_1", 2, False)
    assert conv.turns[0].user_message is user


def test_v2_user_message_chunks_replace_the_clients_copy() -> None:
    conv = run(prompt(2, "hi"), response(2, {"messageId": "u1"}), ac("u1", "hi", kind="user_message_chunk"))
    assert texts(only(conv, Message).content) == ["hi"]


def test_v2_association_is_by_id_not_arrival_order() -> None:
    # Another user message reported before the response names this prompt's id stays separate.
    conv = run(prompt(2, "mine"), am("other", ["queued"], kind="user_message"), response(2, {"messageId": "mine_id"}))
    assert [(m.message_id, m.text) for m in conv.messages] == [("mine_id", "mine"), ("other", "queued")]


STATE_RULES = [
    (
        "idle with a stop reason ends the turn",
        ["running", ("idle", "end_turn")],
        "idle",
        "end_turn",
        "end_turn",
    ),
    ("requires_action keeps it open", ["running", "requires_action"], "requires_action", None, None),
    # The agent is idle again: the work ended (without the stop reason it must give; check says so).
    ("idle without a stop reason still ends the turn", ["running", ("idle", None)], "idle", None, None),
    ("cancelled", ["running", ("idle", "cancelled")], "idle", "cancelled", "cancelled"),
    ("unknown then running", ["unknown", "running"], "running", None, None),
    ("a custom stop reason is kept", [("idle", "_vendor_stop")], "idle", "_vendor_stop", "_vendor_stop"),
]


@pytest.mark.parametrize(("name", "states", "state", "stop", "turn_stop"), STATE_RULES, ids=[r[0] for r in STATE_RULES])
def test_v2_state_updates(name: str, states: list, state: str, stop: str | None, turn_stop: str | None) -> None:
    frames = []
    for s in states:
        body: dict[str, Any] = {"sessionUpdate": "state_update"}
        if isinstance(s, tuple):
            body["state"] = s[0]
            if s[1] is not None:
                body["stopReason"] = s[1]
        else:
            body["state"] = s
        frames.append(upd(body))
    conv = run(prompt(2, "go"), response(2, {"messageId": "u"}), *frames)
    assert (conv.state, conv.stop_reason, conv.turns[0].stop_reason) == (state, stop, turn_stop)
    assert conv.turns[0].open == (state != "idle")
    assert conv.turns[0].status == ("ended" if state == "idle" else "running")
    # Every state report is also a timeline entry of its own.
    assert [e.fields.get("state") for e in conv.of(SessionState)] == [
        s[0] if isinstance(s, tuple) else s for s in states
    ]


def test_v2_cancel() -> None:
    conv = run(
        prompt(2, "go"),
        response(2, {"messageId": "u"}),
        ("c2a", {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": SID}}),
        upd({"sessionUpdate": "state_update", "state": "idle", "stopReason": "cancelled"}),
    )
    assert only(conv, Cancellation).seq == 3
    turn = conv.turns[0]
    assert (turn.cancel_seq, turn.stop_reason, turn.end_seq) == (3, "cancelled", 4)


def test_v1_turn_ends_with_the_prompt_response() -> None:
    conv = run(
        prompt(2, "one"),
        ac(None, "a"),
        response(2, {"stopReason": "end_turn", "usage": {"totalTokens": 5}}),
        prompt(3, "two"),
        version=1,
    )
    first, second = conv.turns
    assert (first.stop_reason, first.end_seq, first.usage, first.duration_ns) == (
        "end_turn",
        3,
        {"totalTokens": 5},
        2000,
    )
    assert (second.index, second.open, conv.state) == (2, True, "running")
    assert [e.turn for e in conv.timeline] == [1, 1, 2]
    assert describe(conv.__class__(timeline=conv.in_turn(2))) == ["user:two"]


def test_prompt_rejected_with_an_error() -> None:
    conv = run(prompt(2, "go"), ("a2c", {"jsonrpc": "2.0", "id": 2, "error": {"code": -32602, "message": "bad"}}))
    err = only(conv, ErrorResponse)
    assert (err.method, err.dir, err.code, err.message, err.request_seq) == (
        "session/prompt",
        "a2c",
        -32602,
        "bad",
        1,
    )
    assert conv.turns[0].error == {"code": -32602, "message": "bad"}
    assert not conv.turns[0].open


# ---------------------------------------------------------------------------------------------
# Tool calls (v1 tool-calls.mdx, v2 tool-calls.mdx)

LOC_A = [{"path": "/p/a.py", "line": 3}]
LOC_B = [{"path": "/p/b.py"}]
CREATE_V1 = tcu(
    variant="tool_call",
    title="Read a",
    status="pending",
    content=[item("x")],
    locations=LOC_A,
    rawInput={"p": 1},
)

TOOL_RULES: list[tuple[str, int, list[dict], dict[str, Any]]] = [
    (
        "v1 create",
        1,
        [CREATE_V1],
        {
            "title": "Read a",
            "tool_kind": "other",
            "status": "pending",
            "locations": LOC_A,
            "raw_input": {"p": 1},
            "placeholder": False,
        },
    ),
    (
        "v1 create defaults",
        1,
        [tcu(variant="tool_call", title="t")],
        {"tool_kind": "other", "status": "pending", "content": [], "locations": []},
    ),
    (
        "omitted fields unchanged",
        1,
        [CREATE_V1, tcu(status="in_progress")],
        {
            "title": "Read a",
            "status": "in_progress",
            "content": [item("x")],
            "locations": LOC_A,
            "raw_input": {"p": 1},
        },
    ),
    (
        "null clears a field",
        1,
        [CREATE_V1, tcu(title=None, rawInput=None)],
        {"title": None, "raw_input": None, "status": "pending"},
    ),
    (
        "content array replaces",
        1,
        [CREATE_V1, tcu(content=[item("y"), item("z")])],
        {"content": [item("y"), item("z")]},
    ),
    ("content null clears", 1, [CREATE_V1, tcu(content=None)], {"content": []}),
    ("content [] clears", 1, [CREATE_V1, tcu(content=[])], {"content": []}),
    ("locations replaced as a whole", 1, [CREATE_V1, tcu(locations=LOC_B)], {"locations": LOC_B}),
    ("locations null clears", 1, [CREATE_V1, tcu(locations=None)], {"locations": []}),
    (
        "raw output set then cleared",
        1,
        [CREATE_V1, tcu(rawOutput={"ok": True}), tcu(rawOutput=None)],
        {"raw_output": None},
    ),
    (
        "v1 update for an unknown id makes a marked placeholder",
        1,
        [tcu(status="completed")],
        {"placeholder": True, "status": "completed", "title": None},
    ),
    (
        "v1 tool_call again replaces the whole call",
        1,
        [CREATE_V1, tcu(status="completed"), tcu(variant="tool_call", title="Again")],
        {
            "title": "Again",
            "status": "pending",
            "content": [],
            "locations": [],
            "raw_input": None,
            "updates": 3,
        },
    ),
    (
        "v1 null name leaves the name",
        1,
        [tcu(variant="tool_call", title="t", name="read_file"), tcu(name=None)],
        {"name": "read_file"},
    ),
    (
        "v2 first update creates the call with defaults",
        2,
        [tcu(title="Read", name="read_file", kind="read")],
        {"placeholder": False, "status": "pending", "tool_kind": "read", "name": "read_file"},
    ),
    ("v2 null name clears", 2, [tcu(title="t", name="read_file"), tcu(name=None)], {"name": None}),
    (
        "v2 chunks append",
        2,
        [tcu(title="t"), tcc("call_1", "A"), tcc("call_1", "B")],
        {"content": [item("A"), item("B")], "chunks": 2},
    ),
    (
        "v2 update content replaces accumulated chunks",
        2,
        [tcu(title="t"), tcc("call_1", "A"), tcu(content=[item("C")])],
        {"content": [item("C")]},
    ),
    (
        "v2 chunks after a replacement append to it",
        2,
        [tcu(title="t"), tcc("call_1", "A"), tcu(content=[item("C")]), tcc("call_1", "D")],
        {"content": [item("C"), item("D")]},
    ),
    (
        "v2 chunks append to update content",
        2,
        [tcu(content=[item("A")]), tcc("call_1", "B")],
        {"content": [item("A"), item("B")]},
    ),
    (
        "v2 update without content keeps chunks",
        2,
        [tcu(title="t"), tcc("call_1", "A"), tcu(status="completed")],
        {"content": [item("A")], "status": "completed"},
    ),
    (
        "v2 content null clears chunks",
        2,
        [tcu(title="t"), tcc("call_1", "A"), tcu(content=None)],
        {"content": []},
    ),
    (
        "v2 chunk _meta is chunk-scoped",
        2,
        [tcu(_meta={"a": 1}), tcc("call_1", "A", _meta={"b": 2})],
        {"meta": {"a": 1}},
    ),
    ("v2 _meta omitted unchanged", 2, [tcu(_meta={"a": 1}), tcu(status="completed")], {"meta": {"a": 1}}),
    ("v2 _meta null clears", 2, [tcu(_meta={"a": 1}), tcu(_meta=None)], {"meta": None}),
    (
        "v2 chunk for an unknown call is a placeholder",
        2,
        [tcc("call_1", "A")],
        {"placeholder": True, "content": [item("A")]},
    ),
    (
        "v2 custom kind and status kept",
        2,
        [tcu(kind="_vendor_kind", status="_vendor_status")],
        {"tool_kind": "_vendor_kind", "status": "_vendor_status"},
    ),
    (
        "v2 cancelled status",
        2,
        [tcu(status="in_progress"), tcu(status="cancelled")],
        {"status": "cancelled", "updates": 2},
    ),
]


@pytest.mark.parametrize(("name", "version", "steps", "expected"), TOOL_RULES, ids=[r[0] for r in TOOL_RULES])
def test_tool_call_rules(name: str, version: int, steps: list[dict], expected: dict[str, Any]) -> None:
    conv = run(*steps, version=version)
    tc = only(conv, ToolCall)
    assert tc.tool_call_id == "call_1" and tc.seq == 1
    assert {key: getattr(tc, key) for key in expected} == expected


def test_tool_call_position_is_fixed_by_first_sighting() -> None:
    conv = run(tcu("call_1", title="a"), ac("m1", "text"), tcu("call_1", status="completed"), tcc("call_1", "out"))
    assert describe(conv) == ["tool_call", "agent:text"]
    assert conv.tool_call("call_1").updated_seq == 4  # type: ignore[union-attr]


# ---------------------------------------------------------------------------------------------
# Permission requests and answers; request/response pairing by id per direction


def permission_request(rid: Any, tool_call_id: str = "call_1", **params: Any) -> tuple[str, dict[str, Any]]:
    body = {
        "sessionId": SID,
        "toolCall": {"toolCallId": tool_call_id, "title": "Edit config"},
        "options": [
            {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
            {"optionId": "reject", "name": "Reject", "kind": "reject_once"},
        ],
        **params,
    }
    return ("a2c", {"jsonrpc": "2.0", "id": rid, "method": "session/request_permission", "params": body})


def test_permission_paired_per_direction() -> None:
    set_mode = {
        "jsonrpc": "2.0",
        "id": 5,
        "method": "session/set_mode",
        "params": {"sessionId": SID, "modeId": "code"},
    }
    conv = run(
        tcu("call_1", variant="tool_call", title="Edit"),
        ("c2a", set_mode),
        permission_request(5),  # the same id, the other direction: a different request
        response(5, {"outcome": {"outcome": "selected", "optionId": "allow"}}, direction="c2a"),
        response(5, {}, direction="a2c"),
        version=1,
    )
    perm = only(conv, Permission)
    assert (perm.answered, perm.outcome, perm.option_id, perm.option["name"], perm.answered_seq) == (
        True,
        "selected",
        "allow",
        "Allow",
        4,
    )
    assert (perm.tool_call_id, perm.title) == ("call_1", "Edit config")
    assert conv.tool_call("call_1").permissions == [perm]  # type: ignore[union-attr]
    # The request's tool call details are the prompt's, not an update of the call.
    assert conv.tool_call("call_1").title == "Edit"  # type: ignore[union-attr]
    call = only(conv, Call)
    assert (call.method, call.dir, call.answered_seq, call.result) == ("session/set_mode", "c2a", 5, {})
    assert conv.current_mode_id == "code"


def test_permission_v2_subject_and_cancelled_outcome() -> None:
    subject = {"type": "command", "command": "cargo test", "cwd": "/p", "toolCallId": "call_9"}
    conv = run(
        permission_request("p1", title="Run the test suite?", description="It is slow", subject=subject),
        response("p1", {"outcome": {"outcome": "cancelled"}}, direction="c2a"),
    )
    perm = only(conv, Permission)
    assert (perm.title, perm.description, perm.outcome, perm.option_id, perm.option) == (
        "Run the test suite?",
        "It is slow",
        "cancelled",
        None,
        None,
    )


def test_permission_unanswered_and_answered_with_an_error() -> None:
    conv = run(permission_request(0), permission_request(1))
    assert [p.answered for p in conv.permissions] == [False, False]
    conv = run(
        permission_request(0),
        ("c2a", {"jsonrpc": "2.0", "id": 0, "error": {"code": -32601, "message": "Method not found"}}),
    )
    perm = only(conv, Permission)
    assert (perm.answered, perm.outcome, perm.error["code"]) == (True, None, -32601)
    assert not conv.errors  # shown on the permission itself


def test_ids_are_json_values_one_and_string_one_differ() -> None:
    conv = run(
        permission_request(1),
        permission_request("1"),
        response("1", {"outcome": {"outcome": "cancelled"}}, direction="c2a"),
    )
    assert [(p.request_id, p.outcome) for p in conv.permissions] == [(1, None), ("1", "cancelled")]


def test_error_for_an_unknown_request_is_kept() -> None:
    conv = run(("a2c", {"jsonrpc": "2.0", "id": 99, "error": {"code": -32600, "message": "Invalid"}}))
    err = only(conv, ErrorResponse)
    assert (err.method, err.request_id, err.code, err.session_id) == (None, 99, -32600, None)


def test_other_agent_requests_are_calls_with_their_answers() -> None:
    read = {
        "jsonrpc": "2.0",
        "id": 3,
        "method": "fs/read_text_file",
        "params": {"sessionId": SID, "path": "/p/a.py"},
    }
    conv = run(("a2c", read), response(3, {"content": "print(1)"}, direction="c2a"))
    call = only(conv, Call)
    assert (call.method, call.dir, call.params["path"], call.result, call.answered) == (
        "fs/read_text_file",
        "a2c",
        "/p/a.py",
        {"content": "print(1)"},
        True,
    )


# ---------------------------------------------------------------------------------------------
# Plans (v1 agent-plan.mdx: replace the single plan; v2 agent-plan.mdx: by planId)


def entries(*names: str) -> list[dict[str, str]]:
    return [{"content": n, "priority": "high", "status": "pending"} for n in names]


def plan_update(plan_id: str, *names: str, **extra: Any) -> dict[str, Any]:
    content = {"type": "items", "planId": plan_id, "entries": entries(*names), **extra}
    return upd({"sessionUpdate": "plan_update", "plan": content})


def test_v1_plan_replaces_the_single_plan() -> None:
    conv = run(
        upd({"sessionUpdate": "plan", "entries": entries("a", "b")}),
        ac(None, "working"),
        upd({"sessionUpdate": "plan", "entries": entries("b")}),
        version=1,
    )
    plan = only(conv, Plan)
    assert (plan.plan_id, plan.plan_type, plan.entries, plan.seq, plan.updated_seq, plan.updates) == (
        None,
        "items",
        entries("b"),
        1,
        3,
        2,
    )
    assert conv.plan is plan


def test_v2_plans_by_id_replace_and_remove() -> None:
    conv = run(
        plan_update("plan-1", "a", "b"),
        plan_update("plan-2", "x"),
        plan_update("plan-1", "c"),
        upd({"sessionUpdate": "plan_removed", "planId": "plan-2"}),
    )
    one, two = conv.plans
    assert (one.plan_id, one.entries, one.removed) == ("plan-1", entries("c"), False)
    assert (two.plan_id, two.entries, two.removed, two.removed_seq) == ("plan-2", entries("x"), True, 4)
    assert conv.plan is one
    # A later update for a removed plan brings it back, in its original place.
    conv = run(plan_update("p", "a"), upd({"sessionUpdate": "plan_removed", "planId": "p"}), plan_update("p", "b"))
    plan = only(conv, Plan)
    assert (plan.removed, plan.entries, plan.seq) == (False, entries("b"), 1)


def test_v2_markdown_file_and_custom_plans() -> None:
    conv = run(
        upd(
            {
                "sessionUpdate": "plan_update",
                "plan": {"type": "markdown", "planId": "m", "content": "## Steps"},
            }
        ),
        upd(
            {
                "sessionUpdate": "plan_update",
                "plan": {"type": "file", "planId": "f", "uri": "file:///tmp/plan.md"},
            }
        ),
        upd({"sessionUpdate": "plan_update", "plan": {"type": "_mine", "planId": "c", "x": 1}}),
        upd({"sessionUpdate": "plan_removed", "planId": "never-seen"}),
    )
    markdown, file, custom, removed = conv.plans
    assert (markdown.plan_type, markdown.markdown) == ("markdown", "## Steps")
    assert (file.plan_type, file.uri) == ("file", "file:///tmp/plan.md")
    assert (custom.plan_type, custom.raw) == ("_mine", {"type": "_mine", "planId": "c", "x": 1})
    assert (removed.plan_id, removed.removed) == ("never-seen", True)
    assert conv.plan is custom


# ---------------------------------------------------------------------------------------------
# Compaction (prompt-lifecycle.md "Session Compaction"; session-compaction RFD)


def cu(status: str, cid: str = "cmp_1", **fields: Any) -> dict[str, Any]:
    return upd({"sessionUpdate": "compaction_update", "compactionId": cid, "status": status, **fields})


def cc(text: str, cid: str = "cmp_1") -> dict[str, Any]:
    return upd({"sessionUpdate": "compaction_summary_chunk", "compactionId": cid, "content": txt(text)})


COMPACTION_RULES = [
    (
        "a completed update omitting summary keeps the streamed chunks",
        [cu("in_progress"), cc("A"), cc("B"), cu("completed")],
        "completed",
        ["A", "B"],
        None,
    ),
    (
        "a concrete summary replaces accumulated chunks",
        [cu("in_progress"), cc("A"), cu("completed", summary=[txt("S")])],
        "completed",
        ["S"],
        None,
    ),
    (
        "chunks after a replacement append to it",
        [cu("in_progress", summary=[txt("S")]), cc("T")],
        "in_progress",
        ["S", "T"],
        None,
    ),
    (
        "summary null clears",
        [cu("in_progress"), cc("A"), cu("cancelled", summary=None)],
        "cancelled",
        [],
        None,
    ),
    (
        "summary [] clears",
        [cu("in_progress"), cc("A"), cu("failed", summary=[], error="boom")],
        "failed",
        [],
        "boom",
    ),
    (
        "error omitted unchanged, null clears",
        [cu("failed", error="boom"), cu("failed"), cu("failed", error=None)],
        "failed",
        [],
        None,
    ),
    ("a terminal status may come first", [cu("completed", summary=[txt("S")])], "completed", ["S"], None),
    ("a first-seen chunk starts in progress", [cc("A")], "in_progress", ["A"], None),
    ("a custom status is kept", [cu("_paused")], "_paused", [], None),
]


@pytest.mark.parametrize(
    ("name", "steps", "status", "summary", "error"), COMPACTION_RULES, ids=[r[0] for r in COMPACTION_RULES]
)
def test_compaction_rules(name: str, steps: list, status: str, summary: list[str], error: str | None) -> None:
    comp = only(run(*steps), Compaction)
    assert (comp.compaction_id, comp.status, texts(comp.summary), comp.error) == (
        "cmp_1",
        status,
        summary,
        error,
    )


def test_compaction_meta_patch_and_chunk_meta() -> None:
    chunk = upd(
        {
            "sessionUpdate": "compaction_summary_chunk",
            "compactionId": "cmp_1",
            "content": txt("A"),
            "_meta": {"c": 1},
        }
    )
    assert only(run(cu("in_progress", _meta={"a": 1}), chunk), Compaction).meta == {"a": 1}
    assert only(run(cu("in_progress", _meta={"a": 1}), cu("completed", _meta=None)), Compaction).meta is None


def test_compaction_is_one_entity_fixed_where_first_seen() -> None:
    conv = run(ac("m1", "before"), cu("in_progress"), ac("m2", "during"), cc("A"), cu("completed"), ac("m3", "after"))
    assert describe(conv) == ["agent:before", "compaction", "agent:during", "agent:after"]
    comp = only(conv, Compaction)
    assert (comp.seq, comp.updated_seq, comp.chunks, comp.updates, comp.text) == (2, 5, 1, 2, "A")


def test_materialised_compaction_replay_replaces_rather_than_duplicates() -> None:
    full = [txt("## Retained context\n\nThe user is updating the ACP schema.")]
    conv = run(
        cu("in_progress"),
        cc("## Retained "),
        cc("context"),
        cu("completed"),
        ac("m1", "later"),
        Replay(cu("completed", summary=full)),
    )
    comp = only(conv, Compaction)
    assert (comp.summary, comp.replay, comp.replayed_seq, comp.seq) == (full, False, 6, 1)
    assert describe(conv)[0] == "compaction"
    # Replay does not reset omitted fields: a materialised entry without summary keeps it.
    conv = run(cu("in_progress"), cc("A"), cu("completed"), Replay(cu("completed")))
    assert texts(only(conv, Compaction).summary) == ["A"]
    # ... and clears only when it says so.
    conv = run(cu("in_progress"), cc("A"), cu("completed"), Replay(cu("completed", summary=None)))
    assert only(conv, Compaction).summary == []


def test_compaction_first_seen_in_replay_is_history() -> None:
    comp = only(run(Replay(cu("completed", summary=[txt("S")]))), Compaction)
    assert (comp.replay, comp.text) == (True, "S")


# ---------------------------------------------------------------------------------------------
# Terminals (v2 tool-calls.mdx "Display-only Terminals"; v1 terminals.mdx)


def tu(tid: str = "term_1", **fields: Any) -> dict[str, Any]:
    return upd({"sessionUpdate": "terminal_update", "terminalId": tid, **fields})


def to(data: str, tid: str = "term_1") -> dict[str, Any]:
    return upd({"sessionUpdate": "terminal_output_chunk", "terminalId": tid, "data": data})


TERMINAL_RULES = [
    (
        "a snapshot then chunks",
        [tu(command="cargo test", output={"data": "cnVubmluZyB0ZXN0cw0K"}), to("cGFzc2VkDQo=")],
        b"running tests\r\npassed\r\n",
    ),
    ("each chunk is decoded on its own (padding)", [to("YQ=="), to("Yg==")], b"ab"),
    ("a chunk may split a UTF-8 sequence", [to(b64(b"caf\xc3")), to(b64(b"\xa9!"))], "café!".encode()),
    ("a snapshot replaces every byte", [to(b64(b"old")), tu(output={"data": b64(b"new")})], b"new"),
    ("chunks append to the snapshot", [tu(output={"data": b64(b"new")}), to(b64(b" more"))], b"new more"),
    ("output omitted leaves the bytes", [to(b64(b"x")), tu(command="ls")], b"x"),
    ("output null clears", [to(b64(b"x")), tu(output=None)], b""),
    ("invalid base64 is counted, not appended", [to(b64(b"ok")), to("not base64!")], b"ok"),
]


@pytest.mark.parametrize(("name", "steps", "expected"), TERMINAL_RULES, ids=[r[0] for r in TERMINAL_RULES])
def test_terminal_output_rules(name: str, steps: list, expected: bytes) -> None:
    term = only(run(*steps), Terminal)
    assert (term.terminal_id, bytes(term.output)) == ("term_1", expected)


def test_terminal_fields_patch() -> None:
    conv = run(
        tu(command="cargo test", cwd="/p", _meta={"a": 1}),
        tu(exitStatus={"exitCode": None, "signal": "SIGTERM"}),
        to("%%%"),
    )
    term = only(conv, Terminal)
    assert (
        term.command,
        term.cwd,
        term.meta,
        term.exited,
        term.exit_status["signal"],
        term.decode_errors,
        term.chunks,
    ) == (
        "cargo test",
        "/p",
        {"a": 1},
        True,
        "SIGTERM",
        1,
        1,
    )
    term = only(run(tu(command="x", exitStatus={"exitCode": 0}), tu(command=None, exitStatus=None)), Terminal)
    assert (term.command, term.exited) == (None, False)
    # The tool call refers to the terminal by id; the terminal's state is looked up on its own.
    conv = run(tcu(content=[{"type": "terminal", "terminalId": "term_1"}]), to(b64(b"hi")))
    assert conv.terminal("term_1").text == "hi"  # type: ignore[union-attr]
    assert text_of(conv.tool_call("call_1").content) == "<terminal term_1>"  # type: ignore[union-attr]


def test_v1_client_terminal_calls() -> None:
    def req(rid: int, method: str, **params: Any) -> tuple[str, dict]:
        return (
            "a2c",
            {"jsonrpc": "2.0", "id": rid, "method": method, "params": {"sessionId": SID, **params}},
        )

    conv = run(
        req(5, "terminal/create", command="npm", args=["test"], cwd="/p"),
        response(5, {"terminalId": "term_xyz"}, direction="c2a"),
        req(6, "terminal/output", terminalId="term_xyz"),
        response(6, {"output": "Running tests...\n✓ All passed\n", "truncated": False}, direction="c2a"),
        req(7, "terminal/wait_for_exit", terminalId="term_xyz"),
        response(7, {"exitCode": 0, "signal": None}, direction="c2a"),
        req(8, "terminal/release", terminalId="term_xyz"),
        response(8, {}, direction="c2a"),
        version=1,
    )
    term = only(conv, Terminal)
    assert (term.terminal_id, term.command, term.args, term.cwd, term.client_side, term.seq) == (
        "term_xyz",
        "npm",
        ["test"],
        "/p",
        True,
        1,
    )
    assert (term.text, term.exit_status, term.released) == (
        "Running tests...\n✓ All passed\n",
        {"exitCode": 0, "signal": None},
        True,
    )
    assert not conv.of(Call)


# ---------------------------------------------------------------------------------------------
# Latest-value state: usage, session info, modes, config options, commands


def test_usage_keeps_the_latest() -> None:
    conv = run(
        upd(
            {
                "sessionUpdate": "usage_update",
                "used": 53000,
                "size": 200000,
                "cost": {"amount": 0.045, "currency": "USD"},
            }
        ),
        upd({"sessionUpdate": "usage_update", "used": 54000, "size": 200000}),
    )
    assert conv.usage is not None
    assert (conv.usage.used, conv.usage.size, conv.usage.cost, conv.usage.seq) == (54000, 200000, None, 2)
    # Each report is a timeline entry (shown where it happened), nothing else is.
    assert [(e.variant, e.fields["used"]) for e in conv.timeline if isinstance(e, SessionState)] == [
        ("usage_update", 53000),
        ("usage_update", 54000),
    ]
    assert describe(conv) == []


def test_session_info_patches() -> None:
    info = {"sessionUpdate": "session_info_update"}
    conv = run(
        upd({**info, "title": "Fix bug", "updatedAt": "2025-01-01T00:00:00Z"}),
        upd({**info, "_meta": {"a": 1}}),
    )
    assert (conv.title, conv.updated_at, conv.info_meta) == ("Fix bug", "2025-01-01T00:00:00Z", {"a": 1})
    conv = run(upd({**info, "title": "Fix bug"}), upd({**info, "title": None}))
    assert conv.title is None


def test_session_setup_modes_config_and_commands() -> None:
    modes = {
        "currentModeId": "ask",
        "availableModes": [{"id": "ask", "name": "Ask"}, {"id": "code", "name": "Code"}],
    }
    options = [{"id": "model", "name": "Model", "type": "select", "currentValue": "a", "options": []}]
    commands = [{"name": "web", "description": "Search the web"}]
    conv = run(
        (
            "c2a",
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "session/new",
                "params": {"cwd": "/home/user/project", "mcpServers": []},
            },
        ),
        response(1, {"sessionId": SID, "modes": modes, "configOptions": options}),
        upd({"sessionUpdate": "available_commands_update", "availableCommands": commands}),
        upd({"sessionUpdate": "current_mode_update", "currentModeId": "code"}),
        upd({"sessionUpdate": "config_option_update", "configOptions": []}),
        version=1,
    )
    assert conv.session_id == SID and conv.cwd == "/home/user/project"
    assert (conv.current_mode_id, conv.modes, conv.config_options, conv.available_commands) == (
        "code",
        modes["availableModes"],
        [],
        commands,
    )


# ---------------------------------------------------------------------------------------------
# Notices, subagents, unknown variants kept raw


def test_notices_are_live_entries_and_marked_when_replayed() -> None:
    notice = upd(
        {
            "sessionUpdate": "notice",
            "severity": "warning",
            "title": "MCP server unavailable",
            "description": "Continuing without it.",
        }
    )
    conv = run(notice, Replay(notice))
    live, replayed = conv.of(Notice)
    assert (live.live, live.severity, live.title, live.description, live.replay) == (
        True,
        "warning",
        "MCP server unavailable",
        "Continuing without it.",
        False,
    )
    assert replayed.replay  # a notice never patches another: each occurrence is its own entry


def test_subagent_update_patches() -> None:
    sub = {"sessionUpdate": "subagent_update", "sessionId": "child"}
    conv = run(
        upd({**sub, "title": "Research", "cwd": "/p"}),
        upd({**sub, "state": {"state": "running"}, "cwd": None}),
    )
    entry = only(conv, Subagent)
    assert (entry.child_session_id, entry.title, entry.fields) == (
        "child",
        "Research",
        {"title": "Research", "state": {"state": "running"}},
    )


UNKNOWN_CASES = [
    (
        "an extension variant",
        upd({"sessionUpdate": "_vendor_progress", "percent": 50}),
        "_vendor_progress",
        "unknown",
        True,
    ),
    (
        "a future variant",
        upd({"sessionUpdate": "future_thing", "x": [1, {"y": None}]}),
        "future_thing",
        "unknown",
        False,
    ),
    (
        "a known variant without its id",
        upd({"sessionUpdate": "tool_call_update", "status": "completed"}),
        "tool_call_update",
        "malformed",
        False,
    ),
    (
        "a message upsert without messageId",
        upd({"sessionUpdate": "agent_message", "content": []}),
        "agent_message",
        "malformed",
        False,
    ),
    (
        "a chunk without content",
        upd({"sessionUpdate": "agent_message_chunk", "messageId": "m"}),
        "agent_message_chunk",
        "malformed",
        False,
    ),
    (
        "a state_update without state",
        upd({"sessionUpdate": "state_update"}),
        "state_update",
        "malformed",
        False,
    ),
]


@pytest.mark.parametrize(
    ("name", "frame", "kind", "reason", "extension"), UNKNOWN_CASES, ids=[c[0] for c in UNKNOWN_CASES]
)
def test_unknown_updates_are_kept_raw(name: str, frame: dict, kind: str, reason: str, extension: bool) -> None:
    entry = only(run(frame), Unknown)
    assert (entry.method, entry.update_kind, entry.reason, entry.extension) == (
        "session/update",
        kind,
        reason,
        extension,
    )
    assert entry.raw == frame["params"]["update"]
    assert json.loads(json.dumps(entry.raw)) == frame["params"]["update"]


def test_unknown_methods_and_odd_messages() -> None:
    ext = {"jsonrpc": "2.0", "method": "_zed/hello", "params": {"sessionId": SID, "x": 1}}
    ext_request = {"jsonrpc": "2.0", "id": 9, "method": "_zed/ask", "params": {"q": 1}}
    conv = fold(
        inputs(
            ext,
            upd("not an object"),  # type: ignore[arg-type]
            ("c2a", ext_request),
            response(9, {"a": 2}),
            [ac(None, "batched"), "junk", 7],  # a batch: its objects apply in order
            "not json-rpc",
            {"jsonrpc": "2.0"},
        ),
        SID,
        protocol_version=1,
    )
    unknown, malformed, call, msg = conv.timeline
    assert (unknown.method, unknown.raw, unknown.extension) == ("_zed/hello", ext, True)
    assert (malformed.update_kind, malformed.reason) == (None, "malformed")
    assert (call.method, call.session_id, call.result) == (
        "_zed/ask",
        None,
        {"a": 2},
    )  # connection-level, merged in
    assert msg.text == "batched"


# ---------------------------------------------------------------------------------------------
# Replay windows, forwarding, sessions


def test_replay_window_is_inferred_from_load_and_resume() -> None:
    load = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "session/load",
        "params": {"sessionId": SID, "cwd": "/p", "mcpServers": []},
    }
    resume = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "session/resume",
        "params": {"sessionId": SID, "cwd": "/p"},
    }
    conv = run(
        ("c2a", load),
        ac(None, "old question", kind="user_message_chunk"),
        ac(None, "old answer"),
        response(1, {}),
        ("c2a", resume),  # without replayFrom: no history
        ac(None, "live", kind="agent_thought_chunk"),
        response(2, {}),
        version=1,
    )
    assert [(m.text, m.replay) for m in conv.messages] == [
        ("old question", True),
        ("old answer", True),
        ("live", False),
    ]
    assert conv.in_turn(0) == conv.timeline


def test_unforwarded_frames_change_nothing() -> None:
    frames = inputs(ac("m1", "A"), am("m1", ["dropped"]))
    frames[1] = FoldInput(seq=2, ts_ns=2, dir="a2c", message=frames[1].message, forwarded=False)
    conv = fold(frames, protocol_version=2)
    assert (only(conv, Message).text, conv.unforwarded) == ("A", [2])


def test_sessions_are_folded_apart() -> None:
    frames = inputs(
        ac("m1", "one"),
        upd({"sessionUpdate": "agent_message_chunk", "messageId": "m1", "content": txt("two")}, sid="other"),
    )
    convs = fold_sessions(frames, protocol_version=2)
    assert [(sid, [m.text for m in c.messages]) for sid, c in convs.items()] == [
        (SID, ["one"]),
        ("other", ["two"]),
    ]
    with pytest.raises(ValueError, match="2 sessions"):
        fold(frames)
    assert only(fold(frames, "other"), Message).text == "two"
    assert fold(frames, "absent").empty
    assert fold([]).empty


def test_folder_is_incremental() -> None:
    folder = Folder(protocol_version=2)
    steps = inputs(am("m1", ["A"]), ac("m1", "B"))
    folder.feed(steps[0])
    assert folder.conversation(SID).messages[0].text == "A"
    folder.feed(steps[1])
    assert folder.conversation(SID).messages[0].text == "AB"


def test_protocol_version_negotiated_or_inferred() -> None:
    init = ("c2a", {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 2}})
    # Negotiated v1: a tool_call_update for an unknown id is a v1 placeholder.
    conv = fold(inputs(init, response(0, {"protocolVersion": 1}), tcu(status="completed")))
    assert (conv.protocol_version, only(conv, ToolCall).placeholder) == (1, True)
    # v2-only variants tell the version when no initialize was recorded.
    conv = fold(inputs(upd({"sessionUpdate": "state_update", "state": "running"}), tcu(status="completed")))
    assert (conv.protocol_version, only(conv, ToolCall).placeholder) == (2, False)


# ---------------------------------------------------------------------------------------------
# text_of

TEXT_CASES = [
    (txt("hi"), "hi"),
    ([txt("Client sent:"), txt("hello world")], "Client sent:hello world"),
    ({"type": "image", "mimeType": "image/png", "data": "AA=="}, "<image>"),
    ({"type": "audio", "mimeType": "audio/wav", "data": "AA=="}, "<audio>"),
    (
        {"type": "resource_link", "uri": "file:///home/user/document.pdf", "name": "document.pdf"},
        "[document.pdf](file:///home/user/document.pdf)",
    ),
    ({"type": "resource_link", "uri": "file:///a"}, "<file:///a>"),
    (
        {"type": "resource", "resource": {"uri": "file:///m.py", "text": "x = 1"}},
        "<resource file:///m.py>\nx = 1\n</resource>",
    ),
    ({"type": "resource", "resource": {"uri": "file:///b.bin", "blob": "AA=="}}, "<resource file:///b.bin>"),
    (item("tool output"), "tool output"),
    ({"type": "terminal", "terminalId": "t1"}, "<terminal t1>"),
    (
        {
            "type": "diff",
            "changes": [{"operation": "modify", "path": "/p/c.json"}],
            "patch": {"format": "git_patch", "text": "diff --git ..."},
        },
        "diff --git ...",
    ),
    ({"type": "diff", "changes": [{"operation": "add", "path": "/p/n"}]}, "<diff add /p/n>"),
    ({"type": "_custom", "x": 1}, "<_custom>"),
    (None, ""),
]


@pytest.mark.parametrize(("content", "expected"), TEXT_CASES)
def test_text_of(content: Any, expected: str) -> None:
    assert text_of(content) == expected


def test_text_of_separator_and_v1_diff() -> None:
    assert text_of([item("a"), item("b")], "\n") == "a\nb"
    diff = {
        "type": "diff",
        "path": "/p/config.json",
        "oldText": '{\n  "debug": false\n}',
        "newText": '{\n  "debug": true\n}',
    }
    assert diff_text(diff).splitlines() == [
        "--- /p/config.json",
        "+++ /p/config.json",
        "@@ -1,3 +1,3 @@",
        " {",
        '-  "debug": false',
        '+  "debug": true',
        " }",
    ]
    assert text_of({"type": "diff", "path": "/p/new", "oldText": None, "newText": "x"}).startswith(
        "--- /dev/null\n+++ /p/new"
    )


# ---------------------------------------------------------------------------------------------
# Properties: receive order per id, whatever the interleaving; never an exception

OPS = st.lists(
    st.tuples(
        st.sampled_from(["m1", "m2", "m3"]),
        st.one_of(
            st.tuples(st.just("chunk"), st.sampled_from("abcdef")),
            st.tuples(
                st.just("update"),
                st.one_of(st.just(...), st.none(), st.lists(st.sampled_from("xyz"), max_size=3)),
            ),
        ),
    ),
    max_size=30,
)


@settings(max_examples=300, deadline=None)
@given(OPS)
def test_message_fold_matches_the_documented_rules_in_any_order(ops: list) -> None:
    expected: dict[str, list[str]] = {}
    first_seen: list[str] = []
    frames = []
    for mid, (op, arg) in ops:
        if mid not in expected:
            expected[mid] = []
            first_seen.append(mid)
        if op == "chunk":
            expected[mid].append(arg)  # a chunk appends to whatever is current
            frames.append(ac(mid, arg))
        else:
            if arg is not ...:
                expected[mid] = list(arg or [])  # a value replaces; null and [] clear
            frames.append(am(mid, arg))  # omitted: unchanged
    conv = run(*frames)
    assert [m.message_id for m in conv.messages] == first_seen
    assert {m.message_id: texts(m.content) for m in conv.messages} == expected


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
VARIANTS = sorted({"plan", "tool_call", "_x", *Folder()._updates})
FIELDS = [
    "messageId",
    "toolCallId",
    "terminalId",
    "compactionId",
    "planId",
    "content",
    "summary",
    "plan",
    "data",
    "output",
    "state",
    "status",
    "_meta",
    "sessionId",
]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.builds(
                lambda v, f: upd({"sessionUpdate": v, **f}),
                st.sampled_from(VARIANTS),
                st.dictionaries(st.sampled_from(FIELDS), JSON, max_size=4),
            ),
            st.builds(
                lambda d, m: (d, m),
                st.sampled_from(["c2a", "a2c"]),
                st.dictionaries(st.sampled_from(["id", "method", "params", "result", "error"]), JSON, max_size=4),
            ),
            JSON,
        ),
        max_size=12,
    ),
    st.sampled_from([None, 1, 2]),
)
def test_odd_traffic_never_raises(steps: list, version: int | None) -> None:
    for sid, conv in fold_sessions(inputs(*steps), protocol_version=version).items():
        assert conv.session_id == sid
        for entry in conv.timeline:
            assert entry.seq >= 1


# ---------------------------------------------------------------------------------------------
# v2 end to end: the seed document's traffic (tests/v2_traffic.py) in relay order


def substitute(value: Any, rid: Any) -> Any:
    if value == "$id":
        return rid
    if isinstance(value, dict):
        return {k: substitute(v, rid) for k, v in value.items()}
    if isinstance(value, list):
        return [substitute(v, rid) for v in value]
    return value


def v2_conversation() -> Conversation:
    on = v2_traffic.AGENT_SCRIPT["on"]
    steps: list[Any] = []

    def client(msg: dict) -> None:
        steps.append(("c2a", msg))

    def agent(msgs: list[dict], rid: Any = None) -> None:
        steps.extend(("a2c", substitute(m, rid)) for m in msgs)

    client(v2_traffic.INITIALIZE)
    agent(on["initialize"], 0)
    client(v2_traffic.NEW_SESSION)
    agent(on["session/new"], 1)
    client(v2_traffic.PROMPT)
    agent(on["session/prompt"][0], 2)
    client(v2_traffic.PERMISSION_ANSWER)
    agent(v2_traffic.AFTER_PERMISSION)
    client(v2_traffic.PROMPT_2)
    agent(on["session/prompt"][1], 3)
    client(v2_traffic.CANCEL)
    agent(on["session/cancel"])
    client(v2_traffic.RESUME)
    agent(on["session/resume"], 4)
    return fold(inputs(*steps))


def test_v2_seed_traffic_folds_into_its_conversation() -> None:
    conv = v2_conversation()
    assert (conv.session_id, conv.protocol_version, conv.cwd) == (SID, 2, "/home/user/project")
    assert [(m.role, m.message_id, m.text) for m in conv.messages] == [
        ("user", "msg_user_8f7a1", "Can you analyze this code for potential issues?"),
        ("agent", "msg_agent_c42b9", "C"),  # [A] + B = [A, B], then the replayed [C] replaced it in place
        ("user", "msg_user_2", "Now fix them"),
        ("agent", "msg_agent_2", "Fixing"),
    ]
    agent = conv.message("msg_agent_c42b9")
    assert agent is not None and (agent.replay, agent.replayed_seq is not None) == (False, True)
    plan = only(conv, Plan)
    assert (plan.plan_id, [e["content"] for e in plan.entries]) == ("plan-1", ["Check for syntax errors"])
    analyzing, cancelled = conv.tool_calls
    assert (analyzing.title, analyzing.tool_kind, analyzing.status, text_of(analyzing.content)) == (
        "Analyzing main.py",
        "read",
        "completed",
        "Checked syntax...",
    )
    assert (cancelled.tool_call_id, cancelled.status, cancelled.placeholder) == (
        "call_002",
        "cancelled",
        False,
    )
    perm = only(conv, Permission)
    assert (perm.tool_call_id, perm.outcome, perm.option_id, analyzing.permissions) == (
        "call_001",
        "selected",
        "allow-once",
        [perm],
    )
    comp = only(conv, Compaction)
    assert (comp.status, comp.text) == ("completed", "## Retained")
    assert conv.usage is not None and (conv.usage.used, conv.usage.size, conv.usage.cost) == (
        53000,
        200000,
        {"amount": 0.045, "currency": "USD"},
    )
    live, replayed = conv.of(Notice)
    assert (live.title, live.replay, replayed.replay) == ("Rate limit at 80%", False, True)
    assert [(u.update_kind, u.raw) for u in conv.of(Unknown)] == [
        ("_vendor_progress", {"sessionUpdate": "_vendor_progress", "percent": 50}),
        ("future_thing", {"sessionUpdate": "future_thing", "x": 1}),
    ]
    one, two = conv.turns
    assert (one.message_id, one.stop_reason, one.user_message.message_id) == (
        "msg_user_8f7a1",
        "end_turn",
        "msg_user_8f7a1",
    )  # type: ignore[union-attr]
    assert (two.message_id, two.stop_reason, two.cancel_seq is not None) == ("msg_user_2", "cancelled", True)
    assert only(conv, Cancellation).turn == 2
    # After the resume replay: idle without a stop reason.
    assert (conv.state, conv.stop_reason) == ("idle", None)
    assert [e.entity for e in conv.in_turn(2) if not isinstance(e, SessionState)] == [
        "message",
        "message",
        "cancel",
        "tool_call",
    ]
    # The session/resume request came after the turn's idle, and what it replayed is history:
    # both belong to no turn.
    after = [e for e in conv.in_turn(0) if not isinstance(e, SessionState) and e.seq > two.seq]
    assert [e.entity for e in after] == ["call", "notice"]


# ---------------------------------------------------------------------------------------------
# Real traffic: each fixture folds into the conversation its client printed


def fixture(name: str) -> Conversation:
    steps = []
    for seq, line in enumerate((TRAFFIC / name).read_text(encoding="utf-8").splitlines(), 1):
        record = json.loads(line)
        message = json.loads(record["frame"])
        steps.append(FoldInput(seq=seq, ts_ns=round(record["t"] * 1e9), dir=record["dir"], message=message))
    return fold(steps)


def test_fixtures_are_all_covered() -> None:
    covered = {
        "py-client_py-agent",
        "ts-client_py-agent",
        "py-client_py-echo-agent",
        "ts-client_ts-agent",
        "py-client_ts-agent",
        "py-client-no-permission_ts-agent",
    }
    assert {p.stem for p in TRAFFIC.glob("*.jsonl")} == covered


@pytest.mark.parametrize(
    ("name", "session", "prompts"),
    [
        ("py-client_py-agent.jsonl", "0", ["hello world", "second prompt"]),
        ("ts-client_py-agent.jsonl", "0", ["Hello, agent!"]),
    ],
)
def test_fixture_python_example_agent_echoes_each_prompt(name: str, session: str, prompts: list[str]) -> None:
    conv = fixture(name)
    assert (conv.session_id, conv.protocol_version, conv.cwd) == (session, 1, "/home/user/project")
    expected = []
    for text in prompts:
        # The agent answers each prompt with two chunks, "Client sent:" then the prompt's text:
        # consecutive v1 chunks of one kind, so one agent message of two blocks.
        expected += [("user", [text]), ("agent", ["Client sent:", text])]
    assert [(m.role, texts(m.content)) for m in conv.messages] == expected
    assert [(t.index, texts(t.prompt), t.stop_reason) for t in conv.turns] == [
        (i, [p], "end_turn") for i, p in enumerate(prompts, 1)
    ]
    entries = [e for e in conv.timeline if not (isinstance(e, Call) and e.method in SETUP)]
    assert [e.turn for e in entries] == [i for i in range(1, len(prompts) + 1) for _ in range(2)]
    assert (conv.state, conv.stop_reason) == ("idle", "end_turn")
    assert not conv.errors and not conv.of(Unknown)


def test_fixture_echo_agent_with_meta() -> None:
    conv = fixture("py-client_py-echo-agent.jsonl")
    user, agent = conv.messages
    assert (user.text, agent.role, agent.text) == ("hello echo", "agent", "hello echo")
    # The notification's _meta and the chunk's _meta are not the message's.
    assert agent.meta is None
    assert agent.content == [{"text": "hello echo", "_meta": {"echo": True}, "type": "text"}]
    assert conv.turns[0].stop_reason == "end_turn"


TS_AGENT_START = [
    ("user", None),  # the prompt, checked per fixture
    (
        "agent",
        "I'll help you with that. Let me start by reading some files to understand the current situation.",
    ),
    ("tool_call", "call_1"),
    ("agent", " Now I understand the project structure. I need to make some changes to improve it."),
    ("tool_call", "call_2"),
    ("permission", "call_2"),
]


SETUP = frozenset({"initialize", "authenticate", "session/new", "session/load", "session/resume"})


def timeline(conv: Conversation) -> list[tuple[str, str | None]]:
    """The conversation's entries without the set-up calls and state reports around them."""
    out: list[tuple[str, str | None]] = []
    for e in conv.timeline:
        if isinstance(e, SessionState) or (isinstance(e, Call) and e.method in SETUP):
            continue
        if isinstance(e, Message):
            out.append((e.role, e.text))
        elif isinstance(e, (ToolCall, Permission)):
            out.append((e.entity, e.tool_call_id))
        elif isinstance(e, ErrorResponse):
            out.append(("error", e.method))
        else:
            out.append((e.entity, None))
    return out


def check_ts_agent_tools(conv: Conversation, call_2_status: str) -> None:
    read, edit = conv.tool_calls
    assert (read.tool_call_id, read.title, read.tool_kind, read.status) == (
        "call_1",
        "Reading project files",
        "read",
        "completed",
    )
    assert read.locations == [{"path": "/project/README.md"}]
    assert read.raw_input == {"path": "/project/README.md"}
    assert text_of(read.content) == "# My Project\n\nThis is a sample project..."
    assert read.raw_output == {"content": "# My Project\n\nThis is a sample project..."}
    assert (edit.tool_call_id, edit.title, edit.tool_kind, edit.status) == (
        "call_2",
        "Modifying critical configuration file",
        "edit",
        call_2_status,
    )
    assert edit.locations == [{"path": "/project/config.json"}]
    perm = only(conv, Permission)
    assert edit.permissions == [perm]
    assert [o["optionId"] for o in perm.options] == ["allow", "reject"]
    assert perm.title == "Modifying critical configuration file"
    assert perm.tool_call["locations"] == [{"path": "/home/user/project/config.json"}]


@pytest.mark.parametrize(
    ("name", "prompt_text"),
    [("ts-client_ts-agent.jsonl", "Hello, agent!"), ("py-client_ts-agent.jsonl", "hi from py")],
)
def test_fixture_typescript_agent_permission_granted(name: str, prompt_text: str) -> None:
    conv = fixture(name)
    assert timeline(conv) == [
        ("user", prompt_text),
        *TS_AGENT_START[1:],
        ("agent", " Perfect! I've successfully updated the configuration. The changes have been applied."),
    ]
    check_ts_agent_tools(conv, "completed")
    edit = conv.tool_call("call_2")
    assert edit is not None and edit.raw_output == {"success": True, "message": "Configuration updated"}
    perm = only(conv, Permission)
    assert (
        perm.request_id,
        perm.answered,
        perm.outcome,
        perm.option_id,
        perm.option["name"],
        perm.error,
    ) == (0, True, "selected", "allow", "Allow this change", None)
    assert [(t.stop_reason, t.error) for t in conv.turns] == [("end_turn", None)]
    assert not conv.errors


def test_fixture_permission_refused_with_method_not_found() -> None:
    conv = fixture("py-client-no-permission_ts-agent.jsonl")
    assert timeline(conv) == [("user", "hi from py"), *TS_AGENT_START[1:], ("error", "session/prompt")]
    check_ts_agent_tools(conv, "pending")
    perm = only(conv, Permission)
    method_not_found = {
        "code": -32601,
        "message": "Method not found",
        "data": {"method": "session/request_permission"},
    }
    assert (perm.answered, perm.outcome, perm.error) == (True, None, method_not_found)
    # The agent then fails the prompt with the same error.
    err = only(conv, ErrorResponse)
    assert (err.dir, err.code, err.message, err.data, err.request_seq) == (
        "a2c",
        -32601,
        "Method not found",
        {"method": "session/request_permission"},
        5,
    )
    turn = conv.turns[0]
    assert (turn.stop_reason, turn.error, turn.end_seq) == (None, method_not_found, 13)
    assert conv.state == "idle"


def test_work_the_agent_starts_itself_is_a_turn_of_the_conversation() -> None:
    state = {"sessionUpdate": "state_update", "state": "running"}
    conv = run(
        upd(state),
        am("a1", [txt("a background task finished")]),
        upd({"sessionUpdate": "state_update", "state": "idle", "stopReason": "end_turn"}),
    )
    [turn] = conv.turns
    assert (turn.by, turn.seq, turn.prompt, turn.status, turn.end_seq) == ("agent", 1, [], "ended", 3)
    assert turn.first_output_seq == 2
