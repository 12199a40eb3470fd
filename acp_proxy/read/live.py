"""A live run's frames before the recorder commits them: the journal's tail, read as the recorder reads it.

Owns: following the journal of a running run from its last commit (``Journals``: one follower
per live run, kept between reads), so that a live reader sees a frame as soon as the relay has
journaled it, not once the recorder has committed it (the recorder batches, and yields to a
flood for up to 10 s by design); the frames it gives carry the seq numbers the recorder will
give them and the masking it will apply, because they are made by the recorder's own
``Indexer`` resumed from the committed ``journal_state`` (with ``run --redact``, the run's own
rules from its START record). ``Follower``: ``tail``'s memory over every run, committed rows then
the journal's tail.

What a journal frame lacks until it is committed: the tracker's annotations (a response's method,
its request's seq and latency, replay and unanswered marks, findings). The relay-order facts —
seq, time, direction, the line and what ``wire.decode`` reads from it — are the committed row's.

How it stays correct while the recorder moves on: the committed seq ``Y`` and the journal offset
are read from the runs row in one statement; a reader takes committed rows up to ``Y`` and
journal frames after it, so nothing is shown twice or skipped. Committed journal space is
punched out (zeros): a follower that finds zeros where records were, or that the recorder has
overtaken, starts again from the newest commit. A torn or half-appended last record is left for
the next read (``JournalReader``). A run that has ended, or whose journal is gone, is read from
the database alone (its journal is deleted only after its last frames are committed).

Must not know: HTTP, click, rendering; it never writes, and never locks the journal (the recorder
and the relay hold their locks; a reader must not make a live run look dead or alive).
"""

from __future__ import annotations

import bisect
import json
import operator
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from acp_proxy.protocol import filter_tree
from acp_proxy.protocol.frames import FrameRecord
from acp_proxy.protocol.redact import Redactor
from acp_proxy.read import queries
from acp_proxy.record import journal as jr
from acp_proxy.record.indexer import Indexer, NoTracker

_SEQ = operator.attrgetter("seq")
ROW_MARGIN = 64 * 1024  # as the recorder's session leaves under SQLite's length limit
MAX_BUFFERED = 200_000
"""Journal frames kept at most per run (a flood the recorder yields to is ~10 s behind): the
oldest go first; they are committed by then, or a reader asks the database for them."""


@dataclass
class Tail:
    """What a live run holds beyond its last commit: ``committed`` is the highest seq the
    database held when it was looked at (committed rows go up to it), ``rows`` the journal's
    frames after it, in relay order, as ``frames`` rows (unmasked by any door; ``run --redact``
    already applied), ``live`` whether the run is still recording."""

    committed: int | None
    records: list[FrameRecord] = field(default_factory=list)
    live: bool = False

    @property
    def rows(self) -> list[dict[str, Any]]:
        """Every frame of the tail as a ``frames`` row."""
        return [r.as_dict() for r in self.records]

    def index_after(self, seq: int) -> int:
        """How many frames of the tail have a seq up to ``seq``."""
        return bisect.bisect_right(self.records, seq, key=_SEQ)


class _Collector:
    """Stands in for the indexer's insert batches: keeps each frame made, in order."""

    def __init__(self) -> None:
        self.records: list[FrameRecord] = []
        self.count = 0

    def add(self, rec: FrameRecord) -> None:
        self.records.append(rec)


class _RunJournal:
    """One live run's journal, followed by a resumed ``Indexer``."""

    def __init__(self, path: Path, run_id: int, state: dict[str, Any] | None, max_keep: int) -> None:
        self.fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        self.name = path.name
        try:
            self.reader = jr.JournalReader(self.fd)
            start = next(iter(self.reader.records()), None)
            if start is None or start.kind != jr.START:
                raise jr.JournalDamaged("no START record yet")
            begun = json.loads(start.payload)
            rules = begun.get("redact")
            redactor = Redactor(rules) if isinstance(rules, list) else None
            if redactor is not None:
                # run --redact: the recorder's redactor learnt each value a frame named (masked
                # in the database, so not to be learnt from it): this one reads the journal
                # from its start as the recorder did. Once that is punched out, the run is read
                # from the database alone (JournalDamaged, below).
                state = None
            limit = begun.get("max_record_bytes")
            keep = max_keep if limit is None else min(limit, max_keep)
            self.indexer = Indexer(run_id, keep, state, resumed=state is not None, redactor=redactor)
            # The tracker's annotations need the whole conversation before the commit; a live frame
            # carries the wire's facts only (see the module docstring).
            self.indexer.tracker = NoTracker()  # type: ignore[assignment]
            self.collector = _Collector()
            self.indexer.pending = self.collector  # type: ignore[assignment]
            if state is not None:
                self.reader.offset = state["offset"]
            else:
                self.indexer.feed(start)
        except BaseException:
            os.close(self.fd)
            raise
        self.from_start = state is None  # a run --redact follower never restarts mid-journal
        self.rows: list[FrameRecord] = []

    def behind(self, committed: int) -> bool:
        """Whether the recorder has overtaken this follower (its commits punch what was read)."""
        return self.indexer.seq < committed and not self.from_start

    def advance(self) -> None:
        """Read the records appended since the last call (raises ``JournalDamaged`` on zeros)."""
        for rec in self.reader.records():
            self.indexer.feed(rec)
        made = self.collector.records
        if made:
            self.rows.extend(made)
            self.collector.records = []
        if self.indexer.patches:  # a hang-up turned frames already made into undelivered ones
            by_seq = {r.seq: r for r in self.rows[-4096:]}
            for patch in self.indexer.patches:
                found = by_seq.get(patch.get("key", {}).get("seq"))
                if found is not None:
                    for name, value in patch.get("values", {}).items():
                        if hasattr(found, name):
                            setattr(found, name, value)
            self.indexer.patches = []
        if len(self.rows) > MAX_BUFFERED:
            del self.rows[: len(self.rows) - MAX_BUFFERED]

    def after(self, committed: int, seq: int) -> list[FrameRecord]:
        """Frames after ``seq``, dropping those the database holds by now (``committed``)."""
        held = bisect.bisect_right(self.rows, committed, key=_SEQ)
        if held:
            del self.rows[:held]
        return self.rows[bisect.bisect_right(self.rows, seq, key=_SEQ) :]

    def close(self) -> None:
        os.close(self.fd)


class Journals:
    """The journals of a database's live runs, each followed from its last commit and kept
    between reads (a page asks every few hundred ms). Thread-safe."""

    def __init__(self, db_path: Path | str | None) -> None:
        self.directory = jr.journal_dir(Path(db_path)) if db_path else None
        self._runs: dict[int, _RunJournal] = {}
        self._lock = threading.Lock()

    def tail(self, db: Any, run_id: int, after: int = 0) -> Tail:
        """``run_id``'s frames beyond its last commit (and after seq ``after``), read from its
        journal now."""
        row = db.execute("select status, journal, journal_state from runs where id = ?", [run_id]).fetchone()
        if row is None:
            return Tail(None)
        status, name, state_text = row
        state = _state(state_text)
        committed = int(state["seq"]) if state else 0
        if status != "running" or not name or self.directory is None or (state and state.get("done")):
            self._forget(run_id)
            return Tail(None, [], status == "running")
        with self._lock:
            follower = self._runs.get(run_id)
            for attempt in range(2):
                try:
                    if follower is None or follower.name != name or follower.behind(committed):
                        # New, or overtaken by the recorder (whose commits punch the space read).
                        self._drop(run_id)
                        follower = _RunJournal(self.directory / name, run_id, state, _max_keep(db))
                        self._runs[run_id] = follower
                    follower.advance()
                    break
                except (OSError, jr.JournalDamaged, ValueError, KeyError):
                    self._drop(run_id)
                    follower = None
                    if attempt:
                        return Tail(committed, [], True)
                    # The space was punched under us: start again from the newest commit.
                    row = db.execute("select journal_state from runs where id = ?", [run_id]).fetchone()
                    state = _state(row[0] if row else None)
                    committed = int(state["seq"]) if state else 0
            assert follower is not None
            return Tail(committed, follower.after(committed, max(after, committed)), True)

    def _forget(self, run_id: int) -> None:
        with self._lock:
            self._drop(run_id)

    def _drop(self, run_id: int) -> None:
        old = self._runs.pop(run_id, None)
        if old is not None:
            old.close()

    def close(self) -> None:
        with self._lock:
            for run_id in list(self._runs):
                self._drop(run_id)


def _state(text: str | None) -> dict[str, Any] | None:
    if not text:
        return None
    try:
        state = json.loads(text)
    except ValueError:
        return None
    return state if isinstance(state, dict) and isinstance(state.get("seq"), int) else None


def _max_keep(db: Any) -> int:
    conn = getattr(db, "conn", db)
    try:
        room = conn.getlimit(11)  # sqlite3.SQLITE_LIMIT_LENGTH, as the recorder's session reads it
    except (AttributeError, TypeError):
        room = 1_000_000_000
    return max(1024, room - ROW_MARGIN)


def record_of(row: dict[str, Any]) -> Any:
    """A frame row as the filter language's ``matches`` reads it (no findings: not checked yet)."""
    return SimpleNamespace(**row, findings=[])


class Follower:
    """``tail``'s memory: every run followed — those running when it starts and those started
    later — each frame shown once, in order within its run: committed rows, then the journal's
    frames beyond the last commit. A run is let go one poll after it is seen ended, by which time
    its last frames are committed. ``from_start``: begin with every frame already recorded."""

    def __init__(self, db: Any, journals: Journals, *, from_start: bool = False) -> None:
        self.db = db
        self.journals = journals
        self.last: dict[int, int] = {}
        self.ending: set[int] = set()
        self.newest = 0
        for run_id, status in db.execute("select id, status from runs order by id").fetchall():
            self.newest = max(self.newest, run_id)
            if from_start:
                self.last[run_id] = 0
            elif status == "running":
                self.last[run_id] = self._seen_now(run_id)

    def _seen_now(self, run_id: int) -> int:
        high = int(self.db.execute("select coalesce(max(seq), 0) from frames where run_id = ?", [run_id]).fetchone()[0])
        tail = self.journals.tail(self.db, run_id)
        return max([high, *(r.seq for r in tail.records[-1:])])

    def poll(self, expr: filter_tree.Expr) -> Iterator[dict[str, Any]]:
        """The frames recorded (or journaled) since the last poll that ``expr`` selects."""
        for (run_id,) in self.db.execute("select id from runs where id > ? order by id", [self.newest]).fetchall():
            self.newest = run_id
            self.last.setdefault(run_id, 0)
        if not self.last:
            return
        where, params = expr.to_sql()
        sql = f"select * from frames where run_id = ? and seq > ? and seq <= ? and ({where}) order by seq"
        for run_id in sorted(self.last):
            tail = self.journals.tail(self.db, run_id, self.last[run_id])
            if tail.committed is None:  # ended (or unknown): the database holds everything
                high = int(
                    self.db.execute("select coalesce(max(seq), 0) from frames where run_id = ?", [run_id]).fetchone()[0]
                )
            else:
                high = tail.committed
            if high > self.last[run_id]:
                yield from queries.iter_rows(self.db, sql, [run_id, self.last[run_id], high, *params])
                self.last[run_id] = high
            for rec in tail.records:
                if rec.seq > self.last[run_id]:
                    self.last[run_id] = rec.seq
                    row = rec.as_dict()
                    if expr.matches(record_of(row)):
                        yield row
            if run_id in self.ending:
                del self.last[run_id]
                self.ending.discard(run_id)
            elif not tail.live:
                self.ending.add(run_id)
