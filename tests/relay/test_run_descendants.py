"""A run's descendants are found without their environment: a daemon an agent starts with
``setsid`` and ``env -i`` (no process group, no session, no marker in common with the run) is
an orphan re-parented to the proxy, a child subreaper, and is stopped with the run — with its
own children, and with SIGKILL when it ignores SIGTERM. Real processes, each with a deadline."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import start_proxy, watchdog

# The agent starts daemons, each: fork; setsid; fork again (the middle process exits, so the
# daemon is an orphan); exec with an empty environment, holding the agent's stdin and stderr. It
# reports their pids, then waits for stdin to close.
_AGENT = r"""
import json, os, signal, sys
shape = json.loads(sys.argv[1])
daemon = (
    "import os, time\n"
    "pids = [os.getpid()]\n"
    "if CHILDREN:\n"
    "    child = os.fork()\n"
    "    if child == 0:\n"
    "        os.close(1)\n"
    "        time.sleep(300)\n"
    "    pids.append(child)\n"
    "os.write(1, ' '.join(map(str, pids)).encode())\n"
    "os.close(1)\n"
    "time.sleep(300)\n"
).replace("CHILDREN", str(shape["children"]))
pids = []
for n in range(shape["daemons"]):
    r, w = os.pipe()
    if os.fork() == 0:
        os.close(r)
        os.setsid()
        if os.fork() == 0:
            if shape["ignore_term"]:
                signal.signal(signal.SIGTERM, signal.SIG_IGN)  # SIG_IGN survives exec
            os.dup2(w, 1)
            os.execve(sys.executable, [sys.executable, "-c", daemon], {})
        os._exit(0)
    os.close(w)
    os.wait()
    seen = b""
    while chunk := os.read(r, 100):
        seen += chunk
    os.close(r)
    pids += [int(word) for word in seen.split()]
print(json.dumps(pids), flush=True)
sys.stdin.read()
"""


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except (OSError, IndexError):
        return False


def environment_of(pid: int) -> bytes:
    with open(f"/proc/{pid}/environ", "rb") as handle:
        return handle.read()


def wait_until_gone(pids: list[int], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    left = [pid for pid in pids if alive(pid)]
    while left and time.monotonic() < deadline:
        time.sleep(0.05)  # polling other processes' state, with a deadline
        left = [pid for pid in left if alive(pid)]
    return left


def run_status(db: Path) -> str:
    with sqlite3.connect(db) as conn:
        return str(conn.execute("select status from runs order by id desc limit 1").fetchone()[0])


@settings(max_examples=6)
@given(daemons=st.integers(1, 2), children=st.booleans(), ignore_term=st.booleans())
def test_setsid_env_i_daemons_are_stopped_with_the_run(
    tmp_path_factory: pytest.TempPathFactory, daemons: int, children: bool, ignore_term: bool
) -> None:
    db = tmp_path_factory.mktemp("descendants") / "rec.db"
    shape = {"daemons": daemons, "children": children, "ignore_term": ignore_term}
    proc = start_proxy(
        ["run", "--db", str(db), "--grace", "0.5", "--", sys.executable, "-c", _AGENT, json.dumps(shape)]
    )
    timer = watchdog(proc, 60)
    pids: list[int] = []
    try:
        assert proc.stdout is not None and proc.stdin is not None
        pids = json.loads(proc.stdout.readline())
        assert len(pids) == daemons * (2 if children else 1), pids
        for pid in pids:
            assert alive(pid)
            assert b"ACP_PROXY_RUN" not in environment_of(pid)  # nothing to find them by
            assert os.getsid(pid) != os.getsid(proc.pid) and os.getpgid(pid) != os.getpgid(proc.pid)
        proc.stdin.close()
        assert proc.wait(timeout=30) == 0
    finally:
        timer.cancel()
        proc.kill()
        proc.wait()
        leftover = wait_until_gone(pids, 20)
        for pid in leftover:
            os.kill(pid, 9)
    assert leftover == [], "the run's daemons outlived it"
    deadline = time.monotonic() + 60
    while run_status(db) == "running" and time.monotonic() < deadline:
        time.sleep(0.05)  # the recorder (never counted among the run's orphans) finishes the run
    assert run_status(db) == "ended"


_OWN_HELPER = r"""
import os, subprocess, sys, time
from acp_proxy.record import supervise

helper = subprocess.Popen(["sleep", "300"])           # before the run: the proxy's own (OTLP follower)
assert supervise.become_subreaper()
recorder = subprocess.Popen(["sleep", "300"])         # started since, and said to be its own
supervise.own(recorder.pid)
if os.fork() == 0:                                     # an orphan of the run, re-parented here
    if os.fork() == 0:
        os.setsid()
        os.execve("/bin/sleep", ["sleep", "300"], {})
    os._exit(0)
os.wait()
deadline = time.monotonic() + 10
while not supervise.adopted() and time.monotonic() < deadline:
    time.sleep(0.01)
orphans = supervise.adopted()
found = supervise.stop_marked("no-such-marker", 0.5)
print(len(orphans), found, helper.poll() is None, recorder.poll() is None, [p for p in orphans if supervise.adopted()])
helper.kill(); recorder.kill()
"""


def test_the_proxy_s_own_children_are_not_the_run_s() -> None:
    # Its own session: whatever happens, nothing it starts outlives the test (killpg below).
    proc = subprocess.Popen(
        [sys.executable, "-c", _OWN_HELPER],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=60)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 9)
        proc.wait()
    done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", "1", "True", "True", "[]"], done.stdout
