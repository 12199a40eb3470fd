"""SIGKILL of any acp-proxy process, at any moment, with any mix of frames: nothing lost.

Hypothesis picks the agent's output (small and big lines, some not JSON), the options (plain
relaying, the gate, redaction, a live check), which processes die and after how many lines the
client had. Then the recording is completed the way a user's would be: by the proxy if it
lives, else by the recorder that outlived it, else by the next query command. Whatever was
chosen, every line the client received is recorded once, in order, the run is not left
`running`, and no journal and no process is left behind. With the journal's head punched out
again (a bug this round fixed), it fails within 60 examples.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from acp_proxy.record import journal as jr
from tests.conftest import python_agent, run_proxy, start_proxy, watchdog
from tests.record.test_crash_recovery import (
    Client,
    alive,
    assert_nothing_delivered_is_lost,
    recorder_of,
    wait_until,
    writer_of,
)
from tests.relay.test_relay_lifecycle import the_run as run_row

pytestmark = [
    pytest.mark.spawns,  # every test here starts processes
    pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="finds processes in /proc (Linux)"),
]

OPTIONS = {
    "relayed": [],
    "gated": ["--fault", "delay=0ms if kind:notification"],
    "redacted": ["--redact"],
    "checked": ["--check"],
}
VICTIMS = ("writer", "recorder", "proxy", "writer and recorder", "all")

# Each line is numbered, so that a frame recorded twice shows; it then waits for stdin's end.
AGENT = """
import json, sys
out = sys.stdout.buffer
for i, (size, valid) in enumerate(json.loads(sys.argv[1])):
    if valid:
        out.write(b'{"jsonrpc":"2.0","method":"session/update","params":{"n":%d,"pad":"' % i)
        out.write(b"x" * size + b'"}}\\n')
    else:
        out.write(b"not json %d " % i + b"y" * size + b"\\n")
out.flush()
sys.stdin.read()
"""

lines = st.lists(
    st.tuples(st.sampled_from([40, 300, 70_000, 1_100_000]), st.sampled_from([True, True, True, False])),
    min_size=1,
    max_size=40,
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    spec=lines,
    option=st.sampled_from(sorted(OPTIONS)),
    victim=st.sampled_from(VICTIMS),
    kill_after=st.integers(min_value=0, max_value=39),
)
def test_a_kill_anywhere_loses_nothing_the_client_received(
    tmp_path_factory: pytest.TempPathFactory, spec: list[tuple[int, bool]], option: str, victim: str, kill_after: int
) -> None:
    db = tmp_path_factory.mktemp("kill") / "rec.db"
    count = len(spec)
    agent = [*python_agent(AGENT), json.dumps(spec)]
    proc = start_proxy(["run", "--db", str(db), *OPTIONS[option], "--", *agent])
    timer = watchdog(proc, 120)
    try:
        client = Client(proc)
        recorder = recorder_of(proc)
        writer = writer_of(recorder)
        wait_until(lambda: client.lines() >= min(kill_after, count), 60, "lines at the client")
        victims = {
            "writer": [writer],
            "recorder": [recorder],
            "proxy": [proc.pid],
            "writer and recorder": [writer, recorder],
            "all": [writer, recorder, proc.pid],
        }[victim]
        for pid in victims:
            os.kill(pid, signal.SIGKILL)
        assert proc.stdin is not None
        if proc.pid not in victims:
            wait_until(lambda: client.lines() == count, 60, "every line at the client")
            proc.stdin.close()
        delivered = client.finish(60)
        proc.wait(timeout=90)
    finally:
        timer.cancel()
        proc.kill()
        proc.wait(timeout=10)
    if proc.pid not in victims:
        assert proc.returncode == 0
        assert delivered.count(b"\n") == count
    # A recorder that outlived its proxy finishes the run; then the next command finds the rest.
    wait_until(lambda: not alive(recorder) and not alive(writer), 60, "the recorder and writer to exit")
    listed = run_proxy(["runs", "--db", str(db), "--json"], timeout=120)
    assert listed.returncode == 0, listed.stderr
    run = run_row(db)
    assert run["status"] in ("ended", "crashed")
    assert (json.loads(listed.stdout)[0]["status"], run["not_recorded"]) == (run["status"], 0)
    recorded = assert_nothing_delivered_is_lost(delivered, db)
    conn = sqlite3.connect(db)
    try:
        rows, distinct = conn.execute("select count(*), count(distinct raw) from frames where dir = 'a2c'").fetchone()
    finally:
        conn.close()
    assert rows == distinct == run["frames_a2c"] >= len(recorded)
    assert not list(jr.journal_dir(db).glob(f"*{jr.SUFFIX}"))
    marker = json.dumps(spec).encode()
    wait_until(lambda: not processes_naming(str(db).encode(), marker), 30, "every process of the run to exit")


def processes_naming(*needles: bytes) -> list[int]:
    """Live processes whose command line holds any of ``needles``."""
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit() and int(pid) != os.getpid():
            try:
                command = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if any(needle in command for needle in needles):
                found.append(int(pid))
    return found
