"""Importers: ACP logs written by other tools (and by acp-proxy itself) turned into runs.

Owns: one pure parser per format — lines of a log in, ``Record``s out (direction, timestamp or
None, the frame's line bytes) — the format sniffing of ``--format auto``, reading a file as
bounded lines, and ``write_run``, the one function that turns records into a run. ``write_run``
feeds the records to the recorder (``session.Session``), the same code path a live run's bytes
take, so sessions, turns, pairing, latencies and unanswered requests come out exactly as if the
conversation had been recorded through the proxy.

Must not know: SQL, click, rendering. Parsers do no I/O; ``read_lines`` and ``write_run`` are the
shell.

What each parser is based on:

- ``jsonl`` — acp-proxy's own export (``exports.py``): a header line (``acp_proxy_export``, the
  recorded ``runs`` rows), then one object per frame with every column; ``raw`` is the line
  verbatim (``raw_base64`` when it is not UTF-8). The output of ``acp-proxy frames --jsonl`` (the
  same frame objects, no header) reads too. Batch element rows are skipped: the recorder rebuilds
  them from their batch line. Nothing is unknown: timing, stderr, bytes, forwarding and fault
  marks all come back; frames of several runs become several runs.
- ``jsons`` — the trace format of the ACP conductor (``sacp-conductor --trace``, read by
  ``sacp-trace-viewer``), from its event types in symposium-acp (``trace.rs``: ``request``,
  ``response``, ``notification`` and ``trace`` events, each with ``ts`` in seconds since the trace
  started, ``from``/``to`` naming ``client``, ``proxy:N`` or ``agent`` — or, in conductors since
  January 2026, ``Client``, ``Proxy(N)`` and ``Agent``, its components' debug names; MCP-over-ACP
  events carry ``"protocol":"mcp"`` and are imported as the messages they are) and from acp-proxy's own
  ``--format jsons`` export. Only the client's hop is imported (messages from or to ``client``;
  without any, the agent's hop). Frames are rebuilt from ``method``/``params``/``id``/``payload``:
  the exact bytes are unknown, and so is the absolute time (the run starts at 0, the Unix epoch;
  relative times are kept to the nanosecond). ``trace`` events of the agent become stderr lines;
  the export's "not JSON-RPC" warnings become the invalid lines they stood for.
- ``conductor-log`` — the debug log of the ACP conductor (``sacp-conductor --debug DIR``: a
  file per run, ``YYYYMMDD-HHMMSS.log``), from its writer in symposium-acp (``debug_logger.rs``):
  a header (``=== Conductor Debug Log ===``, ``Started: RFC 3339 time``, ``Components:`` and one
  ``  N: COMMAND`` a component, a line of ``=``), then ``LABEL ARROW LINE`` lines: ``C`` is the
  conductor's own stdio (the editor's hop: ``→`` what the editor sent, ``←`` what it received,
  ``!`` the conductor's tracing), ``N`` component N (``→`` its stdin, ``←`` its stdout, ``!``
  its stderr, ANSI escapes stripped). The editor's hop is imported (without ``C`` lines, the
  last component's: the agent's), with the agent's stderr; the lines are the exact bytes. Unknown:
  the time of each line (the log has only its start: every frame gets that time), the other
  hops, the conductor's tracing (skipped, counted).
- ``inspector`` — the ACP Inspector's trace JSONL (venikman/ACP-inspector,
  ``docs/trace-format.md``): ``ts`` (Unix milliseconds, or an ISO-8601 string), ``direction``
  (``fromClient`` / ``fromAgent``, any case) and ``json`` (the frame as a string, kept as its
  bytes). Unknown: stderr, time below the millisecond, a line's ``\\r``.
- ``jetbrains`` — JetBrains IDEs' ``acp-transport.log`` (AI Assistant / Junie; Rider keeps it
  under ``log/acp/``), lines in the IDE log's layout, ``2025-12-17 11:26:25,895 [  12469]   FINE -
  AcpTransport - OUT: {...}``: ``OUT`` is what the IDE (the client) sent, ``IN`` what it received
  from the agent, as described by projects that replay these logs (e.g. acp-replay's README).
  Other lines are skipped and counted. Unknown: stderr, time below the millisecond, the time zone
  (the log writes local time without one: it is read as this machine's), and whether the log
  shortened long frames.

Rule 1: total. Any bytes in a log give records or one ``ImportFormatError`` naming the line,
never another exception. A line longer than ``MAX_LINE_BYTES`` stops the import with that line
before the rest of it is read (a 2 GB line costs a read of ``MAX_LINE_BYTES``).
Rule 2: what a format cannot say is never invented: ``unknown`` lists it, and it goes on the run
row (``source_unknown``).
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import itertools
import os
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, ClassVar, NamedTuple

import msgspec

from acp_proxy.errors import UsageError
from acp_proxy.limits import EXPORT_FORMAT
from acp_proxy.protocol import wire

__all__ = [
    "FORMATS",
    "MAX_LINE_BYTES",
    "ImportFormatError",
    "Parser",
    "Record",
    "Torn",
    "detect",
    "import_file",
    "parser_for",
    "read_lines",
    "write_run",
]

FORMATS = ("jsonl", "jsons", "conductor-log", "inspector", "jetbrains")
MAX_LINE_BYTES = 64 * 1024 * 1024
"""The longest line an importer reads (a frame of the log); longer ones stop the import."""
SNIFF_LINES = 200
"""How many lines ``detect`` looks at before it gives up."""

_MAX_TS_NS = 2**63 - 1
_encode = msgspec.json.encode


class ImportFormatError(UsageError):
    """A log that cannot be imported; the message is one line for a person."""


DESCRIPTIONS = {
    "jsonl": "an acp-proxy export",
    "jsons": "an ACP conductor trace",
    "conductor-log": "an ACP conductor debug log",
    "inspector": "an ACP Inspector trace",
    "jetbrains": "a JetBrains acp-transport.log",
}
"""Each format in words, for messages (``is this an ACP Inspector trace?``)."""


def _shown(value: Any) -> str:
    """A value of a log as JSON text, clipped: what a message quotes (never Python's ``None``)."""
    text = _encode(value).decode("utf-8", "replace") if _is_json(value) else type(value).__name__
    return text if len(text) <= 40 else text[:39] + "…"


def _is_json(value: Any) -> bool:
    try:
        _encode(value)
    except (TypeError, msgspec.EncodeError, OverflowError):
        return False
    return True


class Record(NamedTuple):
    """One line of a conversation, as the log gives it."""

    direction: str
    """``c2a`` (client -> agent), ``a2c`` or ``stderr``."""
    ts_ns: int | None
    """Wall-clock nanoseconds since the Unix epoch; None when the log has no time for it."""
    line: bytes
    """The frame's bytes, without its newline."""
    meta: dict[str, Any] | None = None
    """What else the log knows of the frame, in the recorder's link terms: ``size``,
    ``terminated``, ``cut``, ``forwarded``, ``note``, ``fault``, ``origin``."""
    run_key: Any = None
    """Which recorded run of the log it belongs to (only acp-proxy's own exports hold several)."""


class Parser:
    """A log format's parser: ``feed`` each line (without its newline) in order, then ``finish``.

    ``runs`` maps a ``run_key`` to what the log says about that run (``runs`` row columns: argv,
    cwd, started_ns, exit_code, ...); ``skipped`` counts lines that are not frames.
    """

    format: ClassVar[str] = ""
    unknown: ClassVar[tuple[str, ...]] = ()
    """What this format cannot say (goes on the run row)."""

    def __init__(self) -> None:
        self.runs: dict[Any, dict[str, Any]] = {}
        self.skipped = 0
        self.frames = 0
        self.untimed: dict[Any, int] = {}
        """Per run, how many frames the log gives no time for."""

    def feed(self, lineno: int, line: bytes) -> list[Record]:
        raise NotImplementedError

    def finish(self) -> list[Record]:
        return []

    def withdraw_cut(self, lineno: int) -> bool:
        """Drop line ``lineno``, held for ``finish``, when it is a frame cut short; whether it
        was (for parsers that give their records only at the end)."""
        return False

    def unknown_for(self, run_key: Any) -> list[str]:
        untimed = self.untimed.get(run_key)
        return [*self.unknown, *([f"the time of {untimed} frame(s) (given the time before them)"] if untimed else [])]

    def _timed(self, record: Record) -> list[Record]:
        self.frames += 1
        if record.ts_ns is None:
            self.untimed[record.run_key] = self.untimed.get(record.run_key, 0) + 1
        return [record]


def _error(lineno: int, what: str) -> ImportFormatError:
    return ImportFormatError(f"line {lineno}: {what}")


def _object(lineno: int, line: bytes, fmt: str) -> dict[str, Any] | None:
    """The JSON object on a line; None for a blank line."""
    if not line.strip():
        return None
    try:
        value = wire.decode_value(line)
    except msgspec.DecodeError as exc:
        raise _error(lineno, f"not JSON ({exc}); is this {DESCRIPTIONS[fmt]}?") from None
    if not isinstance(value, dict):
        what = {list: "an array", str: "a string", bool: "true or false"}.get(type(value), "a number")
        what = "null" if value is None else what
        raise _error(lineno, f"{what}, not a JSON object; is this {DESCRIPTIONS[fmt]}?")
    return value


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _ts_ns(lineno: int, ns: float | int) -> int:
    """Nanoseconds as a run row holds them, or the line's error (a float is rounded)."""
    if ns != ns or not 0 <= ns <= _MAX_TS_NS:  # NaN, infinite, negative, or past the year 2262
        raise _error(lineno, "a time out of range (before 1970, after 2262, or not a number)")
    return round(ns) if isinstance(ns, float) else ns


# -- jsonl: acp-proxy's own export ----------------------------------------------------------------

_RUN_FACTS = (
    "argv",
    "cwd",
    "started_ns",
    "ended_ns",
    "status",
    "agent_pid",
    "exit_code",
    "exit_signal",
    "interactive",
    "options",
    "fault_spec",
    "seed",
)
_LINE_FACTS = ("forwarded", "note", "fault", "origin")


class JsonlParser(Parser):
    format = "jsonl"

    def feed(self, lineno: int, line: bytes) -> list[Record]:
        obj = _object(lineno, line, self.format)
        if obj is None:
            return []
        if "acp_proxy_export" in obj:
            self._header(lineno, obj)
            return []
        if obj.get("batch_seq") is not None:
            return []  # the recorder rebuilds batch elements from their batch line
        direction = obj.get("dir")
        if direction not in ("c2a", "a2c", "stderr"):
            raise _error(lineno, "a frame needs `dir` (c2a, a2c or stderr)")
        if isinstance(obj.get("raw"), str):
            data = obj["raw"].encode("utf-8", "surrogatepass")
        elif isinstance(obj.get("raw_base64"), str):
            try:
                data = base64.b64decode(obj["raw_base64"], validate=True)
            except (binascii.Error, ValueError):
                raise _error(lineno, "`raw_base64` is not base64") from None
        else:
            raise _error(lineno, "a frame needs `raw` (or `raw_base64`)")
        ts = _int(obj.get("ts_ns"))
        meta: dict[str, Any] = {name: obj[name] for name in _LINE_FACTS if obj.get(name) is not None}
        if not isinstance(meta.get("forwarded", 1), int) or any(
            not isinstance(meta[name], str) for name in ("note", "fault", "origin") if name in meta
        ):
            raise _error(lineno, "a frame's forwarded/note/fault/origin has the wrong type")
        size = _int(obj.get("size"))
        cut = bool(obj.get("cut"))
        meta["size"] = size if size is not None and (cut or size == len(data)) else len(data)
        meta["terminated"] = obj.get("terminated", 1) != 0
        meta["cut"] = cut
        return self._timed(Record(direction, None if ts is None else _ts_ns(lineno, ts), data, meta, obj.get("run_id")))

    def _header(self, lineno: int, obj: dict[str, Any]) -> None:
        made = obj.get("acp_proxy_export")
        if not isinstance(made, int) or isinstance(made, bool) or made < 1:
            raise _error(lineno, f"`acp_proxy_export` is the export format, a number, not {_shown(made)}")
        if made > EXPORT_FORMAT:  # its meaning may have changed: importing it as ours would guess
            raise _error(
                lineno,
                f"a newer acp-proxy wrote this export (format {made}; this one reads up to {EXPORT_FORMAT}): "
                "upgrade acp-proxy to import it",
            )
        runs = obj.get("runs")
        if not isinstance(runs, list):
            return
        for run in runs:
            if not isinstance(run, dict):
                continue
            facts = {name: run[name] for name in _RUN_FACTS if run.get(name) is not None}
            for name in ("argv", "options"):  # JSON text in the runs table
                if isinstance(facts.get(name), str):
                    try:
                        facts[name] = wire.decode_value(facts[name])
                    except msgspec.DecodeError:
                        facts.pop(name)
            if not (isinstance(facts.get("argv"), list) and all(isinstance(a, str) for a in facts["argv"])):
                facts.pop("argv", None)
            if not isinstance(facts.get("options"), dict):
                facts.pop("options", None)
            for name in ("started_ns", "ended_ns"):
                if name in facts:
                    value = _int(facts[name])
                    if value is None or not 0 <= value <= _MAX_TS_NS:
                        facts.pop(name)
            for name in ("agent_pid", "exit_code", "exit_signal", "interactive", "seed"):
                if name in facts and _int(facts[name]) is None:
                    facts.pop(name)
            for name in ("cwd", "status", "fault_spec"):
                if name in facts and not isinstance(facts[name], str):
                    facts.pop(name)
            if "seed" in facts and not -(2**63) <= facts["seed"] < 2**63:
                facts.pop("seed")
            self.runs[run.get("id")] = facts
        controls = obj.get("controls")
        for control in controls if isinstance(controls, list) else ():
            # Actions of acp-proxy ctl (read.controls.exported), kept with their run.
            if not isinstance(control, dict) or not isinstance(control.get("number"), int):
                continue
            owner = self.runs.get(control["run_id"]) if isinstance(control.get("run_id"), int) else None
            if owner is not None:
                row = {k: v for k, v in control.items() if k != "run_id" and isinstance(v, int | str)}
                owner.setdefault("controls", []).append(row)
        marks = obj.get("marks")
        for mark in marks if isinstance(marks, list) else ():
            # A person's marks and notes (read.marks.exported), kept with their run's frames.
            if not isinstance(mark, dict) or not isinstance(mark.get("seq"), int) or mark["seq"] < 1:
                continue
            owner = self.runs.get(mark["run_id"]) if isinstance(mark.get("run_id"), int) else None
            note = mark.get("note")
            marked_ns = mark.get("marked_ns")
            if owner is not None:
                owner.setdefault("marks", []).append(
                    {
                        "seq": mark["seq"],
                        "note": note if isinstance(note, str) else None,
                        "marked_ns": marked_ns if isinstance(marked_ns, int) and 0 <= marked_ns < 2**63 else None,
                    }
                )


# -- jsons: the ACP conductor's trace -------------------------------------------------------------

_NOT_JSON_RPC = "not JSON-RPC: "


class JsonsParser(Parser):
    format = "jsons"
    unknown = ("exact bytes (frames are rebuilt from the trace's events)", "absolute time (the trace starts at 0)")

    def __init__(self) -> None:
        super().__init__()
        self.stderr_lines = 0
        self._held: list[tuple[int, dict[str, Any]]] = []
        """Events seen before it is known which hop is the client's."""
        self._hop: str | None = None
        """``client`` or ``agent``: the end whose traffic is imported."""

    def unknown_for(self, run_key: Any) -> list[str]:
        return [*super().unknown_for(run_key), *([] if self.stderr_lines else ["stderr"])]

    def feed(self, lineno: int, line: bytes) -> list[Record]:
        obj = _object(lineno, line, self.format)
        if obj is None:
            return []
        kind = obj.get("type")
        if kind not in ("request", "response", "notification", "trace"):
            said = "has no `type`" if "type" not in obj else f"has `type` {_shown(kind)}"
            raise _error(lineno, f"an event {said}: one of request, response, notification or trace was expected")
        ts = obj.get("ts")
        if not isinstance(ts, (int, float)) or isinstance(ts, bool):
            raise _error(lineno, "an event needs a number `ts` (seconds since the trace started)")
        ts_ns = _ts_ns(lineno, ts * 1e9)
        if kind == "trace":
            return self._trace(lineno, obj, ts_ns)
        ends = (obj.get("from"), obj.get("to"))
        if not all(isinstance(end, str) for end in ends):
            raise _error(lineno, "a message event needs `from` and `to`")
        obj["from"], obj["to"] = ends = (_component(obj["from"]), _component(obj["to"]))
        if self._hop is None:
            if "client" in ends:
                self._hop = "client"
            else:
                self._held.append((lineno, obj))
                return []
        return self._message(lineno, obj, ts_ns)

    def finish(self) -> list[Record]:
        # No event involved the client: the trace is of the agent's hop alone.
        self._hop = self._hop or "agent"
        out: list[Record] = []
        for lineno, obj in self._held:
            out.extend(self._message(lineno, obj, _ts_ns(lineno, obj["ts"] * 1e9)))
        self._held = []
        return out

    def _message(self, lineno: int, obj: dict[str, Any], ts_ns: int) -> list[Record]:
        sender, receiver = obj["from"], obj["to"]
        hop = self._hop
        if hop not in (sender, receiver):
            self.skipped += 1  # another hop of a proxy chain
            return []
        if hop == "client":
            direction = "c2a" if sender == "client" else "a2c"
        else:
            direction = "c2a" if receiver == "agent" else "a2c"
        kind = obj["type"]
        message: dict[str, Any] = {"jsonrpc": "2.0"}
        if kind in ("request", "response"):
            if "id" not in obj:
                raise _error(lineno, f"a {kind} event needs `id`")
            message["id"] = obj["id"]
        if kind == "response":
            if not isinstance(obj.get("is_error"), bool) or "payload" not in obj:
                raise _error(lineno, "a response event needs `is_error` and `payload`")
            message["error" if obj["is_error"] else "result"] = obj["payload"]
        else:
            if not isinstance(obj.get("method"), str):
                raise _error(lineno, f"a {kind} event needs `method`")
            message["method"] = obj["method"]
            message["params"] = obj.get("params")
            if message["params"] is None:
                del message["params"]
        self.frames += 1
        return [Record(direction, ts_ns, _encode(message))]

    def _trace(self, lineno: int, obj: dict[str, Any], ts_ns: int) -> list[Record]:
        component, level, text = obj.get("component"), obj.get("level"), obj.get("message")
        component = _component(component) if isinstance(component, str) else component
        if not isinstance(text, str):
            raise _error(lineno, "a trace event needs a string `message`")
        if level == "warn" and component in ("client", "agent") and text.startswith(_NOT_JSON_RPC):
            # acp-proxy's export of a line that was not JSON-RPC: "not JSON-RPC: REASON: LINE".
            self.frames += 1
            return [Record("c2a" if component == "client" else "a2c", ts_ns, _invalid_line(text))]
        self.stderr_lines += 1
        self.frames += 1
        if component == "agent" and level == "info":
            return [Record("stderr", ts_ns, text.encode("utf-8", "surrogatepass"))]
        return [Record("stderr", ts_ns, f"[{component} {level}] {text}".encode("utf-8", "surrogatepass"))]


_PROXY_DEBUG = re.compile(r"^proxy\((\d+)\)$")


def _component(name: str) -> str:
    """A component of a conductor trace in the older spelling (``client``, ``proxy:0``,
    ``agent``). Since January 2026 the conductor writes its components' Rust debug names
    (``Client``, ``Proxy(0)``, ``Agent``); before, lower-case names with ``proxy:N``."""
    lowered = name.strip().lower()
    proxy = _PROXY_DEBUG.match(lowered)
    return f"proxy:{proxy.group(1)}" if proxy else lowered


def _invalid_line(text: str) -> bytes:
    """The line behind an export's ``not JSON-RPC: REASON: LINE``: the split whose line gives
    that very reason when decoded again (a reason may itself hold ``": "``)."""
    rest = text[len(_NOT_JSON_RPC) :]
    start = 0
    while True:
        at = rest.find(": ", start)
        if at < 0:
            return rest.encode("utf-8", "surrogatepass")
        reason, line = rest[:at], rest[at + 2 :]
        data = line.encode("utf-8", "surrogatepass")
        if (wire.decode(data).decode_error or "") == reason:
            return data
        start = at + 1


# -- conductor-log: the ACP conductor's debug log ------------------------------------------------

_CONDUCTOR_HEADER = b"=== Conductor Debug Log ==="
_CONDUCTOR_LINE = re.compile(rb"^(C|\d+) (\xe2\x86\x92|\xe2\x86\x90|!) ?(.*)$", re.DOTALL)
"""``LABEL ARROW LINE``: ``→`` (U+2192) into the component, ``←`` (U+2190) out of it, ``!`` stderr."""
_COMPONENT = re.compile(rb"^  (\d+): (.*)$")
_INTO = "\u2192".encode()


class ConductorLogParser(Parser):
    format = "conductor-log"
    unknown = (
        "the time of each frame (the log gives only its start)",
        "the hops between the conductor's components",
        "the conductor's own tracing",
    )

    def __init__(self) -> None:
        super().__init__()
        self._components: dict[int, str] = {}
        self._in_header = False
        self._lines: list[tuple[int, bytes, bytes, bytes]] = []
        """Every labelled line: which hop is the editor's is known only at the end."""

    def feed(self, lineno: int, line: bytes) -> list[Record]:
        if line.rstrip(b"\r") == _CONDUCTOR_HEADER:
            self._in_header = True
            return []
        if self._in_header:
            return self._header(lineno, line.rstrip(b"\r"))
        match = _CONDUCTOR_LINE.match(line)
        if match is None:
            self.skipped += bool(line.strip())
            return []
        label, arrow, data = match.groups()
        self._lines.append((lineno, label, arrow, data))
        return []

    def _header(self, lineno: int, line: bytes) -> list[Record]:
        if line.startswith(b"Started: "):
            text = line[len(b"Started: ") :].decode("utf-8", "replace").strip()
            try:
                when = dt.datetime.fromisoformat(text)
            except ValueError:
                raise _error(lineno, f"`Started:` {_shown(text)} is not an RFC 3339 time") from None
            if when.tzinfo is None:
                when = when.replace(tzinfo=dt.UTC)
            try:
                micros = (when - _EPOCH) // dt.timedelta(microseconds=1)
            except OverflowError:
                raise _error(lineno, "a time out of range (before 1970, after 2262, or not a number)") from None
            self.runs.setdefault(None, {})["started_ns"] = _ts_ns(lineno, micros * 1000)
        elif (component := _COMPONENT.match(line)) is not None:
            self._components[int(component.group(1))] = component.group(2).decode("utf-8", "replace")
        elif line.startswith(b"=") and line.strip(b"=") == b"":
            self._in_header = False
        return []

    def finish(self) -> list[Record]:
        labels = {label for _, label, _, _ in self._lines}
        numbered = [int(label) for label in labels if label != b"C"]
        agent = str(max([*self._components, *numbered], default=0)).encode()
        editor = b"C" if any(label == b"C" and arrow != b"!" for _, label, arrow, _ in self._lines) else agent
        if agent_command := self._components.get(int(agent)):
            self.runs.setdefault(None, {})["argv"] = agent_command.split()
        out: list[Record] = []
        for _, label, arrow, data in self._lines:
            if arrow == b"!":
                if label == agent:
                    out += self._timed(Record("stderr", None, data))
                else:
                    self.skipped += 1  # the conductor's tracing, a proxy's stderr
                continue
            if label != editor:
                self.skipped += 1  # another hop of the chain
                continue
            # Into the conductor (C) or into the agent: what the client sent.
            out += self._timed(Record("c2a" if arrow == _INTO else "a2c", None, data))
        self._lines = []
        return out

    def unknown_for(self, run_key: Any) -> list[str]:
        return list(self.unknown)

    def withdraw_cut(self, lineno: int) -> bool:
        held = self._lines[-1] if self._lines else None
        if held is not None and held[0] == lineno and held[2] != b"!" and _cut_frame(Record("c2a", None, held[3])):
            self._lines.pop()
            return True
        return False


# -- inspector: the ACP Inspector's trace JSONL ---------------------------------------------------

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_INSPECTOR_DIRECTIONS = {"fromclient": "c2a", "fromagent": "a2c"}


class InspectorParser(Parser):
    format = "inspector"
    unknown = ("stderr", "time below the millisecond", "line endings")

    def feed(self, lineno: int, line: bytes) -> list[Record]:
        obj = _object(lineno, line, self.format)
        if obj is None:
            return []
        direction = obj.get("direction")
        direction = _INSPECTOR_DIRECTIONS.get(direction.lower()) if isinstance(direction, str) else None
        if direction is None:
            raise _error(lineno, "`direction` must be fromClient or fromAgent")
        frame = obj.get("json")
        if not isinstance(frame, str):
            raise _error(lineno, "`json` must be the frame as a string")
        return self._timed(
            Record(direction, _inspector_ts(lineno, obj.get("ts")), frame.encode("utf-8", "surrogatepass"))
        )


def _inspector_ts(lineno: int, ts: Any) -> int | None:
    if ts is None:
        return None
    if isinstance(ts, (int, float)) and not isinstance(ts, bool):
        return _ts_ns(lineno, ts * 1_000_000)
    if isinstance(ts, str):
        try:
            when = dt.datetime.fromisoformat(ts)
        except ValueError:
            raise _error(lineno, f"`ts` {_shown(ts)} is neither Unix milliseconds nor an ISO-8601 time") from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=dt.UTC)
        micros = (when - _EPOCH) // dt.timedelta(microseconds=1)
        return _ts_ns(lineno, micros * 1000)
    raise _error(lineno, "`ts` must be Unix milliseconds or an ISO-8601 string")


# -- jetbrains: acp-transport.log -----------------------------------------------------------------

_JETBRAINS_LINE = re.compile(
    rb"^(\d{4})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d),(\d{3})\s+\[\s*\d+\]\s+[A-Z]+\s+-\s+\S+\s+-\s+(IN|OUT): ?(.*?)\r?$",
    re.DOTALL,
)


_JETBRAINS_START = re.compile(rb"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}\s+\[\s*\d+\]\s+[A-Z]+\s+-\s+\S*AcpTransport\b")
"""The head of a transport line (frames are logged by ``AcpTransport``), cut or not."""


class JetBrainsParser(Parser):
    format = "jetbrains"
    unknown = (
        "stderr",
        "time below the millisecond",
        "time zone (the log has none: read as this machine's local time)",
        "whether the log shortened long frames",
    )

    def feed(self, lineno: int, line: bytes) -> list[Record]:
        match = _JETBRAINS_LINE.match(line)
        if match is None:
            self.skipped += bool(line.strip())
            self._unmatched = (lineno, line)
            return []
        year, month, day, hour, minute, second, millis = (int(g) for g in match.groups()[:7])
        try:
            when = dt.datetime(year, month, day, hour, minute, second, millis * 1000)  # local time
            seconds = when.timestamp()
        except (ValueError, OverflowError, OSError):
            raise _error(lineno, "the time at the start of the line is not a date") from None
        ts = _ts_ns(lineno, round(seconds * 1000) * 1_000_000)
        self.frames += 1
        return [Record("c2a" if match.group(8) == b"OUT" else "a2c", ts, match.group(9))]

    _unmatched: tuple[int, bytes] | None = None

    def withdraw_cut(self, lineno: int) -> bool:
        # A last line cut before its "IN:"/"OUT:" marker: the start of a transport line, not
        # another of the IDE log's lines (those were written whole).
        if self._unmatched is None or self._unmatched[0] != lineno:
            return False
        if _JETBRAINS_START.match(self._unmatched[1]) is None:
            return False
        self.skipped -= 1
        return True


# -- choosing a parser ----------------------------------------------------------------------------

_PARSERS: dict[str, type[Parser]] = {
    "jsonl": JsonlParser,
    "jsons": JsonsParser,
    "conductor-log": ConductorLogParser,
    "inspector": InspectorParser,
    "jetbrains": JetBrainsParser,
}


def parser_for(fmt: str) -> Parser:
    try:
        return _PARSERS[fmt]()
    except KeyError:
        raise ImportFormatError(f"unknown format {_shown(fmt)} (one of: auto, {', '.join(FORMATS)})") from None


def sniff(line: bytes) -> str | None:
    """The format one line of a log is in, if it tells."""
    if _JETBRAINS_LINE.match(line):
        return "jetbrains"
    if line.rstrip(b"\r") == _CONDUCTOR_HEADER:
        return "conductor-log"
    try:
        obj = wire.decode_value(line)
    except msgspec.DecodeError:
        return None
    if not isinstance(obj, dict):
        return None
    if "acp_proxy_export" in obj or ("dir" in obj and ("raw" in obj or "raw_base64" in obj)):
        return "jsonl"
    if "direction" in obj and "json" in obj:
        return "inspector"
    if obj.get("type") in ("request", "response", "notification", "trace") and "ts" in obj:
        return "jsons"
    return None


def detect(lines: Iterable[tuple[int, bytes]]) -> str | None:
    """The format of a log from its first lines (None: none of ours)."""
    for _, line in itertools.islice(lines, SNIFF_LINES):
        if line.strip():
            found = sniff(line)
            if found is not None:
                return found
    return None


def parse(parser: Parser, lines: Iterable[tuple[int, bytes]], torn: Torn | None = None) -> Iterator[Record]:
    """Every record of a log, in order.

    With ``torn`` (the log's lines as ``LogLines`` reads them): a last line without its newline
    that is no frame of the format — what a writer killed mid-line leaves — is left out, and
    ``torn.dropped`` names it, instead of refusing the whole log.
    """
    for lineno, line in lines:
        last = torn is not None and torn.unterminated == lineno
        try:
            records = parser.feed(lineno, line)
        except ImportFormatError as exc:
            if not last or torn is None:
                raise
            torn.error = exc
            records = []
        else:
            cut = last and (
                any(_cut_frame(record) for record in records) or (not records and parser.withdraw_cut(lineno))
            )
            if not cut:
                yield from records
                continue
        if torn is not None:
            torn.dropped = lineno
            parser.frames -= len(records)
    yield from parser.finish()


def _cut_frame(record: Record) -> bool:
    """A frame whose JSON stops short: the tail of a line a writer did not finish."""
    if record.direction == "stderr" or not record.line.strip():
        return False
    frame = wire.decode(record.line)
    return frame.kind == "invalid" and "truncated" in (frame.decode_error or "").lower()


class Torn:
    """What ``parse`` learns of a log's last line: which line ends without a newline, and
    whether it was left out."""

    def __init__(self) -> None:
        self.unterminated: int | None = None
        self.dropped: int | None = None
        self.error: ImportFormatError | None = None
        """Why the dropped line is no frame (told instead when the log has nothing else)."""


# -- the shell ------------------------------------------------------------------------------------


def read_lines(path: Path, limit: int = MAX_LINE_BYTES, torn: Torn | None = None) -> Iterator[tuple[int, bytes]]:
    """(line number, line without its newline) of a file, read in chunks. A line longer than
    ``limit`` stops it with an ``ImportFormatError`` before more than ``limit`` of it is read.
    ``torn``, if given, learns the number of a last line without its newline before it is read."""
    from acp_proxy.protocol.framing import LineFramer

    framer = LineFramer(limit + 1)
    lineno = 0
    try:
        handle = open(path, "rb")  # noqa: SIM115 (closed below, also when the reader is abandoned)
    except OSError as exc:
        raise ImportFormatError(f"cannot read {path}: {(exc.strerror or str(exc)).lower()}") from None
    except ValueError:  # a NUL or a lone surrogate: no file can have that name
        raise ImportFormatError(f"cannot read {str(path)!r}: not a possible file name") from None
    try:
        while True:
            try:
                chunk = handle.read(1 << 20)
            except OSError as exc:
                raise ImportFormatError(f"cannot read {path}: {(exc.strerror or str(exc)).lower()}") from None
            if not chunk:
                break
            for line in framer.feed(chunk):
                lineno += 1
                if line.cut:
                    raise _error(lineno, f"longer than {limit} bytes: not a log this importer reads")
                yield lineno, line.data
            if framer.pending > limit:
                raise _error(lineno + 1, f"longer than {limit} bytes: not a log this importer reads")
        last = framer.finish()
        if last is not None:
            if last.cut:
                raise _error(lineno + 1, f"longer than {limit} bytes: not a log this importer reads")
            if torn is not None:
                torn.unterminated = lineno + 1
            yield lineno + 1, last.data
    finally:
        handle.close()


class Imported(NamedTuple):
    run_id: int
    frames: int
    unknown: list[str]


def import_file(
    db_path: Path, path: Path, fmt: str = "auto", warn: Callable[[str], None] | None = None
) -> tuple[str, list[Imported], int]:
    """Import the log at ``path`` into ``db_path``: (format, one ``Imported`` per run, lines skipped).

    The whole log is parsed once before anything is written, so a log with a bad line adds no run
    — except a torn last line (no newline, not a frame): it is left out, and ``warn`` told so.
    """
    if fmt == "auto":
        found = detect(read_lines(path))
        if found is None:
            raise ImportFormatError(f"cannot tell the format of {path}: give --format ({', '.join(FORMATS)})")
        fmt = found
    checked = parser_for(fmt)
    counts: dict[Any, int] = {}
    torn = Torn()
    for record in parse(checked, read_lines(path, torn=torn), torn):
        counts[record.run_key] = counts.get(record.run_key, 0) + 1
    if not counts and torn.error is not None:
        raise torn.error
    if not counts:
        raise ImportFormatError(f"{path} holds no ACP messages (read as {DESCRIPTIONS[fmt]})")
    if torn.dropped is not None and warn is not None:
        warn(f"line {torn.dropped} of {path} is cut short (the log ends mid-line): left out")
    source = str(path.resolve())
    parser = parser_for(fmt)
    done: list[Imported] = []
    again = Torn()
    records = parse(parser, read_lines(path, torn=again), again)
    for run_key, group in itertools.groupby(records, key=lambda r: r.run_key):
        unknown = parser.unknown_for(run_key)
        provenance = {
            **parser.runs.get(run_key, {}),
            "source": source,
            "source_format": fmt,
            "source_unknown": unknown,
        }
        run_id = write_run(db_path, group, provenance)
        done.append(Imported(run_id, counts.get(run_key, 0), unknown))
    return fmt, done, checked.skipped


def write_run(db_path: Path, records: Iterable[Record], provenance: dict[str, Any]) -> int:
    """Record ``records`` as a new run of ``db_path`` through the recorder, as a live run is
    recorded; its id. ``provenance``: columns of the run row the log knows (``argv``, ``cwd``,
    ``started_ns``, ``ended_ns``, ``status``, ``exit_code``, ...) and where it came from
    (``source``, ``source_format``, ``source_unknown``: a list).

    A record without a time gets the time of the record before it (the run's start for the
    first); a run without times starts at 0. Raises ``store.StoreError`` when the database
    cannot be used.
    """
    import tempfile

    from acp_proxy.protocol.framing import Line
    from acp_proxy.record import journal as jr
    from acp_proxy.record import recovery
    from acp_proxy.record.session import Session
    from acp_proxy.store import database as store

    records = iter(records)
    first = next(records, None)
    ts = provenance.get("started_ns")
    if ts is None:
        ts = first.ts_ns if first is not None and first.ts_ns is not None else 0
    start = {
        "started_ns": ts,
        "argv": provenance.get("argv") or [],
        "cwd": provenance.get("cwd"),
        "interactive": bool(provenance.get("interactive")),
        "options": provenance.get("options") or {},
        "fault_spec": provenance.get("fault_spec"),
        "seed": provenance.get("seed"),
        "db": str(db_path),
    }
    recovery.open_for_writing(db_path).conn.close()  # a refused database is refused before any journal
    codes = {"c2a": jr.C2A, "a2c": jr.A2C, "stderr": jr.STDERR}
    # The log is journaled as a live run is, then recorded from its journal: one path into the
    # database. The journal lives in a directory no recovery looks into, so no other acp-proxy
    # command can take it for a dead run's while it is being recorded.
    with tempfile.TemporaryDirectory(dir=db_path.parent, prefix=".acp-proxy-import-") as scratch:
        writer = jr.JournalWriter.create(Path(scratch))
        try:
            writer.record(jr.START, 0, ts, _encode(start))
            for record in itertools.chain([first] if first is not None else [], records):
                if record.ts_ns is not None:
                    ts = record.ts_ns
                code = codes[record.direction]
                if record.meta is None and b"\n" not in record.line:
                    # A plain line: bytes, as the relay hands them over (the recorder frames them).
                    writer.data(code, ts, record.line + b"\n")
                    continue
                meta = dict(record.meta or {})
                size = meta.pop("size", len(record.line))
                line = Line(record.line, size, bool(meta.pop("terminated", True)), bool(meta.pop("cut", False)))
                writer.record(jr.LINE, code, ts, jr.line_payload(line, meta))
            end: dict[str, Any] = {
                "ended_ns": provenance.get("ended_ns", ts),
                "source": provenance.get("source"),
                "source_format": provenance.get("source_format"),
                "source_unknown": _encode(list(provenance.get("source_unknown") or [])).decode(),
                # Without "final" the recorder ends the run crashed: what the log says happened.
                "final": provenance.get("status") != "crashed",
            }
            for name in ("agent_pid", "exit_code", "exit_signal"):
                if provenance.get(name) is not None:
                    end[name] = provenance[name]
            if provenance.get("controls"):
                writer.record(jr.META, 0, ts, _encode({"control": provenance["controls"]}))
            writer.record(jr.META, 0, ts, _encode(end))
            if writer.problem is not None:
                raise store.StoreError(f"cannot import into {db_path}: {writer.problem}")
        finally:
            writer.close()
        fd = jr.open_journal(writer.path)
        try:
            session = Session(writer.path, fd, db_path=db_path)
            run_id = session.run_id
            session.recover(rescue=False)
        finally:
            os.close(fd)
        if provenance.get("marks") and run_id is not None:
            store.add_marks(db_path, run_id, provenance["marks"])
    return run_id
