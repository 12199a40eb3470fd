"""protocol.output: the one vocabulary of what counts as the agent's output, chunks and tool calls."""

from __future__ import annotations

from acp_proxy.protocol import output
from acp_proxy.protocol import vocabulary as acp


def test_output_is_the_models_work_not_echoes_reports_or_questions() -> None:
    known = acp.vocabulary().updates
    assert known >= output.OUTPUT | output.CHUNK | output.TOOL
    # Message and thought text, tool calls and the plan of either version.
    for variant in ("agent_message_chunk", "agent_thought_chunk", "tool_call", "tool_call_update", "plan"):
        assert variant in output.OUTPUT and variant in acp.vocabulary(1).updates
    for variant in ("agent_message", "agent_thought", "tool_call_content_chunk", "plan_update"):
        assert variant in output.OUTPUT and variant in acp.vocabulary(2).updates
    # The user's echo, reports about the session, notices and removals are not output.
    for variant in ("user_message_chunk", "user_message", "state_update", "usage_update", "notice", "plan_removed"):
        assert variant not in output.OUTPUT
    assert output.counts("session/request_permission") == 0  # a method, never an update variant
    assert output.counts("_vendor_chunk") == output.counts(None) == 0


def test_chunks_are_the_agents_streamed_pieces() -> None:
    assert "user_message_chunk" not in output.CHUNK
    assert {"agent_message_chunk", "agent_thought_chunk", "tool_call_content_chunk"} <= output.CHUNK
    assert all(v.endswith("_chunk") for v in output.CHUNK)
    mask = output.counts("agent_message_chunk")
    assert mask & output.IS_CHUNK and mask & output.IS_OUTPUT and not mask & output.IS_TOOL
    assert output.counts("tool_call_update") == output.IS_OUTPUT | output.IS_TOOL
