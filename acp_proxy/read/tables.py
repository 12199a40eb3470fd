"""The read model's lowest rung: SQL rows as dicts, and the database's views read for a scope of
runs (``turn_metrics``, ``unanswered``, the error frames).

Owns: turning a cursor into dicts (``rows``, ``iter_rows``), the ``run_id in (...)`` clause of a
scope (None: every run), and the plain per-scope reads of the recorder's own tables and views
that ``stats`` and ``hops`` build on. It sits below both ``queries`` (REF resolution, which asks
``hops`` for the sessions only proxy chains carry) and ``hops`` (which adds a chain's turns to
the link's own ``turn_stats``), so neither has to import the other's other half.

Must not know: REFs, proxy chains, click, rich, HTTP. Never writes: every connection it gets is
read-only.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

from acp_proxy.store.database import ReadDb


def rows(db: ReadDb, sql: str, params: list[Any] | tuple[Any, ...] = ()) -> list[dict[str, Any]]:
    cursor = db.execute(sql, list(params))
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def iter_rows(db: ReadDb, sql: str, params: list[Any] | tuple[Any, ...] = ()) -> Iterator[dict]:
    cursor = db.execute(sql, list(params))
    names = [d[0] for d in cursor.description]
    # Each row made into a dict by C iterators (no Python loop body per row): `check all` reads
    # every frame through here, and this is a tenth of its time.
    yield from map(dict, map(zip, itertools.repeat(names), cursor))


def runs_clause(run_ids: list[int] | None, column: str) -> tuple[str, list[Any]]:
    """`` and COLUMN in (?, ...)`` and its parameters for a scope of runs; nothing for None."""
    if run_ids is None:
        return "", []
    return f" and {column} in ({','.join('?' * len(run_ids)) or 'null'})", list(run_ids)


def turn_stats(db: ReadDb, run_ids: list[int] | None, session_id: str | None) -> list[dict]:
    """The ``turn_metrics`` rows of the runs (of ``session_id`` when given): the link's own
    turns; ``hops.every_turn`` adds those its proxy chains carry."""
    where, params = runs_clause(run_ids, "run_id")
    if session_id is not None:
        where += " and session_id = ?"
        params.append(session_id)
    return rows(db, f"select * from turn_metrics where 1 = 1 {where} order by run_id, turn_index", params)


def unanswered(db: ReadDb, run_ids: list[int] | None) -> list[dict[str, Any]]:
    where, params = runs_clause(run_ids, "run_id")
    return rows(db, f"select * from unanswered where 1 = 1 {where} order by run_id, seq", params)


def errors(db: ReadDb, run_ids: list[int] | None) -> list[dict[str, Any]]:
    where, params = runs_clause(run_ids, "run_id")
    sql = f"""
        select run_id, seq, dir, method, rpc_id, error_code, error_message from frames
        where kind = 'error' {where} order by run_id, seq
    """
    return rows(db, sql, params)
