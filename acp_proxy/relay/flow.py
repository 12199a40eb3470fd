"""The relay's first steps, before the relay's own modules load: the journal, its first record,
a thread per direction, and a wait for the agent's first answer.

Owns: ``Flow`` (the relay without a gate: a ``Pump`` thread per direction, started as soon as
the agent and the journal exist) and ``start`` (everything ``run`` does before it needs trio,
called by the launcher right after the agent's spawn, before it imports ``stdio``), the wait
that keeps the main thread out of the pumps' way until the agent has answered
(``Flow.hold_off``: the recorder and trio load after it), and giving fds 0-2 back as they were.

Must not know: trio, signals, the shutdown sequence (``stdio``'s), SQL, JSON-RPC. Import-cheap:
only the journal, the pumps and the standard library's cheapest modules at import.
"""

from __future__ import annotations

import os
import sys
import time

from acp_proxy.record import journal as jr
from acp_proxy.relay.pumps import CloseOnce, Pump, deepen
from acp_proxy.relay.recording import Recording
from acp_proxy.relay.spawn import Agent, Begun, EarlySignals, say

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing before the agent starts
if TYPE_CHECKING:
    from acp_proxy.relay.options import RunOptions

STARTING_SWITCH_INTERVAL = 0.0002  # seconds: see Flow
# How long the launcher waits for the agent's first answer before it loads the rest of the relay
# (``Flow.hold_off``): an agent that takes longer is busy starting, and the relay loads meanwhile.
HOLD_OFF_SECONDS = 0.1


class Started:
    """What ``start`` left for ``stdio.run``: the recording (None: --no-record, or it could not be
    created: ``error``), the ``Flow`` if it runs, and an exception ``run`` raises in its place."""

    def __init__(self) -> None:
        self.recording: Recording | None = None
        self.flow: Flow | None = None
        self.error: Exception | None = None


def start(options: RunOptions, begun: Begun) -> Started:
    """Once the agent's exec is confirmed: the journal and its START record, then (without a
    gate, not on a terminal) the ``Flow``'s threads, and the wait for the agent's first answer
    (``Flow.hold_off``; ``stdio.run`` starts the recorder after it). Never raises: what went
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
        # Without a gate the bytes flow from here on; the recorder and trio come once the agent
        # has answered (``Flow.hold_off``), and ``stdio.run`` starts them.
        started.flow = Flow(agent, None if recording is None else recording.journal)
        started.flow.hold_off(begun.early)
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
        # The client's pipe as deep as the agent's: a 1 MiB read then leaves in one write, not
        # in sixteen, each waiting for the client to empty 64 KiB (a storm of small frames ran
        # at 0.70x a ``cat`` hop, 0.91-0.97x with it). Nothing changes for a terminal or a file.
        deepen(self.client_out)
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

    def hold_off(self, early: EarlySignals, timeout: float = HOLD_OFF_SECONDS) -> None:
        """Wait, holding nothing, until the agent's first output has been forwarded, a pump
        has finished, the client hung up, a signal came, or ``timeout`` passed.

        What follows (starting the recorder, importing the relay and trio: ~100 ms of CPU)
        would hold the GIL that the pumps need at each of their syscalls, and on a busy
        machine it would take the core they need: an agent that answers at once waited for
        it. Meanwhile the pumps journal and forward as always; nothing else needs trio yet
        (a signal wakes this wait and is forwarded by the relay, as ``EarlySignals`` keeps it)."""
        import select
        from _signal import set_wakeup_fd

        a2c = self.a2c
        a2c.tell_first = True
        early.wake_fd = self.notice_w
        try:
            # Also a byte from the C-level handler: a signal that lands just before ``poll``
            # would otherwise run its Python handler (``early``'s byte) only after the timeout.
            wakeup = set_wakeup_fd(self.notice_w, warn_on_full_buffer=False)
        except ValueError:  # not the main thread: EarlySignals' own byte wakes it
            wakeup = None
        poller = select.poll()
        poller.register(self.notice_r, select.POLLIN)
        deadline = time.monotonic() + timeout
        try:
            while not (
                a2c.delivered or self.hung_up or early.pending or any(pump.finished.is_set() for pump in self.pumps)
            ):
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                # The notice pipe is left as it is: the relay's watcher reads it and looks again.
                poller.poll(max(1, int(left * 1000)))
        finally:
            a2c.tell_first = False
            early.wake_fd = -1
            if wakeup is not None:
                set_wakeup_fd(wakeup)

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
