"""Test an ACP client against a misbehaving agent with acp-proxy's pytest fixture.

Runnable as is, from a checkout::

    pip install -e '.[test]'        # acp-proxy, pytest and the official SDK (agent-client-protocol)
    pytest examples/test_fault_injection.py

The ``acp_proxy`` fixture is loaded automatically once acp-proxy is installed. Call it with the
agent's command line and fault rules; it returns a ``ProxiedAgent`` (``acp_proxy.testing``):

- ``agent.argv`` is the command your client launches instead of the agent's: acp-proxy, with
  the rules and a fresh database in the test's ``tmp_path``, in front of the real agent;
- ``agent.frames(FILTER)`` returns the recorded frames the filter selects (the language of
  ``acp-proxy frames``: ``fault:drop``, ``method:session/prompt kind:response``, ``unknown``,
  ...); ``agent.faults()`` the faults applied, ``agent.runs()`` the run (exit status, seed).

The rule language is ``acp-proxy faults-help``; ``examples/faults.toml`` shows a rules file.

The first test is the README's: the client under test is a program (here the SDK example
client, ``examples/sdk_client.py``), and ``agent.run(CLIENT_ARGV)`` runs it with a time limit
(``timeout=``, 60 s by default): a client that hangs fails the test, naming the frame it never
got, instead of a test that never ends.

The other tests drive the official Python SDK's client in process, with asyncio
(``acp.spawn_agent_process``); the agent is ``examples/sdk_agent.py``. The tests are plain
functions that call ``asyncio.run``, so they run under any pytest configuration (this
repository's runs pytest-trio in trio mode, which would take over ``async def`` tests).
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from acp import (
    PROTOCOL_VERSION,
    Client,
    PromptResponse,
    RequestPermissionResponse,
    spawn_agent_process,
    text_block,
)
from acp.schema import (
    AgentMessageChunk,
    AllowedOutcome,
    ClientCapabilities,
    Implementation,
    PermissionOption,
    TextContentBlock,
    ToolCallProgress,
    ToolCallUpdate,
)

pytestmark = pytest.mark.spawns  # every test here starts processes

AGENT = [sys.executable, str(Path(__file__).with_name("sdk_agent.py"))]
"""The example agent: echoes each prompt back as ``Client sent:`` and the prompt's text."""
CLIENT = [sys.executable, str(Path(__file__).with_name("sdk_client.py"))]
"""The example client: ``CLIENT + [options, "--", *agent_argv]``; gives up after ``--timeout`` s."""
STARTUP_TIMEOUT = 30.0

UNKNOWN_VARIANT = (
    '{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"${sessionId}",'
    '"update":{"sessionUpdate":"_vendor_hint","text":"a variant this client has never heard of"}}}'
)


class RecordingClient(Client):
    """A minimal client: remembers the updates it receives, allows every permission request."""

    def __init__(self) -> None:
        self.updates: list[Any] = []
        self.permission_requests: list[str] = []

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append(update)

    async def request_permission(
        self, session_id: str, tool_call: ToolCallUpdate, options: list[PermissionOption], **kwargs: Any
    ) -> RequestPermissionResponse:
        self.permission_requests.append(tool_call.tool_call_id)
        allow = next(option for option in options if option.kind.startswith("allow"))
        return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=allow.option_id))

    def texts(self) -> list[str]:
        """The agent's message chunks, as text."""
        return [
            update.content.text
            for update in self.updates
            if isinstance(update, AgentMessageChunk) and isinstance(update.content, TextContentBlock)
        ]


async def one_turn(argv: list[str], client: RecordingClient, prompt: str, prompt_timeout: float = 10) -> PromptResponse:
    """Start the agent with ``argv``, open a session, send one prompt; its response.

    ``asyncio.wait_for`` bounds every request: a client must not wait forever for a response
    that may never come. Starting up gets ``STARTUP_TIMEOUT`` (Python, the proxy and the agent
    all start first), the prompt ``prompt_timeout``. Leaving ``spawn_agent_process`` closes the
    agent's stdin and waits for it (terminating it after ``shutdown_timeout``), whatever
    happened.
    """
    # Rules in the environment would add to each test's own: leave them out.
    env = {key: value for key, value in os.environ.items() if key != "ACP_PROXY_FAULTS"}
    command, *args = argv
    transport = {"stderr": None, "shutdown_timeout": 10.0}  # the recording is finished first
    async with spawn_agent_process(client, command, *args, env=env, transport_kwargs=transport) as (conn, _):
        await asyncio.wait_for(
            conn.initialize(
                protocol_version=PROTOCOL_VERSION,
                client_capabilities=ClientCapabilities(),
                client_info=Implementation(name="fault-injection-example", version="0.1.0"),
            ),
            STARTUP_TIMEOUT,
        )
        session = await asyncio.wait_for(conn.new_session(cwd=os.getcwd(), mcp_servers=[]), STARTUP_TIMEOUT)
        return await asyncio.wait_for(
            conn.prompt(session_id=session.session_id, prompt=[text_block(prompt)]), prompt_timeout
        )


def test_client_survives_a_lost_prompt_response(acp_proxy: Any) -> None:
    agent = acp_proxy(AGENT, faults=["drop if method:session/prompt kind:response"], timeout=30)
    # The client's --timeout bounds its whole run: long enough for a loaded machine to start the
    # proxy and agent, so that what it gives up on is the dropped response.
    result = agent.run([*CLIENT, "--timeout", "10", "--prompt", "hello", "--", *agent.argv])
    assert result.returncode == 1  # the client gave up on its own, and said why
    assert "timed out after 10 s waiting for session/prompt" in result.stderr
    assert agent.frames("fault:drop")  # the recording, through the filter language


def test_lost_prompt_response_times_out_cleanly(acp_proxy: Any) -> None:
    agent = acp_proxy(AGENT, faults=["drop if method:session/prompt kind:response"])
    client = RecordingClient()

    with pytest.raises(TimeoutError):
        asyncio.run(one_turn(agent.argv, client, "hello", prompt_timeout=2))

    # The turn's updates arrived; its end never did, and the client gave up on its own.
    assert client.texts() == ["Client sent:", "hello"]
    (dropped,) = agent.frames("fault:drop")
    assert (dropped["method"], dropped["kind"], dropped["forwarded"]) == ("session/prompt", "response", 0)
    assert [fault["action"] for fault in agent.faults()] == ["drop"]
    (run,) = agent.runs()
    assert run["status"] == "ended"  # the proxy and the agent shut down; nothing hangs


def test_agent_killed_mid_turn(acp_proxy: Any) -> None:
    # The agent asks for permission in the middle of its turn, and is killed right then.
    agent = acp_proxy(
        [*AGENT, "--permission"], faults=["kill=SIGKILL if method:session/request_permission kind:request"]
    )
    client = RecordingClient()

    with pytest.raises(ConnectionError):
        asyncio.run(one_turn(agent.argv, client, "hello"))

    assert "Client sent:" not in client.texts()
    (run,) = agent.runs()
    assert run["exit_signal"] == 9  # the proxy exits the way its agent did
    (fault,) = agent.faults()
    assert (fault["action"], fault["detail"], fault["method"]) == (
        "kill",
        "SIGKILL",
        "session/request_permission",
    )
    assert not agent.frames("method:session/prompt kind:response")


def test_corrupt_frame(acp_proxy: Any) -> None:
    agent = acp_proxy(AGENT, faults=["corrupt if update:agent_message_chunk nth=1"])
    client = RecordingClient()

    response = asyncio.run(one_turn(agent.argv, client, "hello"))

    # The SDK skips the line it cannot parse and carries on with the turn.
    assert response.stop_reason == "end_turn"
    assert client.texts() == ["hello"]
    (corrupted,) = agent.frames("fault:corrupt")
    assert "Client sent:" in corrupted["raw"]  # recorded as the agent wrote it
    assert corrupted["note"] == "forwarded corrupted"


def test_unknown_update_variant(acp_proxy: Any) -> None:
    agent = acp_proxy(AGENT, faults=[f"inject='{UNKNOWN_VARIANT}' before if update:agent_message_chunk nth=1"])
    client = RecordingClient()

    response = asyncio.run(one_turn(agent.argv, client, "hello"))

    assert response.stop_reason == "end_turn"
    assert client.texts() == ["Client sent:", "hello"]
    (injected,) = agent.frames("update:_vendor_hint")
    assert injected["unknown"] == "extension"
    assert injected["note"].startswith("injected by acp-proxy")
    assert injected["session_id"] == agent.frames("update:agent_message_chunk")[0]["session_id"]


def test_delayed_permission_request(acp_proxy: Any) -> None:
    agent = acp_proxy(
        [*AGENT, "--permission"], faults=["delay=500ms if method:session/request_permission kind:request"]
    )
    client = RecordingClient()

    response = asyncio.run(one_turn(agent.argv, client, "hello"))

    assert response.stop_reason == "end_turn"
    assert client.permission_requests == ["call_1"]
    statuses = [update.status for update in client.updates if isinstance(update, ToolCallProgress)]
    assert statuses == ["completed"]
    (fault,) = agent.faults()
    assert (fault["action"], fault["detail"], fault["method"]) == (
        "delay",
        "500ms",
        "session/request_permission",
    )
    (answer,) = agent.frames("method:session/request_permission kind:response")
    assert answer["latency_ns"] >= 500_000_000  # from the agent's request to the client's answer
