"""One frame in a few words (``acp_proxy.read.summary``): pure, total, no control character out."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from acp_proxy.protocol import wire
from acp_proxy.read.summary import printable, summarize
from tests import v2_traffic as v2

TRAFFIC = Path(__file__).parents[1] / "fixtures" / "traffic"
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def row(message: Any, direction: str = "a2c", method: str | None = None) -> dict[str, Any]:
    """A frames row as the recorder would fill it (kind, method, ids from the wire decoder)."""
    raw = message if isinstance(message, str) else json.dumps(message)
    frame = wire.decode(raw.encode())
    return {
        "dir": direction,
        "raw": raw,
        "kind": frame.kind,
        "method": method or frame.method,
        "rpc_id": frame.rpc_id,
        "update_kind": frame.update_kind,
        "error_code": frame.error_code,
        "error_message": frame.error_message,
        "decode_error": frame.decode_error,
    }


def update(body: dict[str, Any]) -> dict[str, Any]:
    return row({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s", "update": body}})


@pytest.mark.parametrize(
    ("frame", "expected"),
    [
        (
            update({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "Hi\nthere"}}),
            "agent: Hi⏎there",
        ),
        (
            update({"sessionUpdate": "user_message_chunk", "content": {"type": "image", "mimeType": "image/png"}}),
            "user: [image image/png]",
        ),
        (update({"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": "hmm"}}), "thought: hmm"),
        (
            update(
                {
                    "sessionUpdate": "tool_call",
                    "toolCallId": "c1",
                    "title": "Read a.py",
                    "kind": "read",
                    "status": "pending",
                }
            ),
            "tool c1: Read a.py [read] pending",
        ),
        (update({"sessionUpdate": "tool_call_update", "toolCallId": "c1", "status": "failed"}), "tool c1: failed"),
        (
            update(
                {
                    "sessionUpdate": "plan",
                    "entries": [
                        {"content": "a", "status": "completed", "priority": "high"},
                        {"content": "b", "status": "in_progress", "priority": "high"},
                    ],
                }
            ),
            "plan: 1/2 done · next: b",
        ),
        (
            update({"sessionUpdate": "state_update", "state": "idle", "stopReason": "cancelled"}),
            "state: idle (cancelled)",
        ),
        (update({"sessionUpdate": "current_mode_update", "currentModeId": "code"}), "mode: code"),
        (
            update({"sessionUpdate": "available_commands_update", "availableCommands": [{"name": "web"}]}),
            "commands: /web",
        ),
        (row(v2.NOTICE), "notice: info Rate limit at 80%"),
        (update({"sessionUpdate": "_vendor_hint", "text": "x"}), '_vendor_hint: {"text":"x"}'),
        (row({"jsonrpc": "2.0", "id": 2, "error": {"code": -32603, "message": "boom"}}), "-32603 boom"),
        (
            row({"jsonrpc": "2.0", "id": 2, "result": {"stopReason": "end_turn"}}, method="session/prompt"),
            "stop: end_turn",
        ),
        (row({"jsonrpc": "2.0", "id": 2, "result": {"messageId": "m1"}}, method="session/prompt"), "accepted as m1"),
        (row({"jsonrpc": "2.0", "id": 1, "result": {"sessionId": "abc"}}, method="session/new"), "session abc"),
        (row({"jsonrpc": "2.0", "id": 1, "result": None}, method="session/cancel"), "ok"),
        (row(v2.PROMPT, "c2a"), "prompt: Can you analyze this code for potential issues?"),
        (row(v2.INITIALIZE, "c2a"), "protocol 2 · seed-client 2.0.0"),
        (
            row(
                {"jsonrpc": "2.0", "id": 0, "result": {"outcome": {"outcome": "selected", "optionId": "allow-once"}}},
                "c2a",
                "session/request_permission",
            ),
            "→ allow-once",
        ),
        (row('{"jsonrpc":"2.0",', "a2c"), 'invalid JSON: Input data was truncated: {"jsonrpc":"2.0",'),
        (row("[]", "a2c"), "batch of 0"),
        ({"dir": "stderr", "kind": "stderr", "raw": "panic: \x1b[31mred"}, "panic: ␛[31mred"),
        (
            {"dir": "a2c", "kind": "invalid", "raw": None, "raw_bytes": b"\xff\x1b", "decode_error": "invalid UTF-8"},
            "invalid UTF-8: \\xff␛",
        ),
    ],
)
def test_summaries(frame: dict[str, Any], expected: str) -> None:
    assert summarize(frame) == expected


def test_every_real_recorded_frame_has_a_summary() -> None:
    seen = 0
    for path in sorted(TRAFFIC.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            entry = json.loads(line)
            text = summarize(row(entry["frame"], entry["dir"]))
            assert text and not _CONTROL.search(text), (path.name, entry["frame"], text)
            seen += 1
    assert seen > 50


def test_a_huge_frame_is_not_decoded_whole() -> None:
    big = json.dumps({"jsonrpc": "2.0", "method": "session/update", "params": {"x": "y" * 400_000}})
    assert summarize({"kind": "notification", "method": "session/update", "raw": big}).startswith('{"jsonrpc"')


_ROW = st.fixed_dictionaries(
    {},
    optional={
        "kind": st.sampled_from(["request", "response", "notification", "error", "batch", "invalid", "stderr", "x"])
        | st.none(),
        "dir": st.sampled_from(["c2a", "a2c", "stderr"]) | st.none(),
        "method": st.sampled_from(["session/update", "initialize", "session/prompt", "fs/read_text_file"])
        | st.text(max_size=5)
        | st.none(),
        "raw": st.text(max_size=200)
        | st.recursive(
            st.none() | st.booleans() | st.integers() | st.text(max_size=10),
            lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
            max_leaves=20,
        ).map(
            lambda v: json.dumps({"jsonrpc": "2.0", "method": "session/update", "params": {"update": v}, "result": v})
        ),
        "raw_bytes": st.binary(max_size=50) | st.none(),
        "error_code": st.integers() | st.none(),
        "error_message": st.text(max_size=20) | st.none(),
        "decode_error": st.text(max_size=20) | st.none(),
    },
)


@settings(max_examples=500, deadline=None)
@given(frame=_ROW)
def test_any_row_gives_one_printable_line(frame: dict[str, Any]) -> None:
    text = summarize(frame)
    assert isinstance(text, str) and "\n" not in text
    assert not _CONTROL.search(text)


@given(st.text())
def test_printable_shows_every_control_character(text: str) -> None:
    shown = printable(text)
    assert not _CONTROL.search(shown) and "\u2028" not in shown
    assert printable(text, keep_newlines=True).count("\n") == text.count("\n")
