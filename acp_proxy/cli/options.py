"""Option bundles that several commands share, as plain click decorators (the sqlite-utils way).

Owns: the spelling and help of ``--db`` and of the redaction options. Must not know what a
command does with them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

DB_HELP = "Database file. Default: $ACP_PROXY_DB, else $XDG_DATA_HOME/acp-proxy/acp-proxy.db."


class FilePath(click.Path):
    """A file name option or argument (a ``Path``): one that no file can have (a NUL, a lone
    surrogate) is a usage error rather than the ``ValueError`` click's own checks would raise."""

    def __init__(self, *, dir_okay: bool = True) -> None:
        super().__init__(dir_okay=dir_okay, path_type=Path)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            return super().convert(value, param, ctx)
        except ValueError:  # os.stat's "embedded null byte", or UnicodeEncodeError
            self.fail(f"{str(value)!r} cannot be a file name", param, ctx)


def db_option(func: click.decorators.FC) -> click.decorators.FC:
    return click.option("--db", "db_path", type=FilePath(), metavar="PATH", default=None, help=DB_HELP)(func)


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
