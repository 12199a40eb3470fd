"""The command line: thin click commands over the library.

Owns: parsing arguments, turning user mistakes into one clear line and a non-zero exit
(``click.ClickException``), and choosing where output goes. Must not know: how frames are
relayed, decoded or stored — it calls ``relay``, ``store`` and the query modules for that.
"""

from __future__ import annotations

import re
from pathlib import Path

import click

from . import __version__, relay, store

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)?\s*$", re.IGNORECASE)
_SIZE_FACTORS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "ki": 1024,
    "kib": 1024,
    "m": 1000**2,
    "mb": 1000**2,
    "mi": 1024**2,
    "mib": 1024**2,
    "g": 1000**3,
    "gb": 1000**3,
    "gi": 1024**3,
    "gib": 1024**3,
}


class ByteSize(click.ParamType):
    """A size such as 16MiB, 300kB or 1048576."""

    name = "SIZE"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        match = _SIZE.match(str(value))
        unit = (match.group(2) or "").lower() if match else None
        if match is None or unit not in _SIZE_FACTORS:
            self.fail(f"{value!r} is not a size (examples: 1048576, 300kB, 16MiB)", param, ctx)
        return int(float(match.group(1)) * _SIZE_FACTORS[unit])


def db_option(func: click.decorators.FC) -> click.decorators.FC:
    return click.option(
        "--db",
        "db_path",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help="Database file. Default: $ACP_PROXY_DB, else $XDG_DATA_HOME/acp-proxy/acp-proxy.db.",
    )(func)


def resolve_db(db_path: Path | None) -> Path:
    return db_path if db_path is not None else store.default_db_path()


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="acp-proxy")
def cli() -> None:
    """See, record and break the conversation between an editor and an ACP agent.

    Put `acp-proxy run --` in front of the agent command in your editor's settings; every
    frame is relayed byte for byte and recorded to SQLite. Then read the recording back with
    the query commands.
    """


@cli.command(context_settings={"allow_interspersed_args": False})
@db_option
@click.option("--no-record", is_flag=True, help="Relay only; write nothing to any database.")
@click.option(
    "--grace",
    type=click.FloatRange(min=0),
    default=2.0,
    show_default=True,
    help="Seconds the agent gets to exit after the client closes its end (then SIGTERM, then SIGKILL).",
)
@click.option(
    "--max-record-bytes",
    type=ByteSize(),
    default="16MiB",
    show_default=True,
    help="Record at most this much of one frame (the whole frame is always relayed; cut ones are flagged).",
)
@click.option(
    "--db-limit",
    type=ByteSize(),
    default=None,
    help="Stop recording when the database file reaches this size; relaying goes on.",
)
@click.option(
    "--strip-replayed-notices",
    is_flag=True,
    help="Do not forward `notice` updates the agent sends while replaying history "
    "(session/load, session/resume with replayFrom); they are still recorded, flagged.",
)
@click.argument("agent", nargs=-1, required=True, type=click.UNPROCESSED, metavar="-- AGENT [ARGS]...")
def run(
    db_path: Path | None,
    no_record: bool,
    grace: float,
    max_record_bytes: int,
    db_limit: int | None,
    strip_replayed_notices: bool,
    agent: tuple[str, ...],
) -> None:
    """Launch AGENT and relay its stdio byte for byte, recording every frame.

    Use it where your editor runs the agent; everything after `--` is the agent's command
    line, untouched:

    \b
        acp-proxy run -- claude-code-acp
        acp-proxy run --db ./session.db -- gemini --experimental-acp

    The proxy exits with the agent's status (a death by signal is reproduced). Its own
    messages go to stderr prefixed `acp-proxy:`; stdout carries only the agent's bytes.
    """
    options = relay.RunOptions(
        argv=list(agent),
        db_path=None if no_record else resolve_db(db_path),
        grace=grace,
        max_record_bytes=max_record_bytes,
        db_limit=db_limit,
        strip_replayed_notices=strip_replayed_notices,
        options={
            "grace": grace,
            "max_record_bytes": max_record_bytes,
            "no_record": no_record,
            "strip_replayed_notices": strip_replayed_notices,
        },
    )
    try:
        status = relay.run(options)
    except relay.RelayError as exc:
        relay.say(str(exc))
        raise SystemExit(exc.code) from None
    relay.exit_like(status)


def main() -> None:
    cli(prog_name="acp-proxy")
