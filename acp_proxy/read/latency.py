"""Per-method latency, computed by SQLite: count, errors, p50, p95, p99 and max per method and
direction, for a run, a session's runs or every run.

Owns: the SQL of the latency table the inspector shows on every page and poll. The answered
requests are found through ``idx_frames_request`` (responses carry ``request_seq``) and ranked
by a window function, so a page of a run with a million frames costs its responses, not its
frames, and nothing is folded. Percentiles are nearest-rank, as ``queries.percentile`` has
them: the value at rank ``max(1, ceil(p * n))``. A proxy chain's hops are rows of their own
(``hop`` 1 and deeper; the link's own are ``hop`` 0): the proxy-chains RFD makes an inner answer
the envelope's answer, "unchanged", so an inner request's latency is its ``proxy/successor``
envelope's, named by the method the envelope's ``params`` flatten (a deeper envelope the same
way, in SQL), the direction turning round at each hop as ``protocol.chains`` has it.

Must not know: click, rich, HTTP, MCP, how a door draws the table. Never writes.
"""

from __future__ import annotations

from typing import Any

from acp_proxy.protocol.chains import SUCCESSOR

MAX_HOPS = 64
"""Envelopes nested deeper are not followed: a bound, not a chain anyone runs."""
PERCENTILES = (("p50_ms", 0.50), ("p95_ms", 0.95), ("p99_ms", 0.99))


def _rank(fraction: float) -> str:
    # ceil() is optional in SQLite builds: an integer part plus one when there is a remainder.
    # The product is a double in SQLite as in Python, so both round the same way.
    product = f"({fraction!r} * n)"
    return f"max(1, cast({product} as integer) + ({product} > cast({product} as integer)))"


def _wrapped(scope: str) -> str:
    """The recursive CTE of every hop's answers in ``scope``: each ``proxy/successor`` answer
    with the params of its request, then of the envelope those params carry, and so on."""
    return f"""
        wrapped(run_id, seq, dir, kind, latency_ns, hop, params) as (
            -- dir: the answer's, at that hop (an inner request travels the other way round)
            select r.run_id, r.seq, case r.dir when 'a2c' then 'c2a' when 'c2a' then 'a2c' else r.dir end,
                   r.kind, r.latency_ns, 1, json_extract(q.raw, '$.params')
            from frames r join frames q on q.run_id = r.run_id and q.seq = r.request_seq
            where {scope.replace("run_id", "r.run_id")} and r.method = '{SUCCESSOR}'
              and r.request_seq is not null and r.latency_ns is not null
              and r.kind in ('response', 'error') and json_valid(q.raw)
            union all
            select run_id, seq, case dir when 'a2c' then 'c2a' when 'c2a' then 'a2c' else dir end,
                   kind, latency_ns, hop + 1, json_extract(params, '$.params')
            from wrapped
            where json_valid(params) and json_extract(params, '$.method') = '{SUCCESSOR}' and hop < {MAX_HOPS}
        ),"""


def _chained(db: Any, scope: str, params: list[Any]) -> bool:
    """Whether the scope holds an envelope at all: most recordings do not, and then the SQL is
    the link's alone (the hop part, even empty, costs a third more on a million frames: measured)."""
    return bool(
        db.execute(f"select 1 from frames where {scope} and method = ? limit 1", [*params, SUCCESSOR]).fetchone()
    )


def latency_table(db: Any, run_ids: list[int] | None) -> list[dict[str, Any]]:
    """One row per (hop, method, direction of the request): ``count``, ``errors`` and ``p50_ms``,
    ``p95_ms``, ``p99_ms``, ``max_ms`` in milliseconds; ordered by hop, method, direction."""
    if run_ids is None:
        scope, params = "1", []
    else:
        scope, params = f"run_id in ({','.join('?' * len(run_ids)) or 'null'})", list(run_ids)
    picks = ",\n".join(
        f"max(case when rn = {_rank(fraction)} then latency_ns end) / 1e6 as {name}" for name, fraction in PERCENTILES
    )
    chained = _chained(db, scope, params)
    wrapped = _wrapped(scope)
    hops = """
            union all
            select hop, json_extract(params, '$.method'),
                   case dir when 'a2c' then 'c2a' when 'c2a' then 'a2c' else dir end, kind, latency_ns
            -- an envelope that names no method carries nothing (protocol.chains has it so)
            from wrapped where json_valid(params) and json_type(params, '$.method') = 'text'"""
    key = "hop, method, dir" if chained else "method, dir"
    sql = f"""
        with recursive {wrapped if chained else ""} answered as (
            select 0 as hop, coalesce(method, '?') as method,
                   -- the request travelled the other way: name the pair by the request's direction
                   case dir when 'a2c' then 'c2a' when 'c2a' then 'a2c' else dir end as dir,
                   kind, latency_ns
            from frames
            where {scope} and request_seq is not null and latency_ns is not null
              and kind in ('response', 'error'){hops if chained else ""}
        ), ranked as (
            select *, row_number() over (partition by {key} order by latency_ns) as rn,
                   count(*) over (partition by {key}) as n
            from answered
        )
        select method, dir, hop, max(n) as count, sum(kind = 'error') as errors,
               {picks},
               max(latency_ns) / 1e6 as max_ms
        from ranked group by hop, method, dir order by hop, method, dir
    """
    # The scope, in wrapped then in answered.
    cursor = db.execute(sql, [*params, *params] if chained else params)
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row, strict=True)) for row in cursor]


def samples(db: Any, run_ids: list[int] | None, limit: int = 5000) -> list[dict[str, Any]]:
    """One sample per answered request, in relay order — ``method``, ``dir`` (the request's),
    ``latency_ms``, ``error``, ``hop`` — at most the ``limit`` latest: what a chart of the
    spread draws, read by SQL (no fold), bounded whatever the run's length. A hop's request is a
    sample of its own (``hop`` 1 and deeper) right after its envelope's, as ``latency_table``
    counts it."""
    if run_ids is None:
        scope, params = "1", []
    else:
        scope, params = f"run_id in ({','.join('?' * len(run_ids)) or 'null'})", list(run_ids)
    if not _chained(db, scope, params):
        # The link's alone, as the SQL was before hops: the planner walks it newest first.
        sql = f"""
            select * from (
                select run_id, seq, 0 as hop, coalesce(method, '?') as method,
                       case dir when 'a2c' then 'c2a' when 'c2a' then 'a2c' else dir end as dir,
                       round(latency_ns / 1e6, 3) as latency_ms, kind = 'error' as error
                from frames
                where {scope} and request_seq is not null and latency_ns is not null
                  and kind in ('response', 'error')
                order by run_id desc, seq desc limit ?
            ) order by run_id, seq
        """
        return _samples(db.execute(sql, [*params, limit]))
    hops = """
            union all
            select run_id, seq, hop, json_extract(params, '$.method'),
                   case dir when 'a2c' then 'c2a' when 'c2a' then 'a2c' else dir end, kind, latency_ns
            from wrapped where json_valid(params) and json_type(params, '$.method') = 'text'"""
    sql = f"""
        with recursive {_wrapped(scope)} answered as (
            select run_id, seq, 0 as hop, coalesce(method, '?') as method,
                   case dir when 'a2c' then 'c2a' when 'c2a' then 'a2c' else dir end as dir, kind, latency_ns
            from frames
            where {scope} and request_seq is not null and latency_ns is not null
              and kind in ('response', 'error'){hops}
        )
        select * from (
            select run_id, seq, hop, method, dir, round(latency_ns / 1e6, 3) as latency_ms, kind = 'error' as error
            from answered order by run_id desc, seq desc, hop desc limit ?
        ) order by run_id, seq, hop
    """
    # The scope, in wrapped then in answered.
    return _samples(db.execute(sql, [*params, *params, limit]))


def _samples(cursor: Any) -> list[dict[str, Any]]:
    return [
        {"method": method, "dir": direction, "latency_ms": ms, "error": bool(error), "hop": hop}
        for _, _, hop, method, direction, ms, error in cursor
    ]
