"""Shared fixtures: a fresh database path and a way to run the proxy as a real subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import settings

# A loaded machine must not turn a slow example into a failure: no per-example deadline anywhere.
# No example database (a fresh clone's first run must not replay an earlier failure) and the
# same examples on every run: the README's test command gives the same answer each time.
settings.register_profile("acp-proxy", deadline=None, database=None, derandomize=True)
settings.load_profile("acp-proxy")

PROXY = [sys.executable, "-m", "acp_proxy"]
FIXTURES = Path(__file__).parent / "fixtures"
TRAFFIC = FIXTURES / "traffic"

# Fixtures that start processes (the proxy with real peers, or an agent): a test that uses one,
# directly or through another fixture, is marked ``spawns`` here; a test that starts processes
# itself carries the mark in its module. ``pytest -m "not spawns"``: the in-process tests only.
SPAWNING_FIXTURES = frozenset(("sdk_recording", "bad_recording"))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if SPAWNING_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.spawns)
    # The in-process tests run first (in about a minute): a broken core fails fast, before the
    # suite spends minutes starting proxies, peers and browsers. The sort is stable.
    items.sort(key=lambda item: item.get_closest_marker("spawns") is not None)


@pytest.fixture(scope="session")
def sdk_recording(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The official Python SDK pair through the proxy, twice: a session with a permission
    request, then the same session loaded again with one more prompt. Shared, read-only."""
    from tests.peers import agent_argv, proxied, run_client, session_of, transcript

    tmp = tmp_path_factory.mktemp("sdk-recording")
    db = tmp / "rec.db"
    agent = agent_argv("--permission", "--state-dir", str(tmp / "state"))
    session = session_of(transcript(run_client(proxied(agent, db), "--prompt", "hello world")))
    transcript(run_client(proxied(agent, db), "--load", session, "--prompt", "again"))
    wait_recorded(db)  # the recorder may finish after its proxy: the readers want both runs whole
    return db, session


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
    """Run `acp-proxy ARGS` to completion; every run is bounded by ``timeout``. A ``run`` that
    records: until its recorder is done too (it may outlive the proxy)."""
    done = subprocess.run(
        [*PROXY, *args],
        input=input,
        capture_output=True,
        timeout=timeout,
        env=env or proxy_env(),
        cwd=cwd,
    )
    db = recorded_db(args)
    if db is not None:
        wait_recorded(db if cwd is None else cwd / db, timeout)
    return done


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


def wait_for_output(stream: object, needle: bytes, timeout: float) -> bytes:
    """Read ``stream`` until what was read holds ``needle`` (a deadline, never a sleep); all of it."""
    import select
    import time

    fd = stream.fileno()  # type: ignore[attr-defined]
    deadline = time.monotonic() + timeout
    seen = b""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.1)
        if ready:
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            seen += chunk
            if needle in seen:
                return seen
    raise AssertionError(f"no {needle!r} within {timeout}s; got {seen!r}")


def watchdog(proc: subprocess.Popen[bytes], timeout: float) -> threading.Timer:
    """Kill ``proc`` after ``timeout`` seconds unless cancelled first (every spawn is bounded)."""
    timer = threading.Timer(timeout, proc.kill)
    timer.daemon = True
    timer.start()
    return timer


def python_agent(code: str) -> list[str]:
    """An agent command that runs a snippet of Python (for lifecycle tests)."""
    return [sys.executable, "-c", code]


def wait_recorded(db: Path | str, timeout: float = 60) -> None:
    """Until no run into ``db`` has a live recorder: the proxy exits with its agent, its recorder
    may finish after it (a journal nobody holds, a killed run's, is not waited for)."""
    from acp_proxy.record.recovery import wait_recorded as wait

    assert wait(Path(db), timeout), f"the runs in {db} were not recorded within {timeout}s"


def recorded_db(args: Sequence[str]) -> str | None:
    """The database an ``acp-proxy run`` command line records into, if it names one."""
    words = list(args)
    end = words.index("--") if "--" in words else len(words)
    if "run" not in words[:end] or "--db" not in words[:end]:
        return None
    at = words.index("--db")
    return words[at + 1] if at + 1 < end else None
