"""Journal records in, row batches out: framing, decoding and protocol tracking of one run.

Owns: the ``Indexer`` (each journal record's place, the lines it completes, the frames rows and
tracker Changes they make, the ``controls`` rows of a META record's ``control`` list — linked to
the held row a release or drop decided and, once its LINE comes, to the frame the action wrote —
and the journal state a resume needs), the batch shape sent to the
writer (``_SparseInserts``: one INSERT per row shape, long lines beside the batch), and rebuilding
the tracker from frames already committed (``replay_committed``).

Must not know: SQLite connections, processes, pipes, the writer's transactions. What it makes
is plain data (messages) that ``writer.RunWriter`` applies.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable
from operator import itemgetter
from typing import Any

import msgspec

from acp_proxy.protocol import wire
from acp_proxy.protocol.frames import COLUMNS, FrameRecord
from acp_proxy.protocol.framing import Line, LineFramer
from acp_proxy.protocol.redact import FRAME_FIELDS, Redactor
from acp_proxy.record import journal as jr
from acp_proxy.record.journal import A2C, C2A, CONTROL_KINDS, DIRECTIONS, STDERR, Record

FLUSH_ROWS = 4000
FLUSH_BYTES = 1024 * 1024  # a batch holds a few big frames at most: memory stays bounded
FLUSH_SECONDS = 0.05
LINE_BESIDE_BYTES = 64 * 1024  # a line this long goes to the writer beside its batch (see _SparseInserts)
CONTROL = 3  # the index slot of records that belong to no direction (START, META)

_INSERT_FAULT = "INSERT INTO faults (run_id, seq, ts_ns, rule, action, detail) VALUES (?, ?, ?, ?, ?, ?)"
# A control action (``acp-proxy ctl``, journaled in a META record's ``control``). The frame a
# release or drop decided is the held row journaled with the hold's time; when this process did
# not index that row itself (a resume after a crash), the row already committed is looked up.
_INSERT_CONTROL = """INSERT INTO controls (run_id, number, ts_ns, action, argument, hold, held_ns, result_seq, seq)
    VALUES (?, ?, ?, ?, ?, ?, ?, ?, coalesce(?, (select seq from frames where run_id = ? and ts_ns = ?
        and forwarded = 0 and batch_seq is null order by seq limit 1)))"""
_CONTROL_WROTE = "UPDATE controls SET result_seq = ? WHERE run_id = ? AND number = ?"
_RAW = COLUMNS.index("raw")


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
        rec.transport = meta.get("transport")
        rec.connection = meta.get("connection")
        rec.stream = meta.get("stream")
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
        self.control_rows: list[tuple] = []
        self.control_results: list[tuple] = []  # (seq, run_id, number): the frame an action wrote
        self.hold_seqs: dict[int, int] = {}  # hold number -> its held row's seq, this process's
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
        hold, control = meta.get("hold"), meta.get("control")
        if isinstance(hold, int):
            self.hold_seqs[hold] = seq
        if isinstance(control, int):
            self.control_results.append((seq, self.run_id, control))

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
        controls = values.pop("control", None)
        if isinstance(controls, list):
            self._controls(controls)
        if values.pop("final", False):
            self.final = True
        values.pop("status", None)  # the run's status is set when its recording is complete
        by_direction = values.pop("lost_lines", None)
        if isinstance(by_direction, list) and len(by_direction) == len(self.lost_by_dir):
            for d, lost in enumerate(by_direction):
                self.lost_by_dir[d] += lost
        self.run_values.update(values)

    def _controls(self, rows: list[Any]) -> None:
        for row in rows:
            if not isinstance(row, dict) or not isinstance(row.get("number"), int):
                continue
            # An import gives seq and result_seq; the relay names a held frame by its hold.
            hold, seq = row.get("hold"), row.get("seq")
            argument = row.get("argument")
            if self.redactor is not None and isinstance(argument, str):
                # run --redact: a rule or filter is stored as typed otherwise (a frame's JSON too).
                argument = self.redactor.raw(argument)
            if not isinstance(seq, int):
                seq = self.hold_seqs.get(hold) if isinstance(hold, int) else None
            self.control_rows.append(
                (
                    self.run_id,
                    row["number"],
                    row.get("ts_ns") or 0,
                    str(row.get("action")),
                    argument,
                    hold,
                    row.get("held_ns"),
                    row.get("result_seq"),
                    seq,
                    self.run_id,
                    row.get("held_ts"),
                )
            )

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
            or bool(self.control_rows)  # a person's action: shown as soon as it is made
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
        if self.control_rows:
            batches.append((_INSERT_CONTROL, self.control_rows))
            self.control_rows = []
        if self.control_results:
            batches.append((_CONTROL_WROTE, self.control_results))
            self.control_results = []
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


def replay_committed(indexer: Indexer, conn: sqlite3.Connection, run_id: int) -> list[dict[str, Any]]:
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


class NoTracker:
    """Stands in for the tracker where only the frames an indexer makes (and the masking it
    applies) are wanted: a live reader's tail, a resumed recorder's re-reading for secrets."""

    def observe(self, rec: FrameRecord) -> None:
        return None

    def drain(self) -> list[Any]:
        return []

    def finish(self, ts_ns: int) -> None:
        return None


class _Discard:
    """Stands in for the insert batches: the frames are dropped (their rows are committed)."""

    count = 0

    def add(self, rec: FrameRecord) -> None:
        return None


def relearn_secrets(redactor: Redactor, fd: int, run_id: int, max_keep: int | None, upto: int) -> bool:
    """run --redact, resumed mid-run: ``redactor`` learns again every value it had masked in
    the journal's records before offset ``upto`` (Rule 2 of ``protocol.redact``: a secret named
    once is masked wherever it shows up later). The committed rows cannot teach it, they hold
    ``[redacted]``; the journal from its start can, read as the first recorder read it (this is
    how ``read.live`` follows a --redact run too). The writer keeps a --redact run's journal whole
    for this (see ``RunWriter``). False when the journal could not be read to ``upto``."""
    scratch = Indexer(run_id, max_keep, None, redactor=redactor)
    scratch.tracker = NoTracker()  # type: ignore[assignment]
    scratch.pending = _Discard()  # type: ignore[assignment]
    try:
        for rec in jr.JournalReader(fd).records():
            if rec.offset >= upto:
                return True
            scratch.feed(rec)
    except (OSError, jr.JournalDamaged, ValueError):
        return False
    return True
