"""Diff: compare two recorded conversations turn by turn, beyond volatile fields.

Owns: reducing a folded ``Conversation`` (see ``fold``) to what a person would call "what
happened" in each prompt turn — the prompt, the agent's message text, its thoughts, the
tool-call sequence with kinds and final statuses, permission outcomes, the stop reason, an
error — pairing two recordings' sessions (in order of appearance) and turns (by index), and
saying which of those differ. Timing (turn duration, time to first output) is reported side by
side but never counts as a difference: it is volatile, like ids, session ids, ``_meta`` and
timestamps, which are left out of the comparison altogether.

Must not know: SQL, click, rich. Input is folded conversations; output is plain dicts, ready to
render or dump as JSON.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from . import fold as fd

# What is compared, in display order; "timing" fields are shown only.
COMPARED = ("prompt", "agent", "thought", "tool_calls", "permissions", "stop_reason", "error")
SHOWN = ("duration_ms", "first_output_ms")


@dataclass
class TurnDiff:
    session: int  # 1-based position of the session in each recording
    turn: int
    left: dict[str, Any] | None
    right: dict[str, Any] | None
    differs: list[str] = field(default_factory=list)  # names from COMPARED (or "missing")

    def as_json(self) -> dict[str, Any]:
        return {
            "session": self.session,
            "turn": self.turn,
            "differs": self.differs,
            "left": self.left,
            "right": self.right,
        }


def summarise_turn(conv: fd.Conversation, turn: fd.PromptTurn) -> dict[str, Any]:
    """The comparable facts of one turn (ids, session ids and timestamps left out)."""
    agent: list[str] = []
    thought: list[str] = []
    tools: list[str] = []
    permissions: list[str] = []
    first_output_ns: int | None = None
    for entity in conv.timeline:
        if entity.turn != turn.index or entity.replay:
            continue
        if isinstance(entity, fd.Message) and entity.role in ("agent", "thought"):
            (agent if entity.role == "agent" else thought).append(fd.text_of(entity.content))
        elif isinstance(entity, fd.ToolCall):
            tools.append(f"{entity.title or entity.name or '?'} [{entity.tool_kind or '-'}] {entity.status or '-'}")
        elif isinstance(entity, fd.Permission):
            permissions.append(entity.option_id or entity.outcome or ("error" if entity.error else "unanswered"))
        else:
            continue
        if first_output_ns is None:
            first_output_ns = entity.ts_ns
    error = turn.error
    if isinstance(error, dict):  # the message and code matter; `data` often carries volatile detail
        error = {k: error.get(k) for k in ("code", "message") if k in error}
    return {
        "prompt": fd.text_of(turn.prompt),
        "agent": "\n".join(agent),
        "thought": "\n".join(thought),
        "tool_calls": tools,
        "permissions": permissions,
        "stop_reason": turn.stop_reason,
        "error": error,
        "duration_ms": None if turn.duration_ns is None else round(turn.duration_ns / 1e6, 1),
        "first_output_ms": None if first_output_ns is None else round((first_output_ns - turn.ts_ns) / 1e6, 1),
    }


def _sessions(conversations: Iterable[fd.Conversation]) -> list[fd.Conversation]:
    found = [c for c in conversations if c.session_id is not None and c.turns]
    return sorted(found, key=lambda c: c.timeline[0].seq if c.timeline else 0)


def diff_conversations(left: Iterable[fd.Conversation], right: Iterable[fd.Conversation]) -> list[TurnDiff]:
    """Every turn of both sides, paired by session position and turn index, with what differs."""
    out: list[TurnDiff] = []
    lefts, rights = _sessions(left), _sessions(right)
    for s in range(max(len(lefts), len(rights))):
        lc = lefts[s] if s < len(lefts) else None
        rc = rights[s] if s < len(rights) else None
        lturns = [t for t in lc.turns if not t.replay] if lc else []
        rturns = [t for t in rc.turns if not t.replay] if rc else []
        for i in range(max(len(lturns), len(rturns))):
            a = summarise_turn(lc, lturns[i]) if lc and i < len(lturns) else None
            b = summarise_turn(rc, rturns[i]) if rc and i < len(rturns) else None
            differs = ["missing"] if a is None or b is None else [k for k in COMPARED if a[k] != b[k]]
            out.append(TurnDiff(session=s + 1, turn=i + 1, left=a, right=b, differs=differs))
    return out


def any_difference(diffs: Iterable[TurnDiff]) -> bool:
    return any(d.differs for d in diffs)
