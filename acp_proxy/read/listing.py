"""The lists of runs and sessions every door shows: ``runs`` and ``sessions`` (the CLI commands,
the MCP tools), and a page at a time for the inspector's index, which lists every run, newest
first, without reading them all on each poll.

Owns: the SQL of a list of runs (newest first, by offset or keyset-paged by id: the runs older
than a given one), with each run's fault, finding and turn counts, and the counts of all runs
and of those still recording; the same for sessions, with their runs and turns. A run's or a
session's turns include those its proxy chains carry (``hops``), as ``stats`` lists them.

Must not know: click, rich, HTTP, how a door shows a run. Never writes.
"""

from __future__ import annotations

from typing import Any

from acp_proxy.read import hops, queries

NEWEST = 2**62  # above any run id: "before NEWEST" is the newest page


def runs(db: Any, limit: int | None = 20, offset: int = 0) -> list[dict[str, Any]]:
    """The newest ``limit`` runs (None or 0: all) after skipping ``offset``."""
    sql = queries.RUNS_SELECT + " order by r.id desc"
    if limit or offset:
        sql += " limit ? offset ?"
        return hops.count_in_runs(db, queries.rows(db, sql, [limit or -1, offset]))
    return hops.count_in_runs(db, queries.rows(db, sql))


def sessions(db: Any, limit: int | None = 50, offset: int = 0) -> list[dict[str, Any]]:
    """The ``limit`` most recently active sessions (None or 0: all) after skipping ``offset``."""
    sql = queries.SESSIONS_SELECT + " order by s.last_seen_ns desc, s.id desc"
    if limit or offset:
        sql += " limit ? offset ?"
        return hops.count_in_sessions(db, queries.rows(db, sql, [limit or -1, offset]))
    return hops.count_in_sessions(db, queries.rows(db, sql))


def runs_before(db: Any, before: int | None, limit: int) -> tuple[list[dict[str, Any]], bool]:
    """Up to ``limit`` runs older than run ``before`` (None: the newest), newest first, as
    ``runs`` has them; and whether older ones follow."""
    rows = queries.rows(
        db,
        queries.RUNS_SELECT + " where r.id < ? order by r.id desc limit ?",
        [NEWEST if before is None else before, limit + 1],
    )
    return hops.count_in_runs(db, rows[:limit]), len(rows) > limit


def run_counts(db: Any) -> tuple[int, int]:
    """How many runs the recording holds, and how many are still recording."""
    total, running = db.execute("select count(*), sum(status = 'running') from runs").fetchone()
    return int(total), int(running or 0)


def sessions_before(db: Any, before: tuple[int, int] | None, limit: int) -> tuple[list[dict[str, Any]], bool]:
    """Up to ``limit`` sessions seen before ``before`` (``(last_seen_ns, row_id)`` of the last
    one listed; None: the newest), the latest seen first, as ``sessions`` has them; and
    whether older ones follow."""
    last_ns, row_id = before if before is not None else (NEWEST, NEWEST)
    rows = queries.rows(
        db,
        queries.SESSIONS_SELECT
        + """ where coalesce(s.last_seen_ns, 0) < ? or (coalesce(s.last_seen_ns, 0) = ? and s.id < ?)
              order by coalesce(s.last_seen_ns, 0) desc, s.id desc limit ?""",
        [last_ns, last_ns, row_id, limit + 1],
    )
    return hops.count_in_sessions(db, rows[:limit]), len(rows) > limit
