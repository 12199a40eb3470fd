"""The pytest fixture as a user's test suite meets it: a mistyped rule fails with the parser's
message before anything starts, and a test whose proxied agent dies shows the proxy's stderr.

Each case is a small test file run by a real `python -m pytest` (bounded), as a user runs it.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from acp_proxy.errors import UsageError
from acp_proxy.faults.rules import RuleError
from acp_proxy.testing import ProxiedAgent
from tests.conftest import proxy_env
from tests.peers import EXAMPLES


def run_pytest(tmp_path: Path, source: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider\n")
    (tmp_path / "test_user.py").write_text(textwrap.dedent(source))
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rN", str(tmp_path / "test_user.py")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env=proxy_env(),
    )


@pytest.mark.spawns
def test_a_mistyped_rule_fails_the_test_with_the_parsers_message(tmp_path: Path) -> None:
    done = run_pytest(
        tmp_path,
        """
        def test_client(acp_proxy):
            acp_proxy(["cat"], faults=["dorp if kind:request"])
        """,
    )
    assert done.returncode == 1, done.stdout
    assert "unknown action 'dorp'; did you mean 'drop'?" in done.stdout
    assert "Connection closed" not in done.stdout


@pytest.mark.spawns
def test_the_proxys_stderr_is_in_the_report_when_the_agent_dies(tmp_path: Path) -> None:
    done = run_pytest(
        tmp_path,
        """
        import subprocess, sys

        DYING = [sys.executable, "-c", "import sys; sys.stderr.write('agent: out of tokens\\\\n'); sys.exit(3)"]

        def test_client_talks_to_the_agent(acp_proxy):
            agent = acp_proxy(DYING)
            line = b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}}\\n'
            done = subprocess.run(agent.argv, input=line, capture_output=True, timeout=60)
            assert done.stdout, "the agent never answered"

        def test_a_passing_test_shows_nothing(acp_proxy):
            agent = acp_proxy(DYING)
            subprocess.run(agent.argv, input=b"", capture_output=True, timeout=60)
        """,
    )
    assert done.returncode == 1, done.stdout
    assert "1 failed, 1 passed" in done.stdout
    assert "acp-proxy stderr (acp_proxy call 1:" in done.stdout
    assert "agent: out of tokens" in done.stdout
    assert done.stdout.count("acp-proxy stderr (") == 1  # only the failing test's report has it


def test_a_hanging_client_fails_the_test_naming_the_frame_it_never_got(tmp_path: Path) -> None:
    done = run_pytest(
        tmp_path,
        f"""
        import sys

        AGENT = [sys.executable, {str(EXAMPLES / "sdk_agent.py")!r}]
        CLIENT = [sys.executable, {str(EXAMPLES / "sdk_client.py")!r}]

        def test_client_without_a_time_limit(acp_proxy):
            agent = acp_proxy(AGENT, faults=["drop if method:session/prompt kind:response"], timeout=10)
            # The client would wait an hour for the response the rule dropped.
            agent.run([*CLIENT, "--timeout", "3600", "--prompt", "hello", "--", *agent.argv])
        """,
    )
    assert done.returncode == 1, done.stdout
    assert "1 failed" in done.stdout
    assert "ClientHung: the client was still running after 10 s and was stopped; it never got the response to " \
        "session/prompt (id 2, frame" in done.stdout  # fmt: skip
    assert "the fault `drop` held it back" in done.stdout


def test_the_api_checks_rules_and_options_before_spawning(tmp_path: Path) -> None:
    with pytest.raises(RuleError, match=r"did you mean 'drop'\?"):
        ProxiedAgent(["cat"], db=tmp_path / "x.db", faults=["dorp"])
    with pytest.raises(RuleError, match="at most 1,000"):
        ProxiedAgent(["cat"], db=tmp_path / "x.db", faults=["duplicate=5000"])
    with pytest.raises(RuleError, match="64-bit"):
        ProxiedAgent(["cat"], db=tmp_path / "x.db", seed=2**70)
    with pytest.raises(UsageError, match="grace"):
        ProxiedAgent(["cat"], db=tmp_path / "x.db", grace=float("nan"))
    agent = ProxiedAgent(["cat"], db=tmp_path / "x.db", faults=["drop if kind:request"], stderr_file=tmp_path / "e")
    assert agent.argv[-2:] == ["--", "cat"] and "--stderr-file" in agent.argv
    assert agent.stderr() == ""


@pytest.mark.spawns
def test_stderr_file_collects_the_proxys_and_the_agents_lines(tmp_path: Path) -> None:
    agent = ProxiedAgent(
        [sys.executable, "-c", "import sys; sys.stderr.write('from the agent\\n'); sys.exit(4)"],
        db=tmp_path / "rec.db",
        stderr_file=tmp_path / "proxy.stderr",
        grace=30,  # the agent exits on its own, however slowly its interpreter starts
    )
    done = subprocess.run(agent.argv, input=b"", capture_output=True, timeout=60, env=proxy_env())
    assert done.returncode == 4  # the agent's status, as always
    assert done.stderr == b""  # all of it went to the file
    assert "from the agent" in agent.stderr()
    assert agent.runs()[0]["exit_code"] == 4
