"""``runs``, ``sessions``, ``sql`` and ``stats``: tables of what was recorded.

Owns: those commands' options, help and tables. Must not know: SQL (the read layer answers;
``sql`` hands the user's own query to the store's read-only ``SqlReader``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from acp_proxy.cli.group import (
    argv_text,
    cli,
    emit,
    open_db,
    peers,
    resolve_db,
)
from acp_proxy.cli.options import db_option
from acp_proxy.cli.support import (
    TEXT,
    Output,
    count,
    output_options,
)
from acp_proxy.errors import UsageError

# -- runs, sessions, sql ---------------------------------------------------------------------


@cli.command()
@db_option
@output_options
@click.option("-n", "--limit", type=count(), default=20, show_default=True, help="0: all runs.")
def runs(db_path: Path | None, output: Output, limit: int) -> None:
    """Recent runs, newest first: when, agent command, peers, protocol, frames, turns (a proxy
    chain's included), duration, exit.

    \b
    Example:
        acp-proxy runs -n 5
    """
    from acp_proxy.cli import views
    from acp_proxy.read import listing

    db = open_db(db_path)
    found = listing.runs(db, limit or None)
    with views.output(page=output.page) as out:
        if emit(out, output, found):
            return
        for run in found:
            run["when"] = views.when(run["started_ns"])
            run["agent_cmd"] = argv_text(run["argv"])
            run["peers"] = peers(run)
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
                C("turns", "turns", right=True, optional=True),  # frames say how long; turns can go
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
    from acp_proxy.read import listing

    db = open_db(db_path)
    found = listing.sessions(db, limit or None)
    with views.output(page=output.page) as out:
        if emit(out, output, found):
            return
        for s in found:
            s["last"] = views.when(s["last_seen_ns"])
            # A session only a proxy chain carries is seen through its run: say at which hop.
            s["runs_shown"] = f"{s['runs']} (hop {s['hop']})" if s.get("hop") else s["runs"]
        C = views.Column
        views.table(
            out,
            [
                C("session_id", "session", keep=True),
                C("title", "title"),
                C("cwd", "cwd"),
                C("runs_shown", "runs"),
                C("turns", "turns", right=True, optional=True),  # frames say how long; turns can go
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
        if emit(out, output, ({k: _jsonable(v) for k, v in row.items()} for row in found())):
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
    from acp_proxy.read import stats as stats_report

    db = open_db(db_path)
    report = stats_report.stats(db, ref)
    label = report["ref"]
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
        # A proxy chain's hops (what its proxy/successor envelopes carry) are rows of their own.
        hop = [C("hop", "hop", right=True)] if any(row.get("hop") for row in latency) else []
        views.table(
            out,
            [
                *hop,
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
                *([C("hop", "hop", right=True)] if any(row.get("hop") for row in turns) else []),
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
