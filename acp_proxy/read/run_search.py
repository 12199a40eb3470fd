"""Runs found by who ran them, how they ended and when: the inspector's search over runs.

Owns: the SQL of a page of runs narrowed by agent name, client name (a case-insensitive part of
either), status, and a start-time window, keyset-paged by id, newest first, as
``read.listing`` pages all runs (with the same select list, ``queries.RUNS_SELECT``).

Must not know: click, rich, HTTP, how a door shows a run. Never writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from acp_proxy.read import hops, queries
from acp_proxy.read.listing import NEWEST

STATUSES = ("running", "ended", "crashed")


@dataclass(frozen=True)
class RunQuery:
    """What to look for; every field optional (None: any)."""

    agent: str | None = None
    client: str | None = None
    status: str | None = None
    since_ns: int | None = None
    until_ns: int | None = None

    def where(self) -> tuple[str, list[Any]]:
        clauses: list[str] = ["r.id < ?"]
        params: list[Any] = []
        for column, value in (("agent_name", self.agent), ("client_name", self.client)):
            if value:
                # instr, not LIKE: a person's % or _ is a character, not a wildcard
                clauses.append(f"instr(lower(coalesce(r.{column}, '')), lower(?)) > 0")
                params.append(value)
        if self.status:
            clauses.append("r.status = ?")
            params.append(self.status)
        if self.since_ns is not None:
            clauses.append("r.started_ns >= ?")
            params.append(self.since_ns)
        if self.until_ns is not None:
            clauses.append("r.started_ns < ?")
            params.append(self.until_ns)
        return " and ".join(clauses), params


def runs_matching(
    db: Any, query: RunQuery, before: int | None = None, limit: int = 100
) -> tuple[list[dict[str, Any]], bool, int]:
    """Up to ``limit`` runs ``query`` finds older than run ``before`` (None: the newest), newest
    first; whether more follow; how many it finds in all."""
    where, params = query.where()
    rows = queries.rows(
        db,
        queries.RUNS_SELECT + f" where {where} order by r.id desc limit ?",
        [NEWEST if before is None else before, *params, limit + 1],
    )
    total = db.execute(f"select count(*) from runs r where {where}", [NEWEST, *params]).fetchone()[0]
    return hops.count_in_runs(db, rows[:limit]), len(rows) > limit, int(total)


def agents_and_clients(db: Any) -> tuple[list[str], list[str]]:
    """The agent and client names the recording holds (for a search form's suggestions)."""
    agents = [r[0] for r in db.execute("select distinct agent_name from runs where agent_name is not null order by 1")]
    clients = [
        r[0] for r in db.execute("select distinct client_name from runs where client_name is not null order by 1")
    ]
    return agents, clients
