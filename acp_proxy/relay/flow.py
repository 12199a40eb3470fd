"""The relay's first steps, before the relay's own modules load: the journal, its first record,
a thread per direction, the recorder.

Owns: ``Flow`` (the relay without a gate: a ``Pump`` thread per direction, started as soon as
the agent and the journal exist) and ``start`` (everything ``run`` does before it needs trio,
called by the launcher right after the agent's spawn, before it imports ``stdio``: an agent
that answers at once is heard while the rest loads), and giving fds 0-2 back as they were.

Must not know: trio, signals, the shutdown sequence (``stdio``'s), SQL, JSON-RPC. Import-cheap:
only the journal, the pumps and the standard library's cheapest modules at import.
"""

from __future__ import annotations

import os
import sys

from acp_proxy.record import journal as jr
from acp_proxy.relay.pumps import CloseOnce, Pump, deepen
from acp_proxy.relay.recording import Recording
from acp_proxy.relay.spawn import Agent, Begun, say

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing before the agent starts
if TYPE_CHECKING:
    from acp_proxy.relay.options import RunOptions

STARTING_SWITCH_INTERVAL = 0.0002  # seconds: see Flow


class Started:
    """What ``start`` left for ``stdio.run``: the recording (None: --no-record, or it could not be
    created: ``error``), the ``Flow`` if it runs, and an exception ``run`` raises in its place."""

    def __init__(self) -> None:
        self.recording: Recording | None = None
        self.flow: Flow | None = None
        self.error: Exception | None = None


def start(options: RunOptions, begun: Begun) -> Started:
    """Once the agent's exec is confirmed: the journal and its START record, then (without a
    gate, not on a terminal) the ``Flow``'s threads and the recorder. Never raises: what went
    wrong is ``Started.error``, raised by ``stdio.run``, which stops the agent and says so."""
    started = Started()
    try:
        begun.confirm()
        if options.db_path is not None:
            started.recording = Recording(options, begun.attached)
        agent, recording = begun.agent, started.recording
        if agent is None:
            return started  # ``run`` records the failed exec
        if recording is not None:
            if options.control and not begun.attached:
                from acp_proxy.relay.control import socket_path

                options.options["control"] = str(socket_path(recording.journal.path))
            recording.start(agent.pid, marker=begun.marker)
        if begun.attached or options.needs_gate():
            return started
        # Without a gate the bytes flow from here on, while the recorder starts and trio loads.
        started.flow = Flow(agent, None if recording is None else recording.journal)
        if recording is not None:
            recording.start_recorder()
    except Exception as exc:  # raised again by ``run``, which cleans up after it
        started.error = exc
    return started


class Flow:
    """The relay without a gate: a ``Pump`` thread per direction, started as soon as the agent
    and the journal exist, before trio (~50 ms to import) or the recorder: an agent that
    answers at once is heard at once. Each chunk is journaled before it is forwarded, as
    always. Until trio runs, what the threads report waits in the notice pipe."""

    def __init__(self, agent: Agent, journal: jr.JournalWriter | None) -> None:
        self.close = CloseOnce()  # threads close what they are done with: each fd once, never a reused one
        self.agent = agent
        self.client_out = os.dup(1)
        self.c2a = Pump(os.dup(0), agent.stdin_fd, jr.C2A, journal)
        self.a2c = Pump(agent.stdout_fd, self.client_out, jr.A2C, journal, deepen(agent.stdout_fd))
        self.err = Pump(agent.stderr_fd, os.dup(2), jr.STDERR, journal)
        self.pumps = (self.c2a, self.a2c, self.err)
        self.notice_r, self.notice_w = os.pipe()
        os.set_blocking(self.notice_r, False)
        os.set_blocking(self.notice_w, False)  # a full pipe already holds a notice
        self.hung_up = False
        self.finished = False
        self.a2c.on_broken = self._client_hung_up
        self.a2c.on_end = self._agent_output_ended
        self.c2a.on_end = lambda: self.close(agent.stdin_fd)
        for pump in self.pumps:
            pump.notify_fd = self.notice_w
        # Until trio runs, this thread imports (CPU-bound, holding the GIL): a pump waking up
        # would wait up to the switch interval (5 ms) for the GIL at each of its syscalls.
        self.switch_interval = sys.getswitchinterval()
        sys.setswitchinterval(STARTING_SWITCH_INTERVAL)
        for pump, name in zip(self.pumps, ("c2a", "a2c", "stderr"), strict=True):
            pump.start(name)

    def _client_hung_up(self) -> None:
        say("the client closed the agent's output; stopping the agent")
        self.hung_up = True
        self.a2c.notify()

    def _agent_output_ended(self) -> None:
        # The agent closed its stdout (it may still run): the client hears the end now.
        self.a2c.dst_open = False
        self.close(self.client_out)
        detach_stdout()

    def settled(self) -> None:
        """Trio runs: the main thread mostly waits now, and the pumps keep the usual interval."""
        sys.setswitchinterval(self.switch_interval)

    def stop(self) -> None:
        for pump in self.pumps:
            pump.stop()

    def finish(self) -> None:
        """Stop the threads and close every descriptor they used (once; from the main thread)."""
        if self.finished:
            return
        self.finished = True
        self.settled()
        self.stop()
        # A pump waits only in poll, with its stop pipe: it ends at once.
        ended = all([pump.finished.wait(5.0) for pump in self.pumps])
        for pump in self.pumps:
            pump.close()
        agent = self.agent
        for fd in (self.c2a.src, agent.stdin_fd, agent.stdout_fd, self.client_out, agent.stderr_fd, self.err.dst):
            self.close(fd)
        if ended:  # else a pump may still write its notice: its descriptor must not be reused
            for fd in (self.notice_r, self.notice_w):
                os.close(fd)
        restore_blocking()


def detach_stdout() -> None:
    """Point fd 1 at /dev/null, letting go of the pipe it held (nothing else may reach it)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
    except OSError:
        return
    try:
        os.dup2(devnull, 1)
    except OSError:
        pass
    finally:
        os.close(devnull)


def restore_blocking() -> None:
    # PipeStream made the shared descriptions non-blocking; the editor's side may share them.
    for fd in (0, 1, 2):
        try:
            os.set_blocking(fd, True)
        except OSError:
            pass
