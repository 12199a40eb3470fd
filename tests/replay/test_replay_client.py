"""Replay --client: the recorded client driving a real agent, the new run recorded, then diffed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from acp_proxy.replay import replayer as rp
from acp_proxy.replay.client import ClientReplayer
from tests.conftest import PROXY, proxy_env
from tests.peers import agent_argv, expected_echo, proxied, run_client, transcript
from tests.replay.test_replay import frame_rows, run_diff

pytestmark = pytest.mark.spawns  # every test here starts processes

TIMEOUT_S = 60


def replay_client(
    db: Path, agent: list[str], *args: str, timeout: float = TIMEOUT_S
) -> subprocess.CompletedProcess[str]:
    """``acp-proxy replay 1 --client --db DB [ARGS] -- AGENT``, bounded in time."""
    return subprocess.run(
        [*PROXY, "replay", "1", "--client", "--db", str(db), *args, "--", *agent],
        capture_output=True,
        text=True,
        timeout=timeout + 30,
        env=proxy_env(),
    )


@pytest.fixture
def recorded(tmp_path: Path) -> Path:
    """Run 1: the SDK client with the SDK agent asking permission, recorded through the proxy."""
    db = tmp_path / "rec.db"
    lines = transcript(run_client(proxied(agent_argv("--permission"), db)))
    assert lines[:-1] == expected_echo(permission="allow")
    return db


def test_client_replay_reproduces_the_run_and_diff_shows_no_difference(recorded: Path) -> None:
    result = replay_client(recorded, agent_argv("--permission"), "--strict")
    assert result.returncode == 0, result.stderr
    # The agent's bytes go to the replay, not to our stdout: it says only the new run's id.
    assert result.stdout == "2\n"
    assert "recorded as run 2; compare: acp-proxy diff 1 2" in result.stderr
    first, second = frame_rows(recorded, 1), frame_rows(recorded, 2)
    assert [(r["dir"], r["kind"], r["method"]) for r in first] == [(r["dir"], r["kind"], r["method"]) for r in second]
    diff = run_diff(recorded, "1", "2")
    assert diff.returncode == 0, diff.stdout + diff.stderr
    assert "no difference in 2 turn(s)" in diff.stderr


def test_client_replay_against_a_changed_agent_shows_the_difference(recorded: Path) -> None:
    lenient = replay_client(recorded, agent_argv())  # no --permission: no tool call, nothing to ask
    assert lenient.returncode == 0, lenient.stderr
    assert "never sent the recorded session/request_permission" in lenient.stderr
    diff = run_diff(recorded, "1", "2", "--json")
    assert diff.returncode == 1
    assert [t["differs"] for t in json.loads(diff.stdout)["turns"]] == [["tool_calls", "permissions"]] * 2
    plain = run_diff(recorded, "1", "2")
    assert plain.returncode == 1 and "differs: tool_calls, permissions" in plain.stdout

    strict = replay_client(recorded, agent_argv(), "--strict")
    assert strict.returncode == 1
    assert "replay --client failed with 2 deviation(s)" in strict.stderr


def test_a_hanging_agent_is_one_clear_line_and_exit_1(recorded: Path) -> None:
    silent = [sys.executable, "-c", "import sys; sys.stdin.buffer.read()"]  # reads, never answers
    result = replay_client(recorded, silent, "--timeout", "2", timeout=2)
    assert result.returncode == 1
    assert (
        result.stderr.strip()
        .splitlines()[-1]
        .startswith(
            "acp-proxy: replay --client failed: timed out after 2 s, waiting for the agent's answer to initialize"
        )
    )


def test_agent_required_exactly_with_client(recorded: Path) -> None:
    no_agent = subprocess.run(
        [*PROXY, "replay", "1", "--client", "--db", str(recorded)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        env=proxy_env(),
    )
    assert no_agent.returncode == 2 and "--client needs" in no_agent.stderr


# -- the pure core -------------------------------------------------------------------------------


def lines_of(sends: list[bytes]) -> list[dict[str, Any]]:
    """The JSON messages of lines a replayer decided to send."""
    return [json.loads(s) for s in sends]


def test_client_replayer_maps_session_ids_and_answers_with_live_ids(recorded: Path) -> None:
    replayer = ClientReplayer(frame_rows(recorded, 1), strict=True)
    sent = lines_of(replayer.start())
    assert [m["method"] for m in sent] == ["initialize"]  # then it waits for the answer
    assert replayer.receive(b'{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":1}}\n') != []
    sent = lines_of(replayer.receive(b'{"jsonrpc":"2.0","id":1,"result":{"sessionId":"live-1"}}\n'))
    assert [(m["method"], m["params"]["sessionId"]) for m in sent] == [("session/prompt", "live-1")]
    answer = lines_of(
        replayer.receive(
            b'{"jsonrpc":"2.0","id":"p-7","method":"session/request_permission","params":{"sessionId":"live-1"}}\n'
        )
    )
    assert answer == [
        {"jsonrpc": "2.0", "id": "p-7", "result": {"outcome": {"optionId": "allow-once", "outcome": "selected"}}}
    ]
    sent = lines_of(replayer.receive(b'{"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}}\n'))
    assert [m["params"]["prompt"][0]["text"] for m in sent] == ["second prompt"]
    unasked = lines_of(replayer.receive(b'{"jsonrpc":"2.0","id":9,"method":"fs/read_text_file","params":{}}\n'))
    assert unasked[0]["id"] == 9 and unasked[0]["error"]["code"] == rp.REPLAY_ERROR
    assert not replayer.done
    replayer.receive(b'{"jsonrpc":"2.0","id":"p-8","method":"session/request_permission","params":{}}\n')
    replayer.receive(b'{"jsonrpc":"2.0","id":3,"result":{"stopReason":"end_turn"}}\n')
    assert replayer.done and replayer.fatal is None
    assert replayer.finish() == ["the agent sent fs/read_text_file, which the recording has no answer for"]


def test_client_replayer_strict_stops_on_an_error_where_the_recording_has_a_result(recorded: Path) -> None:
    for strict in (True, False):
        replayer = ClientReplayer(frame_rows(recorded, 1), strict=strict)
        replayer.start()
        after = replayer.receive(b'{"jsonrpc":"2.0","id":0,"error":{"code":-32603,"message":"boom"}}\n')
        assert "initialize" in replayer.deviations[0] and "boom" in replayer.deviations[0]
        if strict:
            assert after == [] and replayer.fatal == replayer.deviations[0]
        else:
            assert [m["method"] for m in lines_of(after)] == ["session/new"] and replayer.fatal is None
