"""Option bundles that several commands share, as plain click decorators (the sqlite-utils way).

Owns: the spelling and help of ``--db`` and of the redaction options. Must not know what a
command does with them.
"""

from __future__ import annotations

from pathlib import Path

import click

DB_HELP = "Database file. Default: $ACP_PROXY_DB, else $XDG_DATA_HOME/acp-proxy/acp-proxy.db."


def db_option(func: click.decorators.FC) -> click.decorators.FC:
    return click.option("--db", "db_path", type=click.Path(dir_okay=False, path_type=Path), default=None, help=DB_HELP)(
        func
    )


def redact_options(func: click.decorators.FC) -> click.decorators.FC:
    """``--redact RULE`` (repeatable) and ``--no-redact``, as ``redact_rules`` and ``no_redact``."""
    func = click.option("--no-redact", is_flag=True, help="Show secrets as recorded (they are masked by default).")(
        func
    )
    return click.option(
        "--redact",
        "redact_rules",
        multiple=True,
        metavar="RULE",
        help="Also mask what this JSON path (params._meta.token) or regular expression matches (repeatable).",
    )(func)
