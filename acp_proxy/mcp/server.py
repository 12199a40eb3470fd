"""``acp-proxy mcp``: an MCP server over the recordings, so a coding agent can read them.

Owns: the read-only tools (``Tools``: one method each, plain Python over the query library, text
or JSON out), their registration on the official MCP SDK's server (``serve``), and the command.
The tools: ``list_runs``, ``list_sessions``, ``show`` (a run's or session's conversation as text,
as ``acp-proxy show`` renders it), ``frames`` (selected by the filter language, bounded),
``stats`` (latency per method, turns, unanswered requests, errors), ``check`` (conformance
findings), ``diff`` (two recordings compared) and ``frame`` (one frame by run and seq).

Redacted by default: every frame passes the redactor before it is folded, rendered or returned
(credential headers and fields, ``env`` values, bearer tokens, API-key and JWT shapes, and the
``--redact`` rules); ``--no-redact`` shows what was recorded.

Must not know: how frames are recorded; SQL (every answer is computed by the read layer,
``acp_proxy/read/``, and only rendered here); stdout is the MCP channel and nothing else writes
there (the SDK's logging goes to stderr, prefixed).

Every tool opens the database read-only for its call, so recordings made meanwhile are seen.
A mistake (a bad reference, filter or number) is a tool error with one line, never a crash.
"""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from acp_proxy.cli.options import db_option, redact_options
from acp_proxy.errors import AcpProxyError, UsageError

INSTALL_HINT = "acp-proxy mcp needs the [mcp] extra: pip install 'acp-proxy[mcp]'"
MAX_FRAMES = 500
"""The most frames one ``frames`` call returns (ask again with an ``offset`` for more)."""
MAX_CHARS = 200_000
"""The most characters of one frame's text any tool returns."""
SHOW_WIDTH = 120


class MissingExtra(AcpProxyError):
    """The MCP SDK (the ``[mcp]`` extra) is not installed."""


class ToolFailure(UsageError):
    """A tool call that cannot be answered; the message is one line for the caller."""


def _missing_extra() -> str | None:
    try:
        import mcp.server.mcpserver  # noqa: F401
    except ImportError:
        return INSTALL_HINT
    return None


class Tools:
    """The tools, over the database at ``db_path``; each returns text (JSON for data)."""

    def __init__(self, db_path: Path, redactor: Any) -> None:
        self.db_path = db_path
        self.redactor = redactor

    # -- the tools --------------------------------------------------------------------------------

    def list_runs(self, limit: int = 20) -> str:
        """Recorded (and imported) runs, newest first: id, start, status, agent and client with
        versions, protocol version, agent command, frames, exit status, where an imported run came
        from, and what an OpenTelemetry export lost. ``limit``: how many (0: all)."""
        from acp_proxy.read import queries

        with self._db() as db:
            found = queries.runs(db, _count(limit, "limit") or None)
        keep = (
            "id",
            "started_ns",
            "ended_ns",
            "status",
            "agent_name",
            "agent_version",
            "client_name",
            "client_version",
            "protocol_version",
            "argv",
            "cwd",
            "frames",
            "exit_code",
            "exit_signal",
            "not_recorded",
            "unanswered_requests",
            "faults_applied",
            "findings",
            "source",
            "source_format",
            "source_unknown",
            "otlp_spans",
            "otlp_spans_lost",
        )
        return self._json([{k: run.get(k) for k in keep if run.get(k) is not None} for run in found])

    def list_sessions(self, limit: int = 50) -> str:
        """ACP sessions, most recently active first: session id, title, cwd, how it was created,
        the runs it appears in, its number of turns. ``limit``: how many (0: all)."""
        from acp_proxy.read import queries

        with self._db() as db:
            return self._json(queries.sessions(db, _count(limit, "limit") or None))

    def show(self, ref: str, turn: int | None = None) -> str:
        """The conversation of a run or session, reconstructed from its frames, as text — what
        `acp-proxy show REF` prints: messages, thoughts, tool calls, plans, permission requests
        and answers, errors, notices, faults applied and findings. ``ref``: a run id, `last`, or
        a session id (or a unique prefix); ``turn``: only that prompt turn (1 = the first)."""
        from acp_proxy.cli import transcript
        from acp_proxy.cli.views import exit_status
        from acp_proxy.read import conversation, queries

        with self._db() as db:
            resolved = self._resolve(db, ref)
            folded = conversation.conversations(db, resolved, self.redactor)
            run = None if resolved.is_session else queries.run_row(db, resolved.run_id or 0)
            faults, findings = self._annotations(db, folded)
        out = io.StringIO()
        con = _console(out)
        if run is not None:
            argv = " ".join(json.loads(run["argv"] or "[]"))
            peers = " ⇄ ".join(filter(None, [_name(run, "client"), _name(run, "agent")]))
            source = f" · imported from {run['source']} ({run['source_format']})" if run.get("source") else ""
            con.print(
                f"Run {run['id']} · {argv}"
                + (f" · {peers}" if peers else "")
                + (f" · protocol {run['protocol_version']}" if run["protocol_version"] else "")
                + f" · exit {exit_status(run['exit_code'], run['exit_signal'], run['status'])}"
                + source,
                markup=False,
            )
        if not folded.conversations:
            con.print("no conversation recorded")
        for conv in folded.conversations:
            transcript.render_conversation(con, conv, turn)
        _print_annotations(con, faults, findings)
        return self.redactor.text(out.getvalue())

    def frames(self, filter: str = "", limit: int = 50, offset: int = 0, max_chars: int = 2000, after: str = "") -> str:
        """Frames selected by acp-proxy's filter language, in relay order, as JSON objects (every
        recorded column; ``raw`` is the frame). E.g. `run:last dir:a2c update:tool_call`,
        `method:session/prompt kind:response latency>2s`, `kind:error OR unanswered`,
        `text:"permission denied"`. At most 500 per call (``limit``); for the next ones pass the
        last frame's `RUN:SEQ` as ``after`` (or skip ``offset`` frames); each frame's ``raw`` is
        cut at ``max_chars`` characters (`frame` gives one whole)."""
        from acp_proxy.protocol import filters
        from acp_proxy.read import exports
        from acp_proxy.read import frames as pages

        limit = min(_count(limit, "limit"), MAX_FRAMES)
        offset = _count(offset, "offset")
        max_chars = _count(max_chars, "max_chars")
        cursor = pages.parse_cursor(after) if after else None
        if after and cursor is None:
            raise ToolFailure(f"after must be RUN:SEQ, the place of a frame (not {after!r})")
        with self._db() as db:
            try:
                expr = pages.parse(db, filter)
            except filters.FilterError as exc:
                raise ToolFailure(f"bad filter: {exc}") from None
            # Masked before the filter reads them: a text: term cannot probe a secret.
            found = list(pages.Selection(db, expr, self.redactor).rows(cursor, limit=offset + limit))[offset:]
        shown = []
        for row in found:
            obj = exports.frame_object(row)
            if isinstance(obj.get("raw"), str):
                obj["raw"] = _cut(obj["raw"], max_chars)
            shown.append(obj)
        return self._json(shown)

    def frame(self, run_id: int, seq: int) -> str:
        """One frame, whole, by its run id and seq, with every recorded column."""
        from acp_proxy.read import exports
        from acp_proxy.read import frames as selections

        with self._db() as db:
            found = selections.frame(db, run_id, seq, self.redactor)
        if found is None:
            raise ToolFailure(f"no frame {seq} in run {run_id}")
        obj = exports.frame_object(found)
        if isinstance(obj.get("raw"), str):
            obj["raw"] = _cut(obj["raw"], MAX_CHARS)
        return self._json(obj)

    def stats(self, ref: str | None = None) -> str:
        """Latency per method and direction (count, errors, p50/p95/p99/max ms), per-turn metrics
        (time to acceptance and first output, duration, chunks, tool calls, permissions, stop
        reason), requests left unanswered, and error answers — of a run or session, or of every
        run without ``ref``."""
        from acp_proxy.read import stats as report

        with self._db() as db:
            return self._json(self._answer(lambda: report.stats(db, ref or None, self.redactor)))

    def check(self, ref: str, schema: bool = True) -> str:
        """Conformance findings for a run or session: the official JSON Schema of the negotiated
        version and the lifecycle rules of the spec. Each finding names its rule, severity
        (error / warning / info), the frame (run, seq) and the spec section; ``schema=false``
        checks the lifecycle rules only (faster)."""
        from acp_proxy.read import conformance

        with self._db() as db:
            found = self._answer(lambda: conformance.check(db, ref, schema=schema, redactor=self.redactor))
        return self._json({"checked": found.label, "counts": found.counts, "findings": found.findings})

    def diff(self, left: str, right: str) -> str:
        """Two recordings (runs or sessions) compared, around and in their turns: the initialize
        exchange, set-up calls, errors, unanswered requests; per turn the prompt, the agent's text
        and thoughts, tool calls, permission outcomes and how it ended. ``differ`` says whether
        anything differs; timing is shown, never counted."""
        from acp_proxy.read import compare

        with self._db() as db:
            return self._json(self._answer(lambda: compare.compare(db, left, right, self.redactor)).as_json())

    # -- helpers ----------------------------------------------------------------------------------

    @contextmanager
    def _db(self) -> Iterator[Any]:
        from acp_proxy.record import recovery
        from acp_proxy.store import database as store

        try:
            db = recovery.open_for_reading(self.db_path)
        except store.StoreError as exc:
            raise ToolFailure(str(exc)) from None
        try:
            yield db
        finally:
            db.conn.close()

    def _resolve(self, db: Any, text: str) -> Any:
        from acp_proxy.read import queries

        return self._answer(lambda: queries.resolve(db, text))

    def _answer(self, compute: Callable[[], Any]) -> Any:
        """What the read layer computed; a mistake (a reference naming nothing) is a tool error."""
        try:
            return compute()
        except UsageError as exc:
            raise ToolFailure(str(exc)) from None

    def _annotations(self, db: Any, folded: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        from acp_proxy.read import faults as notes

        keys = {(f["run_id"], f["seq"]) for f in folded.frames} if folded.ref.is_session else None
        return (
            notes.faults(db, folded.run_ids, keys, self.redactor),
            notes.findings(db, folded.run_ids, keys, self.redactor),
        )

    def _json(self, value: Any) -> str:
        return json.dumps(self.redactor.value(value), ensure_ascii=False, indent=1, default=str)

    def all(self) -> list[Callable[..., str]]:
        return [
            self.list_runs,
            self.list_sessions,
            self.show,
            self.frames,
            self.frame,
            self.stats,
            self.check,
            self.diff,
        ]


def _print_annotations(con: Any, faults: list[dict[str, Any]], findings: list[dict[str, Any]]) -> None:
    if faults:
        con.print("Faults applied", markup=False)
        for f in faults:
            detail = f" ({f['detail']})" if f["detail"] else ""
            con.print(f"  frame {f['run_id']}:{f['seq']}: {f['action']}{detail} — rule: {f['rule']}", markup=False)
    if findings:
        con.print("Findings", markup=False)
        for f in findings:
            con.print(f"  frame {f['run_id']}:{f['seq']} {f['severity']} {f['rule']}: {f['message']}", markup=False)


def _count(value: Any, name: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ToolFailure(f"{name} must be a whole number, 0 or more")
    return value


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit]}… [{len(text) - limit} more characters]"


def _name(run: dict[str, Any], side: str) -> str:
    name, version = run[f"{side}_name"], run[f"{side}_version"]
    return f"{name} {version}" if name and version else name or ""


def _console(out: io.StringIO) -> Any:
    from rich.console import Console

    return Console(file=out, width=SHOW_WIDTH, no_color=True, highlight=False, force_terminal=False, soft_wrap=True)


# -- the server -------------------------------------------------------------------------------------


def build_server(tools: Tools) -> Any:
    """The MCP SDK's server with every tool registered, read-only."""
    import logging

    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp.types import ToolAnnotations

    from acp_proxy import __version__

    server = MCPServer(
        "acp-proxy",
        version=__version__,
        instructions="Read-only access to acp-proxy recordings of Agent Client Protocol conversations "
        "between an editor and a coding agent: list runs and sessions, read a conversation, select "
        "frames with the filter language, latency and turn statistics, conformance findings, diffs.",
        log_level="WARNING",
    )
    # The SDK logs to stderr through rich; say it the way acp-proxy says things.
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("acp-proxy: mcp: %(message)s"))
    logging.getLogger().handlers = [handler]
    read_only = ToolAnnotations(
        read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
    )
    for method in tools.all():
        server.add_tool(
            _as_tool(method, ToolError),
            name=method.__name__,
            description=method.__doc__,
            annotations=read_only,
            structured_output=False,
        )
    return server


def _as_tool(method: Callable[..., str], tool_error: type[Exception]) -> Callable[..., str]:
    """``method`` with its mistakes turned into the SDK's tool errors (a one-line error result)."""
    import functools

    @functools.wraps(method)
    def tool(*args: Any, **kwargs: Any) -> str:
        try:
            return method(*args, **kwargs)
        except UsageError as exc:
            raise tool_error(str(exc)) from None

    return tool


@click.command("mcp")
@db_option
@redact_options
def mcp(db_path: Path | None, redact_rules: tuple[str, ...], no_redact: bool) -> None:
    """Serve the recordings to a coding agent over MCP (stdio), read-only.

    Tools: list_runs, list_sessions, show (a conversation as text), frames (the filter
    language, bounded), frame (one, whole), stats, check (conformance findings), diff. Secrets
    are masked unless --no-redact. Stdout carries MCP only. Add it to an MCP client's settings:

    \b
    Examples:
        claude mcp add acp-proxy -- acp-proxy mcp
        acp-proxy mcp --db ./session.db --redact 'ticket-[0-9]+'
    """
    missing = _missing_extra()
    if missing:
        raise MissingExtra(missing)
    from acp_proxy.locations import default_db_path
    from acp_proxy.protocol.redact import Redactor

    redactor = Redactor(redact_rules, enabled=not no_redact)  # a bad rule: one line, exit 2
    path = db_path if db_path is not None else default_db_path()
    server = build_server(Tools(path, redactor))
    try:
        server.run("stdio")
    except KeyboardInterrupt:
        pass
