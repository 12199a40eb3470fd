"""``acp-proxy ctl RUN ...``: take the wheel of a live run started with ``run --control``.

Owns: the ``ctl`` commands (``fault add|list|remove|clear``, ``break``, ``breaks``, ``held``,
``release``, ``drop``, ``clear``, ``send``, ``resend``, ``sent``), their help and how answers
are printed. Must not know: the control wire (``relay.control_client.Controller``), what a
request does (``faults.live`` in the proxy decides), SQL (``read.controls``).

Every failure is one line and exit 2: a run that ended or was started without ``--control``, a
socket that is gone, a malformed rule, filter or frame, a frame that is not held, another
controller talking to the run at the same moment.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from acp_proxy.cli.group import cli, resolve_db
from acp_proxy.cli.options import db_option
from acp_proxy.cli.support import TEXT, count

TYPE_CHECKING = False
if TYPE_CHECKING:
    from acp_proxy.relay.control_client import Controller


def _controller(ctx: click.Context) -> Controller:
    from acp_proxy.relay.control_client import Controller

    db_path, ref = ctx.obj
    # Not open_db: it says live runs are still being recorded, and ctl is only for live runs.
    return Controller(resolve_db(db_path), ref)


def _print(value: Any, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(value, indent=2))
        return
    if isinstance(value, list):
        if not value:
            click.echo("(none)")
        for item in value:
            click.echo("  ".join(f"{k}={v}" for k, v in item.items() if v is not None)[:400])
        return
    if isinstance(value, dict):
        click.echo("  ".join(f"{k}={v}" for k, v in value.items()))
        return
    click.echo(str(value))


json_option = click.option("--json", "as_json", is_flag=True, help="Print the answer as JSON.")


@cli.group()
@db_option
@click.argument("ref", type=TEXT, metavar="RUN")
@click.pass_context
def ctl(ctx: click.Context, db_path: Path | None, ref: str) -> None:
    """Change a live run started with `run --control`: faults, breakpoints, frames sent.

    RUN is a run id or `last`. Breakpoints hold every matching frame (either direction)
    instead of forwarding it; the frames behind a held one in its direction wait, the other
    direction flows. A held frame is recorded at once (not forwarded) and named by its seq in
    `frames`: `held` lists them, `release`, `release --with` (an edited frame) and `drop`
    decide them; a released frame then meets the fault rules in force. `send` and `resend`
    write frames of the proxy's own. Everything is recorded.

    \b
    Examples:
        acp-proxy ctl last break 'method:session/update'
        acp-proxy ctl last held
        acp-proxy ctl last release 12 --with '{"jsonrpc":"2.0",...}'
        acp-proxy ctl last fault add 'error if method:session/prompt'
        acp-proxy ctl last resend 7 --with '{"jsonrpc":"2.0","id":1,...}'
    """
    ctx.obj = (db_path, ref)


@ctl.group()
def fault() -> None:
    """Fault rules added while the run goes on (the language of `acp-proxy faults-help`)."""


@fault.command("add")
@click.argument("rule", nargs=-1, required=True, type=TEXT)
@json_option
@click.pass_context
def fault_add(ctx: click.Context, rule: tuple[str, ...], as_json: bool) -> None:
    """Add RULE; it applies from the next frame."""
    _print(_controller(ctx).fault_add(" ".join(rule)), as_json)


@fault.command("list")
@json_option
@click.pass_context
def fault_list(ctx: click.Context, as_json: bool) -> None:
    """The run-time rules in force, with their ids."""
    _print(_controller(ctx).faults(), as_json)


@fault.command("remove")
@click.argument("rule_id", type=count(1), metavar="ID")
@json_option
@click.pass_context
def fault_remove(ctx: click.Context, rule_id: int, as_json: bool) -> None:
    """Remove the run-time rule ID."""
    _print(_controller(ctx).fault_remove(rule_id), as_json)


@fault.command("clear")
@json_option
@click.pass_context
def fault_clear(ctx: click.Context, as_json: bool) -> None:
    """Remove every run-time rule (the rules the run started with stay)."""
    _print(_controller(ctx).fault_clear(), as_json)


@ctl.command("break")
@click.argument("words", nargs=-1, required=True, type=TEXT, metavar="FILTER")
@json_option
@click.pass_context
def break_(ctx: click.Context, words: tuple[str, ...], as_json: bool) -> None:
    """Hold every frame FILTER matches (the filter language of `acp-proxy frames`)."""
    _print(_controller(ctx).break_(" ".join(words)), as_json)


@ctl.command("unbreak")
@click.argument("point_id", type=count(1), metavar="ID")
@json_option
@click.pass_context
def unbreak(ctx: click.Context, point_id: int, as_json: bool) -> None:
    """Remove breakpoint ID (see `breaks`); what it holds stays held."""
    _print(_controller(ctx).unbreak(point_id), as_json)


@ctl.command("breaks")
@json_option
@click.pass_context
def breaks(ctx: click.Context, as_json: bool) -> None:
    """The breakpoints set."""
    _print(_controller(ctx).breaks(), as_json)


@ctl.command("held")
@json_option
@click.pass_context
def held(ctx: click.Context, as_json: bool) -> None:
    """The frames held now: seq (as in `frames`), direction, method, how long, the frame."""
    held = _controller(ctx).held()
    if not as_json:  # the proxy's own keys (hold number, time) are for programs
        held = [{k: v for k, v in h.items() if k not in ("hold", "ts_ns")} for h in held]
    _print(held, as_json)


@ctl.command("release")
@click.argument("seq", type=count(1), metavar="SEQ")
@click.option("--with", "with_", type=TEXT, default=None, metavar="JSON", help="Forward this frame instead.")
@json_option
@click.pass_context
def release(ctx: click.Context, seq: int, with_: str | None, as_json: bool) -> None:
    """Forward held frame SEQ (or, with --with, an edited frame in its place)."""
    _print(_controller(ctx).release(seq, with_), as_json)


@ctl.command("drop")
@click.argument("seq", type=count(1), metavar="SEQ")
@json_option
@click.pass_context
def drop(ctx: click.Context, seq: int, as_json: bool) -> None:
    """Drop held frame SEQ: it is recorded, never forwarded."""
    _print(_controller(ctx).drop(seq), as_json)


@ctl.command("clear")
@json_option
@click.pass_context
def clear(ctx: click.Context, as_json: bool) -> None:
    """Remove every breakpoint; frames already held stay held until released or dropped."""
    _print(_controller(ctx).clear(), as_json)


@ctl.command("send")
@click.option("--to", "to", type=click.Choice(["agent", "client"]), required=True, help="Who receives the frame.")
@click.argument("frame", type=TEXT, metavar="JSON")
@json_option
@click.pass_context
def send(ctx: click.Context, to: str, frame: str, as_json: bool) -> None:
    """Write frame JSON to the agent or the client, as if the other side had sent it.

    A request gets an id of the proxy's own (acp-proxy-ctl-N), so it collides with neither
    side's; its answer is recorded and kept by the proxy (see `sent`), never forwarded.
    """
    _print(_controller(ctx).send(to, frame), as_json)


@ctl.command("resend")
@click.argument("seq", type=count(1), metavar="SEQ")
@click.option("--with", "with_", type=TEXT, default=None, metavar="JSON", help="Send this frame instead.")
@json_option
@click.pass_context
def resend(ctx: click.Context, seq: int, with_: str | None, as_json: bool) -> None:
    """Send recorded request SEQ again, to the peer it went to (as `send` does: a fresh id)."""
    _print(_controller(ctx).resend(seq, with_), as_json)


@ctl.command("sent")
@json_option
@click.pass_context
def sent(ctx: click.Context, as_json: bool) -> None:
    """The requests `send` and `resend` wrote, with their answers once they came."""
    _print(_controller(ctx).sent(), as_json)
