"""What a person may change from the inspector: marks on frames, and a live run's faults,
breakpoints and held frames. The only requests of ``acp-proxy ui`` that do anything.

Owns: the CSRF token (``/actions/csrf.json``: this server's own, derived from the launch token,
and Datasette's, whose cookie it sets) and the checks every change passes — ``acp-proxy ui``'s
guard (token and Host, checked before any route), a POST, both CSRF tokens in headers (ours in
``x-acp-proxy-csrf``; Datasette's ``x-csrftoken`` against its cookie, checked by Datasette), an
``Origin``, when sent, naming this server — then:

- ``POST /runs/ID/frames/SEQ/mark`` (JSON ``{"marked": true|false, "note": TEXT|null}``): the
  frame found as ``acp-proxy mark`` finds it (``read.marks.frame_ref``), the mark written as it
  writes it (``store.set_mark`` / ``remove_mark``);
- ``POST /runs/ID/control`` (JSON ``{"op": ..., ...}``, the ops of ``acp-proxy ctl``): carried
  out by ``relay.control_client.Controller``, the client ``ctl`` and the Python API use (held
  frames named by their ``frames`` seq).

Must not know: SQL, what a control request means, HTML. Under plain ``datasette`` (no guard, no
token) nothing here changes anything: 403.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from datasette.utils.asgi import Response

from acp_proxy.errors import UsageError
from acp_proxy.protocol import wire
from acp_proxy.read import marks
from acp_proxy.relay import control_client
from acp_proxy.store import database as store
from acp_proxy.web.doors import Doors
from acp_proxy.web.guard import Guard

HEADER = "x-acp-proxy-csrf"
MAX_BODY = 1024 * 1024
MAX_NOTE = 2000


def csrf_token(guard: Guard) -> str:
    """This server's CSRF token: a page reads it with the token's cookie; another site cannot."""
    return hmac.new(guard.token.encode(), b"acp-proxy ui csrf", hashlib.sha256).hexdigest()


async def csrf_view(doors: Doors, datasette: Any, request: Any) -> Response:
    guard = doors.guard(datasette)
    if guard is None:
        return doors.error("changes are made only through acp-proxy ui (it holds the token)", True, 403)
    return doors.json({"ok": True, "csrf": csrf_token(guard), "datasette_csrf": request.scope["csrftoken"]()})


async def _checked(doors: Doors, datasette: Any, request: Any) -> tuple[dict[str, Any] | None, Response | None]:
    """The request's JSON body once every check passed, or the answer that refuses it."""
    if request.method != "POST":
        return None, Response.text("acp-proxy: use POST\n", status=405, headers={"allow": "POST"})
    guard = doors.guard(datasette)
    if guard is None:
        return None, doors.error("changes are made only through acp-proxy ui (it holds the token)", True, 403)
    offered = request.headers.get(HEADER, "")
    if not hmac.compare_digest(offered.encode(), csrf_token(guard).encode()):
        return None, doors.error(f"a CSRF token is required ({HEADER}; GET /actions/csrf.json)", True, 403)
    origin = request.headers.get("origin")
    if origin:
        place = urlsplit(origin).netloc.lower()
        if place not in guard.allowed_hosts():
            return None, doors.error("this Origin may not change anything here", True, 403)
    body = await request.post_body()
    if len(body) > MAX_BODY:
        return None, doors.error("the request is too large", True, 413)
    try:
        data = wire.loads(body or b"{}")
    except (ValueError, RecursionError):
        return None, doors.error("the body must be a JSON object", True, 400)
    if not isinstance(data, dict):
        return None, doors.error("the body must be a JSON object", True, 400)
    return data, None


async def mark_view(doors: Doors, datasette: Any, request: Any) -> Response:
    data, refused = await _checked(doors, datasette, request)
    if refused is not None or data is None:
        return refused or doors.error("refused", True, 400)
    run_id, seq = int(request.url_vars["run_id"]), int(request.url_vars["seq"])
    marked = data.get("marked", True)
    note = data.get("note")
    if not isinstance(marked, bool) or (note is not None and not isinstance(note, str)):
        return doors.error('the body is {"marked": true|false, "note": TEXT or null}', True, 400)
    if note is not None:
        note = " ".join(note.split())[:MAX_NOTE] or None
    path = doors.recording(datasette)
    if path is None:
        return doors.error("no acp-proxy recording is attached", True, 404)

    def find(conn: Any) -> tuple[int, int]:
        try:
            return marks.frame_ref(conn, f"{run_id}:{seq}")
        except UsageError as exc:
            raise doors.not_found(str(exc)) from None

    try:
        place = await doors.read(datasette, find)
        if marked:
            await asyncio.to_thread(store.set_mark, path, place[0], place[1], note)
            changed = True
        else:
            changed = await asyncio.to_thread(store.remove_mark, path, place[0], place[1])
    except doors.not_found as exc:
        return doors.error(str(exc), True)
    except store.StoreError as exc:
        return doors.error(str(exc), True, 409)
    return doors.json({"ok": True, "frame": f"{place[0]}:{place[1]}", "marked": marked, "changed": changed})


OPS: dict[str, tuple[str, ...]] = {
    "held": (),
    "release": ("seq", "with"),
    "drop": ("seq",),
    "break": ("filter",),
    "breaks": (),
    "clear": (),
    "fault-add": ("rule",),
    "fault-list": (),
    "fault-remove": ("id",),
    "fault-clear": (),
}
"""The control requests the page may make, and what each carries (``acp-proxy ctl``'s)."""


def _control(path: Path, run_id: int, op: str, data: dict[str, Any]) -> Any:
    """``op`` carried out on run ``run_id``'s proxy (in a worker thread: it waits on a socket)."""
    controller = control_client.Controller(path, str(run_id))
    if op == "held":
        return controller.held()
    if op == "release":
        return controller.release(data["seq"], data.get("with"))
    if op == "drop":
        return controller.drop(data["seq"])
    if op == "break":
        return controller.break_(data["filter"])
    if op == "breaks":
        return controller.breaks()
    if op == "clear":
        return controller.clear()
    if op == "fault-add":
        return controller.fault_add(data["rule"])
    if op == "fault-list":
        return controller.faults()
    if op == "fault-remove":
        return controller.fault_remove(data["id"])
    return controller.fault_clear()


def _masked(item: dict[str, Any], redactor: Any) -> dict[str, Any]:
    masked = dict(item)
    if isinstance(item.get("frame"), str):
        masked["frame"] = redactor.raw(item["frame"])
    for name in ("rule", "filter"):
        if isinstance(item.get(name), str):
            masked[name] = redactor.text(item[name])
    return masked


def _arguments(op: str, data: dict[str, Any]) -> str | None:
    """What is wrong with ``data``'s arguments for ``op``, in a line; None when nothing."""
    for name in OPS[op]:
        value = data.get(name)
        if name in ("seq", "id"):
            if not isinstance(value, int) or isinstance(value, bool) or not 0 < value < 2**63:
                return f"{op} needs {name}: a positive number"
        elif name == "with":
            if value is not None and not isinstance(value, str):
                return "with is the edited frame's JSON text, or null"
        elif not isinstance(value, str) or not value.strip():
            return f"{op} needs {name}: text"
    return None


async def control_view(doors: Doors, datasette: Any, request: Any) -> Response:
    data, refused = await _checked(doors, datasette, request)
    if refused is not None or data is None:
        return refused or doors.error("refused", True, 400)
    run_id = int(request.url_vars["run_id"])
    op = data.get("op")
    if not isinstance(op, str) or op not in OPS:
        return doors.error(f"op is one of {', '.join(sorted(OPS))}", True, 400)
    wrong = _arguments(op, data)
    if wrong is not None:
        return doors.error(wrong, True, 400)
    path = doors.recording(datasette)
    if path is None:
        return doors.error("no acp-proxy recording is attached", True, 404)
    try:
        answer = await asyncio.to_thread(_control, path, run_id, op, data)
    except UsageError as exc:  # control_client.ControlFailed is one: a line for a person
        return doors.error(" ".join(str(exc).split())[:300], True, 409)
    # A held frame is shown as every frame is: masked (the proxy's answer has it verbatim);
    # a fault's rule and a breakpoint's filter as typed, so masked as their recorded rows are.
    redactor = doors.redactor(datasette)
    if redactor.enabled and isinstance(answer, list):
        answer = [_masked(item, redactor) if isinstance(item, dict) else item for item in answer]
    return doors.json({"ok": True, "op": op, "answer": answer})


ROUTES = [
    (r"^/actions/csrf\.json$", csrf_view),
    (r"^/runs/(?P<run_id>[0-9]{1,18})/frames/(?P<seq>[0-9]{1,18})/mark$", mark_view),
    (r"^/runs/(?P<run_id>[0-9]{1,18})/control$", control_view),
]
