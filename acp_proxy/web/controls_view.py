"""A run's ``acp-proxy ctl`` actions for the inspector's page, beside its frames.

Owns: ``/runs/ID/controls.json`` — the run's control rows (``read.controls``: masked with the
inspector's redactor, each with its one-line ``text``) and the fate of each frame a breakpoint
held (``held``: seq -> "held 2.100s, released as #14"), which the page shows as a log of
actions and as a badge on the held frame's row. A separate answer, not rows inside the
``frames.json`` pages: those pages count frames (offsets, cursors, the virtual list's height),
and an action is not a frame.

Must not know: SQL, the control wire, HTML.
"""

from __future__ import annotations

from typing import Any

from datasette.utils.asgi import Response

from acp_proxy.read import controls
from acp_proxy.web.doors import Doors


async def controls_view(doors: Doors, datasette: Any, request: Any) -> Response:
    run_id = int(request.url_vars["run_id"])
    redactor = doors.redactor(datasette)

    def read(conn: Any) -> dict[str, Any]:
        found = controls.of_run(conn, run_id, redactor)
        if found is None:
            raise LookupError(f"no run {run_id}")
        return {"run_id": run_id, **found}

    return await doors.read_json(datasette, read)


ROUTES = [(r"^/runs/(?P<run_id>[0-9]{1,18})/controls\.json$", controls_view)]
