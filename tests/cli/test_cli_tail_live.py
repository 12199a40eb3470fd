"""``tail`` follows a live run's journal: it shows frames the recorder has not committed yet.

The recorder is stopped (SIGSTOP) so that new frames exist in the journal only; ``tail`` must
show them anyway, numbered as the recorder then commits them. Real processes, bounded.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from tests.conftest import PROXY, proxy_env, start_proxy, wait_for_output, watchdog
from tests.read.test_live import chunk, committed, recorder_of, rows_of, wait_committed

pytestmark = pytest.mark.spawns


def test_tail_shows_frames_the_recorder_has_not_committed(tmp_path: Path) -> None:
    db = tmp_path / "tail.db"
    proxy = start_proxy(["run", "--db", str(db), "--", "cat"])
    guard = watchdog(proxy, 120)
    recorder = 0
    tail = None
    try:
        assert proxy.stdin is not None and proxy.stdout is not None
        proxy.stdin.write(chunk(1, "committed"))
        proxy.stdin.flush()
        wait_committed(db, 2)
        recorder = recorder_of(proxy.pid)
        os.kill(recorder, signal.SIGSTOP)
        tail = subprocess.Popen(
            [
                *PROXY,
                "tail",
                "--db",
                str(db),
                "--jsonl",
                "--from-start",
                "--count",
                "6",
                "--interval",
                "0.05",
                "--timeout",
                "60",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=proxy_env(),
        )
        tail_guard = watchdog(tail, 90)
        # --from-start: the committed frames, then the journaled ones, whenever tail starts.
        proxy.stdin.write(chunk(2, "journaled") + chunk(3, "journaled too"))
        proxy.stdin.flush()
        wait_for_output(proxy.stdout, b'"n":3', 30)
        out, err = tail.communicate(timeout=90)
        tail_guard.cancel()
        assert tail.returncode == 0, err
        assert committed(db) == 2  # the recorder is still stopped: these came from the journal
        shown = [json.loads(x) for x in out.splitlines()][2:]
        os.kill(recorder, signal.SIGCONT)
        recorder = 0
        wait_committed(db, 6)
        stored = rows_of(db, 2)
        assert [(f["seq"], f["dir"], f["raw"]) for f in shown] == [(r["seq"], r["dir"], r["raw"]) for r in stored]
        assert [f["seq"] for f in shown] == [3, 4, 5, 6]
        assert all("journaled" in json.dumps(f) for f in shown)
    finally:
        if recorder:
            os.kill(recorder, signal.SIGCONT)
        for proc in (tail, proxy):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
        guard.cancel()
