"""One frame in a few words: what a person wants to read on a frame's one line.

Owns: turning one recorded frame (a row of ``frames`` as a dict: ``kind``, ``method``,
``update_kind``, ``raw``, ...) into short plain text — the chunk's text, the tool's title and
status, the error's message, the stop reason, the prompt, the permission's options and its
answer — with every control character made visible, so that recorded bytes can never drive the
terminal they are shown on.

Must not know: SQL, terminals, widths or colours (``views`` cuts and paints the text). Pure and
total: any row, any bytes in it, gives a string; nothing here raises.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from acp_proxy.protocol import wire

__all__ = ["DECODE_LIMIT", "printable", "summarize"]

DECODE_LIMIT = 256 * 1024
"""Frames longer than this are summarised from their first bytes, not decoded whole."""

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_PICTURES = {"\n": "⏎", "\t": " ", "\r": "␍", "\x1b": "␛"}


def _picture(match: re.Match[str]) -> str:
    char = match.group(0)
    if char in _PICTURES:
        return _PICTURES[char]
    code = ord(char)
    return chr(0x2400 + code) if code < 0x20 else "�"  # U+2400..: the control pictures


_CONTROL_BUT_NEWLINES = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def printable(text: str, *, keep_newlines: bool = False) -> str:
    """``text`` on one line (or its lines, ``keep_newlines``), with control characters (ESC,
    newlines, bidi overrides) shown as symbols instead of acted upon."""
    if text.isascii() and text.isprintable():  # the common case, without a regex
        return text
    return (_CONTROL_BUT_NEWLINES if keep_newlines else _CONTROL).sub(_picture, text)


def summarize(row: Mapping[str, Any]) -> str:
    """The short text for one frame row; never raises."""
    try:
        return printable(_summary(row))
    except Exception:  # a summary is a courtesy: the frame itself is always shown elsewhere
        return printable(_raw_text(row)[:200])


def _raw_text(row: Mapping[str, Any]) -> str:
    raw = row.get("raw")
    if isinstance(raw, str):
        return raw
    data = row.get("raw_bytes")
    if isinstance(data, bytes | bytearray):
        return bytes(data).decode("utf-8", "backslashreplace")
    return ""


def _summary(row: Mapping[str, Any]) -> str:
    kind = row.get("kind")
    if kind == "stderr" or row.get("dir") == "stderr":
        return _raw_text(row)
    if kind == "invalid":
        reason = row.get("decode_error") or "not JSON"
        text = _raw_text(row)
        return f"{reason}: {text}" if text else str(reason)
    if kind == "batch":
        return _batch(row)
    if kind == "error":
        code, message = row.get("error_code"), row.get("error_message")
        return " ".join(str(part) for part in (code, message) if part is not None) or "error"
    message = _message(row)
    if message is None:
        return _raw_text(row)
    if kind == "response":
        return _result(row.get("method"), message.get("result"))
    params = message.get("params")
    if row.get("method") == "session/update" and isinstance(params, dict):
        return _update(params.get("update"))
    return _params(row.get("method"), params)


def _message(row: Mapping[str, Any]) -> dict[str, Any] | None:
    raw = row.get("raw")
    if not isinstance(raw, str) or len(raw) > DECODE_LIMIT:
        return None
    try:
        value = wire.decode_value(raw)
    except (msgspec.DecodeError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _batch(row: Mapping[str, Any]) -> str:
    raw = row.get("raw")
    if isinstance(raw, str) and len(raw) <= DECODE_LIMIT:
        try:
            value = wire.decode_value(raw)
        except (msgspec.DecodeError, ValueError):
            value = None
        if isinstance(value, list):
            return f"batch of {len(value)}"
    return "batch"


# -- pieces ----------------------------------------------------------------------------------


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _compact(value: Any, limit: int = 300) -> str:
    try:
        text = msgspec.json.encode(value).decode("utf-8", "backslashreplace")
    except (TypeError, ValueError, OverflowError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _content(block: Any) -> str:
    """A content block (text, image, audio, resource, resource_link) as text."""
    if isinstance(block, list):
        return " ".join(_content(b) for b in block)
    if not isinstance(block, dict):
        return _compact(block) if block is not None else ""
    kind = block.get("type")
    if kind == "text":
        return _str(block.get("text")) or ""
    if kind in ("image", "audio"):
        return f"[{kind} {_str(block.get('mimeType')) or ''}]".replace(" ]", "]")
    if kind == "resource_link":
        return f"[link {_str(block.get('name')) or _str(block.get('uri')) or ''}]"
    if kind == "resource":
        resource = block.get("resource")
        uri = _str(resource.get("uri")) if isinstance(resource, dict) else None
        return f"[resource {uri or ''}]"
    if kind == "content":  # tool call content wrapping a content block
        return _content(block.get("content"))
    if kind == "diff":
        return f"[diff {_str(block.get('path')) or ''}]"
    if kind == "terminal":
        return f"[terminal {_str(block.get('terminalId')) or ''}]"
    return _compact(block)


def _join(*parts: str | None) -> str:
    return " ".join(p for p in parts if p)


def _tool(update: dict[str, Any]) -> str:
    item = _str(update.get("toolCallId"))
    title = _str(update.get("title"))
    kind = _str(update.get("kind"))
    status = _str(update.get("status"))
    head = f"tool {item}:" if item else "tool:"
    body = _join(title, f"[{kind}]" if kind else None, status)
    content = update.get("content")
    if not body and content:
        body = _content(content)
    return _join(head, body)


def _plan(update: dict[str, Any]) -> str:
    entries = update.get("entries")
    if not isinstance(entries, list):
        return "plan"
    done = sum(1 for e in entries if isinstance(e, dict) and e.get("status") == "completed")
    current = next(
        (e for e in entries if isinstance(e, dict) and e.get("status") in ("in_progress", "pending")),
        None,
    )
    now = _str(current.get("content")) if isinstance(current, dict) else None
    return _join(f"plan: {done}/{len(entries)} done", f"· next: {now}" if now else None)


_LABELS = {
    "agent_message_chunk": "agent",
    "agent_message": "agent",
    "user_message_chunk": "user",
    "user_message": "user",
    "agent_thought_chunk": "thought",
    "agent_thought": "thought",
    "session_message_chunk": "message",
    "session_message": "message",
    "compaction_summary_chunk": "compaction",
}


def _update(update: Any) -> str:
    if not isinstance(update, dict):
        return _compact(update)
    variant = _str(update.get("sessionUpdate")) or "?"
    if variant in _LABELS:
        return f"{_LABELS[variant]}: {_content(update.get('content'))}"
    if variant in ("tool_call", "tool_call_update"):
        return _tool(update)
    if variant == "tool_call_content_chunk":
        return f"tool {_str(update.get('toolCallId')) or ''}: {_content(update.get('content'))}"
    if variant in ("plan", "plan_update"):
        return _plan(update)
    if variant == "state_update":
        state = _str(update.get("state")) or "?"
        stop = _str(update.get("stopReason"))
        return f"state: {state}" + (f" ({stop})" if stop else "")
    if variant == "current_mode_update":
        return f"mode: {_str(update.get('currentModeId')) or _str(update.get('modeId')) or '?'}"
    if variant == "available_commands_update":
        commands = update.get("availableCommands")
        names = [f"/{c.get('name')}" for c in commands if isinstance(c, dict)] if isinstance(commands, list) else []
        return "commands: " + (" ".join(names) or "none")
    if variant == "session_info_update":
        title = _str(update.get("title"))
        return f"title: {title}" if title else "session info: " + _compact(_without(update, "sessionUpdate"))
    if variant == "notice":
        return _join("notice:", _str(update.get("severity")), _str(update.get("title")) or _str(update.get("message")))
    if variant == "usage_update":
        return "usage: " + _compact(_without(update, "sessionUpdate"))
    return f"{variant}: " + _compact(_without(update, "sessionUpdate"))


def _without(value: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {k: v for k, v in value.items() if k not in keys and k != "_meta"}


def _info(params: dict[str, Any], *keys: str) -> str | None:
    for key in keys:
        info = params.get(key)
        if isinstance(info, dict):
            name, version = _str(info.get("name")), _str(info.get("version"))
            if name:
                return _join(name, version)
    return None


def _initialize(params: dict[str, Any], side: str) -> str:
    version = params.get("protocolVersion")
    return _join(
        f"protocol {version}" if version is not None else None,
        f"· {_info(params, f'{side}Info', 'info')}" if _info(params, f"{side}Info", "info") else None,
    )


def _permission(params: dict[str, Any]) -> str:
    call = params.get("toolCall")
    title = _str(call.get("title")) if isinstance(call, dict) else None
    options = params.get("options")
    ids = [str(o.get("optionId")) for o in options if isinstance(o, dict)] if isinstance(options, list) else []
    return _join("permission:", title, f"[{', '.join(ids)}]" if ids else None)


def _strings(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _prompt(params: dict[str, Any]) -> str:
    return "prompt: " + _content(params.get("prompt"))


_PARAMS: dict[str, Callable[[dict[str, Any]], str]] = {
    "initialize": lambda p: _initialize(p, "client"),
    "authenticate": lambda p: f"method {_str(p.get('methodId')) or '?'}",
    "session/new": lambda p: f"cwd {_str(p.get('cwd')) or '?'}",
    "session/load": lambda p: _join("load", _str(p.get("sessionId")), f"cwd {_str(p.get('cwd'))}"),
    "session/resume": lambda p: _join(
        "resume", _str(p.get("sessionId")), "with history" if p.get("replayFrom") is not None else None
    ),
    "session/prompt": _prompt,
    "session/cancel": lambda p: "cancel",
    "session/set_mode": lambda p: f"mode {_str(p.get('modeId')) or '?'}",
    "session/request_permission": _permission,
    "fs/read_text_file": lambda p: _join(_str(p.get("path")), f"line {p['line']}" if "line" in p else None),
    "fs/write_text_file": lambda p: _join(_str(p.get("path")), f"({len(_str(p.get('content')) or '')} chars)"),
    "terminal/create": lambda p: _join(_str(p.get("command")), *_strings(p.get("args"))),
    "$/cancel_request": lambda p: f"cancel request {_compact(p.get('requestId'))}",
}


def _params(method: Any, params: Any) -> str:
    if not isinstance(params, dict):
        return "" if params is None else _compact(params)
    handler = _PARAMS.get(method) if isinstance(method, str) else None
    if handler is not None:
        return handler(params)
    rest = _without(params, "sessionId")
    return _compact(rest) if rest else ""


def _result(method: Any, result: Any) -> str:
    if not isinstance(result, dict):
        return "ok" if result is None else _compact(result)
    if method == "initialize":
        text = _initialize(result, "agent")
        caps = result.get("agentCapabilities") or result.get("capabilities")
        if isinstance(caps, dict) and caps.get("loadSession"):
            text += " · loadSession"
        return text or "ok"
    if method in ("session/new", "session/fork") and _str(result.get("sessionId")):
        return f"session {result['sessionId']}"
    if method == "session/prompt":
        stop = _str(result.get("stopReason"))
        if stop:
            return f"stop: {stop}"
        if _str(result.get("messageId")):
            return f"accepted as {result['messageId']}"
    if method == "session/request_permission":
        outcome = result.get("outcome")
        if isinstance(outcome, dict):
            return "→ " + (_str(outcome.get("optionId")) or _str(outcome.get("outcome")) or "?")
    if method == "fs/read_text_file" and isinstance(result.get("content"), str):
        content = result["content"]
        return f"{content.count(chr(10)) + 1} lines: {content}"
    if method == "terminal/create" and _str(result.get("terminalId")):
        return f"terminal {result['terminalId']}"
    rest = _without(result)
    return _compact(rest) if rest else "ok"
