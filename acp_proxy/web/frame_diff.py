"""The frame-level diff of two runs, and the runs a diff page can pick from.

Owns: ``/diff/L/R/frames.json`` — ``read.frame_diff`` (frames aligned by what they are, the
field changes of each aligned pair, masked) — for two runs named by id. The run pickers of the
page read ``/search/runs.json`` (``search``).

Must not know: SQL, how frames are aligned, HTML.
"""

from __future__ import annotations

from typing import Any

from datasette.utils.asgi import Response

from acp_proxy.read import frame_diff as fdiff
from acp_proxy.web.doors import Doors


async def frames_view(doors: Doors, datasette: Any, request: Any) -> Response:
    left, right = int(request.url_vars["left"]), int(request.url_vars["right"])
    redactor = doors.redactor(datasette)
    return await doors.read_json(datasette, lambda conn: fdiff.frame_diff(conn, left, right, redactor))


ROUTES = [(r"^/diff/(?P<left>[0-9]{1,18})/(?P<right>[0-9]{1,18})/frames\.json$", frames_view)]
