"""Conformance findings for a reference, computed from its frames or as stored.

Owns: the one way ``acp-proxy check`` and the MCP ``check`` tool check a run, a session or every
run: the runs' frames (a session is checked in the context of its whole runs, since initialize,
capabilities and pairing live outside its own frames; only findings on its frames are kept),
their protocol versions and end states, the findings in frame order and their counts. The rules
are ``checks/``'s.

Must not know: click, rich, HTTP, MCP; progress bars (a caller may wrap the frame stream).
Never writes: ``check --save`` stores through ``store``.
"""

from __future__ import annotations

import functools
import itertools
import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from acp_proxy.errors import UsageError
from acp_proxy.limits import CHECK_AUTO_JOBS_FRAMES, CHECK_MAX_JOBS
from acp_proxy.protocol.redact import Redactor
from acp_proxy.read import faults as notes
from acp_proxy.read import queries

SEVERITIES = ("error", "warning", "info")

Progress = Callable[[Iterator[dict[str, Any]], int], Iterator[dict[str, Any]]]


@dataclass(frozen=True)
class CheckReport:
    label: str
    """How the reference is named: ``run 3``, ``session 3f2a...``, ``every run``."""
    run_ids: list[int]
    frames: int
    """How many frames were checked (stderr lines are not frames)."""
    findings: list[dict[str, Any]]
    seconds: float

    @property
    def counts(self) -> dict[str, int]:
        return {s: sum(1 for f in self.findings if f["severity"] == s) for s in SEVERITIES}


def check(
    db: Any,
    text: str,
    *,
    schema: bool = True,
    unstable: bool = True,
    progress: Progress | None = None,
    redactor: Redactor | None = None,
    jobs: int | None = 1,
    path: Path | None = None,
) -> CheckReport:
    """Check the runs ``text`` names (a REF, or ``all``); ``UsageError`` when it names none.

    ``jobs`` None: as many processes as ``auto_jobs`` says the scope is worth.

    ``jobs`` > 1 (with the database's ``path``, which each worker opens): the runs are checked in
    that many processes, each reading its runs itself; the findings are the same."""
    from acp_proxy.checks import rules as checks

    resolved, label, run_ids = queries.resolve_scope(db, text)
    if not run_ids:
        raise UsageError(f"{label} has no recorded run")
    marks = ",".join("?" * len(run_ids))
    run_rows = queries.rows(db, f"select id, protocol_version, status from runs where id in ({marks})", run_ids)
    versions = {r["id"]: r["protocol_version"] for r in run_rows}
    ended = {r["id"]: r["status"] != "running" for r in run_rows}
    total = db.execute(
        f"select count(*) from frames where run_id in ({marks}) and dir != 'stderr'", run_ids
    ).fetchone()[0]
    keep = _session_keys(db, resolved)
    options: dict[str, Any] = {"versions": versions, "schema": schema, "unstable": unstable, "ended": ended}
    if jobs is None:
        jobs = auto_jobs(len(run_ids), total)
    started = time.perf_counter()
    if jobs > 1 and path is not None and len(run_ids) > 1:
        runs = checks.check_runs(run_ids, functools.partial(_run_frames, path), jobs=jobs, **options)
        findings: Iterator[Any] = _findings_counted(runs, progress, total)
    else:
        columns = ", ".join(checks.FRAME_COLUMNS)  # not `select *`: half the columns, a third less time
        stream = queries.iter_rows(
            db,
            f"select {columns} from frames where run_id in ({marks}) and dir != 'stderr' order by run_id, seq",
            run_ids,
        )
        if progress is not None:
            stream = progress(stream, total)
        findings = checks.check(stream, **options)
    try:
        found = [
            finding.as_dict()
            for finding in findings
            if keep is None or finding.seq is None or (finding.run_id, finding.seq) in keep
        ]
    except (OSError, sqlite3.Error, RuntimeError) as exc:  # RuntimeError: a BrokenProcessPool
        if jobs <= 1:
            raise
        raise UsageError(f"checking in {jobs} processes failed: {exc}") from None
    took = time.perf_counter() - started
    # End-of-run findings (unanswered requests, unfinished turns) point back at earlier frames.
    found.sort(key=lambda f: (f["run_id"] or 0, f["seq"] or 0))
    return CheckReport(label, run_ids, total, _masked(found, redactor), took)


def auto_jobs(runs: int, frames: int) -> int:
    """How many processes ``check --jobs auto`` uses: one per CPU this process may run on (at
    most ``CHECK_MAX_JOBS``, at most one per run), once there are ``CHECK_AUTO_JOBS_FRAMES`` frames."""
    if runs < 2 or frames < CHECK_AUTO_JOBS_FRAMES:
        return 1
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(cpus, runs, CHECK_MAX_JOBS))


def _run_frames(path: Path, run_id: int) -> Iterator[dict[str, Any]]:
    """One run's frames as a check reads them, in a ``check --jobs`` worker (its own connection)."""
    from acp_proxy.checks.rules import FRAME_COLUMNS
    from acp_proxy.store import database as store

    db = store.open_for_reading(path)
    try:
        sql = f"select {', '.join(FRAME_COLUMNS)} from frames where run_id = ? and dir != 'stderr' order by seq"
        yield from queries.iter_rows(db, sql, [run_id])
    finally:
        db.conn.close()


def _findings_counted(runs: Iterator[Any], progress: Progress | None, total: int) -> Iterator[Any]:
    """The findings of runs checked elsewhere, run by run; a progress bar (which counts the frames
    it is handed) is handed a placeholder per frame of each run as it comes back."""
    done: list[Any] = []

    def placeholders() -> Iterator[Any]:
        for run in runs:
            done.append(run)
            yield from itertools.repeat(None, run.frames)

    counted = progress(placeholders(), total) if progress is not None else placeholders()
    for _ in counted:
        while done:
            yield from done.pop(0).findings
    while done:
        yield from done.pop(0).findings


def stored(db: Any, text: str, redactor: Redactor | None = None) -> CheckReport:
    """The findings stored for what ``text`` names (``check --save``, ``run --check``)."""
    resolved, label, run_ids = queries.resolve_scope(db, text)
    found = notes.findings(db, run_ids, _session_keys(db, resolved), redactor)
    return CheckReport(label, run_ids, 0, found, 0.0)


def _session_keys(db: Any, resolved: queries.Ref | None) -> set[tuple[int, int]] | None:
    if resolved is None or not resolved.is_session:
        return None
    return {(f["run_id"], f["seq"]) for f in queries.frames_of(db, resolved)}


def _masked(found: list[dict[str, Any]], redactor: Redactor | None) -> list[dict[str, Any]]:
    if redactor is None or not redactor.enabled:
        return found
    return [redactor.value(f) for f in found]
