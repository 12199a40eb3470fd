"""``frames`` and ``tail``: one line per frame, selected by the filter language.

Owns: those commands' options, help and output (lines, JSON, the raw bytes). Must not know: SQL
or how a filter selects (``read.frames`` selects, masked first; ``read.live.Follower`` follows,
committed rows and then a live run's journal).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import click

from acp_proxy.cli.group import (
    cli,
    emit,
    filter_help,
    frame_lines,
    frame_object,
    open_db,
    parse_filter,
    resolve_db,
)
from acp_proxy.cli.options import db_option
from acp_proxy.cli.support import (
    TEXT,
    FilterCommand,
    Output,
    count,
    output_options,
    say,
    seconds,
)

# -- frames and tail: one line per frame -----------------------------------------------------


def _write_raw(out: Any, rows: Iterable[dict[str, Any]]) -> int:
    """The frames' bytes exactly as they crossed the wire; the number of cut records."""
    cut = 0
    for f in rows:
        if f["batch_seq"] is not None:
            continue  # the batch line itself carries these bytes
        data = f["raw_bytes"] if f["raw_bytes"] is not None else (f["raw"] or "").encode("utf-8", "surrogateescape")
        out.data(data + (b"\n" if f["terminated"] else b""))
        cut += f["cut"] or 0
    return cut


@cli.command(cls=FilterCommand, epilog_source=filter_help)
@db_option
@output_options
@click.option("--raw", "as_raw", is_flag=True, help="Exactly the bytes that crossed the wire, one frame per line.")
@click.option("-v", "--verbose", is_flag=True, help="Each frame's raw JSON on the line below it.")
@click.option("-n", "--limit", type=count(), default=None, help="At most this many frames.")
@click.option(
    "--redact",
    is_flag=True,
    help="Mask secrets (credential headers, env values, bearer tokens, API keys, JWTs) before the FILTER "
    "reads a frame: text: then matches the masked frame, as shown.",
)
@click.argument("filter_words", nargs=-1, metavar="[FILTER]...", type=TEXT)
def frames(
    db_path: Path | None,
    output: Output,
    as_raw: bool,
    verbose: bool,
    limit: int | None,
    redact: bool,
    filter_words: tuple[str, ...],
) -> None:
    """The frames of every recorded run, or those the FILTER selects, in relay order.

    One line per frame (below), streamed as it is read: the first line comes at once even
    from a million frames, and `| head` stops it. On a terminal the lines go through $PAGER
    (`less -FRX` by default); --no-pager prints them straight out. A FILTER word may start
    with `-` (a negated term): it is never taken for an option.

    \b
    Examples:
        acp-proxy frames run:last dir:a2c update:agent_message_chunk
        acp-proxy frames 'method:session/prompt kind:response latency>2s'
        acp-proxy frames kind:error OR unanswered
        acp-proxy frames -update:agent_message_chunk -dir:stderr
        acp-proxy frames '-(method:session/update OR dir:stderr)' text:hello
        acp-proxy frames run:1 dir:c2a --raw | some-acp-agent   # replay a client's side
    """
    from acp_proxy.cli import views
    from acp_proxy.protocol.redact import Redactor
    from acp_proxy.read import controls
    from acp_proxy.read import frames as selections

    if as_raw and not output.table:
        raise click.UsageError("choose one of --json, --jsonl and --raw")
    redactor = Redactor(enabled=redact)
    parse_filter(filter_words)  # a bad filter: one line, before the database is opened
    db = open_db(db_path)
    expr = selections.parse(db, " ".join(filter_words))
    found = selections.Selection(db, expr, redactor).rows(limit=limit)
    with views.output(page=output.page and not as_raw) as out:
        if as_raw:
            cut = _write_raw(out, found)
            out.flush()
            if cut:
                say(f"{cut} frame(s) were recorded cut (--max-record-bytes); their bytes are incomplete")
            return
        found = controls.with_controls(found, controls.masked(controls.control_rows(db), redactor), expr)
        if emit(out, output, (frame_object(f) for f in found)):
            return
        frame_lines(out, db, found, verbose=verbose)


@cli.command(cls=FilterCommand, epilog_source=filter_help)
@db_option
@output_options(pager=False)
@click.option("-v", "--verbose", is_flag=True, help="Each frame's raw JSON on the line below it.")
@click.option("-c", "--count", "max_count", type=count(1), default=None, help="Stop after this many frames.")
@click.option("--from-start", is_flag=True, help="Begin with the frames already recorded, not only new ones.")
@click.option("--interval", type=seconds(0.01, 60), default=0.2, show_default=True, help="Seconds between polls.")
@click.option(
    "--timeout",
    "timeout_s",
    type=seconds(0, 366 * 86400, low_open=True),
    default=None,
    help="Give up after this many seconds (exit 1 if --count frames were not shown by then).",
)
@click.argument("filter_words", nargs=-1, metavar="[FILTER]...", type=TEXT)
def tail(
    db_path: Path | None,
    output: Output,
    verbose: bool,
    max_count: int | None,
    from_start: bool,
    interval: float,
    timeout_s: float | None,
    filter_words: tuple[str, ...],
) -> None:
    """Follow frames as proxies record them (run it in another terminal), with the FILTER.

    Every run is followed, those running when tail starts and those started later, each frame
    shown once, in order within its run; each `acp-proxy ctl` action on a run (a line RUN:cN,
    filter: control) once it is recorded. Started before anything was recorded, tail waits for
    the database to appear. --json writes one array, closed when tail stops.

    \b
    Examples:
        acp-proxy tail dir:a2c -update:agent_message_chunk
        acp-proxy tail --from-start --count 20 kind:error
    """
    import itertools
    import time

    from acp_proxy.cli import views
    from acp_proxy.read import controls, live, queries

    expr = parse_filter(filter_words)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    path = resolve_db(db_path)
    db, waited = _wait_for_database(path, interval, deadline)
    if db is None:
        raise SystemExit(1 if max_count else 0)
    # Started before anything was recorded: everything recorded since is new, shown whole.
    # A live run's frames are read from its journal as soon as the relay wrote them: tail does
    # not wait for the recorder to commit (it batches, and yields to a flood for seconds).
    follower = live.Follower(db, live.Journals(path), from_start=from_start or waited)
    # A person's ctl actions, shown once the recorder commits them (it commits one at once).
    actions = controls.ControlFollower(db, from_start=from_start or waited)
    shown = 0
    with views.output(page=False) as out:
        lines = views.FrameLines(out, session_len=queries.session_prefix_length(db), verbose=verbose)
        if output.json:
            out.data(b"[")
        try:
            while True:
                for f in itertools.chain(follower.poll(expr), actions.poll(expr)):
                    if output.table:
                        out.line(lines.line(f))
                    else:
                        encoded = views.encode_json(frame_object(f))
                        out.data((b"," if output.json and shown else b"") + encoded + (b"" if output.json else b"\n"))
                    shown += 1
                    if max_count is not None and shown >= max_count:
                        return
                out.flush()
                if deadline is not None and time.monotonic() >= deadline:
                    if max_count is not None:
                        raise SystemExit(1)
                    return
                lines.session_len = max(lines.session_len, queries.session_prefix_length(db))
                time.sleep(interval)  # polling the database: there is no change feed to wait on
        except KeyboardInterrupt:
            return
        finally:
            if output.json:
                out.data(b"]\n")


def _wait_for_database(path: Path, interval: float, deadline: float | None) -> tuple[Any, bool]:
    """Open ``path`` for reading once a proxy has created it: (the database or None when the
    deadline passed first, whether it had to be waited for)."""
    import time

    from acp_proxy.record import recovery
    from acp_proxy.store import database as store

    said = False
    while True:
        try:
            return recovery.open_for_reading(path), said
        except store.NotYetADatabase:
            pass
        if not said:
            say(f"waiting for a recording at {path} (start one: acp-proxy run -- AGENT)")
            said = True
        if deadline is not None and time.monotonic() >= deadline:
            return None, said
        try:
            time.sleep(interval)
        except KeyboardInterrupt:
            return None, said
