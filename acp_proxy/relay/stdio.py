"""The relay: the only code that touches trio, processes, pipes and signals.

Owns: starting the agent before anything heavy is loaded (in a process group of its own, with
a parent-death signal, an environment marker for its descendants), moving bytes client -> agent
and agent -> client as soon as they are read, passing the agent's stderr through, journaling
every chunk just before it is forwarded, starting the recorder that follows the journal, the
shutdown sequence (client EOF -> close agent stdin -> grace -> SIGTERM -> grace -> SIGKILL, to
the agent's group and to every process carrying the run's marker), forwarding SIGINT/SIGTERM/
SIGHUP to the agent's group, and reporting the agent's exit status so the proxy can reproduce it.

Must not know: SQL, JSON-RPC, ACP. Without an option that needs a decision per frame, it never
looks inside the bytes: forwarding does not wait for a newline, and nothing but agent bytes is
ever written to stdout.

Rule: journal, forward, and never wait for the recording. A chunk is appended to the run's
journal (one ``writev``) and then forwarded; the recorder reads the journal at its own pace,
so the conversation never waits for the recorder, its writer or a database lock. When the
agent closes its stdout, the client's stdout is closed at once.

Shape: without a gate, each direction is a ``Pump`` thread (poll, read, journal, write: the
``Flow``) and trio only waits for the agent, forwards signals and runs the shutdown; with a gate
(faults, notice stripping), the directions are trio tasks that carry out the gate's steps. Both
ways of moving bytes are in ``pumps.py``; this module decides which runs, and when it stops.

Start-up order (an editor waits for the agent's first answer): check that the database can be
recorded into (a cheap read-only look), spawn the agent, create the journal and write its
first record, start the ``Flow`` (without a gate) and wait, holding nothing, until the agent
has answered or 0.1 s has passed (``flow.start``: the launcher calls it before this module is
imported); only then start the recorder and import this module and trio — they overlap with
the agent's own start-up, and an agent that answers at once is heard before either is loaded.
What the threads report before trio runs waits in a pipe.
"""

from __future__ import annotations

import errno
import os
import signal
import sys
import time
from pathlib import Path

from acp_proxy.record import journal as jr
from acp_proxy.record import supervise
from acp_proxy.relay.flow import Flow, Started, detach_stdout, restore_blocking
from acp_proxy.relay.flow import start as start_flow
from acp_proxy.relay.options import ExitStatus, RunOptions
from acp_proxy.relay.pumps import CHUNK, close_quietly, open_stream, trio_streams
from acp_proxy.relay.recording import Recording
from acp_proxy.relay.spawn import (  # noqa: F401 - the agent's start, as the relay's own API
    FORWARDED_SIGNALS,
    Agent,
    AgentProcess,
    Begun,
    EarlySignals,
    RelayError,
    begin,
    check_std_fds,
    resolve_agent,
    say,
    spawn_agent,
)

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing before the agent starts
if TYPE_CHECKING:
    from typing import Any

    import trio

    from acp_proxy.faults.gate import Gate, Step

_CORE_DUMPING = (signal.SIGQUIT, signal.SIGABRT, signal.SIGSEGV, signal.SIGBUS, signal.SIGFPE, signal.SIGILL)
_DIRECTION_CODE = {"c2a": jr.C2A, "a2c": jr.A2C}


def exec_failure(name: str, executable: str, exc: OSError) -> ExitStatus:
    """Exit like a shell would when exec fails: 127 for a missing file or interpreter, else 126."""
    if exc.errno == errno.ENOENT:
        interpreter = _interpreter(executable)
        if interpreter is not None:
            say(f"{name}: bad interpreter {interpreter}: no such file or directory")
        else:
            say(f"{name}: no such file or directory")
        return ExitStatus(code=127)
    say(f"{name}: {(exc.strerror or str(exc)).lower()}")
    return ExitStatus(code=126)


def _interpreter(executable: str) -> str | None:
    try:
        with open(executable, "rb") as handle:
            first = handle.readline(256)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    words = first[2:].split()
    return words[0].decode(errors="replace") if words else None


# -- the relay -----------------------------------------------------------------------------


class Relay:
    def __init__(
        self,
        options: RunOptions,
        agent: Agent,
        recording: Recording | None,
        marker: str,
        early: EarlySignals | None = None,
        flow: Flow | None = None,
    ) -> None:
        import trio

        self.options = options
        self.agent = agent
        self.recording = recording
        self.journal = recording.journal if recording is not None else None
        self.marker = marker
        self.early = early
        self.flow = flow  # without a gate: the bytes' threads, started before trio was imported
        self.streams = trio_streams()
        self.shutdown_started = False
        self.agent_exited = trio.Event()
        self.gate: Gate | None = None
        if options.needs_gate():
            from acp_proxy.faults.gate import Gate  # only then: it pulls in the decoder and the ACP tables

            live = None
            if options.control:
                from acp_proxy.faults.live import LiveControl

                live = LiveControl(options.fault_plan, time.time_ns)
                for text in options.breakpoints:
                    live.handle({"op": "break", "filter": text})
            self.gate = Gate(strip_replayed_notices=options.strip_replayed_notices, plan=options.fault_plan, live=live)
        self.control: Any = None  # the ControlServer, with --control
        self.agent_in: Any = None
        self.client_out: Any = None
        # With a gate, both pumps may write to one pipe (an error reply travels back): a lock
        # keeps each write whole. Without one, each pipe has a single writer and no lock.
        self.write_locks = {"c2a": trio.StrictFIFOLock(), "a2c": trio.StrictFIFOLock()}
        self.pipe_open = {"c2a": True, "a2c": True}
        self.undelivered_told = {"c2a": False, "a2c": False}

    def _journal(self, kind: int, direction: int, payload: bytes = b"") -> None:
        if self.journal is not None:
            self.journal.record(kind, direction, time.time_ns(), payload)

    async def main(self) -> ExitStatus:
        import trio

        # Signals are caught before the agent exists (EarlySignals), so none can slip between
        # spawn and watch.
        with trio.open_signal_receiver(*FORWARDED_SIGNALS) as signals:
            if self.early is not None:
                for sig in self.early.pending:
                    self._signal_group(sig)
            if self.gate is None:
                assert self.flow is not None
                return await self._relay_with_threads(signals, self.flow)
            streams = self.streams
            PipeStream = streams[1]
            self.agent_in = PipeStream(self.agent.stdin_fd)
            agent_out = PipeStream(self.agent.stdout_fd)
            agent_err = PipeStream(self.agent.stderr_fd)
            client_in = open_stream(os.dup(0), streams)
            client_out = open_stream(os.dup(1), streams)
            err_out = open_stream(os.dup(2), streams)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._forward_signals, signals)
                self._start_control(nursery)
                c2a_scope = trio.CancelScope()
                nursery.start_soon(self._pump_c2a, client_in, c2a_scope, nursery)
                a2c_done = trio.Event()
                stderr_done = trio.Event()
                nursery.start_soon(self._pump_a2c, agent_out, client_out, a2c_done, nursery)
                nursery.start_soon(self._pump_stderr, agent_err, err_out, stderr_done)
                returncode = await self._wait_agent()
                self.agent_exited.set()
                await self._drain_after_exit(a2c_done, stderr_done)
                c2a_scope.cancel()
                nursery.cancel_scope.cancel()
            for stream in (client_in, client_out, err_out, self.agent_in, agent_out, agent_err):
                await close_quietly(stream)
            restore_blocking()
            return ExitStatus.from_returncode(returncode)

    def _start_control(self, nursery: trio.Nursery) -> None:
        path = self.options.options.get("control")
        if self.gate is None or self.gate.live is None or path is None:
            return
        from acp_proxy.relay.control import ControlServer, listen

        try:
            sock = listen(Path(path))
        except OSError as exc:
            say(f"cannot create the control socket {path}: {(exc.strerror or str(exc)).lower()}")
            return
        recording = self.recording

        async def inject(steps: list[Step]) -> None:
            await self._carry_out(steps, time.time_ns(), nursery)

        meta = recording.meta if recording else lambda _: None
        self.control = ControlServer(self.gate.live, self.gate, meta, inject)
        nursery.start_soon(self.control.serve, sock, Path(path))

    async def _relay_with_threads(self, signals: Any, flow: Flow) -> ExitStatus:
        """The relay without a gate: the ``Flow``'s threads move the bytes (they may have since
        before trio was imported); trio waits for the agent, forwards signals, shuts down."""
        import trio

        flow.settled()
        c2a_done, a2c_done, err_done = trio.Event(), trio.Event(), trio.Event()
        done = ((flow.c2a, c2a_done), (flow.a2c, a2c_done), (flow.err, err_done))

        async def watch(nursery: trio.Nursery) -> None:
            # The pumps write a byte to the notice pipe when they finish or the client hangs up.
            hung_up_seen = False
            while True:
                for pump, event in done:
                    if pump.finished.is_set() and not event.is_set():
                        event.set()
                        if pump is flow.c2a and not self.agent_exited.is_set():
                            self._start_shutdown(nursery)  # the client closed its end
                if flow.hung_up and not hung_up_seen:
                    hung_up_seen = True
                    self._start_shutdown(nursery)
                await trio.lowlevel.wait_readable(flow.notice_r)
                try:
                    os.read(flow.notice_r, 64)
                except BlockingIOError:
                    pass

        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._forward_signals, signals)
                nursery.start_soon(watch, nursery)
                returncode = await self._wait_agent()
                self.agent_exited.set()
                flow.c2a.stop()  # nobody will read what the client sends now
                await self._drain_after_exit(a2c_done, err_done)
                nursery.cancel_scope.cancel()
        finally:
            flow.stop()  # each pump ends at once; ``run`` closes the descriptors after trio
        return ExitStatus.from_returncode(returncode)

    async def _wait_agent(self) -> int:
        import trio

        process = self.agent.process
        try:
            pidfd = os.pidfd_open(process.pid)
        except (AttributeError, OSError):
            pidfd = -1
        if pidfd >= 0:
            try:
                await trio.lowlevel.wait_readable(pidfd)
            finally:
                os.close(pidfd)
            return process.wait()
        return await trio.to_thread.run_sync(process.wait, abandon_on_cancel=True)

    async def _pump_c2a(self, client_in: Any, scope: trio.CancelScope, nursery: trio.Nursery) -> None:
        import trio

        gate = self.gate
        journal = self.journal
        with scope:
            try:
                while True:
                    try:
                        data = await client_in.receive_some(CHUNK)
                    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                        data = b""
                    if not data:
                        break
                    ts = time.time_ns()
                    if gate is None:
                        start = journal.data(jr.C2A, ts, data) if journal is not None else 0
                        await self._send("c2a", data, nursery, start)
                    else:
                        await self._carry_out(gate.chunk("c2a", data), ts, nursery)
                if gate is not None:
                    await self._carry_out(gate.end("c2a"), time.time_ns(), nursery)
            finally:
                self._journal(jr.EOF, jr.C2A)
        await self._close_pipe("agent-stdin")
        self._start_shutdown(nursery)

    async def _pump_a2c(self, agent_out: Any, client_out: Any, done: trio.Event, nursery: trio.Nursery) -> None:
        self.client_out = client_out
        gate = self.gate
        journal = self.journal
        try:
            while True:
                data = await agent_out.receive_some(CHUNK)
                if not data:
                    break
                ts = time.time_ns()
                if gate is None:
                    start = journal.data(jr.A2C, ts, data) if journal is not None else 0
                    await self._send("a2c", data, nursery, start)
                else:
                    await self._carry_out(gate.chunk("a2c", data), ts, nursery)
            if gate is not None:
                await self._carry_out(gate.end("a2c"), time.time_ns(), nursery)
        finally:
            import trio

            self._journal(jr.EOF, jr.A2C)
            # The agent closed its stdout (it may still run): the client hears the end now.
            with trio.CancelScope(shield=True):
                await self._close_pipe("client-stdout")
            done.set()

    async def _send(self, direction: str, data: bytes, nursery: trio.Nursery, start: int = 0) -> bool:
        """Write towards ``direction``'s receiver; True if all of it got there. A receiver that
        went away ends the run cleanly, and the journal learns what it did not get."""
        if self.pipe_open[direction]:
            stream = self.agent_in if direction == "c2a" else self.client_out
            if self.gate is None:
                sent = await stream.send_counted(data)
            else:
                async with self.write_locks[direction]:
                    sent = await stream.send_counted(data)
            if sent == len(data):
                return True
            self.pipe_open[direction] = False
            if direction == "a2c":
                # The client stopped reading: nobody will hear the agent again, so end the run
                # as if the client had closed its end, but keep recording what the agent says.
                say("the client closed the agent's output; stopping the agent")
                self._start_shutdown(nursery)
        else:
            sent = 0
        if self.journal is not None and not self.undelivered_told[direction]:
            self.undelivered_told[direction] = True
            self.journal.undelivered(_DIRECTION_CODE[direction], start, sent)
        return False

    async def _carry_out(self, steps: list[Step], ts: int, nursery: trio.Nursery) -> None:
        import trio

        from acp_proxy.faults.gate import ClosePipe, Forward, Hold, Note, Pause, Send, Signal

        journal = self.journal
        for step in steps:
            if isinstance(step, Hold):
                # This direction waits (the frames behind it too); the other one flows.
                from acp_proxy.relay.control import wait_held

                assert self.gate is not None
                decision = await wait_held(self.control, self.gate, step)
                await self._carry_out(self.gate.released(step, decision), time.time_ns(), nursery)
            elif isinstance(step, Forward):
                code = _DIRECTION_CODE[step.direction]
                start = journal.data(code, ts, step.data) if journal is not None else 0
                await self._send(step.direction, step.data, nursery, start)
            elif isinstance(step, Send):
                # Its line was journaled just before (the Note): what failed is after every DATA byte.
                code = _DIRECTION_CODE[step.direction]
                start = journal.journaled[code] if journal is not None else 0
                noted = self.pipe_open[step.direction]
                if not await self._send(step.direction, step.data, nursery, start) and noted and journal is not None:
                    journal.record(jr.UNSENT, code, time.time_ns())
            elif isinstance(step, Note):
                if journal is not None:
                    meta = step.meta
                    if meta.get("forwarded", 1) and not self.pipe_open[step.direction]:
                        # Its write will find the pipe closed.
                        why = "never reached its receiver (the pipe was closed)"
                        note = f"{meta['note']}; {why}" if meta.get("note") else why
                        meta = {**meta, "forwarded": 0, "note": note}
                    at = step.ts_ns or ts  # a held frame's time is its key (relay/control.py)
                    journal.record(jr.LINE, _DIRECTION_CODE[step.direction], at, jr.line_payload(step.line, meta))
            elif isinstance(step, Pause):
                await trio.sleep(step.seconds)
            elif isinstance(step, Signal):
                self._signal_group(step.signum)
            elif isinstance(step, ClosePipe):
                await self._close_pipe(step.pipe)

    async def _close_pipe(self, pipe: str) -> None:
        direction = "c2a" if pipe == "agent-stdin" else "a2c"
        self.pipe_open[direction] = False
        stream = self.agent_in if direction == "c2a" else self.client_out
        if stream is not None:
            async with self.write_locks[direction]:
                await close_quietly(stream)
        if pipe == "client-stdout":
            # The relay writes through a duplicate: fd 1 itself still holds the client's pipe,
            # and the client reads EOF only once no descriptor of ours does.
            detach_stdout()

    async def _pump_stderr(self, agent_err: Any, err_out: Any, done: trio.Event) -> None:
        journal = self.journal
        err_open = True
        try:
            while True:
                data = await agent_err.receive_some(CHUNK)
                if not data:
                    break
                ts = time.time_ns()
                if journal is not None:
                    journal.data(jr.STDERR, ts, data)
                if err_open and await err_out.send_counted(data) < len(data):
                    err_open = False  # nobody reads our stderr: the agent's lines are still recorded
        finally:
            self._journal(jr.EOF, jr.STDERR)
            done.set()

    def _start_shutdown(self, nursery: trio.Nursery) -> None:
        if not self.shutdown_started:
            self.shutdown_started = True
            nursery.start_soon(self._terminate_after_grace)

    async def _terminate_after_grace(self) -> None:
        """Client is gone: give the agent ``grace`` to exit on EOF, then TERM, then KILL."""
        import trio

        grace = self.options.grace
        with trio.move_on_after(grace):
            await self.agent_exited.wait()
        if self.agent_exited.is_set():
            return
        self._signal_group(signal.SIGTERM)
        with trio.move_on_after(grace):
            await self.agent_exited.wait()
        if not self.agent_exited.is_set():
            self._signal_group(signal.SIGKILL)

    async def _drain_after_exit(self, a2c_done: trio.Event, stderr_done: trio.Event) -> None:
        """The agent is gone; whatever it left in the pipes still goes to the client.

        Its descendants may hold the pipes open after it dies: they are part of its run, so
        they get TERM (then KILL) — its process group, and the ones that left it (``setsid``)
        by the run's marker in their environment or, without it (``env -i``), as orphans
        re-parented to the proxy (``supervise.run_processes``).
        """
        import trio

        grace = self.options.grace
        self._signal_run(signal.SIGTERM)
        for sig in (signal.SIGKILL, None):
            with trio.move_on_after(grace):
                await a2c_done.wait()
                await stderr_done.wait()
            if a2c_done.is_set() and stderr_done.is_set():
                return
            if sig is not None:
                self._signal_run(sig)
        say("the agent's output pipes stayed open after it exited; stopped waiting")

    def _signal_group(self, sig: int) -> None:
        try:
            os.killpg(self.agent.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def _signal_run(self, sig: int) -> None:
        self._signal_group(sig)
        for pid in supervise.run_processes(self.marker):
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    async def _forward_signals(self, signals: Any) -> None:
        async for sig in signals:
            self._signal_group(sig)


# -- entry points --------------------------------------------------------------------------


def run(options: RunOptions, begun: Begun | None = None, started: Started | None = None) -> ExitStatus:
    """Run the agent behind the proxy and return its exit status. Raises RelayError early.
    ``begun``: the agent already started by ``spawn.begin`` (the launcher does, before it
    imports this module); otherwise it is started here. ``started``: what ``flow.start`` did
    since (the launcher calls it before importing this module too)."""
    if begun is None:
        begun = begin(options.argv, None if options.db_path is None else os.path.abspath(options.db_path))
    if started is None:
        started = start_flow(options, begun)
    agent, marker, early = begun.agent, begun.marker, begun.early
    recording, flow = started.recording, started.flow
    try:
        if started.error is not None:
            raise started.error
        if agent is None:
            assert begun.failure is not None
            status = exec_failure(options.argv[0], begun.executable, begun.failure)
            if recording is not None:
                recording.start(None, marker)
                recording.final(status)
                recording.start_recorder()
            return status
        if begun.attached:
            early.restore()
            if recording is not None:
                recording.start_recorder()
            status = _run_attached(agent, early.pending)
        else:
            # Without a gate the bytes flow already (``flow.start``), while trio loads.
            try:
                if recording is not None:
                    recording.start_recorder()
                import trio

                status = trio.run(Relay(options, agent, recording, marker, early, flow).main)
            finally:
                if flow is not None:
                    flow.finish()
            early.restore()
        if recording is not None:
            recording.final(status)
        return status
    finally:
        if recording is not None:
            recording.start_recorder()  # when the relay failed before it could: the journal gets recorded
        recorder_pid = recording.recorder.pid if recording is not None and recording.recorder is not None else None
        supervise.stop_marked(marker, options.grace, exclude=() if recorder_pid is None else (recorder_pid,))
        if recording is not None:
            recording.close()


def _run_attached(agent: Agent, pending: list[int]) -> ExitStatus:
    """stdin is a terminal (an editor's terminal-auth relaunch): the agent owns the terminal.

    It stays in our process group so it remains the terminal's foreground job; ^C reaches it
    from the terminal directly, TERM and HUP sent to the proxy are passed on. Only the run row
    is recorded: there is no protocol on a terminal.
    """
    proc = agent.process

    def forward(sig: int, _frame: Any) -> None:
        try:
            proc.send_signal(sig)
        except ProcessLookupError:
            pass

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGHUP)}
    previous[signal.SIGINT] = signal.signal(signal.SIGINT, signal.SIG_IGN)
    for sig in pending:
        if sig != signal.SIGINT:
            forward(sig, None)
    try:
        returncode = proc.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return ExitStatus.from_returncode(returncode)


def run_and_exit(options: RunOptions, begun: Begun | None = None, started: Started | None = None) -> None:
    """``acp-proxy run``: run, then leave like the agent did (a RelayError: one line, its code)."""
    try:
        status = run(options, begun, started)
    except RelayError as exc:
        say(str(exc))
        raise SystemExit(exc.code) from None
    exit_like(status)


def exit_like(status: ExitStatus) -> None:
    """Leave the process the way the agent left: same code, or death by the same signal."""
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
    if status.signal is not None:
        sig = status.signal
        if sig not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(sig, signal.SIG_DFL)
        # A core-dumping signal would leave a core file behind; the status is what matters.
        if sig in _CORE_DUMPING:
            try:
                import resource

                resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            except (ImportError, ValueError, OSError):
                pass
        os.kill(os.getpid(), sig)
        time.sleep(1)  # the signal is delivered before this returns; never reached in practice
        os._exit(128 + sig)
    os._exit(status.code if status.code is not None else 1)
