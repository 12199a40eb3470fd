"""What the fold's tests share: building traffic (messages, prompts, answers, chunks, replayed
steps) and folding it.

The fold's tests are split by topic (``test_fold_*.py``), each after the protocol documents' pages
(the v2 draft's ``prompt-lifecycle.md``, the v1 and v2 tool-call and plan pages) and the recorded
traffic of real SDK peers in ``fixtures/traffic``.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from acp_proxy.read.fold import (
    Conversation,
    FoldInput,
    Message,
    SessionState,
    fold,
)

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


def describe(conv: Conversation) -> list[str]:
    """The conversation's entries, without the session state reports beside it (usage, mode...)."""
    return [
        f"{e.role}:{e.text}" if isinstance(e, Message) else e.entity
        for e in conv.timeline
        if not isinstance(e, SessionState)
    ]
