"""Protocol version 2 traffic built from the seed document's examples (prompt-lifecycle.md).

A scripted agent (``scripted_agent.py``) answers the client frames below: initialize with
``info``, a session, one prompt accepted with a ``messageId`` and reported through
``user_message``, ``state_update`` running / requires_action / idle, a plan, agent message
upserts and chunks, a tool call with streamed content and a permission request, usage, a
compaction, a live notice, then a second prompt that the client cancels, and finally a
``session/resume`` with ``replayFrom`` whose history replay contains a notice (which a
conforming agent should not replay, and which ``--strip-replayed-notices`` withholds).
"""

from __future__ import annotations

from typing import Any

SESSION = "sess_abc123def456"


def update(body: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": SESSION, "update": body}}


def text(value: str) -> dict[str, str]:
    return {"type": "text", "text": value}


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {"protocolVersion": 2, "info": {"name": "seed-client", "version": "2.0.0"}, "capabilities": {}},
}
NEW_SESSION = {"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": "/home/user/project"}}
PROMPT = {
    "jsonrpc": "2.0",
    "id": 2,
    "method": "session/prompt",
    "params": {"sessionId": SESSION, "prompt": [text("Can you analyze this code for potential issues?")]},
}
PERMISSION_ANSWER = {
    "jsonrpc": "2.0",
    "id": 0,
    "result": {"outcome": {"outcome": "selected", "optionId": "allow-once"}},
}
PROMPT_2 = {
    "jsonrpc": "2.0",
    "id": 3,
    "method": "session/prompt",
    "params": {"sessionId": SESSION, "prompt": [text("Now fix them")]},
}
CANCEL = {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": SESSION}}
RESUME = {
    "jsonrpc": "2.0",
    "id": 4,
    "method": "session/resume",
    "params": {"sessionId": SESSION, "cwd": "/home/user/project", "replayFrom": {"type": "start"}},
}

NOTICE = update({"sessionUpdate": "notice", "severity": "info", "title": "Rate limit at 80%"})

AGENT_SCRIPT: dict[str, Any] = {
    "on": {
        "initialize": [
            {
                "jsonrpc": "2.0",
                "id": "$id",
                "result": {
                    "protocolVersion": 2,
                    "info": {"name": "seed-agent", "version": "2.0.0"},
                    "capabilities": {"session": {"resume": {}}},
                },
            }
        ],
        "session/new": [{"jsonrpc": "2.0", "id": "$id", "result": {"sessionId": SESSION}}],
        "session/prompt": [
            [
                {"jsonrpc": "2.0", "id": "$id", "result": {"messageId": "msg_user_8f7a1"}},
                update(
                    {
                        "sessionUpdate": "user_message",
                        "messageId": "msg_user_8f7a1",
                        "content": [text("Can you analyze this code for potential issues?")],
                    }
                ),
                update({"sessionUpdate": "state_update", "state": "running"}),
                update(
                    {
                        "sessionUpdate": "plan_update",
                        "plan": {
                            "type": "items",
                            "planId": "plan-1",
                            "entries": [
                                {"content": "Check for syntax errors", "priority": "high", "status": "pending"}
                            ],
                        },
                    }
                ),
                update({"sessionUpdate": "agent_message", "messageId": "msg_agent_c42b9", "content": [text("A")]}),
                update({"sessionUpdate": "agent_message_chunk", "messageId": "msg_agent_c42b9", "content": text("B")}),
                update(
                    {
                        "sessionUpdate": "tool_call_update",
                        "toolCallId": "call_001",
                        "title": "Analyzing main.py",
                        "kind": "read",
                        "status": "pending",
                    }
                ),
                {
                    "jsonrpc": "2.0",
                    "id": 0,
                    "method": "session/request_permission",
                    "params": {
                        "sessionId": SESSION,
                        "title": "Read main.py?",
                        "subject": {"type": "tool_call", "toolCall": {"toolCallId": "call_001"}},
                        "options": [{"optionId": "allow-once", "name": "Allow once", "kind": "allow_once"}],
                    },
                },
                update({"sessionUpdate": "state_update", "state": "requires_action"}),
            ],
            [
                {"jsonrpc": "2.0", "id": "$id", "result": {"messageId": "msg_user_2"}},
                update(
                    {"sessionUpdate": "user_message_chunk", "messageId": "msg_user_2", "content": text("Now fix them")}
                ),
                update({"sessionUpdate": "state_update", "state": "running"}),
                update({"sessionUpdate": "agent_message_chunk", "messageId": "msg_agent_2", "content": text("Fixing")}),
            ],
        ],
        "session/cancel": [
            update({"sessionUpdate": "tool_call_update", "toolCallId": "call_002", "status": "cancelled"}),
            update({"sessionUpdate": "state_update", "state": "idle", "stopReason": "cancelled"}),
        ],
        "session/resume": [
            update(
                {
                    "sessionUpdate": "user_message",
                    "messageId": "msg_user_8f7a1",
                    "content": [text("Can you analyze this code for potential issues?")],
                }
            ),
            NOTICE,
            update({"sessionUpdate": "agent_message", "messageId": "msg_agent_c42b9", "content": [text("C")]}),
            update({"sessionUpdate": "state_update", "state": "idle"}),
            {"jsonrpc": "2.0", "id": "$id", "result": {}},
        ],
    }
}

# What the agent says after the permission answer arrives: the rest of the first turn.
AFTER_PERMISSION = [
    update({"sessionUpdate": "state_update", "state": "running"}),
    update({"sessionUpdate": "tool_call_update", "toolCallId": "call_001", "status": "in_progress"}),
    update(
        {
            "sessionUpdate": "tool_call_content_chunk",
            "toolCallId": "call_001",
            "content": {"type": "content", "content": text("Checked syntax...")},
        }
    ),
    update({"sessionUpdate": "tool_call_update", "toolCallId": "call_001", "status": "completed"}),
    update({"sessionUpdate": "compaction_update", "compactionId": "cmp_001", "status": "in_progress"}),
    update({"sessionUpdate": "compaction_summary_chunk", "compactionId": "cmp_001", "content": text("## Retained")}),
    update({"sessionUpdate": "compaction_update", "compactionId": "cmp_001", "status": "completed"}),
    update(
        {"sessionUpdate": "usage_update", "used": 53000, "size": 200000, "cost": {"amount": 0.045, "currency": "USD"}}
    ),
    NOTICE,
    update({"sessionUpdate": "_vendor_progress", "percent": 50}),
    update({"sessionUpdate": "future_thing", "x": 1}),
    update({"sessionUpdate": "state_update", "state": "idle", "stopReason": "end_turn"}),
]
AGENT_SCRIPT["on_response"] = {"0": AFTER_PERMISSION}
