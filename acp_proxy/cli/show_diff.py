"""``show`` and ``diff``: a conversation as a person reads it, and two of them compared.

Owns: those commands' options, help and rendering. Must not know: SQL, how a conversation is
folded or what counts as a difference (``read.conversation``, ``read.compare``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from acp_proxy.cli.group import (
    argv_text,
    cli,
    emit,
    frame_lines,
    frame_object,
    open_db,
    peers,
    resolve_ref,
)
from acp_proxy.cli.options import db_option
from acp_proxy.cli.support import (
    TEXT,
    Number,
    Output,
    output_options,
    say,
)
from acp_proxy.errors import UsageError

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
    from acp_proxy.read import controls, conversation, queries
    from acp_proxy.read import faults as notes

    db = open_db(db_path)
    resolved = resolve_ref(db, ref)
    folded = None if as_raw else conversation.conversations(db, resolved)
    if turn is not None and folded is not None:
        last = max((t.index for c in folded.conversations for t in c.turns), default=0)
        if turn > last:  # an empty answer would look like an empty turn
            held = "no prompt turn" if not last else "1 prompt turn" if last == 1 else f"{last} prompt turns"
            what = f"session {ref}" if resolved.is_session else f"run {resolved.run_id}"
            raise UsageError(f"--turn {turn}: {what} has {held}" + (f" (--turn 1..{last})" if last else ""))
    with views.output(page=output.page) as out:
        if folded is None:
            run_ids = queries.run_ids_of(db, resolved)
            found = controls.with_controls(queries.frames_of(db, resolved), controls.control_rows(db, run_ids))
            if emit(out, output, (frame_object(f) for f in found)):
                return
            frame_lines(out, db, found, verbose=False)
            return
        if emit(out, output, (conversation.conversation_json(c) for c in folded.conversations)):
            return
        con = out.console()
        if not resolved.is_session:
            run = queries.run_row(db, resolved.run_id or 0)
            assert run is not None  # resolved: the run exists
            names = peers(run)
            exit_text = views.exit_status(run["exit_code"], run["exit_signal"], run["status"])
            con.print(
                f"Run {run['id']} · {argv_text(run['argv'])}"
                + (f" · {names}" if names else "")
                + (f" · protocol {run['protocol_version']}" if run["protocol_version"] else "")
                + f" · exit {exit_text}",
                style="bold",
                markup=False,
                no_wrap=True,
                overflow="ellipsis",
            )
        if not folded.conversations:
            con.print("no conversation recorded", style="dim")
            return
        for conv in folded.conversations:
            transcript.render_conversation(con, conv, turn)
        keys = {(f["run_id"], f["seq"]) for f in folded.frames} if resolved.is_session else None
        _show_annotations(con, notes.faults(db, folded.run_ids, keys), notes.findings(db, folded.run_ids, keys))
        transcript.render_controls(con, controls.control_rows(db, folded.run_ids))


def _show_annotations(con: Any, faults: list[dict[str, Any]], findings: list[dict[str, Any]]) -> None:
    """Faults applied and conformance findings, each pointing at its frame."""
    from acp_proxy.read.summary import printable

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
    from acp_proxy.read import compare
    from acp_proxy.read import diff as df
    from acp_proxy.read.summary import printable

    db = open_db(db_path)
    compared = compare.compare(db, left, right)
    left_name, right_name = compared.left.describe(), compared.right.describe()
    diffs, connection, differ = compared.turns, compared.connection, compared.differ
    with views.output(page=output.page) as out:
        if output.json:
            views.write_json(out, compared.as_json())
        elif output.jsonl:
            views.write_jsonl(out, [{"connection": compared.connection_json()}, *compared.turns_json()])
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
