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
for a match, false under a negation — which can only widen the selection.

Must not know: click, rich, HTTP, MCP; how a door renders a frame. Never writes.
"""

from __future__ import annotations

import itertools
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
        self, db: Any, expr: filter_tree.Expr, redactor: Redactor | None = None, ref: Ref | None = None
    ) -> None:
        self.db = db
        self.expr = expr
        self.redactor = redactor if redactor is not None and redactor.enabled else None
        self.scope = scope_clause(db, ref)
        # Masking first: a filter that reads what masking changes is matched in Python.
        self.in_python = self.redactor is not None and reads_masked(expr)
        self.needs_findings = self.in_python and _has_findings(expr)
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

    def total(self) -> int:
        """How many frames the whole selection holds."""
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

    def window(self, after: Cursor | None = None, limit: int = 50, offset: int = 0) -> FramePage:
        """``page``, with ``last`` filled in and ``total`` counting the frames after ``after``
        (all of them without it). In one pass over the frames when the filter is matched in
        Python (each pass masks every frame of the runs: three would cost three times)."""
        if not self.in_python:
            taken = list(self.rows(after, limit + 1, offset))
            more = len(taken) > limit
            taken = taken[:limit]
            where, args = self._where(after)
            total = int(self.db.execute(f"select count(*) from frames where {where}", args).fetchone()[0])
            cursor = (taken[-1]["run_id"], taken[-1]["seq"]) if taken else after
            last = self.last() if after is None else None
            return FramePage(taken, total, more, cursor, self.redactor is not None, last)
        shown: list[dict[str, Any]] = []
        count, final = 0, None
        for row in self.rows(after):
            if offset <= count < offset + limit:
                shown.append(row)
            count += 1
            final = (row["run_id"], row["seq"])
        place = (shown[-1]["run_id"], shown[-1]["seq"]) if shown else after
        return FramePage(shown, count, count > offset + limit, place, masked=True, last=final)

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

_AFTER = "(frames.run_id > ? or (frames.run_id = ? and frames.seq > ?))"
_MARK = """(select coalesce(marks.note, '') from marks
            where marks.run_id = frames.run_id and marks.seq = frames.seq) as mark"""
"""A person's mark on the frame (``acp-proxy mark``): its comment, "" for none; NULL: unmarked."""


def _unmarked(row: dict[str, Any]) -> None:
    # An unmarked frame has no ``mark`` key at all: a frame's shape stays what it was.
    if row.get("mark") is None:
        row.pop("mark", None)


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
        self._lock = threading.Lock()

    def upto(self, db: Any, run_id: int, seq: int) -> Redactor:
        """The redactor, having read every frame of ``run_id`` before ``seq``."""
        with self._lock:
            done = self._upto.get(run_id, 0)
            if seq - 1 > done and self.redactor.enabled:
                earlier = "select raw from frames where run_id = ? and seq > ? and seq < ? and raw is not null"
                cursor = db.execute(earlier, [run_id, done, seq])
                while batch := [raw for (raw,) in cursor.fetchmany(_BATCH)]:
                    # Most frames teach nothing: a batch in which no rule, name or shape can
                    # match anywhere (told from the batch's text joined, by the same substring
                    # tests that tell one line) is skipped whole; a hit reads it line by line.
                    if self.redactor.plainly_clean("\0".join(batch)):
                        continue
                    for raw in batch:
                        self.redactor.raw(raw)
                self._upto[run_id] = seq - 1
            return self.redactor

    def masked(self, db: Any, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``rows`` (unmasked frames, in relay order) masked, each after all that came before."""
        out = []
        for row in rows:
            redactor = self.upto(db, row["run_id"], row["seq"])
            with self._lock:
                out.append(redactor.frame_row(row) if redactor.enabled else row)
                if self._upto.get(row["run_id"], 0) < row["seq"]:
                    self._upto[row["run_id"]] = row["seq"]
        return out


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
