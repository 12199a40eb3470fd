"""Fold: message upserts and chunks (v2 keyed by ``messageId``, v1 consecutive chunks), prompt
acceptance and completion, as ``prompt-lifecycle.md`` and ``prompt-turn.mdx`` state them.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from acp_proxy.read.fold import (
    Cancellation,
    ErrorResponse,
    FoldInput,
    Message,
    SessionState,
    fold,
)
from tests.read.fold_support import (
    SID,
    ac,
    am,
    describe,
    only,
    prompt,
    response,
    run,
    tcu,
    texts,
    upd,
)

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
