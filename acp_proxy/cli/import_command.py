"""``acp-proxy import``: a log written by another tool (or an acp-proxy export) becomes a run.

Owns: the command's options and what it says. The formats and how a log becomes a run are
``importers``'.

Must not know: how a format is parsed or how a run is recorded.
"""

from __future__ import annotations

from pathlib import Path

import click

from acp_proxy.cli.options import FilePath, db_option

FORMATS = ("jsonl", "jsons", "conductor-log", "inspector", "jetbrains")
"""The formats of ``importers`` (spelled here too: the parsers are imported only when a log is)."""


@click.command("import")
@db_option
@click.option(
    "-f",
    "--format",
    "fmt",
    type=click.Choice(["auto", *FORMATS]),
    default="auto",
    show_default=True,
    help="jsonl: an acp-proxy export (or `frames --jsonl`); jsons: an ACP conductor trace; "
    "conductor-log: an ACP conductor's --debug log; "
    "inspector: an ACP Inspector trace; jetbrains: a JetBrains IDE's acp-transport.log.",
)
@click.argument("file", type=FilePath(dir_okay=False))
def import_log(db_path: Path | None, fmt: str, file: Path) -> None:
    """Turn the log FILE into a run, so that show, check, stats, replay, diff and the UI read it.

    The run is recorded the way a live run is (sessions, turns, pairing and latencies come out
    the same), and says where it came from: the file, its format, and what that format cannot
    say (stderr, exact bytes, timing), which is left unknown rather than invented. The new run
    ids go to stdout, one a line.

    \b
    Examples:
        acp-proxy import ~/Library/Logs/JetBrains/WebStorm2025.3/acp/acp-transport.log
        acp-proxy import trace.jsons && acp-proxy show last
        acp-proxy export last -o run.jsonl && acp-proxy import --db other.db run.jsonl
    """
    from acp_proxy.locations import default_db_path
    from acp_proxy.record import importers

    target = db_path if db_path is not None else default_db_path()

    def warn(text: str) -> None:
        click.echo(f"acp-proxy: {text}", err=True)

    found, runs, skipped = importers.import_file(target, file, fmt, warn)  # a mistake: one line, exit 2
    for run in runs:
        unknown = f"; unknown: {', '.join(run.unknown)}" if run.unknown else ""
        click.echo(f"acp-proxy: imported {file} ({found}) as run {run.run_id}: {run.frames} lines{unknown}", err=True)
        click.echo(str(run.run_id))
    if skipped:
        click.echo(f"acp-proxy: skipped {skipped} line(s) that were not frames", err=True)
