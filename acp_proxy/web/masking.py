"""Masking at the source for ``acp-proxy ui``: every Datasette route reads masked text.

Owns: what a connection of the inspector sees when masking is on. On each connection, before
any query runs:

- each table of the recording is shadowed by a TEMP view of the same name whose text columns
  are masked by the same ``Redactor`` decision as every other door (``frames``: the columns of
  ``redact.FRAME_FIELDS``; ``runs``: as ``Redactor.run_row``; other tables: every text column).
  SQLite resolves an unqualified name to the TEMP schema first, so Datasette's table, row,
  blob, JSON, CSV, facet and SQL answers, and any function a query applies (``json_extract``,
  ``substr``, ``instr``, ``like``, ``hex`` ...), all run over masked text: there is no prefix
  oracle to probe;
- each view of the recording is shadowed too, by its own body, which then reads the shadows;
- an authorizer refuses a read of a masked column that does not come through its shadow
  (``main.frames.raw``, or a view of ``main`` reading it): the one thing masking cannot cover,
  closed with SQLite's refusal (raised past Datasette as the store's ``SqlRefused``, which
  the plugin answers with a 403 and one line).

Integer columns are not wrapped (indexes on them keep working, and they hold no text).

Must not know: HTTP, Datasette's pages, click. Plain ``sqlite3`` and the ``Redactor``.
"""

from __future__ import annotations

import json
import re
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from acp_proxy.protocol import wire
from acp_proxy.protocol.redact import FRAME_FIELDS, Redactor

FUNCTION = "acp_proxy_mask"
REFUSED = (
    "acp-proxy: this query reads recorded text past the masking (a main.TABLE column, or a view "
    "of main); name tables and views unqualified, or start ui --no-redact"
)
# What SQLite says when an authorizer denies a read: when the statement is prepared ("access to
# T.C is prohibited"), or when a denial surfaces later ("not authorized").
REFUSAL_MARKS = ("is prohibited", "not authorized")
_NUMERIC = ("INT", "REAL", "FLOA", "DOUB", "NUMERIC")
_VIEW_BODY = re.compile(
    r"^\s*CREATE\s+VIEW\s+(?:IF\s+NOT\s+EXISTS\s+)?(?:\[[^\]]*\]|\"(?:[^\"]|\"\")*\"|`[^`]*`|\S+)"
    r"\s*(?P<columns>\([^)]*\))?\s*AS\s+(?P<body>.*)$",
    re.IGNORECASE | re.DOTALL,
)
_local = threading.local()


@contextmanager
def verbatim() -> Iterator[None]:
    """Within this block, on this thread, the shadows pass values through unmasked: for the
    inspector's own pages, which mask what they read themselves (with context the SQL function
    lacks: a path rule's secret remembered across a whole conversation)."""
    before = getattr(_local, "verbatim", False)
    _local.verbatim = True
    try:
        yield
    finally:
        _local.verbatim = before


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _masker(redactor: Redactor) -> Callable[[str, Any], Any]:
    def mask(how: str, value: Any) -> Any:
        if value is None or getattr(_local, "verbatim", False):
            return value
        if isinstance(value, bytes):
            return redactor.line(value)
        if not isinstance(value, str):
            return value
        if how in FRAME_FIELDS:
            return redactor.frame_field(how, value)
        if how == "json" and value[:1] in ("[", "{"):
            try:
                decoded = wire.loads(value)
            except ValueError:
                return redactor.text(value)
            masked = redactor.value(decoded)
            return value if masked is decoded else json.dumps(masked, ensure_ascii=False)
        return redactor.text(value)

    return mask


def _how(table: str, column: str, declared: str) -> str | None:
    """How a column is masked (the ``how`` its shadow passes), None when it is not."""
    if any(word in declared.upper() for word in _NUMERIC):
        return None
    if table == "frames":
        return column if column in FRAME_FIELDS else None
    return "json" if table == "runs" else "text"


def install(conn: sqlite3.Connection, redactor: Redactor) -> None:
    """Shadow the tables and views of ``conn``'s main schema with masking TEMP views and refuse
    reads around them. Call before ``PRAGMA query_only``; a no-op when masking is off."""
    if not redactor.enabled:
        return
    conn.create_function(FUNCTION, 2, _masker(redactor), deterministic=True)
    objects = conn.execute(
        "select type, name, sql from main.sqlite_master where type in ('table', 'view') and name not like 'sqlite_%'"
    ).fetchall()
    masked: dict[str, set[str]] = {}
    for kind, name, _ in objects:
        if kind != "table":
            continue
        columns = conn.execute(f"pragma main.table_info({_quote(name)})").fetchall()
        parts = []
        for _, column, declared, *_rest in columns:
            how = _how(name, column, declared or "")
            if how is None:
                parts.append(_quote(column))
            else:
                masked.setdefault(name, set()).add(column)
                parts.append(f"{FUNCTION}('{how}', {_quote(column)}) as {_quote(column)}")
        conn.execute(f"create temp view {_quote(name)} as select {', '.join(parts)} from main.{_quote(name)}")
    for kind, name, sql in objects:
        match = _VIEW_BODY.match(sql or "") if kind == "view" else None
        if match is not None:
            # The view's own body, read in TEMP: its unqualified names are the shadows now. A view
            # that cannot be shadowed stays main's, and reading its masked columns is refused.
            try:
                conn.execute(f"create temp view {_quote(name)}{match['columns'] or ''} as {match['body']}")
            except sqlite3.Error:
                pass
    conn.set_authorizer(_authorizer(masked))


def _authorizer(masked: dict[str, set[str]]) -> Callable[[int, str | None, str | None, str | None, str | None], int]:
    def authorize(action: int, arg1: str | None, arg2: str | None, db: str | None, source: str | None) -> int:
        # Only the table's own shadow (a TEMP view with the table's name: main cannot hold a view
        # of that name beside the table) may read what it masks.
        if action == sqlite3.SQLITE_READ and db == "main" and arg1 in masked and source != arg1:
            return sqlite3.SQLITE_DENY if arg2 in masked[arg1] else sqlite3.SQLITE_OK
        return sqlite3.SQLITE_OK

    return authorize


def refused(exc: BaseException) -> bool:
    """Whether an SQLite error is this module's authorizer refusing a read."""
    return isinstance(exc, sqlite3.DatabaseError) and any(mark in str(exc) for mark in REFUSAL_MARKS)
