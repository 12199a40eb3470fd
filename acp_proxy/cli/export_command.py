"""``export``: a recording written out (``replay`` is ``acp_proxy.replay.command``).

Owns: the command's options, help and output file. Must not know: SQL or export formats
(``read.exports``).
"""

from __future__ import annotations

from pathlib import Path

import click

from acp_proxy.cli.group import (
    cli,
    open_db,
    resolve_db,
    runs_of,
)
from acp_proxy.cli.options import FilePath, db_option, redact_options
from acp_proxy.cli.support import (
    TEXT,
    say,
)

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
    help="With --format otlp: the collector's OTLP base address (default: $OTEL_EXPORTER_OTLP_ENDPOINT; "
    "the protocol: $OTEL_EXPORTER_OTLP_PROTOCOL).",
)
@click.option("--otlp-content", is_flag=True, help="With --format otlp: put message text in spans (redacted).")
@click.option(
    "-o",
    "--output",
    type=FilePath(dir_okay=False),
    default=None,
    help="Write here (0600, whole or not at all) instead of stdout; never over a database.",
)
@click.option(
    "--force",
    is_flag=True,
    help="With -o: replace an existing file that is not an acp-proxy export (never a database).",
)
@redact_options
@click.argument("ref", type=TEXT)
def export(
    db_path: Path | None,
    fmt: str,
    endpoint: str | None,
    otlp_content: bool,
    output: Path | None,
    force: bool,
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
    if force and output is None:
        raise click.UsageError("--force goes with -o (stdout replaces nothing)")
    if output is not None:  # before anything is read: a refused target costs nothing
        from acp_proxy.cli import outputs
        from acp_proxy.store import database as store

        store.refuse_special_file(output, "a file to export to (leave out -o to write to stdout)")
        outputs.check_export_target(output, resolve_db(db_path), force=force)
    from acp_proxy.read import controls, marks

    db = open_db(db_path)
    resolved, label, run_ids = runs_of(db, ref)
    header = {
        "ref": ref,
        "resolved": label,
        "runs": queries.runs_by_id(db, run_ids, counted=False),
        "controls": controls.exported(db, run_ids),
        "marks": marks.exported(db, run_ids, redactor),
    }
    lines = exports.export_lines(fmt, queries.export_frames(db, resolved), header, redactor)
    if output is None:
        from acp_proxy.cli import views

        with views.output(page=False) as out:
            for line in lines:
                out.data(line + b"\n")
        say(exports.warning(redactor))
        return
    written = outputs.write_whole(output, lines)
    say(f"wrote {written} lines to {output} ({exports.warning(redactor)})")


# -- replay and diff -------------------------------------------------------------------------
