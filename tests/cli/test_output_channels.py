"""Every output channel of the query commands is handled as git handles its own: a reader that
went away ends the output quietly (exit 0), a full or closed stdout is one line and exit 2, a
pager that cannot be found falls back to plain output with a one-line note, a file that cannot
be written (``export -o`` on a full disk) is one line, and Ctrl-C stops any query (exit 130, no
traceback). Real processes, each with a timeout; no sleeps."""

from __future__ import annotations

import json
import os
import pty
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import PROXY, proxy_env, run_proxy

SESSION = "sess_output_channels"
CHUNK = "the agent's answer, recorded"

_AGENT = f"""
import json, sys
for line in sys.stdin:
    msg = json.loads(line)
    method, rid = msg.get("method"), msg.get("id")
    if method == "initialize":
        result = {{"protocolVersion": 1, "agentCapabilities": {{}}}}
    elif method == "session/new":
        result = {{"sessionId": "{SESSION}"}}
    else:
        update = {{"sessionUpdate": "agent_message_chunk", "content": {{"type": "text", "text": "{CHUNK}"}}}}
        params = {{"sessionId": "{SESSION}", "update": update}}
        print(json.dumps({{"jsonrpc": "2.0", "method": "session/update", "params": params}}), flush=True)
        result = {{"stopReason": "end_turn"}}
    print(json.dumps({{"jsonrpc": "2.0", "id": rid, "result": result}}), flush=True)
"""


def _requests() -> bytes:
    prompt = {"sessionId": SESSION, "prompt": [{"type": "text", "text": "hello"}]}
    messages = [
        {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}},
        {"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": "/", "mcpServers": []}},
        {"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": prompt},
    ]
    return b"".join(json.dumps(m).encode() + b"\n" for m in messages)


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("output-channels") / "rec.db"
    done = run_proxy(["run", "--db", str(db), "--", sys.executable, "-c", _AGENT], input=_requests(), timeout=60)
    assert done.returncode == 0, done.stderr
    assert CHUNK.encode() in done.stdout
    return db


def commands(db: Path) -> dict[str, list[str]]:
    """Query commands that print, in each of their output shapes."""
    d = ["--db", str(db)]
    return {
        "runs": ["runs", *d],
        "runs --json": ["runs", *d, "--json"],
        "frames": ["frames", *d],
        "frames -v": ["frames", *d, "-v"],
        "frames --jsonl": ["frames", *d, "--jsonl"],
        "show": ["show", *d],
        "show --json": ["show", *d, "--json"],
        "sessions": ["sessions", *d],
        "stats": ["stats", *d],
        "sql": ["sql", *d, "select * from frames"],
        "sql --jsonl": ["sql", *d, "--jsonl", "select * from frames"],
        "export": ["export", *d, "last"],
        "--help": ["--help"],
        "frames --help": ["frames", "--help"],
    }


NAMES = sorted(commands(Path("x")))


def one_line(stderr: bytes) -> str:
    text = stderr.decode("utf-8", "replace")
    assert "Traceback" not in text, text
    assert text.count("\n") == 1 and text.startswith("acp-proxy: "), text
    return text.rstrip("\n")


def run_with_stdout(
    args: list[str], stdout: int | None, *, preexec: object = None
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [*PROXY, *args],
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=subprocess.PIPE,
        env=proxy_env(),
        timeout=60,
        preexec_fn=preexec,  # type: ignore[arg-type]
    )


# -- a full stdout, a closed stdout ------------------------------------------------------------


@settings(max_examples=len(NAMES))
@given(name=st.sampled_from(NAMES))
def test_a_full_stdout_is_one_line(recording: Path, name: str) -> None:
    with open("/dev/full", "wb") as full:
        done = run_with_stdout(commands(recording)[name], full.fileno())
    assert done.returncode == 2, done.stderr
    assert one_line(done.stderr) == "acp-proxy: cannot write to standard output: No space left on device"


@settings(max_examples=len(NAMES))
@given(name=st.sampled_from(NAMES))
def test_a_closed_stdout_is_one_line(recording: Path, name: str) -> None:
    done = run_with_stdout(commands(recording)[name], None, preexec=lambda: os.close(1))
    assert done.returncode == 2, done.stderr
    assert one_line(done.stderr) == "acp-proxy: cannot write to standard output: Bad file descriptor"


def test_a_closed_stdout_is_never_taken_by_the_database(recording: Path, tmp_path: Path) -> None:
    """With fd 1 closed, the next file opened would be fd 1: output must not land in it."""
    copy = tmp_path / "copy.db"
    shutil.copy(recording, copy)
    before = copy.read_bytes()
    done = run_with_stdout(["frames", "--db", str(copy), "--jsonl"], None, preexec=lambda: os.close(1))
    assert done.returncode == 2
    assert copy.read_bytes() == before


# -- a reader that went away -------------------------------------------------------------------


@settings(max_examples=len(NAMES))
@given(name=st.sampled_from(NAMES))
def test_a_reader_gone_ends_quietly_with_status_0(recording: Path, name: str) -> None:
    """``show | true``: the pipe's reader is gone before anything is written."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = run_with_stdout(commands(recording)[name], write_end)
    finally:
        os.close(write_end)
    assert done.returncode == 0, done.stderr
    said = done.stderr.decode("utf-8", "replace")
    assert not any(word in said.lower() for word in ("traceback", "pipe", "errno", "cannot write")), said
    assert said == "" or name == "export", said  # export says what the file holds, as always


def test_show_piped_into_true(recording: Path) -> None:
    """The issue's spelling, through a shell: `show | true` exited 1."""
    script = 'set -o pipefail 2>/dev/null; "$@" | true; echo "status=${PIPESTATUS[0]}"'
    done = subprocess.run(
        ["bash", "-c", script, "sh", *PROXY, "show", "--db", str(recording)],
        capture_output=True,
        env=proxy_env(),
        timeout=60,
    )
    assert done.stdout.strip() == b"status=0", (done.stdout, done.stderr)
    assert done.stderr == b""


# -- the pager -----------------------------------------------------------------------------------


def run_on_a_terminal(args: list[str], env: dict[str, str], timeout: float = 60) -> tuple[int, bytes, bytes]:
    """``acp-proxy ARGS`` with stdout on a pseudo-terminal (stderr a pipe): status, screen, stderr."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([*PROXY, *args], stdin=slave, stdout=slave, stderr=subprocess.PIPE, env=env)
    os.close(slave)
    screen = b""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.1)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: every writer of the terminal is gone
                    break
                if not chunk:
                    break
                screen += chunk
            elif proc.poll() is not None:
                break
        assert proc.stderr is not None
        code = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        return code, screen, proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)


@pytest.mark.parametrize(
    ("variable", "value", "program"),
    [
        ("PAGER", "no-such-pager-anywhere", "no-such-pager-anywhere"),
        ("PAGER", "/nonexistent/bin/less -R", "/nonexistent/bin/less"),
        ("ACP_PROXY_PAGER", "LESS=R missing-pager --flag", "missing-pager"),
    ],
)
def test_a_missing_pager_falls_back_to_plain_output_with_a_note(
    recording: Path, variable: str, value: str, program: str
) -> None:
    env = proxy_env(**{variable: value, "TERM": "dumb"})
    env.pop("ACP_PROXY_PAGER" if variable == "PAGER" else "PAGER", None)
    code, screen, stderr = run_on_a_terminal(["show", "--db", str(recording)], env)
    assert code == 0, stderr
    assert CHUNK.encode() in screen, screen
    note = one_line(stderr)
    assert "pager not found" in note and program in note and f"${variable}" in note


def test_a_pager_the_shell_cannot_run_is_named_after_the_fact(recording: Path) -> None:
    """A pager command only the shell can read (an expansion) is left to the shell; when the
    shell cannot run it (exit 127), a one-line note says so instead of silence."""
    env = proxy_env(PAGER="missing-pager-${NOTHING:-x}", TERM="dumb")
    env.pop("ACP_PROXY_PAGER", None)
    code, _screen, stderr = run_on_a_terminal(["show", "--db", str(recording)], env)
    assert code == 0
    said = stderr.decode("utf-8", "replace")
    assert "Traceback" not in said
    assert said.endswith("acp-proxy: the pager could not run (exit status 127); try again with --no-pager\n"), said


def test_a_pager_that_exists_is_still_used(recording: Path, tmp_path: Path) -> None:
    seen = tmp_path / "paged"
    pager = tmp_path / "my pager"
    pager.write_text(f"#!/bin/sh\ncat > '{seen}'\n")
    pager.chmod(0o755)
    env = proxy_env(PAGER=f"'{pager}'", TERM="dumb")
    env.pop("ACP_PROXY_PAGER", None)
    code, screen, stderr = run_on_a_terminal(["show", "--db", str(recording)], env)
    assert (code, stderr) == (0, b"")
    assert CHUNK.encode() in seen.read_bytes()
    assert CHUNK.encode() not in screen


# -- export -o on a full disk -------------------------------------------------------------------


def _can_mount_in_a_namespace() -> bool:
    if shutil.which("unshare") is None:
        return False
    try:
        done = subprocess.run(
            ["unshare", "-rm", "sh", "-c", "d=$(mktemp -d) && mount -t tmpfs -o size=64k tmpfs $d && umount $d"],
            capture_output=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


@pytest.mark.skipif(not _can_mount_in_a_namespace(), reason="no user+mount namespaces here")
def test_export_onto_a_full_disk_is_one_line(recording: Path, tmp_path: Path) -> None:
    disk = tmp_path / "disk"
    disk.mkdir()
    target = disk / "out.jsonl"
    # In a namespace of its own: a small tmpfs, filled to the last byte, then the export.
    fill = 'head -c 1000000 /dev/zero > "$DISK/fill" 2>/dev/null'
    script = f'mount -t tmpfs -o size=64k tmpfs "$DISK" && {{ {fill}; exec "$@"; }}'
    command = [*PROXY, "export", "--db", str(recording), "-o", str(target), "--format", "jsonl", "last"]
    done = subprocess.run(
        ["unshare", "-rm", "sh", "-c", script, "export-full", *command],
        capture_output=True,
        timeout=60,
        env=proxy_env(DISK=str(disk)),
    )
    assert done.returncode == 2, done.stderr
    line = one_line(done.stderr)
    assert f"cannot write {target}" in line and "no space left on device" in line


# -- Ctrl-C ------------------------------------------------------------------------------------

ENDLESS = "with recursive c(x) as (select 1 union all select x + 1 from c) select count(*) from c"


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat", "rb") as handle:
        fields = handle.read().rsplit(b")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _holds_open(pid: int, path: Path) -> bool:
    try:
        links = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
    except OSError:
        return False
    return str(path) in links


@pytest.mark.parametrize("shape", [["sql"], ["sql", "--jsonl"]], ids=["table", "jsonl"])
def test_ctrl_c_stops_a_long_sql_query(recording: Path, shape: list[str]) -> None:
    proc = subprocess.Popen(
        [*PROXY, *shape, "--db", str(recording), ENDLESS],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=proxy_env(),
    )
    try:
        # In the query: the database is open, then the process spends CPU time in SQLite (a
        # deadline on each wait; polling /proc, not sleeping for a guessed time).
        deadline = time.monotonic() + 30
        while not _holds_open(proc.pid, recording):
            assert proc.poll() is None and time.monotonic() < deadline, "the query never started"
            select.select([], [], [], 0.01)
        start = _cpu_seconds(proc.pid)
        while _cpu_seconds(proc.pid) - start < 0.5:
            assert proc.poll() is None and time.monotonic() < deadline, "the query never ran"
            select.select([], [], [], 0.01)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    assert b"Traceback" not in err and err.strip() == b"", err
    assert out == b""


def test_ctrl_c_stops_a_query_on_any_read_connection(recording: Path) -> None:
    """The connections every query command reads through (``open_for_reading``): SIGINT while
    a statement runs ends it with SQLite's "interrupted", which the command group answers with
    exit 130. A watchdog interrupts the query itself after 10 s, so a failure cannot hang."""
    import sqlite3
    import threading

    from acp_proxy.cli.support import _interrupted
    from acp_proxy.store import database as store

    db = store.open_for_reading(recording)
    started = threading.Event()
    rescued = threading.Event()

    def ctrl_c() -> None:
        started.wait(30)
        os.kill(os.getpid(), signal.SIGINT)
        if not finished.wait(10):
            rescued.set()
            db.conn.interrupt()

    finished = threading.Event()
    db.conn.set_trace_callback(lambda _sql: started.set())
    helper = threading.Thread(target=ctrl_c, daemon=True)
    helper.start()
    try:
        with pytest.raises((sqlite3.OperationalError, KeyboardInterrupt)) as caught:
            db.execute(ENDLESS).fetchall()
    finally:
        finished.set()
        helper.join(30)
        db.conn.close()
    assert not rescued.is_set(), "Ctrl-C did not stop the query"
    assert _interrupted(caught.value)
