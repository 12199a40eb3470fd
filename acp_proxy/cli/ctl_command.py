"""``acp-proxy ctl RUN ...``: take the wheel of a live run started with ``run --control``.

Owns: the ``ctl`` commands (``fault add|list|remove|clear``, ``break``, ``breaks``, ``held``,
``release``, ``drop``, ``clear``), their help, the client side of the control wire (one JSON
request line, one JSON answer line) and how answers are printed. Must not know: what a request
does (``faults.live`` in the proxy decides), SQL (``read.controls`` finds the socket).

Every failure is one line and exit 2: a run that ended or was started without ``--control``, a
socket that is gone, a malformed rule, filter or frame, a frame that is not held, another
controller talking to the run at the same moment.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import click

from acp_proxy.cli.group import cli, resolve_db
from acp_proxy.cli.options import db_option
from acp_proxy.cli.support import TEXT, count
from acp_proxy.errors import UsageError

TIMEOUT_S = 10.0


class ControlFailed(UsageError):
    """The run's proxy said no, or could not be reached."""


def _request(ctx: click.Context, request: dict[str, Any]) -> Any:
    """Send one request to the run's proxy; its answer's ``ok`` value, or one line and exit 2."""
    from acp_proxy.read.controls import control_target
    from acp_proxy.record import recovery

    db_path, ref = ctx.obj
    # Not open_db: it says live runs are still being recorded, and ctl is only for live runs.
    target = control_target(recovery.open_for_reading(resolve_db(db_path)), ref)
    line = json.dumps(request).encode() + b"\n"
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(TIMEOUT_S)
            sock.connect(target.socket)
            sock.sendall(line)
            data = b""
            while b"\n" not in data:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
    except (FileNotFoundError, ConnectionRefusedError):
        raise ControlFailed(f"the control socket of run {target.run_id} is gone (its proxy has exited)") from None
    except TimeoutError:
        raise ControlFailed(f"run {target.run_id}'s proxy did not answer within {TIMEOUT_S:g} s") from None
    except OSError as exc:
        why = (exc.strerror or str(exc)).lower()
        raise ControlFailed(f"cannot reach the control socket of run {target.run_id}: {why}") from None
    try:
        answer = json.loads(data.split(b"\n", 1)[0])
    except ValueError:
        raise ControlFailed(f"run {target.run_id}'s proxy closed the connection without an answer") from None
    if not isinstance(answer, dict) or "ok" not in answer:
        error = answer.get("error") if isinstance(answer, dict) else None
        raise ControlFailed(str(error) if error else "the proxy's answer was not understood")
    return answer["ok"]


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
    """Change a live run started with `run --control`: its faults and breakpoints.

    RUN is a run id or `last`. Breakpoints hold every matching frame (either direction)
    instead of forwarding it; the frames behind a held one in its direction wait, the other
    direction flows. Held frames are numbered: `held` lists them, `release`, `release --with`
    (an edited frame) and `drop` decide them. Everything is recorded.

    \b
    Examples:
        acp-proxy ctl last break 'method:session/update'
        acp-proxy ctl last held
        acp-proxy ctl last release 12 --with '{"jsonrpc":"2.0",...}'
        acp-proxy ctl last fault add 'error if method:session/prompt'
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
    _print(_request(ctx, {"op": "fault-add", "rule": " ".join(rule)}), as_json)


@fault.command("list")
@json_option
@click.pass_context
def fault_list(ctx: click.Context, as_json: bool) -> None:
    """The run-time rules in force, with their ids."""
    _print(_request(ctx, {"op": "fault-list"}), as_json)


@fault.command("remove")
@click.argument("rule_id", type=count(1), metavar="ID")
@json_option
@click.pass_context
def fault_remove(ctx: click.Context, rule_id: int, as_json: bool) -> None:
    """Remove the run-time rule ID."""
    _print(_request(ctx, {"op": "fault-remove", "id": rule_id}), as_json)


@fault.command("clear")
@json_option
@click.pass_context
def fault_clear(ctx: click.Context, as_json: bool) -> None:
    """Remove every run-time rule (the rules the run started with stay)."""
    _print(_request(ctx, {"op": "fault-clear"}), as_json)


@ctl.command("break")
@click.argument("words", nargs=-1, required=True, type=TEXT, metavar="FILTER")
@json_option
@click.pass_context
def break_(ctx: click.Context, words: tuple[str, ...], as_json: bool) -> None:
    """Hold every frame FILTER matches (the filter language of `acp-proxy frames`)."""
    _print(_request(ctx, {"op": "break", "filter": " ".join(words)}), as_json)


@ctl.command("breaks")
@json_option
@click.pass_context
def breaks(ctx: click.Context, as_json: bool) -> None:
    """The breakpoints set."""
    _print(_request(ctx, {"op": "breaks"}), as_json)


@ctl.command("held")
@json_option
@click.pass_context
def held(ctx: click.Context, as_json: bool) -> None:
    """The frames held now: number, direction, method, how long, the frame."""
    _print(_request(ctx, {"op": "held"}), as_json)


@ctl.command("release")
@click.argument("seq", type=count(1), metavar="SEQ")
@click.option("--with", "with_", type=TEXT, default=None, metavar="JSON", help="Forward this frame instead.")
@json_option
@click.pass_context
def release(ctx: click.Context, seq: int, with_: str | None, as_json: bool) -> None:
    """Forward held frame SEQ (or, with --with, an edited frame in its place)."""
    _print(_request(ctx, {"op": "release", "seq": seq, "with": with_}), as_json)


@ctl.command("drop")
@click.argument("seq", type=count(1), metavar="SEQ")
@json_option
@click.pass_context
def drop(ctx: click.Context, seq: int, as_json: bool) -> None:
    """Drop held frame SEQ: it is recorded, never forwarded."""
    _print(_request(ctx, {"op": "drop", "seq": seq}), as_json)


@ctl.command("clear")
@json_option
@click.pass_context
def clear(ctx: click.Context, as_json: bool) -> None:
    """Remove every breakpoint; frames already held stay held until released or dropped."""
    _print(_request(ctx, {"op": "clear"}), as_json)
