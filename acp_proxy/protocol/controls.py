"""What a person's control actions on a live run mean when read back (``acp-proxy ctl``).

Owns: the one meaning of a ``controls`` row and of the frames it touched — which frame rows a
breakpoint held (``is_held``), the fate of a held frame (``held_fate``: "held 2.100s, released
as #14", "held 0.500s, dropped", "held, never decided"), the one line that says what an action
did (``describe``), and the record every filter reads a control row as (``filter_record``: the
filter language's columns, ``kind = 'control'``, ``origin = 'proxy'``, a note that the ``control``
flag matches, as it matches every frame the proxy's controller held, released, edited or sent).

Counting follows what was forwarded: a held frame is recorded not forwarded, and its released
copy is the one a peer received, so a turn counts the copy and a conversation shows the copy
(the held original stands only as the action's target).

Must not know: SQL, files, rendering, the relay. Rows come in as mappings.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

from acp_proxy.protocol.frames import FRAME_COLUMNS

CTL = "acp-proxy ctl"
"""Every note the proxy's controller leaves on a frame says this (the ``control`` flag)."""
HELD_NOTE = "held by breakpoint "
"""How the note of a held row starts (``faults.gate``)."""
KIND = "control"

ACTIONS = {
    "fault-add": "fault added",
    "fault-remove": "fault removed",
    "fault-clear": "faults cleared",
    "break": "breakpoint set",
    "unbreak": "breakpoint removed",
    "clear": "breakpoints cleared",
    "release": "released",
    "drop": "dropped",
    "send": "sent",
    "resend": "resent",
}
"""Each action as a person reads it; an unknown one is shown as recorded."""


def is_held(note: Any) -> bool:
    """Whether a frame row with this note is the original a breakpoint held (never forwarded
    as such: its copy is, once released)."""
    return isinstance(note, str) and note.startswith(HELD_NOTE)


def seconds(ns: Any) -> str:
    return f"{ns / 1e9:.3f}s" if isinstance(ns, int) else "?"


def held_fate(control: Mapping[str, Any] | None) -> str:
    """What became of a held frame, given the release or drop that decided it (None: none)."""
    if control is None:
        return "held, never decided"
    held = f"held {seconds(control.get('held_ns'))}"
    if control.get("action") == "drop":
        return f"{held}, dropped"
    copy = control.get("result_seq")
    edited = " edited" if control.get("argument") == "edited" else ""
    return f"{held}, released{edited} as #{copy}" if copy is not None else f"{held}, released{edited}"


def describe(control: Mapping[str, Any]) -> str:
    """One line: the controller, what the action was, its argument, the frames it acted on
    and wrote (the note a filter reads)."""
    return f"{CTL} {summary(control)}"


def summary(control: Mapping[str, Any]) -> str:
    """``describe`` without the controller's name (a frame list's summary column)."""
    action = str(control.get("action") or "")
    parts = [f"{action}:", ACTIONS.get(action, action)]
    argument = control.get("argument")
    hold = control.get("hold")
    if action in ("release", "drop"):
        target = control.get("seq")
        parts.append(f"hold {hold}" + (f" (#{target})" if target is not None else ""))
        parts.append(f"after {seconds(control.get('held_ns'))}")
        if argument:
            parts.append(str(argument))
    elif argument:
        parts.append(str(argument))
    if action == "resend" and control.get("seq") is not None:
        parts.append(f"(#{control['seq']} again)")
    if control.get("result_seq") is not None:
        parts.append(f"-> #{control['result_seq']}")
    return " ".join(parts)


def filter_record(control: Mapping[str, Any]) -> SimpleNamespace:
    """A control row as the filter language reads a frame: every column absent but the run,
    the time, ``kind``, ``origin`` and ``note`` (so ``control``, ``dir:proxy``, ``run:``,
    ``since:``/``until:`` and ``note:`` select it, and a frame's own terms do not)."""
    values: dict[str, Any] = dict.fromkeys(FRAME_COLUMNS)
    values.update(
        run_id=control.get("run_id"),
        ts_ns=control.get("ts_ns"),
        kind=KIND,
        origin="proxy",
        note=describe(control),
        forwarded=1,
        mark=None,
        findings=[],
    )
    return SimpleNamespace(**values)
