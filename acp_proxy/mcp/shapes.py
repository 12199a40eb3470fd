"""What the MCP tools answer: their output models (published as each tool's ``outputSchema``)
and the bounds every answer keeps.

Owns: the pydantic models of the structured content; ``fit``, which pages a list so that its
JSON stays under ``MAX_ANSWER`` characters (fewer items than asked, with ``next`` saying where
to go on); ``shrink``, which cuts the long strings of one oversized value, saying so.

Must not know: SQL, the database, the read layer's computations (it only bounds what they
computed); the SDK's server (``server`` registers the tools).
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, Field

MAX_ANSWER = 100_000
"""The most characters of JSON any answer holds; a longer one is paged or cut."""
ITEM_ROOM = MAX_ANSWER - 4_000
"""What a page's items may take: the rest is for the envelope (total, next, note, ...)."""


def size(value: Any) -> int:
    return len(dumps(value))


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


class Page(BaseModel):
    """A page of a list: the list's ``total``, where this page starts (``offset``), how many it
    holds (``returned``), and the ``offset`` of the next page (``next``; null on the last)."""

    total: int = Field(description="How many items the whole list holds.")
    offset: int = Field(description="How many items of the list come before this page.")
    returned: int = Field(description="How many items this page holds.")
    next: int | None = Field(description="The offset to ask for the next page; null when this is the last.")
    note: str | None = Field(default=None, description="Why fewer items came than asked, when they did.")
    items: list[dict[str, Any]] = Field(description="The items of this page.")


def _items(description: str, properties: dict[str, Any]) -> Any:
    """The ``items`` field of a page whose items are objects with (at least) these properties,
    described in the published schema; an item cut to fit (``shrink``) may lack them."""
    extra: Any = {"items": {"type": "object", "additionalProperties": True, "properties": properties}}
    return Field(description=description, json_schema_extra=extra)


def _p(kind: str | list[str], description: str) -> dict[str, Any]:
    return {"type": kind, "description": description}


FRAME = {
    "run_id": _p("integer", "The run the frame was recorded in."),
    "seq": _p("integer", "The frame's number within its run, in relay order."),
    "ts_ns": _p("integer", "When the proxy read it (ns since the Unix epoch)."),
    "dir": _p("string", "c2a (client to agent), a2c, or stderr (the agent's stderr)."),
    "kind": _p("string", "request | notification | response | error | batch | invalid | stderr"),
    "method": _p("string", "The JSON-RPC method (a response: its request's)."),
    "session_id": _p("string", "The ACP session it concerns."),
    "update_kind": _p("string", "The session/update variant (agent_message_chunk, tool_call, ...)."),
    "latency_ns": _p("integer", "On an answer: the time since its request."),
    "raw": _p("string", "The line as it crossed the wire (masked; cut at max_chars)."),
    "mark": _p("string", "A person's mark (acp-proxy mark): its note, empty for none; absent when unmarked."),
    "note": _p("string", "What the proxy says about the frame (held, released, edited, a fault...)."),
}
MARK = {
    "run_id": _p("integer", "The run of the marked frame."),
    "seq": _p("integer", "The marked frame's seq (`frame` gives it whole)."),
    "note": _p(["string", "null"], "The person's note on it."),
    "marked_ns": _p("integer", "When it was marked (ns since the Unix epoch)."),
    "dir": _p(["string", "null"], "The frame's direction: c2a, a2c or stderr."),
    "method": _p(["string", "null"], "The frame's JSON-RPC method."),
}
RUN = {
    "id": _p("integer", "The run id (a REF)."),
    "status": _p("string", "running | ended | crashed"),
    "agent_name": _p("string", "The agent, as initialize said."),
    "client_name": _p("string", "The client (editor), as initialize said."),
    "protocol_version": _p("integer", "The negotiated ACP protocol version."),
    "frames": _p("integer", "How many frames were recorded."),
    "turns": _p("integer", "Its prompt turns, a proxy chain's inner ones included."),
}
SESSION = {
    "session_id": _p("string", "The ACP session id (a REF)."),
    "title": _p(["string", "null"], "The session's title, when the agent gave one."),
    "cwd": _p(["string", "null"], "Its working directory."),
    "runs": _p(["string", "null"], "The runs it appears in, comma-separated."),
    "turns": _p("integer", "Its prompt turns, those proxy chains in its runs carry included."),
    "hop": _p("integer", "0: the recorded link's own; 1 and deeper: only inside a proxy chain (show its run)."),
}
CLIENT = {
    "client": _p("string", "The client's name, as initialize said (? when it said none)."),
    "client_version": _p(["string", "null"], "Its version."),
    "runs": _p("integer", "Runs recorded with it."),
    "sessions": _p("integer", "Sessions in its runs (as list_sessions has them, a proxy chain's included)."),
    "turns": _p("integer", "Prompt turns in its runs (list_runs' turns, a proxy chain's inner ones included)."),
    "agents": {"type": "array", "items": {"type": "string"}, "description": "The agents it talked to."},
    "session_ids": {"type": "array", "items": {"type": "string"}, "description": "Its sessions, newest first."},
}
EXCHANGE = {
    "run_id": _p("integer", "The run."),
    "method": _p("string", "The request's method."),
    "dir": _p("string", "Who asked: c2a (the client) or a2c (the agent)."),
    "request": _p("object", "seq, ts_ns, kind and body (the params) of the request."),
    "response": _p(["object", "null"], "seq, ts_ns, kind, body (result or error) of the answer; null: none."),
    "outcome": _p("string", "response | error | unanswered (the run ended first) | pending (still running)"),
    "latency_ms": _p(["number", "null"], "How long the answer took."),
}
FINDING = {
    "rule": _p("string", "The rule broken."),
    "severity": _p("string", "error | warning | info"),
    "run_id": _p("integer", "The frame's run."),
    "seq": _p("integer", "The frame's seq."),
    "message": _p("string", "What is wrong."),
}


class RunsPage(Page):
    items: list[dict[str, Any]] = _items("Runs, newest first.", RUN)


class SessionsPage(Page):
    items: list[dict[str, Any]] = _items("Sessions, most recently active first.", SESSION)


class ClientsPage(Page):
    items: list[dict[str, Any]] = _items("Clients, the most sessions first.", CLIENT)


class ExchangesPage(Page):
    items: list[dict[str, Any]] = _items("Requests with their answers, in relay order.", EXCHANGE)


class FindingsPage(Page):
    items: list[dict[str, Any]] = _items("Findings, in relay order.", FINDING)


class FramesPage(Page):
    items: list[dict[str, Any]] = _items("Frames, in relay order, with every recorded column.", FRAME)
    after: str | None = Field(
        default=None, description="The last frame's RUN:SEQ: pass it as `after` for the next page (faster than offset)."
    )
    masked: bool = Field(description="Whether secrets were masked before the filter read the frames.")


class MarksPage(Page):
    items: list[dict[str, Any]] = _items("Marks, in relay order.", MARK)


class ShowAnswer(BaseModel):
    ref: str = Field(description="What was shown: a run or a session.")
    total: int = Field(description="How many lines the whole conversation text holds.")
    offset: int = Field(description="How many lines come before this page.")
    returned: int = Field(description="How many lines this page holds.")
    next: int | None = Field(description="The line offset of the next page; null when this is the last.")
    text: str = Field(description="The conversation as `acp-proxy show` prints it (these lines).")


class FrameAnswer(BaseModel):
    frame: dict[str, Any] = Field(description="Every recorded column of the frame; `raw` is the line (or a part).")
    raw_chars: int = Field(description="How many characters the frame's raw line holds in all.")
    raw_offset: int = Field(description="Where in the raw line the part shown starts.")
    next_raw_offset: int | None = Field(
        description="Where the rest starts (pass it as raw_offset); null when shown whole."
    )
    note: str | None = Field(default=None, description="How to get the frame whole, when it was cut.")


class StatsAnswer(BaseModel):
    ref: str
    latency: list[dict[str, Any]] = Field(description="Per method and direction: count, errors, p50/p95/p99/max ms.")
    turns: Page
    unanswered: Page
    errors: Page


class CheckAnswer(BaseModel):
    checked: str = Field(description="What was checked.")
    counts: dict[str, int] = Field(description="Findings by severity.")
    findings: FindingsPage


class SummaryAnswer(BaseModel):
    ref: str
    runs: list[int]
    sessions: int
    frames: int
    frames_c2a: int
    frames_a2c: int
    duration_ms: float | None
    turns: int
    stop_reasons: dict[str, int]
    slowest_turn: dict[str, Any] | None
    methods: list[dict[str, Any]] = Field(description="Latency per method: count, errors, total, p50/p95/p99/max ms.")
    insights: dict[str, Any] = Field(description="hot_spot (slowest method, tool call), long_tail, outliers, errors.")
    slowest_tool_calls: list[dict[str, Any]]


class MetadataAnswer(BaseModel):
    ref: str
    runs: list[dict[str, Any]] = Field(description="Per run: both sides' names, versions, protocol, capabilities.")
    sessions: list[dict[str, Any]] = Field(description="Per session: cwd, title, modes, mode, models, model.")


class DiffTurnsPage(Page):
    items: list[dict[str, Any]] = _items(
        "Turn by turn: session, turn, what differs, and each side's.",
        {
            "turn": _p("integer", "The turn (1 = the first)."),
            "differs": {"type": "array", "items": {"type": "string"}, "description": "What differs in it."},
            "left": _p(["object", "null"], "The left recording's turn."),
            "right": _p(["object", "null"], "The right recording's turn."),
        },
    )


class DiffAnswer(BaseModel):
    left: str = Field(description="The left recording.")
    right: str = Field(description="The right recording.")
    differ: bool = Field(description="Whether anything differs, in or around the turns (timing is not counted).")
    connection: dict[str, Any] = Field(description="What differs outside the turns: initialize, set-up, errors.")
    turns: DiffTurnsPage


def fit(items: list[Any], offset: int, total: int, room: int = ITEM_ROOM) -> tuple[list[Any], str | None]:
    """The first of ``items`` whose JSON fits in ``room`` characters (at least one, shrunk when
    it alone is too big), and a note when some were left for the next page."""
    kept: list[Any] = []
    used = 0
    for item in items:
        length = size(item) + 1
        if used + length > room:
            if not kept:
                kept.append(shrink(item, room))
            break
        kept.append(item)
        used += length
    if len(kept) < len(items):
        return kept, (
            f"{len(kept)} of the {len(items)} asked for fit in {MAX_ANSWER} characters; "
            f"ask again from offset {offset + len(kept)} for the next (of {total})"
        )
    return kept, None


def shrink(value: Any, room: int) -> Any:
    """``value`` with its long strings cut (each ending with how many characters were left
    out) until its JSON fits in ``room`` characters."""
    limit = 20_000
    cut = value
    while size(cut) > room and limit >= 50:
        cut = _cut_strings(value, limit)
        limit //= 4
    if size(cut) > room:  # many short strings: keep the start of its JSON, as text
        text = dumps(value)
        return {"cut": True, "json_start": text[: room - 200], "chars": len(text)}
    return cut


def _cut_strings(value: Any, limit: int) -> Any:
    if isinstance(value, str):
        return cut_text(value, limit)
    if isinstance(value, dict):
        return {k: _cut_strings(v, limit) for k, v in value.items()}
    if isinstance(value, list):
        return [_cut_strings(v, limit) for v in value]
    return value


def cut_text(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit]}… [{len(text) - limit} more characters]"


def text_part(text: str, start: int, room: int) -> str:
    """The longest part of ``text`` from ``start`` whose JSON (escapes included) fits in ``room``."""
    part = text[start : start + room]
    while part and size(part) > room:
        part = part[: max(1, len(part) * room // size(part) - 16)]
    return part
