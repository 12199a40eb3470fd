"""Relay benchmark: acp-proxy side by side with a direct pipe, a `cat` hop and two hand-rolled relays.

    python benchmarks/relay_bench.py            # the full run, best of 3 (~3 minutes on 2 cores)
    python benchmarks/relay_bench.py --quick    # reduced sizes, one round: a smoke test (< 1 min)
    python benchmarks/relay_bench.py --json results.json --repeat 5

What is measured
----------------
Nine ways of putting bytes between a client (this script) and an agent (``bench_agent.py``):

- **direct**: the client talks to the agent's pipes; there is no relay at all.
- **cat hop**: ``sh -c 'cat | AGENT | cat'`` — a relay made of two ``cat`` processes, the floor
  of any relay (it copies bytes, looks at nothing, records nothing).
- **tee relay**: ``naive_relays.py tee`` — Python, a thread per direction, ``readline``, write
  to the other side, append the line to a file.
- **commit/line**: ``naive_relays.py sqlite`` — the same with ``json.loads``, one ``INSERT`` and
  one ``COMMIT`` per line (SQLite defaults). It is slow, so the chunk storm gives it 1/20 of the
  frames (marked ``*``); its rate per frame is what matters.
- **proxy --no-record** and **proxy recording**: ``python -m acp_proxy run [--no-record |
  --db TMP] -- AGENT``.
- **recording + faults** and **recording + check**: the recording proxy with a fault rule that
  matches nothing (so agent->client frames are judged line by line) or with ``--check`` (live
  conformance checks with schema validation).
- **recording + otlp**: the recording proxy with ``--otlp`` to a collector that is down. It
  needs the ``[otel]`` extra: without it the column is skipped, with a note under the table.

Workloads:

- **chunk storm**: the agent writes N 300-byte ``session/update`` ``agent_message_chunk``
  notifications, pre-built, in 1 MiB writes. First the client and the agent shake hands
  through the relay (one request, one response: every process is up, start-up is not
  counted); the clock starts when the client sends the request that releases the storm and
  stops when the client has read every byte *and* the relay process has exited — for the
  recording proxy, that is when the recording is complete (the proxy waits for its recorder,
  which waits until its writer has committed the run's last transaction; the writer's last
  checkpoint, folding the WAL into the database file, comes after and nobody waits for it),
  and with ``--check`` when every frame has been checked. ``delivered frames/s`` stops the clock
  when the client has read every byte instead: what the conversation itself sees.
- **round trips**: the client sends a request line and waits for the agent's response line
  before sending the next; each trip is timed with ``perf_counter_ns`` in the client. All
  relays run at once: each is started and warmed up on its own, then the measured trips go
  round them in 10 blocks (3 unmeasured trips after each switch), so that a change in the
  machine's load hits every relay alike. *Added* latency is the relay's percentile minus the
  direct pipe's. The workload runs twice: as the scheduler places the processes (shown, not
  judged), then with the client and every process of the direct pipe, the `cat` hop and both
  proxy columns on one CPU (judged; the other columns' own background work would share that
  CPU with the conversation being measured). On a VM without guest halt-polling
  (``guest_halt_poll_ns`` 0, recorded in ``--json``), waking a process on the other, idle
  vCPU goes through the hypervisor and costs ~25 µs; the direct
  pipe's two processes often share a vCPU, a relay's three or four cannot, so "as scheduled"
  the `cat` hop alone adds +45-55 µs at p50 in some runs and +5 in others. On one CPU every
  column pays the same wake-ups and the figure is what the relay itself adds; the recorder,
  writer and checker share that CPU too (idle class), the worst case for what they take from
  the conversation.
- **live**: an agent streams 300-byte chunks at 2,000 and at 10,000 frames/s for 30 s into the
  recording proxy while a reader polls the run as an open inspector page does; the row is how
  long after the agent wrote the run's last frame the page got it (``live_bench.py``, which also
  reads from the database alone, for comparison).
- **big frames**: COUNT single-line frames of SIZE bytes from agent to client (timed like the
  storm), in MB/s (10^6 bytes per second), and the relay's peak RSS.
- **start-up**: from spawning the relay (and so the agent) to the first response to
  ``initialize``, for ``cat`` as the agent (it answers before any interpreter could start: the
  relay's own path, judged <= 30 ms over direct, the median of 9 spawns with the database
  already there), for a Python agent that answers at once and for one that first keeps a core
  busy for 300 ms, as real agents loading their code do; the median of a few spawns each. An
  editor waits for that answer: a proxy that starts its agent first only adds its own path to
  the spawn (the interpreter's start-up is shown as the floor of any Python relay). The
  package's bytecode is compiled first (``compileall``), as an installed copy has it: a
  checkout run with ``PYTHONDONTWRITEBYTECODE`` would otherwise compile every module at every
  start.
- **locked database**: round trips through the recording proxy while another process holds
  the database's write lock (25 s; 5 s with ``--quick``); the worst trip during the lock,
  against the median trip before it. Afterwards every trip must be in the recording.
- **SDK**: the official Python SDK: ``examples/sdk_client.py --summary`` driving
  ``examples/sdk_agent.py --chunks N``, directly, through the ``cat`` hop (the floor) and
  through acp-proxy (both modes). The
  client flushes a ``prompt:`` line just before it sends its prompt and a ``stop:`` line when
  the response has come, after all N chunks: chunks/s over that prompt turn (no start-up, no
  handshake). Also shown: the same up to the client's exit (after the relay's, so after the
  recording is complete). Skipped, with a note, when those examples are missing.
- **remote**: ``acp-proxy serve --db`` in front of a WebSocket agent (``remote_bench.py``): a
  stream of N chunk notifications and then round trips, directly (the ``direct`` column) and
  through serve (the ``proxy recording`` column), interleaved in each round; every message must
  be a ``frames`` row once serve has stopped. Judged: stream >= 0.8x direct, p50 added <= 0.5 ms.

After every run the script checks that the client got every byte and line the agent sent; after
every recording run, that the database holds one ``frames`` row per line, per direction, and
that the run row says nothing was lost. A failed check marks the cell ``FAILED`` and makes the
script exit with status 1.

How to read the table
---------------------
One row per figure, one column per relay; the ``target`` column names the performance target and
which columns it judges (``rec``: proxy recording, ``no-rec``: proxy --no-record, no prefix: both
proxy columns); a judged cell ends in ``ok`` or ``MISS``. Targets in parentheses are aims,
shown but not judged.

- ``frames/s``, ``MB/s`` (10^6 bytes/s), ``chunks/s``: throughput, end to end as above.
- ``x direct`` / ``x cat hop`` / ``x tee relay``: that throughput divided by the named column's.
- ``p50 us`` / ``p99 us``: round-trip time percentiles as the client sees them; ``added``: in
  each round, minus the direct pipe's percentile in that same round (they run interleaved),
  then the median over rounds.
- ``first response ms``: from spawning the relay to the first response (start-up; not judged).
- ``peak RSS MiB``: the sum, over the relay's own processes (never the agent), of each one's peak
  resident memory (``VmHWM``, sampled from ``/proc`` every 10 ms): for acp-proxy, the proxy, its
  recorder and whatever the recorder forks (the JSON output has each apart; pages a forked
  child shares with its parent count twice, so the sum is an upper bound); for the cat hop, the
  shell and both ``cat``. "Bounded by a few frames" is judged as: peak RSS on big frames <= the
  same relay's peak RSS in the chunk storm (its fixed cost, full queues included) + 4 frames.

``--repeat N`` (default 3, 1 with ``--quick``) runs everything N times and keeps each cell's
best (highest throughput, lowest percentile; ratios are between best figures: external load
only ever slows a run down) — except ``added`` latencies (paired within each round, then the
median over rounds: the direct pipe's latency on this kind of VM swings between ~15 and ~70 µs
with CPU placement) and peak RSS (the highest); the commit/line relay runs once, the chunk storm
2N times (the client has every byte ~50 ms after the go: in a window that short the machine's
stalls decide, and the direct pipe's own figure varied 1.9x between the rounds of one run).
Every process has a deadline
(``Config.timeout``); temporary files go in one temporary directory, removed at the end.

Numbers from a shared or busy machine are indicative only; compare columns within one run.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import math
import os
import platform
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from bench_agent import CHUNK_LINE_BYTES, GO, HELLO, READY

HERE = Path(__file__).resolve().parent
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


def _proxy(*options: str) -> list[str]:
    return [PY, "-m", "acp_proxy", "run", *options, "--"]


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


# -- workloads -----------------------------------------------------------------------------


def one_way(relay: Relay, agent: list[str], lines: int, line_bytes: int, cfg: Config, scratch: Path) -> dict:
    """Agent -> client, timed from the go line to 'all bytes read and the relay exited'."""
    with Spawned(relay.wrap(agent, scratch), cfg.timeout, sample_rss=relay.key != "direct") as run:
        os.write(run.stdin_fd, HELLO)
        ready = read_line(run)
        if ready != READY:
            raise BenchError(f"handshake: expected READY, got {ready[:200]!r}{run.stderr_tail()}")
        t0 = time.perf_counter_ns()
        os.write(run.stdin_fd, GO)
        got = drain(run.stdout_fd, lines * line_bytes)
        delivered = (time.perf_counter_ns() - t0) / 1e9
        run.finish()
        elapsed = (time.perf_counter_ns() - t0) / 1e9
        rss = run.rss
        cpu = run.cpu
        extra = drain(run.stdout_fd)  # the relay has exited: anything more is an error
        got = (got[0] + extra[0], got[1] + extra[1])
    check_arrival(got, lines * line_bytes, lines)
    result: dict[str, Any] = {"seconds": elapsed, "delivered_seconds": delivered, "lines": lines, "bytes": got[0]}
    if rss:
        result["peak_rss"] = rss
        result["peak_rss_sum"] = sum(rss.values())
        result["cpu_seconds"] = cpu  # start-up included
    if relay.records_db:
        want = {
            "c2a": (2, len(HELLO) - 1 + len(GO) - 1),
            "a2c": (1 + lines, len(READY) - 1 + lines * (line_bytes - 1)),
        }
        result["recorded"] = check_proxy_recording(scratch, want)
    if relay.commit_db:
        check_commit_recording(scratch, 3 + lines)
    return result


def storm(relay: Relay, cfg: Config, scratch: Path) -> dict:
    frames = cfg.commit_storm_frames if relay.key == "commit" else cfg.storm_frames
    result = one_way(relay, [PY, AGENT, "storm", str(frames)], frames, CHUNK_LINE_BYTES, cfg, scratch)
    result["frames_per_s"] = frames / result["seconds"]
    result["delivered_frames_per_s"] = frames / result["delivered_seconds"]
    if "cpu_seconds" in result:
        result["cpu_us_per_frame"] = result["cpu_seconds"] / frames * 1e6
    return result


def big_frames(relay: Relay, count: int, size: int, cfg: Config, scratch: Path) -> dict:
    result = one_way(relay, [PY, AGENT, "big", str(count), str(size)], count, size, cfg, scratch)
    result["mb_per_s"] = result["bytes"] / result["seconds"] / 1e6
    if "cpu_seconds" in result:
        result["cpu_ms_per_mb"] = result["cpu_seconds"] / (result["bytes"] / 1e6) * 1e3
    return result


def percentile(sorted_values: list[int], p: float) -> int:
    """Nearest-rank percentile of an ascending list."""
    rank = max(1, math.ceil(p / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


class Tripper:
    """One relay with the echo agent behind it, driven one timed round trip at a time."""

    def __init__(self, relay: Relay, cfg: Config, scratch: Path) -> None:
        self.relay = relay
        self.scratch = scratch
        self.spawned_ns = time.perf_counter_ns()
        self.run = Spawned(relay.wrap([PY, AGENT, "echo"], scratch), cfg.timeout)
        self.sent = 0
        self.buf = b""
        self.times: list[int] = []
        self.first_response_ms = math.nan

    def start(self, warmup: int) -> None:
        """The first trip (it times start-up), then ``warmup`` unmeasured ones."""
        self.trip()
        self.first_response_ms = (time.perf_counter_ns() - self.spawned_ns) / 1e6
        for _ in range(warmup):
            self.trip()

    def trip(self) -> int:
        """Send one request, wait for its response; nanoseconds taken."""
        i = self.sent
        request = (REQUEST % i).encode()
        t0 = time.perf_counter_ns()
        os.write(self.run.stdin_fd, request)
        while (end := self.buf.find(b"\n")) < 0:
            chunk = os.read(self.run.stdout_fd, 65536)
            if not chunk:
                raise BenchError(f"EOF after {i} round trips{self.run.stderr_tail()}")
            self.buf += chunk
        t1 = time.perf_counter_ns()
        line, self.buf = self.buf[:end], self.buf[end + 1 :]
        if f'"id":{i},'.encode() not in line:
            raise BenchError(f"trip {i}: unexpected response {line[:200]!r}")
        self.sent += 1
        return t1 - t0

    def finish(self) -> dict:
        self.run.finish()
        times = sorted(self.times)
        result: dict[str, Any] = {
            "trips": len(times),
            "p50_us": percentile(times, 50) / 1e3,
            "p99_us": percentile(times, 99) / 1e3,
            "mean_us": sum(times) / len(times) / 1e3,
            "first_response_ms": self.first_response_ms,
        }
        if self.relay.records_db:  # response sizes vary with the id's digits: count rows only
            want = {"c2a": (self.sent, None), "a2c": (self.sent, None)}
            result["recorded"] = check_proxy_recording(self.scratch, want)
        if self.relay.commit_db:
            check_commit_recording(self.scratch, 2 * self.sent)
        return result


RT_BLOCKS = 10  # the measured trips of each relay come in this many blocks, interleaved
RT_BLOCK_WARMUP = 3  # unmeasured trips each time the client switches to a relay


def round_trips(
    relays: list[Relay], cfg: Config, scratches: dict[str, Path], *, one_cpu: bool = False
) -> dict[str, dict | Exception]:
    """All relays at once: blocks of trips, relay after relay, so load drift hits them alike.

    Each relay is started (and warmed up) on its own, then the measured trips go round the
    relays in RT_BLOCKS blocks, each block starting with a different relay. ``one_cpu``: the
    client and every process of every relay (recorders included) share one CPU.
    """
    if not one_cpu:
        return _round_trips(relays, cfg, scratches)
    allowed = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(allowed)})  # inherited by every process spawned meanwhile
    try:
        return _round_trips(relays, cfg, scratches)
    finally:
        os.sched_setaffinity(0, allowed)


def _round_trips(relays: list[Relay], cfg: Config, scratches: dict[str, Path]) -> dict[str, dict | Exception]:
    outcome: dict[str, dict | Exception] = {}
    live: dict[str, Tripper] = {}
    with contextlib.ExitStack() as stack:
        for relay in relays:
            try:
                tripper = Tripper(relay, cfg, scratches[relay.key])
                stack.enter_context(tripper.run)
                tripper.start(cfg.warmup_trips)
                live[relay.key] = tripper
            except BenchError as exc:
                outcome[relay.key] = exc
        per_block = math.ceil(cfg.trips / RT_BLOCKS)
        for block in range(RT_BLOCKS):
            keys = list(live)
            shift = block % max(1, len(keys))
            for key in keys[shift:] + keys[:shift]:
                tripper = live[key]
                try:
                    for _ in range(RT_BLOCK_WARMUP):
                        tripper.trip()
                    tripper.times.extend(tripper.trip() for _ in range(per_block))
                except BenchError as exc:
                    outcome[key] = exc
                    del live[key]
        for key, tripper in live.items():
            try:
                outcome[key] = tripper.finish()
            except BenchError as exc:
                outcome[key] = exc
    direct = outcome.get("direct")
    if isinstance(direct, dict):  # added latency: against the direct pipe of the same round
        for key, result in outcome.items():
            if isinstance(result, dict) and key != "direct":
                result["added_p50_us"] = result["p50_us"] - direct["p50_us"]
                result["added_p99_us"] = result["p99_us"] - direct["p99_us"]
    return outcome


def first_response_ms(argv: list[str], timeout: float) -> float:
    """Spawn ``argv`` (a relay and its agent), send ``initialize``, time its first answer."""
    t0 = time.perf_counter_ns()
    with Spawned(argv, timeout) as run:
        os.write(run.stdin_fd, HELLO)
        line = read_line(run)
        elapsed = (time.perf_counter_ns() - t0) / 1e6
        if b'"id":0' not in line:
            raise BenchError(f"unexpected first response {line[:200]!r}")
        run.finish()
    return elapsed


def startup(relay: Relay, cfg: Config, scratch: Path) -> dict:
    """First response to ``initialize``, from spawning the relay: an agent that answers at once
    and one that first spends ``cfg.slow_start`` seconds of CPU loading itself, as real agents
    do. The median of ``cfg.startup_trials`` spawns each, alternating the two."""
    instant, slow = [], []
    for _ in range(cfg.startup_trials):
        instant.append(first_response_ms(relay.wrap([PY, AGENT, "echo"], scratch), cfg.timeout))
        slow.append(first_response_ms(relay.wrap([PY, AGENT, "echo", str(cfg.slow_start)], scratch), cfg.timeout))
    # ``cat`` as the agent: it answers before any Python could, so all that is measured is the
    # relay's own path to the first line. The database is there already (the spawns above).
    cat = [first_response_ms(relay.wrap(["cat"], scratch), cfg.timeout) for _ in range(cfg.cat_trials)]
    result: dict[str, Any] = {
        "instant_ms": sorted(instant)[len(instant) // 2],
        "slow_ms": sorted(slow)[len(slow) // 2],
        "cat_ms": sorted(cat)[len(cat) // 2],
        "instant_all": instant,
        "slow_all": slow,
        "cat_all": cat,
    }
    if relay.key == "direct":
        result["python_ms"] = interpreter_start_ms(cfg)
    return result


def interpreter_start_ms(cfg: Config) -> float:
    """The floor of any Python relay: this interpreter starting and exiting (median of 5)."""
    times = []
    for _ in range(5):
        t0 = time.perf_counter_ns()
        subprocess.run([PY, "-c", "pass"], check=True, timeout=cfg.timeout)
        times.append((time.perf_counter_ns() - t0) / 1e6)
    return sorted(times)[2]


LOCKER = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=60)
conn.execute("BEGIN IMMEDIATE")
conn.execute("CREATE TABLE IF NOT EXISTS _bench_lock (x)")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
conn.execute("ROLLBACK")
"""


def locked_database(relay: Relay, cfg: Config, scratch: Path) -> dict:
    """Round trips through the recording proxy while another process holds the database's write
    lock for ``cfg.lock_seconds``: the worst trip then, against the median trip before."""
    tripper = Tripper(relay, cfg, scratch)
    with tripper.run:
        tripper.start(cfg.warmup_trips)
        before = sorted(tripper.trip() for _ in range(200))
        locker = subprocess.Popen(
            [PY, "-c", LOCKER, str(scratch), str(cfg.lock_seconds)], stdout=subprocess.PIPE, text=True
        )
        try:
            assert locker.stdout is not None
            if locker.stdout.readline().strip() != "locked":
                raise BenchError("the locking process did not get the write lock")
            during = []
            deadline = time.monotonic() + cfg.lock_seconds
            while time.monotonic() < deadline:
                during.append(tripper.trip())
            locker.wait(timeout=cfg.timeout)
        finally:
            if locker.poll() is None:
                locker.kill()
                locker.wait()
        tripper.times = before + during
        result = tripper.finish()  # also checks that every trip was recorded, once the lock was gone
    during.sort()
    median_before = before[len(before) // 2]
    return {
        **result,
        "locked_trips": len(during),
        "locked_worst_ms": during[-1] / 1e6,
        "locked_p99_ms": percentile(during, 99) / 1e6,
        "unlocked_median_ms": median_before / 1e6,
        "locked_added_ms": (during[-1] - median_before) / 1e6,
    }


def live_lag(rate: int, seconds: float, cfg: Config, scratch: Path) -> dict:
    """An agent streaming ``rate`` frames/s for ``seconds``, read as an open inspector page reads
    it (``live_bench.py``: through the journal, and from the database alone, interleaved)."""
    import live_bench  # imports acp_proxy: only when this workload runs

    try:
        return live_bench.measure(rate, seconds, scratch, cfg.timeout)
    except RuntimeError as exc:
        raise BenchError(str(exc)) from None


def sdk_examples(examples: Path) -> tuple[Path, Path] | None:
    agent, client = examples / "sdk_agent.py", examples / "sdk_client.py"
    return (agent, client) if agent.is_file() and client.is_file() else None


def sdk_stream(relay: Relay, examples: Path, cfg: Config, scratch: Path) -> dict:
    """The SDK client's prompt turn, timed from its ``prompt:`` line to its ``stop:`` line.

    The client prints (and flushes) ``prompt: x`` just before it sends the prompt and
    ``stop: end_turn`` when the response arrives, after every update: what lies between is the
    stream, without start-up, ``initialize`` or ``session/new``. Also timed: from ``prompt:``
    until the client has exited, which is after the relay (and so the recording) has finished.
    """
    chunks = cfg.sdk_chunks
    agent_py, client_py = examples / "sdk_agent.py", examples / "sdk_client.py"
    agent = [PY, str(agent_py), "--chunks", str(chunks), "--chunk-bytes", str(cfg.sdk_chunk_bytes)]
    via = relay.wrap([], scratch) if relay.key != "direct" else []
    client = [PY, str(client_py), "--prompt", "x", "--summary", "--timeout", str(cfg.timeout)]
    seen: dict[str, int] = {}  # transcript line kind -> when it arrived
    transcript = b""
    with Spawned([*client, "--", *via, *agent], cfg.timeout + 10, stdin=subprocess.DEVNULL) as run:
        while chunk := os.read(run.stdout_fd, 65536):
            now = time.perf_counter_ns()
            transcript += chunk
            for line in transcript.split(b"\n")[:-1]:  # complete lines only
                seen.setdefault(line.split(b":", 1)[0].decode(errors="replace"), now)
        run.finish()
        exited = time.perf_counter_ns()
    text = transcript.decode(errors="replace")
    # --summary: the client counts the updates it received instead of printing each one.
    if f"updates: agent_message_chunk={chunks}\n" not in text or "stop: end_turn" not in text:
        raise BenchError(f"the SDK client did not get {chunks} chunks and end_turn: {text[-300:]!r}")
    if relay.records_db:
        check_sdk_recording(scratch, chunks)
    return {
        "chunks": chunks,
        "stream_seconds": (seen["stop"] - seen["prompt"]) / 1e9,
        "to_exit_seconds": (exited - seen["prompt"]) / 1e9,
        "chunks_per_s": chunks / ((seen["stop"] - seen["prompt"]) / 1e9),
        "to_exit_chunks_per_s": chunks / ((exited - seen["prompt"]) / 1e9),
    }


def check_sdk_recording(db: Path, chunks: int) -> None:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        (chunk_rows,) = conn.execute(
            "SELECT count(*) FROM frames WHERE dir = 'a2c' AND update_kind = 'agent_message_chunk'"
        ).fetchone()
        status, not_recorded, counted = conn.execute(
            "SELECT status, not_recorded, frames_c2a + frames_a2c FROM runs"
        ).fetchone()
        (rows,) = conn.execute("SELECT count(*) FROM frames WHERE dir IN ('c2a', 'a2c')").fetchone()
    finally:
        conn.close()
    if chunk_rows != chunks or status != "ended" or not_recorded or rows != counted:
        raise BenchError(
            f"SDK recording: {chunk_rows} agent_message_chunk rows (expected {chunks}), "
            f"{rows} rows for {counted} frames counted, run {status!r}, not_recorded={not_recorded}"
        )


# -- the run -------------------------------------------------------------------------------


def remote_stream(relays: list[Relay], cfg: Config, scratches: dict[str, Path]) -> dict[str, dict | Exception]:
    """``acp-proxy serve`` (recording) vs the WebSocket agent directly: remote_bench.py's
    stream of chunks and round trips, the two interleaved in one round. The direct side's
    figures go to the ``direct`` column, serve's to ``proxy recording``."""
    sys.path.insert(0, str(HERE))
    try:
        import remote_bench
    finally:
        sys.path.remove(str(HERE))
    try:
        results = remote_bench.measure(scratches["proxy_rec"], cfg.remote_chunks, cfg.remote_trips)
    except SystemExit as exc:  # a check failed (a message not recorded, a peer that did not start)
        raise BenchError(str(exc)) from None
    direct, served = results["direct"][0], results["serve"][0]
    served["added_p50_us"] = served["p50_us"] - direct["p50_us"]
    outcome: dict[str, dict | Exception] = {"direct": direct, "proxy_rec": served}
    return {relay.key: outcome[relay.key] for relay in relays}


@dataclass
class Cell:
    """Results of one (workload, relay) pair over the repeats."""

    runs: list[dict] = field(default_factory=list)
    error: str | None = None


def best(cell: Cell, key: str, how: str) -> float | None:
    """Over a cell's runs: the "max", "min" or "median" of one figure."""
    values = sorted(run[key] for run in cell.runs if key in run)
    if not values:
        return None
    if how == "median":
        return values[(len(values) - 1) // 2]
    return values[-1] if how == "max" else values[0]


@dataclass
class Plan:
    """A workload: ``run`` measures one relay at a time; ``group`` all of them together."""

    name: str  # workload key, e.g. "storm", "rt", "big:64x1048576", "sdk"
    relays: list[str]
    run: Callable[[Relay, Path], dict] | None = None
    group: Callable[[list[Relay], dict[str, Path]], dict[str, dict | Exception]] | None = None
    rounds: int = 1  # runs per --repeat: more for a figure timed over a short window


def make_plans(cfg: Config, examples: Path, skip_sdk: str | None) -> list[Plan]:
    all_keys = [relay.key for relay in RELAYS]
    plans = [
        # Delivery takes ~50 ms of a storm: at that scale the machine's stalls decide (the
        # direct pipe's own figure varied 1.9x between the rounds of one run): more tries.
        Plan("storm", all_keys, lambda relay, scratch: storm(relay, cfg, scratch), rounds=2),
        Plan("rt", all_keys, group=lambda relays, scratches: round_trips(relays, cfg, scratches)),
        # On one CPU, only the columns the figure is judged against: another column's own work
        # (an exporter retrying, a checker catching up) would share that CPU with the
        # conversation being measured (with the otlp column there, recording's p99 went from
        # about +80 µs to +286).
        Plan(
            "rt:1cpu",
            ["direct", "cat", "proxy", "proxy_rec"],
            group=lambda relays, scratches: round_trips(relays, cfg, scratches, one_cpu=True),
        ),
    ]
    for count, size in cfg.big:
        plans.append(
            Plan(
                f"big:{count}x{size}",
                all_keys,
                lambda relay, scratch, c=count, s=size: big_frames(relay, c, s, cfg, scratch),
            )
        )
    plans.append(Plan("startup", ["direct", "cat", "proxy", "proxy_rec"], lambda r, s: startup(r, cfg, s)))
    plans.append(Plan("lock", ["proxy_rec"], lambda relay, scratch: locked_database(relay, cfg, scratch)))
    for rate, seconds in cfg.live:

        def live_plan(relay: Relay, scratch: Path, rate: int = rate, seconds: float = seconds) -> dict:
            return live_lag(rate, seconds, cfg, scratch)

        plans.append(Plan(f"live:{rate}", ["proxy_rec"], live_plan))
    if skip_sdk is None:
        plans.append(
            Plan(
                "sdk",
                ["direct", "cat", "proxy", "proxy_rec"],
                lambda relay, scratch: sdk_stream(relay, examples, cfg, scratch),
            )
        )
    plans.append(Plan("remote", ["direct", "proxy_rec"], group=lambda relays, scr: remote_stream(relays, cfg, scr)))
    return plans


def execute(plans: list[Plan], repeat: int, workdir: Path, progress: Callable[[str], None]) -> dict:
    cells: dict[tuple[str, str], Cell] = {(plan.name, key): Cell() for plan in plans for key in plan.relays}

    def record(plan: Plan, key: str, result: dict | Exception) -> None:
        cell = cells[plan.name, key]
        if isinstance(result, Exception):
            cell.error = f"{plan.name} / {BY_KEY[key].title}: {result}"
            progress(f"  FAILED: {cell.error}")
        else:
            cell.runs.append(result)

    def cleanup(plan: Plan, keys: list[str], scratches: dict[str, Path]) -> None:
        wait_for_lingerers()
        for scratch in scratches.values():
            remove_db(scratch)
        strays = end_strays()
        if strays:
            for key in keys:
                record(plan, key, BenchError(f"processes left behind: {strays}"))

    for round_no in range(repeat * max(plan.rounds for plan in plans)):
        for plan in plans:
            if round_no >= repeat * plan.rounds:
                continue
            # commit/line is orders of magnitude off every target: one run says it all.
            keys = [key for key in plan.relays if not (round_no and key == "commit")]
            name = plan.name.replace(":", "-")
            scratches = {key: workdir / f"{name}-{key}-{round_no}" for key in keys}
            if plan.group is not None:
                progress(f"[{round_no + 1}/{repeat * plan.rounds}] {plan.name:<18} all relays, interleaved")
                try:
                    outcome = plan.group([BY_KEY[key] for key in keys], scratches)
                except (BenchError, OSError) as exc:
                    outcome = dict.fromkeys(keys, exc)
                for key in keys:
                    record(plan, key, outcome.get(key, BenchError("no result")))
                cleanup(plan, keys, scratches)
                continue
            assert plan.run is not None
            for key in keys:
                progress(f"[{round_no + 1}/{repeat * plan.rounds}] {plan.name:<18} {BY_KEY[key].title}")
                try:
                    record(plan, key, plan.run(BY_KEY[key], scratches[key]))
                except (BenchError, OSError) as exc:
                    record(plan, key, exc)
                finally:
                    cleanup(plan, [key], {key: scratches[key]})
    return cells


# -- the table -----------------------------------------------------------------------------


@dataclass
class Mark:
    text: str
    ok: bool | None = None  # None: not judged
    failed: bool = False  # the run failed a check or timed out: no figure


@dataclass
class Row:
    label: str
    cells: dict[str, Mark]
    target: str = ""
    section: bool = False


def fmt_int(value: float) -> str:
    return f"{value:,.0f}"


def fmt_ratio(value: float) -> str:
    return f"{value:.2f}x"


def fmt_signed(value: float) -> str:
    return f"{value:+,.0f}"


def fmt_size(size: int) -> str:
    return f"{size // MiB} MiB" if size % MiB == 0 else f"{size:,} B"


def build_rows(cfg: Config, cells: dict, sdk_note: str | None) -> tuple[list[Row], list[dict]]:
    rows: list[Row] = []
    judged: list[dict] = []

    def judge(key: str, label: str, value: float, ok: bool, target: str, text: str) -> Mark:
        judged.append({"relay": key, "figure": label, "value": value, "target": target, "pass": ok})
        return Mark(text, ok)

    def pick(name: str, key: str, metric: str, how: str) -> float | None:
        cell = cells.get((name, key))
        if cell is None or cell.error is not None:
            return None
        return best(cell, metric, how)

    def failed(name: str, key: str) -> bool:
        cell = cells.get((name, key))
        return cell is not None and cell.error is not None

    def series(name: str, metric: str, how: str) -> dict[str, float]:
        values = {}
        for relay in RELAYS:
            value = pick(name, relay.key, metric, how)
            if value is not None:
                values[relay.key] = value
        return values

    def row(
        label: str,
        name: str,
        values: dict[str, float],
        fmt: Callable[[float], str],
        target: str = "",
        judges: dict[str, Callable[[float], bool]] | None = None,
        suffix: dict[str, str] | None = None,
    ) -> None:
        marks: dict[str, Mark] = {}
        for relay in RELAYS:
            if relay.key in values:
                value = values[relay.key]
                text = fmt(value) + (suffix or {}).get(relay.key, "")
                if judges and relay.key in judges:
                    marks[relay.key] = judge(
                        relay.key, f"{name} {label}", value, judges[relay.key](value), target, text
                    )
                else:
                    marks[relay.key] = Mark(text)
            elif failed(name, relay.key):
                marks[relay.key] = Mark("FAILED", failed=True)
        rows.append(Row(label, marks, target))

    def ratios(values: dict[str, float], base: str) -> dict[str, float]:
        if base not in values or values[base] <= 0:
            return {}
        return {key: value / values[base] for key, value in values.items()}

    proxies = ("proxy", "proxy_rec")

    # (a) chunk storm
    rows.append(Row(f"chunk storm: {cfg.storm_frames:,} x {CHUNK_LINE_BYTES} B frames", {}, section=True))
    fps = series("storm", "frames_per_s", "max")
    commit_note = {"commit": "*"}
    row("frames/s, to exit", "storm", fps, fmt_int, "(recording complete)", suffix=commit_note)
    row("x direct", "storm", ratios(fps, "direct"), fmt_ratio)
    row("x cat hop", "storm", ratios(fps, "cat"), fmt_ratio, "no-rec >= 0.8x", {"proxy": lambda v: v >= 0.8})
    row("x tee relay", "storm", ratios(fps, "tee"), fmt_ratio, "(aim: rec ~1x)")
    delivered = series("storm", "delivered_frames_per_s", "max")
    row(
        "delivered frames/s",
        "storm",
        delivered,
        fmt_int,
        "rec >= 150,000 (client has every byte)",
        {"proxy_rec": lambda v: v >= 150_000},
        commit_note,
    )
    row(
        "delivered x recording",
        "storm",
        ratios(delivered, "proxy_rec"),
        fmt_ratio,
        "check >= 0.9x",
        {"proxy_check": lambda v: v >= 0.9},
    )
    storm_rss = {k: v / MiB for k, v in series("storm", "peak_rss_sum", "max").items()}
    row("peak RSS MiB", "storm", storm_rss, lambda v: f"{v:,.1f}")
    cpu = series("storm", "cpu_us_per_frame", "min")
    row("relay CPU us/frame", "storm", cpu, lambda v: f"{v:,.1f}", "(all its processes, start-up included)")

    # (b) round trips: as the scheduler places the processes (not judged), then on one CPU
    def round_trip_rows(name: str, title: str, judged: bool) -> None:
        rows.append(Row(title, {}, section=True))
        row("p50 us", name, series(name, "p50_us", "min"), fmt_int)
        added50 = series(name, "added_p50_us", "median")
        if added50 and judged:
            row("p50 added us", name, added50, fmt_signed, "rec <= 30", {"proxy_rec": lambda v: v <= 30})
        elif added50:
            row("p50 added us", name, added50, fmt_signed, "(see the cat hop)")
        row("p99 us", name, series(name, "p99_us", "min"), fmt_int)
        added99 = series(name, "added_p99_us", "median")
        if added99 and judged:
            row("p99 added us", name, added99, fmt_signed, "rec <= 250", {"proxy_rec": lambda v: v <= 250})
        elif added99:
            row("p99 added us", name, added99, fmt_signed, "(see the cat hop)")
        row(
            "first response ms",
            name,
            series(name, "first_response_ms", "min"),
            lambda v: f"{v:,.0f}",
            "(start-up, not judged)",
        )

    round_trip_rows("rt", f"round trips: {cfg.trips:,} sequential request -> response, as scheduled", False)
    round_trip_rows("rt:1cpu", f"round trips: {cfg.trips:,} sequential request -> response, on one CPU", True)

    # start-up
    rows.append(
        Row(f"start-up: spawn -> first response to initialize (median of {cfg.startup_trials})", {}, section=True)
    )
    cat_ms = series("startup", "cat_ms", "min")
    row(f"cat as the agent ms (median of {cfg.cat_trials})", "startup", cat_ms, lambda v: f"{v:,.0f}")
    cat_added = {k: v - cat_ms["direct"] for k, v in cat_ms.items() if "direct" in cat_ms}
    row("  added ms", "startup", cat_added, fmt_signed, "<= 30", {k: (lambda v: v <= 30) for k in proxies})
    instant = series("startup", "instant_ms", "min")
    row("instant agent ms", "startup", instant, lambda v: f"{v:,.0f}", "(floor: see below)")
    row(
        "  added ms",
        "startup",
        {k: v - instant["direct"] for k, v in instant.items() if "direct" in instant},
        fmt_signed,
    )
    slow = series("startup", "slow_ms", "min")
    row(f"{cfg.slow_start * 1000:.0f} ms agent ms", "startup", slow, lambda v: f"{v:,.0f}")
    slow_added = {k: v - slow["direct"] for k, v in slow.items() if "direct" in slow}
    row("  added ms", "startup", slow_added, fmt_signed, "<= 30", {k: (lambda v: v <= 30) for k in proxies})
    floor = series("startup", "python_ms", "min")
    if floor:
        rows.append(
            Row("python -c pass ms", {"direct": Mark(f"{floor['direct']:,.0f}")}, "(the interpreter's start-up)")
        )
        # On a busy machine the interpreter's start-up swamps the rest: this is the relay's own part.
        over_floor = {k: v - floor["direct"] for k, v in cat_ms.items() if k in proxies}
        row("  cat agent ms over python -c pass", "startup", over_floor, fmt_signed, "(the relay's own path)")

    # a locked database
    rows.append(
        Row(f"round trips while another process holds the write lock for {cfg.lock_seconds:.0f} s", {}, section=True)
    )
    row("trips during the lock", "lock", series("lock", "locked_trips", "min"), fmt_int)
    row("worst trip ms", "lock", series("lock", "locked_worst_ms", "min"), lambda v: f"{v:,.1f}")
    row(
        "  added ms",
        "lock",
        series("lock", "locked_added_ms", "min"),
        lambda v: f"{v:+,.1f}",
        "rec <= 50 (vs median unlocked)",
        {"proxy_rec": lambda v: v <= 50},
    )

    # (c) big frames
    for count, size in cfg.big:
        name = f"big:{count}x{size}"
        rows.append(Row(f"big frames: {count} x {fmt_size(size)}, agent -> client", {}, section=True))
        mbs = series(name, "mb_per_s", "max")
        row("MB/s", name, mbs, fmt_int, "rec >= 300", {"proxy_rec": lambda v: v >= 300})
        row("x direct", name, ratios(mbs, "direct"), fmt_ratio)
        row("x cat hop", name, ratios(mbs, "cat"), fmt_ratio)
        cpu = series(name, "cpu_ms_per_mb", "min")
        row("relay CPU ms/MB", name, cpu, lambda v: f"{v:,.2f}", "(all its processes, start-up included)")
        rss = {k: v / MiB for k, v in series(name, "peak_rss_sum", "max").items()}
        bound = {k: storm_rss[k] + 4 * size / MiB for k in proxies if k in storm_rss}
        row(
            "peak RSS MiB",
            name,
            rss,
            lambda v: f"{v:,.1f}",
            "<= storm RSS + 4 frames",
            {k: (lambda v, b=b: v <= b) for k, b in bound.items()},
        )

    # (e) live: an open page following a streaming run (live_bench.py)
    for rate, seconds in cfg.live:
        name = f"live:{rate}"
        if (name, "proxy_rec") not in cells:
            continue
        rows.append(Row(f"live: {rate:,} frames/s for {seconds:.0f} s, agent -> open page", {}, section=True))
        last = series(name, "journal_last_ms", "min")
        row("last frame shown, ms", name, last, fmt_int, "rec <= 1000", {"proxy_rec": lambda v: v <= 1000})
        row("  p50 ms (frames sent)", name, series(name, "journal_p50_ms", "min"), fmt_int)
        row("  max ms", name, series(name, "journal_max_ms", "min"), fmt_int)
        row("  database only: last frame, ms", name, series(name, "database_last_ms", "min"), fmt_int)
    # (f) remote: acp-proxy serve (WebSocket)
    if any(name == "remote" for name, _ in cells):
        rows.append(
            Row(
                f"remote: WebSocket, {cfg.remote_chunks:,} chunks; serve in the recording column",
                {},
                section=True,
            )
        )
        remote = series("remote", "msgs_per_s", "max")
        row("msgs/s", "remote", remote, fmt_int)
        row("x direct", "remote", ratios(remote, "direct"), fmt_ratio, "rec >= 0.8x", {"proxy_rec": lambda v: v >= 0.8})
        row("round trip p50 us", "remote", series("remote", "p50_us", "min"), fmt_int)
        row(
            "  added p50 us",
            "remote",
            series("remote", "added_p50_us", "median"),
            fmt_signed,
            "rec <= 500",
            {"proxy_rec": lambda v: v <= 500},
        )
        row("serve CPU us/msg", "remote", series("remote", "cpu_us_per_msg", "min"), lambda v: f"{v:,.1f}")

    # (d) the official SDK
    if sdk_note is not None:
        rows.append(Row(f"SDK: skipped — {sdk_note}", {}, section=True))
    else:
        rows.append(
            Row(
                f"SDK: sdk_client <- sdk_agent, {cfg.sdk_chunks:,} x {cfg.sdk_chunk_bytes} B chunks",
                {},
                section=True,
            )
        )
        steady = series("sdk", "chunks_per_s", "max")
        row("chunks/s (prompt turn)", "sdk", steady, fmt_int)
        row("x direct", "sdk", ratios(steady, "direct"), fmt_ratio)
        row(
            "x cat hop (floor)",
            "sdk",
            ratios(steady, "cat"),
            fmt_ratio,
            "no-rec >= 0.9x",
            {"proxy": lambda v: v >= 0.9},
        )
        row(
            "x proxy --no-record",
            "sdk",
            ratios(steady, "proxy"),
            fmt_ratio,
            "rec >= 0.85x",
            {"proxy_rec": lambda v: v >= 0.85},
        )
        to_exit = series("sdk", "to_exit_chunks_per_s", "max")
        row("x direct, to exit", "sdk", ratios(to_exit, "direct"), fmt_ratio, "(incl. shutdown, not judged)")
    return rows, judged


def shown(rows: list[Row]) -> list[Row]:
    """The rows with a figure, and the section titles above them (``--only`` leaves gaps)."""
    kept: list[Row] = []
    for row in rows:
        if row.section or row.cells:
            kept.append(row)
    return [row for i, row in enumerate(kept) if not row.section or (i + 1 < len(kept) and not kept[i + 1].section)]


def mark_text(mark: Mark, rich: bool) -> str:
    if mark.failed and rich:
        return f"[bold red]{mark.text}[/]"
    if mark.ok is None:
        return mark.text
    if rich:
        return f"[green]{mark.text} ok[/]" if mark.ok else f"[bold red]{mark.text} MISS[/]"
    return f"{mark.text} {'ok' if mark.ok else 'MISS'}"


def print_table(rows: list[Row], title: str, footnotes: list[str], relays: list[Relay] | None = None) -> None:
    """The table, one column per relay in ``relays`` (default: all of them)."""
    relays = RELAYS if relays is None else relays
    headers = ["", *(relay.title for relay in relays), "target"]
    if sys.stdout.isatty():
        from rich.console import Console
        from rich.table import Table

        table = Table(title=title, title_justify="left", caption="\n".join(footnotes), caption_justify="left")
        table.add_column("", max_width=26)  # section titles wrap rather than widen the table
        for relay in relays:
            table.add_column(relay.title, justify="right", no_wrap=True, min_width=len(relay.title))
        table.add_column("target", style="dim")
        for row in rows:
            if row.section:
                table.add_section()
                table.add_row(f"[bold]{row.label}[/]", *([""] * (len(relays) + 1)))
                continue
            cells = [mark_text(row.cells[r.key], True) if r.key in row.cells else "" for r in relays]
            table.add_row("  " + row.label, *cells, row.target)
        Console().print(table)
        return
    lines = [
        [
            f"  {row.label}",
            *(mark_text(row.cells[r.key], False) if r.key in row.cells else "" for r in relays),
            row.target,
        ]
        for row in rows
    ]
    widths = [
        max(len(h), *(len(line[i]) for line, row in zip(lines, rows, strict=True) if not row.section))
        for i, h in enumerate(headers)
    ]
    out = [title]

    def fmt_line(values: list[str]) -> str:
        parts = [values[0].ljust(widths[0])]
        parts += [value.rjust(width) for value, width in zip(values[1:-1], widths[1:-1], strict=True)]
        parts.append(values[-1])
        return "  ".join(parts).rstrip()

    out.append(fmt_line(headers))
    out.append("-" * (sum(widths) + 2 * (len(widths) - 1)))
    for line, row in zip(lines, rows, strict=True):
        out.append(row.label if row.section else fmt_line(line))
    out.extend(footnotes)
    print("\n".join(out))


# -- main ----------------------------------------------------------------------------------


def environment() -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "loadavg_at_start": os.getloadavg(),
        "guest_halt_poll_ns": _read_text("/sys/module/haltpoll/parameters/guest_halt_poll_ns"),
        "acp_proxy_commit": _git("rev-parse", "HEAD"),
        "acp_proxy_dirty_files": _git("status", "--porcelain", "--", "acp_proxy"),
    }


def _read_text(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def otlp_note() -> str | None:
    """Why the ``recording + otlp`` column is skipped (the ``[otel]`` extra is missing: ``run
    --otlp`` would refuse to start), or None when it can run."""
    from acp_proxy.otel.command import missing_sdk

    return missing_sdk()


def sdk_note_for(examples: Path) -> str | None:
    """Why the SDK workload is skipped, or None when it can run."""
    if sdk_examples(examples) is None:
        return "examples/sdk_agent.py or examples/sdk_client.py not found"
    return None


def compile_package() -> None:
    """Bytecode for every module of the acp_proxy the relays run, where it is missing or stale
    (pip does this when it installs; an editable checkout may never have written any)."""
    import compileall

    import acp_proxy

    compileall.compile_dir(Path(acp_proxy.__file__).parent, quiet=1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="reduced sizes: a smoke test in about a minute")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also save every figure as JSON here")
    parser.add_argument(
        "--repeat",
        type=int,
        metavar="N",
        help="run everything N times, interleaved, and keep each cell's best (default: 3; 1 with --quick)",
    )
    parser.add_argument(
        "--examples",
        type=Path,
        default=REPO / "examples",
        metavar="DIR",
        help="where sdk_agent.py and sdk_client.py live (default: the repo's examples/)",
    )
    parser.add_argument(
        "--only",
        metavar="WORKLOADS",
        help="comma-separated workloads to run: storm, rt, big, startup, lock, live, sdk, remote (default: all)",
    )
    parser.add_argument(
        "--relays",
        metavar="KEYS",
        help=f"comma-separated relay columns to run (default: all): {', '.join(BY_KEY)}",
    )
    args = parser.parse_args(argv)
    cfg = Config.quick() if args.quick else Config.full()
    plans = make_plans(cfg, args.examples, sdk_note_for(args.examples))
    if args.only:
        wanted = set(args.only.split(","))
        plans = [plan for plan in plans if plan.name.split(":")[0] in wanted]
    if args.relays:
        keys = args.relays.split(",")
        unknown = [key for key in keys if key not in BY_KEY]
        if unknown:
            parser.error(f"unknown relay column(s): {', '.join(unknown)}")
        for plan in plans:
            plan.relays = [key for key in plan.relays if key in keys]
    otlp_skipped = otlp_note()
    if otlp_skipped is not None:
        for plan in plans:
            plan.relays = [key for key in plan.relays if key != "proxy_otlp"]
    relays = [relay for relay in RELAYS if otlp_skipped is None or relay.key != "proxy_otlp"]
    repeat = max(1, args.repeat if args.repeat is not None else (1 if args.quick else 3))
    env = environment()
    sdk_note = sdk_note_for(args.examples)
    become_subreaper()
    compile_package()

    def progress(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="acp-relay-bench-") as tmp:
        cells = execute(plans, repeat, Path(tmp), progress)
    elapsed = time.monotonic() - started

    rows, judged = build_rows(cfg, cells, sdk_note)
    errors = [cell.error for cell in cells.values() if cell.error]
    passed = sum(item["pass"] for item in judged)
    title = (
        f"acp-proxy relay benchmark{' (--quick)' if args.quick else ''}: "
        f"{env['cpus']} CPUs, Python {env['python']}, best of {repeat}, {elapsed:.0f} s"
    )
    footnotes = [
        f"* commit/line relay: {cfg.commit_storm_frames:,} frames (it commits each one).",
        "peak RSS: sum of each relay process's VmHWM (proxy + recorder for acp-proxy), the agent excluded.",
        f"targets: {passed} of {len(judged)} met.",
    ]
    if otlp_skipped is not None:
        footnotes.append(f"{BY_KEY['proxy_otlp'].title}: skipped — {otlp_skipped}.")
    if errors:
        footnotes += ["FAILED:", *(f"  {error}" for error in errors)]
    print_table(shown(rows), title, footnotes, relays)

    if args.json is not None:
        results = {f"{name}/{key}": {"error": cell.error, "runs": cell.runs} for (name, key), cell in cells.items()}
        document = {
            "config": cfg.__dict__,
            "environment": env,
            "seconds": elapsed,
            "sdk_skipped": sdk_note,
            "otlp_skipped": otlp_skipped,
            "results": results,
            "targets": judged,
            "errors": errors,
        }
        args.json.write_text(json.dumps(document, indent=2, default=str) + "\n")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
