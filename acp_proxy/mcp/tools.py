"""The MCP tools: one method each, over the read layer, answering a model of ``shapes``.

Owns: ``Tools`` — the tools' parameters (typed and described, so that the SDK publishes them in
each tool's input schema), the read-layer calls that compute their answers, and their paging:
every list-shaped answer says its ``total``, ``offset``, ``returned`` and ``next``, and no
answer's JSON is over ``shapes.MAX_ANSWER`` characters (``show`` pages by lines, ``frame`` hands
out a long frame in parts by ``raw_offset``). ``show`` renders the conversation as ``acp-proxy
show`` does.

Must not know: SQL (every answer is computed by ``acp_proxy/read/``), how the SDK registers or
calls a tool (``server``). Imported only when ``acp-proxy mcp`` runs: it needs pydantic, which
the ``[mcp]`` extra brings.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, TypeVar

from pydantic import Field

from acp_proxy.errors import UsageError
from acp_proxy.mcp import shapes

MAX_FRAMES = 500
"""The most frames one ``frames`` call returns (ask again with ``next`` or ``after`` for more)."""
MAX_ITEMS = 500
"""The most items of any other list one call returns."""
MAX_LINES = 20_000
"""The most lines of a conversation one ``show`` call returns."""
SHOW_WIDTH = 120
RUN_KEYS = (
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
    "turns",
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
P = TypeVar("P", bound=shapes.Page)

# The parameters, described for the model that calls the tools. Bounds are published in the
# schema but checked by the tools, so that a wrong number is a one-line error, not pydantic's.
MINIMUM_0: dict[str, Any] = {"minimum": 0}
Ref = Annotated[
    str, Field(description="A run id, `last`, or a session id (or a unique start of one); `run:N`, `session:S`.")
]
OptionalRef = Annotated[
    str, Field(description="A run id, `last`, or a session id (or a unique start of one); empty: every run.")
]
Offset = Annotated[int, Field(description="How many items to skip: a page's `next`.", json_schema_extra=MINIMUM_0)]
Limit = Annotated[
    int,
    Field(description="The most items to return (an answer may hold fewer: see `next`).", json_schema_extra=MINIMUM_0),
]
Lines = Annotated[int, Field(description="The most lines to return.", json_schema_extra=MINIMUM_0)]
MaxChars = Annotated[
    int, Field(description="Cut each frame's text (raw line, request params, answer) at this many characters.", ge=0)
]
Filter = Annotated[
    str,
    Field(
        description="acp-proxy's filter language, e.g. `run:last method:session/prompt kind:response latency>2s`, "
        '`kind:error OR unanswered`, `update:tool_call`, `text:"denied"`, `seq:10..20`; empty: every frame.'
    ),
]
After = Annotated[str, Field(description="RUN:SEQ of the last frame seen (a page's `after`): the frames after it.")]
Method = Annotated[str, Field(description="Only requests of this method, e.g. `session/prompt`; empty: all.")]
Turn = Annotated[
    int | None,
    Field(description="Only this prompt turn (1 = the first); null: every turn.", json_schema_extra={"minimum": 1}),
]
RunId = Annotated[int, Field(description="The run's id (a frame's `run_id`).", json_schema_extra=MINIMUM_0)]
Seq = Annotated[
    int, Field(description="The frame's number within its run (a frame's `seq`).", json_schema_extra=MINIMUM_0)
]
Schema = Annotated[bool, Field(description="Also check every frame against the official JSON Schema (slower).")]


class ToolFailure(UsageError):
    """A tool call that cannot be answered; the message is one line for the caller."""


class Tools:
    """The tools, over the database at ``db_path``; each returns its structured answer (a model of
    ``shapes``), paged and bounded to ``MAX_ANSWER`` characters."""

    def __init__(self, db_path: Path, redactor: Any) -> None:
        self.db_path = db_path
        self.redactor = redactor

    # -- the tools --------------------------------------------------------------------------------

    def list_runs(self, offset: Offset = 0, limit: Limit = 20) -> shapes.RunsPage:
        """Recorded (and imported) runs, newest first: id, start, status, agent and client with
        versions, protocol version, agent command, frames, exit status, where an imported run came
        from, and what an OpenTelemetry export lost. Paged: `total`, `next`."""
        from acp_proxy.read import listing, queries

        offset, limit = _count(offset, "offset"), _limit(limit)
        with self._db() as db:
            total = queries.count(db, "runs")
            found = [self.redactor.run_row(r) for r in listing.runs(db, limit, offset)] if limit else []
        kept = [{k: run.get(k) for k in RUN_KEYS if run.get(k) is not None} for run in found]
        return self._page(shapes.RunsPage, kept, offset, total)

    def list_sessions(self, offset: Offset = 0, limit: Limit = 50) -> shapes.SessionsPage:
        """ACP sessions, most recently active first: session id, title, cwd, how it was created,
        the runs it appears in, its number of turns, its hop (1 and deeper: a session only a
        proxy chain carries, inside `proxy/successor`). Paged: `total`, `next`."""
        from acp_proxy.read import listing

        offset, limit = _count(offset, "offset"), _limit(limit)
        with self._db() as db:
            found, total = listing.sessions_page(db, limit, offset) if limit else ([], listing.session_count(db))
        return self._page(shapes.SessionsPage, self.redactor.value(found), offset, total)

    def sessions_by_client(self, offset: Offset = 0, limit: Limit = 50) -> shapes.ClientsPage:
        """Clients (name and version, as `initialize` said), the most sessions first: for each,
        its runs, sessions, turns, the agents it talked to and its session ids."""
        from acp_proxy.read import insights

        offset, limit = _count(offset, "offset"), _limit(limit)
        with self._db() as db:
            found = insights.sessions_by_client(db, self.redactor)
        return self._page(shapes.ClientsPage, found[offset : offset + limit], offset, len(found))

    def summary(self, ref: OptionalRef = "") -> shapes.SummaryAnswer:
        """A run's, session's or every run's summary in one call, with insights: the hot spot
        (the method with the most time spent waiting, session/prompt aside, and the slowest tool
        call), the long tail (p99 against p50 per method), outliers (answers over 3x their
        method's median), errors and unanswered requests; frames, turns, stop reasons, the
        slowest turn. Start here."""
        from acp_proxy.read import insights

        with self._db() as db:
            found = self._answer(lambda: insights.summary(db, ref or None, self.redactor))
        return shapes.SummaryAnswer(**self._bounded(found))

    def session_info(self, ref: Ref) -> shapes.MetadataAnswer:
        """How a run or session was set up: per run both sides' names, versions, protocol
        versions and capabilities, the auth methods; per session the cwd, title, how it was
        created, MCP servers, the available and current mode, the available and current model
        (where recorded)."""
        from acp_proxy.read import insights

        with self._db() as db:
            found = self._answer(lambda: insights.metadata(db, ref, self.redactor))
        return shapes.MetadataAnswer(**self._bounded(found))

    def exchanges(
        self, ref: Ref, method: Method = "", offset: Offset = 0, limit: Limit = 20, max_chars: MaxChars = 2000
    ) -> shapes.ExchangesPage:
        """A run's or session's requests each paired with its response (or error): method,
        direction, the request's params, the answer's result or error, the outcome (response,
        error, unanswered, pending) and the latency, in relay order. Paged: `total`, `next`."""
        from acp_proxy.read import insights

        offset, limit, max_chars = _count(offset, "offset"), _limit(limit), _count(max_chars, "max_chars")
        with self._db() as db:
            found, total = self._answer(
                lambda: insights.exchanges(db, ref, method or None, offset, limit, self.redactor)
            )
        return self._page(shapes.ExchangesPage, [shapes.shrink(item, max_chars) for item in found], offset, total)

    def show(self, ref: Ref, turn: Turn = None, offset: Offset = 0, limit: Lines = 2000) -> shapes.ShowAnswer:
        """The conversation of a run or session, reconstructed from its frames, as text — what
        `acp-proxy show REF` prints: messages, thoughts, tool calls, plans, permission requests
        and answers, errors, notices, faults applied and findings. Paged by lines."""
        offset, limit = _count(offset, "offset"), _limit(limit, MAX_LINES)
        text, label = self._show_text(ref, turn)
        lines = text.splitlines(keepends=True)
        kept: list[str] = []
        used = 0
        for line in lines[offset : offset + limit]:
            length = shapes.size(line)  # as JSON, escapes included
            if used + length > shapes.ITEM_ROOM:
                if not kept:
                    part = shapes.text_part(line, 0, shapes.ITEM_ROOM - 100)
                    kept.append(f"{part}… [{len(line) - len(part)} more characters]\n")
                break
            kept.append(line)
            used += length
        end = offset + len(kept)
        return shapes.ShowAnswer(
            ref=label,
            total=len(lines),
            offset=offset,
            returned=len(kept),
            next=end if end < len(lines) else None,
            text="".join(kept),
        )

    def frames(
        self,
        filter: Filter = "",
        limit: Limit = 50,
        offset: Offset = 0,
        max_chars: MaxChars = 2000,
        after: After = "",
    ) -> shapes.FramesPage:
        """Frames selected by acp-proxy's filter language, in relay order, with every recorded
        column (`raw` is the frame's line, cut at `max_chars`). E.g. `run:last dir:a2c
        update:tool_call`, `method:session/prompt kind:response latency>2s`, `kind:error OR
        unanswered`, `text:"permission denied"`, `marked` (frames a person marked: each shows
        its `mark`, the note), `comment:"..."`. Paged: `total`, `next` (an offset) and `after`
        (a cursor); `frame` gives one frame whole. Actions of `acp-proxy ctl` (faults added,
        breakpoints, releases, drops, frames sent) come among the frames by time as items with
        `kind: "control"` (not counted in `total` or offsets; `control` selects them, with the
        frames they held or wrote); a held frame carries `held`, its fate."""
        from acp_proxy.protocol import filters
        from acp_proxy.read import controls, exports
        from acp_proxy.read import frames as pages

        limit = min(_limit(limit), MAX_FRAMES)
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
            selection = pages.Selection(db, expr, self.redactor)
            found = selection.page(cursor, limit, offset)
            rows = controls.on_page(db, selection, found, cursor, offset, self.redactor)
        shown = []
        for row in rows:
            obj = exports.frame_object(row)
            if isinstance(obj.get("raw"), str):
                obj["raw"] = shapes.cut_text(obj["raw"], max_chars)
            shown.append(self.redactor.value(obj))
        kept, note = shapes.fit(shown, offset, found.total)
        before = offset if cursor is None else 0  # frames after a cursor: offsets count from it
        more = found.more or len(kept) < len(shown)
        frames_kept = [k for k in kept if k.get("kind") != "control"]
        last = frames_kept[-1] if frames_kept else None
        return shapes.FramesPage(
            total=found.total,
            offset=offset,
            returned=len(kept),
            next=before + len(kept) if more and cursor is None else None,
            after=f"{last['run_id']}:{last['seq']}" if more and last is not None else None,
            note=note or ("after a cursor: continue with `after`" if more and cursor is not None else None),
            masked=found.masked,
            items=kept,
        )

    def marks(self, ref: OptionalRef = "", offset: Offset = 0, limit: Limit = 50) -> shapes.MarksPage:
        """The frames people marked (`acp-proxy mark RUN:SEQ --note TEXT`) with their notes, of
        a run or session, or of every run without `ref`: what to look at first. `frame` gives
        a marked frame whole; `frames` with `marked` selects them with every column."""
        from acp_proxy.read import marks as marked

        offset, limit = _count(offset, "offset"), _limit(limit)
        with self._db() as db:
            found = self._answer(lambda: marked.marks(db, ref or None))
        items = [self.redactor.value({k: v for k, v in m.items() if v is not None}) for m in found]
        return self._page(shapes.MarksPage, items[offset : offset + limit], offset, len(items))

    def frame(self, run_id: RunId, seq: Seq, raw_offset: Offset = 0) -> shapes.FrameAnswer:
        """One frame by its run id and seq, with every recorded column, its `raw` line whole —
        or, when it is longer than an answer may be, a part of it, with `next_raw_offset` to ask
        for the rest."""
        from acp_proxy.read import exports
        from acp_proxy.read import frames as selections

        raw_offset = _count(raw_offset, "raw_offset")
        with self._db() as db:
            found = selections.frame(db, run_id, seq, self.redactor)
        if found is None:
            raise ToolFailure(f"no frame {seq} in run {run_id}")
        obj = self.redactor.value(exports.frame_object(found))
        raw = obj.get("raw") if isinstance(obj.get("raw"), str) else None
        length = len(raw) if raw is not None else 0
        room = shapes.ITEM_ROOM - shapes.size({k: v for k, v in obj.items() if k != "raw"})
        next_offset = None
        note = None
        if raw is not None and (raw_offset or length > room):
            obj["raw"] = shapes.text_part(raw, raw_offset, room)
            end = raw_offset + len(obj["raw"])
            next_offset = end if end < length else None
            note = (
                f"raw is cut: characters {raw_offset}..{end} of {length}; ask again with raw_offset={end} "
                f"for the rest, or get the frame whole with `acp-proxy frames 'run:{run_id} seq:{seq}' --json` "
                f"or `acp-proxy export {run_id}`"
                if next_offset is not None
                else f"raw from character {raw_offset} of {length}"
            )
        return shapes.FrameAnswer(
            frame=obj, raw_chars=length, raw_offset=raw_offset, next_raw_offset=next_offset, note=note
        )

    def stats(self, ref: OptionalRef = "", offset: Offset = 0, limit: Limit = 50) -> shapes.StatsAnswer:
        """Latency per method and direction (count, errors, p50/p95/p99/max ms), per-turn metrics
        (time to acceptance and first output, duration, chunks, tool calls, permissions, stop
        reason), requests left unanswered, and error answers — of a run or session, or of every
        run without `ref`. The three lists are paged alike by `offset` and `limit`."""
        from acp_proxy.read import stats as report

        offset, limit = _count(offset, "offset"), _limit(limit)
        with self._db() as db:
            found = self._answer(lambda: report.stats(db, ref or None, self.redactor))
        room = (shapes.ITEM_ROOM - shapes.size(found["latency"])) // 3
        lists = {
            name: self._page(shapes.Page, found[name][offset : offset + limit], offset, len(found[name]), room)
            for name in ("turns", "unanswered", "errors")
        }
        return shapes.StatsAnswer(ref=found["ref"], latency=found["latency"], **lists)

    def check(self, ref: Ref, schema: Schema = True, offset: Offset = 0, limit: Limit = 100) -> shapes.CheckAnswer:
        """Conformance findings for a run or session: the official JSON Schema of the negotiated
        version and the lifecycle rules of the spec. Each finding names its rule, severity
        (error / warning / info), the frame (run, seq) and the spec section. Paged."""
        from acp_proxy.read import conformance

        offset, limit = _count(offset, "offset"), _limit(limit)
        with self._db() as db:
            found = self._answer(lambda: conformance.check(db, ref, schema=schema, redactor=self.redactor))
        findings = self.redactor.value(found.findings)
        page = self._page(shapes.FindingsPage, findings[offset : offset + limit], offset, len(findings))
        return shapes.CheckAnswer(checked=found.label, counts=found.counts, findings=page)

    def diff(self, left: Ref, right: Ref, offset: Offset = 0, limit: Limit = 20) -> shapes.DiffAnswer:
        """Two recordings (runs or sessions) compared, around and in their turns: the initialize
        exchange, set-up calls, errors, unanswered requests; per turn the prompt, the agent's text
        and thoughts, tool calls, permission outcomes and how it ended. `differ` says whether
        anything differs; timing is shown, never counted. The turns are paged."""
        from acp_proxy.read import compare

        offset, limit = _count(offset, "offset"), _limit(limit)
        with self._db() as db:
            found = self._answer(lambda: compare.compare(db, left, right, self.redactor)).as_json()
        connection = found["connection"]
        if shapes.size(connection) > shapes.MAX_ANSWER // 2:
            connection = shapes.shrink(connection, shapes.MAX_ANSWER // 2)
        turns = found["turns"]
        room = shapes.ITEM_ROOM - shapes.size(connection)
        page = self._page(shapes.DiffTurnsPage, turns[offset : offset + limit], offset, len(turns), room)
        return shapes.DiffAnswer(
            left=found["left"], right=found["right"], differ=found["differ"], connection=connection, turns=page
        )

    # -- helpers ----------------------------------------------------------------------------------

    def _show_text(self, ref: str, turn: int | None) -> tuple[str, str]:
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
        return self.redactor.text(out.getvalue()), resolved.describe()

    def _page(self, model: type[P], items: list[Any], offset: int, total: int, room: int = shapes.ITEM_ROOM) -> P:
        kept, note = shapes.fit(items, offset, total, room)
        end = offset + len(kept)
        return model(
            total=total, offset=offset, returned=len(kept), next=end if end < total else None, note=note, items=kept
        )

    def _bounded(self, value: dict[str, Any]) -> dict[str, Any]:
        return value if shapes.size(value) <= shapes.ITEM_ROOM else shapes.shrink(value, shapes.ITEM_ROOM)

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

    def all(self) -> list[Callable[..., Any]]:
        return [
            self.summary,
            self.session_info,
            self.list_runs,
            self.list_sessions,
            self.sessions_by_client,
            self.show,
            self.exchanges,
            self.frames,
            self.frame,
            self.marks,
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


def _limit(value: Any, most: int = MAX_ITEMS) -> int:
    return min(_count(value, "limit"), most)


def _name(run: dict[str, Any], side: str) -> str:
    name, version = run[f"{side}_name"], run[f"{side}_version"]
    return f"{name} {version}" if name and version else name or ""


def _console(out: io.StringIO) -> Any:
    from rich.console import Console

    return Console(file=out, width=SHOW_WIDTH, no_color=True, highlight=False, force_terminal=False, soft_wrap=True)
