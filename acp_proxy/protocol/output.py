"""What counts as the agent's output in a prompt turn: one vocabulary for every view.

Owns: which ``session/update`` variants are the agent's *output* (what "time to first output"
measures), which are *chunks* (what a turn's chunk count counts) and which report *tool calls*
(counted once per ``toolCallId``). The tracker (the turns table, ``stats``), the fold (``show``,
the inspector, the MCP tools), ``diff``, the inspector's waterfall and the OpenTelemetry spans all
ask these sets; none has a definition of its own.

The definition. "Time to first output" is what a person waiting on the agent means by it: the
time from the ``session/prompt`` request to the first ``session/update`` of the turn in which
the agent shows work on the prompt. The v2 prompt lifecycle says the agent "reports the model's
output to the Client via ``session/update`` notifications. This may include the Agent's plan",
so output is:

- agent message and thought text (``agent_message_chunk``, ``agent_thought_chunk``, and the v2
  upserts ``agent_message``, ``agent_thought``);
- tool calls (``tool_call``, ``tool_call_update``, ``tool_call_content_chunk``) and the output of
  an agent-owned terminal (``terminal_update``, ``terminal_output_chunk``);
- a plan (v1 ``plan``, v2 ``plan_update``).

Not output: the echo of the user's own message (``user_message*``), reports about the session
rather than answers (``state_update``, ``usage_update``, ``session_info_update``, mode, config
option and command updates), live ``notice``s, compactions, inter-session messages, subagent
announcements, a plan's removal, variants outside the vocabulary (a ``_vendor`` or future name:
what it means is unknown), history replayed in a replay window, and requests to the client — a
permission request asks the user something (it is counted apart, as ``permission_requests``).

Chunks are the agent's streamed pieces: every known ``*_chunk`` variant except
``user_message_chunk`` (the prompt's echo).

Must not know: frames, rows, turns, rendering. Derived from the schemas' vocabulary once at
import, so a variant missing from every shipped schema is never counted.
"""

from __future__ import annotations

from acp_proxy.protocol import vocabulary as acp

__all__ = ["CHUNK", "COUNTS", "OUTPUT", "TOOL", "counts"]

_KNOWN = acp.vocabulary().updates

OUTPUT: frozenset[str] = _KNOWN & frozenset(
    {
        "agent_message_chunk",
        "agent_message",
        "agent_thought_chunk",
        "agent_thought",
        "tool_call",
        "tool_call_update",
        "tool_call_content_chunk",
        "terminal_update",
        "terminal_output_chunk",
        "plan",
        "plan_update",
    }
)
"""Variants that are the agent's output: the first one of a turn is its first output."""

CHUNK: frozenset[str] = frozenset(v for v in _KNOWN if v.endswith("_chunk") and v != "user_message_chunk")
"""Variants that stream a piece of the agent's output (a turn's ``chunks`` counts them)."""

TOOL: frozenset[str] = frozenset(v for v in _KNOWN if v.startswith("tool_call"))
"""Variants that report a tool call (counted once per ``toolCallId``)."""

IS_CHUNK, IS_OUTPUT, IS_TOOL = 1, 2, 4


def counts(variant: str | None) -> int:
    """What ``variant`` counts towards its turn: a mask of ``IS_CHUNK``, ``IS_OUTPUT``, ``IS_TOOL``."""
    return COUNTS.get(variant, 0) if variant is not None else 0


COUNTS: dict[str, int] = {
    v: (IS_CHUNK if v in CHUNK else 0) | (IS_OUTPUT if v in OUTPUT else 0) | (IS_TOOL if v in TOOL else 0)
    for v in CHUNK | OUTPUT | TOOL
}
"""One dict lookup per update on the hot path: the mask of every counted variant."""
