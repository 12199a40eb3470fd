"""`tail` as a person starts it: before the editor (and so before any database), while several
proxies record at once. Real processes, each bounded by a timeout."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.conftest import PROXY, proxy_env, watchdog
from tests.conftest import wait_for_output as wait_for_line

pytestmark = pytest.mark.spawns  # every test here starts processes

RUNS = 8
LINES_PER_RUN = 250  # `cat` echoes each: two frames per line


def ping(n: int) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": n, "method": "ping", "params": {"n": n}}).encode() + b"\n"


def test_tail_waits_for_the_database_then_follows_8_concurrent_runs_frame_by_frame(tmp_path: Path) -> None:
    db = tmp_path / "not-yet.db"
    total = RUNS * LINES_PER_RUN * 2
    tail = subprocess.Popen(
        [*PROXY, "tail", "--db", str(db), "--jsonl", "--count", str(total), "--interval", "0.05", "--timeout", "240"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=proxy_env(),
    )
    tail_guard = watchdog(tail, 300)
    proxies: list[subprocess.Popen[bytes]] = []
    try:
        said = wait_for_line(tail.stderr, b"waiting for a recording", timeout=60)
        assert said.startswith(f"acp-proxy: waiting for a recording at {db}".encode())
        assert not db.exists()
        for _ in range(RUNS):
            proc = subprocess.Popen(
                [*PROXY, "run", "--db", str(db), "--", "cat"],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                env=proxy_env(),
            )
            proxies.append(proc)
        guards = [watchdog(proc, 240) for proc in proxies]
        for proc in proxies:
            assert proc.stdin is not None
            proc.stdin.write(b"".join(ping(n) for n in range(LINES_PER_RUN)))
            proc.stdin.close()
        for proc in proxies:
            assert proc.wait(timeout=240) == 0, proc.stderr.read() if proc.stderr else b""
        for guard in guards:
            guard.cancel()
        out, err = tail.communicate(timeout=240)
    finally:
        tail_guard.cancel()
        for proc in [tail, *proxies]:
            proc.kill()
            proc.wait(timeout=10)
    assert tail.returncode == 0, err
    frames = [json.loads(line) for line in out.splitlines()]
    assert len(frames) == total
    by_run: dict[int, list[int]] = {}
    for f in frames:
        by_run.setdefault(f["run_id"], []).append(f["seq"])
    assert sorted(by_run) == list(range(1, RUNS + 1))
    for run_id, seqs in by_run.items():
        # Every frame of every run, once, in order within its run.
        assert seqs == list(range(1, LINES_PER_RUN * 2 + 1)), run_id


def test_tail_without_from_start_shows_only_new_frames_and_follows_new_runs(tmp_path: Path) -> None:
    from tests.conftest import run_proxy

    db = tmp_path / "rec.db"
    assert run_proxy(["run", "--db", str(db), "--", "cat"], input=ping(1)).returncode == 0  # old: not shown
    tail = subprocess.Popen(
        [*PROXY, "tail", "--db", str(db), "--json", "-c", "4", "--interval", "0.05", "--timeout", "120"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=proxy_env(),
    )
    guard = watchdog(tail, 180)
    try:
        # --json opens its array once tail has read which runs exist: from then on, a run is new.
        head = wait_for_line(tail.stdout, b"[", timeout=60)
        for n in (2, 3):
            assert run_proxy(["run", "--db", str(db), "--", "cat"], input=ping(n)).returncode == 0
        out, err = tail.communicate(timeout=150)
    finally:
        guard.cancel()
        tail.kill()
        tail.wait(timeout=10)
    assert tail.returncode == 0, err
    seen = [(f["run_id"], f["seq"], f["dir"]) for f in json.loads(head + out)]
    assert seen == [(2, 1, "c2a"), (2, 2, "a2c"), (3, 1, "c2a"), (3, 2, "a2c")]
