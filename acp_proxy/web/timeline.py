"""The inspector's frame timeline and pictures, from recorded rows and a folded conversation.

Owns: one timeline row per frame (direction lane, what it is, its latency, flags, the faults and
findings on it, a person's mark and its note, a short preview), collapsing consecutive chunks
of one message into one row that holds them, the per-turn waterfall (acceptance, first output,
tool calls, permission waits, end) from the fold, each bar and mark made by ``read.waterfall``'s
constructors so it has the same shape as the waterfall drawn from the tables (the latency
samples the charts draw are SQL: ``read.latency``).

Must not know: SQL, HTTP, Datasette, HTML. Rows in (already redacted), plain dicts out.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Sequence
from typing import Any

from acp_proxy.protocol import wire
from acp_proxy.read import chunk_groups
from acp_proxy.read import fold as fd
from acp_proxy.read import waterfall as waterfall_rows

PREVIEW_CHARS = 160
CHUNK_TEXT_CHARS = 2000


def iso(ns: int | None) -> str | None:
    """ISO-8601 UTC with milliseconds, as the database views spell it."""
    if ns is None:
        return None
    moment = dt.datetime.fromtimestamp(ns / 1e9, tz=dt.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def flags(row: dict[str, Any]) -> list[str]:
    """Short words for what is special about a frame (as ``acp-proxy frames`` shows them)."""
    out = []
    if row.get("replay"):
        out.append("history")
    if row.get("unanswered"):
        out.append("unanswered")
    if row.get("forwarded") == 0:
        out.append("not forwarded")
    if row.get("unknown"):
        out.append(f"unknown:{row['unknown']}")
    if row.get("cut"):
        out.append("cut")
    if row.get("terminated") == 0:
        out.append("unterminated")
    if row.get("origin") == "proxy":
        out.append("by proxy")
    if row.get("decode_error") and row.get("kind") != "invalid":
        out.append("decode error")
    return out


def _decoded(row: dict[str, Any]) -> Any:
    raw = row.get("raw")
    if raw is None or row.get("kind") in ("stderr", "invalid"):
        return None
    try:
        return wire.loads(raw)
    except ValueError:
        return None


def chunk_text(message: Any) -> str | None:
    """The text a ``*_chunk`` update streams, or None when the frame is not one."""
    if not isinstance(message, dict):
        return None
    params = message.get("params")
    update = params.get("update") if isinstance(params, dict) else None
    if not isinstance(update, dict) or not str(update.get("sessionUpdate", "")).endswith("_chunk"):
        return None
    return fd.text_of(update.get("content"))


def chunk_key(row: dict[str, Any]) -> str | None:
    """Frames with the same key, one after another, are chunks of one message."""
    return chunk_groups.key(row)


_QUIET_KEYS = frozenset(("jsonrpc", "sessionId", "sessionUpdate", "_meta"))


def snippet(row: dict[str, Any], message: Any, text: str) -> str:
    """What a frame says, in a line: the text it carries (a chunk's, a prompt's, a tool call's
    title, an error's message), else its payload as compact JSON without the envelope
    (``jsonrpc``, ``id``, ``method``, ``sessionId`` are in their own columns)."""
    if not isinstance(message, dict):
        return _cut(text)
    body: Any = None
    if "error" in message:
        body = message["error"]
    elif "result" in message:
        body = message["result"]
    else:
        body = message.get("params")
        if isinstance(body, dict) and isinstance(body.get("update"), dict):
            body = body["update"]
    if isinstance(body, dict):
        for key in ("content", "prompt"):
            said = fd.text_of(body.get(key)) if body.get(key) is not None else ""
            if said:
                return _cut(said)
        for key in ("message", "title", "stopReason"):
            if isinstance(body.get(key), str) and body[key]:
                return _cut(body[key])
        body = {k: v for k, v in body.items() if k not in _QUIET_KEYS}
    if body is None or body == {}:
        return ""
    return _cut(json.dumps(body, ensure_ascii=False, separators=(",", ":")))


def _cut(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"


def timeline_row(
    row: dict[str, Any], faults: Sequence[dict[str, Any]] = (), findings: Sequence[dict[str, Any]] = ()
) -> dict[str, Any]:
    """One frame as the timeline shows it. ``row`` is a ``frames`` row, its ``raw`` redacted."""
    raw = row.get("raw")
    if raw is None and row.get("raw_bytes") is not None:
        raw = row["raw_bytes"].decode("utf-8", errors="replace")
    text = raw or ""
    message = _decoded(row)
    error = None
    if row.get("error_code") is not None:
        error = f"{row['error_code']} {row.get('error_message') or ''}".strip()
    out = {
        "id": f"{row['run_id']}:{row['seq']}",
        "run_id": row["run_id"],
        "seq": row["seq"],
        "ts_ns": row["ts_ns"],
        "ts": iso(row["ts_ns"]),
        "dir": row["dir"],
        "kind": row.get("kind"),
        "method": row.get("method"),
        "rpc_id": row.get("rpc_id"),
        "session_id": row.get("session_id"),
        "update_kind": row.get("update_kind"),
        "item_id": row.get("item_id"),
        "request_seq": row.get("request_seq"),
        "latency_ms": None if row.get("latency_ns") is None else round(row["latency_ns"] / 1e6, 3),
        "error": error,
        "size": row.get("size"),
        "flags": flags(row),
        "faults": [{k: f.get(k) for k in ("action", "detail", "rule")} for f in faults],
        "findings": [{k: f.get(k) for k in ("severity", "rule", "message", "spec")} for f in findings],
        "preview": text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…",
        "snippet": snippet(row, message, text),
        "chunk_key": chunk_key(row),
        "text": None,
        # A person's mark (``acp-proxy mark``, the page's m key): its comment, "" for none.
        "mark": row.get("mark"),
        "marked": "mark" in row,
    }
    if out["chunk_key"] is not None:
        chunk = chunk_text(message)
        out["text"] = None if chunk is None else chunk[:CHUNK_TEXT_CHARS]
    return out


def collapse(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Timeline items: a frame, or consecutive chunks of one message as one ``chunks`` item that
    holds them (``rows``) and their joined ``text``. A lone chunk stays a frame."""
    items: list[dict[str, Any]] = []
    group: list[dict[str, Any]] = []

    def close() -> None:
        if len(group) == 1:
            items.append({"type": "frame", **group[0]})
        elif group:
            items.append(chunks_item(list(group)))
        group.clear()

    for row in rows:
        key = row.get("chunk_key")
        if key is None or (group and group[0]["chunk_key"] != key):
            close()
        if key is None:
            items.append({"type": "frame", **row})
        else:
            group.append(row)
    close()
    return items


def chunks_item(rows: list[dict[str, Any]]) -> dict[str, Any]:
    first, last = rows[0], rows[-1]
    text = "".join(r.get("text") or "" for r in rows)
    return {
        "type": "chunks",
        "id": f"{first['id']}-{last['seq']}",
        "chunk_key": first["chunk_key"],
        "run_id": first["run_id"],
        "seq": first["seq"],
        "last_seq": last["seq"],
        "ts": first["ts"],
        "ts_ns": first["ts_ns"],
        "dir": first["dir"],
        "kind": first["kind"],
        "method": first["method"],
        "session_id": first["session_id"],
        "update_kind": first["update_kind"],
        "item_id": first["item_id"],
        "count": len(rows),
        "text": text[:CHUNK_TEXT_CHARS],
        "flags": sorted({f for r in rows for f in r["flags"]}),
        "faults": [f for r in rows for f in r["faults"]],
        "findings": [f for r in rows for f in r["findings"]],
        "rows": rows,
    }


# -- pictures -----------------------------------------------------------------------------------


def waterfall(conversations: Iterable[fd.Conversation], ts_of: dict[tuple[Any, int], int]) -> list[dict[str, Any]]:
    """Bars and marks per live prompt turn, in ms from the prompt: the turn itself, its
    acceptance (v2) and first output, each tool call (first to last update) and each permission
    wait (request to answer). ``ts_of`` maps (run, seq) to a frame's time."""
    out: list[dict[str, Any]] = []
    for conv in conversations:
        for turn in conv.turns:
            if turn.replay:
                continue
            label = waterfall_rows.turn_label(conv.session_id, turn.index, conv.hop)
            t0 = turn.ts_ns

            def ms(ns: int | None, t0: int = t0) -> float | None:
                return None if ns is None else round((ns - t0) / 1e6, 3)

            end = turn.end_ts_ns
            out.append(
                waterfall_rows.turn_bar(
                    label, ms(end), stop_reason=turn.stop_reason, status=turn.status, ended=end is not None
                )
            )
            if turn.accepted_seq is not None:
                accepted = ts_of.get((turn.run, turn.accepted_seq))
                if accepted is not None:
                    out.append(waterfall_rows.mark(label, "acceptance", ms(accepted)))
            for entity in conv.timeline:
                if entity.turn != turn.index or entity.replay:
                    continue
                if isinstance(entity, fd.ToolCall):
                    last = entity.updated_ts_ns or entity.ts_ns
                    out.append(
                        waterfall_rows.bar(
                            label,
                            f"tool {entity.title or entity.tool_call_id}",
                            "tool call",
                            ms(entity.ts_ns),
                            ms(max(last, entity.ts_ns)),
                            entity.status or "",
                        )
                    )
                elif isinstance(entity, fd.Permission):
                    out.append(
                        waterfall_rows.bar(
                            label,
                            f"permission {entity.tool_call_id or entity.title or ''}".strip(),
                            "permission wait",
                            ms(entity.ts_ns),
                            ms(entity.answered_ts_ns if entity.answered_ts_ns is not None else end),
                            entity.option_id or entity.outcome or ("answered" if entity.answered else ""),
                        )
                    )
            if turn.first_output_ns is not None:  # protocol.output's one definition
                out.append(waterfall_rows.mark(label, "first output", ms(turn.first_output_ns)))
            if end is not None:
                out.append(waterfall_rows.mark(label, "end", ms(end)))
    return out
