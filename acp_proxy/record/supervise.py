"""No orphans: every process an agent starts ends with its run, even when the proxy is SIGKILLed.

Owns: the Linux process-lifetime tools the relay and the recorder use for that — the agent's
parent-death signal (``PR_SET_PDEATHSIG``: the kernel kills the agent when the proxy dies, even
by SIGKILL), the proxy as a child subreaper (``PR_SET_CHILD_SUBREAPER``: orphaned grandchildren
are re-parented to it, not to init, so it can reap them), and a marker in the agent's
environment, unique to the run and inherited by everything the agent starts, by which the
relay, the recorder (which outlives a killed proxy) or a later recovery finds and stops the
run's processes — ``setsid`` ones included, which no process-group signal reaches; and, for the
processes that also cleared their environment (``setsid env -i daemon``), the subreaper's own
view: every process the proxy did not start itself but finds among its children was orphaned
inside the run (re-parented to it), and goes with the run, its descendants too. Also the
idle scheduling class the background processes (recorder, writer, checker, OTLP follower) run
in, so that they take only CPU time the conversation does not want.

Must not know: trio, SQL, the journal's format. Imported before the agent starts: only os,
time and the builtin ``_signal`` at import; ``_ctypes`` when a ``prctl`` is made. On systems without ``prctl``
or ``/proc`` each tool does nothing, and the process-group signals remain.
"""

from __future__ import annotations

import os
import time
from _signal import SIGKILL, SIGTERM  # the builtin behind ``signal``: its enums cost start-up

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing before the agent starts
if TYPE_CHECKING:
    import subprocess
    from collections.abc import Callable, Iterable

MARKER_VAR = "ACP_PROXY_RUN"
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_prctl: Callable[..., int] | None = None
# In a subreaper (the proxy): the children that are its own — there before the agent started
# (an OTLP follower), or started by it since (the recorder) — and so not orphans of the run.
_own: set[int] = set()
_adopting = False


def new_marker() -> str:
    return f"{os.getpid()}-{os.urandom(8).hex()}"


def _libc_prctl() -> Callable[..., int]:
    global _prctl
    if _prctl is None:
        try:
            _prctl = _bare_prctl()
        except (ImportError, OSError, AttributeError):
            _prctl = lambda *args: -1  # noqa: E731 - not Linux: nothing to set
    assert _prctl is not None
    return _prctl


def _bare_prctl() -> Callable[..., int]:
    """libc's ``prctl``, through ``_ctypes`` (the extension ``ctypes`` wraps) rather than the
    ``ctypes`` package: the package defines dozens of types and loads ``struct`` at import
    (~2-4 ms before the agent could start, measured), and this needs three of them. Spelled
    as ``ctypes.CDLL(None, use_errno=True).prctl`` with ``argtypes`` (int, 4 x unsigned long)."""
    import _ctypes

    class Int(_ctypes._SimpleCData):
        _type_ = "i"

    class ULong(_ctypes._SimpleCData):
        _type_ = "L"

    class Function(_ctypes.CFuncPtr):
        _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO
        _restype_ = Int

    class Libc:
        _handle = _ctypes.dlopen(None, _ctypes.RTLD_LOCAL)  # type: ignore[arg-type]  # None: the program itself

    func = Function(("prctl", Libc()))  # type: ignore[arg-type]  # anything with a _handle
    func.argtypes = (Int, ULong, ULong, ULong, ULong)
    return func


def become_subreaper() -> bool:
    """Orphaned descendants become our children (and zombies until we reap them). From here
    on, a child this process did not start (``own``) is one of the run's orphans: the children
    that exist now are its own, the agent is not."""
    global _adopting
    done = _libc_prctl()(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    if done:
        _own.update(children())
        _adopting = True
    return done


def own(pid: int) -> None:
    """``pid`` is a helper this process started (the recorder), not one of the run's processes."""
    _own.add(pid)


def adopted(exclude: Iterable[int] = ()) -> list[int]:
    """The run's processes found without their environment: the live children of this
    subreaper that it did not start (orphans re-parented to it: ``setsid env -i`` daemons
    too), and all their descendants. Empty in a process that is not the run's subreaper."""
    if not _adopting:
        return []
    skip = {os.getpid(), *_own, *exclude}
    found: list[int] = []
    todo = [pid for pid in children() if pid not in skip]
    seen: set[int] = set()
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        if not _is_zombie(pid):
            found.append(pid)
        todo.extend(child for child in _children_of(pid) if child not in skip)
    return found


def run_processes(marker: str, exclude: Iterable[int] = ()) -> list[int]:
    """Every live process of the run this process can find: by its marker, and adopted."""
    exclude = tuple(exclude)
    found = marked(marker, exclude)
    return found + [pid for pid in adopted(exclude) if pid not in found]


def die_with_parent(parent_pid: int) -> Callable[[], None]:
    """A ``preexec_fn`` for the agent: SIGKILL when the spawning thread's process dies.

    The signal fires when the thread that forked exits, so the agent must be spawned from the
    thread that lives as long as the proxy (the main thread). A parent that died between fork
    and prctl would never send it: then the child gives up before exec."""
    prctl = _libc_prctl()

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0)
        if os.getppid() != parent_pid:
            os._exit(1)

    return preexec


def marked(marker: str, exclude: Iterable[int] = ()) -> list[int]:
    """Pids of live processes whose environment holds this run's marker."""
    needle = f"{MARKER_VAR}={marker}".encode()
    skip = {os.getpid(), *exclude}
    found: list[int] = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for entry in entries:
        if not entry.isdigit() or int(entry) in skip:
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as handle:
                environ = handle.read()
        except OSError:
            continue
        if (needle + b"\0" in environ or environ.endswith(needle)) and not _is_zombie(int(entry)):
            found.append(int(entry))
    return found


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rsplit(b")", 1)[1].split()[0] in (b"Z", b"X")
    except (OSError, IndexError):
        return True


def stop_marked(marker: str, grace: float, exclude: Iterable[int] = ()) -> int:
    """TERM the run's remaining processes (``run_processes``), KILL those still there after
    ``grace`` (and those orphaned meanwhile); how many were found. Our own children among them
    are reaped."""
    exclude = tuple(exclude)
    pids = run_processes(marker, exclude)
    found = len(pids)
    if pids:
        _signal_all(pids, SIGTERM)
        deadline = time.monotonic() + grace
        while pids and time.monotonic() < deadline:
            reap(exclude)
            pids = run_processes(marker, exclude)
            if pids:
                _signal_all(pids, SIGTERM)  # some were orphaned since the last look
                time.sleep(0.02)  # polling the process table, with a deadline
        kill_deadline = time.monotonic() + max(grace, 1.0)
        while pids and time.monotonic() < kill_deadline:
            _signal_all(pids, SIGKILL)
            reap(exclude)
            pids = run_processes(marker, exclude)
            if pids:
                time.sleep(0.01)  # SIGKILL cannot be refused: the kernel takes them shortly
    reap(exclude)
    return found


def _signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def reap(exclude: Iterable[int] = ()) -> None:
    """Collect exited children (orphans re-parented to us included), except ``exclude``."""
    skip = set(exclude)
    for pid in children():
        if pid in skip:
            continue
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass


def children() -> list[int]:
    return _children_of("self")


def _children_of(pid: int | str) -> list[int]:
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as handle:
                found.extend(int(word) for word in handle.read().split())
        except OSError:
            pass
    return found


def wait_for_exit(proc: subprocess.Popen[bytes], timeout: float) -> int:
    """``proc.wait(timeout)`` without its polling: Popen sleeps up to 50 ms between looks, and
    the proxy's own exit waits on this one (its recorder's). A pidfd becomes readable the
    moment the process exits. Raises ``subprocess.TimeoutExpired`` like ``Popen.wait``."""
    import select
    import subprocess

    if proc.returncode is not None:
        return proc.returncode
    try:
        fd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):  # not Linux >= 5.3, or the pid is gone already
        return proc.wait(timeout=timeout)
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        if not poller.poll(max(0, int(timeout * 1000))):
            raise subprocess.TimeoutExpired(proc.args, timeout)
    finally:
        os.close(fd)
    return proc.wait()


IDLE_NICENESS = 19


def run_idle(pid: int = 0) -> None:
    """Give ``pid`` (0: this process) only CPU time nobody else wants: the idle scheduling class
    (``SCHED_IDLE``) and nice 19, each where allowed. The scheduler counts a core that runs only
    idle-class tasks as free when it places a waking task, and preempts them at once; nice 19
    alone still took a quarter of a busy turn's pace from an official-SDK pair on two cores."""
    try:
        os.setpriority(os.PRIO_PROCESS, pid, IDLE_NICENESS)
    except OSError:
        pass
    try:
        os.sched_setscheduler(pid, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        pass


def run_normal(pids: Iterable[int]) -> None:
    """Back to the normal class and priority, where that is allowed (a process may lower its own
    priority, but raise it again only if privileged or its RLIMIT_NICE permits).

    Every thread of each process: Linux schedules threads, and one started while its process
    was idle-class (the writer's reader and checkpoint threads) stays so unless named."""
    for pid in pids:
        for tid in _threads(pid):
            try:
                os.sched_setscheduler(tid, os.SCHED_OTHER, os.sched_param(0))
            except (AttributeError, OSError):
                continue  # still idle-class: a better nice value would change nothing
            try:
                os.setpriority(os.PRIO_PROCESS, tid, 0)
            except OSError:
                pass


def _threads(pid: int) -> list[int]:
    """The thread ids of ``pid`` (0: this process); just ``pid`` where /proc cannot say."""
    try:
        return [int(tid) for tid in os.listdir(f"/proc/{pid or os.getpid()}/task")]
    except (OSError, ValueError):
        return [pid]
