"""``acp-proxy replay``: a recording's agent served as a fake agent on stdio (or, with --client, its
client driven against a live agent), reported like a test runner.

Owns: the command's options, its summary line and its exit status. What the fake agent and the
fake client do is ``replayer``'s.

Must not know: how a reply is chosen, SQL (the run's frames come from ``read.queries``).

Ending: the client's EOF, SIGTERM (how the SDK client and most editors end an agent) and SIGINT
end the replay alike — the deviations so far, one summary line, exit 0, or 1 for a strict
replay that deviated — never a bare 143.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from acp_proxy.cli.options import db_option
from acp_proxy.cli.support import TEXT, say, seconds
from acp_proxy.errors import UsageError

SPEED_RANGE = (0.01, 1000.0)


def replay_rows(db_path: Path, ref_text: str) -> list[dict[str, Any]]:
    """The frames of the run a REF names; for a session, the run it first appeared in."""
    from acp_proxy.read import queries
    from acp_proxy.record import recovery

    db = recovery.open_for_reading(db_path)
    try:
        resolved = queries.resolve(db, ref_text)
        run_ids = queries.run_ids_of(db, resolved)
        if not run_ids:
            raise UsageError(f"{resolved.describe()} has no recorded run")
        return queries.run_frames(db, run_ids[0])
    finally:
        db.conn.close()


@click.command("replay")
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
    "--follow-client",
    is_flag=True,
    help="When the client answers an agent request (a permission) otherwise than the recording, play "
    "the recording's branch for that answer where it has one. Either way it counts as a deviation.",
)
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
    follow_client: bool,
    as_client: bool,
    timeout_s: float,
    ref: str,
    agent: tuple[str, ...],
) -> None:
    """Serve the recorded agent of REF as a fake agent on stdio (or, with --client, its client).

    Point an editor at `acp-proxy replay REF` instead of the agent: requests get the recorded
    responses (ids remapped), recorded updates and agent requests follow in recorded order,
    and `session/load` / `session/resume` with `replayFrom` replay history without notices.
    Stdout carries only the protocol; the report goes to stderr: one line per deviation (one
    per divergence: what follows from it is not counted again), then a summary, whether the
    client closed stdin or ended the replay with SIGTERM or SIGINT. With --client, stdout gets
    the id of the run that recorded the agent, for `acp-proxy diff REF RUN`.

    \b
    Examples:
        acp-proxy replay last
        acp-proxy replay 3f2a --timing fast --strict
        acp-proxy replay 1 --timing 2x --follow-client
        acp-proxy replay 1 --client -- my-agent --flag    # rerun run 1's client; then `diff 1 last`
    """
    from acp_proxy.replay import replayer as rp

    try:
        speed = rp.parse_timing(timing)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--timing") from None
    if speed != 0 and not SPEED_RANGE[0] <= speed <= SPEED_RANGE[1]:
        raise click.BadParameter(
            f"{timing!r}: a speed-up is from {SPEED_RANGE[0]:g}x to {SPEED_RANGE[1]:g}x (or fast)",
            param_hint="--timing",
        )
    if bool(agent) != as_client:
        raise click.UsageError("--client needs `-- AGENT [ARGS]...`, and an AGENT needs --client")
    from acp_proxy.cli.group import resolve_db

    database = resolve_db(db_path)
    rows = replay_rows(database, ref)
    if as_client:
        _replay_client(ref, rows, database, list(agent), strict, timeout_s)
        return
    replayer = rp.Replayer(rows, strict=strict, match_cwd=match_cwd, follow_client=follow_client)
    deviations = rp.serve(replayer, sys.stdin.buffer, sys.stdout.buffer, speed)
    say(replayer.summary(replayer.ended_by))
    if deviations and strict:
        raise SystemExit(1)


def _replay_client(
    ref: str, rows: list[dict[str, Any]], db_path: Path, agent: list[str], strict: bool, timeout_s: float
) -> None:
    """`replay --client`: drive `acp-proxy run --db DB -- AGENT` with the recorded client side."""
    import subprocess

    from acp_proxy.replay.client import ClientReplayer, drive

    replayer = ClientReplayer(rows, strict=strict)
    argv = [sys.executable, "-m", "acp_proxy", "run", "--db", str(db_path), "--", *agent]
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    deviations = drive(replayer, proc.stdin, proc.stdout, timeout_s)
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
