"""Where a run's control socket is, and what its controller did (``acp-proxy ctl``).

Owns: ``control_target`` (a REF resolved to a run, the socket its proxy named in the run's
options, and whether the run is over); reading the ``controls`` table back (``control_rows``,
each with ``kind = 'control'``) and placing those rows among a selection's frames by time,
with each held frame's fate (``with_controls``; on a page of frames: ``page_controls``,
``on_page``), for every door that lists frames; the one masking of a row's argument
(``masked``: rule and filter text is stored as typed, so a door shows it through its redactor,
before a filter reads it); a run's actions for the inspector (``of_run``); following new rows
of live runs (``ControlFollower``, for ``tail``). What a row means is ``protocol.controls``'.
Must not know: sockets, the control wire, the relay.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from acp_proxy.errors import UsageError
from acp_proxy.protocol import controls as pc
from acp_proxy.protocol.redact import Redactor
from acp_proxy.read import queries
from acp_proxy.store.database import ReadDb


@dataclass(frozen=True)
class ControlTarget:
    run_id: int
    socket: str
    status: str = "running"


def control_target(db: ReadDb, ref: str) -> ControlTarget:
    """The run REF names (a run id or ``last``; a session names its newest run), its socket and
    its status (a run not ``running`` cannot be controlled); ``UsageError`` (one line) when it
    was never controllable."""
    resolved = queries.resolve(db, ref)
    run_ids = queries.run_ids_of(db, resolved)
    if not run_ids:
        raise UsageError(f"{resolved.describe()} has no runs")
    run_id = max(run_ids)
    row = db.execute("select options, status from runs where id = ?", [run_id]).fetchone()
    try:
        options = json.loads(row[0]) if row and row[0] else {}
    except ValueError:
        options = {}
    path = options.get("control") if isinstance(options, dict) else None
    if not isinstance(path, str):
        raise UsageError(f"run {run_id} was not started with --control: it has no control socket")
    return ControlTarget(run_id, path, str(row[1]))


HELD_NOTE = pc.HELD_NOTE


def held_seqs(db: ReadDb, run_id: int, times: list[int]) -> dict[int, int]:
    """The ``frames`` seq of each held row recorded so far, by the time it was journaled with
    (the proxy's key for a held frame: ``faults.live.Held.ts_ns``)."""
    if not times:
        return {}
    marks = ",".join("?" * len(times))
    rows = db.execute(
        f"select ts_ns, seq from frames where run_id = ? and forwarded = 0 and ts_ns in ({marks})"
        " and note like ? and batch_seq is null",
        [run_id, *times, HELD_NOTE + "%"],
    ).fetchall()
    return {ts: seq for ts, seq in rows}


@dataclass(frozen=True)
class RecordedRequest:
    seq: int
    dir: str
    raw: str


def recorded_request(db: ReadDb, run_id: int, seq: int) -> RecordedRequest:
    """Frame ``seq`` of the run, when it is a request that can be sent again; ``UsageError``."""
    row = db.execute("select dir, kind, method, raw from frames where run_id = ? and seq = ?", [run_id, seq]).fetchone()
    if row is None:
        raise UsageError(f"run {run_id} has no frame {seq} (yet)")
    direction, kind, _method, raw = row
    if kind != "request" or direction not in ("c2a", "a2c") or not isinstance(raw, str):
        what = f"a {kind}" if kind else "not a JSON-RPC message"
        raise UsageError(f"frame {run_id}:{seq} is {what}, not a request: only requests can be resent")
    return RecordedRequest(seq, direction, raw)


# -- control actions, read back (schema 8: the ``controls`` table) ----------------------------


def control_rows(db: ReadDb, run_ids: list[int] | None = None) -> list[dict[str, Any]]:
    """The control actions of ``run_ids`` (every run: None), in run then time order, each a
    dict with ``kind = 'control'`` and ``text`` (``protocol.controls.describe``). A database
    from before schema 8 has none."""
    where, params = "1", []
    if run_ids is not None:
        where = f"run_id in ({','.join('?' * len(run_ids)) or 'null'})"
        params = list(run_ids)
    try:
        rows = queries.rows(
            db,
            "select run_id, number, ts_ns, action, argument, hold, seq, result_seq, held_ns from controls"
            f" where {where} order by run_id, ts_ns, number",
            params,
        )
    except sqlite3.OperationalError:  # no such table: nothing was ever controlled there
        return []
    for row in rows:
        row["kind"] = pc.KIND
        row["text"] = pc.describe(row)
    return rows


EXPORTED = ("run_id", "number", "ts_ns", "action", "argument", "hold", "seq", "result_seq", "held_ns")


def exported(db: ReadDb, run_ids: list[int]) -> list[dict[str, Any]]:
    """The control rows of ``run_ids`` as an export's header keeps them (``import`` reads them
    back); a row's ``seq``/``result_seq`` are the run's frame numbers, kept whole by an export
    of the run."""
    return [{k: row[k] for k in EXPORTED if row.get(k) is not None} for row in control_rows(db, run_ids)]


def held_fates(controls: Iterable[Mapping[str, Any]]) -> dict[tuple[Any, Any], str]:
    """(run_id, seq) of each held row a release or drop decided -> what became of it."""
    return {
        (c["run_id"], c["seq"]): pc.held_fate(c)
        for c in controls
        if c.get("action") in ("release", "drop") and c.get("seq") is not None
    }


def with_controls(
    frames: Iterable[dict[str, Any]], controls: list[dict[str, Any]], expr: Any = None
) -> Iterator[dict[str, Any]]:
    """Frames in relay order with the control rows ``expr`` selects (all: None) placed among
    them by time, within their run; a held frame row gets ``held``, its fate (``held_fate``).
    Frames come in (run_id, seq) order; a run's controls after its last frame follow it."""
    fates = held_fates(controls)
    chosen = [c for c in controls if expr is None or _selects(expr, c)]
    at = 0
    for row in frames:
        run, ts = row.get("run_id"), row.get("ts_ns") or 0
        while at < len(chosen) and _before(chosen[at], run, ts):
            yield chosen[at]
            at += 1
        if pc.is_held(row.get("note")):
            row = {**row, "held": fates.get((row.get("run_id"), row.get("seq"))) or pc.held_fate(None)}
        yield row
    yield from chosen[at:]


def _before(control: Mapping[str, Any], run: Any, ts: int) -> bool:
    other = control["run_id"]
    if isinstance(run, int) and other != run:
        return bool(other < run)
    return bool((control.get("ts_ns") or 0) <= ts)


def _selects(expr: Any, control: Mapping[str, Any]) -> bool:
    try:
        return bool(expr.matches(pc.filter_record(control)))
    except Exception:  # a term that cannot read a control row does not select it
        return False


# -- masking, pages and following: every door shows the same masked rows ----------------------


def masked(rows: list[dict[str, Any]], redactor: Redactor | None) -> list[dict[str, Any]]:
    """``rows`` with each argument (a rule, a filter, a frame's JSON: stored as typed) masked by
    ``redactor`` and ``text`` said again; the very rows when nothing was masked."""
    if redactor is None or not redactor.enabled:
        return rows
    out = []
    for row in rows:
        argument = row.get("argument")
        if isinstance(argument, str):
            # JSON (send --with) is masked as a frame's line is; a rule or filter as free text.
            hidden = redactor.raw(argument)
            if hidden is argument or hidden == argument:
                hidden = redactor.text(argument)
            if hidden != argument:
                row = {**row, "argument": hidden}
                row["text"] = pc.describe(row)
        out.append(row)
    return out


def selected(controls: list[dict[str, Any]], expr: Any) -> list[dict[str, Any]]:
    """The rows ``expr`` selects (all: None), as a filter reads a control row."""
    return [c for c in controls if expr is None or _selects(expr, c)]


def page_controls(
    frames: list[dict[str, Any]],
    controls: list[dict[str, Any]],
    expr: Any,
    *,
    before: tuple[int, int] | None,
    last: bool,
) -> list[dict[str, Any]]:
    """One page of frames with the control rows that belong on it: each row goes on the page of
    the first selected frame at or after its time (within its run), so paging by frames (offsets
    and cursors count frames only) shows every row once. ``before`` is the (run_id, ts_ns) of the
    selection's frame just before the page (None: the page starts the selection); ``last``: no
    page follows, so rows after the last frame come here too."""
    fates = held_fates(controls)
    chosen = [c for c in selected(controls, expr) if before is None or not _at_or_before(c, before)]
    if not last:
        end = frames[-1] if frames else None
        if end is None:
            chosen = []
        else:
            chosen = [c for c in chosen if _at_or_before(c, (end.get("run_id"), end.get("ts_ns") or 0))]
    rows = list(with_controls(frames, chosen))
    for i, row in enumerate(rows):
        if pc.is_held(row.get("note")) and row.get("kind") != pc.KIND:
            rows[i] = {**row, "held": fates.get((row.get("run_id"), row.get("seq"))) or pc.held_fate(None)}
    return rows


def on_page(
    db: ReadDb, selection: Any, found: Any, cursor: tuple[int, int] | None, offset: int, redactor: Redactor | None
) -> list[dict[str, Any]]:
    """The frames of ``found`` (a ``read.frames.FramePage`` of ``selection``, after ``cursor``
    or ``offset`` frames in) with the control rows that belong on that page (``page_controls``),
    masked by ``redactor`` as the frames are."""
    rows = masked(control_rows(db), redactor)
    if not rows:
        return list(found.frames)
    before: tuple[int, int] | None = None
    if cursor is not None:
        place = db.execute("select run_id, ts_ns from frames where run_id = ? and seq = ?", list(cursor)).fetchone()
        before = (place[0], place[1] or 0) if place else None
    elif offset > 0:
        prior = next(iter(selection.rows(None, 1, offset - 1)), None)
        if prior is None:  # beyond the selection's end: the rows went on its last page
            return list(found.frames)
        before = (prior["run_id"], prior.get("ts_ns") or 0)
    return page_controls(list(found.frames), rows, selection.expr, before=before, last=not found.more)


def _at_or_before(control: Mapping[str, Any], place: tuple[Any, int]) -> bool:
    return _before(control, place[0], place[1])


class ControlFollower:
    """``tail``'s memory of control rows: each committed row shown once, those of runs recorded
    before tail started skipped unless ``from_start``. A row is shown once the recorder commits
    it (with the frames journaled around it)."""

    def __init__(self, db: ReadDb, *, from_start: bool = False) -> None:
        self.db = db
        self.seen: dict[int, int] = {}
        if not from_start:
            for row in control_rows(db):
                self.seen[row["run_id"]] = max(self.seen.get(row["run_id"], 0), row["number"])

    def poll(self, expr: Any, redactor: Redactor | None = None) -> list[dict[str, Any]]:
        """The rows committed since the last poll that ``expr`` selects, masked."""
        fresh = [r for r in control_rows(self.db) if r["number"] > self.seen.get(r["run_id"], 0)]
        for row in fresh:
            self.seen[row["run_id"]] = max(self.seen.get(row["run_id"], 0), row["number"])
        return selected(masked(fresh, redactor), expr)


SHOWN = ("number", "ts_ns", "action", "argument", "hold", "seq", "result_seq", "held_ns", "text")


def of_run(db: ReadDb, run_id: int, redactor: Redactor | None) -> dict[str, Any] | None:
    """What the inspector's page shows of run ``run_id``'s actions: its rows (masked, each with
    ``text``) and, by seq, the fate of each frame a breakpoint held (its badge); None: no run."""
    if queries.run_row(db, run_id) is None:
        return None
    rows = masked(control_rows(db, [run_id]), redactor)
    fates = held_fates(rows)
    originals = db.execute(
        "select seq from frames where run_id = ? and forwarded = 0 and note like ? and batch_seq is null",
        [run_id, HELD_NOTE + "%"],
    ).fetchall()
    return {
        "controls": [{k: row.get(k) for k in SHOWN} for row in rows],
        "held": {str(seq): fates.get((run_id, seq)) or pc.held_fate(None) for (seq,) in originals},
    }
