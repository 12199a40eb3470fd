"""The reconstructed conversation as a person reads it: `acp-proxy show`.

Owns: turning folded ``Conversation``s into styled lines — turns, user and agent messages,
thoughts (dimmed), tool calls with kind, status, locations and content, plans, permission
requests and their answers, terminals, notices (marked live), compactions, usage and cost,
errors and unknown updates (raw JSON) — with history from a replay window marked as such.

Must not know: SQL or click. Output goes through a rich ``Console``, which drops styling when
stdout is not a terminal and honours ``NO_COLOR``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from rich.console import Console
from rich.text import Text

from . import fold as fd

WIDTH_LIMIT = 2000  # characters of one content block before it is shortened


def _short(text: str, limit: int = WIDTH_LIMIT) -> str:
    return text if len(text) <= limit else text[: limit - 20] + f" … ({len(text) - limit + 20} more)"


def _json(value: Any, limit: int = 400) -> str:
    return _short(json.dumps(value, ensure_ascii=False, separators=(",", ":")), limit)


def _line(
    con: Console, label: str, body: str, style: str = "", label_style: str = "bold", replay: bool = False
) -> None:
    text = Text()
    if replay:
        text.append("history ", style="magenta")
    text.append(f"{label:<11}", style=label_style)
    text.append(body, style=style)
    con.print(text, soft_wrap=True)


def render_conversation(con: Console, conv: fd.Conversation, turn: int | None = None) -> None:
    header = Text(f"Session {conv.session_id}" if conv.session_id else "Outside any session", style="bold underline")
    details = []
    if conv.title:
        details.append(f"“{conv.title}”")
    if conv.cwd:
        details.append(f"cwd {conv.cwd}")
    if conv.protocol_version:
        details.append(f"protocol {conv.protocol_version}")
    if conv.runs:
        details.append("runs " + ", ".join(str(r) for r in conv.runs))
    if details:
        header.append("  " + " · ".join(details), style="dim")
    con.print(header)
    turns = {t.index: t for t in conv.turns}
    current: int | None = -1
    for entity in conv.timeline:
        if turn is not None and entity.turn != turn:
            continue
        if entity.turn != current:
            current = entity.turn
            _turn_header(con, turns.get(current or 0), current)
        _entity(con, entity)
    if turn is None:
        _footer(con, conv)
    con.print()


def _turn_header(con: Console, t: fd.PromptTurn | None, index: int | None) -> None:
    if not index:
        con.print(Text("── before the first prompt", style="dim"))
        return
    bits = [f"── Turn {index}"]
    if t is not None:
        if t.stop_reason:
            bits.append(f"stop: {t.stop_reason}")
        elif t.error:
            bits.append(f"error: {_json(t.error, 120)}")
        elif t.open:
            bits.append("unfinished")
        if t.duration_ns is not None:
            bits.append(f"{t.duration_ns / 1e6:.1f} ms")
        if t.message_id:
            bits.append(f"message {t.message_id}")
    con.print(Text(" · ".join(bits) + " ──", style="bold cyan"))


def _entity(con: Console, e: fd.Entity) -> None:
    replay = bool(e.replay)
    if isinstance(e, fd.Message):
        label = {"user": "user", "agent": "agent", "thought": "thought", "session": "message"}.get(e.role, e.role)
        style = "dim italic" if e.role == "thought" else ("green" if e.role == "user" else "")
        _line(con, label, _short(e.text), style=style, replay=replay)
    elif isinstance(e, fd.ToolCall):
        bits = [e.tool_call_id or "?", f"[{e.tool_kind}]" if e.tool_kind else "", e.title or e.name or ""]
        status = e.status or "pending"
        body = " ".join(b for b in bits if b) + f" — {status}"
        if e.placeholder:
            body += " (never announced)"
        _line(con, "tool", body, style=_status_style(status), replay=replay)
        for loc in e.locations or []:
            path = loc.get("path") if isinstance(loc, dict) else loc
            line = f":{loc.get('line')}" if isinstance(loc, dict) and loc.get("line") is not None else ""
            _line(con, "", f"  at {path}{line}", style="dim", replay=replay)
        content = fd.text_of(e.content, sep="\n") if e.content else ""
        if content:
            _line(con, "", "  " + _short(content, 600).replace("\n", "\n" + " " * 13), style="dim", replay=replay)
    elif isinstance(e, fd.Permission):
        options = ", ".join(str(o.get("optionId")) for o in (e.options or []) if isinstance(o, dict))
        answer = e.option_id or e.outcome or ("error " + _json(e.error, 120) if e.error else "unanswered")
        _line(
            con,
            "permission",
            f"{e.tool_call_id or e.title or '?'} [{options}] → {answer}",
            style="yellow",
            replay=replay,
        )
    elif isinstance(e, fd.Plan):
        if e.removed:
            _line(con, "plan", f"{e.plan_id or 'plan'} removed", style="dim", replay=replay)
            return
        entries = e.entries or []
        _line(con, "plan", f"{e.plan_id or ''} ({len(entries)} entries)".strip(), replay=replay)
        for entry in entries:
            if isinstance(entry, dict):
                mark = {"completed": "[x]", "in_progress": "[~]"}.get(str(entry.get("status")), "[ ]")
                _line(con, "", f"  {mark} {entry.get('content')}", style="dim", replay=replay)
        if e.markdown:
            _line(con, "", "  " + _short(e.markdown, 600), style="dim", replay=replay)
    elif isinstance(e, fd.Terminal):
        state = f"exit {e.exit_status}" if e.exited else "running"
        _line(con, "terminal", f"{e.terminal_id} {e.command or ''} — {state}", replay=replay)
        if e.output:
            _line(con, "", "  " + _short(e.text, 600).replace("\n", "\n" + " " * 13), style="dim", replay=replay)
    elif isinstance(e, fd.Compaction):
        _line(con, "compaction", f"{e.compaction_id} — {e.status}", style="blue", replay=replay)
        if e.text:
            _line(con, "", "  " + _short(e.text, 600), style="dim", replay=replay)
    elif isinstance(e, fd.Notice):
        _line(
            con,
            "notice",
            f"(live) [{e.severity or 'info'}] {e.title or ''} {e.description or ''}".rstrip(),
            style="yellow",
            replay=replay,
        )
    elif isinstance(e, fd.ErrorResponse):
        _line(con, "error", f"{e.method or '?'} → {e.code} {e.message or ''}", style="red", replay=replay)
    elif isinstance(e, fd.Cancellation):
        _line(con, "cancel", "session/cancel sent by the client", style="yellow", replay=replay)
    elif isinstance(e, fd.Call):
        outcome = "error " + _json(e.error, 160) if e.error else (_json(e.result, 160) if e.answered else "unanswered")
        _line(con, e.dir or "call", f"{e.method} {_json(e.params, 160)} → {outcome}", style="cyan", replay=replay)
    elif isinstance(e, fd.Subagent):
        _line(con, "subagent", f"{e.child_session_id} {e.title or ''}", replay=replay)
    elif isinstance(e, fd.Unknown):
        what = e.update_kind or e.method or "?"
        kind = "extension" if e.extension else e.reason
        _line(con, "unknown", f"{what} ({kind}) {_json(e.raw)}", style="magenta", replay=replay)
    else:
        _line(con, e.entity, _json(getattr(e, "raw", None) or {}), replay=replay)


def _status_style(status: str) -> str:
    return {"completed": "green", "failed": "red", "cancelled": "yellow"}.get(status, "")


def _footer(con: Console, conv: fd.Conversation) -> None:
    if conv.usage is not None:
        u = conv.usage
        cost = ""
        if isinstance(u.cost, dict) and u.cost.get("amount") is not None:
            cost = f", cost {u.cost.get('amount')} {u.cost.get('currency', '')}".rstrip()
        _line(con, "usage", f"{u.used} of {u.size} tokens{cost}", style="dim")
    if conv.state:
        _line(con, "state", f"{conv.state}" + (f" ({conv.stop_reason})" if conv.stop_reason else ""), style="dim")
    if conv.unforwarded:
        _line(con, "withheld", f"{len(conv.unforwarded)} frame(s) not forwarded by the proxy", style="yellow")


def fold_rows(rows: Iterable[dict[str, Any]]) -> dict[str | None, fd.Conversation]:
    """Fold recorded frame rows (as ``queries`` returns them) into conversations by session."""
    inputs = []
    for row in rows:
        if row["dir"] not in ("c2a", "a2c") or row.get("batch_seq") is not None or row.get("raw") is None:
            continue
        try:
            message = json.loads(row["raw"])
        except ValueError:
            continue
        inputs.append(
            fd.FoldInput(
                seq=row["seq"],
                ts_ns=row["ts_ns"],
                dir=row["dir"],
                message=message,
                replay=bool(row.get("replay")),
                forwarded=row.get("forwarded") != 0,
                run=row["run_id"],
            )
        )
    return fd.fold_sessions(inputs)


def conversation_json(conv: fd.Conversation) -> dict[str, Any]:
    """A JSON-able view of a folded conversation (entities by timeline order)."""
    import dataclasses

    def plain(value: Any) -> Any:
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            out = {"entity": getattr(value, "entity", None)} if isinstance(value, fd.Entity) else {}
            out.update({f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)})
            return out
        if isinstance(value, (bytes, bytearray)):
            return value.decode(errors="replace")
        if isinstance(value, dict):
            return {str(k): plain(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [plain(v) for v in value]
        return value

    return plain(conv)
