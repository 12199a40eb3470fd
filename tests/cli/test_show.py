"""`show`: the conversation as it happened, without the defects real traffic showed.

Built from frames like the ones measured on real traffic (the TypeScript SDK's v2 pair replaying
a session on the same connection, a v2 agent breaking the replay rules, the npm agents'
authentication, cancellations), folded as ``show`` folds them; the first test records a real
conversation through the proxy and reads it back with the ``show`` command.
"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from rich.console import Console

from acp_proxy.cli import transcript
from acp_proxy.cli.commands import cli
from tests.conftest import start_proxy, watchdog
from tests.read.test_agreement import record, rows_of

SCRIPTED_AGENT = Path(__file__).parents[1] / "scripted_agent.py"
S = "sess_1"


def text(value: str) -> dict[str, str]:
    return {"type": "text", "text": value}


def upd(body: dict[str, Any], sid: str = S) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": sid, "update": body}}


def req(i: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": i, "method": method, "params": params}


def res(i: int, result: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": i, "result": result}


def c2a(message: Any) -> tuple[str, Any, bool]:
    return ("c2a", message, True)


def a2c(message: Any) -> tuple[str, Any, bool]:
    return ("a2c", message, True)


def v2_start() -> list[tuple[str, Any, bool]]:
    return [
        c2a(req(0, "initialize", {"protocolVersion": 2, "info": {"name": "editor", "version": "1"}})),
        a2c(res(0, {"protocolVersion": 2, "info": {"name": "agent", "version": "2"}})),
        c2a(req(1, "session/new", {"cwd": "/w"})),
        a2c(res(1, {"sessionId": S})),
    ]


def shown(frames: list[tuple[str, Any, bool]], *, ended: bool = True) -> str:
    records, _ = record(frames, ended=ended)
    out = io.StringIO()
    con = Console(file=out, width=300, color_system=None)
    for conv in transcript.fold_rows(rows_of(records), ended={1: ended}).values():
        transcript.render_conversation(con, conv)
    return out.getvalue()


def lines_of(output: str, label: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith(label) or line.startswith(f"history {label}")]


# The TypeScript SDK's v2 pair: a turn, then session/resume with replayFrom on the same connection.
FIRST_TURN = [
    c2a(req(2, "session/prompt", {"sessionId": S, "prompt": [text("hi")]})),
    a2c(res(2, {"messageId": "u1"})),
    a2c(upd({"sessionUpdate": "user_message_chunk", "messageId": "u1", "content": text("hi")})),
    a2c(upd({"sessionUpdate": "state_update", "state": "running"})),
    a2c(upd({"sessionUpdate": "agent_message_chunk", "messageId": "a1", "content": text("Hello ")})),
    a2c(upd({"sessionUpdate": "agent_message_chunk", "messageId": "a1", "content": text("world")})),
    a2c(upd({"sessionUpdate": "agent_message_chunk", "messageId": "a2", "content": text("!")})),
    a2c(upd({"sessionUpdate": "state_update", "state": "idle", "stopReason": "end_turn"})),
]
RESUME = c2a(req(3, "session/resume", {"sessionId": S, "cwd": "/w", "replayFrom": {"type": "start"}}))
REPLAY = [
    a2c(upd({"sessionUpdate": "user_message_chunk", "messageId": "u1", "content": text("hi")})),
    a2c(upd({"sessionUpdate": "agent_message_chunk", "messageId": "a1", "content": text("Hello world")})),
    a2c(upd({"sessionUpdate": "notice", "severity": "info", "title": "Rate limit at 80%"})),  # should not be
    a2c(upd({"sessionUpdate": "agent_message_chunk", "messageId": "a2", "content": text("!")})),
    a2c(upd({"sessionUpdate": "state_update", "state": "idle"})),
]


@pytest.mark.spawns
def test_a_session_replayed_on_its_own_connection_is_rebuilt_not_appended_to(tmp_path: Path) -> None:
    script = {
        "on": {
            "initialize": [res("$id", {"protocolVersion": 2, "info": {"name": "agent", "version": "2"}})],
            "session/new": [res("$id", {"sessionId": S})],
            "session/prompt": [res("$id", {"messageId": "u1"}), *(f[1] for f in FIRST_TURN[2:])],
            "session/resume": [*(f[1] for f in REPLAY), res("$id", {})],
        }
    }
    path = tmp_path / "script.json"
    path.write_text(json.dumps(script))
    db = tmp_path / "rec.db"
    proc = start_proxy(["run", "--db", str(db), "--", sys.executable, str(SCRIPTED_AGENT), str(path)])
    timer = watchdog(proc, 60)
    assert proc.stdin is not None and proc.stdout is not None

    def send_and_wait(message: dict[str, Any], until: Any) -> None:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps(message).encode() + b"\n")
        proc.stdin.flush()
        while not until(json.loads(proc.stdout.readline() or b"null")):
            pass

    def answer(i: int) -> Any:
        return lambda m: m is None or (m.get("id") == i and "method" not in m)

    try:
        send_and_wait(v2_start()[0][1], answer(0))
        send_and_wait(v2_start()[2][1], answer(1))
        idle = "end_turn"
        send_and_wait(
            FIRST_TURN[0][1],
            lambda m: m is None or ((m.get("params") or {}).get("update") or {}).get("stopReason") == idle,
        )
        send_and_wait(RESUME[1], answer(3))
        proc.stdin.close()
        proc.stdout.read()
        assert proc.wait(timeout=30) == 0
    finally:
        timer.cancel()
    result = CliRunner().invoke(cli, ["show", "last", "--db", str(db)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert lines_of(result.output, "user") == ["user       hi"]
    assert lines_of(result.output, "agent") == ["agent      Hello world", "agent      !"]
    assert "history notice     (replayed) [info] Rate limit at 80%" in result.output
    assert "(live)" not in result.output
    (conv,) = json.loads(CliRunner().invoke(cli, ["show", "last", "--json", "--db", str(db)]).output)[1:]
    agent = [e for e in conv["timeline"] if e["entity"] == "message" and e["role"] == "agent"]
    assert [(e["message_id"], e["replay"], e["replayed_seq"] is not None) for e in agent] == [
        ("a1", False, True),
        ("a2", False, True),
    ]


def test_the_rule_breaking_agents_replay_of_a_message_shows_once() -> None:
    output = shown([*v2_start(), *FIRST_TURN, RESUME, *REPLAY, a2c(res(3, {}))])
    assert lines_of(output, "agent") == ["agent      Hello world", "agent      !"]
    assert lines_of(output, "user") == ["user       hi"]


def test_a_replay_on_a_new_connection_is_history() -> None:
    output = shown([*v2_start()[:2], RESUME, *REPLAY, a2c(res(3, {}))])
    assert lines_of(output, "history agent") == ["history agent      Hello world", "history agent      !"]


def test_idle_without_a_stop_reason_ends_the_turn() -> None:
    frames = [*v2_start(), *FIRST_TURN[:-1], a2c(upd({"sessionUpdate": "state_update", "state": "idle"}))]
    output = shown(frames)
    assert "── Turn 1 · ended without a stop reason" in output and "unfinished" not in output


def test_a_queued_prompt_is_still_running_when_the_work_before_it_ends() -> None:
    queued = c2a(req(9, "session/prompt", {"sessionId": S, "prompt": [text("and then?")]}))
    frames = [*v2_start(), *FIRST_TURN[:4], queued, *FIRST_TURN[4:]]
    output = shown(frames, ended=False)
    assert "── Turn 1 · stop: end_turn" in output
    assert "── Turn 2 · running" in output
    assert "── Turn 2 · unfinished (the connection ended first)" in shown(frames, ended=True)


def test_cancel_request_is_shown_with_the_request_it_cancels() -> None:
    frames = [
        *v2_start(),
        a2c(req(5, "session/request_permission", {"sessionId": S, "toolCall": {"toolCallId": "c1"}, "options": []})),
        a2c({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": 5}}),
        c2a({"jsonrpc": "2.0", "id": 5, "error": {"code": -32800, "message": "Cancelled"}}),
    ]
    output = shown(frames)
    assert "permission c1 [] → error" in output and "(cancel requested by $/cancel_request)" in output
    assert "cancel req $/cancel_request request id 5 → cancels session/request_permission (frame 5)" in output


def test_authentication_setup_and_session_state_are_visible() -> None:
    frames = [
        c2a(req(0, "initialize", {"protocolVersion": 1, "clientInfo": {"name": "zed", "version": "0.1"}})),
        a2c(
            res(
                0,
                {
                    "protocolVersion": 1,
                    "agentInfo": {"name": "claude-agent-acp", "version": "0.23.1"},
                    "authMethods": [{"id": "claude-login", "name": "Log in"}],
                },
            )
        ),
        c2a(req(1, "authenticate", {"methodId": "claude-login"})),
        a2c(res(1, {})),
        c2a(req(2, "session/new", {"cwd": "/w", "mcpServers": []})),
        a2c(res(2, {"sessionId": S, "modes": {"currentModeId": "default", "availableModes": []}})),
        a2c(
            upd(
                {
                    "sessionUpdate": "available_commands_update",
                    "availableCommands": [{"name": "review", "description": "r"}],
                }
            )
        ),
        c2a(req(3, "session/set_mode", {"sessionId": S, "modeId": "plan"})),
        a2c(res(3, {})),
        c2a(req(4, "session/prompt", {"sessionId": S, "prompt": [text("go")]})),
        a2c(upd({"sessionUpdate": "current_mode_update", "currentModeId": "code"})),
        a2c(res(4, {"stopReason": "end_turn", "usage": {"totalTokens": 120, "inputTokens": 100, "outputTokens": 20}})),
    ]
    output = shown(frames)
    assert (
        "initialize protocol 1 · client zed 0.1 → "
        "protocol 1 · agent claude-agent-acp 0.23.1 · auth methods claude-login" in output
    )
    assert 'auth       authenticate methodId="claude-login" → ok' in output
    assert 'session    session/new cwd="/w" → session sess_1 · mode default' in output
    assert "commands   /review (1)" in output
    assert 'mode       session/set_mode modeId="plan" → ok' in output
    assert "mode       → code" in output
    assert "usage 120 tokens (100 in, 20 out)" in output


def test_a_terminal_exit_and_a_client_terminal_read_as_words() -> None:
    frames = [
        *v2_start()[:2],
        a2c(req(7, "terminal/create", {"sessionId": S, "command": "make"})),
        c2a(res(7, {"terminalId": "t1"})),
        a2c(req(8, "terminal/wait_for_exit", {"sessionId": S, "terminalId": "t1"})),
        c2a(res(8, {"exitCode": None, "signal": "SIGKILL"})),
    ]
    output = shown(frames)
    assert "terminal   t1 (client terminal) make — killed by SIGKILL" in output
    assert "{" not in "".join(lines_of(output, "terminal"))


def test_work_the_agent_started_itself_is_a_turn() -> None:
    frames = [
        *v2_start(),
        a2c(upd({"sessionUpdate": "state_update", "state": "running"})),
        a2c(upd({"sessionUpdate": "agent_message_chunk", "messageId": "a1", "content": text("CI is green")})),
        a2c(upd({"sessionUpdate": "state_update", "state": "idle", "stopReason": "end_turn"})),
    ]
    output = shown(frames)
    assert "── Turn 1 · started by the agent · stop: end_turn" in output
    assert output.index("── Turn 1") < output.index("CI is green")


def test_a_proxy_chains_inner_conversation_is_shown_with_its_hop() -> None:
    from tests.checks.test_checks import chained

    inner = [
        *[(d, m) for d, m, _ in v2_start()],
        ("c2a", req(2, "session/prompt", {"sessionId": S, "prompt": [text("refactor it")]})),
        ("a2c", res(2, {"messageId": "u1"})),
        ("a2c", upd({"sessionUpdate": "state_update", "state": "running"})),
        ("a2c", upd({"sessionUpdate": "agent_message_chunk", "messageId": "a1", "content": text("Done.")})),
        ("a2c", upd({"sessionUpdate": "state_update", "state": "idle", "stopReason": "end_turn"})),
    ]
    output = shown([(d, m, True) for d, m in chained(inner)])
    assert f"Session {S}  hop 1: inside proxy/successor" in output
    hop = output[output.index("hop 1: inside proxy/successor") :]
    assert "refactor it" in hop and "Done." in hop and "── Turn 1 · stop: end_turn" in hop
    # The link itself carries only envelopes: no session of its own.
    assert output.count(f"Session {S}") == 1
