"""Helpers for tests that run the SDK example peers (examples/sdk_agent.py, examples/sdk_client.py).

The client prints a deterministic transcript (format in its module docstring); these helpers
build the command lines, run the client with a bounded time, and state the transcripts the
example agent should produce, so end-to-end tests can compare a run through `acp-proxy run`
(or a replay) with a direct one.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"
SDK_AGENT = EXAMPLES / "sdk_agent.py"
SDK_CLIENT = EXAMPLES / "sdk_client.py"
PROXY = [sys.executable, "-m", "acp_proxy"]

DEFAULT_PROMPTS = ("hello world", "second prompt")
AGENT_INIT_LINE = "init: protocol=1 agent=acp-proxy-sdk-agent/0.1.0 loadSession=true"
PERMISSION_OPTIONS = "[allow-once,reject-once]"
DEFAULT_TIMEOUT_S = 60.0
# The client needs up to ~4 s after its own --timeout to stop the agent (stdin EOF, then
# SIGTERM, then SIGKILL, 2 s apart) plus its start-up; the process limit leaves room for that.
SHUTDOWN_MARGIN_S = 15.0


def agent_argv(*args: str) -> list[str]:
    """The command line of the example agent with ``args`` (e.g. ``--permission``)."""
    return [sys.executable, str(SDK_AGENT), *args]


def proxied(agent: Sequence[str], db: Path | str, *proxy_args: str) -> list[str]:
    """``agent`` put behind ``acp-proxy run --db DB [PROXY_ARGS] --``."""
    return [*PROXY, "run", "--db", str(db), *proxy_args, "--", *agent]


def peer_env(**extra: str) -> dict[str, str]:
    """The test environment without ``ACP_PROXY_DB`` (so nothing records into a user's database)."""
    env = dict(os.environ)
    env.pop("ACP_PROXY_DB", None)
    env.update(extra)
    return env


def client_argv(agent: Sequence[str], *client_args: str, timeout: float = DEFAULT_TIMEOUT_S) -> list[str]:
    """The client's command line; a ``--timeout`` in ``client_args`` overrides ``timeout``."""
    return [sys.executable, str(SDK_CLIENT), "--timeout", f"{timeout:g}", *client_args, "--", *agent]


def run_client(
    agent: Sequence[str],
    *client_args: str,
    timeout: float = DEFAULT_TIMEOUT_S,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run the example client against ``agent`` to completion, text mode, output captured.

    The client itself gives up after ``timeout`` seconds (and says so on stderr); the process is
    killed if it is still running ``SHUTDOWN_MARGIN_S`` later (``subprocess.TimeoutExpired``).
    """
    done = subprocess.run(
        client_argv(agent, *client_args, timeout=timeout),
        capture_output=True,
        text=True,
        timeout=timeout + SHUTDOWN_MARGIN_S,
        env=env if env is not None else peer_env(),
        cwd=cwd,
    )
    from tests.conftest import recorded_db, wait_recorded

    db = recorded_db(agent)  # behind a recording proxy: its recorder may outlive it
    if db is not None:
        wait_recorded(db if cwd is None else cwd / db, timeout)
    return done


def transcript(result: subprocess.CompletedProcess[str]) -> list[str]:
    """The client's transcript lines; fails the test, with its stderr, unless it exited 0."""
    assert result.returncode == 0, f"client exited {result.returncode}:\n{result.stderr}"
    return result.stdout.splitlines()


def session_of(lines: Sequence[str]) -> str:
    """The session id from a successful transcript's last line (``session: ID``)."""
    assert lines and lines[-1].startswith("session: "), lines
    return lines[-1].removeprefix("session: ")


def without_session(lines: Sequence[str]) -> list[str]:
    """A transcript without its ``session: ID`` line: the part equal across runs."""
    return [line for line in lines if not line.startswith("session: ")]


def expected_turn(prompt: str, permission: str | None = None, call: int = 1) -> list[str]:
    """What the client prints for one prompt to the example agent in its default (echo) mode.

    ``permission``: None when the agent runs without ``--permission``; else how the client
    answers — ``"allow"`` (default client), ``"deny"`` (``--deny``), ``"error"``
    (``--no-permission``). ``call`` numbers the tool call (``call_N``) within the session.
    """
    lines = [f"prompt: {prompt}"]
    if permission is not None:
        choice = {"allow": "allow-once", "deny": "reject-once", "error": "error"}[permission]
        status = "completed" if permission == "allow" else "failed"
        lines += [
            f"tool_call: call_{call} pending Write notes.txt",
            f"permission: call_{call} {PERMISSION_OPTIONS} -> {choice}",
            f"tool_call_update: call_{call} {status}",
        ]
    return [*lines, "agent: Client sent:", f"agent: {prompt}", "stop: end_turn"]


def expected_echo(
    prompts: Iterable[str] = DEFAULT_PROMPTS, permission: str | None = None, first_call: int = 1
) -> list[str]:
    """The whole transcript of a new session with the example agent, without the session line."""
    lines = [AGENT_INIT_LINE]
    for n, prompt in enumerate(prompts):
        lines += expected_turn(prompt, permission, first_call + n)
    return lines


def expected_replay(prompts: Iterable[str] = DEFAULT_PROMPTS, permission: str | None = None) -> list[str]:
    """The history lines a ``--load`` prints for a session that answered ``prompts`` (up to ``loaded:``).

    The replay holds every update of the earlier turns: the user's prompt and, with
    ``permission``, the tool call and its final status (no permission line: that was a request).
    """
    lines: list[str] = []
    for n, prompt in enumerate(prompts, start=1):
        lines.append(f"user: {prompt}")
        if permission is not None:
            status = "completed" if permission == "allow" else "failed"
            lines += [f"tool_call: call_{n} pending Write notes.txt", f"tool_call_update: call_{n} {status}"]
        lines += ["agent: Client sent:", f"agent: {prompt}"]
    return [*lines, f"loaded: {len(lines)} updates"]
