"""The ``acp-proxy`` click group and what its commands share.

Owns: the group (its help, its version option, the one-line errors of ``support.Group``), finding
the database, opening it read-only, resolving a REF, parsing a filter, writing JSON or JSONL
when asked, and the small renderings several commands use (peers, argv, one line per frame).
The commands live in their own modules (``run_command``, ``lists``, ``show_diff``,
``frames_tail``, ``export_command``, ``check_command``), registered by ``commands``.

Must not know: how frames are relayed, decoded or stored; SQL (answers come from ``read/``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import click

from acp_proxy import __version__
from acp_proxy.cli.support import (
    Group,
    Output,
)
from acp_proxy.errors import UsageError


def resolve_db(db_path: Path | None) -> Path:
    from acp_proxy.locations import default_db_path
    from acp_proxy.store import database as store

    path = db_path if db_path is not None else default_db_path()
    try:
        str(path).encode("utf-8")
    except UnicodeEncodeError:
        raise UsageError(f"the database path {str(path)!r} is not valid UTF-8, which SQLite needs") from None
    store.refuse_special_file(path)
    return path


def filter_help() -> str:
    from acp_proxy.cli.views import FRAME_LEGEND
    from acp_proxy.protocol.filters import HELP

    return FRAME_LEGEND + "\n\n" + HELP


def faults_help_text() -> str:
    from acp_proxy.faults.rules import HELP

    return HELP


@click.group(name="acp-proxy", cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="acp-proxy")
def cli() -> None:
    """See, record and break the conversation between an editor and an ACP agent.

    Put `acp-proxy run --` in front of the agent command in your editor's settings; every
    frame is relayed byte for byte and recorded to SQLite. Then read the recording back with
    the query commands. A mistake in any option is one line on stderr and exit status 2.
    """


# -- query helpers ---------------------------------------------------------------------------


def open_db(db_path: Path | None) -> Any:
    """The database, read-only, dead runs recorded first; runs still being recorded are said
    (their recorder may outlive its proxy: what it committed is shown, more is coming)."""
    from acp_proxy.cli.support import say
    from acp_proxy.record import recovery

    path = resolve_db(db_path)
    db = recovery.open_for_reading(path)
    live = recovery.runs_being_recorded(path)
    if live:
        runs = "1 run is" if live == 1 else f"{live} runs are"
        say(f"{runs} still being recorded: what is committed so far is shown")
    return db


def resolve_ref(db: Any, text: str) -> Any:
    from acp_proxy.read import queries

    return queries.resolve(db, text)


def runs_of(db: Any, text: str) -> tuple[Any, str, list[int]]:
    """A REF, or ``all``: (the resolved Ref or None, how to name it, its run ids)."""
    from acp_proxy.read import queries

    return queries.resolve_scope(db, text)


def parse_filter(words: tuple[str, ...]) -> Any:
    from acp_proxy.protocol import filters

    return filters.parse(" ".join(words))


def _json_array(out: Any, values: Iterable[Any]) -> None:
    """A JSON array written as it is produced, so a million frames never sit in memory."""
    from acp_proxy.cli.views import encode_json

    out.data(b"[")
    for n, value in enumerate(values):
        out.data((b"," if n else b"") + encode_json(value))
    out.data(b"]\n")


def emit(out: Any, output: Output, values: Iterable[Any]) -> bool:
    """Write ``values`` as JSON or JSONL when asked; False when the caller renders a table."""
    from acp_proxy.cli import views

    if output.jsonl:
        views.write_jsonl(out, values)
        return True
    if output.json:
        _json_array(out, values)
        return True
    return False


def _name(name: str | None, version: str | None) -> str:
    return f"{name} {version}" if name and version else name or ""


def peers(run: dict[str, Any]) -> str:
    return " ⇄ ".join(
        filter(None, [_name(run["client_name"], run["client_version"]), _name(run["agent_name"], run["agent_version"])])
    )


def argv_text(argv: str | None) -> str:
    try:
        words = json.loads(argv or "[]")
    except ValueError:
        return argv or ""
    return " ".join(str(w) for w in words) if isinstance(words, list) else str(words)


def frame_object(row: dict[str, Any]) -> dict[str, Any]:
    from acp_proxy.read import exports

    return exports.frame_object(row)


def frame_lines(out: Any, db: Any, rows: Iterable[dict[str, Any]], *, verbose: bool) -> None:
    from acp_proxy.cli import views
    from acp_proxy.read import queries

    lines = views.FrameLines(
        out, session_len=queries.session_prefix_length(db), seq_width=queries.seq_width(db), verbose=verbose
    )
    if out.terminal:
        out.line(out.paint(lines.header(), "bold"))
    for row in rows:
        out.line(lines.line(row))
