"""Everything the inspector's pages show, as plain dicts: the one adapter between a recording
and the web.

Owns: what each page (and its JSON twin) holds — the runs and sessions list (runs a page at a
time); a run's or a session's folded conversation (left out above ``FOLD_LIMIT`` frames), frame
timeline (filtered, followed live from a cursor), waterfall (above ``FOLD_LIMIT`` from the
recorder's tables, ``read.waterfall``), latency table and samples (SQL); a
page of its frames for the virtual list (by offset, or what follows a cursor, with the
count); one frame in detail (verbatim, decoded, with its schema marks); a diff of two
recordings — and applying redaction to all of it before anything leaves this module. Frames are
redacted before they are folded, so the conversation can only hold what the frames show.

Must not know: HTTP, Datasette, HTML, click; SQL. Every answer is the read layer's
(``acp_proxy/read/``: the frame selection, masked before its filter; the conversation, folded
with the runs' end state; the comparison; faults and findings), the same the command line and
the MCP server render; this module only shapes it for the pages. It reads through any object
with ``execute`` (a ``store.ReadDb`` or a bare read-only ``sqlite3`` connection).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from acp_proxy.protocol import filters, wire
from acp_proxy.protocol.redact import Redactor
from acp_proxy.read import chunk_groups, compare, latency, listing, live, queries, waterfall
from acp_proxy.read import conversation as folding
from acp_proxy.read import diff as df
from acp_proxy.read import faults as notes
from acp_proxy.read import fold as fd
from acp_proxy.read import frames as selections
from acp_proxy.web import known, timeline

DEFAULT_LIMIT = 2000
MAX_LIMIT = 20000
PAGE_LIMIT = 200  # frames per page of the virtual timeline
MAX_PAGE = 1000
FOLD_LIMIT = 20_000
"""Above this many frames a page does not fold the conversation (nor draw the turn waterfall)
on each view: that costs the whole run, in time and memory (seconds and hundreds of MB for a
few hundred thousand chunks). The frames, the summary and the latency table cost a page."""

RUN_JSON_FIELDS = ("argv", "options", "client_info", "agent_info", "client_capabilities", "agent_capabilities")


class NotFound(Exception):
    """What a page names is not in the recording; ``str()`` is one line for a person."""


# -- runs and sessions --------------------------------------------------------------------------


def run_summary(row: dict[str, Any], redactor: Redactor) -> dict[str, Any]:
    """A ``runs`` row (as ``listing.runs`` gives it) as the pages show it."""
    from acp_proxy.cli.views import exit_status

    def parsed(name: str) -> Any:
        text = row.get(name)
        if text is None:
            return None
        try:
            return redactor.value(wire.loads(text))
        except ValueError:
            return redactor.text(text)

    started, ended = row.get("started_ns"), row.get("ended_ns")
    return {
        "id": row["id"],
        "status": row.get("status"),
        "started": timeline.iso(started),
        "started_ns": started,
        "ended": timeline.iso(ended),
        "duration_ms": None if started is None or ended is None else round((ended - started) / 1e6, 1),
        "argv": parsed("argv"),
        "cwd": redactor.text(row["cwd"]) if row.get("cwd") else row.get("cwd"),
        "agent": _name(row.get("agent_name"), row.get("agent_version")),
        "client": _name(row.get("client_name"), row.get("client_version")),
        "protocol_version": row.get("protocol_version"),
        "exit": exit_status(row.get("exit_code"), row.get("exit_signal"), row.get("status")),
        "frames": row.get("frames"),
        "turns": row.get("turns"),
        "frames_c2a": row.get("frames_c2a"),
        "frames_a2c": row.get("frames_a2c"),
        "stderr_lines": row.get("stderr_lines"),
        "not_recorded": row.get("not_recorded"),
        "not_recorded_reason": row.get("not_recorded_reason"),
        "unanswered_requests": row.get("unanswered_requests"),
        "faults": row.get("faults_applied"),
        "findings": row.get("findings"),
        "fault_spec": redactor.text(row["fault_spec"]) if row.get("fault_spec") else None,
        **{name: parsed(name) for name in RUN_JSON_FIELDS if name != "argv"},
    }


def _name(name: str | None, version: str | None) -> str | None:
    if not name:
        return None
    return f"{name} {version}" if version else name


def session_summary(row: dict[str, Any], redactor: Redactor) -> dict[str, Any]:
    return {
        "session_id": row["session_id"],
        "title": redactor.text(row["title"]) if row.get("title") else None,
        "cwd": redactor.text(row["cwd"]) if row.get("cwd") else None,
        "created_by": row.get("created_by"),
        "first_seen": timeline.iso(row.get("first_seen_ns")),
        "last_seen": timeline.iso(row.get("last_seen_ns")),
        "last_seen_ns": row.get("last_seen_ns"),
        "runs": [int(r) for r in str(row["runs"]).split(",")] if row.get("runs") else [],
        "turns": row.get("turns"),
        "hop": row.get("hop") or 0,
    }


def index(
    db: Any,
    redactor: Redactor,
    limit: int = 100,
    before: int | None = None,
    sessions_before: str | None = None,
) -> dict[str, Any]:
    """The front page: runs and sessions, newest first; ``limit`` runs older than run ``before``
    and sessions seen before ``sessions_before`` (a session's ``key``; None: the newest), so
    that every run and every session can be reached a page at a time."""
    rows, more = listing.runs_before(db, before, limit)
    runs = [run_summary(r, redactor) for r in rows]
    total, running = listing.run_counts(db)
    key = listing.session_key(sessions_before)
    found, more_sessions = listing.sessions_before(db, key, limit)
    sessions = [
        {**session_summary(s, redactor), "row": s["row_id"], "key": f"{s['last_seen_ns'] or 0}:{s['row_id']}"}
        for s in found
    ]
    return {
        "runs": runs,
        "more_runs": more,
        "runs_total": total,
        "running": running,
        "sessions": sessions,
        "more_sessions": more_sessions,
        "redacted": redactor.enabled,
    }


# -- one run or one session ---------------------------------------------------------------------


def resolve(db: Any, kind: str, ident: str) -> queries.Ref:
    """A run (``kind`` "run", ``ident`` its id) or a session (its id, or a unique prefix; a
    session only a proxy chain carries names its run, as ``queries.resolve`` has it)."""
    if kind == "run":
        ref = queries.resolve_run(db, ident)
        if ref is None:
            raise NotFound(f"no run {ident}")
        return ref
    # Under /sessions/ a reference is a session's even when it is all digits (which alone names a run).
    spelled = ident if ident.startswith("session:") else f"session:{ident}"
    try:
        ref = queries.resolve(db, spelled)
    except queries.RefError as exc:
        raise NotFound(str(exc)) from None
    if not ref.is_session and ref.chain_session is None:  # a session only a chain carries: its run
        raise NotFound(f"no session {ident!r}")
    return ref


def parse_cursor(text: str | None) -> tuple[int, int] | None:
    """``RUN:SEQ`` -> (run, seq): the last frame a page has; None for none or nonsense."""
    return selections.parse_cursor(text)


def conversation(
    db: Any,
    kind: str,
    ident: str,
    redactor: Redactor,
    *,
    filter_text: str | None = None,
    after: str | None = None,
    limit: int = DEFAULT_LIMIT,
    parts: Iterable[str] = ("summary", "conversation", "timeline", "charts", "latency"),
    journals: live.Journals | None = None,
    primed: selections.Primed | None = None,
) -> dict[str, Any]:
    """A run's or a session's page: what ``show`` rebuilds beside the frame timeline.

    ``filter_text`` (the filter language) narrows the timeline only; ``after`` (a ``RUN:SEQ``
    cursor) keeps the timeline to frames recorded after it, for live follow; ``parts`` picks
    which sections to compute (``summary``, ``conversation``, ``timeline``, ``charts``,
    ``latency``: the per-method table, by SQL). Above ``FOLD_LIMIT`` frames the conversation
    and the charts are left out (``folded`` is false): the page pages through the frames.
    ``journals`` and ``primed`` (the server's): a live run's timeline goes on past its last
    commit, from its journal; each frame is masked after every frame before it.
    """
    parts = set(parts)
    ref = resolve(db, kind, ident)
    run_ids = queries.run_ids_of(db, ref)
    # The summary is cheap and says whether a run is still recording: live follow needs it.
    runs = [run_summary(r, redactor) for r in queries.runs_by_id(db, run_ids)]
    running = any(r["status"] == "running" for r in runs)
    # A live run: committed rows up to its last commit, then its journal's tail (read.live).
    tail = None
    if journals is not None and running and not ref.is_session and ref.run_id is not None:
        tail = journals.tail(db, ref.run_id)
    until = (ref.run_id, tail.committed) if tail is not None and tail.committed is not None and ref.run_id else None
    every = selections.Selection(db, filters.Const(True), None, ref, until=until)
    last = every.last()
    if until is not None and tail is not None and tail.records:
        last = (until[0], tail.records[-1].seq)
    out: dict[str, Any] = {
        "ref": {
            "kind": kind,
            "id": ref.run_id if kind == "run" else ref.session_id or ref.chain_session,
            "describe": ref.describe(),
        },
        "run_ids": run_ids,
        "redacted": redactor.enabled,
        "frames_total": every.total() + (len(tail.records) if until is not None and tail is not None else 0),
        "cursor": f"{last[0]}:{last[1]}" if last else None,
    }
    out["live"] = running
    if "summary" in parts:
        out["runs"] = runs
    out["folded"] = out["frames_total"] <= FOLD_LIMIT
    if "latency" in parts:
        out["latency_table"] = latency.latency_table(db, run_ids)
    if "charts" in parts:
        out["latency"] = latency.samples(db, run_ids)
    if not out["folded"]:
        parts -= {"conversation"}
        if "charts" in parts:  # the turns from the recorder's tables: no fold (and no tool-call lanes)
            out["waterfall"] = waterfall.from_tables(db, run_ids)
            out["waterfall_left_out"] = waterfall.LANES_LEFT_OUT
            parts.discard("charts")
    if "conversation" in parts or "charts" in parts:
        # The fold needs every frame (with the runs' end state, as show has it); the timeline and
        # live polls below read only what they show.
        folded = folding.conversations(db, ref, redactor, include_stderr=True)
        convs = folded.conversations
        if "conversation" in parts:
            out["conversations"] = [redactor.value(_conversation_json(c)) for c in convs]
        if "charts" in parts:
            ts_of = {(r["run_id"], r["seq"]): r["ts_ns"] for r in folded.frames}
            out["waterfall"] = timeline.waterfall(convs, ts_of)
    if "timeline" in parts:
        fresh = tail if until is not None else None
        out.update(_timeline(db, ref, run_ids, redactor, filter_text, parse_cursor(after), limit, fresh, until, primed))
    return out


def frames_page(
    db: Any,
    kind: str,
    ident: str,
    redactor: Redactor,
    primed: selections.Primed,
    *,
    filter_text: str | None = None,
    offset: int = 0,
    after: str | None = None,
    limit: int = PAGE_LIMIT,
    at: str | None = None,
    journals: live.Journals | None = None,
) -> dict[str, Any]:
    """One page of a run's or a session's frames, for the virtual timeline: ``limit`` frames of
    the selection from ``offset`` (or, with ``after``, a ``RUN:SEQ`` cursor, the frames recorded
    after it: what is new for a live page), flat, each masked after every frame before it. It
    costs the page: the selection is counted and paged by SQLite, nothing is folded.

    ``redactor`` is this request's (annotations, a filter on masked text); ``primed`` the
    server's, which masks the frames of a page. ``total`` is the selection's size (with
    ``after``: how many follow the cursor); ``last`` (without ``after``) the place of its last
    frame: the cursor a live page asks after; with ``at`` (``RUN:SEQ``), ``position`` is that
    frame's index in the selection (None: not in it), so that a page can scroll to it.

    ``journals`` (the server's ``read.live.Journals``): a live run's frames are shown as soon as
    its relay journaled them, before the recorder commits them, masked as committed ones are."""
    ref = resolve(db, kind, ident)
    run_ids = queries.run_ids_of(db, ref)
    out: dict[str, Any] = {"filter": filter_text or "", "filter_error": None, "offset": offset}
    runs = queries.runs_by_id(db, run_ids, counted=False)
    out["live"] = any(r.get("status") == "running" for r in runs)
    try:
        expr = selections.parse(db, filter_text)
    except filters.FilterError as exc:
        out.update(filter_error=_one_line(exc), rows=[], total=0, more=False, cursor=after)
        return out
    limit = max(0, min(int(limit), MAX_PAGE))
    cursor = parse_cursor(after)
    # A live run: committed rows up to its last commit, then its journal's tail (read.live).
    run_id = ref.run_id
    tail = None
    in_python = redactor.enabled and selections.reads_masked(expr)
    if journals is not None and out["live"] and not ref.is_session and run_id is not None:
        tail = journals.tail(db, run_id)
    until = (run_id, tail.committed) if tail is not None and tail.committed is not None and run_id else None
    # The filter reads masked text: the selection masks every frame in relay order itself,
    # with this request's own redactor (the primed one is shared between threads).
    selection = selections.Selection(db, expr, redactor if in_python else None, ref, until=until, primed=primed)
    page = selection.window(cursor, limit, offset)
    rows = page.frames if in_python else primed.masked(db, page.frames)
    total, more, last, place = page.total, page.more, page.last, page.cursor
    fresh: list[dict[str, Any]] = []
    if until is not None and tail is not None and tail.records:
        fresh, count, final = _journal_rows(
            selection, tail, primed, cursor, max(0, offset - page.total), limit - len(rows)
        )
        if count:
            rows = [*rows, *fresh]
            total += count
            more = total > offset + len(rows)
            last = (until[0], final)
            place = (rows[-1]["run_id"], rows[-1]["seq"]) if rows else place
    if cursor is None:
        out["last"] = f"{last[0]}:{last[1]}" if last else None
    wanted = parse_cursor(at)
    if wanted is not None:
        out["position"] = selection.position(wanted)
        if out["position"] is None and tail is not None and tail.records and wanted[0] == run_id:
            index = tail.index_after(wanted[1]) - 1
            held = index >= 0 and tail.records[index].seq == wanted[1] and isinstance(expr, filters.Const)
            out["position"] = selection.total() + index if held else None
    faults, findings = _annotations(db, run_ids, redactor)
    out["rows"] = [
        timeline.timeline_row(r, faults.get((r["run_id"], r["seq"]), ()), findings.get((r["run_id"], r["seq"]), ()))
        for r in rows
    ]
    # The virtual list shows consecutive chunks as one row: groups within this page (+1 look-behind).
    chunk_groups.mark_page(db, out["rows"], [chunk_groups.key(r) for r in rows])
    out["total"] = total
    out["more"] = more
    out["cursor"] = f"{place[0]}:{place[1]}" if place else None
    return out


def _journal_rows(
    selection: selections.Selection,
    tail: live.Tail,
    primed: selections.Primed,
    cursor: tuple[int, int] | None,
    start: int,
    room: int,
) -> tuple[list[dict[str, Any]], int, int]:
    """A live run's journal frames that follow the selection's committed ones: the ``room``
    of them from index ``start`` (after ``cursor``), masked, and how many there are.

    With no filter this costs the page, not the tail (a flood leaves the recorder ~100,000
    frames behind): the primed masking reads only the frames it has not read up to the page's
    end, each once. A filter is matched on every frame of the tail, masked in order."""
    records = tail.records
    first = tail.index_after(cursor[1]) if cursor is not None else 0
    if not isinstance(selection.expr, filters.Const) or selection.in_python:
        matched = selection.extend([r.as_dict() for r in records], primed)
        if cursor is not None:
            matched = [r for r in matched if r["seq"] > cursor[1]]
        return matched[start : start + max(0, room)], len(matched), matched[-1]["seq"] if matched else 0
    if not selection.expr.value:
        return [], 0, 0
    count = len(records) - first
    begin = first + start
    end = min(len(records), begin + max(0, room))
    if begin >= end:
        return [], count, records[-1].seq
    # Every frame the masking has not read yet, up to the page's end, in order: those before the
    # page read as recorded frames are (a batch at a time), the page's own masked.
    learn = min(begin, tail.index_after(primed.read_to(records[0].run_id)))
    primed.learn(selection.db, records[0].run_id, [(r.seq, r.raw) for r in records[learn:begin]])
    masked = primed.masked(selection.db, [r.as_dict() for r in records[begin:end]])
    return masked, count, records[-1].seq


def _conversation_json(conv: fd.Conversation) -> dict[str, Any]:
    data = folding.conversation_json(conv)
    # Consecutive text is what a person reads; the raw content blocks stay for the JSON twin.
    for entity, item in zip(conv.timeline, data.get("timeline") or [], strict=False):
        if isinstance(entity, (fd.Message, fd.ToolCall)):
            item["text"] = fd.text_of(entity.content, sep="" if isinstance(entity, fd.Message) else "\n")
        elif isinstance(entity, fd.Terminal):
            item["text"] = entity.text
    for turn, item in zip(conv.turns, data.get("turns") or [], strict=False):
        item["prompt_text"] = fd.text_of(turn.prompt, sep="\n")
        item["duration_ms"] = None if turn.duration_ns is None else round(turn.duration_ns / 1e6, 1)
    return data


def _timeline(
    db: Any,
    ref: queries.Ref,
    run_ids: list[int],
    redactor: Redactor,
    filter_text: str | None,
    cursor: tuple[int, int] | None,
    limit: int,
    tail: live.Tail | None = None,
    until: tuple[int, int] | None = None,
    primed: selections.Primed | None = None,
) -> dict[str, Any]:
    out: dict[str, Any] = {"filter": filter_text or "", "filter_error": None}
    try:
        expr = selections.parse(db, filter_text)
    except filters.FilterError as exc:
        out.update(filter_error=_one_line(exc), timeline=[], shown=0, more=False)
        return out
    limit = max(1, min(int(limit), MAX_LIMIT))
    # Masked before the filter reads it: a text: term matches what the page shows, no more.
    # Each frame masked after every frame before it (a value named in one is masked where a
    # later one repeats it): by the selection's own pass when the filter reads masked text,
    # else by a primed redactor that reads the run up to the page.
    in_python = redactor.enabled and selections.reads_masked(expr)
    primed = primed if primed is not None else selections.Primed(redactor)
    selection = selections.Selection(db, expr, redactor if in_python else None, ref, until=until)
    selected = list(selection.rows(cursor, limit + 1))
    if not in_python:
        selected = primed.masked(db, selected)
    if tail is not None and tail.records and len(selected) <= limit:
        # Past the last commit: the journal's frames, masked and matched as the committed ones
        # (the selection has read every committed frame by now: it found fewer than it wanted).
        later = selection.extend(tail.rows, primed)
        later = [r for r in later if cursor is None or (r["run_id"], r["seq"]) > cursor]
        selected += later[: limit + 1 - len(selected)]
    out["more"] = len(selected) > limit
    selected = selected[:limit]
    faults, findings = _annotations(db, run_ids, redactor)
    trows = [
        timeline.timeline_row(r, faults.get((r["run_id"], r["seq"]), ()), findings.get((r["run_id"], r["seq"]), ()))
        for r in selected
    ]
    out["timeline"] = timeline.collapse(trows)
    out["shown"] = len(trows)
    if trows:
        out["cursor"] = trows[-1]["id"]
    return out


def _one_line(exc: filters.FilterError) -> str:
    return f"{exc.message} (at column {exc.column + 1})"


def _annotations(
    db: Any, run_ids: list[int], redactor: Redactor
) -> tuple[dict[tuple[int, int], list[dict[str, Any]]], dict[tuple[int, int], list[dict[str, Any]]]]:
    return (
        notes.by_frame(notes.faults(db, run_ids, redactor=redactor)),
        notes.by_frame(notes.findings(db, run_ids, redactor=redactor)),
    )


# -- one frame ----------------------------------------------------------------------------------


def frame(db: Any, run_id: int, seq: int, redactor: Redactor, primed: selections.Primed) -> dict[str, Any]:
    """One frame: verbatim (masked by ``primed``, which has read the run up to it), decoded, and
    the JSON tree's schema marks; its faults and findings masked by ``redactor``."""
    found = selections.frame(db, run_id, seq, None)
    if found is None:
        raise NotFound(f"no frame {run_id}:{seq}")
    row = primed.masked(db, [found])[0]
    run = queries.run_row(db, run_id)
    version = (run["protocol_version"],) if run else None
    decoded = timeline._decoded(row)
    faults, findings = _annotations(db, [run_id], redactor)
    verbatim = row["raw"] if row.get("raw") is not None else None
    if verbatim is None and row.get("raw_bytes") is not None:
        verbatim = row["raw_bytes"].decode("utf-8", errors="replace")
    return {
        "run_id": run_id,
        "seq": seq,
        "row": timeline.timeline_row(row, faults.get((run_id, seq), ()), findings.get((run_id, seq), ())),
        "raw": verbatim,
        "valid_utf8": row.get("raw_bytes") is None,
        "json": decoded,
        "marks": known.marks(decoded, row.get("kind"), row.get("method"), version[0] if version else None)
        if decoded is not None
        else [],
        "note": row.get("note"),
        "decode_error": row.get("decode_error"),
        "redacted": redactor.enabled,
    }


# -- two recordings -----------------------------------------------------------------------------


def diff(db: Any, left: str, right: str, redactor: Redactor) -> dict[str, Any]:
    """``acp-proxy diff LEFT RIGHT`` as a page: around the turns and every turn of both sides,
    what differs — the read layer's comparison, as the command line has it."""
    try:
        compared = compare.compare(db, left, right, redactor)
    except queries.RefError as exc:
        raise NotFound(str(exc)) from None

    def side(s: compare.Side) -> dict[str, Any]:
        return {"ref": s.text, "describe": s.describe(), "run_id": s.ref.run_id, "session_id": s.ref.session_id}

    return {
        "left": side(compared.left),
        "right": side(compared.right),
        "differ": compared.differ,
        "compared": list(df.COMPARED),
        "shown": list(df.SHOWN),
        "connection_keys": list(df.CONNECTION),
        "connection": compared.connection_json(),
        "turns": compared.turns_json(),
        "redacted": redactor.enabled,
    }
