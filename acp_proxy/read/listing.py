"""Runs a page at a time: the inspector's index lists every run, newest first, without reading
them all on each poll.

Owns: the SQL of a page of runs keyset-paged by id (the runs older than a given one), with each
run's fault and finding counts, and the counts of all runs and of those still recording.

Must not know: click, rich, HTTP, how a door shows a run. Never writes.
"""

from __future__ import annotations

from typing import Any

from acp_proxy.read import queries

NEWEST = 2**62  # above any run id: "before NEWEST" is the newest page


def runs_before(db: Any, before: int | None, limit: int) -> tuple[list[dict[str, Any]], bool]:
    """Up to ``limit`` runs older than run ``before`` (None: the newest), newest first, as
    ``queries.runs`` has them; and whether older ones follow."""
    rows = queries.rows(
        db,
        queries.RUNS_SELECT + " where r.id < ? order by r.id desc limit ?",
        [NEWEST if before is None else before, limit + 1],
    )
    return rows[:limit], len(rows) > limit


def run_counts(db: Any) -> tuple[int, int]:
    """How many runs the recording holds, and how many are still recording."""
    total, running = db.execute("select count(*), sum(status = 'running') from runs").fetchone()
    return int(total), int(running or 0)


def sessions_before(db: Any, before: tuple[int, int] | None, limit: int) -> tuple[list[dict[str, Any]], bool]:
    """Up to ``limit`` sessions seen before ``before`` (``(last_seen_ns, row_id)`` of the last
    one listed; None: the newest), the latest seen first, as ``queries.sessions`` has them; and
    whether older ones follow."""
    last_ns, row_id = before if before is not None else (NEWEST, NEWEST)
    rows = queries.rows(
        db,
        queries.SESSIONS_SELECT
        + """ where coalesce(s.last_seen_ns, 0) < ? or (coalesce(s.last_seen_ns, 0) = ? and s.id < ?)
              order by coalesce(s.last_seen_ns, 0) desc, s.id desc limit ?""",
        [last_ns, last_ns, row_id, limit + 1],
    )
    return rows[:limit], len(rows) > limit
