"""The test API for remote agents: acp-proxy, with fault rules, in front of an agent at a URL.

Owns: the command lines that put the proxy between a client under test and a remote agent —
``argv`` for a stdio client (``acp-proxy run --connect URL``: the client spawns it in place of
an agent) and ``serve()`` for a remote client (``acp-proxy serve --upstream URL`` on a free
loopback port: the client connects to the URL it yields) — and reading back what was recorded,
as ``ProxiedAgent`` does (it is one: the same ``run``, ``frames``, ``faults``, ``never_got``).

Must not know: how the proxy relays or records.

::

    def test_my_editor_against_a_hosted_agent(acp_proxy):
        agent = acp_proxy("ws://127.0.0.1:8000/acp", headers=["Authorization: Bearer t"])
        result = agent.run(["my-editor", "--agent", " ".join(agent.argv)])
        assert agent.frames("method:session/prompt")

    def test_my_remote_client(acp_proxy):
        agent = acp_proxy("http://127.0.0.1:8000/acp", faults=["drop if method:session/prompt kind:response"])
        with agent.serve() as url:          # http://127.0.0.1:PORT/acp: WebSocket or HTTP
            run_my_client(url)
        assert agent.faults()
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from urllib.parse import urlsplit

from acp_proxy.testing.agent import ProxiedAgent


class ProxiedRemote(ProxiedAgent):
    """A remote agent (``url``: ws://, wss://, http:// or https://) behind the proxy."""

    def __init__(
        self,
        url: str,
        *,
        db: str | Path,
        faults: Sequence[str] = (),
        faults_file: str | Path | None = None,
        seed: int | None = None,
        headers: Sequence[str] = (),
        stderr_file: str | Path | None = None,
        python: str = sys.executable,
        timeout: float = 60.0,
    ) -> None:
        if urlsplit(url).scheme not in ("ws", "wss", "http", "https"):
            raise ValueError(f"url: a ws://, wss://, http:// or https:// address, not {url!r}")
        super().__init__(
            [url], db=db, faults=faults, faults_file=faults_file, seed=seed, stderr_file=stderr_file, timeout=timeout
        )
        self.url = url
        self.python = python
        self.faults_given = list(faults)
        self.seed = seed
        options = ["--db", str(self.db)]
        for rule in faults:
            options += ["--fault", rule]
        if faults_file is not None:
            options += ["--faults", str(faults_file)]
        if seed is not None:
            options += ["--seed", str(seed)]
        if self.stderr_file is not None:
            options += ["--stderr-file", str(self.stderr_file)]
        for header in headers:
            options += ["--header", header]
        self.argv = [python, "-m", "acp_proxy", "run", *options, "--connect", url]
        """The command line a stdio client under test launches in place of an agent's."""

    @contextlib.contextmanager
    def serve(self) -> Iterator[str]:
        """``acp-proxy serve --upstream URL`` on a free loopback port, for a remote client: the
        proxy's address for the same path. SIGTERM at the end (the recordings are finished)."""
        command = [self.python, "-m", "acp_proxy", "serve", "--listen", "127.0.0.1:0", "--upstream", self.url]
        command += ["--db", str(self.db)]
        for rule in self.faults_given:
            command += ["--fault", rule]
        if self.seed is not None:
            command += ["--seed", str(self.seed)]
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        timer = threading.Timer(self.timeout * 2, proc.kill)  # a proxy that never stops is stopped
        timer.start()
        try:
            assert proc.stderr is not None
            first = proc.stderr.readline().decode("utf-8", "replace")
            self._keep_stderr(first.encode(), proc)
            if "serving " not in first:
                proc.wait(timeout=self.timeout)
                raise RuntimeError(f"acp-proxy serve did not start: {first.strip() or self.stderr().strip()}")
            base = first.split("serving ", 1)[1].split()[0]
            yield base + (urlsplit(self.url).path or "/")
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=self.timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            timer.cancel()

    def _keep_stderr(self, first: bytes, proc: subprocess.Popen[bytes]) -> None:
        """serve's stderr, after its first line, copied to ``stderr_file`` (or ours) as it comes."""
        target = self.stderr_file

        def copy() -> None:
            assert proc.stderr is not None
            with contextlib.ExitStack() as stack:
                out = stack.enter_context(open(target, "ab")) if target is not None else sys.stderr.buffer
                out.write(first)
                out.flush()
                for line in proc.stderr:
                    out.write(line)
                    out.flush()

        threading.Thread(target=copy, daemon=True).start()
