"""The session panel: one session, addressed by run and session id, as a panel of facts.

Owns: ``/runs/ID/sessions/SESSION.json`` — both sides' names and capabilities, the protocol
version, the session's mode, model, usage, state and turns (``read.session_panel``, masked).
Session ids repeat across runs (the SDK example agent always says ``0``): the run says which.

Must not know: SQL, the fold's rules, HTML.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

from datasette.utils.asgi import Response

from acp_proxy.read import session_panel as sp
from acp_proxy.web.doors import Doors


async def session_view(doors: Doors, datasette: Any, request: Any) -> Response:
    run_id = int(request.url_vars["run_id"])
    session_id = unquote(request.url_vars["session"])
    redactor = doors.redactor(datasette)
    return await doors.read_json(datasette, lambda conn: sp.panel(conn, run_id, session_id, redactor))


async def run_sessions_view(doors: Doors, datasette: Any, request: Any) -> Response:
    run_id = int(request.url_vars["run_id"])
    return await doors.read_json(
        datasette, lambda conn: {"run_id": run_id, "sessions": sp.sessions_of_run(conn, run_id)}
    )


ROUTES = [
    (r"^/runs/(?P<run_id>[0-9]{1,18})/sessions\.json$", run_sessions_view),
    (r"^/runs/(?P<run_id>[0-9]{1,18})/sessions/(?P<session>[^/]+?)\.json$", session_view),
]
