"""`run --check` never holds up the conversation: the live checker follows the database.

The checker is a process of its own (``acp-proxy-check``) that reads what the writer committed.
These tests freeze it (SIGSTOP) or kill it in the middle of a run whose frames are far more than
the relay would ever hold for a recorder that is behind, and look at what the client got and what
the database holds.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from acp_proxy.checks import live as live_check
from acp_proxy.cli.commands import cli
from tests.conftest import python_agent, run_proxy, start_proxy, watchdog

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/comm").exists(), reason="finds the checker process by its name in /proc (Linux)"
)

CHUNK_TEXT = 16 * 1024
# Far more bytes than every pipe on the way together (48 MiB): if the checker could push back,
# the client would stop receiving long before the end.
CHUNKS = 3 * 16 * 1024 * 1024 // CHUNK_TEXT

# An ACP v1 agent: answers initialize and session/new, then streams CHUNKS message chunks for the
# prompt, one chunk the schema rejects (a text block without its text), the prompt's response,
# and a response to an id nobody sent.
_AGENT = [
    *python_agent(
        "import sys, json\n"
        "n, size = int(sys.argv[1]), int(sys.argv[2])\n"
        "out = sys.stdout.buffer\n"
        "def send(m):\n"
        "    out.write(json.dumps(m).encode() + b'\\n'); out.flush()\n"
        "def chunk(content):\n"
        "    return {'jsonrpc': '2.0', 'method': 'session/update', 'params': {'sessionId': 's1',\n"
        "            'update': {'sessionUpdate': 'agent_message_chunk', 'content': content}}}\n"
        "for line in sys.stdin.buffer:\n"
        "    m = json.loads(line)\n"
        "    if m['method'] == 'initialize':\n"
        "        send({'jsonrpc': '2.0', 'id': m['id'], 'result': {'protocolVersion': 1}})\n"
        "    elif m['method'] == 'session/new':\n"
        "        send({'jsonrpc': '2.0', 'id': m['id'], 'result': {'sessionId': 's1'}})\n"
        "    elif m['method'] == 'session/prompt':\n"
        "        line = json.dumps(chunk({'type': 'text', 'text': 'x' * size})).encode() + b'\\n'\n"
        "        for _ in range(n):\n"
        "            out.write(line)\n"
        "        send(chunk({'type': 'text'}))\n"
        "        send({'jsonrpc': '2.0', 'id': m['id'], 'result': {'stopReason': 'end_turn'}})\n"
        "        send({'jsonrpc': '2.0', 'id': 99, 'result': {}})\n"
    ),
    str(CHUNKS),
    str(CHUNK_TEXT),
]


def _line(message: dict) -> bytes:
    return json.dumps(message).encode() + b"\n"


INITIALIZE = _line({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}})
NEW_AND_PROMPT = _line(
    {"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": "/w", "mcpServers": []}}
) + _line(
    {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "session/prompt",
        "params": {"sessionId": "s1", "prompt": [{"type": "text", "text": "go"}]},
    }
)
EXPECTED = [("schema/update", "error"), ("jsonrpc/unknown-id", "error")]


def _process_table() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, name), from /proc."""
    table = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        name = text[text.index("(") + 1 : text.rindex(")")]
        table[int(stat.parent.name)] = (int(text.rsplit(")", 1)[1].split()[1]), name)
    return table


def _find_checker(root: int, timeout: float = 120.0) -> int:
    """The live checker among ``root``'s descendants (it is forked as the writer starts)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        table = _process_table()
        family = {root}
        grew = True
        while grew:
            grew = False
            for pid, (ppid, _) in table.items():
                if ppid in family and pid not in family:
                    family.add(pid)
                    grew = True
        named = [pid for pid in family if table.get(pid, (0, ""))[1] == live_check.PROCESS_NAME.decode()]
        if named:
            return named[0]
        time.sleep(0.01)  # a process appears in /proc with no event to wait on: poll, bounded
    raise AssertionError("no live checker process appeared")


def _wait_until(condition: object, what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)  # the recording has no event to wait on from outside: poll, bounded


def _query(db: Path, sql: str) -> list[tuple]:
    with sqlite3.connect(db) as conn:
        return conn.execute(sql).fetchall()


def _start(db: Path) -> tuple[subprocess.Popen[bytes], int]:
    proc = start_proxy(["run", "--db", str(db), "--check", "--", *_AGENT])
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(INITIALIZE)
    proc.stdin.flush()
    assert json.loads(proc.stdout.readline())["id"] == 0
    return proc, _find_checker(proc.pid)


def _converse(proc: subprocess.Popen[bytes]) -> list[bytes]:
    """Session, prompt, and everything the agent sends up to the stray response; then EOF."""
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(NEW_AND_PROMPT)
    proc.stdin.flush()
    lines = []
    while True:
        line = proc.stdout.readline()
        assert line, "the proxy's stdout ended early"
        lines.append(line)
        if line.startswith(b'{"jsonrpc": "2.0", "id": 99'):
            break
    proc.stdin.close()
    proc.stdin = None  # closed: communicate() must not flush it
    return lines


@pytest.mark.spawns
def test_a_frozen_checker_holds_up_neither_the_client_nor_the_recording(tmp_path: Path) -> None:
    db = tmp_path / "rec.db"
    proc, checker = _start(db)
    timer = watchdog(proc, 120)
    try:
        os.kill(checker, signal.SIGSTOP)
        try:
            lines = _converse(proc)
            # The client got the whole conversation while not one frame of it could be checked.
            assert len(lines) == 1 + CHUNKS + 1 + 1 + 1
            assert sum(b"agent_message_chunk" in line for line in lines) == CHUNKS + 1
            # And the recording is complete: the writer committed the end of the run.
            _wait_until(lambda: _query(db, "select status from runs") == [("ended",)], "the run row to end")
            assert _query(db, "select count(*) from frames where dir = 'a2c'") == [(1 + 1 + CHUNKS + 3,)]
            assert _query(db, "select count(*) from findings") == [(0,)]
            # The proxy's exit waits for the checks, so that a finished run is a checked run.
            assert proc.poll() is None
        finally:
            os.kill(checker, signal.SIGCONT)
        _, stderr = proc.communicate(timeout=120)
    finally:
        timer.cancel()
    assert proc.returncode == 0, stderr
    found = _query(db, "select rule, severity, seq from findings order by seq")
    assert [row[:2] for row in found] == EXPECTED
    said = [line for line in stderr.decode().splitlines() if line.startswith("acp-proxy: check: ")]
    assert [line.split()[3] for line in said] == [rule for rule, _ in EXPECTED]
    # Checked late, but the same findings as a check of the recording afterwards.
    later = json.loads(CliRunner().invoke(cli, ["check", "last", "--db", str(db), "--json"]).stdout)
    assert [(f["rule_id"], f["severity"], f["seq"]) for f in later] == found


@pytest.mark.spawns
def test_a_killed_checker_costs_the_findings_not_the_run(tmp_path: Path) -> None:
    db = tmp_path / "rec.db"
    proc, checker = _start(db)
    timer = watchdog(proc, 120)
    try:
        os.kill(checker, signal.SIGKILL)
        lines = _converse(proc)
        _, stderr = proc.communicate(timeout=120)
    finally:
        timer.cancel()
    assert proc.returncode == 0, stderr
    assert len(lines) == 1 + CHUNKS + 1 + 1 + 1
    assert _query(db, "select status, frames_a2c from runs") == [("ended", 1 + 1 + CHUNKS + 3)]
    assert _query(db, "select count(*) from findings") == [(0,)]
    assert b"the live checker stopped early" in stderr and b"acp-proxy check" in stderr


@pytest.mark.spawns
def test_follow_checks_a_recording_it_joins_late(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """The writer closed the pipe before the checker looked: it checks everything, then ends."""
    db = tmp_path / "rec.db"
    client = INITIALIZE + NEW_AND_PROMPT
    done = run_proxy(["run", "--db", str(db), "--", *_AGENT], input=client, timeout=120)
    assert done.returncode == 0, done.stderr
    read_fd, write_fd = os.pipe()
    os.close(write_fd)
    assert live_check.follow(read_fd, db, 1, schema=True) == 0
    os.close(read_fd)
    assert [row[:2] for row in _query(db, "select rule, severity from findings order by seq")] == EXPECTED
    assert "acp-proxy: check: error schema/update at frame" in capfd.readouterr().err


@pytest.mark.spawns
def test_lifecycle_only_skips_the_schema(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "rec.db"
    done = run_proxy(["run", "--db", str(db), "--", *_AGENT], input=INITIALIZE + NEW_AND_PROMPT, timeout=120)
    assert done.returncode == 0, done.stderr
    read_fd, write_fd = os.pipe()
    os.close(write_fd)
    live_check.follow(read_fd, db, 1, schema=False)
    os.close(read_fd)
    assert _query(db, "select rule from findings") == [("jsonrpc/unknown-id",)]


def test_check_needs_a_recording() -> None:
    result = CliRunner().invoke(cli, ["run", "--no-record", "--check", "--", "true"])
    assert result.exit_code == 2
    assert "cannot be used with --no-record" in result.output
