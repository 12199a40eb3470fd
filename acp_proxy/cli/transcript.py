"""The reconstructed conversation as a person reads it: `acp-proxy show`.

Owns: turning folded ``Conversation``s into styled lines — the connection's set-up (initialize,
authenticate, session set-up), turns with how they ended (stop reason, error, unfinished,
cancellation, per-turn usage), user and agent messages, thoughts (dimmed), tool calls with kind,
status, locations and content, plans (cancelled entries marked), permission requests and their
answers, terminals and how they exited, notices (live, or replayed when they should not have
been), compactions, session state reports (usage and cost, state, mode, config options,
commands, session info), every other request with its answer, protocol notifications
(``$/cancel_request`` shown with the request it cancels), errors and unknown updates (raw JSON) —
with history from a replay window marked as such. Every method and update variant of the shipped
schemas has its own rendering here (``METHOD_LABELS``, ``STATE_RENDERERS``); only what is outside
them is shown as unknown.

Must not know: SQL or click. Output goes through a rich ``Console``, which drops styling when
stdout is not a terminal and honours ``NO_COLOR``.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Callable, Mapping
from typing import Any

from rich.console import Console
from rich.text import Text

from acp_proxy.cli.views import clock
from acp_proxy.protocol.controls import summary
from acp_proxy.read import fold as fd
from acp_proxy.read.conversation import conversation_json, fold_rows

__all__ = ["conversation_json", "fold_rows", "render_conversation"]

WIDTH_LIMIT = 2000  # characters of one content block before it is shortened


def _short(text: str, limit: int = WIDTH_LIMIT) -> str:
    return text if len(text) <= limit else text[: limit - 20] + f" … ({len(text) - limit + 20} more)"


def _json(value: Any, limit: int = 400) -> str:
    return _short(json.dumps(value, ensure_ascii=False, separators=(",", ":")), limit)


def _d(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _line(
    con: Console, label: str, body: str, style: str = "", label_style: str = "bold", replay: bool = False
) -> None:
    text = Text()
    if replay:
        text.append("history ", style="magenta")
    text.append(f"{label:<11}", style=label_style)
    text.append(body, style=style)
    con.print(text, soft_wrap=True)


def render_controls(con: Console, controls: list[dict[str, Any]]) -> None:
    """What a person did to the run through ``acp-proxy ctl``, in time order, one line each:
    the run, the action's number and time, what it did (``protocol.controls.summary``), the
    frames it held, released, edited or sent named ``#SEQ``."""
    if not controls:
        return
    con.print("Controls (acp-proxy ctl)", style="bold yellow")
    for c in sorted(controls, key=lambda c: (c.get("ts_ns") or 0, c.get("run_id"), c.get("number"))):
        text = Text(f"  {c['run_id']}:c{c['number']} {clock(c.get('ts_ns'))} ", style="dim")
        text.append(summary(c))
        con.print(text, no_wrap=True, overflow="ellipsis")


def render_conversation(con: Console, conv: fd.Conversation, turn: int | None = None) -> None:
    if conv.session_id:
        header = Text(f"Session {conv.session_id}", style="bold underline")
    else:
        header = Text("Connection (outside any session)", style="bold underline")
    details = []
    if conv.hop:
        details.append(f"hop {conv.hop}: inside proxy/successor")
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
    prompted = False
    for entity in conv.timeline:
        if turn is not None and entity.turn != turn:
            continue
        if entity.turn != current:
            current = entity.turn
            _turn_header(con, turns.get(current or 0), current, prompted)
            prompted = prompted or bool(current)
        render_entity(con, entity)
    if turn is None:
        _footer(con, conv)
    con.print()


def turn_outcome(t: fd.PromptTurn) -> str:
    """How a prompt turn ended, in words."""
    if t.stop_reason:
        return f"stop: {t.stop_reason}"
    if t.error is not None:
        return f"error: {_json(t.error, 120)}"
    if t.status == "ended":
        return "ended without a stop reason"
    if t.status == "unfinished":
        return "unfinished (the connection ended first)"
    return "running"


def _turn_header(con: Console, t: fd.PromptTurn | None, index: int | None, prompted: bool = False) -> None:
    if not index:
        # Turn 0 is outside any prompt turn: before the first, or between turns (fold.Entity.turn).
        con.print(Text("── outside any prompt turn" if prompted else "── before the first prompt", style="dim"))
        return
    bits = [f"── Turn {index}"]
    if t is not None:
        if t.by == "agent":
            bits.append("started by the agent")
        bits.append(turn_outcome(t))
        if t.duration_ns is not None:
            bits.append(f"{t.duration_ns / 1e6:.1f} ms")
        if t.message_id:
            bits.append(f"message {t.message_id}")
        if t.cancel_seq is not None:
            bits.append(f"cancelled by the client at frame {t.cancel_seq}")
        if t.cancel_requested_seq is not None:
            bits.append(f"$/cancel_request at frame {t.cancel_requested_seq}")
        if t.usage is not None:
            bits.append(usage_text(t.usage))
    con.print(Text(" · ".join(bits) + " ──", style="bold cyan"))


def usage_text(usage: Any) -> str:
    """A turn's ``usage`` (v1 PromptResponse): token counts by kind."""
    u = _d(usage)
    total = u.get("totalTokens")
    parts = [
        f"{u[key]} {name}"
        for key, name in (("inputTokens", "in"), ("outputTokens", "out"), ("thoughtTokens", "thought"))
        if u.get(key) is not None
    ]
    if total is None and not parts:
        return f"usage {_json(usage, 120)}"
    head = f"usage {total} tokens" if total is not None else "usage"
    return f"{head} ({', '.join(parts)})" if parts else head


def render_entity(con: Console, e: fd.Entity) -> None:
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
        cancelled = " (cancel requested by $/cancel_request)" if e.cancel_requested_seq is not None else ""
        _line(
            con,
            "permission",
            f"{e.tool_call_id or e.title or '?'} [{options}] → {answer}{cancelled}",
            style="yellow",
            replay=replay,
        )
    elif isinstance(e, fd.Plan):
        _plan(con, e, replay)
    elif isinstance(e, fd.Terminal):
        state = exit_text(e)
        who = " (client terminal)" if e.client_side else ""
        _line(con, "terminal", f"{e.terminal_id or '?'}{who} {e.command or ''} — {state}", replay=replay)
        if e.output:
            _line(con, "", "  " + _short(e.text, 600).replace("\n", "\n" + " " * 13), style="dim", replay=replay)
    elif isinstance(e, fd.Compaction):
        _line(con, "compaction", f"{e.compaction_id} — {e.status}", style="blue", replay=replay)
        if e.text:
            _line(con, "", "  " + _short(e.text, 600), style="dim", replay=replay)
    elif isinstance(e, fd.Notice):
        # A notice is a live event; in a replay window it was sent although it should not be.
        when = "(replayed)" if e.replay else "(live)"
        _line(
            con,
            "notice",
            f"{when} [{e.severity or 'info'}] {e.title or ''} {e.description or ''}".rstrip(),
            style="yellow",
            replay=replay,
        )
    elif isinstance(e, fd.ErrorResponse):
        _line(con, "error", f"{e.method or '?'} → {e.code} {e.message or ''}", style="red", replay=replay)
    elif isinstance(e, fd.Cancellation):
        _line(con, "cancel", "session/cancel sent by the client", style="yellow", replay=replay)
    elif isinstance(e, fd.Call):
        _line(con, call_label(e.method, e.dir), call_text(e), style="red" if e.error else "cyan", replay=replay)
    elif isinstance(e, fd.Notification):
        _line(con, call_label(e.method, e.dir), notification_text(e), style="cyan", replay=replay)
    elif isinstance(e, fd.SessionState):
        render = STATE_RENDERERS.get(e.variant)
        label, body = render(e.fields) if render is not None else (e.variant, _json(e.fields))
        _line(con, label, body, style="dim", replay=replay)
    elif isinstance(e, fd.Subagent):
        _line(con, "subagent", f"{e.child_session_id} {e.title or ''}", replay=replay)
    elif isinstance(e, fd.Unknown):
        what = e.update_kind or e.method or "?"
        kind = "extension" if e.extension else e.reason
        _line(con, "unknown", f"{what} ({kind}) {_json(e.raw)}", style="magenta", replay=replay)
    else:
        _line(con, e.entity, _json(getattr(e, "raw", None) or {}), replay=replay)


_PLAN_MARKS = {"completed": "[x]", "in_progress": "[~]", "pending": "[ ]", "cancelled": "[-]"}


def _plan(con: Console, e: fd.Plan, replay: bool) -> None:
    if e.removed:
        _line(con, "plan", f"{e.plan_id or 'plan'} removed", style="dim", replay=replay)
        return
    entries = e.entries or []
    kind = f" [{e.plan_type}]" if e.plan_type not in (None, "items") else ""
    _line(con, "plan", f"{e.plan_id or ''}{kind} ({len(entries)} entries)".strip(), replay=replay)
    for entry in entries:
        if isinstance(entry, dict):
            status = str(entry.get("status"))
            mark = _PLAN_MARKS.get(status, "[?]")
            # Anything but pending / in progress / done is said in words (cancelled, custom).
            said = f" ({status})" if status not in ("completed", "in_progress", "pending") else ""
            _line(con, "", f"  {mark} {entry.get('content')}{said}", style="dim", replay=replay)
    if e.markdown:
        _line(con, "", "  " + _short(e.markdown, 600), style="dim", replay=replay)
    if e.uri:
        _line(con, "", f"  {e.uri}", style="dim", replay=replay)


def exit_text(term: fd.Terminal) -> str:
    """How a terminal ended, in words (``exit code 0``, ``killed by SIGTERM``), or ``running``."""
    if term.error is not None:
        return f"could not start: {_json(term.error, 120)}"
    status = _d(term.exit_status)
    if term.exited:
        code, sig = status.get("exitCode"), status.get("signal")
        if sig:
            text = f"killed by {_signal_name(sig)}"
        elif code is not None:
            text = f"exit code {code}"
        else:
            text = "exited"
    elif term.killed:
        text = "killed"
    else:
        text = "running"
    return text + (" · released" if term.released else "")


def _signal_name(sig: Any) -> str:
    if isinstance(sig, int) and not isinstance(sig, bool):
        try:
            return signal.Signals(sig).name
        except ValueError:
            return f"signal {sig}"
    return str(sig)


def _status_style(status: str) -> str:
    return {"completed": "green", "failed": "red", "cancelled": "yellow"}.get(status, "")


# -- requests and notifications: one deliberate rendering per method -------------------------------


def _info(value: Any) -> str:
    info = _d(value)
    name = info.get("title") or info.get("name")
    return " ".join(str(v) for v in (name, info.get("version")) if v) or "?"


def _initialize(params: Any) -> str:
    p = _d(params)
    info = p.get("clientInfo", p.get("info"))
    return f"protocol {p.get('protocolVersion')} · client {_info(info)}"


def _initialized(result: Any) -> str:
    r = _d(result)
    auth = [m.get("id") for m in r.get("authMethods") or [] if isinstance(m, dict)]
    bits = [f"protocol {r.get('protocolVersion')}", f"agent {_info(r.get('agentInfo', r.get('info')))}"]
    if auth:
        bits.append("auth methods " + ", ".join(str(a) for a in auth))
    return " · ".join(bits)


def _session_result(result: Any) -> str:
    r = _d(result)
    bits = [f"session {r['sessionId']}"] if r.get("sessionId") else ["ok"]
    modes = _d(r.get("modes"))
    if modes.get("currentModeId"):
        bits.append(f"mode {modes['currentModeId']}")
    if isinstance(r.get("configOptions"), list):
        bits.append(f"{len(r['configOptions'])} config options")
    return " · ".join(bits)


def _restore(params: Any) -> str:
    p = _d(params)
    replay = " · replay from " + _json(p["replayFrom"], 60) if p.get("replayFrom") is not None else ""
    return f"{p.get('sessionId', '?')} cwd {p.get('cwd', '?')}{replay}"


def _keys(*names: str) -> Callable[[Any], str]:
    """Params shown as ``name=value`` for the keys that matter."""

    def show(params: Any) -> str:
        p = _d(params)
        return " ".join(f"{n}={_json(p[n], 80)}" for n in names if n in p) or _json(params, 160)

    return show


def _inner(params: Any) -> str:
    """A wrapped message (mcp/message, proxy/successor): its method."""
    p = _d(params)
    method = p.get("method") or _d(p.get("message")).get("method")
    return f"wraps {method}" if method else _json(params, 160)


# method -> (label, how the params read, how the result reads). Every method of the shipped
# schemas is here (a test walks them): a new one is rendered on purpose, not by accident.
_PARAMS = Callable[[Any], str]
METHOD_LABELS: dict[str, tuple[str, _PARAMS | None, _PARAMS | None]] = {
    "initialize": ("initialize", _initialize, _initialized),
    "proxy/initialize": ("proxy", _initialize, _initialized),
    "proxy/successor": ("proxy", _inner, None),
    "authenticate": ("auth", _keys("methodId"), lambda r: "ok"),
    "auth/login": ("auth", _keys("methodId"), lambda r: "ok"),
    "auth/logout": ("auth", _keys(), lambda r: "ok"),
    "logout": ("auth", _keys(), lambda r: "ok"),
    "auth/status": ("auth", _keys(), None),
    "auth/status_update": ("auth", _keys("status", "authenticated", "methodId"), None),
    "session/new": ("session", _keys("cwd"), _session_result),
    "session/load": ("session", _restore, _session_result),
    "session/resume": ("session", _restore, _session_result),
    "session/fork": ("session", _keys("sessionId", "cwd"), _session_result),
    "session/list": ("session", _keys("cwd", "cursor"), lambda r: f"{len(_d(r).get('sessions') or [])} sessions"),
    "session/close": ("session", _keys("sessionId"), lambda r: "closed"),
    "session/delete": ("session", _keys("sessionId"), lambda r: "deleted"),
    "session/archive": ("session", _keys("sessionId"), lambda r: "archived"),
    "session/unarchive": ("session", _keys("sessionId"), lambda r: "unarchived"),
    "session/status": ("session", _keys("sessionId"), None),
    "session/set_title": ("session", _keys("title"), lambda r: "ok"),
    "session/set_mode": ("mode", _keys("modeId"), lambda r: "ok"),
    "session/set_config_option": ("config", _keys("configId", "value"), None),
    "session/prompt": ("prompt", _keys("prompt"), None),
    "session/request_permission": ("permission", _keys("toolCall", "subject"), None),
    "session/cancel": ("cancel", _keys(), None),
    "session/update": ("update", _keys("update"), None),
    "providers/list": ("providers", _keys(), None),
    "providers/set": ("providers", _keys("providerId", "id"), None),
    "providers/disable": ("providers", _keys("providerId", "id"), None),
    "fs/read_text_file": (
        "fs",
        _keys("path", "line", "limit"),
        lambda r: f"{len(str(_d(r).get('content', '')))} chars",
    ),
    "fs/write_text_file": ("fs", _keys("path"), lambda r: "written"),
    "terminal/create": ("terminal", _keys("command", "args", "cwd"), _keys("terminalId")),
    "terminal/output": ("terminal", _keys("terminalId"), None),
    "terminal/wait_for_exit": ("terminal", _keys("terminalId"), None),
    "terminal/kill": ("terminal", _keys("terminalId"), lambda r: "killed"),
    "terminal/release": ("terminal", _keys("terminalId"), lambda r: "released"),
    "terminal/cancel": ("terminal", _keys("terminalId"), lambda r: "ok"),
    "tool_call/cancel": ("tool", _keys("toolCallId"), lambda r: "ok"),
    "elicitation/create": ("elicit", _keys("message", "mode"), _keys("action")),
    "elicitation/complete": ("elicit", _keys("elicitationId"), None),
    "mcp/message": ("mcp", _inner, None),
    "$/cancel_request": ("cancel req", _keys("requestId"), None),
}


def call_label(method: str, direction: str) -> str:
    found = METHOD_LABELS.get(method)
    return found[0] if found is not None else ("→ agent" if direction == "c2a" else "→ client")


def call_text(e: fd.Call) -> str:
    """A request and its answer on one line: ``method params → result``."""
    found = METHOD_LABELS.get(e.method)
    params = found[1] if found is not None else None
    result = found[2] if found is not None else None
    head = f"{e.method} {params(e.params) if params is not None else _json(e.params, 160)}".rstrip()
    if e.error is not None:
        err = _d(e.error)
        outcome = f"error {err.get('code')} {err.get('message') or ''}".rstrip() if err else f"error {_json(e.error)}"
    elif e.answered:
        outcome = result(e.result) if result is not None else _json(e.result, 160)
    else:
        outcome = "unanswered"
    if e.cancel_requested_seq is not None:
        outcome += f" (cancel requested at frame {e.cancel_requested_seq})"
    return f"{head} → {outcome}"


def notification_text(e: fd.Notification) -> str:
    if e.method == "$/cancel_request":
        named = f"request id {_json(e.cancels_id, 60)}"
        if e.cancels_seq is None:
            return f"$/cancel_request {named} → names no pending request"
        return f"$/cancel_request {named} → cancels {e.cancels_method} (frame {e.cancels_seq})"
    found = METHOD_LABELS.get(e.method)
    params = found[1] if found is not None else None
    sent = "sent by the client" if e.dir == "c2a" else "sent by the agent"
    body = params(e.params) if params is not None else _json(e.params, 160)
    return f"{e.method} ({sent}) {body}".rstrip()


# -- session state reports --------------------------------------------------------------------


def _usage(f: Mapping[str, Any]) -> tuple[str, str]:
    cost = _d(f.get("cost"))
    money = f", cost {cost.get('amount')} {cost.get('currency', '')}".rstrip() if cost.get("amount") is not None else ""
    return "usage", f"{f.get('used')} of {f.get('size')} tokens{money}"


def _state(f: Mapping[str, Any]) -> tuple[str, str]:
    stop = f" ({f['stopReason']})" if f.get("stopReason") else ""
    return "state", f"{f.get('state')}{stop}"


def _info_update(f: Mapping[str, Any]) -> tuple[str, str]:
    bits = []
    if "title" in f:
        bits.append(f"title “{f['title']}”" if f["title"] is not None else "title cleared")
    if f.get("updatedAt"):
        bits.append(f"updated {f['updatedAt']}")
    return "info", " · ".join(bits) or _json(dict(f), 160)


def _mode(f: Mapping[str, Any]) -> tuple[str, str]:
    return "mode", f"→ {f.get('currentModeId')}"


def _config(f: Mapping[str, Any]) -> tuple[str, str]:
    options = [o for o in f.get("configOptions") or [] if isinstance(o, dict)]
    shown = ", ".join(f"{o.get('id')}={_json(o.get('currentValue'), 40)}" for o in options)
    return "config", shown or "no options"


def _commands(f: Mapping[str, Any]) -> tuple[str, str]:
    names = [f"/{c.get('name')}" for c in f.get("availableCommands") or [] if isinstance(c, dict)]
    return "commands", (", ".join(names) + f" ({len(names)})") if names else "none"


def _replay_complete(f: Mapping[str, Any]) -> tuple[str, str]:
    return "replay", "complete: the history replay ends here"


def _cursor(f: Mapping[str, Any]) -> tuple[str, str]:
    anchor = f" at {_json(f['anchor'], 80)}" if f.get("anchor") is not None else ""
    return "cursor", f"{f.get('cursorId')}{anchor}"


def _suggestions(f: Mapping[str, Any]) -> tuple[str, str]:
    said = []
    for item in f.get("suggestions") or []:
        blocks = _d(item).get("prompt") or []
        said.append(" ".join(str(_d(b).get("text", "…")) for b in blocks if isinstance(b, dict)))
    return "suggest", " | ".join(said) or "none"


STATE_RENDERERS: dict[str, Callable[[Mapping[str, Any]], tuple[str, str]]] = {
    "usage_update": _usage,
    "state_update": _state,
    "session_info_update": _info_update,
    "current_mode_update": _mode,
    "config_option_update": _config,
    "available_commands_update": _commands,
    "replay_complete": _replay_complete,
    "cursor_update": _cursor,
    "prompt_suggestions_update": _suggestions,
}


def _footer(con: Console, conv: fd.Conversation) -> None:
    if conv.usage is not None:
        _line(
            con,
            "usage",
            _usage({"used": conv.usage.used, "size": conv.usage.size, "cost": conv.usage.cost})[1],
            style="dim",
        )
    if conv.state:
        _line(con, "state", f"{conv.state}" + (f" ({conv.stop_reason})" if conv.stop_reason else ""), style="dim")
    if conv.current_mode_id:
        _line(con, "mode", conv.current_mode_id, style="dim")
    if conv.unanswered:
        asked = ", ".join(f"{method} (frame {seq})" for seq, method in conv.unanswered)
        _line(con, "unanswered", asked, style="yellow")
    if conv.unforwarded:
        _line(con, "withheld", f"{len(conv.unforwarded)} frame(s) not forwarded by the proxy", style="yellow")
