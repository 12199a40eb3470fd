"""Editors' agent settings: the entry that starts an agent through acp-proxy, and its insertion
into a settings file that may hold comments.

Owns: where each editor keeps its agent entries and their shape — Zed (``settings.json``,
``agent_servers``, JSON with comments and trailing commas; custom agents carry
``"type": "custom"``), JetBrains IDEs (``~/.jetbrains/acp.json``, ``agent_servers``) and Neovim's
CodeCompanion (Lua: an adapter extended with the command) — and ``insert_entry``, a text edit of
JSON-with-comments that leaves every byte outside the one entry it adds or replaces as it was.

Must not know: click, how acp-proxy runs. Only ``settings_path`` reads the environment; the rest
is pure (text in, text out).

Why absolute paths: editors started from a desktop launcher do not get the user's shell
``PATH``, so an entry whose command is a bare ``acp-proxy`` (or a bare agent name) fails to
start there while it works from a terminal.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from acp_proxy.errors import UsageError

EDITORS = ("zed", "jetbrains", "neovim")
JSON_EDITORS = ("zed", "jetbrains")
SECTION = "agent_servers"


class SettingsError(UsageError):
    """A settings file this module will not edit; the message is one line for a person."""


def settings_path(editor: str, home: Path | None = None) -> Path:
    """The file an editor reads its agent entries from."""
    home = home if home is not None else Path(os.path.expanduser("~"))
    if editor == "zed":
        config = os.environ.get("XDG_CONFIG_HOME") or str(home / ".config")
        return Path(config) / "zed" / "settings.json"
    if editor == "jetbrains":
        return home / ".jetbrains" / "acp.json"
    raise SettingsError(f"{editor} keeps its agents in Lua code, not in a settings file")


def entry(editor: str, command: list[str]) -> dict[str, Any]:
    """The JSON entry of ``agent_servers`` that starts ``command`` (absolute paths)."""
    body: dict[str, Any] = {"command": command[0], "args": command[1:], "env": {}}
    return {"type": "custom", **body} if editor == "zed" else body


def lua_snippet(name: str, command: list[str]) -> str:
    """CodeCompanion's adapter for ``command``, to paste into ``require("codecompanion").setup``."""
    words = ", ".join(_lua_string(word) for word in command)
    key = _lua_string(name)
    return "\n".join(
        [
            '-- in require("codecompanion").setup({ ... }):',
            "adapters = {",
            "  acp = {",
            f"    [{key}] = function()",
            "      -- any ACP adapter will do as a base: only its command is replaced",
            '      return require("codecompanion.adapters").extend("opencode", {',
            f"        name = {key},",
            f"        formatted_name = {key},",
            f"        commands = {{ default = {{ {words} }} }},",
            "      })",
            "    end,",
            "  },",
            "},",
            f"strategies = {{ chat = {{ adapter = {key} }} }},",
        ]
    )


def _lua_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def snippet(name: str, value: dict[str, Any], indent: str = "  ") -> str:
    """``"agent_servers": {"NAME": {...}}`` as a person pastes it into a settings file."""
    inner = _dump(value, indent, 2)
    return f"{{\n{indent}{json.dumps(SECTION)}: {{\n{indent * 2}{json.dumps(name)}: {inner}\n{indent}}}\n}}"


def _dump(value: Any, indent: str, level: int) -> str:
    """``value`` as JSON, objects one member a line indented by ``indent`` as if the value
    started at ``level``; arrays of scalars (an entry's ``args``) on one line."""
    here, deeper = indent * level, indent * (level + 1)
    if isinstance(value, dict) and value:
        members = [
            f"{deeper}{json.dumps(k, ensure_ascii=False)}: {_dump(v, indent, level + 1)}" for k, v in value.items()
        ]
        return "{\n" + ",\n".join(members) + "\n" + here + "}"
    if isinstance(value, list) and any(isinstance(v, dict | list) for v in value):
        return "[\n" + ",\n".join(deeper + _dump(v, indent, level + 1) for v in value) + "\n" + here + "]"
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


# -- JSON with comments, as text ------------------------------------------------------------------

_TOKEN = re.compile(
    r'"(?:[^"\\]|\\.)*"'  # a string
    r"|//[^\n]*"  # a line comment
    r"|/\*.*?\*/"  # a block comment
    r"|[{}\[\]:,]"  # punctuation
    r"|[^\s{}\[\]:,\"/]+"  # a number, true, false, null
    r"|\s+",
    re.DOTALL,
)


@dataclass
class _Tok:
    text: str
    start: int
    end: int


def _tokens(text: str) -> list[_Tok]:
    """The tokens of a JSON-with-comments text, comments and blanks left out."""
    out: list[_Tok] = []
    at = 0
    while at < len(text):
        match = _TOKEN.match(text, at)
        if match is None:
            line = text.count("\n", 0, at) + 1
            raise SettingsError(f"line {line} is not JSON (an unclosed string or comment?)")
        word = match.group()
        if not (word.isspace() or word.startswith("//") or word.startswith("/*")):
            out.append(_Tok(word, match.start(), match.end()))
        at = match.end()
    return out


@dataclass
class _Object:
    open: int  # offset of "{"
    close: int  # offset of "}"
    members: list[tuple[str, int, int, int]]  # key, key start, value start, value end


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.toks = _tokens(text)
        self.at = 0

    def fail(self, what: str) -> SettingsError:
        offset = self.toks[self.at].start if self.at < len(self.toks) else len(self.text)
        return SettingsError(f"line {self.text.count(chr(10), 0, offset) + 1}: {what}")

    def peek(self) -> _Tok | None:
        return self.toks[self.at] if self.at < len(self.toks) else None

    def take(self, expected: str | None = None) -> _Tok:
        tok = self.peek()
        if tok is None or (expected is not None and tok.text != expected):
            raise self.fail(f"expected {expected or 'a value'}")
        self.at += 1
        return tok

    def value(self) -> tuple[int, int, _Object | None]:
        """(start, end, the object when the value is one)."""
        tok = self.peek()
        if tok is None:
            raise self.fail("expected a value")
        if tok.text == "{":
            found = self.object()
            return found.open, found.close + 1, found
        if tok.text == "[":
            start = self.take().start
            while (nxt := self.peek()) is not None and nxt.text != "]":
                self.value()
                if (sep := self.peek()) is not None and sep.text == ",":
                    self.take()
            return start, self.take("]").end, None
        if tok.text in "}]:,":
            raise self.fail(f"unexpected {tok.text!r}")
        self.take()
        return tok.start, tok.end, None

    def object(self) -> _Object:
        opening = self.take("{")
        members: list[tuple[str, int, int, int]] = []
        while (tok := self.peek()) is not None and tok.text != "}":
            if not tok.text.startswith('"'):
                raise self.fail("expected a quoted key")
            self.take()
            self.take(":")
            start, end, _ = self.value()
            members.append((json.loads(tok.text), tok.start, start, end))
            if (sep := self.peek()) is not None and sep.text == ",":
                self.take()
            elif sep is not None and sep.text != "}":
                raise self.fail("expected , or }")
        closing = self.take("}")
        return _Object(opening.start, closing.start, members)


def _indent_of(text: str) -> str:
    """The file's indentation unit (two spaces when it shows none)."""
    match = re.search(r"\n([ \t]+)\S", text)
    if match is None:
        return "  "
    unit = match.group(1)
    return "\t" if unit.startswith("\t") else " " * min(len(unit), 8)


def _line_indent(text: str, offset: int) -> str:
    start = text.rfind("\n", 0, offset) + 1
    return re.match(r"[ \t]*", text[start:]).group()  # type: ignore[union-attr]


def insert_entry(text: str, name: str, value: dict[str, Any]) -> str:
    """``text`` (a settings file's JSON with comments) with ``agent_servers[name]`` set to
    ``value``: replaced when present, else added first in ``agent_servers`` (created first in
    the top object when absent). Everything else — comments, order, blank lines, trailing
    commas — is left as it was."""
    if not text.strip():
        return snippet(name, value, "  ") + "\n"
    parser = _Parser(text)
    top = parser.value()[2]
    if top is None:
        raise SettingsError("the file's top level is not a JSON object")
    if parser.peek() is not None:
        raise parser.fail("text after the end of the settings object")
    unit = _indent_of(text)
    section = next((m for m in top.members if m[0] == SECTION), None)
    if section is None:
        inner = _line_indent(text, top.open) + unit
        block = _block(unit, inner, name, value)
        tail = "," if top.members else "\n" + _line_indent(text, top.open)
        return text[: top.open + 1] + "\n" + inner + block + tail + text[top.open + 1 :]
    sub = _Parser(text)
    sub.at = next(i for i, tok in enumerate(sub.toks) if tok.start == section[2])
    _, _, servers = sub.value()
    if servers is None:
        raise SettingsError(f"`{SECTION}` is not an object")
    existing = next((m for m in servers.members if m[0] == name), None)
    inner = _line_indent(text, section[1]) + unit
    rendered = _dump(value, unit, 0).replace("\n", "\n" + inner)
    if existing is not None:
        return text[: existing[2]] + rendered + text[existing[3] :]
    tail = "," if servers.members else "\n" + _line_indent(text, section[1])
    member = f"{json.dumps(name)}: {rendered}"
    return text[: servers.open + 1] + "\n" + inner + member + tail + text[servers.open + 1 :]


def _block(unit: str, inner: str, name: str, value: dict[str, Any]) -> str:
    """``"agent_servers": {"NAME": VALUE}`` starting at indentation ``inner``."""
    deeper = inner + unit
    rendered = _dump(value, unit, 0).replace("\n", "\n" + deeper)
    return f"{json.dumps(SECTION)}: {{\n{deeper}{json.dumps(name)}: {rendered}\n{inner}}}"


def read_entries(text: str) -> dict[str, Any]:
    """The ``agent_servers`` entries of a settings file (JSON with comments), for ``doctor``."""
    if not text.strip():
        return {}
    parser = _Parser(text)
    top = parser.value()[2]
    section = next((m for m in top.members if m[0] == SECTION), None) if top else None
    if section is None:
        return {}
    try:
        found = json.loads(_strict(text[section[2] : section[3]]))
    except ValueError as exc:
        raise SettingsError(f"`{SECTION}` cannot be read: {exc}") from None
    return found if isinstance(found, dict) else {}


def _strict(text: str) -> str:
    """JSON with comments and trailing commas as strict JSON (strings untouched)."""
    kept: list[str] = []
    for match in _TOKEN.finditer(text):
        word = match.group()
        if word.startswith("//") or word.startswith("/*"):
            continue
        if word in ("}", "]"):
            while kept and kept[-1].isspace():
                kept.pop()
            if kept and kept[-1] == ",":
                kept.pop()
        kept.append(word)
    return "".join(kept)
