"""The proxy exits with its agent, whatever its recorder still has to do (issue 31, item 4).

An editor that waits for the agent's process waits for the proxy: it must not wait for the
recording too. The recorder finishes on its own, holding the journal's lock (so the run is not
taken for a dead one), and the run is recorded whole; a query meanwhile shows what is committed
and says the run is still being recorded.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from tests.conftest import python_agent, run_proxy, start_proxy, wait_recorded, watchdog
from tests.record.test_crash_recovery import Client, recorder_of, storm_agent, writer_of
from tests.relay.test_relay_lifecycle import the_run

pytestmark = [
    pytest.mark.spawns,
    pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="finds processes in /proc (Linux)"),
]

SHORT = b'{"jsonrpc":"2.0","method":"x"}\n'


def flood_agent(count: int) -> list[str]:
    """A ``yes``-style agent: ``count`` short frames as fast as the pipe takes them, then exit."""
    return python_agent(
        "import sys\n"
        "out = sys.stdout.buffer\n"
        f"block = {SHORT!r} * 10_000\n"
        f"for _ in range({count} // 10_000):\n"
        "    out.write(block)\n"
        "out.flush()\n"
    )


def test_after_a_flood_the_proxy_exits_with_its_agent_and_the_run_is_then_recorded_whole(db_path: Path) -> None:
    count = 3_000_000
    proc = start_proxy(["run", "--db", str(db_path), "--", *flood_agent(count)])
    timer = watchdog(proc, 600)
    try:
        client = Client(proc)
        delivered = client.finish(300)  # the agent wrote everything and exited
        assert delivered.count(b"\n") == count
        assert proc.stdin is not None
        proc.stdin.close()
        closed = time.monotonic()
        assert proc.wait(timeout=60) == 0
        took = time.monotonic() - closed
    finally:
        timer.cancel()
        proc.kill()
    assert took <= 5, f"the proxy exited {took:.1f} s after its client closed"
    wait_recorded(db_path, timeout=600)
    run = the_run(db_path)
    assert (run["status"], run["frames_a2c"], run["exit_code"]) == ("ended", count, 0)


def test_a_recorder_held_up_does_not_hold_up_the_proxy_and_queries_say_so(db_path: Path) -> None:
    count = 20_000
    proc = start_proxy(["run", "--db", str(db_path), "--grace", "0.5", "--", *storm_agent(count)])
    timer = watchdog(proc, 120)
    writer = 0
    try:
        client = Client(proc)
        recorder = recorder_of(proc)
        writer = writer_of(recorder)
        os.kill(writer, signal.SIGSTOP)  # the recording cannot finish until the test lets it
        assert proc.stdin is not None
        proc.stdin.close()
        delivered = client.finish(60)
        closed = time.monotonic()
        assert proc.wait(timeout=60) == 0
        took = time.monotonic() - closed
        assert took < 5, f"the proxy waited {took:.1f} s for its recorder"
        assert delivered.count(b"\n") == count
        # The recorder goes on (its lock says the run is live): a query shows it still running.
        listed = run_proxy(["runs", "--db", str(db_path), "--json"])
        assert listed.returncode == 0, listed.stderr
        assert listed.stderr.decode() == "acp-proxy: 1 run is still being recorded: what is committed so far is shown\n"
        assert [run["status"] for run in json.loads(listed.stdout)] == ["running"]
        os.kill(writer, signal.SIGCONT)
        wait_recorded(db_path)
    finally:
        timer.cancel()
        if writer:
            try:
                os.kill(writer, signal.SIGCONT)
            except ProcessLookupError:
                pass
        proc.kill()
    run = the_run(db_path)
    assert (run["status"], run["frames_a2c"], run["recovered_frames"]) == ("ended", count, 0)
    listed = run_proxy(["runs", "--db", str(db_path)])
    assert (listed.returncode, listed.stderr) == (0, b"")
