"""The command line: thin click commands over the library.

Owns: parsing arguments, turning user mistakes into one clear line and a non-zero exit
(``click.ClickException``), and choosing where output goes. Must not know: how frames are
relayed, decoded or stored — it calls ``relay``, ``store`` and the query modules for that.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import click

from . import __version__

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
    from .locations import default_db_path

    return db_path if db_path is not None else default_db_path()


class VerbatimEpilog(click.Command):
    """A command whose epilog (a language reference) is printed as written, not rewrapped."""

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        if self.epilog:
            formatter.write("\n" + self.epilog.rstrip() + "\n")


def _filter_help() -> str:
    from .filters import HELP

    return HELP


def _faults_help() -> str:
    from .faults import HELP

    return HELP


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
@click.option(
    "--fault",
    "fault_rules",
    multiple=True,
    metavar="RULE",
    help="Inject a fault, e.g. 'drop if method:session/prompt kind:response' (repeatable; "
    "rules also come from --faults FILE and $ACP_PROXY_FAULTS). See `acp-proxy faults-help`.",
)
@click.option(
    "--faults",
    "faults_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="A TOML file of fault rules (see examples/faults.toml).",
)
@click.option("--seed", type=int, default=None, help="Seed for probabilistic faults (recorded on the run).")
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
    if live_check and no_record:
        raise click.UsageError("--check checks what is recorded: it cannot be used with --no-record")
    plan = build_fault_plan(fault_rules, faults_file, seed)
    from . import relay  # imported here: query commands need neither trio nor processes

    options = relay.RunOptions(
        argv=list(agent),
        db_path=None if no_record else resolve_db(db_path),
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
        },
    )
    relay.run_and_exit(options)


def build_fault_plan(rules: tuple[str, ...], path: Path | None, seed: int | None) -> Any:
    """The run's fault plan, or None; a bad rule is one line on stderr and exit 2."""
    import os

    env_value = os.environ.get("ACP_PROXY_FAULTS")
    if not rules and path is None and not env_value:
        return None
    from . import faults

    try:
        plan = faults.FaultPlan.build(rules, path, env_value, seed)
    except faults.RuleError as exc:
        where = f"{exc.where}: " if exc.where else ""
        at = f" at column {exc.column + 1}" if exc.column is not None else ""
        rule = f" in {exc.rule!r}" if exc.rule is not None else ""
        from .relay import say

        say(f"bad fault rule: {where}{exc.message}{at}{rule}")
        raise SystemExit(2) from None
    return plan if plan else None


@cli.command("faults-help")
def faults_help() -> None:
    """The fault rule language, in full (the rules of `run --fault`, `--faults` FILE and
    $ACP_PROXY_FAULTS)."""
    click.echo(_faults_help())


# -- query commands ------------------------------------------------------------------------


def open_db(db_path: Path | None) -> Any:
    from . import store

    try:
        return store.open_for_reading(resolve_db(db_path))
    except store.StoreError as exc:
        raise click.ClickException(str(exc)) from None


def resolve_ref(db: Any, text: str) -> Any:
    from . import queries

    try:
        return queries.resolve(db, text)
    except queries.RefError as exc:
        raise click.ClickException(str(exc)) from None


def json_options(func: click.decorators.FC) -> click.decorators.FC:
    func = click.option("--jsonl", "as_jsonl", is_flag=True, help="One JSON object per line.")(func)
    return click.option("--json", "as_json", is_flag=True, help="A JSON array, for scripts.")(func)


@cli.command()
@db_option
@json_options
@click.option("-n", "--limit", type=click.IntRange(min=0), default=20, show_default=True, help="0: all runs.")
def runs(db_path: Path | None, as_json: bool, as_jsonl: bool, limit: int) -> None:
    """Recent runs, newest first: when, agent command, peers, protocol, frames, duration, exit.

    \b
    Example:
        acp-proxy runs -n 5
    """
    from . import queries, views

    db = open_db(db_path)
    found = queries.runs(db, limit or None)
    if as_json or as_jsonl:
        (views.write_json if as_json else views.write_jsonl)(found)
        return
    for run in found:
        run["when"] = views.when(run["started_ns"])
        run["agent_cmd"] = " ".join(json.loads(run["argv"] or "[]"))
        run["peers"] = " ⇄ ".join(
            filter(
                None, [_name(run["client_name"], run["client_version"]), _name(run["agent_name"], run["agent_version"])]
            )
        )
        run["took"] = views.duration(run["ended_ns"] - run["started_ns"]) if run["ended_ns"] else "running"
        run["exit"] = views.exit_status(run["exit_code"], run["exit_signal"], run["status"])
        if run["status"] == "crashed":
            run["exit"] = "proxy died"
        if run["interactive"]:
            run["exit"] += " (terminal)"
        lost = run["not_recorded"] or 0
        run["frames_shown"] = f"{run['frames'] or 0}" + (f" ({lost} not recorded)" if lost else "")
        run["faults_shown"] = run["faults_applied"] or ""
    views.table(
        views.console(),
        [
            ("id", "run"),
            ("when", "started"),
            ("agent_cmd", "agent command"),
            ("peers", "client ⇄ agent"),
            ("protocol_version", "v"),
            ("frames_shown", "frames"),
            ("took", "duration"),
            ("exit", "exit"),
            ("faults_shown", "faults"),
        ],
        found,
    )


def _name(name: str | None, version: str | None) -> str:
    return f"{name} {version}" if name and version else name or ""


@cli.command()
@db_option
@json_options
@click.option("-n", "--limit", type=click.IntRange(min=0), default=50, show_default=True, help="0: all sessions.")
def sessions(db_path: Path | None, as_json: bool, as_jsonl: bool, limit: int) -> None:
    """ACP sessions, most recently active first: id, title, cwd, runs, turns, last activity.

    A session loaded or resumed in a later run is the same session, listed once with both runs.

    \b
    Example:
        acp-proxy sessions --json | jq '.[0].session_id'
    """
    from . import queries, views

    db = open_db(db_path)
    found = queries.sessions(db, limit or None)
    if as_json or as_jsonl:
        (views.write_json if as_json else views.write_jsonl)(found)
        return
    for s in found:
        s["last"] = views.when(s["last_seen_ns"])
    views.table(
        views.console(),
        [
            ("session_id", "session"),
            ("title", "title"),
            ("cwd", "cwd"),
            ("runs", "runs"),
            ("turns", "turns"),
            ("last", "last activity"),
        ],
        found,
    )


@cli.command()
@db_option
@json_options
@click.argument("query")
@click.argument("params", nargs=-1)
def sql(db_path: Path | None, as_json: bool, as_jsonl: bool, query: str, params: tuple[str, ...]) -> None:
    """Run a read-only SQL QUERY (with optional ? PARAMS) against the recording.

    Tables: runs, frames, sessions, session_runs, turns, faults, findings; views: rpc_pairs,
    unanswered, turn_metrics, conversation. The database is opened read-only.

    \b
    Example:
        acp-proxy sql "select method, count(*) from frames group by method"
        acp-proxy sql "select raw from frames where run_id = ? and kind = 'error'" 3
    """
    import sqlite3

    from . import queries, views

    db = open_db(db_path)
    try:
        found = queries.rows(db, query, list(params))
    except sqlite3.Error as exc:
        raise click.ClickException(f"SQL error: {exc}") from None
    except TypeError:
        raise click.ClickException("that statement returns no rows") from None
    if as_json or as_jsonl:
        (views.write_json if as_json else views.write_jsonl)(found)
        return
    columns = [(name, name) for name in (found[0] if found else {})]
    views.table(views.console(), columns, found)


@cli.command()
@db_option
@click.option("--json", "as_json", is_flag=True, help="One JSON object with every section.")
@click.argument("ref", required=False)
def stats(db_path: Path | None, as_json: bool, ref: str | None) -> None:
    """Latency per method (count, p50/p95/p99/max), per-turn metrics, unanswered requests, errors.

    REF is a run id, `last`, or a session id (or a unique prefix); without it, every run.

    \b
    Example:
        acp-proxy stats last
    """
    from . import queries, views

    db = open_db(db_path)
    resolved = resolve_ref(db, ref) if ref else None
    run_ids = queries.run_ids_of(db, resolved) if resolved else None
    session_id = resolved.session_id if resolved else None
    report = {
        "latency": queries.latency_stats(db, run_ids),
        "turns": queries.turn_stats(db, run_ids, session_id),
        "unanswered": queries.unanswered(db, run_ids),
        "errors": queries.errors(db, run_ids),
    }
    if as_json:
        views.write_json(report)
        return
    con = views.console()
    for row in report["latency"]:
        for key in ("p50_ms", "p95_ms", "p99_ms", "max_ms"):
            row[key] = views.ms(row[key])
    views.table(
        con,
        [
            ("method", "method"),
            ("dir", "request dir"),
            ("count", "count"),
            ("errors", "errors"),
            ("p50_ms", "p50 ms"),
            ("p95_ms", "p95 ms"),
            ("p99_ms", "p99 ms"),
            ("max_ms", "max ms"),
        ],
        report["latency"],
        title="Latency",
    )
    for row in report["turns"]:
        for key in ("to_acceptance_ms", "to_first_output_ms", "duration_ms"):
            row[key] = views.ms(row[key])
    views.table(
        con,
        [
            ("run_id", "run"),
            ("session_id", "session"),
            ("turn_index", "turn"),
            ("to_acceptance_ms", "accepted ms"),
            ("to_first_output_ms", "first output ms"),
            ("duration_ms", "duration ms"),
            ("chunks", "chunks"),
            ("tool_calls", "tool calls"),
            ("permission_requests", "permissions"),
            ("stop_reason", "stop reason"),
        ],
        report["turns"],
        title="Turns",
    )
    views.table(
        con,
        [("run_id", "run"), ("seq", "seq"), ("dir", "dir"), ("method", "method"), ("rpc_id", "id")],
        report["unanswered"],
        title="Unanswered requests",
    )
    views.table(
        con,
        [
            ("run_id", "run"),
            ("seq", "seq"),
            ("method", "method"),
            ("rpc_id", "id"),
            ("error_code", "code"),
            ("error_message", "message"),
        ],
        report["errors"],
        title="Errors",
    )


@cli.command()
@db_option
@click.option("--raw", "as_raw", is_flag=True, help="The frames themselves, as a table, instead of the conversation.")
@click.option("--turn", type=click.IntRange(min=0), default=None, help="Only this turn (1 = the first prompt).")
@click.option("--json", "as_json", is_flag=True, help="The folded conversation as JSON.")
@click.argument("ref")
def show(db_path: Path | None, as_raw: bool, turn: int | None, as_json: bool, ref: str) -> None:
    """The conversation of a run or a session, reconstructed from its frames.

    REF is a run id, `last`, or a session id (or a unique prefix). Messages, thoughts (dimmed),
    tool calls, plans, permission requests and the answers, terminals, notices (live),
    compactions, usage, errors; unknown updates shown with their raw JSON; history that came
    from a replay window is marked `history`.

    \b
    Examples:
        acp-proxy show last
        acp-proxy show 3f2a --turn 2
        acp-proxy show last --raw
    """
    from . import queries, transcript, views

    db = open_db(db_path)
    resolved = resolve_ref(db, ref)
    found = queries.frames_of(db, resolved)
    if as_raw:
        rows = [f for f in found if turn is None]
        views.table(views.console(), FRAME_TABLE, _frame_rows_for_table(rows))
        return
    conversations = transcript.fold_rows(found)
    if resolved.is_session:
        conversations = {k: v for k, v in conversations.items() if k == resolved.session_id}
    conversations = {k: v for k, v in conversations.items() if k is not None or not v.empty}
    if as_json:
        views.write_json([transcript.conversation_json(c) for c in conversations.values()])
        return
    con = views.console()
    if not resolved.is_session:
        (run,) = queries.rows(db, "select * from runs where id = ?", [resolved.run_id])
        peers = " ⇄ ".join(
            filter(
                None, [_name(run["client_name"], run["client_version"]), _name(run["agent_name"], run["agent_version"])]
            )
        )
        exit_text = views.exit_status(run["exit_code"], run["exit_signal"], run["status"])
        con.print(
            f"Run {run['id']} · {' '.join(json.loads(run['argv'] or '[]'))}"
            + (f" · {peers}" if peers else "")
            + (f" · protocol {run['protocol_version']}" if run["protocol_version"] else "")
            + f" · exit {exit_text}",
            style="bold",
            markup=False,
        )
    if not conversations:
        con.print("no conversation recorded", style="dim")
        return
    for conv in sorted(conversations.values(), key=lambda c: c.timeline[0].seq if c.timeline else 0):
        transcript.render_conversation(con, conv, turn)
    _show_annotations(
        con, db, queries.run_ids_of(db, resolved), {f["seq"] for f in found} if resolved.is_session else None
    )


def _show_annotations(con: Any, db: Any, run_ids: list[int], seqs: set[int] | None) -> None:
    """Faults applied and conformance findings, each pointing at its frame."""
    from . import queries

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
            con.print(
                f"  frame {f['run_id']}:{f['seq']} {what}: {f['action']}{detail} — rule: {f['rule']}", markup=False
            )
    if findings:
        con.print("Findings", style="bold yellow")
        for f in findings:
            con.print(f"  frame {f['run_id']}:{f['seq']} {f['severity']} {f['rule']}: {f['message']}", markup=False)


def parse_filter(words: tuple[str, ...]) -> Any:
    from . import filters

    text = " ".join(words)
    try:
        return filters.parse(text)
    except filters.FilterError as exc:
        raise click.ClickException(f"bad filter: {exc}") from None


def _frame_rows_for_table(found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    from . import views

    for f in found:
        f["time"] = views.clock(f["ts_ns"])
        f["where"] = f"{f['run_id']}:{f['seq']}"
        f["what"] = f["method"] or f["kind"]
        f["update_or_error"] = f["update_kind"] or (
            f"{f['error_code']} {f['error_message'] or ''}".strip() if f["error_code"] is not None else ""
        )
        f["latency"] = views.ms(f["latency_ns"] / 1e6) if f["latency_ns"] is not None else ""
        f["flags"] = " ".join(frame_flags(f))
        text = f["raw"] if f["raw"] is not None else repr(f["raw_bytes"])
        f["preview"] = text if len(text) <= 100 else text[:97] + "..."
    return found


def frame_flags(f: dict[str, Any]) -> list[str]:
    flags = []
    if f.get("replay"):
        flags.append("replay")
    if f.get("unanswered"):
        flags.append("unanswered")
    if f.get("forwarded") == 0:
        flags.append("not-forwarded")
    if f.get("fault"):
        flags.append(f"fault:{f['fault']}")
    if f.get("unknown"):
        flags.append(f"unknown:{f['unknown']}")
    if f.get("cut"):
        flags.append("cut")
    if f.get("decode_error") and f.get("kind") != "invalid":
        flags.append("decode-error")
    if f.get("note") and f.get("forwarded") != 0:
        flags.append("note")
    return flags


FRAME_TABLE = [
    ("where", "run:seq"),
    ("time", "time"),
    ("dir", "dir"),
    ("kind", "kind"),
    ("what", "method"),
    ("rpc_id", "id"),
    ("session_id", "session"),
    ("update_or_error", "update / error"),
    ("latency", "ms"),
    ("flags", "flags"),
    ("preview", "frame"),
]


@cli.command(cls=VerbatimEpilog, epilog=_filter_help())
@db_option
@click.option("--json", "as_json", is_flag=True, help="A JSON array of frames; `raw` is the frame verbatim.")
@click.option("--jsonl", "as_jsonl", is_flag=True, help="One JSON object per frame; `raw` is the frame verbatim.")
@click.option("--raw", "as_raw", is_flag=True, help="Exactly the bytes that crossed the wire, one frame per line.")
@click.option("-n", "--limit", type=click.IntRange(min=0), default=None, help="At most this many frames.")
@click.argument("filter_words", nargs=-1, metavar="[FILTER]...")
def frames(
    db_path: Path | None,
    as_json: bool,
    as_jsonl: bool,
    as_raw: bool,
    limit: int | None,
    filter_words: tuple[str, ...],
) -> None:
    """The frames of every recorded run, or those the FILTER selects, in relay order.

    \b
    Examples:
        acp-proxy frames run:last dir:a2c update:agent_message_chunk
        acp-proxy frames 'method:session/prompt kind:response latency>2s'
        acp-proxy frames kind:error OR unanswered
        acp-proxy frames run:3 dir:c2a --raw | some-acp-agent   # replay a client's side
    """
    from . import exports, queries, views

    if as_json + as_jsonl + as_raw > 1:
        raise click.UsageError("choose one of --json, --jsonl and --raw")
    expr = parse_filter(filter_words)
    db = open_db(db_path)
    where, params = expr.to_sql()
    sql = f"select * from frames where {where} order by run_id, seq"
    if limit is not None:
        sql += f" limit {int(limit)}"
    found = queries.iter_rows(db, sql, params)
    if as_raw:
        out = sys.stdout.buffer
        cut = 0
        for f in found:
            if f["batch_seq"] is not None:
                continue  # the batch line itself carries these bytes
            data = f["raw_bytes"] if f["raw_bytes"] is not None else (f["raw"] or "").encode()
            out.write(data + (b"\n" if f["terminated"] else b""))
            cut += f["cut"] or 0
        out.flush()
        if cut:
            click.echo(
                f"acp-proxy: {cut} frame(s) were recorded cut (--max-record-bytes); their bytes are incomplete",
                err=True,
            )
        return
    if as_jsonl:
        views.write_jsonl(exports.frame_object(f) for f in found)
        return
    if as_json:
        views.write_json([exports.frame_object(f) for f in found])
        return
    rows = list(found)
    views.table(views.console(), FRAME_TABLE, _frame_rows_for_table(rows))


@cli.command(cls=VerbatimEpilog, epilog=_filter_help())
@db_option
@click.option("--jsonl", "as_jsonl", is_flag=True, help="One JSON object per frame.")
@click.option("-c", "--count", type=click.IntRange(min=1), default=None, help="Stop after this many frames.")
@click.option("--from-start", is_flag=True, help="Begin with frames already recorded, not only new ones.")
@click.option(
    "--interval", type=click.FloatRange(min=0.01), default=0.2, show_default=True, help="Seconds between polls."
)
@click.argument("filter_words", nargs=-1, metavar="[FILTER]...")
def tail(
    db_path: Path | None,
    as_jsonl: bool,
    count: int | None,
    from_start: bool,
    interval: float,
    filter_words: tuple[str, ...],
) -> None:
    """Follow frames as proxies record them (run it in another terminal), with the FILTER.

    \b
    Example:
        acp-proxy tail dir:a2c -update:agent_message_chunk
    """
    import time

    from . import exports, queries, views

    expr = parse_filter(filter_words)
    db = open_db(db_path)
    where, params = expr.to_sql()
    last_seq: dict[int, int] = {}
    if not from_start:
        for run_id, seq in db.execute("select run_id, max(seq) from frames group by run_id"):
            last_seq[run_id] = seq
    shown = 0
    con = views.console()
    try:
        while True:
            active = [
                r[0]
                for r in db.execute(
                    "select id from runs where status = 'running' or id > ?", [max(last_seq, default=0)]
                )
            ]
            for run_id in sorted(set(active) | ({max(last_seq)} if last_seq else set())):
                sql = f"select * from frames where run_id = ? and seq > ? and ({where}) order by seq limit 5000"
                for f in queries.iter_rows(db, sql, [run_id, last_seq.get(run_id, 0), *params]):
                    last_seq[run_id] = f["seq"]
                    if as_jsonl:
                        views.write_jsonl([exports.frame_object(f)])
                    else:
                        row = _frame_rows_for_table([f])[0]
                        con.print(
                            f"{row['time']} {row['where']:>9} {row['dir']:<6} {row['what'] or '':<24} "
                            f"{row['rpc_id'] or '':<6} {row['update_or_error']:<24} {row['flags']} {row['preview']}",
                            markup=False,
                        )
                    shown += 1
                    if count is not None and shown >= count:
                        return
            time.sleep(interval)  # polling the database: there is no change feed to wait on
    except KeyboardInterrupt:
        return


@cli.command()
@db_option
@click.option(
    "-f",
    "--format",
    "fmt",
    type=click.Choice(["jsonl", "jsons", "inspector"]),
    default="jsonl",
    show_default=True,
    help="jsonl: acp-proxy's own; jsons: the ACP conductor trace viewer; inspector: ACP Inspector traces.",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write here (created 0600) instead of stdout.",
)
@click.argument("ref")
def export(db_path: Path | None, fmt: str, output: Path | None, ref: str) -> None:
    """Export a run or a session (REF: run id, `last`, or session id / prefix).

    Nothing is redacted: the export holds the whole conversation. Files are created 0600.

    \b
    Examples:
        acp-proxy export last -o run.jsonl
        acp-proxy export 3f2a --format jsons -o trace.jsons   # open with sacp-trace-viewer
    """
    import os

    from . import exports, queries

    db = open_db(db_path)
    resolved = resolve_ref(db, ref)
    run_ids = queries.run_ids_of(db, resolved)
    header = {
        "ref": ref,
        "resolved": resolved.describe(),
        "runs": queries.rows(db, f"select * from runs where id in ({','.join('?' * len(run_ids)) or 'null'})", run_ids),
    }
    found = queries.frames_of(db, resolved, include_stderr=True)
    lines = exports.export_lines(fmt, found, header)
    if output is None:
        out = sys.stdout.buffer
        for line in lines:
            out.write(line + b"\n")
        out.flush()
        if fmt == "jsonl":
            click.echo(f"acp-proxy: {exports.WARNING}", err=True)
        return
    try:
        fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    except OSError as exc:
        raise click.ClickException(f"cannot write {output}: {exc.strerror}") from None
    os.fchmod(fd, 0o600)
    written = 0
    with os.fdopen(fd, "wb") as out:
        for line in lines:
            out.write(line + b"\n")
            written += 1
    click.echo(f"acp-proxy: wrote {written} lines to {output} ({exports.WARNING})", err=True)


# -- replay and diff (issue 6) ---------------------------------------------------------------


def _replay_rows(db: Any, ref_text: str) -> list[dict[str, Any]]:
    """The frames of the run a REF names; for a session, the run it first appeared in."""
    from . import queries

    resolved = resolve_ref(db, ref_text)
    run_ids = queries.run_ids_of(db, resolved)
    if not run_ids:
        raise click.ClickException(f"{resolved.describe()} has no recorded run")
    return queries.rows(db, "select * from frames where run_id = ? order by seq", [run_ids[0]])


@cli.command()
@db_option
@click.option(
    "--timing",
    default="original",
    show_default=True,
    metavar="original|fast|N.x",
    help="Recorded pace, none at all, or sped up N times (2x, 0.5x).",
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
    "recorded in the same database) with the recorded requests and answers.",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(min=0, min_open=True),
    default=60.0,
    show_default=True,
    help="With --client: give up (exit 1) after this many seconds.",
)
@click.argument("ref")
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
    Stdout carries only the protocol; the report goes to stderr.

    \b
    Examples:
        acp-proxy replay last
        acp-proxy replay 3f2a --timing fast --strict
        acp-proxy replay 12 --timing 2x
        acp-proxy replay 3 --client -- my-agent --flag    # rerun run 3's client; then `diff 3 last`
    """
    import sys

    from . import replay as rp

    try:
        speed = rp.parse_timing(timing)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--timing") from None
    if bool(agent) != as_client:
        raise click.UsageError("--client needs `-- AGENT [ARGS]...`, and an AGENT needs --client")
    db = open_db(db_path)
    rows = _replay_rows(db, ref)
    db.conn.close()
    if as_client:
        _replay_client(rows, resolve_db(db_path), list(agent), strict, timeout_s)
        return
    replayer = rp.Replayer(rows, strict=strict, match_cwd=match_cwd)
    deviations = rp.serve(replayer, sys.stdin.buffer, sys.stdout.buffer, speed)
    if deviations:
        word = "failed" if strict else "finished"
        click.echo(f"acp-proxy: replay {word} with {len(deviations)} deviation(s) from the recording", err=True)
        if strict:
            raise SystemExit(1)


def _replay_client(rows: list[dict[str, Any]], db_path: Path, agent: list[str], strict: bool, timeout_s: float) -> None:
    """`replay --client`: drive `acp-proxy run --db DB -- AGENT` with the recorded client side."""
    import subprocess
    import sys

    from . import replay as rp

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
    if replayer.fatal is not None:
        click.echo(f"acp-proxy: replay --client failed: {replayer.fatal}", err=True)
        raise SystemExit(1)
    if status != 0:
        deviations.append(f"the agent exited with status {status}")
        click.echo(f"acp-proxy: replay: the agent exited with status {status}", err=True)
    if deviations:
        word = "failed" if strict else "finished"
        click.echo(
            f"acp-proxy: replay --client {word} with {len(deviations)} deviation(s) from the recording", err=True
        )
        if strict:
            raise SystemExit(1)


# -- conformance checks (issue 7) --------------------------------------------------------------

_PROGRESS_MIN_FRAMES = 20_000  # below this a check takes well under a second: no bar


@cli.command()
@db_option
@click.option("--json", "as_json", is_flag=True, help="A JSON array of findings, for scripts.")
@click.option("--no-schema", is_flag=True, help="Lifecycle rules only; skip JSON Schema validation (faster).")
@click.option("--stable", is_flag=True, help="Validate against the stable schema, not the draft superset.")
@click.option(
    "--save", is_flag=True, help="Also store the findings in the database (replacing the runs' earlier ones)."
)
@click.argument("ref")
def check(db_path: Path | None, as_json: bool, no_schema: bool, stable: bool, save: bool, ref: str) -> None:
    """Check a run or session (or `all` runs) against the ACP spec: schema and lifecycle rules.

    Exits 1 on errors.

    Each finding names its rule, severity (error / warning / info), the frame (run, seq) and the
    spec section it comes from. Frames/s goes to stderr; a progress bar shows on a terminal.

    \b
    Examples:
        acp-proxy check last
        acp-proxy check 3f2a --json
    """
    import sys
    import time

    from . import checks, queries, views

    db = open_db(db_path)
    if ref == "all":
        resolved = None
        label = "every run"
        run_ids = [row[0] for row in db.execute("select id from runs order by id")]
    else:
        resolved = resolve_ref(db, ref)
        label = resolved.describe()
        run_ids = queries.run_ids_of(db, resolved)
    if not run_ids:
        raise click.ClickException(f"{label} has no recorded run")
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
    frames = queries.iter_rows(
        db,
        f"select * from frames where run_id in ({marks}) and dir != 'stderr' order by run_id, seq",
        run_ids,
    )
    con = views.console()
    started = time.perf_counter()
    found: list[dict[str, Any]] = []

    def consume(stream: Any) -> None:
        for finding in checks.check(stream, versions=versions, schema=not no_schema, unstable=not stable, ended=ended):
            if keep is None or finding.seq is None or (finding.run_id, finding.seq) in keep:
                found.append(finding.as_dict())

    if views.is_terminal(con) and total >= _PROGRESS_MIN_FRAMES and not as_json:
        from rich.console import Console
        from rich.progress import Progress

        with Progress(console=Console(stderr=True), transient=True) as progress:
            task = progress.add_task("checking", total=total)

            def counted() -> Any:
                for n, frame in enumerate(frames, start=1):
                    if n % 1000 == 0:
                        progress.update(task, completed=n)
                    yield frame

            consume(counted())
    else:
        consume(frames)
    took = time.perf_counter() - started
    db.conn.close()
    # End-of-run findings (unanswered requests, unfinished turns) point back at earlier frames.
    found.sort(key=lambda f: (f["run_id"] or 0, f["seq"] or 0))
    if save:
        from . import store

        try:
            store.replace_findings(resolve_db(db_path), run_ids, found)
        except store.StoreError as exc:
            raise click.ClickException(str(exc)) from None
    counts = {s: sum(1 for f in found if f["severity"] == s) for s in ("error", "warning", "info")}
    if as_json:
        views.write_json(found)
    elif not found:
        click.echo(f"no findings for {label}")
    else:
        views.table(
            con,
            [
                ("run_id", "run"),
                ("seq", "seq"),
                ("severity", "severity"),
                ("rule_id", "rule"),
                ("message", "message"),
                ("spec", "spec"),
            ],
            found,
            title=f"findings for {label}",
        )
    rate = f"{total / took:,.0f} frames/s" if took > 0 else "instant"
    click.echo(
        f"acp-proxy: checked {total} frames in {took:.2f}s ({rate}): "
        f"{counts['error']} errors, {counts['warning']} warnings, {counts['info']} info",
        err=True,
    )
    if counts["error"]:
        sys.exit(1)


def _diff_side(db: Any, ref_text: str) -> tuple[str, list[Any]]:
    from . import queries, transcript

    resolved = resolve_ref(db, ref_text)
    conversations = transcript.fold_rows(queries.frames_of(db, resolved))
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
@click.option("--json", "as_json", is_flag=True, help="Every turn of both sides as JSON, with what differs.")
@click.argument("left")
@click.argument("right")
def diff_command(db_path: Path | None, as_json: bool, left: str, right: str) -> None:
    """Compare two recordings turn by turn; exit 1 when they differ.

    Per prompt turn: the prompt, the agent's text and thoughts, the tool calls (title, kind,
    final status), permission outcomes, the stop reason and errors. Ids, session ids, `_meta`
    and timestamps are ignored; timing is shown side by side but never counts as a difference.

    \b
    Examples:
        acp-proxy diff 3 last
        acp-proxy diff 3f2a 9c1b --json
    """
    from rich import box
    from rich.table import Table
    from rich.text import Text

    from . import diff as df
    from . import views

    db = open_db(db_path)
    left_name, left_convs = _diff_side(db, left)
    right_name, right_convs = _diff_side(db, right)
    diffs = df.diff_conversations(left_convs, right_convs)
    differ = df.any_difference(diffs)
    if as_json:
        views.write_json(
            {"left": left_name, "right": right_name, "differ": differ, "turns": [d.as_json() for d in diffs]}
        )
    else:
        con = views.console()
        terminal = views.is_terminal(con)
        for d in diffs:
            mark = "differs: " + ", ".join(d.differs) if d.differs else "same"
            table = Table(
                title=f"session {d.session} · turn {d.turn} · {mark}",
                title_justify="left",
                box=None if not terminal else box.SIMPLE_HEAD,
                show_lines=False,
            )
            table.add_column("")
            table.add_column(left_name)
            table.add_column(right_name)
            for key in (*df.COMPARED, *df.SHOWN):
                a = _diff_cell(d.left.get(key)) if d.left else "(no such turn)"
                b = _diff_cell(d.right.get(key)) if d.right else "(no such turn)"
                style = "red" if key in d.differs or "missing" in d.differs else ""
                table.add_row(Text(key, style=style or "bold"), Text(a, style=style), Text(b, style=style))
            con.print(table)
        if not diffs:
            con.print("no prompt turns on either side", style="dim")
        summary = sum(1 for d in diffs if d.differs)
        click.echo(
            f"acp-proxy: {summary} of {len(diffs)} turn(s) differ"
            if differ
            else f"acp-proxy: no difference in {len(diffs)} turn(s)",
            err=True,
        )
    if differ:
        raise SystemExit(1)


def main() -> None:
    cli(prog_name="acp-proxy")
