"""An open inspector page follows a live run through its journal, in a real browser.

A run streams 2,000 frames/s (the benchmark does 30 s at 2,000 and 10,000: ``relay_bench.py
--only live``); its recorder is stopped (SIGSTOP) once the run has begun, so nothing more is
committed: the page can only show the last frame through ``read.live``, and must within 1 s
(a generous bound here: the machine is shared). Playwright drives the system Chromium against
``acp-proxy ui`` (as ``test_web_browser``).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import start_proxy, watchdog
from tests.read.test_live import recorder_of
from tests.web.test_web_browser import Server, browser, open_page  # noqa: F401 (browser: a fixture)
from tests.web.test_web_browser_scale import STREAMING_AGENT
from tests.web.test_web_pages import long_run

pytestmark = pytest.mark.spawns  # a browser, the web inspector and a proxy

# The streaming agent waits for a first line on stdin before it streams (so the recorder can be
# stopped first); then it is the scale test's agent.
GATED_AGENT = "import sys\nsys.stdin.buffer.readline()\n" + STREAMING_AGENT


def test_a_page_shows_a_2000_frames_a_second_run_from_its_journal_with_the_recorder_stopped(
    browser: Any,  # noqa: F811
    tmp_path: Path,
) -> None:
    db = tmp_path / "live.db"
    agent = tmp_path / "stream.py"
    agent.write_text(GATED_AGENT)
    long_run(db, 1)  # run 1: the database exists before the ui opens it
    server = Server(db)
    proxy = start_proxy(["run", "--db", str(db), "--", sys.executable, str(agent), "2000", "4"])
    timer = watchdog(proxy, 120)
    seen: dict[bytes, float] = {}
    done = threading.Event()
    recorder = 0

    def drain() -> None:
        assert proxy.stdout is not None
        tail = b""
        while chunk := os.read(proxy.stdout.fileno(), 1 << 16):
            tail = (tail + chunk)[-200:]
            if b"the last word" in tail and b"the last word" not in seen:
                seen[b"the last word"] = time.monotonic()
                done.set()

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        assert proxy.stdin is not None
        recorder = recorder_of(proxy.pid)
        deadline = time.monotonic() + 30
        while not run_frames(db) and time.monotonic() < deadline:
            # The run's row exists once its recorder has started: wait for it before stopping it.
            time.sleep(0.02)  # polled with a deadline: the recorder starts on its own schedule
        os.kill(recorder, signal.SIGSTOP)
        page = open_page(browser, server, "/runs/2")
        page.locator("#live").wait_for(state="visible")
        proxy.stdin.write(b"go\n")  # the agent streams now: into the journal only
        proxy.stdin.flush()
        assert done.wait(60), "the agent wrote its last frame"
        written = seen[b"the last word"]
        page.locator("#timeline tbody tr[data-frame]").get_by_text("the last word").wait_for(timeout=30_000)
        shown_after = time.monotonic() - written
        print(f"the last frame showed {shown_after:.2f} s after the agent wrote it (recorder stopped)")
        assert run_frames(db) == (0, 0), "the recorder was stopped: the page read the journal"
        assert page.js_errors == []
        page.close()
        os.kill(recorder, signal.SIGCONT)
        recorder = 0
        deadline = time.monotonic() + 60
        while run_frames(db) != (8002, 8002):  # "go", 8,000 chunks and the last word, numbered alike
            assert time.monotonic() < deadline, run_frames(db)
            time.sleep(0.05)  # polled with a deadline: the recorder commits on its own schedule
        proxy.stdin.close()
        assert proxy.wait(timeout=60) == 0
    finally:
        if recorder:
            os.kill(recorder, signal.SIGCONT)
        timer.cancel()
        proxy.kill()
        server.stop()


def run_frames(db: Path) -> tuple[int, int] | None:
    """Run 2's committed frames: (how many, the highest seq); None before its row exists."""
    import sqlite3

    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    except sqlite3.OperationalError:
        return None
    try:
        if not conn.execute("select count(*) from runs where id = 2").fetchone()[0]:
            return None
        count, high = conn.execute("select count(*), coalesce(max(seq), 0) from frames where run_id = 2").fetchone()
        return count, high
    finally:
        conn.close()
