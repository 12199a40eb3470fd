"""``acp-proxy mark`` and ``unmark``: a person's marks and comments on frames.

Owns: the commands, their help and what they print. Must not know: SQL (``read.marks`` finds the
frame, ``store`` writes the mark; only the recorder writes frames, a mark is an annotation
beside them, on a live run as on a finished one).
"""

from __future__ import annotations

from pathlib import Path

import click

from acp_proxy.cli.group import cli, open_db, resolve_db
from acp_proxy.cli.options import db_option
from acp_proxy.cli.support import TEXT
from acp_proxy.errors import UsageError


@cli.command()
@db_option
@click.argument("frame", type=TEXT, metavar="RUN:SEQ")
@click.option("--note", type=TEXT, default=None, metavar="TEXT", help="A comment on the mark (replaces the last).")
def mark(db_path: Path | None, frame: str, note: str | None) -> None:
    """Mark frame SEQ of RUN (a run id or `last`), with a comment if given.

    `acp-proxy frames marked` then finds it, `frames 'comment:"TEXT"'` by its comment.

    \b
    Examples:
        acp-proxy mark last:12 --note "the agent ignores the cancel here"
        acp-proxy frames marked
    """
    from acp_proxy.read.marks import frame_ref
    from acp_proxy.store import database as store

    run_id, seq = frame_ref(open_db(db_path), frame)
    store.set_mark(resolve_db(db_path), run_id, seq, note)
    click.echo(f"marked {run_id}:{seq}" + (f" ({note})" if note else ""))


@cli.command()
@db_option
@click.argument("frame", type=TEXT, metavar="RUN:SEQ")
def unmark(db_path: Path | None, frame: str) -> None:
    """Remove the mark (and its comment) from frame SEQ of RUN.

    \b
    Example:
        acp-proxy mark last:12 && acp-proxy unmark last:12
    """
    from acp_proxy.read.marks import frame_ref
    from acp_proxy.store import database as store

    run_id, seq = frame_ref(open_db(db_path), frame)
    if not store.remove_mark(resolve_db(db_path), run_id, seq):
        raise UsageError(f"frame {run_id}:{seq} is not marked")
    click.echo(f"unmarked {run_id}:{seq}")
