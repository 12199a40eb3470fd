"""What every workload of ``relay_bench.py`` shares: the configuration, the relay columns,
the processes (spawning with a deadline, peak memory, strays) and the checks of what arrived and
what was recorded."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

HERE = Path(__file__).resolve().parents[1]  # benchmarks/
REPO = HERE.parent
PY = sys.executable
AGENT = str(HERE / "bench_agent.py")
NAIVE = str(HERE / "naive_relays.py")
MiB = 1 << 20

REQUEST = (
    '{"jsonrpc":"2.0","id":%d,"method":"session/prompt","params":{"sessionId":"sess_7f3a9c2e5b8d4a1f",'
    '"prompt":[{"type":"text","text":"ping"}]}}\n'
)


class BenchError(Exception):
    """A run that could not be measured or whose checks failed."""


# -- configuration -------------------------------------------------------------------------


@dataclass
class Config:
    storm_frames: int
    commit_storm_frames: int  # the commit-per-line relay gets fewer: it manages ~1k frames/s
    trips: int
    warmup_trips: int
    big: list[tuple[int, int]]  # (count, size in bytes)
    sdk_chunks: int
    sdk_chunk_bytes: int
    timeout: float  # seconds, per spawned process
    startup_trials: int = 5  # spawns per relay and agent kind; the median is shown
    slow_start: float = 0.3  # seconds of CPU-bound start-up for the "slow" agent
    lock_seconds: float = 25.0  # how long another process holds the database's write lock
    cat_trials: int = 9  # spawns with ``cat`` as the agent (the instant agent's judged row)
    live: tuple[tuple[int, float], ...] = ((2000, 30.0), (10000, 30.0))  # (frames/s, seconds): live_bench
    remote_chunks: int = 100_000  # the remote workload's WebSocket stream (remote_bench.py)
    remote_trips: int = 1_000

    @classmethod
    def full(cls) -> Config:
        return cls(200_000, 10_000, 2000, 100, [(64, MiB), (4, 64 * MiB)], 100_000, 300, 300.0)

    @classmethod
    def quick(cls) -> Config:
        quick = cls(
            20_000,
            1000,
            200,
            20,
            [(16, MiB), (2, 16 * MiB)],
            20_000,
            300,
            60.0,
            3,
            0.3,
            5.0,
            9,
            remote_chunks=10_000,
            remote_trips=200,
        )
        quick.live = ((2000, 5.0), (10000, 5.0))
        return quick


@dataclass(frozen=True)
class Relay:
    key: str
    title: str
    wrap: Callable[[list[str], Path], list[str]]  # (agent argv, scratch file) -> command
    records_db: bool = False  # acp-proxy --db: check the recording
    commit_db: bool = False  # the commit-per-line relay: check its table too


OTLP_NOWHERE = "http://127.0.0.1:9"  # the discard port: no collector there


def proxy_command() -> list[str]:
    """``acp-proxy`` as an editor runs it: the command installed beside this interpreter (found
    there, not on PATH, where a version manager's shim may stand in front of it). ``python -m
    acp_proxy`` only where it is not installed: ``runpy`` imports ~5 ms more before the launcher."""
    import sysconfig

    script = Path(sysconfig.get_path("scripts")) / "acp-proxy"
    return [str(script)] if os.access(script, os.X_OK) else [PY, "-m", "acp_proxy"]


def _proxy(*options: str) -> list[str]:
    return [*proxy_command(), "run", *options, "--"]


RELAYS = [
    Relay("direct", "direct", lambda agent, _: agent),
    Relay("cat", "cat hop", lambda agent, _: ["sh", "-c", 'cat | "$@" | cat', "cat-hop", *agent]),
    Relay("tee", "tee relay", lambda agent, scratch: [PY, NAIVE, "tee", str(scratch), "--", *agent]),
    Relay(
        "commit",
        "commit/line",
        lambda agent, scratch: [PY, NAIVE, "sqlite", str(scratch), "--", *agent],
        commit_db=True,
    ),
    Relay("proxy", "proxy --no-record", lambda agent, _: [*_proxy("--no-record"), *agent]),
    Relay("proxy_rec", "proxy recording", lambda agent, db: [*_proxy("--db", str(db)), *agent], records_db=True),
    # Faults on: a rule that can touch agent->client frames (so that direction is framed and
    # judged line by line) but matches nothing in this traffic.
    Relay(
        "proxy_fault",
        "recording + faults",
        lambda agent, db: [*_proxy("--db", str(db), "--fault", "drop if dir:a2c method:_bench/never"), *agent],
        records_db=True,
    ),
    # Live conformance checks with schema validation: a niced process that follows the database.
    Relay(
        "proxy_check",
        "recording + check",
        lambda agent, db: [*_proxy("--db", str(db), "--check"), *agent],
        records_db=True,
    ),
    # Live OpenTelemetry export to a collector that is down (nothing listens on the port): the
    # exporter process builds every span at idle priority and loses them all (counted on the run).
    Relay(
        "proxy_otlp",
        "recording + otlp",
        lambda agent, db: [*_proxy("--db", str(db), "--otlp", OTLP_NOWHERE), *agent],
        records_db=True,
    ),
]
BY_KEY = {relay.key: relay for relay in RELAYS}


# -- processes -----------------------------------------------------------------------------


def children_of(pid: int) -> list[int]:
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


def cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().decode(errors="replace").split("\0")[:-1]
    except OSError:
        return []


def vm_hwm_bytes(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def tree(root: int) -> list[int]:
    pids, todo = [], [root]
    while todo:
        pid = todo.pop()
        pids.append(pid)
        todo.extend(children_of(pid))
    return pids


def kill_tree(root: int) -> None:
    for pid in reversed(tree(root)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def become_subreaper() -> None:
    """Orphans of our runs become our children, so a stray process can be found and ended."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER


LINGER_S = 120.0
# Processes that outlive their proxy by design and end on their own: a `run --otlp` exporter
# (at idle priority, it exports the rest of its run and gives a collector its last seconds) and
# a recording's database writer (once the run's last transaction is committed it reports, and
# the proxy exits; it then folds the WAL into the database file, a checkpoint nobody waits for).
LINGERERS = ("acp_proxy.otel.follow", "acp_proxy.record.recorder")


def wait_for_lingerers(timeout: float = LINGER_S) -> None:
    """Let the processes that outlive their proxy by design (``LINGERERS``) end on their own;
    whatever is still there after ``timeout`` is a stray."""
    deadline = time.monotonic() + timeout
    lingering: set[int] = set()
    while time.monotonic() < deadline:
        children = children_of(os.getpid())
        # An empty command line: a process in the middle of exiting (or exited, not yet reaped).
        lingering |= {
            pid for pid in children if not cmdline(pid) or any(name in " ".join(cmdline(pid)) for name in LINGERERS)
        }
        lingering &= set(children)
        for pid in list(lingering):
            with contextlib.suppress(ChildProcessError):
                if os.waitpid(pid, os.WNOHANG)[0]:  # reaped: it has ended
                    lingering.discard(pid)
        if not lingering:
            return
        time.sleep(0.1)


def end_strays() -> list[str]:
    """Kill and reap whatever our runs left running (with no run in progress, every live child
    is one; one that has exited on its own is only reaped)."""
    strays = []
    for pid in children_of(os.getpid()):
        with contextlib.suppress(ChildProcessError):
            if os.waitpid(pid, os.WNOHANG)[0]:
                continue
        strays.append(" ".join(cmdline(pid)) or str(pid))
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
    return strays


def role(argv: list[str]) -> str:
    joined = " ".join(argv)
    if "acp_proxy.record.recorder" in joined:
        return "recorder"
    if "acp_proxy" in joined:
        return "proxy"
    if "naive_relays.py" in joined:
        return "relay"
    return Path(argv[0]).name if argv else "?"


_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float | None:
    """utime + stime of ``pid`` so far."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / _TICKS


class RssSampler:
    """Peak RSS (VmHWM) and CPU time of every process in a run's tree except the agent and its
    children. CPU time is the last sample of each process (every 10 ms, so the last few
    milliseconds of a process may be missed): on a shared machine, CPU per frame moves far
    less with the load than a rate does."""

    def __init__(self, root: int, agent_markers: tuple[str, ...], interval: float = 0.01) -> None:
        self.root = root
        self.agent_markers = agent_markers
        self.interval = interval
        self.latest: dict[int, tuple[str, int]] = {}  # pid -> (role, peak) under its current argv
        self._argv: dict[int, list[str]] = {}
        self._samples: dict[int, int] = {}  # pid -> samples taken under its current argv
        self.cpu: dict[int, float] = {}  # pid -> CPU seconds at its last sample
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)
        self._thread.start()

    def _is_agent(self, argv: list[str]) -> bool:
        # Only the program and its script: a relay's own argv names the agent after "--".
        return any(part.endswith(marker) for part in argv[:2] for marker in self.agent_markers)

    def _run(self) -> None:
        while True:
            self.sample()
            if self._stop.wait(self.interval):
                return

    def sample(self) -> None:
        todo = [self.root]
        while todo:
            pid = todo.pop()
            argv = cmdline(pid)
            if not argv:
                continue  # gone or a zombie: its last sample stands
            if self._is_agent(argv):
                # Not the relay's memory. A fork sampled before it exec'd the agent still had
                # the relay's argv: forget what it showed then.
                self.latest.pop(pid, None)
                continue
            used = cpu_seconds(pid)
            if used is not None:
                self.cpu[pid] = used
            hwm = vm_hwm_bytes(pid)
            if hwm is not None:
                if self._argv.get(pid) != argv:  # a fork that has just exec'd: a new process image
                    self._argv[pid] = argv
                    self.latest.pop(pid, None)
                    self._samples[pid] = 0
                name, peak = self.latest.get(pid, (role(argv), 0))
                self.latest[pid] = (name, max(peak, hwm))
                self._samples[pid] += 1
            todo.extend(children_of(pid))

    def stop(self) -> dict[str, int]:
        self._stop.set()
        self._thread.join()
        peaks: dict[str, int] = {}
        for pid, (name, peak) in self.latest.items():
            twin = any(self._argv[other] == self._argv[pid] for other in self.latest if other != pid)
            if twin and self._samples[pid] < 2:
                continue  # a fork caught once, between fork and exec (e.g. a short-lived helper)
            label, n = name, 2
            while label in peaks:
                label, n = f"{name}#{n}", n + 1
            peaks[label] = peak
        return peaks


class Spawned:
    """One relay (or agent) process with pipes to us, a deadline, and optional RSS sampling."""

    def __init__(
        self,
        argv: list[str],
        timeout: float,
        *,
        sample_rss: bool = False,
        agent_markers: tuple[str, ...] = ("bench_agent.py", "sdk_agent.py"),
        stdin: int | None = subprocess.PIPE,
    ) -> None:
        self.argv = argv
        self.timeout = timeout
        self.expired = False
        self.stderr: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 - closed in __exit__
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
        self.proc = subprocess.Popen(
            argv, stdin=stdin, stdout=subprocess.PIPE, stderr=self.stderr, bufsize=0, env=env, cwd=REPO
        )
        self.timer = threading.Timer(timeout, self._expire)
        self.timer.daemon = True
        self.timer.start()
        self.sampler = RssSampler(self.proc.pid, agent_markers) if sample_rss else None
        self.rss: dict[str, int] = {}
        self.cpu = 0.0  # CPU seconds of the relay's own processes (with sample_rss)

    @property
    def stdin_fd(self) -> int:
        assert self.proc.stdin is not None
        return self.proc.stdin.fileno()

    @property
    def stdout_fd(self) -> int:
        assert self.proc.stdout is not None
        return self.proc.stdout.fileno()

    def _expire(self) -> None:
        self.expired = True
        kill_tree(self.proc.pid)

    def finish(self) -> int:
        """Close our end of its stdin, wait for it to exit; the exit status."""
        if self.proc.stdin is not None:
            with contextlib.suppress(BrokenPipeError):
                self.proc.stdin.close()
        returncode = self.proc.wait()
        self.timer.cancel()
        if self.sampler is not None:
            self.rss = self.sampler.stop()
            self.cpu = sum(self.sampler.cpu.values())
            self.sampler = None
        if self.expired:
            raise BenchError(f"timed out after {self.timeout:.0f} s{self.stderr_tail()}")
        if returncode != 0:
            raise BenchError(f"exited with status {returncode}{self.stderr_tail()}")
        return returncode

    def stderr_tail(self) -> str:
        self.stderr.seek(0)
        text = self.stderr.read()[-600:].decode(errors="replace").strip()
        return f"; stderr: {text}" if text else ""

    def __enter__(self) -> Spawned:
        return self

    def __exit__(self, *exc: object) -> None:
        self.timer.cancel()
        if self.sampler is not None:
            self.sampler.stop()
        if self.proc.poll() is None:
            kill_tree(self.proc.pid)
            self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout, self.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()


def drain(fd: int, expected: int | None = None) -> tuple[int, int]:
    """Read until EOF, or until ``expected`` bytes have come; (bytes, newlines) received.

    With ``expected``, the caller need not wait for EOF, which a relay may only give once the
    client has closed its side (the cat hop's shell holds our pipe until then).
    """
    nbytes = nlines = 0
    while expected is None or nbytes < expected:
        chunk = os.read(fd, MiB)
        if not chunk:
            break
        nbytes += len(chunk)
        nlines += chunk.count(b"\n")
    return nbytes, nlines


def read_line(run: Spawned) -> bytes:
    """One line, read a byte at a time (nothing after it may be consumed)."""
    line = b""
    while not line.endswith(b"\n"):
        byte = os.read(run.stdout_fd, 1)
        if not byte:
            raise BenchError(f"EOF before a full line{run.stderr_tail()}")
        line += byte
    return line


def check_arrival(got: tuple[int, int], want_bytes: int, want_lines: int) -> None:
    if got != (want_bytes, want_lines):
        raise BenchError(f"client got {got[0]} bytes / {got[1]} lines, expected {want_bytes} / {want_lines}")


# -- recordings ----------------------------------------------------------------------------


def wait_recording_begun(db: Path, frames: int, timeout: float) -> None:
    """Until ``db`` holds ``frames`` frames (a handshake's): the recorder and its writer are up.

    The proxy starts its recorder only once the agent has answered (its start-up hold-off), so
    a first answer no longer means every process in between is running; without this a
    workload timed from the next request would also time the recorder's start-up (the
    start-up table times that)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1)
            try:
                (count,) = conn.execute("SELECT count(*) FROM frames").fetchone()
            finally:
                conn.close()
            if count >= frames:
                return
        except sqlite3.Error:
            pass  # not created, or its tables not yet
        time.sleep(0.005)  # nothing to wait on: the recorder commits in another process
    raise BenchError(f"the recording had not begun {timeout:.0f} s after the handshake")


def check_proxy_recording(db: Path, want: dict[str, tuple[int, int | None]]) -> dict[str, Any]:
    """Rows per direction (and their total size) must match what was sent; nothing lost."""
    from acp_proxy.record.recovery import wait_recorded

    # The proxy exits with its agent; its recorder may still be finishing (a held write lock).
    if not wait_recorded(db, 120):
        raise BenchError("recording incomplete: still being recorded 120 s after the proxy exited")
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        runs = conn.execute("SELECT id, status, not_recorded, frames_c2a, frames_a2c FROM runs").fetchall()
        rows = {d: (n, s) for d, n, s in conn.execute("SELECT dir, count(*), sum(size) FROM frames GROUP BY dir")}
    finally:
        conn.close()
    problems = []
    if len(runs) != 1:
        problems.append(f"{len(runs)} runs in the database, expected 1")
    else:
        _, status, not_recorded, frames_c2a, frames_a2c = runs[0]
        if status != "ended":
            problems.append(f"run status {status!r}")
        if not_recorded:
            problems.append(f"run row says {not_recorded} frames not recorded")
        for direction, counted in (("c2a", frames_c2a), ("a2c", frames_a2c)):
            if counted != want.get(direction, (0, None))[0]:
                problems.append(f"run row counts {counted} {direction} frames")
    for direction, (count, size) in want.items():
        got_count, got_size = rows.get(direction, (0, None))
        if got_count != count or (size is not None and got_size != size):
            problems.append(f"{direction}: {got_count} rows of {got_size} bytes, expected {count} of {size}")
    for direction in rows.keys() - want.keys():
        problems.append(f"unexpected {rows[direction][0]} {direction} rows")
    if problems:
        raise BenchError("recording incomplete: " + "; ".join(problems))
    return {"rows": {d: n for d, (n, _) in rows.items()}}


def check_commit_recording(db: Path, want_rows: int) -> None:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        (rows,) = conn.execute("SELECT count(*) FROM frames").fetchone()
    finally:
        conn.close()
    if rows != want_rows:
        raise BenchError(f"commit/line relay stored {rows} rows, expected {want_rows}")


def remove_db(path: Path) -> None:
    for suffix in ("", "-wal", "-shm", "-journal"):
        with contextlib.suppress(FileNotFoundError):
            os.remove(f"{path}{suffix}")
