"""The one harness of the remote tests: ``acp-proxy serve`` (``--upstream URL`` or ``-- AGENT``)
started on a free loopback port, waited for and stopped; the peer servers the tests put behind it
(the SDK's example server, the HTML, gzip, stream and SSE-answer servers); and reading back what
the database holds. Every process started here has a watchdog."""

from __future__ import annotations

import contextlib
import signal
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import PROXY, proxy_env, wait_for_output, wait_recorded, watchdog

HERE = Path(__file__).parent
ROOT = HERE.parents[2]
TIMEOUT = 60  # seconds for one exchange or one start-up (a loaded machine is slow)
LIFETIME = 300  # seconds a serve may live before its watchdog kills it
INITIALIZE = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}}


class Served:
    """A running ``acp-proxy serve``: ``base`` is http://HOST:PORT, ``url`` its /acp endpoint."""

    def __init__(self, proc: subprocess.Popen[bytes], said: str, timer: threading.Timer) -> None:
        self.proc = proc
        self.said = said  # its first line: where it serves, in front of what
        base = said.split("serving ", 1)[1].split()[0]
        self.base = base
        self.url = base + "/acp"
        self.timer = timer

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.base.removeprefix("http://").rsplit(":", 1)
        return host, int(port)

    def endpoint(self, kind: str) -> str:
        """The /acp endpoint for an SDK client of ``kind`` (http or ws)."""
        return self.url.replace("http", "ws", 1) if kind == "ws" else self.url

    def stop(self) -> str:
        """SIGTERM (serve then finishes its runs' recordings); what it said on stderr."""
        if self.proc.poll() is not None:
            return ""
        self.proc.send_signal(signal.SIGTERM)
        _, err = self.proc.communicate(timeout=TIMEOUT)
        self.timer.cancel()
        return err.decode()

    def kill(self) -> None:
        self.timer.cancel()
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=TIMEOUT)


def start_serve(*args: str, cwd: Path | None = None, lifetime: float = LIFETIME) -> Served:
    """``acp-proxy serve --listen 127.0.0.1:0 ARGS...`` once it says where it serves. The caller
    stops it (``stop``, then ``kill`` in a ``finally``) or uses the ``serving`` fixture."""
    proc = subprocess.Popen(
        [*PROXY, "serve", "--listen", "127.0.0.1:0", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=proxy_env(),
        cwd=cwd,
    )
    timer = watchdog(proc, lifetime)
    try:
        said = wait_for_output(proc.stderr, b"\n", TIMEOUT).decode()
    except AssertionError as exc:  # say whether serve died or is only slow to start
        timer.cancel()
        proc.kill()
        proc.wait(timeout=TIMEOUT)
        raise AssertionError(f"{exc}; serve's exit status: {proc.poll()}") from None
    assert "serving http://127.0.0.1:" in said, said
    return Served(proc, said, timer)


@pytest.fixture
def serving() -> Iterator[Callable[..., Served]]:
    """``start_serve``, each serve it started killed at the end of the test if still running."""
    started: list[Served] = []

    def start(*args: str, **kwargs: Any) -> Served:
        served = start_serve(*args, **kwargs)
        started.append(served)
        return served

    yield start
    for served in started:
        served.kill()


@contextlib.contextmanager
def peer(script: str, lifetime: float = 900) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """One of this folder's peer servers (it prints ``listening PORT``): its process and URL."""
    proc = subprocess.Popen([sys.executable, str(HERE / script)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    timer = watchdog(proc, lifetime)
    try:
        line = wait_for_output(proc.stdout, b"\n", TIMEOUT)
        yield proc, f"http://127.0.0.1:{int(line.split()[1])}/acp"
    finally:
        timer.cancel()
        proc.kill()
        proc.wait(timeout=TIMEOUT)


@pytest.fixture(scope="module")
def upstream() -> Iterator[str]:
    """The SDK's example HTTP/WebSocket server (the echo agent), one per test module."""
    with peer("sdk_server.py") as (_, url):
        yield url


# -- what the database holds ------------------------------------------------------------------


def _rows(db_path: Path, sql: str) -> list[dict[str, Any]]:
    wait_recorded(db_path, TIMEOUT)
    with sqlite3.connect(db_path) as conn:
        conn.row_factory = sqlite3.Row
        return [dict(r) for r in conn.execute(sql)]


def frames(db_path: Path) -> list[dict[str, Any]]:
    return _rows(db_path, "select * from frames order by run_id, seq")


def runs(db_path: Path) -> list[dict[str, Any]]:
    return _rows(db_path, "select * from runs order by id")


def fault_rows(db_path: Path) -> list[tuple[Any, ...]]:
    """(run_id, seq, action) of each ``faults`` row."""
    found = _rows(db_path, "select * from faults order by run_id, seq, action")
    return [(r["run_id"], r["seq"], r["action"]) for r in found]


def sdk_client(kind: str, url: str, prompt: str) -> list[str]:
    """The SDK's example HTTP or WebSocket client's conversation: what it saw, sorted (its
    notification and answer lines race in the client)."""
    done = subprocess.run(
        [sys.executable, str(HERE / "sdk_clients.py"), kind, url, prompt],
        capture_output=True,
        timeout=TIMEOUT,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    return sorted(done.stdout.splitlines())
