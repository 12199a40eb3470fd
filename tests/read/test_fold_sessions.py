"""Fold: latest-value session state (usage, info, modes, config, commands), notices, subagents,
unknown variants kept raw, replay windows, forwarding and sessions folded apart.
"""

from __future__ import annotations

import json

import pytest

from acp_proxy.read.fold import (
    Folder,
    FoldInput,
    Message,
    Notice,
    SessionState,
    Subagent,
    ToolCall,
    Unknown,
    fold,
    fold_sessions,
)
from tests.read.fold_support import (
    SID,
    Replay,
    ac,
    am,
    describe,
    inputs,
    only,
    response,
    run,
    tcu,
    txt,
    upd,
)

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
