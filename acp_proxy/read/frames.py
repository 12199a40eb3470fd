"""Frame selections: the frames a filter picks, masked first, a page at a time.

Owns: selecting frames by the filter language within a scope (every run, one run, or the
frames that concern one session), in relay order, keyset-paged by ``(run_id, seq)`` or by
offset (``window``: a page, its count and the last place in one pass; ``position``: a frame's
index), with a total; masking every frame with the one ``Redactor`` *before* the filter looks
at it; and ``Primed``, a redactor kept between requests that has read a run's frames in relay
order, so that a page deep in a long run is masked as in relay order without reading the run
again on each request. A ``text:``, ``note:`` or ``error:TEXT`` term therefore matches the
masked frame, the one the caller is shown: a filter cannot be used as an oracle that says
whether a secret starts with ``ghp_A`` (a match on the unmasked frame, followed by the masked
frame, was one).

How: with masking off, or a filter that reads no maskable column, the SQL alone selects. A
filter that reads one (``text:``, ``note:``, ``error:TEXT``) is matched in Python
(``Expr.matches``, which agrees with ``Expr.to_sql`` term by term) on masked frames. Every frame
of the runs is masked in relay order, so the redactor has learnt each secret (a value masked by
name in ``initialize``) before it meets a later frame that repeats it, whatever the cursor; the
SQL narrows which of them are matched by relaxing the maskable terms — true where they count
for a match, false under a negation — which can only widen the selection. With a ``Primed``
redactor (the inspector's), the quick path: Primed has read each run once and knows which frames
masking changed; every other frame is matched by SQL on what was recorded (the same text), and
only those are masked and matched in Python (a page of a million frames: ~1 s, not 22).

A page nearer a selection's end than its start is read backwards from its last frame (SQLite
steps over an OFFSET's rows one by one). ``until`` bounds a live run at its last commit
(``read.live`` gives what follows, ``extend`` masks and matches it).

Must not know: click, rich, HTTP, MCP; how a door renders a frame. Never writes.
"""

from __future__ import annotations

import heapq
import itertools
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from acp_proxy.protocol import filter_tree, filters
from acp_proxy.protocol.redact import FRAME_FIELDS, Redactor
from acp_proxy.read import queries
from acp_proxy.read.queries import Ref

Cursor = tuple[int, int]
"""A frame's place: (run_id, seq). A page after a cursor starts with the next frame."""


@dataclass(frozen=True)
class FramePage:
    """One page of a selection: its frames (masked when masking is on), how many frames the
    whole selection holds, whether more follow, and the cursor of the last frame shown."""

    frames: list[dict[str, Any]]
    total: int
    more: bool
    cursor: Cursor | None
    masked: bool = False
    last: Cursor | None = None
    """The place of the selection's last frame (``window`` fills it in)."""


def parse_cursor(text: str | None) -> Cursor | None:
    """``RUN:SEQ`` -> (run, seq); None for none or nonsense."""
    if not text:
        return None
    run, _, seq = text.partition(":")
    if run.isascii() and seq.isascii() and run.isdigit() and seq.isdigit() and len(run) < 19 and len(seq) < 19:
        return int(run), int(seq)
    return None


def parse(db: Any, text: str | None) -> filter_tree.Expr:
    """A filter, with ``run:last`` bound to the newest run of ``db`` (so that both the SQL and
    the Python matcher read it the same way)."""
    last = db.execute("select max(id) from runs").fetchone()[0]
    return filters.parse(text or "", last_run=last)


def scope_clause(db: Any, ref: Ref | None) -> tuple[str, list[Any]]:
    """SQL over ``frames`` (unaliased, as the filter language's SQL is) for every frame
    (``None``), the frames of a run, or those that concern a session (as ``queries.frames_of``
    selects them, stderr included)."""
    if ref is None:
        return "1", []
    if not ref.is_session:
        return "frames.run_id = ?", [ref.run_id]
    run_ids = queries.run_ids_of(db, ref)
    marks = ",".join("?" * len(run_ids)) or "null"
    # A response carries no sessionId of its own: it belongs to the session of its request.
    return (
        f"""frames.run_id in ({marks}) and (frames.session_id = ?
            or exists (select 1 from frames q where q.run_id = frames.run_id and q.seq = frames.request_seq
                       and q.session_id = ?))""",
        [*run_ids, ref.session_id, ref.session_id],
    )


def reads_masked(expr: filter_tree.Expr) -> bool:
    """Whether any term of ``expr`` reads a column that masking can change."""
    if isinstance(expr, (filter_tree.And, filter_tree.Or)):
        return any(reads_masked(item) for item in expr.items)
    if isinstance(expr, filter_tree.Not):
        return reads_masked(expr.item)
    return isinstance(expr, filter_tree.Term) and expr.column in FRAME_FIELDS


def relaxed(expr: filter_tree.Expr, positive: bool = True) -> filter_tree.Expr:
    """``expr`` with every term that reads a maskable column replaced by a constant that can
    only widen the selection: true where the term counts positively, false under a negation."""
    if isinstance(expr, filter_tree.And):
        return filter_tree.And([relaxed(item, positive) for item in expr.items])
    if isinstance(expr, filter_tree.Or):
        return filter_tree.Or([relaxed(item, positive) for item in expr.items])
    if isinstance(expr, filter_tree.Not):
        return filter_tree.Not(relaxed(expr.item, not positive))
    if isinstance(expr, filter_tree.Term) and expr.column in FRAME_FIELDS:
        return filter_tree.Const(positive)
    return expr


class Selection:
    """The frames ``expr`` selects within ``ref`` (None: every run), masked by ``redactor``
    (None, or a disabled one: as recorded)."""

    def __init__(
        self,
        db: Any,
        expr: filter_tree.Expr,
        redactor: Redactor | None = None,
        ref: Ref | None = None,
        *,
        until: Cursor | None = None,
        primed: Primed | None = None,
    ) -> None:
        self.db = db
        self.expr = expr
        self.redactor = redactor if redactor is not None and redactor.enabled else None
        self.scope = scope_clause(db, ref)
        self.until = None if until is None else [until[0], until[0], until[1]]
        if until is not None:
            # A live run's last commit: what follows comes from its journal (``read.live``), so a
            # commit landing meanwhile is neither counted twice nor skipped.
            scope, params = self.scope
            self.scope = (f"({scope}) and {_UNTIL}", [*params, until[0], until[0], until[1]])
        # Masking first: a filter that reads what masking changes is matched in Python.
        self.in_python = self.redactor is not None and reads_masked(expr)
        self.needs_findings = self.in_python and _has_findings(expr)
        # The quick path of a filter on masked text (``_places``): with a primed redactor of the
        # same rules, which knows which frames masking changes.
        self.primed = primed if self.in_python and primed is not None and primed.redactor.enabled else None
        self.ref = ref
        if ref is None:
            self.runs: tuple[str, list[Any]] = ("1", [])
        elif ref.is_session:
            run_ids = queries.run_ids_of(db, ref)
            self.runs = (f"frames.run_id in ({','.join('?' * len(run_ids)) or 'null'})", run_ids)
        else:
            self.runs = ("frames.run_id = ?", [ref.run_id])

    def _where(self, after: Cursor | None) -> tuple[str, list[Any]]:
        scope, params = self.scope
        sql, more = self.expr.to_sql()
        clauses, args = [f"({scope})", f"({sql})"], [*params, *more]
        if after is not None:
            clauses.append(_AFTER)
            args += [after[0], after[0], after[1]]
        return " and ".join(clauses), args

    def rows(self, after: Cursor | None = None, limit: int | None = None, offset: int = 0) -> Iterator[dict[str, Any]]:
        """The selected frames after ``after``, in relay order, masked; at most ``limit``, the
        first ``offset`` of them skipped (by SQLite when the SQL alone selects)."""
        if limit == 0:
            return
        if self.in_python:
            end = None if limit is None else offset + limit
            yield from itertools.islice(self._matched(after, end), offset, None)
            return
        where, args = self._where(after)
        sql = f"select frames.*, {_MARK} from frames where {where} order by frames.run_id, frames.seq"
        if limit is not None or offset:
            sql += " limit ? offset ?"
            args = [*args, -1 if limit is None else limit, offset]
        for row in queries.iter_rows(self.db, sql, args):
            _unmarked(row)
            yield self.redactor.frame_row(row) if self.redactor is not None else row

    def _matched(self, after: Cursor | None, limit: int | None) -> Iterator[dict[str, Any]]:
        """The Python path: every frame of the runs in relay order, each masked — so that the
        redactor has seen, and learnt, every secret of the frames before the one it matches (a
        value masked by name in ``initialize`` is masked where a later message repeats it) — and
        the filter matched on the masked frames in scope after ``after`` that the relaxed SQL
        admits."""
        assert self.redactor is not None
        scope, scope_args = self.scope
        candidate, candidate_args = relaxed(self.expr).to_sql()
        later, later_args = (_AFTER, [after[0], after[0], after[1]]) if after is not None else ("1", [])
        runs, runs_args = self.runs
        if self.until is not None:
            runs, runs_args = f"({runs}) and {_UNTIL}", [*runs_args, *self.until]
        sql = f"""select frames.*, {_MARK}, coalesce(({scope}) and ({candidate}) and {later}, 0) as _wanted
                  from frames where {runs} order by frames.run_id, frames.seq"""
        shown = 0
        for row in queries.iter_rows(self.db, sql, [*scope_args, *candidate_args, *later_args, *runs_args]):
            wanted = row.pop("_wanted")
            _unmarked(row)
            masked = self.redactor.frame_row(row)
            if not wanted or not self.expr.matches(self._record(masked)):
                continue
            yield masked
            shown += 1
            if limit is not None and shown >= limit:
                return

    def _run_ids(self) -> list[int]:
        if self.ref is None:
            return [run_id for (run_id,) in self.db.execute("select id from runs order by id")]
        return queries.run_ids_of(self.db, self.ref)

    def _places(self, after: Cursor | None) -> list[Cursor]:
        """The quick path of a filter on masked text: the place of every frame it selects after
        ``after``. A frame whose masking changes nothing (its line read clean by the primed
        redactor in relay order, no other maskable column set) is matched by SQL on what was
        recorded — the same text; only the others are masked and matched in Python. It costs
        one SQL pass over the scope (and, once per server, the primed redactor's read of each
        run), not masking every frame on every request (22 s a page on a million frames)."""
        primed = self.primed
        assert primed is not None
        dirty: list[int] = []
        for run_id in self._run_ids():
            if self.until is not None and run_id == self.until[0]:
                high = self.until[2]
            else:
                found = self.db.execute("select max(seq) from frames where run_id = ?", [run_id]).fetchone()
                high = found[0] if found and found[0] is not None else 0
            primed.upto(self.db, run_id, high + 1)
            dirty += [(run_id << 32) + seq for seq in primed.dirty(run_id)]
        scope, scope_args = self.scope
        exact, exact_args = _on_raw(self.expr).to_sql()
        loose, loose_args = relaxed(self.expr).to_sql()
        later, later_args = (_AFTER, [after[0], after[0], after[1]]) if after is not None else ("1", [])
        clean = """(frames.raw is not null and frames.raw_bytes is null and frames.error_message is null
                    and frames.note is null and frames.decode_error is null
                    and ((frames.run_id << 32) + frames.seq) not in (select value from dirty))"""
        # Selected: what the filter matches on a clean frame, or any unclean frame the relaxed
        # filter admits (the exact filter implies the relaxed one: (clean and exact) or (not
        # clean and loose) is loose and (exact or not clean)).
        sql = f"""with dirty(value) as (select value from json_each(?))
                  select frames.run_id, frames.seq, {clean} from frames
                  where ({scope}) and {later} and ({loose}) and (({exact}) or not {clean})
                  order by frames.run_id, frames.seq"""
        args = [json.dumps(dirty), *scope_args, *later_args, *loose_args, *exact_args]
        places: list[Cursor] = []
        unsure: list[int] = []  # indexes in places of frames to mask and match in Python
        for run_id, seq, is_clean in self.db.execute(sql, args):
            if not is_clean:
                unsure.append(len(places))
            places.append((run_id, seq))
        if unsure:
            rejected = set()
            for index, row in zip(unsure, self._fetch([places[i] for i in unsure]), strict=True):
                with primed._lock:
                    masked = primed.redactor.frame_row(row)
                if not self.expr.matches(self._record(masked)):
                    rejected.add(index)
            places = [place for i, place in enumerate(places) if i not in rejected]
        return places

    def _fetch(self, places: list[Cursor]) -> list[dict[str, Any]]:
        """The frames at ``places`` (unmasked), in that order."""
        found: dict[Cursor, dict[str, Any]] = {}
        for start in range(0, len(places), _BATCH):
            keys = [(run_id << 32) + seq for run_id, seq in places[start : start + _BATCH]]
            sql = f"""select frames.*, {_MARK} from frames
                      where ((frames.run_id << 32) + frames.seq) in (select value from json_each(?))"""
            for row in queries.iter_rows(self.db, sql, [json.dumps(keys)]):
                _unmarked(row)
                found[row["run_id"], row["seq"]] = row
        return [found[place] for place in places if place in found]

    def total(self) -> int:
        """How many frames the whole selection holds."""
        if self.primed is not None:
            return len(self._places(None))
        if not self.in_python:
            where, args = self._where(None)
            return int(self.db.execute(f"select count(*) from frames where {where}", args).fetchone()[0])
        return sum(1 for _ in self.rows())

    def last(self) -> Cursor | None:
        """The place of the selection's last frame."""
        if self.in_python:
            found = None
            for row in self.rows():
                found = (row["run_id"], row["seq"])
            return found
        where, args = self._where(None)
        row = self.db.execute(
            f"select run_id, seq from frames where {where} order by frames.run_id desc, frames.seq desc limit 1", args
        ).fetchone()
        return (row[0], row[1]) if row else None

    def page(self, after: Cursor | None = None, limit: int = 50, offset: int = 0) -> FramePage:
        """``limit`` frames after ``after`` (``offset`` more skipped), with the selection's total."""
        taken = list(self.rows(after, limit + 1, offset))
        more = len(taken) > limit
        taken = taken[:limit]
        cursor = (taken[-1]["run_id"], taken[-1]["seq"]) if taken else after
        return FramePage(taken, self.total(), more, cursor, masked=self.redactor is not None)

    def position(self, place: Cursor) -> int | None:
        """How many frames of the selection come before ``place`` (its index in the
        selection), None when the selection does not hold it."""
        if self.primed is not None:
            places = self._places(None)
            return places.index(place) if place in places else None
        if self.in_python:
            for index, row in enumerate(self.rows()):
                if (row["run_id"], row["seq"]) == place:
                    return index
            return None
        where, args = self._where(None)
        held = self.db.execute(
            f"select 1 from frames where {where} and frames.run_id = ? and frames.seq = ?", [*args, *place]
        ).fetchone()
        if held is None:
            return None
        before = "(frames.run_id < ? or (frames.run_id = ? and frames.seq < ?))"
        sql = f"select count(*) from frames where {where} and {before}"
        return int(self.db.execute(sql, [*args, place[0], place[0], place[1]]).fetchone()[0])

    def _from_end(self, after: Cursor | None, total: int, limit: int, offset: int) -> list[dict[str, Any]]:
        """The frames from ``offset`` (at most ``limit`` + 1), read backwards from the last."""
        stop = min(total, offset + limit + 1)
        if stop <= offset:
            return []
        where, args = self._where(after)
        sql = f"""select frames.*, {_MARK} from frames where {where}
                  order by frames.run_id desc, frames.seq desc limit ? offset ?"""
        found = queries.rows(self.db, sql, [*args, stop - offset, total - stop])
        found.reverse()
        for row in found:
            _unmarked(row)
        return [self.redactor.frame_row(row) for row in found] if self.redactor is not None else found

    def window(self, after: Cursor | None = None, limit: int = 50, offset: int = 0) -> FramePage:
        """``page``, with ``last`` filled in and ``total`` counting the frames after ``after``
        (all of them without it). In one pass over the frames when the filter is matched in
        Python (each pass masks every frame of the runs: three would cost three times)."""
        if not self.in_python:
            where, args = self._where(after)
            total = int(self.db.execute(f"select count(*) from frames where {where}", args).fetchone()[0])
            if offset > total // 2:
                # Nearer the end: keyset from the end (SQLite steps over an OFFSET's rows one by
                # one: the first jump to the end of a million frames took seconds).
                taken = self._from_end(after, total, limit, offset)
            else:
                taken = list(self.rows(after, limit + 1, offset))
            more = len(taken) > limit
            taken = taken[:limit]
            cursor = (taken[-1]["run_id"], taken[-1]["seq"]) if taken else after
            last = self.last() if after is None else None
            return FramePage(taken, total, more, cursor, self.redactor is not None, last)
        if self.primed is not None:
            places = self._places(after)
            picked = self.primed.masked(self.db, self._fetch(places[offset : offset + limit]))
            place = (picked[-1]["run_id"], picked[-1]["seq"]) if picked else after
            more = len(places) > offset + limit
            return FramePage(picked, len(places), more, place, True, places[-1] if places else None)
        shown: list[dict[str, Any]] = []
        count, final = 0, None
        for row in self.rows(after):
            if offset <= count < offset + limit:
                shown.append(row)
            count += 1
            final = (row["run_id"], row["seq"])
        place = (shown[-1]["run_id"], shown[-1]["seq"]) if shown else after
        return FramePage(shown, count, count > offset + limit, place, masked=True, last=final)

    def extend(self, rows: list[dict[str, Any]], primed: Primed | None = None) -> list[dict[str, Any]]:
        """Frames that follow every frame of the selection's runs (a live run's journal tail,
        ``read.live``, in relay order), masked and matched as the selection's own: by its
        redactor, which has read every earlier frame, when the filter reads masked text (call
        after a full pass: ``window``, ``total``); else by ``primed`` (every row, in order, so it
        learns from each), or by the redactor row by row as ``rows`` masks."""
        if self.in_python and self.primed is not None:
            masked = self.primed.masked(self.db, rows)
            return [row for row in masked if self.expr.matches(SimpleNamespace(**row, findings=[]))]
        if self.in_python:
            assert self.redactor is not None
            masked = [self.redactor.frame_row(row) for row in rows]
            return [row for row in masked if self.expr.matches(SimpleNamespace(**row, findings=[]))]
        if primed is not None and self.db is not None:
            masked = primed.masked(self.db, rows)
        elif self.redactor is not None:
            masked = [self.redactor.frame_row(row) for row in rows]
        else:
            masked = rows
        return [row for row in masked if self.expr.matches(SimpleNamespace(**row, findings=[]))]

    def _record(self, row: dict[str, Any]) -> Any:
        findings: list[tuple[str, str]] = []
        if self.needs_findings:
            findings = [
                (rule, severity)
                for rule, severity in self.db.execute(
                    "select rule, severity from findings where run_id = ? and seq = ?", [row["run_id"], row["seq"]]
                )
            ]
        return SimpleNamespace(**row, findings=findings)


_BATCH = 2000
_SCAN_ROWS = 5000  # frames a masking scan reads per query (Primed._scan)

_AFTER = "(frames.run_id > ? or (frames.run_id = ? and frames.seq > ?))"
_UNTIL = "(frames.run_id < ? or (frames.run_id = ? and frames.seq <= ?))"
_MARK = """(select coalesce(marks.note, '') from marks
            where marks.run_id = frames.run_id and marks.seq = frames.seq) as mark"""
"""A person's mark on the frame (``acp-proxy mark``): its comment, "" for none; NULL: unmarked."""


def _unmarked(row: dict[str, Any]) -> None:
    # An unmarked frame has no ``mark`` key at all: a frame's shape stays what it was.
    if row.get("mark") is None:
        row.pop("mark", None)


class _RawText(filter_tree.Term):
    """``text:`` on a frame whose line is valid UTF-8 (``raw`` set, ``raw_bytes`` NULL): ``LIKE``
    when the term folds case (SQLite's LIKE folds ASCII case only, as the term does), which
    SQLite runs without lowering a copy of every line (a million-frame scan: 0.7 s, not 1.7)."""

    __slots__ = ("fold", "needle")

    def __init__(self, term: filter_tree.Text) -> None:
        super().__init__("raw")
        self.needle = term.needle
        self.fold = term.fold

    def matches(self, record: Any) -> bool:
        raise NotImplementedError  # SQL only

    def _cond(self) -> tuple[str, list[Any]]:
        if self.fold:
            escaped = self.needle.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            return "raw LIKE ? ESCAPE '\\'", [f"%{escaped}%"]
        return "instr(raw, ?) > 0", [self.needle]

    def _text(self) -> str:
        return f"text:{self.needle}"


def _on_raw(expr: filter_tree.Expr) -> filter_tree.Expr:
    """``expr`` for frames with a valid UTF-8 line: its ``text:`` terms read ``raw`` alone."""
    if isinstance(expr, filter_tree.And):
        return filter_tree.And([_on_raw(item) for item in expr.items])
    if isinstance(expr, filter_tree.Or):
        return filter_tree.Or([_on_raw(item) for item in expr.items])
    if isinstance(expr, filter_tree.Not):
        return filter_tree.Not(_on_raw(expr.item))
    if isinstance(expr, filter_tree.Text):
        return _RawText(expr)
    return expr


def _has_findings(expr: filter_tree.Expr) -> bool:
    if isinstance(expr, (filter_tree.And, filter_tree.Or)):
        return any(_has_findings(item) for item in expr.items)
    if isinstance(expr, filter_tree.Not):
        return _has_findings(expr.item)
    return isinstance(expr, filter_tree.HasFinding)


class Primed:
    """One ``Redactor`` that has read a recording's frames in relay order up to a place, kept
    between requests: what an earlier frame taught it (a credential's value, masked by name) is
    masked where a later frame repeats it, whatever page is asked for, and each frame is read
    once (a million-frame run takes seconds to read; a live page asks again every second).

    Reading further ahead than a page needs only masks more, never less. Thread-safe: Datasette
    answers on several threads."""

    def __init__(self, redactor: Redactor) -> None:
        self.redactor = redactor
        self._upto: dict[int, int] = {}  # run id -> the last seq read
        # run id -> the frames read whose line masking changed (when read, in relay order): the
        # only ones a filter on masked text must mask to match (``Selection``'s quick path).
        self._dirty: dict[int, set[int]] = {}
        self._lock = threading.Lock()

    def upto(self, db: Any, run_id: int, seq: int) -> Redactor:
        """The redactor, having read every frame of ``run_id`` before ``seq``."""
        with self._lock:
            done = self._upto.get(run_id, 0)
            if seq - 1 > done and self.redactor.enabled:
                dirty = self._dirty.setdefault(run_id, set())
                for start in range(done + 1, seq, _SCAN_ROWS):
                    self._scan(db, run_id, start, min(seq, start + _SCAN_ROWS), dirty)
                self._upto[run_id] = seq - 1
            return self.redactor

    def _scan(self, db: Any, run_id: int, start: int, end: int, dirty: set[int]) -> None:
        """Read frames ``start``..``end - 1`` as ``redactor.raw`` would one by one, reading only
        the lines that can teach it something or that masking changes: the batch's lines cross
        into Python joined (by SQLite: a million lines as 200 strings), one RE2 scan of them
        (``Redactor.teaching_pattern``) finds the few worth reading, and those are read in relay
        order; a line that teaches a value makes the rest of the batch be scanned again for it.
        (The first jump to the end of a million-frame run read every line: 8.6 s.)"""
        joined = """select group_concat(raw, char(0)), group_concat(seq) from frames
                    where run_id = ? and seq >= ? and seq < ? and raw is not null"""
        text, seq_text = db.execute(joined, [run_id, start, end]).fetchone()
        if text is None:
            return
        redactor = self.redactor
        pattern = redactor.teaching_pattern()
        original = text.encode("utf-8", errors="surrogatepass")
        data = original.lower()  # as long as ``original``: a place in one is the place in the other
        found = _lines_found(pattern, data) if pattern is not None else None
        if found is not None and not found:
            return
        seqs = seq_text.split(",")
        if found is None or data.count(b"\0") + 1 != len(seqs):  # user rules, or a line holding NUL
            self._read_lines(db, run_id, start, end, dirty)
            return
        # SQLite joins the batch in the order it reads it: the lines are read in seq order.
        queue = [(int(seqs[i]), i, span) for i, span in found.items()]
        heapq.heapify(queue)
        read: set[int] = set()
        while queue:
            place, i, (begin, stop) = heapq.heappop(queue)
            if i in read:
                continue
            read.add(i)
            line = original[begin:stop].decode("utf-8", errors="surrogatepass")
            generation = redactor.generation
            if redactor.raw(line) != line:
                dirty.add(place)
            if redactor.generation == generation:
                continue
            # A value learnt here is masked in the lines after it: find them with a new pattern.
            pattern = redactor.teaching_pattern()
            if pattern is None:
                self._read_lines(db, run_id, place + 1, end, dirty)
                return
            for j, span in _lines_found(pattern, data).items():
                if int(seqs[j]) > place and j not in read:
                    heapq.heappush(queue, (int(seqs[j]), j, span))

    def _read_lines(self, db: Any, run_id: int, start: int, end: int, dirty: set[int]) -> None:
        """Frames ``start``..``end - 1`` read line by line, in relay order."""
        lines = """select seq, raw from frames where run_id = ? and seq >= ? and seq < ?
                   and raw is not null order by seq"""
        for place, raw in db.execute(lines, [run_id, start, end]):
            if self.redactor.raw(raw) != raw:
                dirty.add(place)

    def read_to(self, run_id: int) -> int:
        """The last seq of ``run_id`` this redactor has read (0: none)."""
        with self._lock:
            return self._upto.get(run_id, 0)

    def masked(self, db: Any, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``rows`` (unmasked frames, in relay order) masked, each after all that came before."""
        out = []
        for row in rows:
            redactor = self.upto(db, row["run_id"], row["seq"])
            with self._lock:
                masked = redactor.frame_row(row) if redactor.enabled else row
                out.append(masked)
                if self._upto.get(row["run_id"], 0) < row["seq"]:
                    self._upto[row["run_id"]] = row["seq"]
                    if masked.get("raw") != row.get("raw"):
                        self._dirty.setdefault(row["run_id"], set()).add(row["seq"])
        return out

    def learn(self, db: Any, run_id: int, lines: list[tuple[int, str | None]]) -> None:
        """Read ``lines`` — (seq, raw) of frames of ``run_id`` that follow what is recorded, in
        relay order (a live run's journal tail) — as ``upto`` reads recorded ones: a batch no rule
        can match anywhere at once, the others line by line."""
        if not lines or not self.redactor.enabled:
            return
        self.upto(db, run_id, lines[0][0])
        with self._lock:
            done = self._upto.get(run_id, 0)
            fresh = [(seq, raw) for seq, raw in lines if seq > done and raw is not None]
            dirty = self._dirty.setdefault(run_id, set())
            for start in range(0, len(fresh), _BATCH):
                batch = fresh[start : start + _BATCH]
                if self.redactor.plainly_clean("\0".join(raw for _, raw in batch)):
                    continue
                for seq, raw in batch:
                    if self.redactor.raw(raw) != raw:
                        dirty.add(seq)
            self._upto[run_id] = max(done, lines[-1][0])

    def dirty(self, run_id: int) -> list[int]:
        """The frames of ``run_id`` read so far whose line masking changed."""
        with self._lock:
            return sorted(self._dirty.get(run_id, ()))


def _lines_found(pattern: Any, data: bytes) -> dict[int, tuple[int, int]]:
    """The lines of ``data`` (joined by NUL) ``pattern`` finds something in: index -> (start, end)."""
    found: dict[int, tuple[int, int]] = {}
    index = counted = 0
    line_end = -1
    for match in pattern.finditer(data):
        at = match.start()
        if at < line_end:
            continue  # in a line found already
        index += data.count(b"\0", counted, at)
        counted = at
        begin = data.rfind(b"\0", 0, at) + 1
        line_end = data.find(b"\0", at)
        if line_end < 0:
            line_end = len(data)
        found[index] = (begin, line_end)
    return found


def frame(db: Any, run_id: int, seq: int, redactor: Redactor | None = None) -> dict[str, Any] | None:
    """One frame by its place, masked (None when there is no such frame). An earlier frame can
    name a secret (a credential header, a path rule's value) that this one repeats in free text:
    the redactor reads the run's frames up to here first, so it has learnt them."""
    found = queries.rows(db, f"select frames.*, {_MARK} from frames where run_id = ? and seq = ?", [run_id, seq])
    if not found:
        return None
    row = found[0]
    _unmarked(row)
    if redactor is None or not redactor.enabled:
        return row
    # Every rule can learn a value (a credential's, by its name), not only the user's path rules.
    earlier = "select raw from frames where run_id = ? and seq < ? and raw is not null"
    for (raw,) in db.execute(earlier, [run_id, seq]):
        redactor.raw(raw)
    return redactor.frame_row(row)


def prime(db: Any, redactor: Redactor | None, run_ids: list[int] | None) -> Redactor | None:
    """``redactor`` (None when masking is off) after it has read every frame of ``run_ids``
    (None: every run) in relay order, so that it has learnt each secret it masks by name."""
    if redactor is None or not redactor.enabled:
        return None
    if run_ids is None:
        found = db.execute("select raw from frames where raw is not null order by run_id, seq")
    else:
        marks = ",".join("?" * len(run_ids)) or "null"
        found = db.execute(
            f"select raw from frames where run_id in ({marks}) and raw is not null order by run_id, seq", run_ids
        )
    for (raw,) in found:
        redactor.raw(raw)
    return redactor
