"""The agent's start: everything ``acp-proxy run`` does before its agent runs.

Owns: the checks that refuse a run before any agent exists (a closed stdout, an agent that
cannot be found, a database that cannot be opened or is not acp-proxy's, a database directory
or journal folder that cannot take a file: a folder that is a file, a read-only or full disk), the signals that
arrive before the relay runs, and starting the agent — its own process group, its pipes, its
parent-death signal, the run's marker in its environment — with ``fork`` and ``exec``.

An editor waits for its agent's first answer, and every module imported here comes before it:
so only ``os``, ``sys``, the builtin ``_signal`` (``signal`` wraps its constants in enums),
``ctypes`` (``prctl``) and, to examine an existing database, ``sqlite3``. No ``subprocess`` and
no ``pathlib``: with ``enum`` they cost ~15 ms of start-up, measured.

Must not know: trio, the journal, the recorder, click.
"""

from __future__ import annotations

import os
from _signal import SIG_DFL, SIGHUP, SIGINT, SIGPIPE, SIGTERM, SIGXFSZ
from _signal import signal as set_handler

from acp_proxy.errors import AcpProxyError
from acp_proxy.record import supervise

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing before the agent starts
if TYPE_CHECKING:
    from typing import Any

FORWARDED_SIGNALS = (SIGINT, SIGTERM, SIGHUP)
JOURNALS_SUFFIX = ".journal"  # the journal folder beside a database (``journal.journal_dir``)
EXEC_ERROR_EXIT = 255  # a child that could not exec: its errno went to the parent first


def say(message: str) -> None:
    """The proxy's own words: stderr, prefixed, never stdout."""
    try:
        os.write(2, f"acp-proxy: {message}\n".encode())
    except OSError:
        pass


class RelayError(AcpProxyError):
    """A problem that stops the run before the agent starts; ``code`` is the exit status."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = self.exit_code = code


class Begun:
    """What ``begin`` leaves the relay: the agent (None when exec failed, and ``failure`` says
    why), the run's marker, and the signals kept since."""

    def __init__(
        self,
        executable: str,
        attached: bool,
        marker: str,
        early: EarlySignals,
        agent: Agent | None,
        failure: OSError | None = None,
    ) -> None:
        self.executable = executable
        self.attached = attached
        self.marker = marker
        self.early = early
        self.agent = agent
        self.failure = failure

    def confirm(self) -> None:
        """Wait until the agent has exec'd (``begin(wait=False)`` did not): if it could not,
        ``agent`` becomes None and ``failure`` says why. Nothing to do the second time."""
        agent = self.agent
        if agent is None or agent.report_fd < 0:
            return
        try:
            agent.confirm()
        except OSError as exc:
            for fd in (agent.stdin_fd, agent.stdout_fd, agent.stderr_fd):
                if fd >= 0:
                    os.close(fd)
            self.early.restore()
            self.agent, self.failure = None, exc


def begin(argv: list[str], db_file: str | None, *, wait: bool = True) -> Begun:
    """Check what can refuse the run, then start the agent. ``db_file``: the absolute path of
    the database to record into (None: --no-record), examined and created here, so that a
    database that cannot be used stops the run before any agent exists. RelayError otherwise.
    ``wait=False``: return while the agent's exec may still be under way (the caller does
    something useful meanwhile, then ``Begun.confirm``)."""
    check_std_fds()
    executable = resolve_agent(argv)
    attached = os.isatty(0)
    if db_file is not None:
        from acp_proxy.store.dbfile import StoreError, prepare

        try:
            prepare(db_file, db_file + JOURNALS_SUFFIX)
        except StoreError as exc:
            raise RelayError(str(exc), 2) from None
    marker = supervise.new_marker()
    supervise.become_subreaper()
    early = EarlySignals()
    try:
        agent = spawn_agent(executable, argv, marker, attached=attached, wait=wait)
    except OSError as exc:
        early.restore()
        return Begun(executable, attached, marker, early, None, exc)
    return Begun(executable, attached, marker, early, agent)


def check_std_fds() -> None:
    """A closed fd 0, 1 or 2 gets /dev/null, so that no file opened later takes its number (the
    database on fd 2 would receive the proxy's messages). A closed stdout is an error: there
    would be nowhere to relay the agent's output. A closed stderr only silences the proxy."""
    closed = []
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            closed.append(fd)
    for fd in closed:
        null = os.open(os.devnull, os.O_RDWR)
        if null != fd:
            os.dup2(null, fd)
            os.close(null)
    if 1 not in closed:
        try:
            os.write(1, b"")  # writes nothing; fails on a descriptor open only for reading
        except OSError as exc:
            if exc.errno == 9:  # EBADF: held read-only (the CLI's stand-in for a closed fd 1)
                closed.append(1)
    if 1 in closed:
        raise RelayError("stdout (fd 1) is closed: there is nowhere to relay the agent's output", 2)


def resolve_agent(argv: list[str]) -> str:
    """The agent's executable, found like a shell would; RelayError 127/126 otherwise."""
    name = argv[0]
    if os.sep in name:
        if not os.path.exists(name):
            raise RelayError(f"{name}: no such file or directory", 127)
        if os.path.isdir(name) or not os.access(name, os.X_OK):
            raise RelayError(f"{name}: permission denied", 126)
        return name
    # shutil.which, without importing shutil (and the compression modules it loads) first.
    for directory in os.environ.get("PATH", os.defpath).split(os.pathsep):
        candidate = os.path.join(directory or os.curdir, name)
        if os.access(candidate, os.X_OK) and not os.path.isdir(candidate):
            return candidate
    raise RelayError(f"{name}: command not found", 127)


class EarlySignals:
    """Signals that arrive between the agent's spawn and the relay's start are kept, then
    forwarded: none may slip by, and none may kill the proxy before its agent."""

    def __init__(self) -> None:
        self.pending: list[int] = []
        self.wake_fd = -1  # gets a byte per signal kept (``Flow.hold_off`` waits on it)
        self.previous = {sig: set_handler(sig, self._keep) for sig in FORWARDED_SIGNALS}

    def _keep(self, sig: int, _frame: Any) -> None:
        self.pending.append(sig)
        if self.wake_fd >= 0:
            try:
                os.write(self.wake_fd, b"\0")
            except OSError:
                pass  # a full pipe holds a byte already

    def restore(self) -> None:
        for sig, handler in self.previous.items():
            set_handler(sig, handler)


class AgentProcess:
    """The agent as a child process: what the relay asks of it (``subprocess.Popen``'s subset)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                return None
            if pid == self.pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self) -> int:
        """Its exit code, or minus the signal that ended it."""
        if self.returncode is None:
            _, status = os.waitpid(self.pid, 0)
            self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        """Signal it while it has not been waited for: its pid cannot have been reused."""
        if self.poll() is None:
            os.kill(self.pid, sig)


class Agent:
    """The spawned agent: its process, and (unless attached to a terminal) our ends of its pipes."""

    def __init__(self, process: AgentProcess, fds: tuple[int, int, int] | None, report_fd: int = -1) -> None:
        self.process = process
        self.pid = process.pid
        self.stdin_fd, self.stdout_fd, self.stderr_fd = fds if fds is not None else (-1, -1, -1)
        self.report_fd = report_fd  # the exec report not read yet (``confirm``), or -1

    def confirm(self) -> None:
        """Wait for the exec report; OSError (the child reaped) when exec failed."""
        fd, self.report_fd = self.report_fd, -1
        if fd >= 0:
            exec_report(self.pid, fd)


def spawn_agent(executable: str, argv: list[str], marker: str, *, attached: bool, wait: bool = True) -> Agent:
    """Start the agent from this (the main) thread: its parent-death signal fires when the
    thread that forked it ends. OSError when exec fails (errno as the shell would see it);
    with ``wait=False``, only from ``Agent.confirm``."""
    env = dict(os.environ)
    env[supervise.MARKER_VAR] = marker
    command = [executable, *argv[1:]]
    if attached:  # in our process group: it stays the terminal's foreground job
        pid, report = _fork_exec(command, env, None)
        agent = Agent(AgentProcess(pid), None, report)
    else:
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        try:
            pid, report = _fork_exec(command, env, (in_r, out_w, err_w))
        except BaseException:
            for fd in (in_w, out_r, err_r):
                os.close(fd)
            raise
        finally:
            for fd in (in_r, out_w, err_w):
                os.close(fd)
        agent = Agent(AgentProcess(pid), (in_w, out_r, err_r), report)
    if wait:
        try:
            agent.confirm()
        except BaseException:
            for fd in (agent.stdin_fd, agent.stdout_fd, agent.stderr_fd):
                if fd >= 0:
                    os.close(fd)
            raise
    return agent


def _fork_exec(command: list[str], env: dict[str, str], stdio: tuple[int, int, int] | None) -> tuple[int, int]:
    """Fork, and exec ``command`` in the child; the child's pid and the read end of its exec
    report (``exec_report``: the parent need not wait for the exec before it goes on).

    What ``subprocess.Popen(..., process_group=0, preexec_fn=...)`` does (a preexec function
    makes it fork too), without its imports. With ``stdio`` the child gets a process group of
    its own and those fds as 0, 1 and 2. Every other descriptor is closed in the child, and the
    signals Python ignores (SIGPIPE, SIGXFSZ) get their default back, as an agent expects.
    """
    parent = os.getpid()
    die_with_parent = supervise.die_with_parent(parent)
    errors_r, errors_w = os.pipe()  # close-on-exec: EOF with nothing in it means exec worked
    pid = os.fork()
    if pid == 0:  # the child: nothing here may raise past os._exit
        code = 0
        try:
            if stdio is not None:
                os.setpgid(0, 0)
            die_with_parent()
            if stdio is not None:
                for target, fd in enumerate(stdio):
                    os.dup2(fd, target)  # dup2 makes the copy inheritable
            os.closerange(3, errors_w)
            os.closerange(errors_w + 1, 1 << 20)
            for sig in (SIGPIPE, SIGXFSZ):
                set_handler(sig, SIG_DFL)
            os.execve(command[0], command, env)
        except OSError as exc:
            code = exc.errno or 0
        except BaseException:
            code = 0
        try:
            os.write(errors_w, str(code).encode() or b"0")
        finally:
            os._exit(EXEC_ERROR_EXIT)
    os.close(errors_w)
    return pid, errors_r


def exec_report(pid: int, errors_r: int) -> None:
    """Wait until the child ``pid`` has exec'd (its report pipe closes empty; it is closed here);
    OSError with exec's errno when it could not (the child reaped)."""
    try:
        report = b""
        while chunk := os.read(errors_r, 64):
            report += chunk
    finally:
        os.close(errors_r)
    if report:
        os.waitpid(pid, 0)
        code = int(report)
        raise OSError(code, os.strerror(code) if code else "the agent could not be started")
