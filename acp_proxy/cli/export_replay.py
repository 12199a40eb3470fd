"""``export`` and ``replay``: a recording written out, or played back as a peer.

Owns: those commands' options, help, files and the ``replay --client`` driver process. Must not
know: SQL, export formats or replay rules (``read.exports``, ``replay``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import click

from acp_proxy.cli.group import (
    cli,
    open_db,
    resolve_db,
    resolve_ref,
    runs_of,
)
from acp_proxy.cli.options import FilePath, db_option, redact_options
from acp_proxy.cli.support import (
    TEXT,
    say,
    seconds,
)
from acp_proxy.errors import UsageError

# -- export ----------------------------------------------------------------------------------


@cli.command()
@db_option
@click.option(
    "-f",
    "--format",
    "fmt",
    type=click.Choice(["jsonl", "jsons", "inspector", "otlp"]),
    default="jsonl",
    show_default=True,
    help="jsonl: acp-proxy's own; jsons: the ACP conductor trace viewer; inspector: ACP Inspector traces; "
    "otlp: send OpenTelemetry spans to --endpoint.",
)
@click.option(
    "--endpoint",
    default=None,
    metavar="URL",
    help="With --format otlp: the collector's OTLP/HTTP base address (default: $OTEL_EXPORTER_OTLP_ENDPOINT).",
)
@click.option("--otlp-content", is_flag=True, help="With --format otlp: put message text in spans (redacted).")
@click.option(
    "-o",
    "--output",
    type=FilePath(dir_okay=False),
    default=None,
    help="Write here (created 0600) instead of stdout.",
)
@redact_options
@click.argument("ref", type=TEXT)
def export(
    db_path: Path | None,
    fmt: str,
    endpoint: str | None,
    otlp_content: bool,
    output: Path | None,
    redact_rules: tuple[str, ...],
    no_redact: bool,
    ref: str,
) -> None:
    """Export a run, a session, or `all` runs (REF: run id, `last`, session id / prefix, `all`).

    A session's export starts with what its runs said before it — `initialize`, authentication,
    the `session/new` request — so it is a whole conversation. Secrets (credential headers, env
    values, bearer tokens, API keys, JWTs, and what --redact names) are masked unless
    --no-redact; a frame without one is exported byte for byte. The export still holds the
    conversation and file contents: files are created 0600. `--format otlp` sends the spans of
    the run (or of the session's turns) to an OpenTelemetry collector instead, message text only
    with --otlp-content.

    \b
    Examples:
        acp-proxy export last -o run.jsonl
        acp-proxy export 3f2a --format jsons -o trace.jsons   # open with sacp-trace-viewer
        acp-proxy export all -o everything.jsonl
        acp-proxy export last --format otlp --endpoint http://localhost:4318
        acp-proxy export last --no-redact -o whole.jsonl
    """
    from acp_proxy.protocol.redact import Redactor
    from acp_proxy.read import exports, queries

    redactor = Redactor(redact_rules, enabled=not no_redact)  # a bad rule: one line, exit 2

    if fmt != "otlp" and (endpoint is not None or otlp_content):
        raise click.UsageError("--endpoint and --otlp-content go with --format otlp")
    if fmt == "otlp" and output is not None:
        raise click.UsageError("--format otlp sends spans to a collector: it writes no file (-o)")
    if fmt == "otlp":
        from acp_proxy.otel import command as otel

        say(otel.export(resolve_db(db_path), ref, endpoint, otlp_content, redactor))
        return
    db = open_db(db_path)
    resolved, label, run_ids = runs_of(db, ref)
    header = {
        "ref": ref,
        "resolved": label,
        "runs": queries.runs_by_id(db, run_ids, counted=False),
    }
    lines = exports.export_lines(fmt, queries.export_frames(db, resolved), header, redactor)
    if output is None:
        from acp_proxy.cli import views

        with views.output(page=False) as out:
            for line in lines:
                out.data(line + b"\n")
        say(exports.warning(redactor))
        return
    from acp_proxy.store import database as store

    store.refuse_special_file(output, "a file to export to (leave out -o to write to stdout)")
    try:
        fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    except OSError as exc:
        raise UsageError(f"cannot write {output}: {(exc.strerror or str(exc)).lower()}") from None
    os.fchmod(fd, 0o600)
    written = 0
    with os.fdopen(fd, "wb") as out_file:
        for line in lines:
            out_file.write(line + b"\n")
            written += 1
    say(f"wrote {written} lines to {output} ({exports.warning(redactor)})")


# -- replay and diff -------------------------------------------------------------------------


def _replay_rows(db: Any, ref_text: str) -> list[dict[str, Any]]:
    """The frames of the run a REF names; for a session, the run it first appeared in."""
    from acp_proxy.read import queries

    resolved = resolve_ref(db, ref_text)
    run_ids = queries.run_ids_of(db, resolved)
    if not run_ids:
        raise UsageError(f"{resolved.describe()} has no recorded run")
    return queries.run_frames(db, run_ids[0])


_SPEED_RANGE = (0.01, 1000.0)


@cli.command()
@db_option
@click.option(
    "--timing",
    default="original",
    show_default=True,
    metavar="original|fast|N.x",
    help="Recorded pace, none at all, or sped up N times (2x, 0.5x; 0.01x to 1000x).",
)
@click.option(
    "--strict/--lenient",
    default=False,
    show_default=True,
    help="Strict: a request out of the recorded order (or with other params) gets a JSON-RPC "
    "error and the command exits 1 with a report. Lenient: best effort.",
)
@click.option("--match-cwd", is_flag=True, help="Compare `cwd` params too (ignored by default, like ids and _meta).")
@click.option(
    "--client",
    "as_client",
    is_flag=True,
    help="Be the recorded client instead: drive `-- AGENT ARGS...` (run through `acp-proxy run`, "
    "recorded in the same database; the new run's id is printed) with the recorded requests and answers.",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=seconds(0, 366 * 86400, low_open=True),
    default=60.0,
    show_default=True,
    help="With --client: give up (exit 1) after this many seconds.",
)
@click.argument("ref", type=TEXT)
@click.argument("agent", nargs=-1, type=click.UNPROCESSED, metavar="[-- AGENT [ARGS]...]")
def replay(
    db_path: Path | None,
    timing: str,
    strict: bool,
    match_cwd: bool,
    as_client: bool,
    timeout_s: float,
    ref: str,
    agent: tuple[str, ...],
) -> None:
    """Serve the recorded agent of REF as a fake agent on stdio (or, with --client, its client).

    Point an editor at `acp-proxy replay REF` instead of the agent: requests get the recorded
    responses (ids remapped), recorded updates and agent requests follow in recorded order,
    and `session/load` / `session/resume` with `replayFrom` replay history without notices.
    Stdout carries only the protocol; the report goes to stderr. With --client, stdout gets
    the id of the run that recorded the agent, for `acp-proxy diff REF RUN`.

    \b
    Examples:
        acp-proxy replay last
        acp-proxy replay 3f2a --timing fast --strict
        acp-proxy replay 1 --timing 2x
        acp-proxy replay 1 --client -- my-agent --flag    # rerun run 1's client; then `diff 1 last`
    """
    from acp_proxy.replay import replayer as rp

    try:
        speed = rp.parse_timing(timing)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--timing") from None
    if speed != 0 and not _SPEED_RANGE[0] <= speed <= _SPEED_RANGE[1]:
        raise click.BadParameter(
            f"{timing!r}: a speed-up is from {_SPEED_RANGE[0]:g}x to {_SPEED_RANGE[1]:g}x (or fast)",
            param_hint="--timing",
        )
    if bool(agent) != as_client:
        raise click.UsageError("--client needs `-- AGENT [ARGS]...`, and an AGENT needs --client")
    db = open_db(db_path)
    rows = _replay_rows(db, ref)
    db.conn.close()
    if as_client:
        _replay_client(ref, rows, resolve_db(db_path), list(agent), strict, timeout_s)
        return
    replayer = rp.Replayer(rows, strict=strict, match_cwd=match_cwd)
    deviations = rp.serve(replayer, sys.stdin.buffer, sys.stdout.buffer, speed)
    if deviations:
        word = "failed" if strict else "finished"
        say(f"replay {word} with {len(deviations)} deviation(s) from the recording")
        if strict:
            raise SystemExit(1)


def _replay_client(
    ref: str, rows: list[dict[str, Any]], db_path: Path, agent: list[str], strict: bool, timeout_s: float
) -> None:
    """`replay --client`: drive `acp-proxy run --db DB -- AGENT` with the recorded client side."""
    import subprocess

    from acp_proxy.replay import replayer as rp

    replayer = rp.ClientReplayer(rows, strict=strict)
    argv = [sys.executable, "-m", "acp_proxy", "run", "--db", str(db_path), "--", *agent]
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    deviations = rp.drive(replayer, proc.stdin, proc.stdout, timeout_s)
    if replayer.fatal is not None:
        proc.terminate()  # the proxy stops the agent's process group
    try:
        status = proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        status = proc.wait(timeout=10)
    proc.stdout.close()
    new_run = _run_of_proxy(db_path, proc.pid)
    if new_run is not None:
        click.echo(str(new_run))
        say(f"the agent's side was recorded as run {new_run}; compare: acp-proxy diff {ref} {new_run}")
    if replayer.fatal is not None:
        say(f"replay --client failed: {replayer.fatal}")
        raise SystemExit(1)
    if status != 0:
        deviations.append(f"the agent exited with status {status}")
        say(f"replay: the agent exited with status {status}")
    if deviations:
        word = "failed" if strict else "finished"
        say(f"replay --client {word} with {len(deviations)} deviation(s) from the recording")
        if strict:
            raise SystemExit(1)


def _run_of_proxy(db_path: Path, pid: int) -> int | None:
    """The run the proxy with this pid recorded (the newest, should the pid have been reused)."""
    from acp_proxy.read import queries
    from acp_proxy.record import recovery
    from acp_proxy.store import database as store

    try:
        db = recovery.open_for_reading(db_path)
    except store.StoreError:
        return None
    try:
        return queries.run_of_proxy(db, pid)
    finally:
        db.conn.close()
