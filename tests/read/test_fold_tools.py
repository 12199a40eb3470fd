"""Fold: tool calls (v1 and v2 ``tool-calls.mdx``), permission requests and their answers, and
request/response pairing by id per direction.
"""

from __future__ import annotations

from typing import Any

import pytest

from acp_proxy.read.fold import (
    Call,
    ErrorResponse,
    Permission,
    ToolCall,
)
from tests.read.fold_support import (
    SID,
    ac,
    describe,
    item,
    only,
    response,
    run,
    tcc,
    tcu,
)

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
