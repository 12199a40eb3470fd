"""The agent's start (spawn.py, dbfile.py): what the agent inherits from the proxy, what the
proxy imports before the agent runs, and the database's name as SQLite reads it. Real processes,
each bounded by a timeout."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import urllib.parse
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from acp_proxy.record import supervise
from acp_proxy.relay import spawn
from acp_proxy.store import database as store
from acp_proxy.store import dbfile
from tests.conftest import proxy_env, run_proxy

SLOW_TO_IMPORT = (
    *("subprocess", "pathlib", "enum", "urllib.parse", "trio", "msgspec", "click", "sqlite_utils"),
    *("ctypes", "sqlite3", "datetime"),  # their C halves (``_ctypes``, ``_sqlite3``) do
)


@pytest.mark.spawns
def test_the_agent_inherits_only_its_three_pipes_and_default_signal_dispositions(tmp_path: Path) -> None:
    # An inheritable descriptor the editor left open must not reach the agent (it could hold a
    # pipe open forever); SIGPIPE, which Python ignores, must be back to its default.
    leaked_r, leaked_w = os.pipe()
    # A fresh descriptor number above the pipe's (a long test session may already hold fd 50):
    leaked = fcntl.fcntl(leaked_w, fcntl.F_DUPFD, 50)
    os.set_inheritable(leaked, True)
    script = "ls /proc/self/fd; grep -E '^SigIgn' /proc/self/status"
    try:
        result = subprocess.run(
            [sys.executable, "-m", "acp_proxy", "run", "--no-record", "--", "/bin/sh", "-c", script],
            input=b"",
            capture_output=True,
            timeout=60,
            env=proxy_env(),
            pass_fds=(leaked,),
        )
    finally:
        for fd in (leaked_r, leaked_w, leaked):
            os.close(fd)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.decode().split()
    fds = sorted(int(word) for word in lines[: lines.index("SigIgn:")])
    assert fds[:3] == [0, 1, 2] and len(fds) <= 4, fds  # ls's own directory fd is the fourth
    assert leaked not in fds
    ignored = int(lines[lines.index("SigIgn:") + 1], 16)
    assert not ignored & (1 << (13 - 1)), hex(ignored)  # SIGPIPE


@pytest.mark.spawns
def test_the_agent_runs_in_its_own_process_group_with_the_run_marker(tmp_path: Path) -> None:
    script = "import os; print(os.getpgid(0) == os.getpid(), os.environ.get('ACP_PROXY_RUN', ''))"
    result = run_proxy(["run", "--no-record", "--", sys.executable, "-c", script])
    assert result.returncode == 0, result.stderr
    own_group, marker = result.stdout.decode().split()
    assert own_group == "True" and marker.split("-")[0].isdigit()


@pytest.mark.spawns
def test_an_exec_failure_is_an_oserror_with_exec_errno_and_leaves_no_child(tmp_path: Path) -> None:
    not_executable = tmp_path / "agent"
    not_executable.write_text("#!/no/such/interpreter\n")
    not_executable.chmod(0o755)
    before = set(supervise.children())
    try:
        spawn.spawn_agent(str(not_executable), [str(not_executable)], "m", attached=False)
    except OSError as exc:
        assert exc.errno == 2
    else:
        raise AssertionError("exec of a script with a missing interpreter succeeded")
    assert set(supervise.children()) <= before  # the child that could not exec was reaped


@pytest.mark.spawns
def test_begin_without_waiting_leaves_the_exec_failure_to_confirm(tmp_path: Path) -> None:
    # The launcher imports the relay while the agent's exec is under way: begin returns with an
    # agent, and only confirm learns that exec failed (the child reaped, our pipe ends closed).
    not_executable = tmp_path / "agent"
    not_executable.write_text("#!/no/such/interpreter\n")
    not_executable.chmod(0o755)
    before = set(supervise.children())
    agent = spawn.spawn_agent(str(not_executable), [str(not_executable)], "m", attached=False, wait=False)
    begun = spawn.Begun(str(not_executable), False, "m", spawn.EarlySignals(), agent)  # begin's, unwaited
    assert begun.agent is not None and begun.failure is None
    fds = (begun.agent.stdin_fd, begun.agent.stdout_fd, begun.agent.stderr_fd)
    begun.confirm()
    begun.confirm()  # a second time: nothing more to learn
    assert begun.agent is None and begun.failure is not None and begun.failure.errno == 2
    assert set(supervise.children()) <= before
    for fd in fds:
        with pytest.raises(OSError):
            os.fstat(fd)
    begun.early.restore()


@pytest.mark.spawns
def test_agent_process_reports_exit_codes_and_signals_like_popen() -> None:
    agent = spawn.spawn_agent("/bin/sh", ["sh", "-c", "exit 7"], "m", attached=False)
    assert agent.process.wait() == 7 and agent.process.poll() == 7
    for fd in (agent.stdin_fd, agent.stdout_fd, agent.stderr_fd):
        os.close(fd)
    agent = spawn.spawn_agent("/bin/sh", ["sh", "-c", "exec sleep 60"], "m", attached=False)
    assert agent.process.poll() is None
    agent.process.send_signal(15)
    assert agent.process.wait() == -15
    agent.process.send_signal(15)  # waited for: its pid may be anyone's now, so nothing is sent
    for fd in (agent.stdin_fd, agent.stdout_fd, agent.stderr_fd):
        os.close(fd)


@pytest.mark.spawns
def test_nothing_slow_to_import_comes_before_the_agent(tmp_path: Path) -> None:
    # The start-up promise, held without a clock: between the interpreter's own start and the
    # agent's spawn, the launcher imports none of the modules that cost milliseconds.
    probe = f"""
import json, os, sys
before = set(sys.modules)
from acp_proxy.relay.launch import fast_run_plan
from acp_proxy.relay.spawn import begin
given = {str(tmp_path / "x.db")!r}
for argv in (["run", "--no-record", "--", "true"], ["run", "--", "true"], ["run", "--db", given, "--", "true"]):
    plan = fast_run_plan(argv)
    begun = begin(plan.agent, None if plan.db_file is None else os.path.abspath(plan.db_file))
    begun.agent.process.wait()
    begun.early.restore()
print(json.dumps(sorted(set(sys.modules) - before)))
"""
    (tmp_path / "data").mkdir()
    # Examined with _sqlite3, not known from its header: another writer's frames are in its WAL.
    writer = store.open_for_writing(tmp_path / "x.db")
    writer.conn.execute("insert into runs (started_ns, status) values (1, 'running')")
    try:
        result = subprocess.run(
            [sys.executable, "-c", probe],
            capture_output=True,
            timeout=60,
            env=proxy_env(XDG_DATA_HOME=str(tmp_path / "data")),
        )
    finally:
        writer.conn.close()
    assert result.returncode == 0, result.stderr
    added = json.loads(result.stdout)
    assert "acp_proxy.relay.spawn" in added and "_sqlite3" in added  # the probe did the work it claims
    assert [name for name in SLOW_TO_IMPORT if name in added] == []
    assert (tmp_path / "data" / "acp-proxy" / "acp-proxy.db").exists()  # the default database, created


@given(st.text(min_size=1, max_size=40).filter(lambda name: "\0" not in name and "/" not in name))
def test_file_uri_escapes_exactly_like_urllib_quote(name: str) -> None:
    path = "/tmp/" + name
    try:
        raw = os.fsencode(os.path.abspath(path))
    except UnicodeEncodeError:
        return
    assert dbfile.file_uri(path) == f"file:{urllib.parse.quote(raw)}?mode=ro"
    assert dbfile.file_uri(path, "rw").endswith("?mode=rw")


@pytest.mark.spawns
def test_a_process_moves_to_the_idle_class_and_back() -> None:
    if os.geteuid() != 0:
        pytest.skip("raising a priority again needs privilege (or RLIMIT_NICE)")
    sleeper = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)

    def scheduling() -> tuple[int, int]:
        return os.sched_getscheduler(sleeper.pid), os.getpriority(os.PRIO_PROCESS, sleeper.pid)

    try:
        supervise.run_idle(sleeper.pid)
        assert scheduling() == (os.SCHED_IDLE, supervise.IDLE_NICENESS)
        supervise.run_normal([sleeper.pid])
        assert scheduling() == (os.SCHED_OTHER, 0)
    finally:
        assert sleeper.stdin is not None
        sleeper.stdin.close()
        sleeper.wait(timeout=30)


@pytest.mark.spawns
def test_every_thread_of_a_process_comes_back_from_the_idle_class() -> None:
    # The writer starts its reader and checkpoint threads while idle-class; Linux schedules
    # threads, so moving only the process's first one back left those two idle.
    if os.geteuid() != 0:
        pytest.skip("raising a priority again needs privilege (or RLIMIT_NICE)")
    code = (
        "import sys, threading\n"
        "from acp_proxy.record import supervise\n"
        "supervise.run_idle()\n"
        "threading.Thread(target=sys.stdin.read, daemon=True).start()\n"
        "print('ready', flush=True)\n"
        "sys.stdin.read()\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == b"ready\n"
        tids = [int(tid) for tid in os.listdir(f"/proc/{child.pid}/task")]
        assert len(tids) == 2
        assert {os.sched_getscheduler(tid) for tid in tids} == {os.SCHED_IDLE}
        supervise.run_normal([child.pid])
        assert {(os.sched_getscheduler(tid), os.getpriority(os.PRIO_PROCESS, tid)) for tid in tids} == {
            (os.SCHED_OTHER, 0)
        }
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(timeout=30)


@pytest.mark.spawns
def test_waiting_for_a_process_gives_its_status_or_times_out_like_popen() -> None:
    # The proxy's exit waits on its recorder this way (a pidfd, not Popen's 50 ms polling).
    held = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read(); sys.exit(7)"], stdin=subprocess.PIPE)
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            supervise.wait_for_exit(held, 0.05)
        assert held.stdin is not None
        held.stdin.close()
        assert supervise.wait_for_exit(held, 30) == 7
        assert supervise.wait_for_exit(held, 30) == 7  # reaped already: the status it had
    finally:
        held.kill()
        held.wait(timeout=30)
