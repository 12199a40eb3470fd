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

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from acp_proxy.errors import UsageError
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
) -> CheckReport:
    """Check the runs ``text`` names (a REF, or ``all``); ``UsageError`` when it names none."""
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
    stream = queries.iter_rows(
        db, f"select * from frames where run_id in ({marks}) and dir != 'stderr' order by run_id, seq", run_ids
    )
    if progress is not None:
        stream = progress(stream, total)
    started = time.perf_counter()
    found = [
        finding.as_dict()
        for finding in checks.check(stream, versions=versions, schema=schema, unstable=unstable, ended=ended)
        if keep is None or finding.seq is None or (finding.run_id, finding.seq) in keep
    ]
    took = time.perf_counter() - started
    # End-of-run findings (unanswered requests, unfinished turns) point back at earlier frames.
    found.sort(key=lambda f: (f["run_id"] or 0, f["seq"] or 0))
    return CheckReport(label, run_ids, total, _masked(found, redactor), took)


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
