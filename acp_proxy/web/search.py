"""Search across runs: every run reachable by agent, client, status and date, and a frame
filter over all runs whose results link to their run and frame.

Owns: ``/search`` (the page), ``/search/runs.json`` (``read.run_search``: runs narrowed by agent,
client, status, a start-time window; keyset pages by id) and ``/search/frames.json`` (the filter
language over every run, ``read.frames.Selection`` without a scope, a page at a time by offset,
masked as a run's page is: by the server's primed redactor, or — for a filter that reads masked
text — by the request's own, before the filter looks).

Must not know: SQL, HTML beyond choosing the template.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from datasette.utils.asgi import Response

from acp_proxy.protocol import filters
from acp_proxy.read import frames as selections
from acp_proxy.read import run_search
from acp_proxy.web import model, timeline
from acp_proxy.web.doors import Doors, number

PAGE = 100


def parse_day(text: str | None, end: bool = False) -> int | None:
    """``YYYY-MM-DD`` (UTC) -> ns at its start (``end``: at the next day's start); ValueError."""
    if not text:
        return None
    day = dt.datetime.strptime(text.strip(), "%Y-%m-%d").replace(tzinfo=dt.UTC)
    try:
        if end:
            day += dt.timedelta(days=1)
        # SQLite's integers: a date beyond them bounds nothing more than their ends do.
        return max(-(2**63), min(int(day.timestamp() * 1e9), 2**63 - 1))
    except (OverflowError, OSError):
        if end:
            return None  # the last day there is: no bound
        raise ValueError(f"{text!r} is out of range") from None


async def search_page(doors: Doors, datasette: Any, request: Any) -> Response:
    redactor = doors.redactor(datasette)
    return doors.page("search.html", title="Search runs and frames", **doors.common(datasette, redactor))


async def runs_view(doors: Doors, datasette: Any, request: Any) -> Response:
    args = request.args
    status = (args.get("status") or "").strip() or None
    if status is not None and status not in run_search.STATUSES:
        return doors.error(f"status is one of {', '.join(run_search.STATUSES)}, not {status[:40]!r}", True, 400)
    try:
        query = run_search.RunQuery(
            agent=(args.get("agent") or "").strip()[:200] or None,
            client=(args.get("client") or "").strip()[:200] or None,
            status=status,
            since_ns=parse_day(args.get("since")),
            until_ns=parse_day(args.get("until"), end=True),
        )
    except ValueError:
        return doors.error("since and until are dates: YYYY-MM-DD", True, 400)
    before = number(args.get("before"))
    limit = max(1, min(number(args.get("limit")) or PAGE, 1000))
    redactor = doors.redactor(datasette)

    def read(conn: Any) -> dict[str, Any]:
        rows, more, total = run_search.runs_matching(conn, query, before, limit)
        agents, clients = run_search.agents_and_clients(conn)
        return {
            "runs": [model.run_summary(r, redactor) for r in rows],
            "more": more,
            "total": total,
            "agents": agents,
            "clients": clients,
            "statuses": list(run_search.STATUSES),
        }

    return await doors.read_json(datasette, read)


async def frames_view(doors: Doors, datasette: Any, request: Any) -> Response:
    text = (request.args.get("filter") or "").strip()
    offset = number(request.args.get("offset")) or 0
    limit = max(1, min(number(request.args.get("limit")) or PAGE, 1000))
    redactor, primed = doors.redactor(datasette), doors.primed(datasette)
    if not text:
        return doors.error("give a filter, e.g. method:session/prompt or marked", True, 400)

    def read(conn: Any) -> dict[str, Any]:
        try:
            expr = selections.parse(conn, text)
        except filters.FilterError as exc:
            return {"filter_error": f"{exc.message} (at column {exc.column + 1})", "rows": [], "total": 0}
        if redactor.enabled and selections.reads_masked(expr):
            page = selections.Selection(conn, expr, redactor, None).window(None, limit, offset)
            rows = page.frames
        else:
            page = selections.Selection(conn, expr, None, None).window(None, limit, offset)
            rows = primed.masked(conn, page.frames)
        return {
            "filter_error": None,
            "rows": [timeline.timeline_row(r) for r in rows],
            "total": page.total,
            "more": page.more,
            "offset": offset,
        }

    return await doors.read_json(datasette, read)


ROUTES = [
    (r"^/search$", search_page),
    (r"^/search/runs\.json$", runs_view),
    (r"^/search/frames\.json$", frames_view),
]
