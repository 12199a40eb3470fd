"""The SDK example peers on their own (no proxy): the transcripts other tests compare against.

If these pass, examples/sdk_client.py and examples/sdk_agent.py speak ACP to each other; tests
that put `acp-proxy run` (or a replay) between them can then blame only what is in between.
"""

from __future__ import annotations

import json
import queue
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.peers import (
    AGENT_INIT_LINE,
    SDK_CLIENT,
    agent_argv,
    expected_echo,
    expected_replay,
    expected_turn,
    peer_env,
    run_client,
    session_of,
    transcript,
    without_session,
)

pytestmark = pytest.mark.spawns  # every test here starts processes

SESSION_ID = re.compile(r"[0-9a-f]{32}")


def test_default_echo_transcript() -> None:
    lines = transcript(run_client(agent_argv()))
    assert without_session(lines) == expected_echo()
    assert SESSION_ID.fullmatch(session_of(lines))


def test_prompts_are_sent_in_order_and_kept_on_one_line() -> None:
    lines = transcript(run_client(agent_argv(), "--prompt", "one", "--prompt", "two\nlines \\ here"))
    assert without_session(lines) == expected_echo(["one", "two\\nlines \\\\ here"])


@pytest.mark.parametrize(
    ("client_args", "answer"), [((), "allow"), (("--deny",), "deny"), (("--no-permission",), "error")]
)
def test_permission_request(client_args: tuple[str, ...], answer: str) -> None:
    lines = transcript(run_client(agent_argv("--permission"), *client_args))
    assert without_session(lines) == expected_echo(permission=answer)


def test_load_replays_the_history_of_an_earlier_run(tmp_path: Path) -> None:
    agent = agent_argv("--state-dir", str(tmp_path / "state"))
    session = session_of(transcript(run_client(agent)))

    loaded = transcript(run_client(agent, "--load", session))
    assert loaded == [AGENT_INIT_LINE, *expected_replay(), f"session: {session}"]

    # A prompt after a load extends the history that the next load replays.
    more = transcript(run_client(agent, "--load", session, "--prompt", "third"))
    assert more == [AGENT_INIT_LINE, *expected_replay(), *expected_turn("third"), f"session: {session}"]
    again = transcript(run_client(agent, "--load", session))
    assert again[1:-1] == expected_replay(["hello world", "second prompt", "third"])


def test_load_replays_tool_calls_and_numbers_new_ones_after_them(tmp_path: Path) -> None:
    agent = agent_argv("--permission", "--state-dir", str(tmp_path / "state"))
    session = session_of(transcript(run_client(agent, "--deny")))
    lines = transcript(run_client(agent, "--load", session, "--prompt", "third"))
    assert lines == [
        AGENT_INIT_LINE,
        *expected_replay(permission="deny"),
        *expected_turn("third", permission="allow", call=3),
        f"session: {session}",
    ]


def test_load_of_an_unknown_session_fails_clearly(tmp_path: Path) -> None:
    result = run_client(agent_argv("--state-dir", str(tmp_path)), "--load", "0123456789abcdef")
    assert result.returncode == 1
    assert "session: " not in result.stdout
    assert result.stderr.splitlines()[-1].startswith("sdk_client: session/load failed: error -32002")


def test_chunk_storm() -> None:
    lines = transcript(run_client(agent_argv("--chunks", "100"), "--prompt", "go"))
    chunks = [line for line in lines if line.startswith("agent: ")]
    assert [chunk.split()[1] for chunk in chunks] == [f"[{i}/100]" for i in range(1, 101)]
    assert lines[:2] == [AGENT_INIT_LINE, "prompt: go"]
    assert lines[-2] == "stop: end_turn"
    assert len(lines) == 100 + 4


def test_chunk_storm_summary() -> None:
    args = ("--chunks", "100", "--no-history")
    lines = transcript(run_client(agent_argv(*args), "--summary", "--prompt", "a", "--prompt", "b"))
    turn = ["updates: agent_message_chunk=100", "stop: end_turn"]
    assert without_session(lines) == [AGENT_INIT_LINE, "prompt: a", *turn, "prompt: b", *turn]


def test_chunk_lines_have_the_requested_size() -> None:
    frames = raw_conversation(agent_argv("--chunks", "5", "--chunk-bytes", "300", "--verbose"))
    updates = [frame for frame in frames if frame.get("method") == "session/update"]
    assert len(updates) == 5
    assert {len(json.dumps(u, separators=(",", ":"))) + 1 for u in updates} == {300}


def test_agent_writes_only_protocol_to_stdout() -> None:
    frames = raw_conversation(agent_argv("--permission", "--verbose"), answer_permission=True)
    assert all(frame.get("jsonrpc") == "2.0" for frame in frames)
    request = next(frame for frame in frames if frame.get("method") == "session/request_permission")
    assert request["id"] == 0  # the agent's first request: the same id as the client's initialize
    assert frames[-1] == {"jsonrpc": "2.0", "id": 2, "result": {"stopReason": "end_turn"}}


def test_agent_that_cannot_start() -> None:
    result = run_client(["acp-proxy-test-no-such-agent"])
    assert result.returncode == 1
    assert result.stdout == ""
    assert "sdk_client: cannot start the agent" in result.stderr


def test_agent_that_exits_at_once() -> None:
    result = run_client([sys.executable, "-c", "import sys; sys.exit(3)"])
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == (
        "sdk_client: the agent closed the connection during initialize (agent exit status 3)"
    )


def test_agent_that_never_answers_hits_the_timeout() -> None:
    silent = [sys.executable, "-c", "import sys; sys.stdin.read()"]  # exits when stdin closes
    result = run_client(silent, "--timeout", "1")
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == "sdk_client: timed out after 1 s waiting for initialize"


def test_client_usage_error() -> None:
    result = subprocess.run(
        [sys.executable, str(SDK_CLIENT), "--prompt", "x"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2
    assert "missing the agent command after --" in result.stderr


def raw_conversation(agent: list[str], *, answer_permission: bool = False, timeout: float = 30) -> list[dict]:
    """Drive ``agent`` with hand-written frames: initialize, session/new, one prompt.

    Returns every line the agent wrote to stdout up to the prompt's response, each parsed as JSON
    (a line that is not JSON fails the test). Every wait is bounded by ``timeout``.
    """
    proc = subprocess.Popen(
        agent,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=peer_env(),
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True)
    reader.start()

    def send(frame: dict) -> None:
        assert proc.stdin is not None
        proc.stdin.write(json.dumps(frame) + "\n")
        proc.stdin.flush()

    def receive() -> dict:
        line = lines.get(timeout=timeout)
        try:
            return json.loads(line)
        except ValueError:
            pytest.fail(f"agent wrote a line that is not JSON to stdout: {line!r}")

    frames: list[dict] = []
    try:
        send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}})
        frames.append(receive())
        send({"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": "/", "mcpServers": []}})
        frames.append(receive())
        session = frames[-1]["result"]["sessionId"]
        params = {"sessionId": session, "prompt": [{"type": "text", "text": "hi"}]}
        send({"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": params})
        while frames[-1].get("id") != 2 or "method" in frames[-1]:
            frames.append(receive())
            if answer_permission and frames[-1].get("method") == "session/request_permission":
                outcome = {"outcome": "selected", "optionId": "allow-once"}
                send({"jsonrpc": "2.0", "id": frames[-1]["id"], "result": {"outcome": outcome}})
        proc.stdin.close()
        assert proc.wait(timeout=timeout) == 0
        assert "sdk_agent: session/prompt" in proc.stderr.read()  # --verbose logs went to stderr
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=timeout)
        if not proc.stdin.closed:
            proc.stdin.close()
        proc.stdout.close()
        proc.stderr.close()
    reader.join(timeout=timeout)
    return frames
