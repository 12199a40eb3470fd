"""The Datasette plugin: the inspector's routes, its lock, and Datasette's table descriptions.

Owns: Datasette's hooks — ``register_routes`` (``/`` runs and sessions, ``/runs/ID``,
``/sessions/ID``, ``/runs/ID/frames/SEQ``, a page of frames (``/runs/ID/frames.json``,
``/sessions/ID/frames.json``), ``/diff/A/B``, each with a ``.json`` twin, and the
page assets under ``/-/acp-proxy/``), ``asgi_wrapper`` (the token and Host checks of
``acp-proxy ui``; under plain ``datasette``, redaction of Datasette's own JSON and CSV),
``render_cell`` (plain ``datasette``: redaction of its HTML cells), ``prepare_connection``
(under ``acp-proxy ui``: masking at the source, ``masking``, and connections that cannot
write), ``handle_exception`` (under ``acp-proxy ui``: each error one line on stderr, a 4xx page,
never a traceback) and ``get_metadata`` (what each table, view and column means). Registered
on Datasette's ``datasette`` entry point, so ``datasette acp-proxy.db`` serves the same pages
(without the token, which only ``acp-proxy ui`` sets; Datasette itself listens on 127.0.0.1
unless told otherwise).

Must not know: SQL or the fold — every page's data comes from ``model`` — nor click.

Settings, from Datasette's plugin configuration (``acp-proxy ui`` writes them; with plain
``datasette``, put them in ``metadata.json`` under ``plugins`` -> ``acp-proxy``):
``redact`` (a list of ``--redact`` rules) and ``no_redact`` (true to show everything).
"""

from __future__ import annotations

import json
import re
import sys
from importlib.resources import files
from pathlib import Path
from typing import Any

import jinja2
from datasette import hookimpl
from datasette.utils.asgi import Response, asgi_static

from acp_proxy.protocol.redact import Redactor
from acp_proxy.read import frames as selections
from acp_proxy.read import live
from acp_proxy.store.database import SqlRefused
from acp_proxy.web import doors, features, masking, model
from acp_proxy.web import guard as guard_mod
from acp_proxy.web.metadata import TABLES

PLUGIN = "acp-proxy"
HERE = Path(str(files("acp_proxy.web")))
STATIC = HERE / "static"
ASSETS = "/-/acp-proxy/"
UI_ATTRIBUTE = "_acp_proxy_ui"  # set on the Datasette object by `acp-proxy ui`: a guard.Guard

# Scripts and styles come only from this server; Vega compiles chart expressions with Function,
# hence 'unsafe-eval'; no request may leave for another host.
CSP = (
    "default-src 'self'; script-src 'self' 'unsafe-eval'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)

_OWN = re.compile(r"^/(?:\.json)?$|^/(?:runs|sessions|diff|search|actions)(?:/|$)|^/-/acp-proxy/")

_templates = jinja2.Environment(
    loader=jinja2.FileSystemLoader(str(HERE / "templates")),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
)


def own_path(path: str) -> bool:
    """The inspector's pages and assets (everything else is Datasette's)."""
    return _OWN.match(path) is not None


def redactor_for(datasette: Any) -> Redactor:
    config = datasette.plugin_config(PLUGIN) or {}
    rules = config.get("redact") or []
    if isinstance(rules, str):
        rules = [rules]
    return Redactor(rules, enabled=not config.get("no_redact"))


def recording_name(datasette: Any) -> str | None:
    """The attached database that is an acp-proxy recording (the first one, by name)."""
    for name, db in datasette.databases.items():
        if name.startswith("_") or db.is_memory:
            continue
        if getattr(db, "_acp_proxy_recording", None) is None:
            tables = set()
            try:
                conn = db.connect()
                try:
                    tables = {r[0] for r in conn.execute("select name from sqlite_master where type = 'table'")}
                finally:
                    conn.close()
            except Exception:  # an unreadable file is simply not ours
                tables = set()
            db._acp_proxy_recording = {"runs", "frames"} <= tables
        if db._acp_proxy_recording:
            return name
    return None


def primed_for(datasette: Any) -> selections.Primed:
    """The server's one ``Primed`` redactor for its settings: what it learnt reading frames in
    relay order is kept between requests (a page or a frame of a long run reads the frames
    before it once, not on every request)."""
    redactor = redactor_for(datasette)
    key = (tuple(r.text for r in redactor.rules), redactor.enabled)
    cache = datasette.__dict__.setdefault("_acp_proxy_primed", {})
    if key not in cache:
        cache[key] = selections.Primed(redactor)
    primed: selections.Primed = cache[key]
    return primed


def journals_for(datasette: Any) -> live.Journals | None:
    """The server's followers of live runs' journals (``read.live``): a live page sees a frame
    once the relay journaled it, not once the recorder committed it."""
    name = recording_name(datasette)
    if name is None:
        return None
    path = getattr(datasette.get_database(name), "path", None)
    cache = datasette.__dict__.setdefault("_acp_proxy_journals", {})
    if path not in cache:
        cache[path] = live.Journals(path)
    journals: live.Journals = cache[path]
    return journals


async def _read(datasette: Any, fn: Any) -> Any:
    name = recording_name(datasette)
    if name is None:
        raise model.NotFound("no acp-proxy recording is attached (start with: acp-proxy ui --db PATH)")

    def read(conn: Any) -> Any:
        # These pages mask what they read themselves, with a whole conversation's context.
        with masking.verbatim():
            return fn(conn)

    return await datasette.get_database(name).execute_fn(read)


def _source_masked(datasette: Any) -> bool:
    """Whether Datasette's connections mask at the source (``acp-proxy ui``, masking on)."""
    return getattr(datasette, UI_ATTRIBUTE, None) is not None and redactor_for(datasette).enabled


def _page(template: str, **context: Any) -> Response:
    body = _templates.get_template(template).render(assets=ASSETS, **context)
    return Response.html(body, headers={"content-security-policy": CSP})


def _json(data: Any, status: int = 200) -> Response:
    return Response(
        json.dumps(data, ensure_ascii=False, default=str),
        status=status,
        content_type="application/json; charset=utf-8",
        headers={"content-security-policy": CSP},
    )


def _error(message: str, as_json: bool, status: int = 404) -> Response:
    if as_json:
        return _json({"ok": False, "error": message}, status)
    return Response.html(
        _templates.get_template("error.html").render(
            assets=ASSETS, message=message, status=status, title=str(status), database=None, redacted=True
        ),
        status=status,
        headers={"content-security-policy": CSP},
    )


def _common(datasette: Any, redactor: Redactor) -> dict[str, Any]:
    return {"database": recording_name(datasette), "redacted": redactor.enabled}


# -- views -------------------------------------------------------------------------------------


async def index_view(datasette: Any, request: Any) -> Response:
    as_json = bool(request.url_vars.get("as_json"))
    redactor = redactor_for(datasette)
    if not as_json:
        return _page("index.html", title="Runs and sessions", **_common(datasette, redactor))
    before = _int(request.args.get("before"), 0) or None
    limit = max(1, min(_int(request.args.get("limit"), 100), 1000))
    try:
        older = request.args.get("sessions_before")
        data = await _read(
            datasette, lambda conn: model.index(conn, redactor, limit=limit, before=before, sessions_before=older)
        )
    except model.NotFound as exc:
        return _error(str(exc), True)
    return _json({"ok": True, **data})


async def conversation_view(datasette: Any, request: Any) -> Response:
    as_json = bool(request.url_vars.get("as_json"))
    kind = "run" if "run_id" in request.url_vars else "session"
    ident = request.url_vars["run_id"] if kind == "run" else _unquote(request.url_vars["session"])
    redactor = redactor_for(datasette)
    if not as_json:
        title = f"Run {ident}" if kind == "run" else f"Session {ident}"
        return _page(
            "conversation.html",
            title=title,
            kind=kind,
            ident=ident,
            filter=request.args.get("filter") or "",
            **_common(datasette, redactor),
        )
    parts = request.args.get("parts")
    kwargs: dict[str, Any] = {
        "filter_text": request.args.get("filter"),
        "after": request.args.get("after"),
        "limit": _int(request.args.get("limit"), model.DEFAULT_LIMIT),
        "journals": journals_for(datasette),
        "primed": primed_for(datasette),
    }
    if parts:
        kwargs["parts"] = [p for p in parts.split(",") if p]
    try:
        data = await _read(datasette, lambda conn: model.conversation(conn, kind, ident, redactor, **kwargs))
    except model.NotFound as exc:
        return _error(str(exc), True)
    return _json({"ok": True, **data})


async def frames_view(datasette: Any, request: Any) -> Response:
    """``/runs/ID/frames.json`` and ``/sessions/ID/frames.json``: a page of the virtual timeline."""
    kind = "run" if "run_id" in request.url_vars else "session"
    ident = request.url_vars["run_id"] if kind == "run" else _unquote(request.url_vars["session"])
    redactor, primed = redactor_for(datasette), primed_for(datasette)
    kwargs: dict[str, Any] = {
        "filter_text": request.args.get("filter"),
        "offset": _int(request.args.get("offset"), 0),
        "after": request.args.get("after"),
        "limit": _int(request.args.get("limit"), model.PAGE_LIMIT),
        "at": request.args.get("at"),
        "journals": journals_for(datasette),
    }
    try:
        data = await _read(datasette, lambda conn: model.frames_page(conn, kind, ident, redactor, primed, **kwargs))
    except model.NotFound as exc:
        return _error(str(exc), True)
    return _json({"ok": True, **data})


async def frame_view(datasette: Any, request: Any) -> Response:
    as_json = bool(request.url_vars.get("as_json"))
    run_id, seq = int(request.url_vars["run_id"]), int(request.url_vars["seq"])
    if not as_json:
        return Response.redirect(f"/runs/{run_id}#frame={run_id}:{seq}")
    redactor, primed = redactor_for(datasette), primed_for(datasette)
    try:
        data = await _read(datasette, lambda conn: model.frame(conn, run_id, seq, redactor, primed))
    except model.NotFound as exc:
        return _error(str(exc), True)
    return _json({"ok": True, **data})


async def diff_view(datasette: Any, request: Any) -> Response:
    as_json = bool(request.url_vars.get("as_json"))
    left, right = _unquote(request.url_vars["left"]), _unquote(request.url_vars["right"])
    redactor = redactor_for(datasette)
    if not as_json:
        title = f"Diff {left} ⇄ {right}"
        return _page("diff.html", title=title, left=left, right=right, **_common(datasette, redactor))
    try:
        data = await _read(datasette, lambda conn: model.diff(conn, left, right, redactor))
    except model.NotFound as exc:
        return _error(str(exc), True)
    return _json({"ok": True, **data})


def _unquote(text: str) -> str:
    from urllib.parse import unquote

    return unquote(text)


def _int(text: str | None, default: int) -> int:
    return int(text) if text and text.isdigit() and len(text) < 10 else default


# -- hooks -------------------------------------------------------------------------------------

_JSON = r"(?P<as_json>\.json)?$"


def _recording_path(datasette: Any) -> Path | None:
    name = recording_name(datasette)
    path = None if name is None else datasette.get_database(name).path
    return Path(path) if path else None


DOORS = doors.Doors(
    read=lambda datasette, fn: _read(datasette, fn),
    redactor=lambda datasette: redactor_for(datasette),
    primed=lambda datasette: primed_for(datasette),
    json=lambda data, status=200: _json(data, status),
    error=lambda message, as_json, status=404: _error(message, as_json, status),
    page=lambda template, **context: _page(template, **context),
    common=lambda datasette, redactor: _common(datasette, redactor),
    guard=lambda datasette: getattr(datasette, UI_ATTRIBUTE, None),
    recording=_recording_path,
    not_found=model.NotFound,
)
"""What the feature routes (``features``: playhead, session panel, search, actions) use of this
module, handed to them so that they never import it."""


@hookimpl
def register_routes(datasette: Any) -> list[tuple[str, Any]]:
    return [
        *features.routes(DOORS),
        (r"^/" + _JSON, index_view),
        (r"^/runs/(?P<run_id>[0-9]{1,18})/frames/(?P<seq>[0-9]{1,18})" + _JSON, frame_view),
        (r"^/runs/(?P<run_id>[0-9]{1,18})/frames\.json$", frames_view),
        (r"^/sessions/(?P<session>[^/]+?)/frames\.json$", frames_view),
        (r"^/runs/(?P<run_id>[0-9]{1,18})" + _JSON, conversation_view),
        (r"^/sessions/(?P<session>[^/]+?)" + _JSON, conversation_view),
        (r"^/diff/(?P<left>[^/]+)/(?P<right>[^/]+?)" + _JSON, diff_view),
        (r"^/-/acp-proxy/(?P<path>.+)$", asgi_static(STATIC)),
    ]


@hookimpl
def asgi_wrapper(datasette: Any) -> Any:
    def wrapper(app: Any) -> Any:
        # Asked at each request: Datasette builds its app (for its test client) before
        # `acp-proxy ui` has set the guard on it.
        # `acp-proxy ui` masks at the source (``masking``); plain `datasette` masks its answers.
        return guard_mod.wrap(
            app,
            lambda: getattr(datasette, UI_ATTRIBUTE, None),
            lambda: None if _source_masked(datasette) else redactor_for(datasette),
            own_paths=own_path,
        )

    return wrapper


@hookimpl
def render_cell(value: Any, column: str, table: str | None, database: str, datasette: Any) -> str | None:
    if not isinstance(value, str) or _source_masked(datasette):
        return None
    redactor = redactor_for(datasette)
    masked = redactor.raw(value)
    return None if masked is value else masked  # a str is escaped by Datasette's template


@hookimpl
def prepare_connection(conn: Any, database: str, datasette: Any) -> None:
    # `acp-proxy ui` promises a read-only inspector: Datasette already opens files mode=ro and
    # runs only SELECTs; this closes the last door (a write through any other code path).
    if getattr(datasette, UI_ATTRIBUTE, None) is not None and not database.startswith("_"):
        masking.install(conn, redactor_for(datasette))
        conn.execute("PRAGMA query_only = 1")


DATASETTE_HANDLER = "datasette.handle_exception"


def quiet_errors() -> None:
    """Unplug Datasette's own error handler (for `acp-proxy ui`): it prints a traceback, with
    local variables, on stdout, even when another handler answers (each one is run). This
    plugin's answers instead, for every Datasette of the process."""
    from datasette.plugins import pm

    pm.set_blocked(DATASETTE_HANDLER)


@hookimpl
def handle_exception(datasette: Any, request: Any, exception: Exception) -> Any:
    """Under `acp-proxy ui`: Datasette's errors as one line on stderr and a plain page (its own
    handler prints a traceback, with local variables, on stdout)."""
    from datasette.plugins import pm

    if getattr(datasette, UI_ATTRIBUTE, None) is None and not pm.is_blocked(DATASETTE_HANDLER):
        return None
    from datasette.utils.asgi import Base400
    from datasette.views.base import DatasetteError

    if isinstance(exception, SqlRefused) or masking.refused(exception):
        status, message = 403, masking.REFUSED
    elif isinstance(exception, Base400):
        status, message = exception.status, str(exception.args[0] if exception.args else exception)
    elif isinstance(exception, DatasetteError):
        # Datasette says 500 for some requests it cannot answer (a sort by a missing column).
        status, message = (400 if exception.status >= 500 else exception.status), exception.message
        if exception.message_is_html:
            message = re.sub(r"<textarea.*?</textarea>|<[^>]*>", " ", message, flags=re.DOTALL)
    else:
        # Datasette fails on some requests it should refuse (a blob of an integer column); the
        # request is what cannot be answered, and a 500 would say the server is broken.
        status, message = 400, f"cannot answer this request ({type(exception).__name__}: {exception})"
    message = " ".join(str(message).split()) or str(status)
    path = request.path
    said = message.removeprefix("acp-proxy: ")[:300]
    sys.stderr.write(f"acp-proxy: {request.method} {path[:200]}: {status} {said}\n")
    sys.stderr.flush()
    return _error(message, path.endswith(".json"), status)


@hookimpl
def get_metadata(datasette: Any, key: str, database: str | None, table: str | None) -> dict[str, Any]:
    names = [n for n in datasette.databases if not n.startswith("_")]
    return {"databases": {name: {"tables": TABLES} for name in names}}
