"""`diff` compares everything outside the prompt turns too, and exits 1 on any difference.

Two agents that never reach a prompt turn — both refuse ``session/new``, with different errors
(as a codex run and a gemini run without credentials do) — differ, and ``diff`` must say where.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from acp_proxy.cli import transcript
from acp_proxy.cli.commands import cli
from acp_proxy.read import diff as df
from tests.conftest import proxy_env, run_proxy
from tests.read.test_agreement import record, rows_of

SCRIPTED_AGENT = Path(__file__).parents[1] / "scripted_agent.py"
CLIENT = (
    b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1,'
    b'"clientInfo":{"name":"editor","version":"1"}}}\n'
    b'{"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"/w","mcpServers":[]}}\n'
)


def agent(tmp_path: Path, name: str, error: dict[str, Any]) -> list[str]:
    script = {
        "on": {
            "initialize": [
                {
                    "jsonrpc": "2.0",
                    "id": "$id",
                    "result": {"protocolVersion": 1, "agentInfo": {"name": "agent", "version": "1"}, "authMethods": []},
                }
            ],
            "session/new": [{"jsonrpc": "2.0", "id": "$id", "error": error}],
        }
    }
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(script))
    return [sys.executable, str(SCRIPTED_AGENT), str(path)]


@pytest.mark.spawns
def test_two_runs_that_differ_only_in_their_session_new_errors_differ(tmp_path: Path) -> None:
    db = tmp_path / "rec.db"
    for name, error in (
        ("first", {"code": -32000, "message": "Authentication required"}),
        ("second", {"code": -32603, "message": "Not logged in"}),
        ("third", {"code": -32000, "message": "Authentication required", "data": {"volatile": 7}}),
    ):
        done = run_proxy(
            ["run", "--db", str(db), "--", *agent(tmp_path, name, error)], input=CLIENT, timeout=60, env=proxy_env()
        )
        assert done.returncode == 0, done.stderr
    runner = CliRunner()
    differing = runner.invoke(cli, ["diff", "1", "2", "--db", str(db)])
    assert differing.exit_code == 1, differing.output
    assert "outside the turns · differs: setup" in differing.output
    assert "session/new → error -32000 Authentication required" in differing.output
    assert "session/new → error -32603 Not logged in" in differing.output
    as_json = json.loads(runner.invoke(cli, ["diff", "1", "2", "--json", "--db", str(db)]).output)
    assert (as_json["differ"], as_json["turns"], as_json["connection"]["differs"]) == (True, [], ["setup"])
    # The same refusal (its volatile `data` aside) is no difference.
    same = runner.invoke(cli, ["diff", "1", "3", "--db", str(db)])
    assert same.exit_code == 0, same.output
    assert "no difference in 0 turn(s) or around them" in same.output


def conversations(frames: list[tuple[str, Any, bool]], ended: bool = True) -> list[Any]:
    records, _ = record(frames, ended=ended)
    return list(transcript.fold_rows(rows_of(records), ended={1: ended}).values())


def req(i: int, method: str, params: dict[str, Any]) -> tuple[str, Any, bool]:
    return ("c2a", {"jsonrpc": "2.0", "id": i, "method": method, "params": params}, True)


def res(i: int, result: Any) -> tuple[str, Any, bool]:
    return ("a2c", {"jsonrpc": "2.0", "id": i, "result": result}, True)


START = [
    req(0, "initialize", {"protocolVersion": 1}),
    res(0, {"protocolVersion": 1, "agentInfo": {"name": "agent", "version": "1"}}),
    req(1, "session/new", {"cwd": "/w"}),
    res(1, {"sessionId": "s1"}),
]


def test_initialize_unanswered_requests_and_errors_outside_turns_are_compared() -> None:
    base = conversations(START)
    other_agent = conversations(
        [START[0], res(0, {"protocolVersion": 1, "agentInfo": {"name": "agent", "version": "2"}}), *START[2:]]
    )
    assert df.diff_connection(base, other_agent).differs == ["initialize"]
    pending = conversations([*START, req(2, "session/list", {})])
    assert df.diff_connection(base, pending).differs == ["setup", "unanswered"]
    stray = conversations(
        [*START, ("a2c", {"jsonrpc": "2.0", "id": 99, "error": {"code": -32600, "message": "?"}}, True)]
    )
    found = df.diff_connection(base, stray)
    assert found.differs == ["errors"] and found.right["errors"] == ["?: -32600 ?"]
    assert df.any_difference([], found) and not df.any_difference([], df.diff_connection(base, conversations(START)))


def test_a_turn_left_unfinished_differs_from_one_that_ended() -> None:
    prompt = req(2, "session/prompt", {"sessionId": "s1", "prompt": [{"type": "text", "text": "go"}]})
    ended = conversations([*START, prompt, res(2, {"stopReason": "end_turn"})])
    unfinished = conversations([*START, prompt])
    (turn,) = df.diff_conversations(ended, unfinished)
    assert turn.differs == ["stop_reason", "outcome"]
    assert (turn.left or {})["outcome"] == "ended" and (turn.right or {})["outcome"] == "unfinished"
