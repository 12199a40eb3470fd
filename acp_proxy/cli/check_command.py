"""``acp-proxy check``: conformance findings for a run, a session or every run.

Owns: the command's options, help, progress bar and table. Must not know: SQL or the rules
(``read.conformance`` computes; ``checks/`` holds the rules).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from acp_proxy.cli.group import (
    cli,
    emit,
    open_db,
    resolve_db,
)
from acp_proxy.cli.options import db_option
from acp_proxy.cli.support import (
    TEXT,
    Jobs,
    Output,
    output_options,
    say,
)
from acp_proxy.limits import CHECK_AUTO_JOBS_FRAMES as AUTO_JOBS_FRAMES
from acp_proxy.limits import CHECK_MAX_JOBS as MAX_JOBS

# -- conformance checks ----------------------------------------------------------------------

_PROGRESS_MIN_FRAMES = 20_000  # below this a check takes well under a second: no bar


@cli.command()
@db_option
@output_options
@click.option("--no-schema", is_flag=True, help="Lifecycle rules only; skip JSON Schema validation (faster).")
@click.option("--stable", is_flag=True, help="Validate against the stable schema, not the draft superset.")
@click.option(
    "--save", is_flag=True, help="Also store the findings in the database (replacing the runs' earlier ones)."
)
@click.option(
    "--jobs",
    "-j",
    type=Jobs(MAX_JOBS),
    default="auto",
    show_default=True,
    help=(
        "Check runs in N processes at once (`check all`); findings stay in run order. auto: one "
        f"per CPU (at most {MAX_JOBS}) once there are {AUTO_JOBS_FRAMES:,} frames in two runs or more."
    ),
)
@click.argument("ref", default="last", type=TEXT)
def check(
    db_path: Path | None, output: Output, no_schema: bool, stable: bool, save: bool, jobs: int | None, ref: str
) -> None:
    """Check a run or session (default `last`; `all`: every run) against the ACP spec: schema
    and lifecycle rules. Exits 1 on errors.

    Each finding names its rule, severity (error / warning / info), the frame (run, seq) and the
    spec section it comes from. Frames/s goes to stderr; a progress bar shows on a terminal.

    \b
    Examples:
        acp-proxy check
        acp-proxy check 3f2a --json
        acp-proxy check all --no-schema
        acp-proxy check all --jobs 2
    """
    from acp_proxy.cli import views
    from acp_proxy.read import conformance

    db = open_db(db_path)
    report = conformance.check(
        db,
        ref,
        schema=not no_schema,
        unstable=not stable,
        progress=_progress(output),
        jobs=jobs,
        path=resolve_db(db_path),
    )
    db.conn.close()
    found, label, run_ids, total, took = report.findings, report.label, report.run_ids, report.frames, report.seconds
    if save:
        from acp_proxy.store import database as store

        store.replace_findings(resolve_db(db_path), run_ids, found)
    counts = {s: sum(1 for f in found if f["severity"] == s) for s in ("error", "warning", "info")}
    with views.output(page=output.page) as out:
        if not emit(out, output, found):
            if not found:
                out.line(f"no findings for {label}")
            else:
                C = views.Column
                views.table(
                    out,
                    [
                        C("run_id", "run", keep=True, right=True),
                        C("seq", "seq", keep=True, right=True),
                        C("severity", "severity"),
                        C("rule_id", "rule", keep=True),
                        C("message", "message"),
                        C("spec", "spec", first=True),
                    ],
                    found,
                    title=f"findings for {label}",
                )
    rate = f"{total / took:,.0f} frames/s" if took > 0 else "instant"
    say(
        f"checked {total} frames in {took:.2f}s ({rate}): "
        f"{counts['error']} errors, {counts['warning']} warnings, {counts['info']} info"
    )
    if counts["error"]:
        sys.exit(1)


def _progress(output: Output) -> Any:
    """A progress bar around the frames a long check reads, on a terminal; None elsewhere."""
    if not (sys.stderr.isatty() and output.table):
        return None

    def bar(frames: Iterator[dict[str, Any]], total: int) -> Iterator[dict[str, Any]]:
        if total < _PROGRESS_MIN_FRAMES:
            yield from frames
            return
        from rich.console import Console
        from rich.progress import Progress

        with Progress(console=Console(stderr=True), transient=True) as progress:
            task = progress.add_task("checking", total=total)
            for n, frame in enumerate(frames, start=1):
                if n % 1000 == 0:
                    progress.update(task, completed=n)
                yield frame

    return bar
