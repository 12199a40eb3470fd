"""The Python API's live control with the real SDK pair: the official SDK client runs behind
``ProxiedAgent(control=True)`` in front of the SDK example agent (with tool calls and
permission requests), and the test acts on it the way the scenario reads — a fault added and
removed, a tool call held and edited, another dropped, a mark — then checks what the client
printed and what the recording holds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from acp_proxy.errors import UsageError
from acp_proxy.testing import ProxiedAgent
from tests.peers import agent_argv, client_argv, peer_env

pytestmark = pytest.mark.spawns

DEADLINE_S = 60.0


def retitled(frame: dict[str, Any]) -> dict[str, Any]:
    frame["params"]["update"]["title"] = "EDITED title"
    return frame


def test_fault_hold_edit_drop_and_mark_read_like_the_scenario(tmp_path: Path) -> None:
    agent = ProxiedAgent(
        agent_argv("--permission"),
        db=tmp_path / "api.db",
        control=True,
        breaks=["method:session/new kind:response", "update:tool_call"],
        stderr_file=tmp_path / "proxy.stderr",
        timeout=DEADLINE_S,
    )
    agent.start(client_argv(agent.argv, timeout=DEADLINE_S), env=peer_env(), cwd=tmp_path)
    with agent.hold("method:session/new kind:response") as session:
        session.wait()  # nothing has been prompted yet: the fault is in force from prompt 1
        slow = agent.fault("delay=10ms if method:session/prompt kind:request")
        session.release()
    with agent.hold("update:tool_call") as held:
        first = held.wait()  # prompt 1's tool call, held
        assert json.loads(first["frame"])["params"]["update"]["toolCallId"] == "call_1"
        slow.remove()  # prompt 2 goes at full speed
        held.release(edit=retitled)
        second = held.wait()  # prompt 2's tool call
        held.drop()
    agent.mark(first["seq"], note="its title was edited")
    result = agent.finish()

    assert result.returncode == 0, result.stderr
    out = result.stdout.splitlines()
    assert "tool_call: call_1 pending EDITED title" in out  # the client saw the edit
    assert not any(line.startswith("tool_call: call_2") for line in out)  # and not the dropped one
    assert "prompt: second prompt" in out and out.count("stop: end_turn") == 2
    marked = agent.frames("marked")
    assert [f["seq"] for f in marked] == [first["seq"]] and marked[0]["forwarded"] == 0
    assert [f["seq"] for f in agent.frames('comment:"title was edited"')] == [first["seq"]]
    faults = agent.faults()
    assert [(f["action"], f["method"]) for f in faults] == [("delay", "session/prompt")]  # prompt 1 only
    dropped = agent.sql("select forwarded, note from frames where seq = ?", second["seq"])
    assert dropped == [{"forwarded": 0, "note": "held by breakpoint 2 (acp-proxy ctl); forwarded only if released"}]
    edited = agent.frames("dir:proxy")
    assert len(edited) == 1 and "EDITED title" in edited[0]["raw"]


def test_live_control_needs_control_and_a_bad_breakpoint_fails_at_once(tmp_path: Path) -> None:
    plain = ProxiedAgent(["cat"], db=tmp_path / "x.db")
    with pytest.raises(UsageError, match="control=True"):
        plain.fault("drop")
    with pytest.raises(UsageError):
        ProxiedAgent(["cat"], db=tmp_path / "x.db", breaks=["method:("])
    with pytest.raises(UsageError, match="start"):
        plain.finish()
