"""The relay as a real process: exit statuses, signals, shutdown, orphans, bad databases."""

from __future__ import annotations

import os
import pty
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import (
    PROXY,
    proxy_env,
    python_agent,
    run_proxy,
    start_proxy,
    wait_for_output,
    wait_recorded,
    watchdog,
)

pytestmark = pytest.mark.spawns  # every test here starts processes


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
    # --grace 30: the agent exits on its own, however slowly its interpreter starts.
    result = run_proxy(["run", "--db", str(db_path), "--grace", "30", "--", *python_agent("import sys; sys.exit(3)")])
    assert result.returncode == 3
    run = the_run(db_path)
    assert (run["status"], run["exit_code"], run["exit_signal"]) == ("ended", 3, None)


def test_death_by_signal_is_reproduced(db_path: Path) -> None:
    agent = python_agent("import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    result = run_proxy(["run", "--db", str(db_path), "--grace", "30", "--", *agent])
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
    proc = start_proxy(["run", "--db", str(db_path), "--grace", "0.3", "--", *agent])
    guard = watchdog(proc, 60)
    try:
        # The grace starts at stdin's EOF: only once SIGTERM is ignored may it start.
        wait_for_output(proc.stderr, b"ready", timeout=30)
        assert proc.stdin is not None
        proc.stdin.close()
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        guard.cancel()
        proc.kill()
        proc.wait(timeout=10)


def test_grandchildren_do_not_outlive_the_agent(db_path: Path) -> None:
    agent = python_agent(
        "import subprocess, sys\n"
        "child = subprocess.Popen(['sleep', '300'], stdout=subprocess.DEVNULL)\n"
        "print(child.pid, flush=True)\n"
    )
    proc = start_proxy(["run", "--db", str(db_path), "--grace", "0.5", "--", *agent])
    guard = watchdog(proc, 60)
    try:
        # The agent exits on its own once it has said its child's pid; stdin's EOF comes after.
        grandchild = int(wait_for_output(proc.stdout, b"\n", timeout=30).split()[0])
        assert proc.stdin is not None
        proc.stdin.close()
        assert proc.wait(timeout=30) == 0
    finally:
        guard.cancel()
        proc.kill()
        proc.wait(timeout=10)
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
    # The recorder may finish after its proxy (``--grace``), as designed: a fast agent behind a
    # deep pipe leaves tens of thousands of frames to record once the conversation ends.
    wait_recorded(db_path)
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
    db = tmp_path / f"h-{os.urandom(8).hex()}.db"  # hypothesis may draw the same bytes twice
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


# -- truthful counters, careful opening, defined outcomes (issue: a recording you can trust) ----


@pytest.mark.parametrize(
    "options",
    [[], ["--fault", "corrupt if method:later"]],
    ids=["relayed", "gated"],  # gated: the later lines are written by the gate, each after its record
)
def test_frames_the_client_never_received_are_not_forwarded_and_bytes_count_what_was_delivered(
    db_path: Path, options: list[str]
) -> None:
    first = b'{"jsonrpc":"2.0","method":"first"}\n'
    later = b'{"jsonrpc":"2.0","method":"later","params":{"n":%d}}\n'
    agent = python_agent(
        "import sys, time\n"
        f"sys.stdout.buffer.write({first!r}); sys.stdout.buffer.flush()\n"
        "sys.stdin.buffer.readline()\n"
        "for i in range(200):\n"
        f"    sys.stdout.buffer.write({later!r} % i); sys.stdout.buffer.flush()\n"
        "    time.sleep(0.001)\n"
    )
    proc = start_proxy(["run", "--db", str(db_path), *options, "--", *agent])
    timer = watchdog(proc, 60)
    try:
        assert proc.stdout is not None and proc.stdin is not None
        assert proc.stdout.readline() == first
        proc.stdout.close()  # the client hangs up on the agent's output
        proc.stdin.write(b'{"jsonrpc":"2.0","method":"go"}\n')
        proc.stdin.flush()
        proc.stdin.close()
        proc.wait(timeout=30)
    finally:
        timer.cancel()
        proc.kill()
    flags = rows(db_path, "select forwarded, count(*) from frames where dir = 'a2c' group by forwarded order by 1")
    assert flags[-1] == (1, 1)  # only the first line reached the client
    assert sum(n for _, n in flags) > 1 and flags[0][0] == 0
    notes = rows(db_path, "select distinct note from frames where dir = 'a2c' and forwarded = 0")
    assert all("never reached its receiver" in note for (note,) in notes)
    run = the_run(db_path)
    assert run["bytes_a2c"] == len(first)
    assert run["bytes_c2a"] == len(b'{"jsonrpc":"2.0","method":"go"}\n')


def test_db_limit_counts_the_wal_and_the_journal_and_says_limit_reached(tmp_path: Path) -> None:
    db = tmp_path / "rec.db"
    line = b'{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"x":"' + b"y" * 900
    data = (line + b'"}}}\n') * 12_000  # about 11 MB each way, far past the limit
    limit = 5 * 1024 * 1024
    result = run_proxy(["run", "--db", str(db), "--db-limit", "5MiB", "--", "cat"], input=data, timeout=180)
    assert result.returncode == 0
    assert result.stdout == data
    assert result.stderr.count(b"limit reached") == 1, result.stderr
    assert b"disk is full" not in result.stderr
    files = [db, Path(f"{db}-wal"), Path(f"{db}-shm")]
    used = sum(path.stat().st_size for path in files if path.exists())
    assert used <= limit, f"{used:,} bytes on disk for a {limit:,}-byte limit"
    run = the_run(db)
    (recorded,) = rows(db, "select count(*) from frames")[0]
    assert recorded > 0 and recorded + run["not_recorded"] == 24_000
    assert "limit" in run["not_recorded_reason"]
    # The run row counts every line relayed, recorded or not.
    assert (run["frames"], run["frames_c2a"], run["frames_a2c"]) == (24_000, 12_000, 12_000)


def _foreign_database(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.execute("create table notes (id integer primary key, text)")
    conn.execute("insert into notes (text) values ('mine')")
    conn.commit()
    conn.close()


def _newer_database(path: Path) -> None:
    from acp_proxy.store import database as store

    store.open_for_writing(path).conn.close()
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {store.SCHEMA_VERSION + 1}")
    conn.commit()
    conn.execute("PRAGMA journal_mode = DELETE")  # one file, so that byte for byte means something
    conn.close()


@pytest.mark.parametrize(
    ("make", "says"),
    [(_foreign_database, b"is not an acp-proxy database"), (_newer_database, b"newer acp-proxy")],
    ids=["foreign", "newer"],
)
def test_a_database_that_is_not_ours_to_write_is_refused_untouched(tmp_path: Path, make, says: bytes) -> None:
    db = tmp_path / "given.db"
    make(db)
    before = db.read_bytes()
    marker = tmp_path / "started"
    result = run_proxy(["run", "--db", str(db), "--", *python_agent(f"open({str(marker)!r}, 'w').close()")])
    assert result.returncode == 2
    assert result.stderr.count(b"\n") == 1 and says in result.stderr, result.stderr
    assert not marker.exists()
    assert db.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["given.db"]
    listed = run_proxy(["runs", "--db", str(db)])
    assert listed.returncode != 0 and b"Traceback" not in listed.stderr
    assert db.read_bytes() == before


def test_directories_created_for_the_database_are_private_whatever_the_umask(tmp_path: Path) -> None:
    db = tmp_path / "a" / "b" / "rec.db"
    code = (
        "import os, sys, runpy; os.umask(0); sys.argv = ['acp_proxy', *sys.argv[1:]]; "
        "runpy.run_module('acp_proxy', run_name='__main__')"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, "run", "--db", str(db), "--", "true"],
        input=b"",
        capture_output=True,
        timeout=60,
        env=proxy_env(),
    )
    assert result.returncode == 0, result.stderr
    for directory in (tmp_path / "a", tmp_path / "a" / "b"):
        assert directory.stat().st_mode & 0o777 == 0o700, directory
    wait_recorded(db)
    assert not Path(f"{db}.journal").exists()  # made 0700 for the run, and gone with its journal
    assert db.stat().st_mode & 0o777 == 0o600


def test_an_exec_failure_after_spawn_exits_127_like_a_shell_and_is_recorded(tmp_path: Path, db_path: Path) -> None:
    script = tmp_path / "agent"
    script.write_text("#!/no/such/interpreter\n")
    script.chmod(0o755)
    result = run_proxy(["run", "--db", str(db_path), "--", str(script)])
    assert result.returncode == 127
    assert (
        result.stderr
        == f"acp-proxy: {script}: bad interpreter /no/such/interpreter: no such file or directory\n".encode()
    )
    run = the_run(db_path)
    assert (run["status"], run["exit_code"], run["frames"]) == ("ended", 127, 0)


@pytest.mark.parametrize("fd", [1, 2])
def test_a_closed_stdout_or_stderr_at_start_has_a_defined_outcome(db_path: Path, fd: int) -> None:
    proc = subprocess.run(
        [*PROXY, "run", "--db", str(db_path), "--", "cat"],
        input=b'{"jsonrpc":"2.0","method":"x"}\n',
        stdout=subprocess.PIPE if fd == 2 else None,
        stderr=subprocess.PIPE if fd == 1 else None,
        preexec_fn=lambda: os.close(fd),
        timeout=60,
        env=proxy_env(),
    )
    if fd == 1:  # nowhere to relay to: one line, exit 2, no agent
        assert proc.returncode == 2
        assert proc.stderr == b"acp-proxy: stdout (fd 1) is closed: there is nowhere to relay the agent's output\n"
    else:  # the proxy's own words have nowhere to go; the conversation does
        assert proc.returncode == 0
        assert proc.stdout == b'{"jsonrpc":"2.0","method":"x"}\n'
        assert the_run(db_path)["frames"] == 2


def test_when_the_agent_closes_its_stdout_the_client_gets_eof_at_once(db_path: Path) -> None:
    agent = python_agent("import os, sys, time\nprint('bye', flush=True)\nos.close(1)\ntime.sleep(60)\n")
    proc = start_proxy(["run", "--db", str(db_path), "--grace", "0.2", "--", *agent])
    timer = watchdog(proc, 90)
    try:
        assert proc.stdout is not None and proc.stdin is not None
        started = time.monotonic()
        assert proc.stdout.read() == b"bye\n"  # returns at EOF
        waited = time.monotonic() - started
        proc.stdin.close()
        proc.wait(timeout=30)
    finally:
        timer.cancel()
        proc.kill()
    assert waited < 20, f"the client waited {waited:.1f} s for EOF; the agent sleeps for 60"


def test_a_full_disk_is_counted_and_the_conversation_goes_on(db_path: Path) -> None:
    import resource

    line = b'{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"x":"' + b"y" * 400
    data = (line + b'"}}}\n') * 8000  # 3.4 MB each way; no file of the run may pass 1 MB
    limit = 1024 * 1024

    def small_disk() -> None:  # what a full disk looks like to the proxy and its recorder: EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    result = subprocess.run(
        [*PROXY, "run", "--db", str(db_path), "--", "cat"],
        input=data,
        capture_output=True,
        timeout=120,
        env=proxy_env(),
        preexec_fn=small_disk,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == data
    assert b"Traceback" not in result.stderr
    assert b"were relayed but could not be journaled" in result.stderr
    # The database could not be written either: the next command that opens it (with room
    # again) records what the journal holds, and the run says what the journal could not.
    listed = run_proxy(["runs", "--db", str(db_path)])
    assert listed.returncode == 0, listed.stderr
    run = the_run(db_path)
    (recorded,) = rows(db_path, "select count(*) from frames")[0]
    assert run["not_recorded"] > 0 and run["not_recorded_reason"]
    assert recorded + run["not_recorded"] == 16_000
    assert run["status"] in ("ended", "crashed")
