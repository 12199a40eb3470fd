"""What a feature route of the inspector needs from the plugin, handed to it as ``Doors``.

Owns: ``Doors`` (reading the recording on Datasette's thread, the redactors, JSON and error
answers, pages, the guard, the recording's file, and ``read_json``: a read answered as JSON, as
a 404 or with the status its caller gives an exception), ``bind`` (a feature's view as a Datasette
route handler) and ``number`` (a query parameter read as a frame or run number). The feature
modules (``playhead``, ``session_panel``, ``search``, ``actions``) import this, never ``plugin``:
the plugin builds the doors and hands them over, so there is no import cycle.

Must not know: SQL, the fold, click; what any feature shows.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from datasette.utils.asgi import Response

from acp_proxy.protocol.redact import Redactor
from acp_proxy.read import frames as selections
from acp_proxy.web.guard import Guard

Handler = Callable[..., Awaitable[Response]]
View = Callable[["Doors", Any, Any], Awaitable[Response]]


@dataclass(frozen=True)
class Doors:
    read: Callable[[Any, Callable[[Any], Any]], Awaitable[Any]]
    """``await read(datasette, fn)``: ``fn(conn)`` on Datasette's read thread, unmasked (the
    caller masks); raises the model's ``NotFound`` when no recording is attached."""
    redactor: Callable[[Any], Redactor]
    primed: Callable[[Any], selections.Primed]
    json: Callable[..., Response]
    """``json(data, status=200)``."""
    error: Callable[..., Response]
    """``error(message, as_json, status=404)``."""
    page: Callable[..., Response]
    """``page(template, **context)``."""
    common: Callable[[Any, Redactor], dict[str, Any]]
    guard: Callable[[Any], Guard | None]
    recording: Callable[[Any], Path | None]
    """The recording's file, for the few writes a person asks for (marks)."""
    not_found: type[Exception]

    async def read_json(
        self,
        datasette: Any,
        read: Callable[[Any], dict[str, Any]],
        refusals: Mapping[type[Exception], int] | None = None,
    ) -> Response:
        """A feature's JSON route once it has parsed its request: ``read(conn)`` on Datasette's
        read thread, answered as ``{"ok": true, ...what it read}``; what it names that is not
        there (its ``LookupError``) or no recording attached is a 404 JSON error, and an
        exception ``refusals`` names is a JSON error with its status (a fold too long: 413)."""

        refused = dict(refusals or {})

        def guarded(conn: Any) -> dict[str, Any]:
            try:
                return read(conn)
            except LookupError as exc:
                raise self.not_found(str(exc)) from None

        try:
            data = await self.read(datasette, guarded)
        except self.not_found as exc:
            return self.error(str(exc), True)
        except tuple(refused) as exc:
            return self.error(str(exc), True, next(code for kind, code in refused.items() if isinstance(exc, kind)))
        return self.json({"ok": True, **data})


def bind(doors: Doors, view: View) -> Handler:
    async def handler(datasette: Any, request: Any) -> Response:
        return await view(doors, datasette, request)

    return handler


def number(text: str | None) -> int | None:
    """A query parameter that should be a frame or run number; None for anything else."""
    return int(text) if text and text.isascii() and text.isdigit() and len(text) < 19 else None
