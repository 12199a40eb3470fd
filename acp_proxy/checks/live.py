"""The live checker (`run --check`): a low-priority process that checks a run as it is recorded.

Owns: following one run's frames in relay order — the rows the writer has committed, then the
journal's frames beyond the last commit (``read.live.Journals``), so a finding is said as soon as
the relay has journaled its frame, not once the recorder, which batches and yields to a flood
for up to 10 s, has committed it; feeding them to ``checks.Checker``; saying each finding on
stderr and storing it in the ``findings`` table; and the writer's handle on this process
(``LiveCheck``).

Why a process that reads the database rather than a step in the recorder: with schema
validation a checker managed about 10,000 frames/s (now well over 100,000), and a chunk storm
brings seven times the former.
Checking inside the recorder made the recorder fall behind, and a recorder that is behind slows
the relay (backpressure, so that nothing is lost). Here the journal and the database are the checker's queue: it
may fall any number of frames behind without holding anybody up, it runs at a lower CPU
priority, and it catches up when the storm has passed. Nothing is sampled or skipped. The
writer pokes it after each commit with a non-blocking write that never waits, and closes the
poke pipe once the recording is complete; the checker then checks the rest and finishes the run
(unanswered requests, unfinished turns). Between pokes it looks at the journal every
JOURNAL_POLL seconds: the recorder commits nothing while it yields to a flood.

A journal frame is the row the recorder will commit (seq, line, what ``wire.decode`` reads: the
recorder's own indexer makes it), which is all a check reads (``FRAME_COLUMNS``: the checker
pairs requests itself), so a live check and a later `acp-proxy check` see the same frames
(batch elements included) and report the same findings. Each frame is checked once: committed
rows up to the commit the journal was read against, journal frames after it. (One difference
is left: a frame checked from the journal that a hang-up later marks undelivered was checked as
delivered.)

Must not know: the relay, the link format, how frames are decoded or written, trio.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from select import select as _readable
from typing import Any

from acp_proxy.read.live import Journals
from acp_proxy.record import supervise
from acp_proxy.store import database as store

BATCH_ROWS = 2000  # rows read per query: one short read transaction, never a long snapshot
PROCESS_NAME = b"acp-proxy-check"  # shown by ps/top; at most 15 bytes (Linux comm)
_SELECT_NEW = "select {} from frames where run_id = ? and seq > ? and seq <= ? and dir != 'stderr' order by seq limit ?"
JOURNAL_POLL = 0.1  # seconds between looks at the journal when no commit pokes (a flood: see above)
_ALL = 1 << 62  # no upper bound on seq: everything is committed


class LiveCheck:
    """The writer's handle on its checker process (forked, so it starts at once)."""

    def __init__(self, db_path: Path, run_id: int, *, schema: bool, close_fds: tuple[int, ...] = ()) -> None:
        read_fd, write_fd = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:  # the checker
            os.close(write_fd)
            status = 1
            try:
                _become_checker(close_fds)
                status = follow(read_fd, db_path, run_id, schema=schema)
            except BaseException as exc:  # a bug here must be seen, and must not touch the recording
                _say(f"the live checker failed: {type(exc).__name__}: {exc}")
            finally:
                os._exit(status)
        os.close(read_fd)
        os.set_blocking(write_fd, False)
        self.fd = write_fd

    def committed(self) -> None:
        """New rows are in: wake the checker if it is waiting. Never waits itself: a full pipe
        means the checker already has a wake-up pending, a broken one that it is gone."""
        try:
            os.write(self.fd, b"\0")
        except OSError:
            pass

    def finish(self) -> None:
        """The recording is complete: let the checker finish the run, and wait for it."""
        os.close(self.fd)
        _, status = os.waitpid(self.pid, 0)
        if status != 0:
            how = f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else f"status {os.WEXITSTATUS(status)}"
            _say(
                f"the live checker stopped early ({how}); the recording is complete: "
                "run `acp-proxy check` on it for every finding"
            )


def _become_checker(close_fds: tuple[int, ...]) -> None:
    # The writer's pipes must see their end when their real owners close them, so this process
    # keeps none of them: not the relay's link (stdin), the status pipe (stdout) or the writer's.
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    for fd in close_fds:
        os.close(fd)
    # Only CPU time nobody else wants: on two cores even a niced checker took a fifth of the
    # relay's throughput in a chunk storm (benchmarks/relay_bench.py, "recording + check").
    supervise.run_idle()
    try:
        with open("/proc/self/comm", "wb") as comm:
            comm.write(PROCESS_NAME)
    except OSError:
        pass  # not Linux: the name is cosmetic


def follow(poke_fd: int, db_path: Path, run_id: int, *, schema: bool) -> int:
    """Check run ``run_id`` frame by frame until the poke pipe ends; 0 when done."""
    # Imported here: compiling validators is the checker's cost, not the writer's.
    from acp_proxy.checks.rules import FRAME_COLUMNS, Checker

    select = _SELECT_NEW.format(", ".join(FRAME_COLUMNS))

    conn = sqlite3.connect(str(db_path), isolation_level=None)
    conn.execute(f"PRAGMA busy_timeout = {store.BUSY_TIMEOUT_MS}")
    checker = Checker(schema=schema)
    journals = Journals(db_path)
    last_seq = 0
    recording = True
    try:
        while recording:
            recording = _wait_for_commit(poke_fd, JOURNAL_POLL)
            if recording:
                last_seq = _check_live(conn, journals, select, run_id, last_seq, checker)
    finally:
        journals.close()
    last_seq = _check_new_rows(conn, select, run_id, last_seq, _ALL, checker)  # all is committed now
    status = conn.execute("select status from runs where id = ?", [run_id]).fetchone()
    # A run the recorder could not finish (still 'running') may have answers that were never
    # recorded: then nothing counts as unanswered.
    _report(conn, checker.finish(ended=status is not None and status[0] != "running"))
    conn.close()
    return 0


def _wait_for_commit(poke_fd: int, timeout: float) -> bool:
    """Until the writer commits again or ``timeout`` passes; False once it has closed the pipe
    (all is in)."""
    ready, _, _ = _readable([poke_fd], [], [], timeout)
    return not ready or bool(os.read(poke_fd, 65536))


def _check_live(
    conn: sqlite3.Connection, journals: Journals, select: str, run_id: int, last_seq: int, checker: Any
) -> int:
    """Check the rows committed since ``last_seq``, then the journal's frames beyond them."""
    tail = journals.tail(conn, run_id, last_seq)
    if tail.committed is None:  # the run is over (or its journal gone): the database holds it all
        return _check_new_rows(conn, select, run_id, last_seq, _ALL, checker)
    last_seq = _check_new_rows(conn, select, run_id, last_seq, tail.committed, checker)
    found: list[Any] = []
    for rec in tail.records:
        if rec.seq <= last_seq:
            continue
        last_seq = rec.seq
        if rec.dir != "stderr":
            found.extend(checker.feed(rec.as_dict()))
    _report(conn, found)
    return last_seq


def _check_new_rows(conn: sqlite3.Connection, select: str, run_id: int, last_seq: int, upto: int, checker: Any) -> int:
    while True:
        cursor = conn.execute(select, [run_id, last_seq, upto, BATCH_ROWS])
        names = [d[0] for d in cursor.description]
        rows = cursor.fetchall()  # ends the read transaction before any checking is done
        if not rows:
            return last_seq
        found = []
        for row in rows:
            found.extend(checker.feed(dict(zip(names, row, strict=True))))
        last_seq = rows[-1][names.index("seq")]
        _report(conn, found)


def _report(conn: sqlite3.Connection, findings: list[Any]) -> None:
    if not findings:
        return
    for f in findings:
        _say(f"check: {f.severity} {f.rule_id} at frame {f.seq}: {f.message}")
    try:
        store.add_findings(conn, [f.as_dict() for f in findings])
    except sqlite3.Error as exc:
        _say(f"could not store {len(findings)} findings ({exc})")


def _say(message: str) -> None:
    try:
        os.write(2, f"acp-proxy: {message}\n".encode())
    except OSError:
        pass
