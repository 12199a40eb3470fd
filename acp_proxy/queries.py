"""Read-side queries over a recording: references, runs, sessions, frames, latency statistics.

Owns: resolving a user's REF (a run id, ``last``, or a session id or unique prefix) and the SQL
the query commands run. Returns plain dicts and lists, ready to render or dump as JSON.

Must not know: click, rich, terminals. Never writes: every connection it gets is read-only.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .errors import UsageError
from .store import ReadDb


class RefError(UsageError):
    """A reference that names nothing, or more than one thing; the message is for a person."""


@dataclass(frozen=True)
class Ref:
    """What a REF named: one run, or one ACP session (which may span several runs)."""

    text: str
    run_id: int | None = None
    session_row: int | None = None
    session_id: str | None = None

    @property
    def is_session(self) -> bool:
        return self.session_id is not None

    def describe(self) -> str:
        return f"session {self.session_id}" if self.is_session else f"run {self.run_id}"


def resolve(db: ReadDb, text: str) -> Ref:
    text = text.strip()
    if not text:
        raise RefError("empty reference: use a run id, 'last', or a session id (or a unique prefix)")
    if text == "last":
        row = db.execute("select max(id) from runs").fetchone()
        if row[0] is None:
            raise RefError("the database holds no runs yet")
        return Ref(text, run_id=row[0])
    if text.isdigit() and db.execute("select 1 from runs where id = ?", [int(text)]).fetchone():
        return Ref(text, run_id=int(text))
    matches = db.execute(
        "select id, session_id from sessions where session_id = ? or session_id like ? escape '\\' "
        "order by session_id = ? desc, id desc",
        [text, _like_prefix(text), text],
    ).fetchall()
    exact = [m for m in matches if m[1] == text]
    if exact:
        return Ref(text, session_row=exact[0][0], session_id=text)
    ids = sorted({m[1] for m in matches})
    if len(ids) == 1:
        row = next(m for m in matches if m[1] == ids[0])
        return Ref(text, session_row=row[0], session_id=ids[0])
    if len(ids) > 1:
        shown = ", ".join(ids[:5]) + (" ..." if len(ids) > 5 else "")
        raise RefError(f"{text!r} is the start of {len(ids)} session ids ({shown}); type more of it")
    if text.isdigit():
        raise RefError(f"no run {text} and no session starting with {text!r}")
    raise RefError(f"no run or session matches {text!r} (try: acp-proxy runs, acp-proxy sessions)")


def _like_prefix(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def rows(db: ReadDb, sql: str, params: list[Any] | tuple[Any, ...] = ()) -> list[dict[str, Any]]:
    cursor = db.execute(sql, list(params))
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def iter_rows(db: ReadDb, sql: str, params: list[Any] | tuple[Any, ...] = ()) -> Iterator[dict]:
    cursor = db.execute(sql, list(params))
    names = [d[0] for d in cursor.description]
    for row in cursor:
        yield dict(zip(names, row, strict=True))


def runs(db: ReadDb, limit: int | None = 20) -> list[dict[str, Any]]:
    sql = """
        select r.*, (select count(*) from faults f where f.run_id = r.id) as faults_applied,
               (select count(*) from findings x where x.run_id = r.id) as findings
        from runs r order by r.id desc
    """
    if limit:
        sql += " limit ?"
        return rows(db, sql, [limit])
    return rows(db, sql)


def sessions(db: ReadDb, limit: int | None = 50) -> list[dict[str, Any]]:
    sql = """
        select s.id as row_id, s.session_id, s.title, s.cwd, s.created_by, s.first_seen_ns, s.last_seen_ns,
               (select group_concat(run_id, ',') from
                   (select run_id from session_runs sr where sr.session_row = s.id order by run_id)) as runs,
               (select count(*) from turns t where t.session_row = s.id) as turns
        from sessions s order by s.last_seen_ns desc, s.id desc
    """
    if limit:
        sql += " limit ?"
        return rows(db, sql, [limit])
    return rows(db, sql)


def run_ids_of(db: ReadDb, ref: Ref) -> list[int]:
    if not ref.is_session:
        assert ref.run_id is not None
        return [ref.run_id]
    found = [
        r[0]
        for r in db.execute(
            "select distinct run_id from session_runs where session_row = ? order by run_id", [ref.session_row]
        ).fetchall()
    ]
    if not found:  # a session only seen in frames (e.g. recorded before it was announced)
        found = [
            r[0]
            for r in db.execute(
                "select distinct run_id from frames where session_id = ? order by run_id", [ref.session_id]
            ).fetchall()
        ]
    return found


def frames_of(db: ReadDb, ref: Ref, include_stderr: bool = False) -> list[dict[str, Any]]:
    """Every frame of a run, or every frame that concerns a session (responses included)."""
    stderr = "" if include_stderr else "and f.dir != 'stderr'"
    if not ref.is_session:
        return rows(db, f"select * from frames f where f.run_id = ? {stderr} order by f.seq", [ref.run_id])
    run_ids = run_ids_of(db, ref)
    marks = ",".join("?" * len(run_ids)) or "null"
    # A response carries no sessionId of its own: it belongs to the session of its request.
    sql = f"""
        select f.* from frames f
        where f.run_id in ({marks}) {stderr}
          and (f.session_id = ?
               or exists (select 1 from frames q where q.run_id = f.run_id and q.seq = f.request_seq
                          and q.session_id = ?))
        order by f.run_id, f.seq
    """
    return rows(db, sql, [*run_ids, ref.session_id, ref.session_id])


def percentile(sorted_values: list[float], fraction: float) -> float | None:
    """Nearest-rank percentile of an already sorted list."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(fraction * len(sorted_values)))
    return sorted_values[rank - 1]


def latency_stats(db: ReadDb, run_ids: list[int] | None) -> list[dict[str, Any]]:
    """Per method and direction: count, errors, p50/p95/p99/max latency in milliseconds."""
    where, params = _runs_clause(run_ids, "run_id")
    by_method: dict[tuple[str, str], list[float]] = {}
    errors: dict[tuple[str, str], int] = {}
    sql = f"""
        select method, dir, kind, latency_ns from frames
        where kind in ('response', 'error') and latency_ns is not null {where}
    """
    for method, direction, kind, latency in db.execute(sql, params):
        # The request travelled the other way: name the pair by the request's direction.
        key = (method or "?", "a2c" if direction == "c2a" else "c2a")
        by_method.setdefault(key, []).append(latency / 1e6)
        if kind == "error":
            errors[key] = errors.get(key, 0) + 1
    out = []
    for (method, direction), values in sorted(by_method.items()):
        values.sort()
        out.append(
            {
                "method": method,
                "dir": direction,
                "count": len(values),
                "errors": errors.get((method, direction), 0),
                "p50_ms": percentile(values, 0.50),
                "p95_ms": percentile(values, 0.95),
                "p99_ms": percentile(values, 0.99),
                "max_ms": values[-1],
            }
        )
    return out


def turn_stats(db: ReadDb, run_ids: list[int] | None, session_id: str | None) -> list[dict]:
    where, params = _runs_clause(run_ids, "run_id")
    if session_id is not None:
        where += " and session_id = ?"
        params.append(session_id)
    return rows(db, f"select * from turn_metrics where 1 = 1 {where} order by run_id, turn_index", params)


def unanswered(db: ReadDb, run_ids: list[int] | None) -> list[dict[str, Any]]:
    where, params = _runs_clause(run_ids, "run_id")
    return rows(db, f"select * from unanswered where 1 = 1 {where} order by run_id, seq", params)


def errors(db: ReadDb, run_ids: list[int] | None) -> list[dict[str, Any]]:
    where, params = _runs_clause(run_ids, "run_id")
    sql = f"""
        select run_id, seq, dir, method, rpc_id, error_code, error_message from frames
        where kind = 'error' {where} order by run_id, seq
    """
    return rows(db, sql, params)


def _runs_clause(run_ids: list[int] | None, column: str) -> tuple[str, list[Any]]:
    if run_ids is None:
        return "", []
    return f" and {column} in ({','.join('?' * len(run_ids)) or 'null'})", list(run_ids)
