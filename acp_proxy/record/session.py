"""A recording session: one journal recorded into its run row, live or as a recovery.

Owns: following the relay (wake-up pipe, quiet spells, floods: ``FloodWatch``), the --db-limit
estimate, a journal's damage and torn end, and the order of a recording's steps: resume where
the last commit left off, index (``indexer``), send to the writer process or apply here
(``writer``), finish the run.

Must not know: trio, the agent's pipes, SQL statements (the writer's), the record format (the
journal's). It speaks to a person only through stderr (``writer.say``).
"""

from __future__ import annotations

import json
import os
import select
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from acp_proxy.protocol.redact import Redactor
from acp_proxy.record import journal as jr
from acp_proxy.record import supervise
from acp_proxy.record.indexer import FLUSH_SECONDS, Indexer, relearn_secrets, replay_committed
from acp_proxy.record.writer import (
    LOCK_PATIENCE,
    RunWriter,
    _WriterLink,
    ensure_run,
    open_for_recording,
    say,
)
from acp_proxy.store import database as store

# Yielding to a flood (see FloodWatch): small frames faster than anyone reads them, for at most
# this long and this far behind; a pause this long ends it.
FLOOD_LINES_PER_S = 5000
# Once yielding, a conversation still this busy keeps it so (hysteresis): interactive round trips
# right after a burst, a few thousand lines a second, were slowed by the catch-up they would have
# let run (an idle-class recorder still costs a waking peer a preemption; on a VM an IPI). A
# conversation slower than this, or a pause of FLOOD_PAUSE, and the recorder catches up.
FLOOD_GOING_LINES_PER_S = 500
FLOOD_MAX_SECONDS = 10.0
FLOOD_MAX_BYTES = 64 * 1024 * 1024
FLOOD_PAUSE = 0.1
FLOOD_WINDOW = 0.02  # the longest span a look's lines are spread over (2 x POLL_SECONDS)
FLOOD_SAMPLE_BYTES = 64 * 1024  # the newest journal bytes whose newlines estimate the rate
FLOOD_SAMPLE_LINES = 8  # fewer in a sample: big frames, whose cost is per byte, not per frame
LINE_MARK = b'"cut": '  # once in the meta of every LINE record (journal.line_payload), so once a line
ROW_MARGIN = 64 * 1024  # room left for a row's other columns under SQLite's length limit


class FloodWatch:
    """When the recorder lets the conversation have the CPU: while small frames pour in.

    The recorder's cost is per frame (decoding, tracking, one row each): about 9 µs, so
    recording a flood of small frames as it comes took a fifth of the pace of an official-SDK
    pair that kept both cores busy, idle class or not (the scheduler still gives an idle-class
    task every gap the conversation leaves, and each gap it takes delays the next wake-up). So
    while more than FLOOD_LINES_PER_S lines a second arrive, the recorder only watches the
    journal grow, and goes on watching while at least FLOOD_GOING_LINES_PER_S still come; it
    catches up once they pause for FLOOD_PAUSE (or come slower than that), once it is
    FLOOD_MAX_SECONDS or ``max_backlog`` bytes behind, or once the relay is gone. Nothing waits
    in memory meanwhile: the journal holds it. Live views (``tail``, the web inspector, ``--check``,
    OTLP) lag by as much during such a flood; no conversation between a person and an agent
    comes near that rate, and big frames, whose cost is per byte, never count as one.
    """

    def __init__(self, now: float, max_backlog: int = FLOOD_MAX_BYTES) -> None:
        self.max_backlog = max_backlog
        self.seen_size = 0
        self.seen_at = now
        self.since: float | None = None  # when the current flood began
        self.last_flood = now

    def flooded(self, now: float, size: int, lines: float, backlog: int) -> bool:
        """``size``: the journal's size now; ``lines``: the lines it gained since the last
        look (an estimate); ``backlog``: its bytes not yet indexed. True: do not index now."""
        # After a quiet spell the recorder wakes at the first append: what it finds came since
        # then, not since its last look, so a burst after quiet counts as one.
        elapsed = min(max(now - self.seen_at, 1e-3), FLOOD_WINDOW)
        self.seen_size, self.seen_at = size, now
        rate = FLOOD_LINES_PER_S if self.since is None else FLOOD_GOING_LINES_PER_S
        if lines >= rate * elapsed:
            self.last_flood = now
            if self.since is None:
                self.since = now
        if self.since is None:
            return False
        if now - self.last_flood > FLOOD_PAUSE or now - self.since > FLOOD_MAX_SECONDS or backlog > self.max_backlog:
            self.since = None
            return False
        return True


def new_lines(fd: int, since: int, size: int) -> float:
    """The lines in the journal's bytes ``since``..``size``, estimated from the newest
    FLOOD_SAMPLE_BYTES of them (newlines, or LINE records); 0 when they hold fewer than
    FLOOD_SAMPLE_LINES (big frames)."""
    grown = size - since
    if grown <= 0:
        return 0.0
    take = min(grown, FLOOD_SAMPLE_BYTES)
    try:
        sample = os.pread(fd, take, size - take)
    except OSError:
        return 0.0
    # A LINE record (a gated line, or a whole message of serve's, which has no newline of its
    # own: a WebSocket stream of chunks has none at all) says "cut" once in its meta.
    count = max(sample.count(b"\n"), sample.count(LINE_MARK))
    return 0.0 if count < FLOOD_SAMPLE_LINES or not sample else count * grown / len(sample)


# -- a recording session: one journal, live or recovered ------------------------------------


class Session:
    """Records one journal into its run row: live (following the relay through the wake-up
    pipe, with a writer process) or as a recovery (to the journal's end, in this process)."""

    def __init__(self, journal_path: Path, fd: int, *, db_path: Path | None = None, wake_fd: int | None = None) -> None:
        self.journal_path = journal_path
        self.journal_fd = fd
        self.wake_fd = wake_fd
        self.reader = jr.JournalReader(fd)
        start_record = next(iter(self.reader.records()), None)
        if start_record is None or start_record.kind != jr.START:
            raise jr.JournalDamaged("no START record")
        self.start: dict[str, Any] = json.loads(start_record.payload)
        self.db_path = db_path or Path(self.start["db"])
        self.limit: int | None = self.start.get("db_limit")
        self.check: str | None = self.start.get("check")
        self.marker: str | None = self.start.get("marker")
        rules = self.start.get("redact")  # run --redact: its rules ([]: the built-in ones)
        self.redactor = Redactor(rules) if isinstance(rules, list) else None
        db = open_for_recording(self.db_path, self.limit)
        self.run_id, state, existed = store.wait_for_write_lock(
            lambda: ensure_run(db, self.start, journal_path, self.redactor), LOCK_PATIENCE
        )
        self.done = bool(state and state.get("done"))
        max_keep = self.start.get("max_record_bytes")
        room = max(1024, store.max_value_bytes(db.conn) - ROW_MARGIN)
        max_keep = room if max_keep is None else min(max_keep, room)
        self.indexer = Indexer(self.run_id, max_keep, state, resumed=existed, redactor=self.redactor)
        if state is not None:
            # run --redact: the secrets the last recorder learnt are masked in later frames too.
            redactor = None if self.done else self.redactor
            if redactor is not None and not relearn_secrets(redactor, fd, self.run_id, max_keep, state["offset"]):
                say("the journal's start is gone: secrets named before this resume may show in later frames")
            self.reader.offset = state["offset"]
            self.learned = [] if self.done else replay_committed(self.indexer, db.conn, self.run_id)
        else:
            self.learned = []
            self.indexer.feed(start_record)
        self.db = db
        self.limit_said = False
        self.damaged = False

    # -- the limit --------------------------------------------------------------------------

    def _over_limit(self, message: dict[str, Any]) -> None:
        if self.limit is None or not message["count"]:
            return
        files = jr.limited_files(self.db_path)
        used = jr.files_size(files, self.journal_path.parent)
        # What the WAL holds is copied into the database by the next checkpoint while the WAL
        # keeps its size until it is reset: count it twice, and the batch twice (WAL, then db).
        wal = jr.files_size(files[1:2], None)
        estimate = 2 * (message["nbytes"] + 150 * message["count"])
        if used + wal + estimate > self.limit:
            message["dropped"] = f"--db-limit reached ({self.limit:,} bytes)"
            if not self.limit_said:
                self.limit_said = True
                say(f"--db-limit reached ({self.limit:,} bytes): frames are relayed but no longer recorded")

    def _gap_said(self) -> None:
        reasons = self.indexer.gap_reasons
        if reasons and not self.limit_said:
            self.limit_said = True
            say(f"{sorted(reasons)[0]}: frames are relayed but no longer recorded")

    # -- recovery: to the journal's end, here -------------------------------------------------

    def recover(self, *, rescue: bool = True) -> None:
        """Record the journal to its end here; a ``rescue`` (the run's own recorder is gone)
        ends the run ``crashed``. Without, it is recording a finished journal in-process."""
        writer = RunWriter(
            self.db, self.run_id, self.journal_path, self.journal_fd, keep_journal=self.redactor is not None
        )
        if self.done:
            writer._finished()
            return
        if self.learned:
            writer.facts.learn(self.learned)
        self.indexer.resumed = self.indexer.resumed or rescue
        self._drain(writer.apply)
        if self.marker:
            supervise.stop_marked(self.marker, 1.0)
        self._finish(writer.apply)
        self.db.conn.close()

    # -- live: following the relay ------------------------------------------------------------

    def follow(self) -> int:
        if self.done:
            RunWriter(self.db, self.run_id, self.journal_path, self.journal_fd)._finished()
            return 0
        self.db.conn.close()  # from here on, only the writer process touches the database
        # Recording may lag (the journal holds it), the conversation must not. The relay starts
        # the recorder idle-class already; one started otherwise gets there here (the writer
        # inherits it).
        supervise.run_idle()
        link = _WriterLink(self)
        send = link.send
        try:
            if self.learned:
                send({"learn": self.learned})
            relay_alive = True
            last_activity = time.monotonic()
            backlog_limit = FLOOD_MAX_BYTES if self.limit is None else min(FLOOD_MAX_BYTES, self.limit // 8)
            flood = FloodWatch(last_activity, backlog_limit)
            while relay_alive:
                # The wake-up rule (journal.WAKE_INTERVAL) needs "now" taken before looking, and
                # a wake-up byte's time taken after it was read.
                looked = time.monotonic()
                woken, relay_alive = _drain_wakes(self.wake_fd)
                if woken:
                    last_activity = time.monotonic()
                if relay_alive and self._flooded(flood, looked):
                    time.sleep(jr.POLL_SECONDS)  # the conversation is in full flood: let it have the CPU
                    continue
                if self._drain(send):
                    last_activity = max(last_activity, looked)
                if not relay_alive:
                    supervise.run_normal((0, link.pid))  # the conversation is over: catch up
                    break
                if looked - last_activity < jr.QUIET_SECONDS:
                    time.sleep(jr.POLL_SECONDS)
                    continue
                if self.indexer.pending.count or self.indexer.patches:
                    self._send(send)
                _wait_readable(self.wake_fd, None)
            self._drain(send)
            if self.reader.pending:
                say(f"the journal ends in a torn record ({self.reader.pending} bytes): the proxy was killed")
            if not self.indexer.final and self.marker:
                supervise.stop_marked(self.marker, 1.0)  # the proxy died: its agent's descendants go too
            self._finish(send)
        except OSError as exc:
            say(f"the database writer stopped ({exc.strerror or exc}); recording resumes from the journal")
            link.close()
            self._resume_after_writer_died()
        status = link.close()
        return 0 if status == 0 else 1

    def _flooded(self, flood: FloodWatch, now: float) -> bool:
        try:
            size = os.fstat(self.journal_fd).st_size
        except OSError:
            return False
        lines = new_lines(self.journal_fd, max(flood.seen_size, self.reader.offset), size)
        return flood.flooded(now, size, lines, size - self.reader.offset)

    def _resume_after_writer_died(self) -> None:
        # A new process image resumes from what the writer committed; the wake-up pipe is kept.
        args = [sys.executable, "-m", "acp_proxy.record.recorder", "--journal", str(self.journal_path)]
        if self.wake_fd is not None:
            os.set_inheritable(self.wake_fd, True)
            args += ["--wake-fd", str(self.wake_fd)]
        os.execv(sys.executable, args)

    # -- shared -------------------------------------------------------------------------------

    def _drain(self, send: Callable[[dict[str, Any]], None]) -> bool:
        """Index every complete record the journal holds now; True if there were any."""
        found = False
        indexer = self.indexer
        if self.damaged:
            return False
        try:
            for record in self.reader.records():
                found = True
                indexer.feed(record)
                if indexer.due():
                    self._send(send)
        except jr.JournalDamaged as exc:
            self.damaged = True
            say(f"the journal {self.journal_path.name} is damaged ({exc}); what follows is not recorded")
        if found and indexer.pending.count and time.monotonic() - indexer.last_flush > FLUSH_SECONDS:
            self._send(send)
        return found

    def _send(self, send: Callable[[dict[str, Any]], None]) -> None:
        self._deliver(self.indexer.message(self.reader.offset), send)

    def _finish(self, send: Callable[[dict[str, Any]], None]) -> None:
        self._deliver(self.indexer.finish(self.reader.offset, time.time_ns()), send)

    def _deliver(self, message: dict[str, Any], send: Callable[[dict[str, Any]], None]) -> None:
        reasons = self.indexer.gap_reasons
        if reasons:
            message["gap_reason"] = sorted(reasons)[0]
            self._gap_said()
        self._over_limit(message)
        send(message)


def _drain_wakes(fd: int | None) -> tuple[bool, bool]:
    """Read the wake-up bytes waiting; (any were there, the relay still holds its end)."""
    if fd is None:
        return False, False
    woken = False
    while True:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            return woken, True
        except OSError:
            return woken, False
        if not chunk:
            return woken, False
        woken = True


def _wait_readable(fd: int | None, timeout: float | None) -> None:
    if fd is None:
        return
    try:
        select.select([fd], [], [], timeout)
    except (OSError, ValueError):
        pass
