"""``acp-proxy run`` and ``faults-help``: the command in front of the agent.

Owns: run's options and help, their checks (one line, exit 2), the fault plan they build and
handing over to the relay. Must not know: how frames are relayed or recorded (``relay``,
``record``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import click

from acp_proxy.cli.group import (
    cli,
    faults_help_text,
    resolve_db,
)
from acp_proxy.cli.options import FilePath, db_option
from acp_proxy.cli.support import (
    TEXT,
    ByteSize,
    Number,
    seconds,
)
from acp_proxy.errors import UsageError
from acp_proxy.limits import GRACE_MAX_S, MAX_DB_LIMIT, MAX_RECORD_BYTES, SEED_RANGE

# -- run -------------------------------------------------------------------------------------


@cli.command(context_settings={"allow_interspersed_args": False})
@db_option
@click.option("--no-record", is_flag=True, help="Relay only; write nothing to any database.")
@click.option(
    "--grace",
    type=seconds(0, GRACE_MAX_S),
    default=2.0,
    show_default=True,
    help="Seconds (0 to 3600) the agent gets to exit after the client closes its end (then SIGTERM, then SIGKILL).",
)
@click.option(
    "--max-record-bytes",
    type=ByteSize(MAX_RECORD_BYTES),
    default="16MiB",
    show_default=True,
    help="Record at most this much of one frame, up to 1GB (the whole frame is always relayed; cut ones are flagged).",
)
@click.option(
    "--db-limit",
    type=ByteSize(MAX_DB_LIMIT, low=1),
    default=None,
    help="Stop recording when the files acp-proxy writes (the database, its -wal and -shm files, the run "
    "journals) reach this size; relaying goes on, one line says 'limit reached', and the run row counts what "
    "was not recorded.",
)
@click.option(
    "--strip-replayed-notices",
    is_flag=True,
    help="Do not forward `notice` updates the agent sends while replaying history "
    "(session/load, session/resume with replayFrom); they are still recorded, flagged.",
)
@click.option(
    "--fault",
    "fault_rules",
    multiple=True,
    type=TEXT,
    metavar="RULE",
    help="Inject a fault, e.g. 'drop if method:session/prompt kind:response' (repeatable; "
    "rules also come from --faults FILE and $ACP_PROXY_FAULTS). See `acp-proxy faults-help`.",
)
@click.option(
    "--faults",
    "faults_file",
    type=FilePath(),
    default=None,
    help="A TOML file of fault rules (see examples/faults.toml).",
)
@click.option(
    "--seed",
    "seeds",
    type=Number(int, *SEED_RANGE),
    multiple=True,  # to see a second one: click would let the last win in silence
    help="Seed for probabilistic faults, a 64-bit integer (recorded on the run).",
)
@click.option(
    "--control",
    is_flag=True,
    help="Open a control socket (0600, beside the run's journal) so `acp-proxy ctl RUN` can add "
    "fault rules, set breakpoints, release, edit or drop held frames while the run goes on. Every "
    "frame is then judged line by line.",
)
@click.option(
    "--break",
    "breaks",
    multiple=True,
    type=TEXT,
    metavar="FILTER",
    help="With --control (implied): hold every frame FILTER matches from the first one on, until "
    "`acp-proxy ctl RUN release|drop` decides it (repeatable).",
)
@click.option(
    "--check",
    "live_check",
    type=click.Choice(["full", "lifecycle"]),
    default=None,
    flag_value="full",
    is_flag=False,
    help="Check conformance as the conversation happens and report findings on stderr (and in "
    "the findings table); `--check=lifecycle` skips schema validation. A low-priority process "
    "checks what was recorded: it never holds up the relay, and nothing forwarded changes.",
)
@click.option(
    "--stderr-file",
    type=FilePath(),
    default=None,
    help="Append everything the proxy writes to stderr — its own lines and the agent's stderr — "
    "to this file (created 0600) instead, for clients that hide stderr (the pytest fixture uses it).",
)
@click.option(
    "--otlp",
    default=None,
    flag_value="env",
    is_flag=False,
    metavar="URL",
    help="Stream OpenTelemetry traces and metrics of the run to the collector at URL (its OTLP base "
    "address, over $OTEL_EXPORTER_OTLP_PROTOCOL; alone: $OTEL_EXPORTER_OTLP_ENDPOINT). "
    "A low-priority process exports what was recorded: a collector that is down or slow costs "
    "spans (counted on the run), never frames. Needs the [otel] extra.",
)
@click.option("--otlp-content", is_flag=True, help="With --otlp: put message text in spans (redacted).")
@click.option(
    "--redact",
    "redact_rules",
    multiple=True,
    is_flag=False,
    flag_value="",
    metavar="[RULE]",
    help="Store a masked copy of each frame: secrets (credential headers, env values, bearer tokens, API "
    "keys, JWTs) and what RULE names, a JSON path or a regular expression (repeatable). What is forwarded "
    "is never altered.",
)
@click.option(
    "--connect",
    default=None,
    type=TEXT,
    metavar="URL",
    help="No AGENT: relay stdio to the remote agent at URL (ws(s):// WebSocket, http(s):// Streamable HTTP).",
)
@click.option(
    "--header",
    "headers",
    multiple=True,
    type=TEXT,
    metavar="'NAME: VALUE'",
    help="With --connect: send this header upstream, e.g. 'Authorization: Bearer ...' (repeatable; "
    "also $ACP_PROXY_AUTHORIZATION). Values are never recorded.",
)
@click.argument("agent", nargs=-1, required=False, type=click.UNPROCESSED, metavar="-- AGENT [ARGS]...")
def run(
    db_path: Path | None,
    no_record: bool,
    grace: float,
    max_record_bytes: int,
    db_limit: int | None,
    strip_replayed_notices: bool,
    fault_rules: tuple[str, ...],
    faults_file: Path | None,
    seeds: tuple[int, ...],
    control: bool,
    breaks: tuple[str, ...],
    live_check: str | None,
    stderr_file: Path | None,
    otlp: str | None,
    otlp_content: bool,
    redact_rules: tuple[str, ...],
    connect: str | None,
    headers: tuple[str, ...],
    agent: tuple[str, ...],
) -> None:
    """Launch AGENT and relay its stdio byte for byte, recording every frame.

    Use it where your editor runs the agent; everything after `--` is the agent's command
    line, untouched:

    \b
        acp-proxy run -- claude-agent-acp
        acp-proxy run --db ./session.db -- gemini --acp

    The proxy exits with the agent's status (a death by signal is reproduced). Its own
    messages go to stderr prefixed `acp-proxy:`; stdout carries only the agent's bytes.

    With --connect URL instead of AGENT, the editor talks to a remote agent (exit 1 when it
    cannot be reached or goes away):

    \b
        acp-proxy run --connect wss://agent.example/acp --header 'Authorization: Bearer ...'
    """
    if connect is not None or headers:
        from acp_proxy.cli.connect_options import connect_and_exit

        seed = seeds[0] if len(seeds) == 1 else None
        unsupported = {
            "--control": control or bool(breaks),
            "--check": bool(live_check),
            "--otlp": otlp is not None,
            "--redact": bool(redact_rules),
            "--strip-replayed-notices": strip_replayed_notices,
            "--db-limit": db_limit is not None,
        }
        plan = build_fault_plan(fault_rules, faults_file, seed) if connect is not None else None

        def redirect(db: Path | None) -> None:
            if stderr_file is not None:
                _redirect_stderr(stderr_file, db)

        connect_and_exit(connect, headers, agent, db_path, no_record, plan, redirect, unsupported)
        return
    if not agent:
        raise click.UsageError("Missing argument '-- AGENT [ARGS]...' (or --connect URL).")
    if live_check and no_record:
        raise click.UsageError("--check checks what is recorded: it cannot be used with --no-record")
    if breaks:
        from acp_proxy.protocol import filters

        control = True
        for text in breaks:
            filters.parse(text)  # a bad filter: one line, exit 2
    if control and no_record:
        raise click.UsageError("--control finds the run through its recording: it cannot be used with --no-record")
    if redact_rules and no_record:
        raise click.UsageError("--redact masks what is recorded: it cannot be used with --no-record")
    redact = [rule for rule in redact_rules if rule] if redact_rules else None
    if redact:
        from acp_proxy.protocol.redact import Redactor

        Redactor(redact)  # a bad rule: one line, exit 2
    db = None if no_record else resolve_db(db_path)
    if len(seeds) > 1:
        raise click.UsageError("--seed is given twice; keep one")
    plan = build_fault_plan(fault_rules, faults_file, seeds[0] if seeds else None)
    from acp_proxy.otel import command as otel

    otlp_to = otel.live_endpoints(otlp, otlp_content, no_record)  # a mistake: one line, exit 2
    if stderr_file is not None:
        _redirect_stderr(stderr_file, db)
    from acp_proxy.relay import stdio as relay  # imported here: query commands need neither trio nor processes

    options = relay.RunOptions(
        argv=list(agent),
        db_path=db,
        grace=grace,
        max_record_bytes=max_record_bytes,
        db_limit=db_limit,
        strip_replayed_notices=strip_replayed_notices,
        fault_plan=plan,
        check=live_check,
        options={
            "grace": grace,
            "max_record_bytes": max_record_bytes,
            "no_record": no_record,
            "strip_replayed_notices": strip_replayed_notices,
            **({"redact": True} if redact is not None else {}),  # the rules themselves may name a secret
        },
        redact=redact,
        control=control,
        breakpoints=list(breaks),
    )
    if otlp_to is not None:
        otel.start_live(options.db_path, otlp_to, otlp_content)  # type: ignore[arg-type]
    relay.run_and_exit(options)


def _redirect_stderr(path: Path, db: Path | None) -> None:
    """Point fd 2 (inherited by the agent and the recorder) at ``path``, appending."""
    from acp_proxy.cli import outputs
    from acp_proxy.store import database as store

    store.refuse_special_file(path, "a file for --stderr-file")
    outputs.refuse_database(path, db, "the --stderr-file")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    except OSError as exc:
        raise UsageError(f"cannot write --stderr-file {path}: {(exc.strerror or str(exc)).lower()}") from None
    sys.stderr.flush()
    os.dup2(fd, 2)
    os.close(fd)


def build_fault_plan(rules: tuple[str, ...], path: Path | None, seed: int | None, *, remote: bool = False) -> Any:
    """The run's fault plan, or None; a bad rule raises ``RuleError`` (one line: ``bad fault
    rule: ...``). ``ACP_PROXY_FAULTS`` is read as bytes: it must be UTF-8. ``remote``: serve's
    plan, where the remote wire's actions are allowed."""
    env_value = _env_text("ACP_PROXY_FAULTS")
    if not rules and path is None and not env_value:
        return None
    from acp_proxy.faults.plan import FaultPlan

    plan = FaultPlan.build(rules, path, env_value, seed, remote=remote)
    return plan if plan else None


def _env_text(name: str) -> str | None:
    raw = os.environb.get(name.encode()) if os.name != "nt" else None
    if raw is None:
        return os.environ.get(name)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        from acp_proxy.faults.rules import RuleError

        raise RuleError(f"${name} is not UTF-8 text (byte {exc.start + 1} is {raw[exc.start]:#04x})") from None


@cli.command("faults-help")
def faults_help() -> None:
    """The fault rule language, in full (the rules of `run --fault`, `--faults` FILE and
    $ACP_PROXY_FAULTS).

    \b
    Example:
        acp-proxy faults-help | less
    """
    from acp_proxy.cli import views

    with views.output() as out:
        out.line(faults_help_text())
