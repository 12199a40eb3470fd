"""The recorder yields to a flood of small frames and catches up when it pauses (FloodWatch)."""

from __future__ import annotations

import os
import sqlite3
import sys
import time
from pathlib import Path

import pytest

from acp_proxy.record.session import (
    FLOOD_GOING_LINES_PER_S,
    FLOOD_LINES_PER_S,
    FLOOD_MAX_SECONDS,
    FLOOD_PAUSE,
    FLOOD_WINDOW,
    FloodWatch,
    new_lines,
)
from tests.conftest import start_proxy, watchdog

STEP = 0.01  # the recorder looks every POLL_SECONDS
FAST = FLOOD_LINES_PER_S * STEP * 2  # lines per look: twice the flood rate
SLOW = FLOOD_LINES_PER_S * STEP / 2


def looks(watch: FloodWatch, start: float, count: int, lines: float, backlog: int = 0) -> list[bool]:
    return [watch.flooded(start + STEP * (n + 1), 0, lines, backlog) for n in range(count)]


def test_a_conversation_slower_than_the_flood_rate_is_recorded_as_it_comes() -> None:
    assert looks(FloodWatch(0.0), 0.0, 500, SLOW) == [False] * 500


def test_a_burst_after_a_quiet_spell_is_a_flood_and_a_line_is_not() -> None:
    # The recorder blocks when the journal is quiet and wakes at the first append.
    watch = FloodWatch(0.0)
    assert not watch.flooded(30.0, 0, 1, 0)
    assert watch.flooded(60.0, 0, FLOOD_LINES_PER_S * FLOOD_WINDOW * 2, 0)


def test_a_flood_is_yielded_to_until_it_pauses() -> None:
    watch = FloodWatch(0.0)
    assert all(looks(watch, 0.0, 100, FAST))
    pause = int(FLOOD_PAUSE / STEP)
    quiet = looks(watch, 1.0, pause + 2, 0)
    assert all(quiet[: pause - 1]), "a gap shorter than FLOOD_PAUSE is part of the flood"
    assert quiet[-1] is False, "a pause ends the yielding"


def test_a_flood_goes_on_while_the_conversation_stays_busy_then_a_slow_one_is_caught_up_with() -> None:
    # Round trips right after a burst: fewer lines than a flood's, more than a person's.
    busy = (FLOOD_LINES_PER_S + FLOOD_GOING_LINES_PER_S) / 2 * STEP
    trickle = FLOOD_GOING_LINES_PER_S * STEP / 2
    assert looks(FloodWatch(0.0), 0.0, 50, busy) == [False] * 50, "as busy, but no flood before: recorded"
    watch = FloodWatch(0.0)
    assert all(looks(watch, 0.0, 20, FAST))
    assert all(looks(watch, 0.2, 50, busy)), "a flood that slows to round trips is still yielded to"
    after = looks(watch, 0.7, int(FLOOD_PAUSE / STEP) + 2, trickle)
    assert after[-1] is False, "slower than FLOOD_GOING_LINES_PER_S for FLOOD_PAUSE: caught up with"


def test_a_flood_is_yielded_to_for_at_most_the_longest_lag_then_caught_up_with() -> None:
    watch = FloodWatch(0.0)
    count = int(FLOOD_MAX_SECONDS / STEP) + 10
    seen = looks(watch, 0.0, count, FAST)
    first_catch_up = seen.index(False)
    assert FLOOD_MAX_SECONDS - 2 * STEP <= first_catch_up * STEP <= FLOOD_MAX_SECONDS + 2 * STEP
    assert seen[first_catch_up + 1] is True, "after catching up, a flood that goes on is yielded to again"


def test_a_flood_is_yielded_to_only_while_the_backlog_is_within_bounds() -> None:
    watch = FloodWatch(0.0, max_backlog=1000)
    assert watch.flooded(STEP, 0, FAST, 999)
    assert not watch.flooded(2 * STEP, 0, FAST, 1001)


def test_lines_are_estimated_from_the_newest_bytes_and_big_frames_count_none(tmp_path: Path) -> None:
    path = tmp_path / "journal"
    small = b'{"jsonrpc":"2.0","method":"session/update","params":{}}\n' * 10_000
    path.write_bytes(small + b"x" * (1 << 20))
    fd = os.open(path, os.O_RDONLY)
    try:
        assert new_lines(fd, 0, len(small)) == pytest.approx(10_000, rel=0.01)  # an estimate
        assert new_lines(fd, len(small), len(small) + (1 << 20)) == 0  # a big frame's bytes
        assert new_lines(fd, 0, 0) == 0
    finally:
        os.close(fd)


FLOOD_THEN_WAIT = """
import sys
line = b'{"jsonrpc":"2.0","method":"session/update","params":{"n":0}}\\n'
sys.stdout.buffer.write(line * int(sys.argv[1]))
sys.stdout.buffer.flush()
sys.stdin.buffer.read()  # then quiet, alive, until the client hangs up
"""


@pytest.mark.spawns
def test_a_flood_is_recorded_once_it_pauses_while_the_run_goes_on(tmp_path: Path) -> None:
    # A flood that outruns the yield threshold, then silence: the frames are in the database
    # long before FLOOD_MAX_SECONDS, with the agent and the proxy still running.
    count = 50_000
    db = tmp_path / "rec.db"
    agent = tmp_path / "flood.py"
    agent.write_text(FLOOD_THEN_WAIT)
    proc = start_proxy(["run", "--db", str(db), "--", sys.executable, str(agent), str(count)])
    timer = watchdog(proc, 120)
    try:
        assert proc.stdout is not None and proc.stdin is not None
        received = 0
        while received < count:
            received += proc.stdout.read1(1 << 20).count(b"\n")
        flood_ended = time.monotonic()
        recorded = 0
        while time.monotonic() - flood_ended < FLOOD_MAX_SECONDS - 2 and recorded < count:
            recorded = frames_in(db)
            time.sleep(0.05)  # polling the database for a condition, with a deadline
        assert recorded == count, f"{recorded} of {count} frames recorded while the run went on"
        assert proc.poll() is None
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0
    finally:
        timer.cancel()
        proc.kill()


def frames_in(db: Path) -> int:
    if not db.exists():
        return 0
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        try:
            return conn.execute("select count(*) from frames where dir = 'a2c'").fetchone()[0]
        finally:
            conn.close()
    except sqlite3.Error:
        return 0


def test_whole_messages_without_newlines_count_as_lines(tmp_path: Path) -> None:
    # serve's WebSocket messages: one LINE record each, no newline anywhere.
    from acp_proxy.protocol.framing import Line
    from acp_proxy.record import journal as jr

    message = b'{"jsonrpc":"2.0","method":"session/update","params":{}}'
    meta = {"transport": "websocket", "connection": None, "stream": "websocket"}
    record = jr.line_payload(Line(message, len(message), True, False), meta)
    assert b"\n" not in record
    path = tmp_path / "journal"
    path.write_bytes(record * 5_000)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert new_lines(fd, 0, len(record) * 5_000) == pytest.approx(5_000, rel=0.01)
    finally:
        os.close(fd)
