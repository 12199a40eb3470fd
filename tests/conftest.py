"""Shared fixtures: a fresh database path and a way to run the proxy as a real subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest

PROXY = [sys.executable, "-m", "acp_proxy"]
FIXTURES = Path(__file__).parent / "fixtures"
TRAFFIC = FIXTURES / "traffic"


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "rec.db"


def proxy_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("ACP_PROXY_DB", None)
    env.update(extra)
    return env


def run_proxy(
    args: Sequence[str],
    *,
    input: bytes | None = b"",
    timeout: float = 60,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """Run `acp-proxy ARGS` to completion; every run is bounded by ``timeout``."""
    return subprocess.run(
        [*PROXY, *args],
        input=input,
        capture_output=True,
        timeout=timeout,
        env=env or proxy_env(),
        cwd=cwd,
    )


def start_proxy(args: Sequence[str], *, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Start `acp-proxy ARGS` with all three pipes, for tests that talk to it as it runs.

    Pair it with ``watchdog``: nothing here bounds its lifetime on its own.
    """
    return subprocess.Popen(
        [*PROXY, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env or proxy_env(),
    )


def watchdog(proc: subprocess.Popen[bytes], timeout: float) -> threading.Timer:
    """Kill ``proc`` after ``timeout`` seconds unless cancelled first (every spawn is bounded)."""
    timer = threading.Timer(timeout, proc.kill)
    timer.daemon = True
    timer.start()
    return timer


def python_agent(code: str) -> list[str]:
    """An agent command that runs a snippet of Python (for lifecycle tests)."""
    return [sys.executable, "-c", code]
