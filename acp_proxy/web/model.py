"""Everything the inspector's pages show, as plain dicts: the one adapter between a recording
and the web.

Owns: what each page (and its JSON twin) holds — the runs and sessions list; a run's or a
session's folded conversation, frame timeline (filtered, followed live from a cursor), waterfall
and latency samples; one frame in detail (verbatim, decoded, with its schema marks); a diff of
two recordings — and applying redaction to all of it before anything leaves this module. Frames
are redacted before they are folded, so the conversation can only hold what the frames show.

Must not know: HTTP, Datasette, HTML, click. It reads through any object with ``execute`` (a
``store.ReadDb`` or a bare read-only ``sqlite3`` connection) and uses ``queries`` for the SQL it
shares with the command line. When the protocol state machine's events replace the fold, this
is the module that changes; the pages read only these dicts.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from acp_proxy.cli import transcript
from acp_proxy.protocol import filters
from acp_proxy.protocol.redact import Redactor
from acp_proxy.read import diff as df
from acp_proxy.read import fold as fd
from acp_proxy.read import frames as selections
from acp_proxy.read import queries
from acp_proxy.web import known, timeline

DEFAULT_LIMIT = 2000
MAX_LIMIT = 20000

RUN_JSON_FIELDS = ("argv", "options", "client_info", "agent_info", "client_capabilities", "agent_capabilities")


class NotFound(Exception):
    """What a page names is not in the recording; ``str()`` is one line for a person."""


# -- runs and sessions --------------------------------------------------------------------------


def run_summary(row: dict[str, Any], redactor: Redactor) -> dict[str, Any]:
    """A ``runs`` row (as ``queries.runs`` gives it) as the pages show it."""
    from acp_proxy.cli.views import exit_status

    def parsed(name: str) -> Any:
        text = row.get(name)
        if text is None:
            return None
        try:
            return redactor.value(json.loads(text))
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
    }


def index(db: Any, redactor: Redactor, limit: int = 100) -> dict[str, Any]:
    """The front page: runs and sessions, newest first."""
    runs = [run_summary(r, redactor) for r in queries.runs(db, limit=limit)]
    return {
        "runs": runs,
        "sessions": [session_summary(s, redactor) for s in queries.sessions(db, limit=limit)],
        "running": sum(1 for r in runs if r["status"] == "running"),
        "redacted": redactor.enabled,
    }


# -- one run or one session ---------------------------------------------------------------------


def resolve(db: Any, kind: str, ident: str) -> queries.Ref:
    """A run (``kind`` "run", ``ident`` its id) or a session (its id, or a unique prefix)."""
    if kind == "run":
        if not ident.isdigit() or not db.execute("select 1 from runs where id = ?", [int(ident)]).fetchone():
            raise NotFound(f"no run {ident}")
        return queries.Ref(ident, run_id=int(ident))
    # Under /sessions/ a reference is a session's even when it is all digits (which alone names a run).
    spelled = ident if ident.startswith("session:") else f"session:{ident}"
    try:
        ref = queries.resolve(db, spelled)
    except queries.RefError as exc:
        raise NotFound(str(exc)) from None
    if not ref.is_session:
        raise NotFound(f"no session {ident!r}")
    return ref


def parse_cursor(text: str | None) -> tuple[int, int] | None:
    """``RUN:SEQ`` -> (run, seq): the last frame a page has; None for none or nonsense."""
    if not text:
        return None
    run, _, seq = text.partition(":")
    if run.isdigit() and seq.isdigit() and len(run) < 19 and len(seq) < 19:
        return int(run), int(seq)
    return None


def conversation(
    db: Any,
    kind: str,
    ident: str,
    redactor: Redactor,
    *,
    filter_text: str | None = None,
    after: str | None = None,
    limit: int = DEFAULT_LIMIT,
    parts: Iterable[str] = ("summary", "conversation", "timeline", "charts"),
) -> dict[str, Any]:
    """A run's or a session's page: what ``show`` rebuilds beside the frame timeline.

    ``filter_text`` (the filter language) narrows the timeline only; ``after`` (a ``RUN:SEQ``
    cursor) keeps the timeline to frames recorded after it, for live follow; ``parts`` picks
    which sections to compute (``summary``, ``conversation``, ``timeline``, ``charts``).
    """
    parts = set(parts)
    ref = resolve(db, kind, ident)
    run_ids = queries.run_ids_of(db, ref)
    where, params = _ref_clause(ref, run_ids)
    last = db.execute(f"select run_id, seq from frames where {where} order by run_id desc, seq desc limit 1", params)
    last_row = last.fetchone()
    out: dict[str, Any] = {
        "ref": {"kind": kind, "id": ref.run_id if kind == "run" else ref.session_id, "describe": ref.describe()},
        "run_ids": run_ids,
        "redacted": redactor.enabled,
        "frames_total": db.execute(f"select count(*) from frames where {where}", params).fetchone()[0],
        "cursor": f"{last_row[0]}:{last_row[1]}" if last_row else None,
    }
    # The summary is cheap and says whether a run is still recording: live follow needs it.
    runs = [run_summary(r, redactor) for r in _runs(db, run_ids)]
    out["live"] = any(r["status"] == "running" for r in runs)
    if "summary" in parts:
        out["runs"] = runs
    if "conversation" in parts or "charts" in parts:
        # The fold needs every frame; the timeline and live polls below read only what they show.
        rows = queries.frames_of(db, ref, include_stderr=True)
        for row in rows:
            _redact_row(row, redactor)
        folded = transcript.fold_rows(r for r in rows if r["dir"] != "stderr")
        if ref.is_session:
            folded = {k: v for k, v in folded.items() if k == ref.session_id}
        convs = sorted(
            (c for k, c in folded.items() if k is not None or not c.empty),
            key=lambda c: c.timeline[0].seq if c.timeline else 0,
        )
        if "conversation" in parts:
            out["conversations"] = [redactor.value(_conversation_json(c)) for c in convs]
        if "charts" in parts:
            ts_of = {(r["run_id"], r["seq"]): r["ts_ns"] for r in rows}
            out["waterfall"] = timeline.waterfall(convs, ts_of)
            out["latency"] = timeline.latency_samples(rows)
    if "timeline" in parts:
        out.update(_timeline(db, ref, run_ids, redactor, filter_text, parse_cursor(after), limit))
    return out


def _ref_clause(ref: queries.Ref, run_ids: list[int]) -> tuple[str, list[Any]]:
    """SQL over ``frames`` (unaliased, as the filter language's SQL expects) for the frames of a
    run, or those that concern a session (as ``queries.frames_of`` selects them, stderr
    included)."""
    marks = ",".join("?" * len(run_ids)) or "null"
    if not ref.is_session:
        return "frames.run_id = ?", [ref.run_id]
    # A response carries no sessionId of its own: it belongs to the session of its request.
    return (
        f"""frames.run_id in ({marks}) and (frames.session_id = ?
            or exists (select 1 from frames q where q.run_id = frames.run_id and q.seq = frames.request_seq
                       and q.session_id = ?))""",
        [*run_ids, ref.session_id, ref.session_id],
    )


def _runs(db: Any, run_ids: list[int]) -> list[dict[str, Any]]:
    marks = ",".join("?" * len(run_ids)) or "null"
    return queries.rows(
        db,
        f"""select r.*, (select count(*) from faults f where f.run_id = r.id) as faults_applied,
                   (select count(*) from findings x where x.run_id = r.id) as findings
            from runs r where r.id in ({marks}) order by r.id""",
        run_ids,
    )


def _redact_row(row: dict[str, Any], redactor: Redactor) -> None:
    """A frames row with its secrets masked, in place (raw, raw_bytes, messages, notes)."""
    masked = redactor.frame_row(row)
    if masked is not row:
        row.update(masked)


def _conversation_json(conv: fd.Conversation) -> dict[str, Any]:
    data = transcript.conversation_json(conv)
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
) -> dict[str, Any]:
    out: dict[str, Any] = {"filter": filter_text or "", "filter_error": None}
    try:
        expr = selections.parse(db, filter_text)
    except filters.FilterError as exc:
        out.update(filter_error=_one_line(exc), timeline=[], shown=0, more=False)
        return out
    limit = max(1, min(int(limit), MAX_LIMIT))
    # Masked before the filter reads it: a text: term matches what the page shows, no more.
    selected = list(selections.Selection(db, expr, redactor, ref).rows(cursor, limit + 1))
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
    marks = ",".join("?" * len(run_ids)) or "null"
    faults: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for f in queries.rows(db, f"select * from faults where run_id in ({marks}) order by id", run_ids):
        f["detail"] = redactor.text(f["detail"]) if f.get("detail") else f.get("detail")
        faults.setdefault((f["run_id"], f["seq"]), []).append(f)
    findings: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for f in queries.rows(db, f"select * from findings where run_id in ({marks}) order by id", run_ids):
        f["message"] = redactor.text(f["message"]) if f.get("message") else f.get("message")
        findings.setdefault((f["run_id"], f["seq"]), []).append(f)
    return faults, findings


# -- one frame ----------------------------------------------------------------------------------


def frame(db: Any, run_id: int, seq: int, redactor: Redactor) -> dict[str, Any]:
    """One frame: verbatim (redacted), decoded, and the JSON tree's schema marks."""
    found = queries.rows(db, "select * from frames where run_id = ? and seq = ?", [run_id, seq])
    if not found:
        raise NotFound(f"no frame {run_id}:{seq}")
    row = found[0]
    # Earlier frames can name a secret that this one repeats in free text (a path rule on
    # initialize, say): let the redactor see the run's frames up to here first.
    if redactor.enabled and redactor.rules:
        earlier = "select raw from frames where run_id = ? and seq < ? and raw is not null"
        for (raw,) in db.execute(earlier, [run_id, seq]):
            redactor.raw(raw)
    _redact_row(row, redactor)
    version = db.execute("select protocol_version from runs where id = ?", [run_id]).fetchone()
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
    """``acp-proxy diff LEFT RIGHT`` as a page: every turn of both sides, what differs."""
    sides = []
    for text in (left, right):
        try:
            ref = queries.resolve(db, text)
        except queries.RefError as exc:
            raise NotFound(str(exc)) from None
        rows = queries.frames_of(db, ref)
        for row in rows:
            _redact_row(row, redactor)
        convs = transcript.fold_rows(rows)
        if ref.is_session:
            convs = {k: v for k, v in convs.items() if k == ref.session_id}
        sides.append((ref, list(convs.values())))
    (lref, lconvs), (rref, rconvs) = sides
    turns = df.diff_conversations(lconvs, rconvs)
    return {
        "left": {"ref": left, "describe": lref.describe(), "run_id": lref.run_id, "session_id": lref.session_id},
        "right": {"ref": right, "describe": rref.describe(), "run_id": rref.run_id, "session_id": rref.session_id},
        "differ": df.any_difference(turns),
        "compared": list(df.COMPARED),
        "shown": list(df.SHOWN),
        "turns": [redactor.value(t.as_json()) for t in turns],
        "redacted": redactor.enabled,
    }
