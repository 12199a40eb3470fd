"""The recorder: a process of its own that reads a run's journal and records it into SQLite.

Owns: everything after a chunk is journaled — framing, decoding, protocol tracking and batched
inserts — and the bookkeeping that makes recording exactly-once across crashes: with every
batch, the writer commits the journal position the batch's frames came from (``journal_state``
on the run row), so whoever resumes a journal (the same recorder after its writer died, the
proxy after its recorder died, or any later command that opens the database) starts where the
last commit left off, and no frame is recorded twice or lost.

Processes: the recorder frames, decodes and tracks; it forks a writer that owns SQLite (a thread
would share the GIL, and sqlite3 takes the GIL back after every row, so decoding and inserting
would run one after the other instead of side by side on two cores). Both run in a session of
their own, so a signal sent to the proxy's process group cannot cut a recording short. The
recorder learns that the journal has grown from a wake-up byte the relay writes to a pipe after
each append, and that the relay is gone from that pipe's end of file. It reads at its own pace:
the relay never waits for it, for the writer, or for a database lock (another process may hold
the write lock for minutes: the journal grows meanwhile, and recording catches up).

Must not know: trio, the agent's pipes, the proxy's stdout. It speaks to a person only through
stderr, prefixed ``acp-proxy:``.

The journal's record format is in ``journal.py``; the frames' columns in ``store.py``.
"""

from __future__ import annotations

import fcntl
import gc
import json
import os
import queue
import select
import signal
import sqlite3
import struct
import sys
import threading
import time
from collections.abc import Callable, Iterator
from operator import itemgetter
from pathlib import Path
from typing import Any

import msgspec

from acp_proxy.checks.live import LiveCheck
from acp_proxy.protocol import wire
from acp_proxy.protocol.frames import COLUMNS, FrameRecord
from acp_proxy.protocol.framing import Line, LineFramer
from acp_proxy.protocol.redact import FRAME_FIELDS, Redactor
from acp_proxy.record import journal as jr
from acp_proxy.record import supervise
from acp_proxy.record.journal import A2C, C2A, CONTROL_KINDS, DIRECTIONS, STDERR, Record
from acp_proxy.store import database as store

FLUSH_ROWS = 4000
FLUSH_BYTES = 1024 * 1024  # a batch holds a few big frames at most: memory stays bounded
FLUSH_SECONDS = 0.05
LOCK_PATIENCE = 600.0  # seconds to wait for the database at start-up before leaving the journal to a recovery
WRITE_PATIENCE = float("inf")  # a commit waits out any write lock: the journal holds the frames meanwhile
CHECKPOINT_BYTES = 16 * 1024 * 1024
# Yielding to a flood (see FloodWatch): small frames faster than anyone reads them, for at most
# this long and this far behind; a pause this long ends it.
FLOOD_LINES_PER_S = 5000
FLOOD_MAX_SECONDS = 10.0
FLOOD_MAX_BYTES = 64 * 1024 * 1024
FLOOD_PAUSE = 0.1
FLOOD_WINDOW = 0.02  # the longest span a look's lines are spread over (2 x POLL_SECONDS)
FLOOD_SAMPLE_BYTES = 64 * 1024  # the newest journal bytes whose newlines estimate the rate
FLOOD_SAMPLE_LINES = 8  # fewer in a sample: big frames, whose cost is per byte, not per frame
LINE_BESIDE_BYTES = 64 * 1024  # a line this long goes to the writer beside its batch (see _SparseInserts)
ROW_MARGIN = 64 * 1024  # room left for a row's other columns under SQLite's length limit
CONTROL = 3  # the index slot of records that belong to no direction (START, META)
RESUMED_EXIT = 3  # the recorder could not lock the journal: someone else is recording it

_INSERT_FAULT = "INSERT INTO faults (run_id, seq, ts_ns, rule, action, detail) VALUES (?, ?, ?, ?, ?, ?)"
_LENGTH = struct.Struct("<I")
_RAW = COLUMNS.index("raw")
_IOV_MAX = 512  # buffers per writev (Linux takes 1,024)


def _say(message: str) -> None:
    try:
        os.write(2, f"acp-proxy: {message}\n".encode())
    except OSError:
        pass


class _SparseInserts:
    """Rows grouped by shape; one INSERT statement per shape, naming only non-NULL columns.

    A long line's text travels beside its batch, not inside it (see ``take``)."""

    def __init__(self, *, lines_beside: bool = True) -> None:
        self.groups: dict[tuple[bool, ...], list[tuple]] = {}
        self.count = 0
        self._plans: dict[tuple[bool, ...], tuple[str, Callable[[tuple], tuple], int | None]] = {}
        # False when rows hold a masked copy of their line (run --redact): then ``raw`` is not
        # the line's bytes, and every value stays in its row.
        self.lines_beside = lines_beside
        self.beside: list[tuple[tuple[bool, ...], int, bytes]] = []  # (shape, row in its group, line)

    def add(self, rec: FrameRecord) -> None:
        shape, values = rec.sparse_row()
        group = self.groups.get(shape)
        if group is None:
            group = self.groups[shape] = []
        if (
            len(rec.line) >= LINE_BESIDE_BYTES
            and self.lines_beside
            and rec.raw is not None  # then it is exactly the line, decoded
            and rec.batch_seq is None
        ):
            self.beside.append((shape, len(group), rec.line))
        group.append(values)
        self.count += 1

    def take(self) -> tuple[list[tuple[str, list[tuple]]], list[list[int]], list[bytes]]:
        """The batches (SQL, rows); and for each long line, where its ``raw`` goes (batch, row,
        column, length) and its bytes. Those rows hold ``b""`` there until ``place_beside``:
        the writer reads the bytes straight after the batch, with no copy into the batch's
        encoding and out of it (64 x 1 MiB frames, medians of 11 runs: 317 MB/s with them in
        the batch, 329-341 beside it)."""
        batches: list[tuple[str, list[tuple]]] = []
        where: dict[tuple[bool, ...], int] = {}
        for shape, values in self.groups.items():
            sql, pick, _ = self._plan(shape)
            where[shape] = len(batches)
            batches.append((sql, list(map(pick, values))))
        places: list[list[int]] = []
        lines: list[bytes] = []
        for shape, row, line in self.beside:
            index = where[shape]
            column = self._plans[shape][2]
            assert column is not None  # rec.raw is not None: the shape has it
            rows = batches[index][1]
            row_values: list[Any] = list(rows[row])
            row_values[column] = b""
            rows[row] = tuple(row_values)
            places.append([index, row, column, len(line)])
            lines.append(line)
        self.groups = {}
        self.beside = []
        self.count = 0
        return batches, places, lines

    def _plan(self, shape: tuple[bool, ...]) -> tuple[str, Callable[[tuple], tuple], int | None]:
        plan = self._plans.get(shape)
        if plan is None:
            indexes = [i for i, present in enumerate(shape) if present]
            names = ", ".join(COLUMNS[i] for i in indexes)
            # ``raw`` may come as the line's bytes (see take): stored as the text it is.
            marks = ", ".join("CAST(? AS TEXT)" if i == _RAW else "?" for i in indexes)
            sql = f"INSERT INTO frames ({names}) VALUES ({marks})"
            getter = itemgetter(*indexes)
            pick = getter if len(indexes) > 1 else (lambda values: (getter(values),))
            plan = self._plans[shape] = (sql, pick, indexes.index(_RAW) if _RAW in indexes else None)
        return plan


def place_beside(message: dict[str, Any]) -> None:
    """Put each long line's bytes (``message["lines"]``) into its row (see _SparseInserts.take)."""
    batches = message["batches"]
    for (index, row, column, _), line in zip(message.pop("beside", ()), message.pop("lines", ()), strict=True):
        rows = batches[index][1]
        values = list(rows[row])
        values[column] = line
        rows[row] = values


def make_record(
    run_id: int, seq: int, ts_ns: int, direction: int, line: Line, meta: dict[str, Any] | None = None
) -> FrameRecord:
    """One frames row for ``line`` with its wire facts (what the tracker then annotates)."""
    data = line.data
    try:
        text: str | None = data.decode()
    except UnicodeDecodeError:
        text = None
    if direction == STDERR:
        rec = FrameRecord(run_id, seq, ts_ns, "stderr", data, None)
        rec.kind = "stderr"
    else:
        frame = wire.decode(data, utf8_valid=text is not None) if not line.cut else _cut_frame(line)
        rec = FrameRecord(run_id, seq, ts_ns, DIRECTIONS[direction], data, frame)
    rec.raw = text
    if text is None:
        rec.raw_bytes = data
    rec.size = line.size
    if not line.terminated:
        rec.terminated = 0
    if line.cut:
        rec.cut = 1
    if meta:
        rec.forwarded = int(meta.get("forwarded", 1))
        rec.note = meta.get("note")
        rec.fault = meta.get("fault")
        rec.origin = meta.get("origin")
    return rec


def _cut_frame(line: Line) -> wire.Frame:
    return wire.invalid(f"recorded prefix only: {len(line.data)} of {line.size} bytes (--max-record-bytes)")


def _undelivered_note(delivered: int) -> str:
    if not delivered:
        return "never reached its receiver (the pipe was closed)"
    return f"reached its receiver cut, {delivered:,} bytes (the pipe was closed)"


def _join_note(first: str | None, second: str) -> str:
    return f"{first}; {second}" if first else second


# -- journal records -> rows ---------------------------------------------------------------


class Indexer:
    """Journal records in, row batches out, with the state a resume needs.

    Positions: every record has an index in its slot (c2a, a2c, stderr, control), and the DATA
    bytes of each direction a running position. A frame is emitted when its line is complete;
    the state committed with a batch names, per direction, the first record not wholly emitted
    and how many of its bytes were (a line may span many records), and the journal offset from
    which a resume must read again to rebuild the unfinished lines.
    """

    def __init__(
        self,
        run_id: int,
        max_keep: int | None,
        state: dict[str, Any] | None = None,
        *,
        resumed: bool = False,
        redactor: Redactor | None = None,
    ) -> None:
        from acp_proxy.protocol.tracker import Tracker  # imported late: the tracker pulls in the schema tables

        self.run_id = run_id
        self.max_keep = max_keep
        # run --redact: rows hold the masked copy of each line (the tracker sees the true one).
        self.redactor = redactor
        self.tracker = Tracker(run_id)
        self.framers = [LineFramer(max_keep) for _ in DIRECTIONS]
        self.pending = _SparseInserts(lines_beside=redactor is None)
        self.fault_rows: list[tuple] = []
        self.patches: list[dict[str, Any]] = []  # frames rows to correct (forwarded=0 after a hang-up)
        self.run_values: dict[str, Any] = {}  # run-row columns the next batch sets (META records)
        self.unflushed_bytes = 0
        self.last_flush = time.monotonic()
        st = state or {}
        self.idx: list[int] = list(st.get("idx", [0, 0, 0, 0]))
        self.pos: list[int] = list(st.get("pos", [0, 0, 0]))
        # Per slot, the first record a resume indexes, and how many of its bytes it skips.
        self.resume: list[list[int]] = [list(r) for r in st.get("resume", [[0, 0], [0, 0], [0, 0], [0, 0]])]
        self.done_after: list[set[int]] = [set(d) for d in st.get("done_after", [[], [], []])]
        self.seq: int = st.get("seq", 0)
        self.frame_counts: list[int] = list(st.get("frames", [0, 0, 0]))
        self.bytes: list[int] = list(st.get("bytes", [0, 0, 0]))
        self.emitted: list[int] = list(st.get("emitted", [0, 0, 0]))
        self.undelivered: list[int | None] = list(st.get("undelivered", [None, None, None]))
        # Per direction, the last gate-framed line recorded as forwarded: [seq, bytes, note].
        self.last_line: list[list[Any] | None] = list(st.get("last_line", [None, None, None]))
        self.gap_extra: list[int] = list(st.get("gap_extra", [0, 0, 0]))
        # Lines lost to journal gaps, per direction (what the relay forwarded but could not journal).
        self.lost_by_dir: list[int] = list(st.get("lost_dirs", [0, 0, 0]))
        self.final: bool = st.get("final", False)
        self.recovered: int = st.get("recovered", 0)
        self.gap_reasons: set[str] = set()
        # Per direction, while a line is unfinished: where it began (journal offset, every
        # slot's index and every direction's position at that record, the record's index and
        # the bytes of it before the line).
        self.line_start: list[tuple[int, list[int], list[int], int, int] | None] = [None, None, None]
        self.recent: list[list[tuple[int, int, int]]] = [[], [], []]  # (seq, start, end) of the last chunk's lines
        self.resumed = resumed or state is not None  # another process recorded this run before
        self.first_seq = self.seq

    # -- input -----------------------------------------------------------------------------

    def feed(self, rec: Record) -> None:
        kind = rec.kind
        slot = CONTROL if kind in CONTROL_KINDS else rec.direction
        index = self.idx[slot]
        self.idx[slot] = index + 1
        skip = 0
        first, skip_bytes = self.resume[slot]
        if index < first or (slot != CONTROL and index in self.done_after[slot]):
            if kind == jr.DATA:  # indexed before a resume
                self.pos[slot] += len(rec.payload)
            return
        if index == first and skip_bytes:
            skip = skip_bytes  # the first record of a line a resume rebuilds: its head was emitted
        if kind == jr.DATA:
            self._data(rec, index, skip)
        elif kind == jr.META:
            self._meta(rec.payload)
        elif kind == jr.LINE:
            self._line(rec)
        elif kind == jr.EOF:
            self._end_of(rec.direction, rec.ts_ns)
        elif kind == jr.UNDELIVERED:
            self._undelivered(rec.direction, jr.POSITION.unpack(rec.payload)[0])
        elif kind == jr.GAP:
            self._gap(rec.direction, rec.ts_ns, rec.payload)
        elif kind == jr.UNSENT:
            self._unsent(rec.direction)
        if slot != CONTROL and self.line_start[slot] is not None and kind != jr.DATA:
            self.done_after[slot].add(index)

    def _data(self, rec: Record, index: int, skip: int) -> None:
        d = rec.direction
        data = rec.payload
        position = self.pos[d]
        self.pos[d] = position + len(data)
        if skip:
            data = data[skip:]
        framer = self.framers[d]
        had_line = framer.pending > 0
        lines = framer.feed(data)
        if framer.pending and (lines or not had_line):
            before = len(rec.payload) - framer.pending
            idx = list(self.idx)
            idx[d] = index
            self.line_start[d] = (rec.offset, idx, [*self.pos[:d], position, *self.pos[d + 1 :]], index, before)
        elif not framer.pending:
            self.line_start[d] = None
            self.done_after[d] = set()
        self.recent[d] = []
        if not lines:
            return
        if d != STDERR and not self.gap_extra[d] and self.undelivered[d] is None and self.redactor is None:
            self._emit_plain(d, rec.ts_ns, lines)
            return
        for line in lines:
            self._emit(d, rec.ts_ns, line, track=True)

    def _emit_plain(self, d: int, ts_ns: int, lines: list[Line]) -> None:
        """``_emit`` for the lines of a storm: no gap, no hang-up, no gate meta. Spelled out in
        one loop (one function call per line instead of three: ~3 µs of the ~15 a frame costs)."""
        run_id = self.run_id
        name = DIRECTIONS[d]
        observe = self.tracker.observe
        add = self.pending.add
        decode = wire.decode
        recent = self.recent[d]
        start = self.emitted[d]
        kept = 0
        for line in lines:
            data, size, terminated, cut = line
            self.seq += 1
            seq = self.seq
            try:
                text: str | None = data.decode()
            except UnicodeDecodeError:
                text = None
            frame = decode(data, utf8_valid=text is not None) if not cut else _cut_frame(line)
            rec = FrameRecord(run_id, seq, ts_ns, name, data, frame)
            rec.raw = text
            if text is None:
                rec.raw_bytes = data
            rec.size = size
            if not terminated:
                rec.terminated = 0
            if cut:
                rec.cut = 1
            observe(rec)
            add(rec)
            if frame.elements:
                self._add_batch_elements(rec, frame.elements)
            end = start + size + terminated
            recent.append((seq, start, end))
            start = end
            kept += len(data)
        self.bytes[d] += start - self.emitted[d]
        self.emitted[d] = start
        self.frame_counts[d] += len(lines)
        self.unflushed_bytes += kept

    def _emit(
        self, d: int, ts_ns: int, line: Line, *, track: bool = False, note: str | None = None, newline_kept: bool = True
    ) -> None:
        start = self.emitted[d]  # positions count journaled bytes (not those a GAP lost)
        end = start + line.size + (line.terminated and newline_kept)
        self.emitted[d] = end
        extra = self.gap_extra[d]
        if extra:
            self.gap_extra[d] = 0
            line = Line(line.data, line.size + extra, line.terminated, True)
            note = _join_note(note, f"{extra:,} bytes of this line could not be journaled")
        limit = self.undelivered[d]
        meta: dict[str, Any] | None = None
        delivered = end - start
        if limit is not None and end > limit:
            delivered = max(0, limit - start)
            meta = {"forwarded": 0, "note": _join_note(note, _undelivered_note(delivered))}
        elif note is not None:
            meta = {"note": note}
        self.bytes[d] += delivered
        seq = self._add(d, ts_ns, line, meta)
        if track:
            self.recent[d].append((seq, start, end))

    def _line(self, rec: Record) -> None:
        """A line the gate framed and judged itself, with what it did to it."""
        payload = rec.payload
        (meta_len,) = jr.LINE_META.unpack_from(payload)
        meta = msgspec.json.decode(payload[jr.LINE_META.size : jr.LINE_META.size + meta_len])
        data = payload[jr.LINE_META.size + meta_len :]
        line = Line(data, meta.pop("size"), meta.pop("terminated"), meta.pop("cut"))
        if self.max_keep is not None and len(line.data) > self.max_keep:
            line = Line(line.data[: self.max_keep], line.size, line.terminated, True)
        forwarded = meta.get("forwarded", 1)
        if forwarded:
            self.bytes[rec.direction] += line.size + line.terminated
        seq = self._add(rec.direction, rec.ts_ns, line, meta)
        self.last_line[rec.direction] = [seq, line.size + line.terminated, meta.get("note")] if forwarded else None

    def _unsent(self, d: int) -> None:
        """The last line the gate framed in ``d`` was recorded before its write, which failed."""
        last = self.last_line[d]
        if last is None:
            return
        self.last_line[d] = None
        seq, size, note = last
        self.bytes[d] -= size
        why = "never reached its receiver, or only in part (the pipe was closed)"
        values = {"forwarded": 0, "note": _join_note(note, why)}
        self.patches.append({"table": "frames", "key": {"run_id": self.run_id, "seq": seq}, "values": values})

    def _end_of(self, d: int, ts_ns: int) -> None:
        line = self.framers[d].finish()
        self.line_start[d] = None
        self.done_after[d] = set()
        if line is not None:
            self._emit(d, ts_ns, line)
        elif self.gap_extra[d]:  # a last line whose bytes could all not be journaled
            self.gap_extra[d] = 0
            self.lost_by_dir[d] += 1

    def _undelivered(self, d: int, position: int) -> None:
        """From ``position`` on, the receiver of ``d`` got nothing: correct the lines already
        emitted from the last chunk that reach past it."""
        current = self.undelivered[d]
        if current is not None and current <= position:
            return
        self.undelivered[d] = position
        for seq, start, end in self.recent[d]:
            if end > position:
                delivered = max(0, position - start)
                self.bytes[d] -= (end - start) - delivered
                what = (
                    "never reached its receiver" if not delivered else f"reached its receiver cut ({delivered:,} bytes)"
                )
                key = {"run_id": self.run_id, "seq": seq}
                values = {"forwarded": 0, "note": f"{what}: the pipe was closed"}
                self.patches.append({"table": "frames", "key": key, "values": values})

    def _gap(self, d: int, ts_ns: int, payload: bytes) -> None:
        """Bytes of ``d`` the relay forwarded but could not journal (full disk, --db-limit)."""
        nbytes, newlines, head, tail, reason = jr.GAP_COUNTS.unpack(payload)
        self.gap_reasons.add(jr.GAP_REASONS.get(reason, "the journal could not be written"))
        if self.undelivered[d] is None:
            self.bytes[d] += nbytes  # relayed, only not journaled
        framer = self.framers[d]
        if not newlines:
            self.gap_extra[d] += nbytes
            return
        line = framer.finish()
        self.line_start[d] = None
        self.done_after[d] = set()
        if line is not None or self.gap_extra[d]:
            data = line.data if line is not None else b""
            size = line.size if line is not None else 0
            self.gap_extra[d] += head
            note = "the end of this line could not be journaled"
            self._emit(d, ts_ns, Line(data, size, True, True), note=note, newline_kept=False)
            self.lost_by_dir[d] += newlines - 1
        else:
            self.lost_by_dir[d] += newlines
        self.gap_extra[d] = tail

    def _meta(self, payload: bytes) -> None:
        values = json.loads(payload)
        if values.pop("final", False):
            self.final = True
        values.pop("status", None)  # the run's status is set when its recording is complete
        by_direction = values.pop("lost_lines", None)
        if isinstance(by_direction, list) and len(by_direction) == len(self.lost_by_dir):
            for d, lost in enumerate(by_direction):
                self.lost_by_dir[d] += lost
        self.run_values.update(values)

    def _add(self, direction: int, ts_ns: int, line: Line, meta: dict[str, Any] | None) -> int:
        self.seq += 1
        seq = self.seq
        self.frame_counts[direction] += 1
        self.unflushed_bytes += len(line.data)
        rec = make_record(self.run_id, seq, ts_ns, direction, line, meta)
        if meta:
            for applied in meta.get("faults", ()):
                self.fault_rows.append(
                    (self.run_id, seq, ts_ns, applied["rule"], applied["action"], applied.get("detail"))
                )
        if direction == STDERR:
            if self.redactor is not None:
                self._redact(rec)
            self.pending.add(rec)
            return seq
        self.tracker.observe(rec)
        if self.redactor is not None:
            self._redact(rec)
        self.pending.add(rec)
        elements = rec.frame.elements if rec.frame is not None else None
        if elements:
            self._add_batch_elements(rec, elements)
        return seq

    def _redact(self, rec: FrameRecord) -> None:
        assert self.redactor is not None
        for name in FRAME_FIELDS:
            setattr(rec, name, self.redactor.frame_field(name, getattr(rec, name)))

    def _add_batch_elements(self, batch: FrameRecord, elements: list[tuple[bytes, wire.Frame]]) -> None:
        for index, (raw, frame) in enumerate(elements):
            self.seq += 1
            rec = FrameRecord(self.run_id, self.seq, batch.ts_ns, batch.dir, raw, frame)
            rec.raw = raw.decode(errors="replace")  # the batch line itself keeps the exact bytes
            rec.batch_seq = batch.seq
            rec.batch_index = index
            rec.forwarded = batch.forwarded
            self.tracker.observe(rec)
            if self.redactor is not None:
                self._redact(rec)
            self.pending.add(rec)

    # -- output ----------------------------------------------------------------------------

    def due(self) -> bool:
        return (
            self.pending.count >= FLUSH_ROWS
            or self.unflushed_bytes >= FLUSH_BYTES
            or (bool(self.pending.count) and time.monotonic() - self.last_flush > FLUSH_SECONDS)
        )

    def message(self, offset: int) -> dict[str, Any]:
        """Everything pending as one transaction for the writer, with the state to resume from
        once it is committed (``offset``: where the journal has been read up to)."""
        count = self.pending.count
        changes = [_change_as_dict(c) for c in self.tracker.drain()]
        changes.extend(self.patches)
        self.patches = []
        batches, places, lines = self.pending.take()
        if self.fault_rows:
            batches.append((_INSERT_FAULT, self.fault_rows))
            self.fault_rows = []
        run = {**self.run_values, **self.counters(), "lost": self.lost_lines}
        self.run_values = {}
        message = {
            "count": count,
            "batches": batches,
            "changes": changes,
            "nbytes": self.unflushed_bytes,
            "run": run,
            "state": json.dumps(self.state(offset), separators=(",", ":")),
            "offset": self.resume_offset(offset),
        }
        if places:
            message["beside"] = places
            message["lines"] = lines
        self.unflushed_bytes = 0
        self.last_flush = time.monotonic()
        return message

    @property
    def lost_lines(self) -> int:
        return sum(self.lost_by_dir)

    def counters(self) -> dict[str, Any]:
        # Lines relayed, recorded or not: a line lost to a journal gap counts too (and in
        # not_recorded), so that frames - not_recorded is what the frames table holds.
        lost = self.lost_by_dir
        return {
            "frames": sum(self.frame_counts) + self.lost_lines,
            "frames_c2a": self.frame_counts[C2A] + lost[C2A],
            "frames_a2c": self.frame_counts[A2C] + lost[A2C],
            "stderr_lines": self.frame_counts[STDERR] + lost[STDERR],
            "bytes_c2a": self.bytes[C2A],
            "bytes_a2c": self.bytes[A2C],
        }

    def resume_offset(self, offset: int) -> int:
        starts = [start[0] for start in self.line_start if start is not None]
        return min([offset, *starts])

    def state(self, offset: int) -> dict[str, Any]:
        """Where a resume starts reading, and what it skips there (see the class docstring)."""
        resume_at = self.resume_offset(offset)
        idx, pos = list(self.idx), list(self.pos)
        for start in self.line_start:
            if start is not None and start[0] == resume_at:
                idx, pos = list(start[1]), list(start[2])
                break
        resume = [[self.idx[slot], 0] for slot in range(4)]
        for d, start in enumerate(self.line_start):
            # Every record of d before the unfinished line's is done; of that one, its first bytes.
            if start is not None:
                resume[d] = [start[3], start[4]]
        return {
            "offset": resume_at,
            "idx": idx,
            "pos": pos,
            "resume": resume,
            "done_after": [sorted(d) for d in self.done_after],
            "seq": self.seq,
            "frames": self.frame_counts,
            "bytes": self.bytes,
            "emitted": self.emitted,
            "undelivered": self.undelivered,
            "last_line": self.last_line,
            "gap_extra": self.gap_extra,
            "lost": self.lost_lines,
            "lost_dirs": self.lost_by_dir,
            "final": self.final,
            "recovered": self.recovered + (self.seq - self.first_seq if self.resumed else 0),
        }

    def finish(self, offset: int, ts_ns: int) -> dict[str, Any]:
        """The last message: the unfinished lines, the tracker's end of run, the run row."""
        for d, framer in enumerate(self.framers):
            line = framer.finish()
            self.line_start[d] = None
            if line is not None:
                self._emit(d, ts_ns, line)
        self.tracker.finish(ts_ns)
        message = self.message(offset)
        state = self.state(offset)
        state["done"] = True
        message["state"] = json.dumps(state, separators=(",", ":"))
        end = {name: value for name, value in message["run"].items() if name != "lost"}
        end.setdefault("ended_ns", ts_ns)
        end["status"] = "crashed" if not self.final or self.resumed else "ended"
        end["recovered_frames"] = state["recovered"]
        message["end"] = end
        return message


def _change_as_dict(change: Any) -> dict[str, Any]:
    if isinstance(change, dict):
        return change
    return {"table": change.table, "key": dict(change.key), "values": dict(change.values)}


# -- rows -> SQLite ------------------------------------------------------------------------


class RunWriter:
    """Applies the recorder's messages to SQLite: one transaction per batch, holding the frames,
    the protocol facts, the run row's counters and the journal state they bring it to.

    A batch that cannot be inserted whole is inserted row by row, so one bad row costs one row
    (counted in ``not_recorded``, with the reason). Another process's write lock is waited out
    (up to LOCK_PATIENCE); the journal holds everything meanwhile.
    """

    def __init__(
        self,
        db: Any,
        run_id: int,
        journal_path: Path,
        journal_fd: int | None,
        *,
        checkpointer: _Checkpointer | None = None,
        live: LiveCheck | None = None,
    ) -> None:
        self.db = db
        self.conn: sqlite3.Connection = db.conn
        self.run_id = run_id
        self.journal_path = journal_path
        self.freer = jr.SpaceFreer(journal_fd) if journal_fd is not None else None
        self.checkpointer = checkpointer
        self.live = live
        self.facts = FactsApplier(db, run_id)
        row = self.conn.execute(
            "select not_recorded, not_recorded_reason, journal_state from runs where id = ?", [run_id]
        ).fetchone()
        # What this side could not store (the recorder counts lines lost to journal gaps).
        lost_before = json.loads(row[2]).get("lost", 0) if row and row[2] else 0
        self.not_recorded = max(0, (row[0] or 0) - lost_before) if row else 0
        self.reason: str | None = row[1] if row else None
        self.facts_failed = False
        self.said: set[str] = set()

    def apply(self, message: dict[str, Any]) -> None:
        if "learn" in message:
            self.facts.learn(message["learn"])
            return
        if "beside" in message:
            place_beside(message)
        dropped = message.get("dropped")
        if dropped:
            self._count(message["count"], dropped)
            message["batches"] = []
        try:
            store.wait_for_write_lock(lambda: self._commit(message), WRITE_PATIENCE, self._waiting)
        except sqlite3.Error as exc:
            self._count(message["count"], str(exc))
            self._say_once("recording failed", f"recording failed ({exc}); the conversation is still relayed")
            return
        if self.freer is not None and "offset" in message:
            self.freer.free_to(message["offset"])
        if self.checkpointer is not None:
            self.checkpointer.wrote(message["nbytes"])
        if "end" in message:
            self._finished()
        elif self.live is not None:
            self.live.committed()

    def _waiting(self) -> None:
        self._say_once("locked", "the database is locked by another process; recording waits (nothing is lost)")

    def _count(self, count: int, reason: str) -> None:
        self.not_recorded += count
        if self.reason is None:
            self.reason = reason

    def _say_once(self, key: str, text: str) -> None:
        if key not in self.said:
            self.said.add(key)
            _say(text)

    def _commit(self, message: dict[str, Any]) -> None:
        conn = self.conn
        failed = 0
        reasons: list[str] = []
        with conn:  # one transaction per batch; rolled back whole if it cannot commit
            conn.execute("BEGIN")
            for sql, rows in message["batches"]:
                failed += self._insert(sql, rows, reasons)
            if message["changes"]:
                conn.execute("SAVEPOINT facts")
                try:
                    self.facts.apply(message["changes"])
                except Exception as exc:
                    # Protocol facts are derived; the frames they come from must not be lost with them.
                    conn.execute("ROLLBACK TO facts")
                    if not self.facts_failed:
                        _say(f"could not record protocol facts ({type(exc).__name__}: {exc})")
                    self.facts_failed = True
                conn.execute("RELEASE facts")
            not_recorded = self.not_recorded + failed
            reason = self.reason or (reasons[0] if reasons else None)
            values = {name: value for name, value in message["run"].items() if name != "lost"}
            lost = message["run"].get("lost", 0)
            if lost and reason is None:
                reason = message.get("gap_reason") or "the journal could not be written"
            if "end" in message:
                values.update(message["end"])
            values["not_recorded"] = not_recorded + lost
            values["not_recorded_reason"] = reason
            values["journal_state"] = message["state"]
            sets = ", ".join(f"{name} = ?" for name in values)
            conn.execute(f"UPDATE runs SET {sets} WHERE id = ?", [*_storable(values).values(), self.run_id])
        self.not_recorded = not_recorded
        self.reason = reason

    def _insert(self, sql: str, rows: list[tuple], reasons: list[str]) -> int:
        """Insert ``rows``; when the statement fails, row by row. How many could not be."""
        conn = self.conn
        conn.execute("SAVEPOINT rows")
        try:
            conn.executemany(sql, rows)
            conn.execute("RELEASE rows")
            return 0
        except (sqlite3.Error, OverflowError, ValueError, TypeError) as exc:
            if isinstance(exc, sqlite3.OperationalError) and store._is_busy(exc):
                raise
            conn.execute("ROLLBACK TO rows")
            conn.execute("RELEASE rows")
        failed = 0
        for row in rows:
            conn.execute("SAVEPOINT row")
            try:
                conn.execute(sql, row)
            except (sqlite3.Error, OverflowError, ValueError, TypeError) as exc:
                if isinstance(exc, sqlite3.OperationalError) and store._is_busy(exc):
                    raise
                conn.execute("ROLLBACK TO row")
                failed += 1
                if not reasons:
                    reasons.append(f"a frame could not be stored ({type(exc).__name__}: {exc})")
            conn.execute("RELEASE row")
        if failed:
            self._say_once("row", f"{failed} frame(s) could not be stored: {reasons[0]}")
        return failed

    def _finished(self) -> None:
        """The run is recorded: its journal goes (committed first: a crash here only leaves a
        journal that a recovery sees is done)."""
        try:
            os.unlink(self.journal_path)
        except OSError:
            pass


def _storable(values: dict[str, Any]) -> dict[str, Any]:
    """Values SQLite can hold: an integer outside 64 bits (a peer's protocolVersion, say) is NULL."""
    for name, value in values.items():
        if isinstance(value, int) and not wire.INT64_MIN <= value <= wire.INT64_MAX:
            values[name] = None
    return values


class FactsApplier:
    """Applies the tracker's Changes (see its module docstring) to the sessions, session_runs,
    turns, runs and frames tables. One per run: it maps the tracker's run-local session and turn
    keys to row ids between batches; a session loaded or resumed here that an earlier run saw
    is that earlier row."""

    def __init__(self, db: Any, run_id: int) -> None:
        self.db, self.run_id = db, run_id
        self.session_rows: dict[int, int] = {}
        self.turn_rows: dict[int, int] = {}

    def apply(self, changes: list[dict[str, Any]]) -> None:
        db = self.db
        for change in changes:
            table, key, values = change["table"], change["key"], _storable(dict(change["values"]))
            if table == "runs":
                db["runs"].update(key["id"], values)
            elif table == "frames":
                sets = ", ".join(f"{name} = ?" for name in values)
                db.execute(
                    f"update frames set {sets} where run_id = ? and seq = ?",
                    [*values.values(), key["run_id"], key["seq"]],
                )
            elif table == "sessions":
                self._session(key["session_key"], values)
            elif table == "session_runs":
                row = {
                    "session_row": self.session_rows[key["session_key"]],
                    "run_id": key["run_id"],
                    **values,
                }
                db["session_runs"].insert(row, ignore=True)
            elif table == "turns":
                values["session_row"] = self.session_rows[values.pop("session_key")]
                if key["turn_key"] in self.turn_rows:
                    db["turns"].update(self.turn_rows[key["turn_key"]], values)
                else:
                    self.turn_rows[key["turn_key"]] = db["turns"].insert(values).last_pk

    def learn(self, changes: list[dict[str, Any]]) -> None:
        """Rebuild the key -> row maps from Changes a resume replayed (already applied once)."""
        conn = self.db.conn
        for change in changes:
            table, key, values = change["table"], change["key"], change["values"]
            if table == "sessions" and "session_id" in values:
                row = conn.execute("select max(id) from sessions where session_id = ?", [values["session_id"]])
                found = row.fetchone()[0]
                if found is not None:
                    self.session_rows[key["session_key"]] = found
            elif table == "turns" and values.get("prompt_seq") is not None:
                row = conn.execute(
                    "select id from turns where run_id = ? and prompt_seq = ?", [self.run_id, values["prompt_seq"]]
                ).fetchone()
                if row is not None:
                    self.turn_rows[key["turn_key"]] = row[0]

    def _session(self, session_key: int, values: dict[str, Any]) -> None:
        db = self.db
        row = self.session_rows.get(session_key)
        if row is None and values.get("created_by") not in ("session/new", "session/fork"):
            found = db.execute("select max(id) from sessions where session_id = ?", [values["session_id"]]).fetchone()[
                0
            ]
            row = self.session_rows[session_key] = found
        if row is None:
            self.session_rows[session_key] = db["sessions"].insert(values).last_pk
            return
        current = db["sessions"].get(row)
        update = {k: v for k, v in values.items() if k not in _SESSION_SET_ONCE or current[k] is None}
        db["sessions"].update(row, update)


_SESSION_SET_ONCE = ("created_run_id", "created_by", "parent_session_id", "first_seen_ns")


class _Checkpointer:
    """PASSIVE WAL checkpoints from a thread of their own, so inserts never wait for one."""

    def __init__(self, path: Path, every_bytes: int = CHECKPOINT_BYTES) -> None:
        self.path = path
        self.every_bytes = every_bytes
        self.written = 0
        self.wake = threading.Event()
        self.stopping = False
        self.thread = threading.Thread(target=self._run, name="checkpoint", daemon=True)
        self.thread.start()

    def wrote(self, nbytes: int) -> None:
        self.written += nbytes
        if self.written >= self.every_bytes:
            self.written = 0
            self.wake.set()

    def _run(self) -> None:
        conn = sqlite3.connect(str(self.path), isolation_level=None)
        conn.execute("PRAGMA busy_timeout = 1000")
        while True:
            self.wake.wait()
            self.wake.clear()
            if self.stopping:
                break
            _checkpoint(conn, "PASSIVE")
        conn.close()

    def stop(self) -> None:
        self.stopping = True
        self.wake.set()
        self.thread.join(timeout=5)


# -- the writer process --------------------------------------------------------------------


class _WriterLink:
    """The recorder's end of the pipe to its writer process (forked, so it starts at once).

    The writer says so on a second pipe as soon as the run's last transaction is committed,
    before its housekeeping (folding the WAL into the database file): the recorder,
    and so the proxy, exit then, with everything recorded and visible to any reader."""

    def __init__(self, session: Session, writer: Callable[[int, int, Session], int] | None = None) -> None:
        read_fd, write_fd = os.pipe()
        try:  # a deeper pipe lets decoding run ahead of a briefly slow disk
            fcntl.fcntl(write_fd, fcntl.F_SETPIPE_SZ, 1 << 20)
        except OSError:
            pass
        done_read, done_write = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:  # the writer
            os.close(write_fd)
            os.close(done_read)
            if session.wake_fd is not None:
                os.close(session.wake_fd)  # the relay must see the recorder's end go with the recorder
            status = 1
            try:
                status = (writer or _writer_main)(read_fd, done_write, session)
            except BaseException as exc:  # never let a bug here pass silently
                _say(f"the database writer failed: {type(exc).__name__}: {exc}")
            finally:
                os._exit(status)
        os.close(read_fd)
        os.close(done_write)
        self.fd = write_fd
        self.done_fd = done_read
        self.encoder = msgspec.msgpack.Encoder()

    def send(self, message: dict[str, Any]) -> None:
        """The message, then its long lines' bytes as they are (see _SparseInserts.take).
        Raises OSError once the writer is gone."""
        lines = message.pop("lines", ())
        payload = self.encoder.encode(message)
        _write_all_v(self.fd, [_LENGTH.pack(len(payload)), payload, *lines])

    def close(self) -> int:
        """End the link; 0 once the writer reports the run's end committed (it may still be
        tidying up, on its own), else its exit status (non-zero)."""
        try:
            os.close(self.fd)
        except OSError:
            pass
        try:
            report = os.read(self.done_fd, 1)
        except OSError:
            report = b""
        os.close(self.done_fd)
        if report:
            return 0
        _, status = os.waitpid(self.pid, 0)
        return status


class _Inbox:
    """The writer's end of the link: messages in order, each read and decoded by a thread of
    its own while the one before it is committed.

    sqlite3 lets go of the GIL while it inserts and commits, so reading overlaps writing, and
    the recorder's write returns as soon as the pipe is read instead of after each commit:
    without this the two took turns (a 1 MiB pipe holds less than one batch of big frames;
    64 x 1 MiB frames, medians of 11 runs: 298 MB/s, 317 with this). At most AHEAD messages
    are held here, the one being committed included."""

    AHEAD = 2

    def __init__(self, fd: int) -> None:
        self.reader = os.fdopen(fd, "rb", buffering=1 << 20)
        self.queue: queue.SimpleQueue[dict[str, Any] | BaseException | None] = queue.SimpleQueue()
        self.room = threading.Semaphore(self.AHEAD)
        threading.Thread(target=self._read_all, name="inbox", daemon=True).start()

    def __iter__(self) -> Iterator[dict[str, Any]]:
        while True:
            item = self.queue.get()
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
            self.room.release()

    def _read_all(self) -> None:
        decoder = msgspec.msgpack.Decoder()
        try:
            while True:
                self.room.acquire()
                message = self._read_one(decoder)
                self.queue.put(message)
                if message is None:
                    return
        except BaseException as exc:  # the writer's main thread reports it
            self.queue.put(exc)

    def _read_one(self, decoder: msgspec.msgpack.Decoder) -> dict[str, Any] | None:
        """The next whole message; None at the end of the link, or where the recorder died
        mid-message (the journal still holds what it was sending)."""
        reader = self.reader
        header = reader.read(_LENGTH.size)
        if len(header) < _LENGTH.size:
            return None
        (length,) = _LENGTH.unpack(header)
        payload = reader.read(length)
        if len(payload) < length:
            return None
        message = decoder.decode(payload)
        if "beside" in message:
            lines = [reader.read(place[3]) for place in message["beside"]]
            if any(len(line) != place[3] for line, place in zip(lines, message["beside"], strict=True)):
                return None
            message["lines"] = lines
        return message


def _report_committed(fd: int) -> None:
    try:
        os.write(fd, b"\0")
        os.close(fd)
    except OSError:
        pass


def _write_all_v(fd: int, buffers: list[bytes]) -> None:
    """Write every buffer in order, with no copy to join them."""
    views = [memoryview(b) for b in buffers if b]
    while views:
        written = os.writev(fd, views[:_IOV_MAX])
        while views and written >= len(views[0]):
            written -= len(views[0])
            views.pop(0)
        if written:
            views[0] = views[0][written:]


def _writer_main(fd: int, done_fd: int, session: Session) -> int:
    """The writer process: length-prefixed msgpack transactions in, SQLite rows out; one byte
    out on ``done_fd`` once the run's last transaction is committed (none if it never is).

    With a live check it forks the checker first (before any thread or connection exists here)
    and tells it about each commit."""
    live: LiveCheck | None = None
    if session.check:
        live = LiveCheck(
            session.db_path,
            session.run_id,
            schema=session.check != "lifecycle",
            close_fds=(fd, done_fd, session.journal_fd),
        )
    db = _open(session.db_path, session.limit)
    conn = db.conn
    # Checkpoints happen in their own thread (see _Checkpointer), never inside a COMMIT.
    conn.execute("PRAGMA wal_autocheckpoint = 0")
    # A savepoint's journal in memory: on disk it is a temporary file created and removed for
    # every batch (it holds the few b-tree pages a batch changes, never the frames' text).
    conn.execute("PRAGMA temp_store = MEMORY")
    if session.limit is not None:
        conn.execute("PRAGMA journal_size_limit = 0")  # --db-limit: a reset WAL gives its space back
    every = CHECKPOINT_BYTES if session.limit is None else max(256 * 1024, min(CHECKPOINT_BYTES, session.limit // 8))
    checkpointer = _Checkpointer(session.db_path, every)
    writer = RunWriter(
        db, session.run_id, session.journal_path, session.journal_fd, checkpointer=checkpointer, live=live
    )
    ended = False
    for message in _Inbox(fd):
        writer.apply(message)
        ended = ended or "end" in message
    if session.limit is not None:
        # --db-limit: the WAL is emptied before anyone is told: what is left on disk once the
        # proxy exits is the database alone.
        checkpointer.stop()
        _checkpoint(conn, "TRUNCATE")
    if live is not None:
        live.finish()  # the proxy waits for the recorder, so a check is complete when it exits
    if not ended:
        return 1  # the recorder learns it from the exit status, then has the journal recovered
    _report_committed(done_fd)
    os.close(session.journal_fd)  # removed already (the run ended); its lock goes with it
    # Housekeeping nobody waits for: the last frames are committed (in the WAL, where every
    # reader sees them); here they are copied into the database file.
    if session.limit is None:
        checkpointer.stop()
        _checkpoint(conn, "PASSIVE")
    return 0


def _checkpoint(conn: sqlite3.Connection, mode: str) -> None:
    try:
        conn.execute(f"PRAGMA wal_checkpoint({mode})")
    except sqlite3.Error:
        pass


def _open(db_path: Path, limit: int | None) -> Any:
    """The database for writing, waiting out another process's lock; no recovery of others."""
    return store.wait_for_write_lock(
        lambda: store.open_for_writing(db_path, limit_bytes=limit, recover=False), LOCK_PATIENCE
    )


class FloodWatch:
    """When the recorder lets the conversation have the CPU: while small frames pour in.

    The recorder's cost is per frame (decoding, tracking, one row each): about 9 µs, so
    recording a flood of small frames as it comes took a fifth of the pace of an official-SDK
    pair that kept both cores busy, idle class or not (the scheduler still gives an idle-class
    task every gap the conversation leaves, and each gap it takes delays the next wake-up). So
    while more than FLOOD_LINES_PER_S lines a second arrive, the recorder only watches the
    journal grow; it catches up once they pause for FLOOD_PAUSE, once it is FLOOD_MAX_SECONDS
    or ``max_backlog`` bytes behind, or once the relay is gone. Nothing waits in memory
    meanwhile: the journal holds it. Live views (``tail``, the web inspector, ``--check``,
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
        if lines >= FLOOD_LINES_PER_S * elapsed:
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
    FLOOD_SAMPLE_BYTES of them; 0 when they hold fewer than FLOOD_SAMPLE_LINES (big frames)."""
    grown = size - since
    if grown <= 0:
        return 0.0
    take = min(grown, FLOOD_SAMPLE_BYTES)
    try:
        sample = os.pread(fd, take, size - take)
    except OSError:
        return 0.0
    count = sample.count(b"\n")
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
        db = _open(self.db_path, self.limit)
        self.run_id, state, existed = store.wait_for_write_lock(
            lambda: _ensure_run(db, self.start, journal_path, self.redactor), LOCK_PATIENCE
        )
        self.done = bool(state and state.get("done"))
        max_keep = self.start.get("max_record_bytes")
        room = max(1024, store.max_value_bytes(db.conn) - ROW_MARGIN)
        max_keep = room if max_keep is None else min(max_keep, room)
        self.indexer = Indexer(self.run_id, max_keep, state, resumed=existed, redactor=self.redactor)
        if state is not None:
            self.reader.offset = state["offset"]
            self.learned = [] if self.done else _replay(self.indexer, db.conn, self.run_id)
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
                _say(f"--db-limit reached ({self.limit:,} bytes): frames are relayed but no longer recorded")

    def _gap_said(self) -> None:
        reasons = self.indexer.gap_reasons
        if reasons and not self.limit_said:
            self.limit_said = True
            _say(f"{sorted(reasons)[0]}: frames are relayed but no longer recorded")

    # -- recovery: to the journal's end, here -------------------------------------------------

    def recover(self, *, rescue: bool = True) -> None:
        """Record the journal to its end here; a ``rescue`` (the run's own recorder is gone)
        ends the run ``crashed``. Without, it is recording a finished journal in-process."""
        writer = RunWriter(self.db, self.run_id, self.journal_path, self.journal_fd)
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
                _say(f"the journal ends in a torn record ({self.reader.pending} bytes): the proxy was killed")
            if not self.indexer.final and self.marker:
                supervise.stop_marked(self.marker, 1.0)  # the proxy died: its agent's descendants go too
            self._finish(send)
        except OSError as exc:
            _say(f"the database writer stopped ({exc.strerror or exc}); recording resumes from the journal")
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
            _say(f"the journal {self.journal_path.name} is damaged ({exc}); what follows is not recorded")
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


def _ensure_run(
    db: Any, start: dict[str, Any], journal_path: Path, redactor: Redactor | None = None
) -> tuple[int, dict[str, Any] | None, bool]:
    """The journal's run row (created from its START record if no recorder made it yet), its
    committed journal state, and whether it existed. ``redactor``: masks the agent's command
    line and directory (run --redact)."""
    name = journal_path.name
    conn = db.conn
    row = conn.execute("select id, journal_state from runs where journal = ?", [name]).fetchone()
    if row is not None:
        return row[0], (json.loads(row[1]) if row[1] else None), True
    run = {
        "started_ns": start["started_ns"],
        "status": "running",
        "argv": json.dumps([redactor.text(w) for w in start["argv"]] if redactor else start["argv"]),
        "cwd": redactor.text(start["cwd"]) if redactor and start.get("cwd") else start.get("cwd"),
        "proxy_pid": start.get("proxy_pid"),
        "agent_pid": start.get("agent_pid"),
        "interactive": int(bool(start.get("interactive"))),
        "options": json.dumps(start.get("options", {})),
        "fault_spec": start.get("fault_spec"),
        "seed": start.get("seed"),
        "journal": name,
    }
    with conn:
        conn.execute("BEGIN IMMEDIATE")
        run_id = db["runs"].insert(_storable(run)).last_pk
    return run_id, None, False


def _replay(indexer: Indexer, conn: sqlite3.Connection, run_id: int) -> list[dict[str, Any]]:
    """Rebuild the tracker's state from the frames already committed (a resume continues a run
    mid-conversation: pairing and turns need what came before); the Changes this produces were
    applied the first time, and only teach the writer which rows the tracker's keys name."""
    cursor = conn.execute(
        "select seq, ts_ns, dir, raw, raw_bytes, size, terminated, cut, forwarded from frames "
        "where run_id = ? and dir != 'stderr' order by seq",
        [run_id],
    )
    tracker = indexer.tracker
    for seq, ts_ns, direction, raw, raw_bytes, size, terminated, cut, forwarded in cursor:
        data = raw_bytes if raw is None else raw.encode()
        line = Line(data or b"", size or 0, bool(terminated), bool(cut))
        rec = make_record(run_id, seq, ts_ns, DIRECTIONS.index(direction), line)
        rec.forwarded = forwarded if forwarded is not None else 1
        try:
            tracker.observe(rec)
        except Exception:
            pass
    return [_change_as_dict(c) for c in tracker.drain()]


def recover_journal(db_path: Path, journal_path: Path, fd: int) -> None:
    """Record a dead run's journal into ``db_path`` (``fd`` is exclusively locked): the run
    ends ``crashed`` with what was recovered, and the journal goes."""
    try:
        session = Session(journal_path, fd, db_path=db_path)
    except jr.JournalDamaged:
        # No START record: the proxy died before it said what it ran; there is no run to record.
        try:
            os.unlink(journal_path)
        except OSError:
            pass
        return
    session.recover()


# -- the process ---------------------------------------------------------------------------


_M_TRIM_THRESHOLD = -1  # glibc's mallopt() parameters
_M_MMAP_THRESHOLD = -3
KEEP_FREED_BYTES = 64 * 1024 * 1024


def _reuse_freed_memory() -> None:
    """Keep big buffers' memory for the next ones instead of handing it back to the kernel.

    A big frame passes through a few buffers of its size here (the line, its text, the
    batch to the writer, and in the writer the decoded batch). By default glibc maps each one
    afresh and unmaps it when freed, and the kernel clears every page again at first touch:
    that was a third of the recorder's time on 1 MiB frames (profiled). From the heap, kept
    up to KEEP_FREED_BYTES, freed pages are reused as they are. Elsewhere than glibc: nothing."""
    try:
        import ctypes

        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt(_M_MMAP_THRESHOLD, 32 * 1024 * 1024)  # glibc's largest; bigger frames still get a mapping
    mallopt(_M_TRIM_THRESHOLD, KEEP_FREED_BYTES)


def main(argv: list[str]) -> int:
    """``python -m acp_proxy.record.recorder --journal PATH [--wake-fd N] | --recover PATH``."""
    _reuse_freed_memory()
    # A terminal's ^C or a hang-up reaches the whole foreground group; the relay decides what
    # they mean. The recorder stops only when its journal is recorded.
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    # Frames and rows are short-lived and acyclic: a full collection every few hundred
    # allocations cost ~12% of the decoder's time (profiled). Collect far less often.
    gc.freeze()
    gc.set_threshold(100_000, 50, 100)
    args = dict(zip(argv[::2], argv[1::2], strict=False))
    recovering = "--recover" in args
    path = Path(args.get("--recover") or args["--journal"])
    wake_fd = int(args["--wake-fd"]) if "--wake-fd" in args else None
    if wake_fd is not None:
        os.set_blocking(wake_fd, False)
        os.set_inheritable(wake_fd, False)
    try:
        fd = jr.open_journal(path)
    except OSError:
        return 0  # recorded and removed already
    # Live: share the lock with the relay. A recovery the proxy asked for after its recorder
    # died: wait until that recorder's writer is gone too.
    if not jr.lock(fd, exclusive=recovering, timeout=LOCK_PATIENCE if recovering else 0.0):
        return RESUMED_EXIT
    if not jr.names_file(path, fd):
        return RESUMED_EXIT  # recorded (and removed) by another process before the lock was ours
    try:
        session = Session(path, fd, wake_fd=wake_fd)
    except (store.StoreError, sqlite3.Error) as exc:
        _say(f"cannot record: {exc} (the journal {path.name} is kept for the next acp-proxy command)")
        return 2
    except jr.JournalDamaged as exc:
        _say(f"cannot record: the journal {path.name} is damaged ({exc})")
        return 2
    except OSError:
        return 2
    if recovering:
        session.recover()
        return 0
    # Runs whose processes all died (kill -9, a power cut) are recorded by the next run too, not
    # only by the next query command: an editor may start many runs before anyone reads them.
    # Here, at idle priority, the relay waits for none of it.
    store.recover_dead_runs(session.db_path)
    return session.follow()


if __name__ == "__main__":
    # The proxy waits for this exit: tearing the interpreter down (modules, caches), at the
    # lowest priority, kept it waiting up to 50 ms longer. Everything said went out by os.write.
    os._exit(main(sys.argv[1:]))
