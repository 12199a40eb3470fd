"""The run's recording, as the relay sees it: its journal and the recorder process that follows it.

Owns: creating the run's journal (before any byte moves) and its first record, starting the
recorder (``python -S -m acp_proxy.record.recorder``) in the idle scheduling class, the run's
last record, and the end: giving the recorder ``--grace`` to finish, leaving it to finish on
its own after that, and starting a recovery when it died.

Must not know: trio, the agent's pipes, SQL, JSON-RPC. Import-cheap: the launcher starts the
recording before the relay's other modules load, so this module imports only the journal and
the standard library's cheapest modules at import; ``_json`` for the first record (before the
agent's first answer: ``plain_json``), ``json`` and ``subprocess`` after it.
"""

from __future__ import annotations

import os
import sys
import time

from acp_proxy.record import journal as jr
from acp_proxy.record import supervise
from acp_proxy.relay.spawn import RelayError, say

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing before the agent starts
if TYPE_CHECKING:
    import subprocess
    from typing import Any

    from acp_proxy.relay.options import ExitStatus, RunOptions

# The proxy exits with its agent: it waits for the recording only ``--grace`` (at least this
# long, so that a short run is recorded whole before the proxy exits), then leaves the recorder
# to finish on its own. It waits longer only for the recorder to hold its journal lock (at most
# RECORDER_LOCK_PATIENCE more): until then the proxy's lock is what says the run is live.
RECORDER_FINISH_MIN = 1.0
RECORDER_LOCK_PATIENCE = 10.0
_RECORDER_LOCKED_OUT = 3  # the recorder found the journal taken by a recovery: not a failure
RECORDER_MODULE = "acp_proxy.record.recorder"


def recorder_command(args: list[str]) -> tuple[list[str], dict[str, str]]:
    """The recorder's command line and environment: this interpreter, without ``site``.

    ``site`` reads every ``.pth`` file of the installation and runs the ones that import (an
    installation's own hooks: measured up to a third of a bare interpreter's start-up) before
    the recorder's first line; the recorder needs none of it, only the paths they gave, so it
    gets this process's ``sys.path`` as its ``PYTHONPATH`` (and runs ``sitecustomize`` itself:
    ``recorder._site_hooks``). A path that cannot go there (one holding the separator) leaves
    ``site`` on."""
    paths = [path for path in sys.path if path]
    env = dict(os.environ)
    if any(os.pathsep in path for path in paths):
        return [sys.executable, "-m", RECORDER_MODULE, *args], env
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return [sys.executable, "-S", "-m", RECORDER_MODULE, *args], env


def plain_json(value: Any) -> str:
    """``json.dumps(value)``, through ``_json`` (the C half of ``json``) for the plain values a
    START record holds: ``json``'s Python half imports ``re`` (~6 ms of a bare interpreter's
    start-up, measured), and the START record is written before the agent's first answer is
    forwarded. Anything else (a non-finite float, another type) goes to ``json.dumps``."""
    from _json import encode_basestring_ascii as quote

    def encode(item: Any) -> str:
        kind = type(item)
        if item is None:
            return "null"
        if kind is bool:
            return "true" if item else "false"
        if kind is int:
            return int.__repr__(item)
        if kind is float and item - item == 0:  # finite
            return float.__repr__(item)
        if kind is str:
            return quote(item)
        if kind is list or kind is tuple:
            return "[" + ", ".join(map(encode, item)) + "]"
        if kind is dict and all(type(key) is str for key in item):
            return "{" + ", ".join(f"{quote(key)}: {encode(member)}" for key, member in item.items()) + "}"
        raise TypeError(kind)

    try:
        return encode(value)
    except TypeError:
        import json

        return json.dumps(value)


class Recording:
    """The run's journal (created before the agent starts) and its recorder process."""

    def __init__(self, options: RunOptions, attached: bool) -> None:
        assert options.db_path is not None
        self.options = options
        self.db_path = os.path.abspath(options.db_path)  # text: no ``pathlib`` before the agent answers
        try:  # the database itself was examined before the agent started (spawn.begin)
            self.journal = jr.JournalWriter.create(
                jr.journal_dir(self.db_path), limit_bytes=options.db_limit, db_path=self.db_path
            )
        except OSError as exc:
            raise RelayError(
                f"cannot open database {options.db_path}: {(exc.strerror or str(exc)).lower()}", 2
            ) from None
        self.attached = attached
        self.recorder: subprocess.Popen[bytes] | None = None
        self.ready_fd = -1  # at end of file once the recorder holds its journal lock (or is gone)
        self.recorder_gone = False
        self.finished = False

    def start(self, agent_pid: int | None, marker: str) -> None:
        """Say what runs: the journal's first record."""
        options = self.options
        start: dict[str, Any] = {
            "started_ns": time.time_ns(),
            "argv": options.argv,
            "cwd": os.getcwd(),
            "proxy_pid": os.getpid(),
            "agent_pid": agent_pid,
            "interactive": self.attached,
            "max_record_bytes": options.max_record_bytes,
            "db_limit": options.db_limit,
            "options": options.options,
            "check": options.check,
            "redact": options.redact,
            "db": self.db_path,
            "marker": marker,
        }
        if options.fault_plan:
            import json

            start["fault_spec"] = json.dumps(options.fault_plan.describe(), default=str)
            start["seed"] = options.fault_plan.seed
        self.journal.record(jr.START, 0, start["started_ns"], plain_json(start).encode())

    def start_recorder(self) -> None:
        """The recorder process that follows the journal, started right after the agent and
        in the idle scheduling class. Its start-up (a Python process importing the decoder, the
        tracker and SQLite, ~0.1 s of CPU) then overlaps the agent's, instead of the first
        frames: started once the relay ran, it was still starting when a burst of big frames
        arrived. In the idle class it takes no core the relay or the agent wants (at nice 19
        alone it did: +120 ms to an instant agent's first response), and the journal holds
        everything until it reads it."""
        if self.recorder is None:
            self.recorder = self._spawn_recorder(["--journal", str(self.journal.path)], wake=True)
            self.journal.on_reader_gone = self._recorder_gone

    def _spawn_recorder(self, args: list[str], *, wake: bool) -> subprocess.Popen[bytes] | None:
        import subprocess

        read_fd = ready_w = -1
        pass_fds: tuple[int, ...] = ()
        if wake:
            read_fd, write_fd = os.pipe()
            self.journal.attach_wake(write_fd)
            self.ready_fd, ready_w = os.pipe()
            args = [*args, "--wake-fd", str(read_fd), "--ready-fd", str(ready_w)]
            pass_fds = (read_fd, ready_w)
        argv, env = recorder_command(args)
        try:
            # No preexec_fn: without one, Popen spawns with vfork, and this thread waits only
            # for the exec (a fork copied the proxy's page tables first, and an idle-class child
            # could take many milliseconds of a busy machine to reach its exec). The recorder
            # goes to the idle class the moment it exists, before its interpreter has loaded.
            recorder = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                pass_fds=pass_fds,
                start_new_session=True,  # a signal to our group must not cut the recording short
                env=env,
            )
            if wake:
                supervise.run_idle(recorder.pid)
            supervise.own(recorder.pid)  # ours, not one of the run's orphans
            return recorder
        except OSError as exc:
            say(f"cannot start the recorder ({exc}); the journal will be recorded by the next acp-proxy command")
            return None
        finally:
            for fd in (read_fd, ready_w):
                if fd >= 0:
                    os.close(fd)

    def _recorder_gone(self) -> None:
        if not self.recorder_gone:
            self.recorder_gone = True
            say("the recorder stopped; the conversation is still relayed, and recorded from the journal at the end")

    def meta(self, values: dict[str, Any]) -> None:
        import json

        self.journal.record(jr.META, 0, time.time_ns(), json.dumps(values).encode())

    def final(self, status: ExitStatus) -> None:
        journal = self.journal
        values: dict[str, Any] = {
            "final": True,
            "ended_ns": time.time_ns(),
            "status": "ended",
            "exit_code": status.code,
            "exit_signal": status.signal,
            "lost_lines": journal.unreported(),  # per direction, lost after the last GAP record written
        }
        self.meta(values)
        self.finished = True
        if journal.lost_total[0]:
            # If the disk is full, the run row may never learn this: say it where it is seen.
            nbytes, newlines = journal.lost_total
            say(f"{newlines:,} lines ({nbytes:,} bytes) were relayed but could not be journaled; they are not recorded")

    def close(self) -> None:
        """Give the recorder ``--grace`` to finish (it has the journal's end now), then leave it
        to finish on its own: the proxy exits with its agent. The recorder holds the journal's
        lock until the run is recorded, so no one takes it for a dead run's; if it dies, the
        next acp-proxy command records what it left. If it died already, a recovery starts
        here, under the same deadline."""
        import subprocess

        deadline = time.monotonic() + max(self.options.grace, RECORDER_FINISH_MIN)
        self.journal.end()
        if self.recorder is not None:
            # The conversation is over: out of the idle class now. On a busy machine an idle-class
            # recorder might not run at all before the proxy exits, not even to take its lock.
            supervise.run_normal((self.recorder.pid,))
        returncode: int | None = None
        try:
            if self.recorder is not None:
                returncode = supervise.wait_for_exit(self.recorder, max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self._wait_recorder_locked(deadline + RECORDER_LOCK_PATIENCE)
            return  # it finishes on its own, detached (a session of its own)
        finally:
            self.journal.release()  # only now: until the recorder had its lock, ours kept the run live
            if self.ready_fd >= 0:
                os.close(self.ready_fd)
                self.ready_fd = -1
        if returncode in (0, _RECORDER_LOCKED_OUT, 2) or not self.journal.path.exists():
            return
        # The recorder (or its writer) died: a recovery resumes from the last commit, once the
        # dead recorder's writer has let go of the journal too.
        recovery = self._spawn_recorder(["--recover", str(self.journal.path)], wake=False)
        if recovery is not None:
            try:
                supervise.wait_for_exit(recovery, max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass  # it finishes on its own; if it dies, the next command recovers the journal

    def _wait_recorder_locked(self, deadline: float) -> None:
        """Until the recorder holds its journal lock (its ready pipe's end of file), or dies."""
        import select

        if self.ready_fd < 0:
            return
        poller = select.poll()
        poller.register(self.ready_fd, select.POLLIN | select.POLLHUP)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            try:
                if poller.poll(int(left * 1000) + 1):
                    return
            except InterruptedError:
                continue
