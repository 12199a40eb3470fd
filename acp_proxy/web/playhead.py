"""The playhead: a run's conversation rebuilt up to one frame, stepped frame by frame.

Owns: ``/runs/ID/playhead.json?seq=N`` — the read layer's fold up to frame N
(``read.playhead``), shaped as the page draws a conversation, with the frame at the playhead
and the places to step to (first, previous, next, last); or, while a first visit far into a
long run is still folding, ``folding`` with how far it got (the page asks again). The server's
checkpoints (``read.checkpoints.Cache``, one per server) make later steps cheap. The page asks
again at each step; there is no second model of the conversation in the browser.

Must not know: SQL, the fold's rules, HTML.
"""

from __future__ import annotations

import weakref
from typing import Any

from datasette.utils.asgi import Response

from acp_proxy.read import checkpoints as cp
from acp_proxy.read import playhead as ph
from acp_proxy.web import model, timeline
from acp_proxy.web.doors import Doors, number

_CACHES: weakref.WeakKeyDictionary[Any, cp.Cache] = weakref.WeakKeyDictionary()
"""Each server's checkpoints (a Datasette instance is one server)."""


def _cache(datasette: Any) -> cp.Cache:
    found = _CACHES.get(datasette)
    if found is None:
        found = _CACHES[datasette] = cp.Cache()
    return found


async def playhead_view(doors: Doors, datasette: Any, request: Any) -> Response:
    run_id = int(request.url_vars["run_id"])
    raw = request.args.get("seq")
    seq = number(raw)
    if raw not in (None, "") and seq is None:
        return doors.error(f"seq must be a frame number, not {raw[:40]!r}", True, 400)
    redactor = doors.redactor(datasette)
    cache = _cache(datasette)

    def read(conn: Any) -> dict[str, Any]:
        at = ph.at(conn, run_id, seq, redactor, cache=cache, shape=model._conversation_json)
        if isinstance(at, ph.Folding):
            return {"folding": True, "run_id": run_id, "seq": at.seq, "position": at.position, "total": at.total}
        return {
            "run_id": at.run_id,
            "seq": at.seq,
            "first": at.first,
            "previous": at.previous,
            "next": at.next,
            "last": at.last,
            "position": at.position,
            "total": at.total,
            "frame": None if at.frame is None else timeline.timeline_row(at.frame),
            "conversations": at.conversations,
            "redacted": redactor.enabled,
        }

    return await doors.read_json(datasette, read, {ph.TooLong: 413})


ROUTES = [(r"^/runs/(?P<run_id>[0-9]{1,18})/playhead\.json$", playhead_view)]
