"""Fold: whole conversations in relay order: the v2 seed document's traffic
(``tests/v2_traffic.py``) and each real SDK fixture in ``fixtures/traffic`` folded into what its
client printed.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from acp_proxy.read.fold import (
    Call,
    Cancellation,
    Compaction,
    Conversation,
    ErrorResponse,
    FoldInput,
    Message,
    Notice,
    Permission,
    Plan,
    SessionState,
    ToolCall,
    Unknown,
    fold,
    text_of,
)
from tests import v2_traffic
from tests.read.fold_support import (
    SID,
    TRAFFIC,
    am,
    inputs,
    only,
    run,
    texts,
    txt,
    upd,
)

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
