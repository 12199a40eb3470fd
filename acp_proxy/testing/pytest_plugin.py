"""pytest fixture ``acp_proxy``: wrap an agent with fault rules, hand its argv to your client.

Loaded automatically (entry point ``pytest11``) when acp-proxy is installed::

    def test_client_survives_a_lost_prompt_response(acp_proxy):
        agent = acp_proxy(["my-agent"], faults=["drop if method:session/prompt kind:response"], timeout=30)
        result = agent.run(["my-client", "--timeout", "3", "--", *agent.argv])
        assert result.returncode == 1 and "timed out" in result.stderr
        assert agent.frames("fault:drop")

Given a URL instead of an argv, it is a ``ProxiedRemote`` (``acp_proxy.testing.remote``): its
``argv`` runs ``acp-proxy run --connect URL`` for a stdio client, its ``serve()`` yields the
proxy's URL for a remote client.

``agent.run`` bounds the client by ``timeout`` seconds (default 60): a client that hangs fails
the test with ``ClientHung``, naming the frame it never got (``examples/test_fault_injection.py``
runs this with the SDK example client).

Each call gets its own database and stderr file in the test's ``tmp_path`` (see
``acp_proxy.testing``). A rule with a mistake fails the call itself, with the rule parser's
message. When a test that used the fixture fails, everything the proxies wrote on stderr (their
own lines, the agents' stderr: a crash's traceback) is added to its report.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from pathlib import Path
from typing import Any

import pytest

from acp_proxy.testing import ProxiedAgent
from acp_proxy.testing.remote import ProxiedRemote

_MADE = pytest.StashKey[list[ProxiedAgent]]()


@pytest.fixture
def acp_proxy(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[..., ProxiedAgent]:
    made = request.node.stash.setdefault(_MADE, [])

    def wrap(agent: Sequence[str] | str, **options: Any) -> ProxiedAgent:
        number = len(made) + 1
        options.setdefault("db", tmp_path / f"acp-proxy-{number}.db")
        options.setdefault("stderr_file", tmp_path / f"acp-proxy-{number}.stderr")
        # A URL: a remote agent (``testing.remote``: run --connect, or serve --upstream).
        proxied = ProxiedRemote(agent, **options) if isinstance(agent, str) else ProxiedAgent(agent, **options)
        made.append(proxied)
        return proxied

    return wrap


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    outcome = yield
    report = outcome.get_result()
    if report.when != "call" or not report.failed:
        return
    none: list[ProxiedAgent] = []
    made = item.stash.get(_MADE, none)
    for number, proxied in enumerate(made, 1):
        text = proxied.stderr()
        if text:
            report.sections.append((f"acp-proxy stderr (acp_proxy call {number}: {proxied.agent[0]})", text))
