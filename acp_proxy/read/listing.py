"""The lists of runs and sessions every door shows: ``runs`` and ``sessions`` (the CLI commands,
the MCP tools), and a page at a time for the inspector's index, which lists every run, newest
first, without reading them all on each poll.

Owns: the SQL of a list of runs (newest first, by offset or keyset-paged by id: the runs older
than a given one), with each run's fault, finding and turn counts, and the counts of all runs
and of those still recording; the same for sessions, with their runs and turns. A run's or a
session's turns include those its proxy chains carry (``hops``), as ``stats`` lists them. A
session that exists only inside a proxy chain has no sessions row: ``hops.chain_sessions``
derives it from the envelopes, and the lists merge it in by when it was last seen, with its
``hop`` (a sessions row's is 0).

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
    """The ``limit`` most recently active sessions (None or 0: all) after skipping ``offset``:
    the sessions rows (``hop`` 0) and the sessions only proxy chains carry (``hop`` 1 and deeper,
    ``hops.chain_sessions``), each with its runs and turns."""
    return _sessions(db, limit, offset)[0]


def sessions_page(db: Any, limit: int | None = 50, offset: int = 0) -> tuple[list[dict[str, Any]], int]:
    """``sessions``, and how many sessions there are in all (the total a page of them is of)."""
    found, chained = _sessions(db, limit, offset)
    return found, queries.count(db, "sessions") + chained


def session_count(db: Any) -> int:
    """How many sessions the lists hold: the sessions rows and the sessions only chains carry."""
    return queries.count(db, "sessions") + len(hops.chain_sessions(db)[0])


def _sessions(db: Any, limit: int | None, offset: int) -> tuple[list[dict[str, Any]], int]:
    chained, counts = hops.chain_sessions(db)
    sql = queries.SESSIONS_SELECT + " order by s.last_seen_ns desc, s.id desc"
    if not chained:  # the usual case: the page is the table's, cut by SQL
        params = [limit or -1, offset] if limit or offset else []
        found = queries.rows(db, sql + (" limit ? offset ?" if params else ""), params)
        return _counted(db, found, counts), 0
    own = queries.rows(db, sql + " limit ?", [offset + limit]) if limit else queries.rows(db, sql)
    page = _merged(own, chained)[offset : offset + limit if limit else None]
    return _counted(db, page, counts), len(chained)


def _merged(own: list[dict[str, Any]], chained: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Sessions rows and ``hops.chain_sessions``' rows, the latest seen first (ties: the higher
    ``row_id`` first), as ``sessions_before`` pages them."""
    return sorted([*own, *chained], key=lambda row: (row["last_seen_ns"] or 0, row["row_id"]), reverse=True)


def _counted(db: Any, rows: list[dict[str, Any]], counts: Any) -> list[dict[str, Any]]:
    """``rows`` with the turns their runs' proxy chains carry counted into the sessions rows
    (``hop`` 0; a chain's own sessions come counted, with their hop)."""
    own = [row for row in rows if "hop" not in row]
    hops.count_in_sessions(db, own, counts)
    for row in own:
        row["hop"] = 0
    return rows


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
    chained, counts = hops.chain_sessions(db)
    if chained:
        older = [row for row in chained if (row["last_seen_ns"] or 0, row["row_id"]) < (last_ns, row_id)]
        rows = _merged(rows, older)[: limit + 1]
    return _counted(db, rows[:limit], counts), len(rows) > limit


def session_key(text: str | None) -> tuple[int, int] | None:
    """``LAST_SEEN_NS:ROW_ID`` (the place of the last session a page listed, as a door hands it
    back: a chain's session has a negative ``row_id``) -> the key ``sessions_before`` takes;
    None for none or nonsense."""
    last, _, row = (text or "").partition(":")
    digits = row[1:] if row.startswith("-") else row
    if all(part.isascii() and part.isdigit() and len(part) < 19 for part in (last, digits)):
        return int(last), int(row)
    return None
