"""`show` renders every method and every update variant of the shipped schemas on purpose.

The test walks the four schemas (``acp_proxy/schema/*.json``: v1, v2, stable and draft): each
method, in each direction the schema lets it travel, and each ``sessionUpdate`` variant is sent
in a small conversation, recorded as the recorder records it, folded as ``show`` folds it and
rendered. None may come out as "unknown"; each must say what it is. A schema that gains a method
or a variant fails here until it is given a rendering (and an example below).
"""

from __future__ import annotations

import base64
import io
from typing import Any

import pytest
from rich.console import Console

from acp_proxy.cli import transcript
from acp_proxy.protocol import vocabulary as acp
from tests.read.test_agreement import record, rows_of

S = "sess_1"


def text(value: str) -> dict[str, str]:
    return {"type": "text", "text": value}


# One example per variant, and what its line must say.
UPDATES: dict[str, tuple[dict[str, Any], str]] = {
    "agent_message": ({"messageId": "m1", "content": [text("Hello there")]}, "agent      Hello there"),
    "agent_message_chunk": ({"content": text("Hello chunk")}, "agent      Hello chunk"),
    "agent_thought": ({"messageId": "t1", "content": [text("Thinking")]}, "thought    Thinking"),
    "agent_thought_chunk": ({"content": text("Pondering")}, "thought    Pondering"),
    "user_message": ({"messageId": "u1", "content": [text("Question")]}, "user       Question"),
    "user_message_chunk": ({"content": text("Asked")}, "user       Asked"),
    "session_message": (
        {"messageId": "sm1", "content": [text("to the child")], "recipientSessionId": "child"},
        "message    to the child",
    ),
    "session_message_chunk": ({"messageId": "sm2", "content": text("from a peer")}, "message    from a peer"),
    "available_commands_update": (
        {"availableCommands": [{"name": "web", "description": "Search"}, {"name": "test", "description": "Test"}]},
        "commands   /web, /test (2)",
    ),
    "compaction_update": ({"compactionId": "c1", "status": "completed"}, "compaction c1 — completed"),
    "compaction_summary_chunk": ({"compactionId": "c2", "content": text("kept")}, "compaction c2 — in_progress"),
    "config_option_update": (
        {"configOptions": [{"id": "model", "name": "Model", "type": "select", "currentValue": "fast", "options": []}]},
        'config     model="fast"',
    ),
    "current_mode_update": ({"currentModeId": "code"}, "mode       → code"),
    "notice": (
        {"severity": "warning", "title": "MCP server unavailable"},
        "notice     (live) [warning] MCP server unavailable",
    ),
    "plan": (
        {
            "entries": [
                {"content": "Write it", "priority": "high", "status": "completed"},
                {"content": "Skip it", "priority": "low", "status": "cancelled"},
            ]
        },
        "[-] Skip it (cancelled)",
    ),
    "plan_update": (
        {
            "plan": {
                "type": "items",
                "planId": "p1",
                "entries": [{"content": "Do", "priority": "high", "status": "in_progress"}],
            }
        },
        "[~] Do",
    ),
    "plan_removed": ({"planId": "p9"}, "plan       p9 removed"),
    # Newer than the published schema files (acp_proxy/schema/v2.supplement.json).
    "replay_complete": ({}, "replay     complete: the history replay ends here"),
    "cursor_update": ({"cursorId": "cur1", "anchor": {"messageId": "m1"}}, 'cursor     cur1 at {"messageId":"m1"}'),
    "prompt_suggestions_update": (
        {"suggestions": [{"prompt": [text("Run the tests")]}]},
        "suggest    Run the tests",
    ),
    "session_info_update": ({"title": "Fix the tests"}, "info       title “Fix the tests”"),
    "state_update": ({"state": "idle", "stopReason": "end_turn"}, "state      idle (end_turn)"),
    "subagent_update": ({"sessionId": "child", "title": "Helper"}, "subagent   child Helper"),
    "terminal_update": (
        {"terminalId": "term1", "command": "make", "exitStatus": {"exitCode": 2, "signal": None}},
        "terminal   term1 make — exit code 2",
    ),
    "terminal_output_chunk": (
        {"terminalId": "term2", "data": base64.b64encode(b"compiling\n").decode()},
        "compiling",
    ),
    "tool_call": (
        {"toolCallId": "c1", "title": "Read file", "kind": "read", "status": "pending"},
        "tool       c1 [read] Read file — pending",
    ),
    "tool_call_update": (
        {"toolCallId": "c2", "title": "Edit", "status": "completed"},
        "tool       c2 [other] Edit — completed",
    ),
    "tool_call_content_chunk": (
        {"toolCallId": "c3", "content": {"type": "content", "content": text("streamed")}},
        "streamed",
    ),
    "usage_update": (
        {"used": 5300, "size": 200000, "cost": {"amount": 0.04, "currency": "USD"}},
        "usage      5300 of 200000 tokens, cost 0.04 USD",
    ),
}


def variants() -> list[tuple[int, str]]:
    return sorted((v, name) for v in acp.PROTOCOL_VERSIONS for name in acp.vocabulary(v).updates)


def methods() -> list[tuple[int, str, str, bool]]:
    """(version, direction, method, is_request) for everything the schemas let travel."""
    out = set()
    for v in acp.PROTOCOL_VERSIONS:
        voc = acp.vocabulary(v)
        for direction in acp.DIRECTIONS:
            out |= {(v, direction, m, True) for m in voc.requests(direction)}
            out |= {(v, direction, m, False) for m in voc.notifications(direction)}
    return sorted(out)


def start(version: int) -> list[tuple[str, Any, bool]]:
    return [
        ("c2a", {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": version}}, True),
        ("a2c", {"jsonrpc": "2.0", "id": 0, "result": {"protocolVersion": version}}, True),
        ("c2a", {"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": "/w"}}, True),
        ("a2c", {"jsonrpc": "2.0", "id": 1, "result": {"sessionId": S}}, True),
    ]


def shown(frames: list[tuple[str, Any, bool]]) -> str:
    records, _ = record(frames, ended=True)
    conversations = transcript.fold_rows(rows_of(records))
    out = io.StringIO()
    con = Console(file=out, width=300, color_system=None)
    for conv in conversations.values():
        transcript.render_conversation(con, conv)
    return out.getvalue()


def test_every_variant_has_an_example() -> None:
    assert {name for _, name in variants()} == set(UPDATES)


@pytest.mark.parametrize(("version", "variant"), variants(), ids=[f"v{v}-{n}" for v, n in variants()])
def test_every_update_variant_is_rendered_deliberately(version: int, variant: str) -> None:
    body, says = UPDATES[variant]
    update = {
        "jsonrpc": "2.0",
        "method": "session/update",
        "params": {"sessionId": S, "update": {"sessionUpdate": variant, **body}},
    }
    output = shown([*start(version), ("a2c", update, True)])
    assert "unknown" not in output, output
    assert says in output, output


# Params that make a request or notification concrete enough to say what it does.
PARAMS: dict[str, dict[str, Any]] = {
    "initialize": {"protocolVersion": 1, "clientInfo": {"name": "editor", "version": "1"}},
    "proxy/initialize": {"protocolVersion": 1, "clientInfo": {"name": "conductor", "version": "2"}},
    "proxy/successor": {"method": "$/cancel_request", "params": {"requestId": 99}},
    "authenticate": {"methodId": "oauth"},
    "session/prompt": {"sessionId": S, "prompt": [text("go")]},
    "session/request_permission": {"sessionId": S, "toolCall": {"toolCallId": "c1"}, "options": []},
    "terminal/create": {"sessionId": S, "command": "ls"},
    "fs/read_text_file": {"sessionId": S, "path": "/w/a.py"},
    "fs/write_text_file": {"sessionId": S, "path": "/w/a.py", "content": "x"},
    "mcp/message": {"method": "tools/list", "params": {}},
    "$/cancel_request": {"requestId": 99},
}
# What a request's line must say beyond its method name (requests that have entities of their own).
SAYS = {
    "session/prompt": "── Turn 1",
    "session/request_permission": "permission c1",
    "terminal/create": "terminal",
    "terminal/output": "terminal",
    "terminal/wait_for_exit": "terminal",
    "terminal/kill": "terminal",
    "terminal/release": "terminal",
    "session/cancel": "session/cancel sent by the client",
    "$/cancel_request": "$/cancel_request request id 99 → names no pending request",
}


@pytest.mark.parametrize(
    ("version", "direction", "method", "is_request"),
    [m for m in methods() if m[2] != "session/update"],
    ids=[f"v{v}-{d}-{m}-{'request' if r else 'notification'}" for v, d, m, r in methods() if m != "session/update"],
)
def test_every_method_is_rendered_deliberately(version: int, direction: str, method: str, is_request: bool) -> None:
    assert method in transcript.METHOD_LABELS, f"{method} has no rendering of its own"
    params = PARAMS.get(method, {"sessionId": S, "terminalId": "term1"})
    frames = start(version)
    if method.startswith("terminal/") and method != "terminal/create" and direction == "a2c":
        # The terminal those calls are about.
        frames += [
            (
                "a2c",
                {"jsonrpc": "2.0", "id": 50, "method": "terminal/create", "params": {"sessionId": S, "command": "ls"}},
                True,
            ),
            ("c2a", {"jsonrpc": "2.0", "id": 50, "result": {"terminalId": "term1"}}, True),
        ]
    other = "a2c" if direction == "c2a" else "c2a"
    if is_request:
        frames += [
            (direction, {"jsonrpc": "2.0", "id": 7, "method": method, "params": params}, True),
            (other, {"jsonrpc": "2.0", "id": 7, "result": {}}, True),
        ]
    else:
        frames.append((direction, {"jsonrpc": "2.0", "method": method, "params": params}, True))
    output = shown(frames)
    assert "unknown" not in output, output
    assert SAYS.get(method, method) in output, output
