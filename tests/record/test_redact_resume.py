"""run --redact across a recorder's death: a secret learnt before it is masked after it.

The redactor learns each value it masks (a ``password`` field) and masks it wherever it shows up
later, as free text too. The committed rows hold ``[redacted]``, so a recorder that resumes from
the last commit (its writer killed: it starts again; itself killed: the proxy records the journal
at the end) must learn the secrets again from the journal's start. Real proxy, real agent,
SIGKILL; the storm before the kill is past the journal's punching step, so a journal whose
committed space was given back would have lost the secret.
"""

from __future__ import annotations

import os
import signal
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import python_agent, start_proxy, wait_recorded, watchdog
from tests.record.test_crash_recovery import Client, recorder_of, wait_until, writer_of

pytestmark = [
    pytest.mark.spawns,
    pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="finds processes in /proc (Linux)"),
]

SECRET = "hunter2-Secret-42"
STORM = 30_000  # ~3 MB of frames: more than journal.PUNCH_STEP committed before the kill

AGENT = f"""
import sys
out = sys.stdout.buffer
out.write(b'{{"jsonrpc":"2.0","id":1,"result":{{"password":"{SECRET}"}}}}\\n')
for i in range({STORM}):
    out.write(b'{{"jsonrpc":"2.0","method":"session/update","params":{{"n":%d,"pad":"{"x" * 40}"}}}}\\n' % i)
out.flush()
sys.stdin.buffer.readline()  # the test's go-ahead, once the recorder was killed and came back
out.write(b'{{"jsonrpc":"2.0","method":"session/update","params":{{"text":"the password is {SECRET}"}}}}\\n')
out.flush()
sys.stdin.read()
"""


def committed_a2c(db: Path) -> int:
    try:
        conn = sqlite3.connect(db, timeout=1)
        try:
            return int(conn.execute("select count(*) from frames where dir = 'a2c'").fetchone()[0])
        finally:
            conn.close()
    except sqlite3.Error:
        return 0


@pytest.mark.parametrize("victim", ["writer", "recorder"])
def test_a_secret_learnt_before_a_recorder_dies_is_masked_after_it(tmp_path: Path, victim: str) -> None:
    db = tmp_path / "rec.db"
    pick: Callable[[int], int] = writer_of if victim == "writer" else (lambda recorder: recorder)
    proc = start_proxy(["run", "--db", str(db), "--redact", "--", *python_agent(AGENT)])
    timer = watchdog(proc, 120)
    try:
        client = Client(proc)
        pid = pick(recorder_of(proc))
        wait_until(lambda: committed_a2c(db) > STORM, 60, "the storm committed")
        os.kill(pid, signal.SIGKILL)
        assert proc.stdin is not None
        proc.stdin.write(b'{"jsonrpc":"2.0","method":"go"}\n')
        proc.stdin.flush()
        wait_until(lambda: client.lines() == STORM + 2, 60, "the last frame at the client")
        proc.stdin.close()
        delivered = client.finish(60)
        proc.wait(timeout=60)
    finally:
        timer.cancel()
        proc.kill()
        proc.wait(timeout=10)
    wait_recorded(db)
    assert SECRET.encode() in delivered  # relayed as it is: masking is for the recording
    conn = sqlite3.connect(db)
    try:
        rows = [r[0] for r in conn.execute("select raw from frames where dir = 'a2c' order by seq")]
    finally:
        conn.close()
    assert len(rows) == STORM + 2
    assert '"password":"[redacted]"' in rows[0]
    assert rows[-1].endswith('"text":"the password is [redacted]"}}'), rows[-1]
    assert not [r for r in rows if SECRET in r]
