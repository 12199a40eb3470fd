"""Diff: compare two recorded conversations — the connection around the turns, then turn by turn.

Owns: reducing folded ``Conversation``s (see ``fold``) to what a person would call "what
happened". Outside the prompt turns (``summarise_connection``): the ``initialize`` exchange
(protocol versions, peer names and versions, auth methods), the set-up calls made outside any
turn and how each was answered (``authenticate``, ``session/new`` ... with their error codes and
messages), errors outside any turn, and the requests left unanswered when a connection ended. In
each prompt turn (``summarise_turn``): the prompt, the agent's message text, its thoughts, the
tool-call sequence with kinds and final statuses, permission outcomes, how the turn ended (stop
reason, error, unfinished). Sessions are paired in order of appearance, turns by index, and the
diff says which of those facts differ. Timing (turn duration, time to first output) is reported
side by side but never counts as a difference: it is volatile, like ids, session ids, ``cwd``,
``_meta`` and timestamps, which are left out of the comparison altogether.

Must not know: SQL, click, rich. Input is folded conversations; output is plain dicts, ready to
render or dump as JSON.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from acp_proxy.read import fold as fd

# What is compared, in display order; "timing" fields are shown only.
COMPARED = ("prompt", "agent", "thought", "tool_calls", "permissions", "stop_reason", "outcome", "error")
SHOWN = ("duration_ms", "first_output_ms")
CONNECTION = ("initialize", "setup", "errors", "unanswered")


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


@dataclass
class ConnectionDiff:
    """Everything outside the prompt turns of both recordings."""

    left: dict[str, Any]
    right: dict[str, Any]
    differs: list[str] = field(default_factory=list)  # names from CONNECTION

    def as_json(self) -> dict[str, Any]:
        return {"differs": self.differs, "left": self.left, "right": self.right}


def _error(error: Any) -> dict[str, Any] | Any:
    # The message and code matter; `data` often carries volatile detail.
    if isinstance(error, dict):
        return {k: error.get(k) for k in ("code", "message") if k in error}
    return error


def _outcome(call: fd.Call) -> str:
    if call.error is not None:
        err = _error(call.error)
        if isinstance(err, dict):
            return f"error {err.get('code')} {err.get('message') or ''}".rstrip()
        return f"error {err!r}"
    return "ok" if call.answered else "unanswered"


def _info(value: Any) -> str | None:
    if not isinstance(value, dict):
        return None
    parts = [str(value[k]) for k in ("name", "version") if value.get(k) is not None]
    return " ".join(parts) or None


def summarise_connection(conversations: Iterable[fd.Conversation]) -> dict[str, Any]:
    """The comparable facts outside the prompt turns of one recording."""
    entities = sorted((e for conv in conversations for e in conv.timeline), key=lambda e: (str(e.run), e.seq))
    initialize: list[str] = []
    setup: list[str] = []
    errors: list[str] = []
    unanswered: list[str] = []
    for entity in entities:
        if entity.replay:
            continue
        if isinstance(entity, fd.Call) and entity.method in ("initialize", "proxy/initialize"):
            params = entity.params if isinstance(entity.params, dict) else {}
            result = entity.result if isinstance(entity.result, dict) else {}
            auth = [str(m.get("id")) for m in result.get("authMethods") or [] if isinstance(m, dict)]
            asked = (
                f"protocol {params.get('protocolVersion')} client {_info(params.get('clientInfo', params.get('info')))}"
            )
            if entity.answered and entity.error is None:
                agent = _info(result.get("agentInfo", result.get("info")))
                answer = f"protocol {result.get('protocolVersion')} agent {agent} auth [{', '.join(auth)}]"
            else:
                answer = _outcome(entity)
            initialize.append(f"{entity.method} {asked} → {answer}")
        elif isinstance(entity, fd.Call) and entity.turn == 0:
            setup.append(f"{entity.method} → {_outcome(entity)}")
        elif isinstance(entity, fd.ErrorResponse) and entity.turn == 0:
            errors.append(f"{entity.method or '?'}: {entity.code} {entity.message or ''}".rstrip())
    for conv in conversations:
        unanswered.extend(method or "?" for _seq, method in conv.unanswered)
    return {"initialize": initialize, "setup": setup, "errors": errors, "unanswered": sorted(unanswered)}


def diff_connection(left: Iterable[fd.Conversation], right: Iterable[fd.Conversation]) -> ConnectionDiff:
    a, b = summarise_connection(list(left)), summarise_connection(list(right))
    return ConnectionDiff(a, b, [k for k in CONNECTION if a[k] != b[k]])


def summarise_turn(conv: fd.Conversation, turn: fd.PromptTurn) -> dict[str, Any]:
    """The comparable facts of one turn (ids, session ids and timestamps left out)."""
    agent: list[str] = []
    thought: list[str] = []
    tools: list[str] = []
    permissions: list[str] = []
    for entity in conv.timeline:
        if entity.turn != turn.index or entity.replay:
            continue
        if isinstance(entity, fd.Message) and entity.role in ("agent", "thought"):
            (agent if entity.role == "agent" else thought).append(fd.text_of(entity.content))
        elif isinstance(entity, fd.ToolCall):
            tools.append(f"{entity.title or entity.name or '?'} [{entity.tool_kind or '-'}] {entity.status or '-'}")
        elif isinstance(entity, fd.Permission):
            permissions.append(entity.option_id or entity.outcome or ("error" if entity.error else "unanswered"))
    return {
        "prompt": fd.text_of(turn.prompt),
        "agent": "\n".join(agent),
        "thought": "\n".join(thought),
        "tool_calls": tools,
        "permissions": permissions,
        "stop_reason": turn.stop_reason,
        "outcome": turn.status,
        "error": _error(turn.error),
        "duration_ms": None if turn.duration_ns is None else round(turn.duration_ns / 1e6, 1),
        # The one definition of first output (protocol.output), as the state machine saw it.
        "first_output_ms": turn.first_output_ms,
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


def any_difference(diffs: Iterable[TurnDiff], connection: ConnectionDiff | None = None) -> bool:
    return bool(connection is not None and connection.differs) or any(d.differs for d in diffs)
