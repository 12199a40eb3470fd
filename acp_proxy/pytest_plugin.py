"""pytest fixture ``acp_proxy``: wrap an agent with fault rules, hand its argv to your client.

Loaded automatically (entry point ``pytest11``) when acp-proxy is installed::

    def test_client_survives_a_lost_prompt_response(acp_proxy):
        agent = acp_proxy(["my-agent"], faults=["drop if method:session/prompt kind:response"])
        result = run_my_client(agent.argv, timeout=5)
        assert result.timed_out_cleanly
        assert agent.frames("fault:drop")

Each call gets its own database in the test's ``tmp_path`` (see ``acp_proxy.testing``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from .testing import ProxiedAgent


@pytest.fixture
def acp_proxy(tmp_path: Path) -> Callable[..., ProxiedAgent]:
    made = 0

    def wrap(agent: Sequence[str], **options: Any) -> ProxiedAgent:
        nonlocal made
        made += 1
        options.setdefault("db", tmp_path / f"acp-proxy-{made}.db")
        return ProxiedAgent(agent, **options)

    return wrap
