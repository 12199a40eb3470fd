"""The relay as a real process: exit statuses, signals, shutdown, orphans, bad databases."""

from __future__ import annotations

import os
import pty
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .conftest import PROXY, proxy_env, python_agent, run_proxy, start_proxy, watchdog


def rows(db: Path, sql: str, *params: object) -> list[tuple]:
    conn = sqlite3.connect(db)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def the_run(db: Path) -> dict:
    conn = sqlite3.connect(db)
    conn.row_factory = sqlite3.Row
    try:
        (row,) = conn.execute("select * from runs").fetchall()
        return dict(row)
    finally:
        conn.close()


def wait_gone(pid: int, timeout: float = 10) -> bool:
    """True once ``pid`` no longer runs (a zombie awaiting its reaper counts as gone)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError, IndexError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.02)  # polling the process table, not synchronising with it
    return False


def read_to_end(proc: subprocess.Popen[bytes], timeout: float) -> bytes:
    """The rest of ``proc``'s stdout (its buffered reader included), killing it past ``timeout``."""
    assert proc.stdout is not None
    timer = watchdog(proc, timeout)
    try:
        data = proc.stdout.read()
        proc.wait(timeout=timeout)
    finally:
        timer.cancel()
    return data


def test_agent_not_found_is_127_with_one_line(db_path: Path) -> None:
    result = run_proxy(["run", "--db", str(db_path), "--", "no-such-agent-xyz"])
    assert result.returncode == 127
    assert result.stdout == b""
    assert result.stderr == b"acp-proxy: no-such-agent-xyz: command not found\n"


def test_agent_path_that_is_not_executable_is_126(tmp_path: Path, db_path: Path) -> None:
    script = tmp_path / "agent.sh"
    script.write_text("#!/bin/sh\n")
    result = run_proxy(["run", "--db", str(db_path), "--", str(script)])
    assert result.returncode == 126
    assert b"permission denied" in result.stderr


def test_exit_status_is_passed_through(db_path: Path) -> None:
    result = run_proxy(["run", "--db", str(db_path), "--", *python_agent("import sys; sys.exit(3)")])
    assert result.returncode == 3
    run = the_run(db_path)
    assert (run["status"], run["exit_code"], run["exit_signal"]) == ("ended", 3, None)


def test_death_by_signal_is_reproduced(db_path: Path) -> None:
    agent = python_agent("import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    result = run_proxy(["run", "--db", str(db_path), "--", *agent])
    assert result.returncode == -signal.SIGKILL
    assert the_run(db_path)["exit_signal"] == signal.SIGKILL


def test_agent_that_ignores_eof_is_terminated_after_grace(db_path: Path) -> None:
    agent = python_agent("import time\nwhile True: time.sleep(1)")
    result = run_proxy(["run", "--db", str(db_path), "--grace", "0.3", "--", *agent], timeout=30)
    assert result.returncode == -signal.SIGTERM


def test_agent_that_ignores_sigterm_is_killed_after_another_grace(db_path: Path) -> None:
    agent = python_agent(
        "import signal, sys, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "print('ready', file=sys.stderr, flush=True)\nwhile True: time.sleep(1)"
    )
    result = run_proxy(["run", "--db", str(db_path), "--grace", "0.3", "--", *agent], timeout=30)
    assert result.returncode == -signal.SIGKILL


def test_grandchildren_do_not_outlive_the_agent(db_path: Path) -> None:
    agent = python_agent(
        "import subprocess, sys\n"
        "child = subprocess.Popen(['sleep', '300'], stdout=subprocess.DEVNULL)\n"
        "print(child.pid, flush=True)\n"
    )
    result = run_proxy(["run", "--db", str(db_path), "--grace", "0.5", "--", *agent], timeout=30)
    assert result.returncode == 0
    grandchild = int(result.stdout.split()[0])
    assert wait_gone(grandchild)


def test_sigterm_to_the_proxy_reaches_the_agent_and_every_forwarded_frame_is_recorded(db_path: Path) -> None:
    agent = python_agent(
        "import sys, itertools\n"
        "for i in itertools.count():\n"
        '    sys.stdout.write(\'{"jsonrpc":"2.0","method":"tick","params":{"n":%d}}\\n\' % i)\n'
        "    sys.stdout.flush()\n"
    )
    proc = start_proxy(["run", "--db", str(db_path), "--", *agent])
    try:
        assert proc.stdout is not None
        for _ in range(200):
            assert proc.stdout.readline().startswith(b'{"jsonrpc"')
        proc.send_signal(signal.SIGTERM)
        rest = read_to_end(proc, timeout=30)
    finally:
        proc.kill()
        proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGTERM
    seen = 200 + rest.count(b"\n")
    (recorded,) = rows(db_path, "select count(*) from frames where dir = 'a2c' and terminated = 1")[0]
    assert recorded == seen
    assert the_run(db_path)["exit_signal"] == signal.SIGTERM


def test_sigint_to_the_proxy_reaches_the_agent(db_path: Path) -> None:
    agent = python_agent(
        "import signal, sys, time\n"
        "signal.signal(signal.SIGINT, lambda *a: sys.exit(7))\n"
        "print('ready', flush=True)\n"
        "while True: time.sleep(1)\n"
    )
    proc = start_proxy(["run", "--db", str(db_path), "--", *agent])
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"ready\n"
        proc.send_signal(signal.SIGINT)
        read_to_end(proc, timeout=30)
    finally:
        proc.kill()
        proc.wait(timeout=10)
    assert proc.returncode == 7


def test_client_hanging_up_mid_frame_records_the_partial_frame(db_path: Path) -> None:
    agent = python_agent("import sys\nsys.stdout.buffer.write(sys.stdin.buffer.read())")
    result = run_proxy(["run", "--db", str(db_path), "--", *agent], input=b'{"jsonrpc":"2.0","id":1,"met')
    assert result.returncode == 0
    assert result.stdout == b'{"jsonrpc":"2.0","id":1,"met'
    recorded = rows(db_path, "select dir, raw, terminated, kind from frames order by seq")
    assert recorded == [
        ("c2a", '{"jsonrpc":"2.0","id":1,"met', 0, "invalid"),
        ("a2c", '{"jsonrpc":"2.0","id":1,"met', 0, "invalid"),
    ]


def test_unwritable_db_is_exit_2_and_the_agent_never_starts(tmp_path: Path) -> None:
    marker = tmp_path / "started"
    locked = tmp_path / "locked"
    locked.mkdir()
    db = locked / "sub" / "rec.db"
    locked.chmod(0o500)
    try:
        agent = python_agent(f"open({str(marker)!r}, 'w').close()")
        if os.geteuid() == 0:
            db = Path("/proc/self/no-such/rec.db")  # root ignores mode bits; /proc refuses anyone
        result = run_proxy(["run", "--db", str(db), "--", *agent])
    finally:
        locked.chmod(0o700)
    assert result.returncode == 2
    assert result.stderr.startswith(b"acp-proxy: cannot open database ")
    assert result.stderr.count(b"\n") == 1
    assert not marker.exists()


def test_a_typo_before_the_separator_is_an_error_not_the_agent(tmp_path: Path) -> None:
    marker = tmp_path / "started"
    result = run_proxy(["run", "--dbb", "x", "--", *python_agent(f"open({str(marker)!r}, 'w').close()")])
    assert result.returncode == 2
    assert b"No such option" in result.stderr
    assert not marker.exists()


def test_options_after_the_agent_word_belong_to_the_agent(db_path: Path) -> None:
    agent = python_agent("import sys; print(sys.argv[1:])")
    result = run_proxy(["run", "--db", str(db_path), "--", *agent, "--db", "--login", "-v"])
    assert result.stdout == b"['--db', '--login', '-v']\n"


def test_agent_stderr_passes_through_and_is_recorded_by_line(db_path: Path) -> None:
    agent = python_agent("import sys\nsys.stderr.write('first\\nsecond\\n')\nsys.stderr.write('unterminated')")
    result = run_proxy(["run", "--db", str(db_path), "--", *agent])
    assert result.stderr == b"first\nsecond\nunterminated"
    assert result.stdout == b""
    assert rows(db_path, "select dir, kind, raw, terminated from frames order by seq") == [
        ("stderr", "stderr", "first", 1),
        ("stderr", "stderr", "second", 1),
        ("stderr", "stderr", "unterminated", 0),
    ]


def test_database_is_private(db_path: Path) -> None:
    run_proxy(["run", "--db", str(db_path), "--", "true"])
    assert db_path.stat().st_mode & 0o777 == 0o600


def test_no_record_writes_nothing(db_path: Path) -> None:
    result = run_proxy(["run", "--no-record", "--db", str(db_path), "--", "cat"], input=b"x\n")
    assert result.stdout == b"x\n"
    assert not db_path.exists()


def test_default_database_location_follows_the_environment(tmp_path: Path) -> None:
    env = proxy_env(XDG_DATA_HOME=str(tmp_path / "data"))
    subprocess.run([*PROXY, "run", "--", "true"], env=env, timeout=60, input=b"", capture_output=True)
    assert (tmp_path / "data" / "acp-proxy" / "acp-proxy.db").exists()
    env = proxy_env(ACP_PROXY_DB=str(tmp_path / "explicit.db"))
    subprocess.run([*PROXY, "run", "--", "true"], env=env, timeout=60, input=b"", capture_output=True)
    assert (tmp_path / "explicit.db").exists()


def test_full_database_keeps_relaying_warns_once_and_counts_what_was_lost(db_path: Path) -> None:
    line = b'{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"x":"' + b"y" * 400
    data = (line + b'"}}}\n') * 20000
    result = run_proxy(["run", "--db", str(db_path), "--db-limit", "600KiB", "--", "cat"], input=data, timeout=120)
    assert result.returncode == 0
    assert result.stdout == data
    assert result.stderr.count(b"limit reached") == 1
    assert b"full" not in result.stderr
    run = the_run(db_path)
    assert run["not_recorded"] > 0
    (recorded,) = rows(db_path, "select count(*) from frames")[0]
    assert recorded + run["not_recorded"] == 40000


def test_oversize_frames_are_relayed_whole_and_recorded_cut(db_path: Path) -> None:
    big = b'{"jsonrpc":"2.0","method":"x","params":{"blob":"' + b"z" * (3 * 1024 * 1024) + b'"}}\n'
    result = run_proxy(["run", "--db", str(db_path), "--max-record-bytes", "1MiB", "--", "cat"], input=big)
    assert result.stdout == big
    (size, cut, stored), _ = rows(db_path, "select size, cut, length(raw) from frames order by seq")
    assert (size, cut, stored) == (len(big) - 1, 1, 1024 * 1024)


def test_stdin_on_a_terminal_runs_the_agent_attached_and_records_only_the_run(db_path: Path) -> None:
    leader, follower = pty.openpty()
    try:
        agent = python_agent("import os, sys; print('tty' if os.isatty(0) else 'pipe', sys.argv[1:])")
        result = subprocess.run(
            [*PROXY, "run", "--db", str(db_path), "--", *agent, "--login"],
            stdin=follower,
            capture_output=True,
            timeout=60,
            env=proxy_env(),
        )
    finally:
        os.close(follower)
        os.close(leader)
    assert result.returncode == 0
    assert result.stdout == b"tty ['--login']\n"
    run = the_run(db_path)
    assert (run["interactive"], run["exit_code"], run["frames"]) == (1, 0, 0)
    assert rows(db_path, "select count(*) from frames") == [(0,)]


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    data=st.lists(
        st.one_of(st.binary(max_size=300), st.sampled_from([b"\n", b"\r\n", b"\xff\xfe", b'{"a":1}\n'])),
        max_size=40,
    ).map(b"".join)
)
def test_relay_output_equals_input_for_arbitrary_bytes(tmp_path: Path, data: bytes) -> None:
    db = tmp_path / f"h{len(data)}-{abs(hash(data))}.db"
    result = run_proxy(["run", "--db", str(db), "--", "cat"], input=data)
    assert result.returncode == 0
    assert result.stdout == data
    (c2a,) = rows(db, "select coalesce(sum(size + terminated), 0) from frames where dir = 'c2a'")[0]
    assert c2a == len(data)


@pytest.mark.parametrize("crlf", [False, True])
def test_ten_mebibyte_line_without_final_newline_is_byte_exact(db_path: Path, crlf: bool) -> None:
    data = b'{"a":"' + os.urandom(5 * 1024 * 1024).hex().encode() + b'"}' + (b"\r\n" if crlf else b"") + b"tail"
    result = run_proxy(["run", "--db", str(db_path), "--", "cat"], input=data)
    assert result.stdout == data
