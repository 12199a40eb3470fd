"""The command line: thin click commands over the library.

Owns: the commands, their options and help (the README's reference is generated from it), and
choosing where output goes. Mistakes are raised as ``AcpProxyError`` (or click's usage errors)
and become one line in one place, ``cli_support.Group``. Must not know: how frames are relayed,
decoded or stored — it calls ``relay``, ``store``, ``queries`` and the renderers for that.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import click

from acp_proxy import __version__
from acp_proxy.cli.options import FilePath, db_option, redact_options
from acp_proxy.cli.support import (
    TEXT,
    ByteSize,
    FilterCommand,
    Group,
    Number,
    Output,
    count,
    output_options,
    say,
    seconds,
)
from acp_proxy.errors import UsageError
from acp_proxy.limits import GRACE_MAX_S, MAX_DB_LIMIT, MAX_RECORD_BYTES, SEED_RANGE


def resolve_db(db_path: Path | None) -> Path:
    from acp_proxy.locations import default_db_path
    from acp_proxy.store import database as store

    path = db_path if db_path is not None else default_db_path()
    try:
        str(path).encode("utf-8")
    except UnicodeEncodeError:
        raise UsageError(f"the database path {str(path)!r} is not valid UTF-8, which SQLite needs") from None
    store.refuse_special_file(path)
    return path


def _filter_help() -> str:
    from acp_proxy.cli.views import FRAME_LEGEND
    from acp_proxy.protocol.filters import HELP

    return FRAME_LEGEND + "\n\n" + HELP


def _faults_help() -> str:
    from acp_proxy.faults.rules import HELP

    return HELP


@click.group(name="acp-proxy", cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="acp-proxy")
def cli() -> None:
    """See, record and break the conversation between an editor and an ACP agent.

    Put `acp-proxy run --` in front of the agent command in your editor's settings; every
    frame is relayed byte for byte and recorded to SQLite. Then read the recording back with
    the query commands. A mistake in any option is one line on stderr and exit status 2.
    """


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
    type=Number(int, *SEED_RANGE),
    default=None,
    help="Seed for probabilistic faults, a 64-bit integer (recorded on the run).",
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
    help="Stream OpenTelemetry traces and metrics of the run to the collector at URL (its OTLP/HTTP base "
    "address; alone: $OTEL_EXPORTER_OTLP_ENDPOINT). A low-priority process exports what was recorded: a "
    "collector that is down or slow costs spans (counted on the run), never frames. Needs the [otel] extra.",
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
@click.argument("agent", nargs=-1, required=True, type=click.UNPROCESSED, metavar="-- AGENT [ARGS]...")
def run(
    db_path: Path | None,
    no_record: bool,
    grace: float,
    max_record_bytes: int,
    db_limit: int | None,
    strip_replayed_notices: bool,
    fault_rules: tuple[str, ...],
    faults_file: Path | None,
    seed: int | None,
    live_check: str | None,
    stderr_file: Path | None,
    otlp: str | None,
    otlp_content: bool,
    redact_rules: tuple[str, ...],
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
    """
    if live_check and no_record:
        raise click.UsageError("--check checks what is recorded: it cannot be used with --no-record")
    if redact_rules and no_record:
        raise click.UsageError("--redact masks what is recorded: it cannot be used with --no-record")
    redact = [rule for rule in redact_rules if rule] if redact_rules else None
    if redact:
        from acp_proxy.protocol.redact import Redactor

        Redactor(redact)  # a bad rule: one line, exit 2
    db = None if no_record else resolve_db(db_path)
    plan = build_fault_plan(fault_rules, faults_file, seed)
    from acp_proxy.otel import command as otel

    otlp_to = otel.live_endpoints(otlp, otlp_content, no_record)  # a mistake: one line, exit 2
    if stderr_file is not None:
        _redirect_stderr(stderr_file)
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
    )
    if otlp_to is not None:
        otel.start_live(options.db_path, otlp_to, otlp_content)  # type: ignore[arg-type]
    relay.run_and_exit(options)


def _redirect_stderr(path: Path) -> None:
    """Point fd 2 (inherited by the agent and the recorder) at ``path``, appending."""
    from acp_proxy.store import database as store

    store.refuse_special_file(path, "a file for --stderr-file")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    except OSError as exc:
        raise UsageError(f"cannot write --stderr-file {path}: {(exc.strerror or str(exc)).lower()}") from None
    sys.stderr.flush()
    os.dup2(fd, 2)
    os.close(fd)


def build_fault_plan(rules: tuple[str, ...], path: Path | None, seed: int | None) -> Any:
    """The run's fault plan, or None; a bad rule raises ``RuleError`` (one line: ``bad fault
    rule: ...``). ``ACP_PROXY_FAULTS`` is read as bytes: it must be UTF-8."""
    env_value = _env_text("ACP_PROXY_FAULTS")
    if not rules and path is None and not env_value:
        return None
    from acp_proxy.faults import rules as faults

    plan = faults.FaultPlan.build(rules, path, env_value, seed)
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
        out.line(_faults_help())


# -- query helpers ---------------------------------------------------------------------------


def open_db(db_path: Path | None) -> Any:
    from acp_proxy.store import database as store

    return store.open_for_reading(resolve_db(db_path))


def resolve_ref(db: Any, text: str) -> Any:
    from acp_proxy.read import queries

    return queries.resolve(db, text)


def _runs_of(db: Any, text: str) -> tuple[Any, str, list[int]]:
    """A REF, or ``all``: (the resolved Ref or None, how to name it, its run ids)."""
    from acp_proxy.read import queries

    if text == "all":
        return None, "every run", [row[0] for row in db.execute("select id from runs order by id")]
    resolved = resolve_ref(db, text)
    return resolved, resolved.describe(), queries.run_ids_of(db, resolved)


def parse_filter(words: tuple[str, ...]) -> Any:
    from acp_proxy.protocol import filters

    return filters.parse(" ".join(words))


def _json_array(out: Any, values: Iterable[Any]) -> None:
    """A JSON array written as it is produced, so a million frames never sit in memory."""
    from acp_proxy.cli.views import encode_json

    out.data(b"[")
    for n, value in enumerate(values):
        out.data((b"," if n else b"") + encode_json(value))
    out.data(b"]\n")


def _emit(out: Any, output: Output, values: Iterable[Any]) -> bool:
    """Write ``values`` as JSON or JSONL when asked; False when the caller renders a table."""
    from acp_proxy.cli import views

    if output.jsonl:
        views.write_jsonl(out, values)
        return True
    if output.json:
        _json_array(out, values)
        return True
    return False


def _name(name: str | None, version: str | None) -> str:
    return f"{name} {version}" if name and version else name or ""


def _peers(run: dict[str, Any]) -> str:
    return " ⇄ ".join(
        filter(None, [_name(run["client_name"], run["client_version"]), _name(run["agent_name"], run["agent_version"])])
    )


def _argv_text(argv: str | None) -> str:
    try:
        words = json.loads(argv or "[]")
    except ValueError:
        return argv or ""
    return " ".join(str(w) for w in words) if isinstance(words, list) else str(words)


# -- runs, sessions, sql ---------------------------------------------------------------------


@cli.command()
@db_option
@output_options
@click.option("-n", "--limit", type=count(), default=20, show_default=True, help="0: all runs.")
def runs(db_path: Path | None, output: Output, limit: int) -> None:
    """Recent runs, newest first: when, agent command, peers, protocol, frames, duration, exit.

    \b
    Example:
        acp-proxy runs -n 5
    """
    from acp_proxy.cli import views
    from acp_proxy.read import queries

    db = open_db(db_path)
    found = queries.runs(db, limit or None)
    with views.output(page=output.page) as out:
        if _emit(out, output, found):
            return
        for run in found:
            run["when"] = views.when(run["started_ns"])
            run["agent_cmd"] = _argv_text(run["argv"])
            run["peers"] = _peers(run)
            run["took"] = views.duration(run["ended_ns"] - run["started_ns"]) if run["ended_ns"] else "running"
            run["exit"] = views.exit_status(run["exit_code"], run["exit_signal"], run["status"])
            if run["status"] == "crashed":
                # The proxy's own exit is known unless it died; what crashed may be its recorder.
                known = run["exit_code"] is not None or run["exit_signal"] is not None
                run["exit"] = f"{run['exit']}, recording crashed" if known else "proxy died"
                if run.get("recovered_frames"):
                    run["exit"] += f", recovered {run['recovered_frames']:,} frames"
            if run["interactive"]:
                run["exit"] += " (terminal)"
            lost = run["not_recorded"] or 0
            run["frames_shown"] = f"{run['frames'] or 0}" + (f" ({lost} not recorded)" if lost else "")
            run["faults_shown"] = run["faults_applied"] or ""
        C = views.Column
        views.table(
            out,
            [
                C("id", "run", keep=True, right=True),
                C("when", "started", keep=True),
                C("agent_cmd", "agent command"),
                C("peers", "client ⇄ agent"),
                C("protocol_version", "v"),
                C("frames_shown", "frames", right=True),
                C("took", "duration", right=True),
                C("exit", "exit"),
                C("faults_shown", "faults", right=True),
            ],
            found,
        )


@cli.command()
@db_option
@output_options
@click.option("-n", "--limit", type=count(), default=50, show_default=True, help="0: all sessions.")
def sessions(db_path: Path | None, output: Output, limit: int) -> None:
    """ACP sessions, most recently active first: id, title, cwd, runs, turns, last activity.

    A session loaded or resumed in a later run is the same session, listed once with both
    runs. The id is shown whole; any unique start of it names it in every command.

    \b
    Example:
        acp-proxy sessions --json | jq '.[0].session_id'
    """
    from acp_proxy.cli import views
    from acp_proxy.read import queries

    db = open_db(db_path)
    found = queries.sessions(db, limit or None)
    with views.output(page=output.page) as out:
        if _emit(out, output, found):
            return
        for s in found:
            s["last"] = views.when(s["last_seen_ns"])
        C = views.Column
        views.table(
            out,
            [
                C("session_id", "session", keep=True),
                C("title", "title"),
                C("cwd", "cwd"),
                C("runs", "runs"),
                C("turns", "turns", right=True),
                C("last", "last activity", keep=True),
            ],
            found,
        )


@cli.command()
@db_option
@output_options
@click.argument("query", type=TEXT)
@click.argument("params", nargs=-1, type=TEXT)
def sql(db_path: Path | None, output: Output, query: str, params: tuple[str, ...]) -> None:
    """Run a read-only SQL QUERY (with optional ? PARAMS) against the recording.

    Tables: runs, frames, sessions, session_runs, turns, faults, findings; views: rpc_pairs,
    unanswered, turn_metrics, conversation. Only reading is possible: SELECT, WITH, VALUES,
    EXPLAIN and read-only PRAGMAs run; anything that would write (INSERT, ATTACH, VACUUM INTO,
    CREATE TEMP TABLE, PRAGMA x = y, ...) is refused before it runs.

    \b
    Examples:
        acp-proxy sql "select method, count(*) from frames group by method"
        acp-proxy sql "select raw from frames where run_id = ? and kind = 'error'" 1
    """
    from acp_proxy.cli import views
    from acp_proxy.store import database as store

    reader = store.SqlReader(resolve_db(db_path))
    cursor = reader.execute(query, list(params))
    if cursor.description is None:
        raise UsageError("that statement returns no rows")
    names = [d[0] for d in cursor.description]

    def found() -> Iterator[dict[str, Any]]:
        for row in cursor:
            yield dict(zip(names, row, strict=True))

    with views.output(page=output.page) as out:
        if _emit(out, output, ({k: _jsonable(v) for k, v in row.items()} for row in found())):
            return
        views.table(out, [views.Column(name, name) for name in names], found(), empty="no rows")


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes):
        import base64

        return {"$base64": base64.b64encode(value).decode()}
    return value


# -- stats -----------------------------------------------------------------------------------


@cli.command()
@db_option
@output_options
@click.argument("ref", default="last", type=TEXT)
def stats(db_path: Path | None, output: Output, ref: str) -> None:
    """Latency per method (count, p50/p95/p99/max), per-turn metrics, unanswered requests, errors.

    REF is a run id, `last` (the default), a session id (or a unique prefix), or `all` for every
    run. With --jsonl, one line per section.

    \b
    Examples:
        acp-proxy stats
        acp-proxy stats all --json
    """
    from acp_proxy.cli import views
    from acp_proxy.read import queries

    db = open_db(db_path)
    resolved, label, run_ids = _runs_of(db, ref)
    session_id = resolved.session_id if resolved is not None else None
    scope = None if resolved is None else run_ids
    report: dict[str, Any] = {
        "ref": label,
        "latency": queries.latency_stats(db, scope),
        "turns": queries.turn_stats(db, scope, session_id),
        "unanswered": queries.unanswered(db, scope),
        "errors": queries.errors(db, scope),
    }
    session_len = queries.session_prefix_length(db)
    with views.output(page=output.page) as out:
        if output.json:
            views.write_json(out, report)
            return
        if output.jsonl:
            views.write_jsonl(out, ({"section": k, "rows": v} for k, v in report.items() if k != "ref"))
            return
        C = views.Column

        def short(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
            for row in rows:
                sid = row.get("session_id")
                row["session"] = views.session_label(sid, session_len) if isinstance(sid, str) else sid
            return rows

        out.line(out.paint(f"Stats for {label}", "bold"))
        latency = [dict(r) for r in report["latency"]]
        for row in latency:
            for key in ("p50_ms", "p95_ms", "p99_ms", "max_ms"):
                row[key] = views.ms(row[key])
        views.table(
            out,
            [
                C("method", "method"),
                C("dir", "dir"),
                C("count", "count", right=True),
                C("errors", "errors", right=True),
                C("p50_ms", "p50 ms", right=True),
                C("p95_ms", "p95 ms", right=True),
                C("p99_ms", "p99 ms", right=True),
                C("max_ms", "max ms", right=True),
            ],
            latency,
            title="Latency (dir: the request's)",
        )
        turns = short([dict(r) for r in report["turns"]])
        for row in turns:
            for key in ("to_acceptance_ms", "to_first_output_ms", "duration_ms"):
                row[key] = views.ms(row[key])
        views.table(
            out,
            [
                C("run_id", "run", keep=True, right=True),
                C("session", "session", keep=True),
                C("turn_index", "turn", right=True),
                C("to_acceptance_ms", "accepted", right=True),
                C("to_first_output_ms", "1st output", right=True),
                C("duration_ms", "took", right=True),
                C("chunks", "chunks", right=True),
                C("tool_calls", "tools", right=True),
                C("permission_requests", "perms", right=True),
                C("stop_reason", "stop"),
            ],
            turns,
            title="Turns (ms)",
        )
        views.table(
            out,
            [
                C("run_id", "run", keep=True, right=True),
                C("seq", "seq", keep=True, right=True),
                C("dir", "dir"),
                C("method", "method"),
                C("rpc_id", "id", keep=True),
                C("session", "session", keep=True),
            ],
            short([dict(r) for r in report["unanswered"]]),
            title="Unanswered requests",
        )
        views.table(
            out,
            [
                C("run_id", "run", keep=True, right=True),
                C("seq", "seq", keep=True, right=True),
                C("method", "method"),
                C("rpc_id", "id", keep=True),
                C("error_code", "code", right=True),
                C("error_message", "message"),
            ],
            report["errors"],
            title="Errors",
        )


# -- show ------------------------------------------------------------------------------------


@cli.command()
@db_option
@output_options
@click.option(
    "--raw", "as_raw", is_flag=True, help="The frames themselves, one line each, instead of the conversation."
)
@click.option("--turn", type=Number(int, 1, 2**31 - 1), default=None, help="Only this turn (1 = the first prompt).")
@click.argument("ref", default="last", type=TEXT)
def show(db_path: Path | None, output: Output, as_raw: bool, turn: int | None, ref: str) -> None:
    """The conversation of a run or a session, reconstructed from its frames.

    REF is a run id, `last` (the default), or a session id (or a unique prefix). Messages,
    thoughts (dimmed), tool calls, plans, permission requests and the answers, terminals,
    notices (live), compactions, usage, errors; unknown updates shown with their raw JSON;
    history that came from a replay window is marked `history`. --json: the folded
    conversations (--jsonl: one per line).

    \b
    Examples:
        acp-proxy show
        acp-proxy show 3f2a --turn 2
        acp-proxy show last --raw
    """
    from acp_proxy.cli import transcript, views
    from acp_proxy.read import queries

    db = open_db(db_path)
    resolved = resolve_ref(db, ref)
    found = queries.frames_of(db, resolved)
    with views.output(page=output.page) as out:
        if as_raw:
            if _emit(out, output, (_frame_object(f) for f in found)):
                return
            _frame_lines(out, db, found, verbose=False)
            return
        conversations = transcript.fold_rows(found, ended=_runs_ended(db, queries.run_ids_of(db, resolved)))
        if resolved.is_session:
            conversations = {k: v for k, v in conversations.items() if k == resolved.session_id}
        conversations = {k: v for k, v in conversations.items() if k is not None or not v.empty}
        if _emit(out, output, (transcript.conversation_json(c) for c in conversations.values())):
            return
        con = out.console()
        if not resolved.is_session:
            (run,) = queries.rows(db, "select * from runs where id = ?", [resolved.run_id])
            peers = _peers(run)
            exit_text = views.exit_status(run["exit_code"], run["exit_signal"], run["status"])
            con.print(
                f"Run {run['id']} · {_argv_text(run['argv'])}"
                + (f" · {peers}" if peers else "")
                + (f" · protocol {run['protocol_version']}" if run["protocol_version"] else "")
                + f" · exit {exit_text}",
                style="bold",
                markup=False,
                no_wrap=True,
                overflow="ellipsis",
            )
        if not conversations:
            con.print("no conversation recorded", style="dim")
            return
        for conv in sorted(conversations.values(), key=lambda c: c.timeline[0].seq if c.timeline else 0):
            transcript.render_conversation(con, conv, turn)
        _show_annotations(
            con, db, queries.run_ids_of(db, resolved), {f["seq"] for f in found} if resolved.is_session else None
        )


def _frame_object(row: dict[str, Any]) -> dict[str, Any]:
    from acp_proxy.read import exports

    return exports.frame_object(row)


def _runs_ended(db: Any, run_ids: list[int]) -> dict[int, bool]:
    """Run id -> whether the run is over (its unanswered requests and open turns are final)."""
    from acp_proxy.read import queries

    marks = ",".join("?" * len(run_ids)) or "null"
    return {
        r["id"]: r["status"] != "running"
        for r in queries.rows(db, f"select id, status from runs where id in ({marks})", run_ids)
    }


def _show_annotations(con: Any, db: Any, run_ids: list[int], seqs: set[int] | None) -> None:
    """Faults applied and conformance findings, each pointing at its frame."""
    from acp_proxy.read import queries
    from acp_proxy.read.summary import printable

    marks = ",".join("?" * len(run_ids)) or "null"
    faults = queries.rows(
        db,
        f"select f.run_id, f.seq, f.action, f.detail, f.rule, x.dir, x.kind, x.method from faults f "
        f"left join frames x on x.run_id = f.run_id and x.seq = f.seq "
        f"where f.run_id in ({marks}) order by f.run_id, f.seq",
        run_ids,
    )
    findings = queries.rows(db, f"select * from findings where run_id in ({marks}) order by run_id, seq, id", run_ids)
    if seqs is not None:
        faults = [f for f in faults if f["seq"] in seqs]
        findings = [f for f in findings if f["seq"] in seqs]
    if faults:
        con.print("Faults applied", style="bold red")
        for f in faults:
            what = " ".join(filter(None, [f["dir"], f["kind"], f["method"]]))
            detail = f" ({f['detail']})" if f["detail"] else ""
            line = f"  frame {f['run_id']}:{f['seq']} {what}: {f['action']}{detail} — rule: {f['rule']}"
            con.print(printable(line), markup=False)
    if findings:
        con.print("Findings", style="bold yellow")
        for f in findings:
            line = f"  frame {f['run_id']}:{f['seq']} {f['severity']} {f['rule']}: {f['message']}"
            con.print(printable(line), markup=False)


# -- frames and tail: one line per frame -----------------------------------------------------


def _frame_lines(out: Any, db: Any, rows: Iterable[dict[str, Any]], *, verbose: bool) -> None:
    from acp_proxy.cli import views
    from acp_proxy.read import queries

    lines = views.FrameLines(
        out, session_len=queries.session_prefix_length(db), seq_width=queries.seq_width(db), verbose=verbose
    )
    if out.terminal:
        out.line(out.paint(lines.header(), "bold"))
    for row in rows:
        out.line(lines.line(row))


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


@cli.command(cls=FilterCommand, epilog_source=_filter_help)
@db_option
@output_options
@click.option("--raw", "as_raw", is_flag=True, help="Exactly the bytes that crossed the wire, one frame per line.")
@click.option("-v", "--verbose", is_flag=True, help="Each frame's raw JSON on the line below it.")
@click.option("-n", "--limit", type=count(), default=None, help="At most this many frames.")
@click.argument("filter_words", nargs=-1, metavar="[FILTER]...", type=TEXT)
def frames(
    db_path: Path | None,
    output: Output,
    as_raw: bool,
    verbose: bool,
    limit: int | None,
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
    from acp_proxy.read import queries

    if as_raw and not output.table:
        raise click.UsageError("choose one of --json, --jsonl and --raw")
    expr = parse_filter(filter_words)
    db = open_db(db_path)
    where, params = expr.to_sql()
    sql = f"select * from frames where {where} order by run_id, seq"
    if limit is not None:
        sql += " limit ?"
        params = [*params, limit]
    found = queries.iter_rows(db, sql, params)
    with views.output(page=output.page and not as_raw) as out:
        if as_raw:
            cut = _write_raw(out, found)
            out.flush()
            if cut:
                say(f"{cut} frame(s) were recorded cut (--max-record-bytes); their bytes are incomplete")
            return
        if _emit(out, output, (_frame_object(f) for f in found)):
            return
        _frame_lines(out, db, found, verbose=verbose)


@cli.command(cls=FilterCommand, epilog_source=_filter_help)
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
    shown once, in order within its run. Started before anything was recorded, tail waits for
    the database to appear. --json writes one array, closed when tail stops.

    \b
    Examples:
        acp-proxy tail dir:a2c -update:agent_message_chunk
        acp-proxy tail --from-start --count 20 kind:error
    """
    import time

    from acp_proxy.cli import views
    from acp_proxy.read import queries

    expr = parse_filter(filter_words)
    where, params = expr.to_sql()
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    path = resolve_db(db_path)
    db, waited = _wait_for_database(path, interval, deadline)
    if db is None:
        raise SystemExit(1 if max_count else 0)
    # Started before anything was recorded: everything recorded since is new, shown whole.
    follower = queries.Follower(db, from_start=from_start or waited)
    shown = 0
    with views.output(page=False) as out:
        lines = views.FrameLines(out, session_len=queries.session_prefix_length(db), verbose=verbose)
        if output.json:
            out.data(b"[")
        try:
            while True:
                for f in follower.poll(where, params):
                    if output.table:
                        out.line(lines.line(f))
                    else:
                        encoded = views.encode_json(_frame_object(f))
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

    from acp_proxy.store import database as store

    said = False
    while True:
        try:
            return store.open_for_reading(path), said
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
    resolved, label, run_ids = _runs_of(db, ref)
    header = {
        "ref": ref,
        "resolved": label,
        "runs": queries.rows(db, f"select * from runs where id in ({','.join('?' * len(run_ids)) or 'null'})", run_ids),
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
    try:
        with os.fdopen(fd, "wb") as out_file:
            for line in lines:
                out_file.write(line + b"\n")
                written += 1
    except OSError as exc:  # a full disk: one line, and no partial file left to be mistaken
        with contextlib.suppress(OSError):
            os.unlink(output)
        raise UsageError(f"cannot write {output}: {(exc.strerror or str(exc)).lower()} (nothing was kept)") from None
    say(f"wrote {written} lines to {output} ({exports.warning(redactor)})")


# -- replay and diff -------------------------------------------------------------------------


def _replay_rows(db: Any, ref_text: str) -> list[dict[str, Any]]:
    """The frames of the run a REF names; for a session, the run it first appeared in."""
    from acp_proxy.read import queries

    resolved = resolve_ref(db, ref_text)
    run_ids = queries.run_ids_of(db, resolved)
    if not run_ids:
        raise UsageError(f"{resolved.describe()} has no recorded run")
    return queries.rows(db, "select * from frames where run_id = ? order by seq", [run_ids[0]])


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
    from acp_proxy.store import database as store

    try:
        db = store.open_for_reading(db_path)
    except store.StoreError:
        return None
    try:
        row = db.execute("select max(id) from runs where proxy_pid = ?", [pid]).fetchone()
    finally:
        db.conn.close()
    return row[0] if row else None


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
@click.argument("ref", default="last", type=TEXT)
def check(db_path: Path | None, output: Output, no_schema: bool, stable: bool, save: bool, ref: str) -> None:
    """Check a run or session (default `last`; `all`: every run) against the ACP spec: schema
    and lifecycle rules. Exits 1 on errors.

    Each finding names its rule, severity (error / warning / info), the frame (run, seq) and the
    spec section it comes from. Frames/s goes to stderr; a progress bar shows on a terminal.

    \b
    Examples:
        acp-proxy check
        acp-proxy check 3f2a --json
        acp-proxy check all --no-schema
    """
    import time

    from acp_proxy.checks import rules as checks
    from acp_proxy.cli import views
    from acp_proxy.read import queries

    db = open_db(db_path)
    resolved, label, run_ids = _runs_of(db, ref)
    if not run_ids:
        raise UsageError(f"{label} has no recorded run")
    marks = ",".join("?" * len(run_ids))
    run_rows = queries.rows(db, f"select id, protocol_version, status from runs where id in ({marks})", run_ids)
    versions = {r["id"]: r["protocol_version"] for r in run_rows}
    ended = {r["id"]: r["status"] != "running" for r in run_rows}
    total = db.execute(
        f"select count(*) from frames where run_id in ({marks}) and dir != 'stderr'", run_ids
    ).fetchone()[0]
    # A session is checked in the context of its whole runs (initialize, capabilities and pairing
    # live outside the session's own frames); only findings on the session's frames are kept.
    keep: set[tuple[int, int]] | None = None
    if resolved is not None and resolved.is_session:
        keep = {(f["run_id"], f["seq"]) for f in queries.frames_of(db, resolved)}
    frames_ = queries.iter_rows(
        db,
        f"select * from frames where run_id in ({marks}) and dir != 'stderr' order by run_id, seq",
        run_ids,
    )
    started = time.perf_counter()
    found: list[dict[str, Any]] = []

    def consume(stream: Any) -> None:
        for finding in checks.check(stream, versions=versions, schema=not no_schema, unstable=not stable, ended=ended):
            if keep is None or finding.seq is None or (finding.run_id, finding.seq) in keep:
                found.append(finding.as_dict())

    if sys.stderr.isatty() and total >= _PROGRESS_MIN_FRAMES and output.table:
        from rich.console import Console
        from rich.progress import Progress

        with Progress(console=Console(stderr=True), transient=True) as progress:
            task = progress.add_task("checking", total=total)

            def counted() -> Any:
                for n, frame in enumerate(frames_, start=1):
                    if n % 1000 == 0:
                        progress.update(task, completed=n)
                    yield frame

            consume(counted())
    else:
        consume(frames_)
    took = time.perf_counter() - started
    db.conn.close()
    # End-of-run findings (unanswered requests, unfinished turns) point back at earlier frames.
    found.sort(key=lambda f: (f["run_id"] or 0, f["seq"] or 0))
    if save:
        from acp_proxy.store import database as store

        store.replace_findings(resolve_db(db_path), run_ids, found)
    counts = {s: sum(1 for f in found if f["severity"] == s) for s in ("error", "warning", "info")}
    with views.output(page=output.page) as out:
        if not _emit(out, output, found):
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


def _diff_side(db: Any, ref_text: str) -> tuple[str, list[Any]]:
    from acp_proxy.cli import transcript
    from acp_proxy.read import queries

    resolved = resolve_ref(db, ref_text)
    ended = _runs_ended(db, queries.run_ids_of(db, resolved))
    conversations = transcript.fold_rows(queries.frames_of(db, resolved), ended=ended)
    if resolved.is_session:
        conversations = {k: v for k, v in conversations.items() if k == resolved.session_id}
    return resolved.describe(), list(conversations.values())


def _diff_cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, list):
        return "\n".join(str(v) for v in value) or "-"
    if isinstance(value, dict):
        return json.dumps(value, ensure_ascii=False)
    return str(value) or "-"


@cli.command("diff")
@db_option
@output_options
@click.argument("left", type=TEXT)
@click.argument("right", type=TEXT)
def diff_command(db_path: Path | None, output: Output, left: str, right: str) -> None:
    """Compare two recordings, around and in their turns; exit 1 when they differ.

    Outside the turns: the initialize exchange, set-up calls and their answers (session/new
    errors included), errors, requests left unanswered. Per prompt turn: the prompt, the
    agent's text and thoughts, the tool calls (title, kind, final status), permission outcomes,
    how it ended and errors. Ids, session ids, `_meta` and timestamps are ignored; timing is
    shown side by side but never counts as a difference. --json: both sides and what differs;
    --jsonl: one line outside the turns, then one per turn.

    \b
    Examples:
        acp-proxy diff 1 last
        acp-proxy diff 3f2a 9c1b --json
    """
    from rich import box
    from rich.table import Table
    from rich.text import Text

    from acp_proxy.cli import views
    from acp_proxy.read import diff as df
    from acp_proxy.read.summary import printable

    db = open_db(db_path)
    left_name, left_convs = _diff_side(db, left)
    right_name, right_convs = _diff_side(db, right)
    diffs = df.diff_conversations(left_convs, right_convs)
    connection = df.diff_connection(left_convs, right_convs)
    differ = df.any_difference(diffs, connection)
    with views.output(page=output.page) as out:
        if output.json:
            views.write_json(
                out,
                {
                    "left": left_name,
                    "right": right_name,
                    "differ": differ,
                    "connection": connection.as_json(),
                    "turns": [d.as_json() for d in diffs],
                },
            )
        elif output.jsonl:
            views.write_jsonl(out, [{"connection": connection.as_json()}, *(d.as_json() for d in diffs)])
        else:
            con = out.console()

            def side_by_side(title: str, differs: list[str], rows: list[tuple[str, str, str]]) -> None:
                mark = "differs: " + ", ".join(differs) if differs else "same"
                table = Table(
                    title=f"{title} · {mark}",
                    title_justify="left",
                    box=None if not out.terminal else box.SIMPLE_HEAD,
                    show_lines=False,
                )
                table.add_column("")
                table.add_column(left_name)
                table.add_column(right_name)
                for key, a, b in rows:
                    style = "red" if key in differs or "missing" in differs else ""
                    table.add_row(
                        Text(key, style=style or "bold"),
                        Text(printable_lines(a, printable), style=style),
                        Text(printable_lines(b, printable), style=style),
                    )
                con.print(table)

            side_by_side(
                "outside the turns",
                connection.differs,
                [(k, _diff_cell(connection.left[k]), _diff_cell(connection.right[k])) for k in df.CONNECTION],
            )
            for d in diffs:
                side_by_side(
                    f"session {d.session} · turn {d.turn}",
                    d.differs,
                    [
                        (
                            key,
                            _diff_cell(d.left.get(key)) if d.left else "(no such turn)",
                            _diff_cell(d.right.get(key)) if d.right else "(no such turn)",
                        )
                        for key in (*df.COMPARED, *df.SHOWN)
                    ],
                )
            if not diffs:
                con.print("no prompt turns on either side", style="dim")
    if output.table:
        summary = sum(1 for d in diffs if d.differs)
        outside = " and outside the turns" if connection.differs else ""
        say(
            f"{summary} of {len(diffs)} turn(s) differ{outside}"
            if differ
            else f"no difference in {len(diffs)} turn(s) or around them"
        )
    if differ:
        raise SystemExit(1)


def printable_lines(text: str, printable: Any) -> str:
    """Each line made printable; the line breaks kept (a diff cell may hold several)."""
    return "\n".join(printable(line) for line in text.split("\n"))


cli.add_command(__import__("acp_proxy.web.command", fromlist=["ui"]).ui)
cli.add_command(__import__("acp_proxy.cli.import_command", fromlist=["import_log"]).import_log)
cli.add_command(__import__("acp_proxy.mcp.server", fromlist=["mcp"]).mcp)


def main() -> None:
    cli(prog_name="acp-proxy")
