"""Schema and lifecycle marks on the frames a page shows, for every run (not only those
recorded with ``--check``).

Owns: ``/runs/ID/checks.json?from=A&to=B`` — the findings on frames A..B of run ID from the
run's ``read.frame_checks.RunChecks``, kept per server for the newest ``KEEP`` runs asked about,
advanced by a time budget on each request up to B (``checked`` says how far it got; a page asks
again until it has reached B, and a live page's polls carry it along the run's new frames).

Must not know: SQL, the checker's rules, HTML.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

from datasette.utils.asgi import Response

from acp_proxy.read import frame_checks
from acp_proxy.web.doors import Doors, number

KEEP = 16
_LOCK = threading.Lock()


def _checks_for(datasette: Any, run_id: int) -> frame_checks.RunChecks:
    with _LOCK:
        cache: OrderedDict[int, frame_checks.RunChecks] = datasette.__dict__.setdefault(
            "_acp_proxy_checks", OrderedDict()
        )
        found = cache.get(run_id)
        if found is None:
            found = cache[run_id] = frame_checks.RunChecks(run_id)
        cache.move_to_end(run_id)
        while len(cache) > KEEP:
            cache.popitem(last=False)
        return found


async def checks_view(doors: Doors, datasette: Any, request: Any) -> Response:
    run_id = int(request.url_vars["run_id"])
    first = number(request.args.get("from")) or 0
    last = number(request.args.get("to"))
    if last is None or last < first:
        return doors.error("give the frames as from=SEQ&to=SEQ (to >= from)", True, 400)
    redactor = doors.redactor(datasette)
    checks = _checks_for(datasette, run_id)

    def read(conn: Any) -> dict[str, Any]:
        checks.advance(conn, upto=last)  # LookupError: no such run (read_json: a 404)
        return {
            "run_id": run_id,
            "checked": checks.checked,
            "done": checks.done,
            "total_findings": checks.count,
            "findings": checks.window(first, last, redactor),
        }

    return await doors.read_json(datasette, read)


ROUTES = [(r"^/runs/(?P<run_id>[0-9]{1,18})/checks\.json$", checks_view)]
