"""The recorder: a process of its own that reads a run's journal and records it into SQLite.

Owns: everything after a chunk is journaled — framing, decoding, protocol tracking and batched
inserts — and the bookkeeping that makes recording exactly-once across crashes: with every
batch, the writer commits the journal position the batch's frames came from (``journal_state``
on the run row), so whoever resumes a journal (the same recorder after its writer died, the
proxy after its recorder died, or any later command that opens the database) starts where the
last commit left off, and no frame is recorded twice or lost.

Processes: the recorder frames, decodes and tracks; it forks a writer that owns SQLite (a thread
would share the GIL, and sqlite3 takes the GIL back after every row, so decoding and inserting
would run one after the other instead of side by side on two cores). Both run in a session of
their own, so a signal sent to the proxy's process group cannot cut a recording short. The
recorder learns that the journal has grown from a wake-up byte the relay writes to a pipe after
each append, and that the relay is gone from that pipe's end of file. It reads at its own pace:
the relay never waits for it, for the writer, or for a database lock (another process may hold
the write lock for minutes: the journal grows meanwhile, and recording catches up).

Must not know: trio, the agent's pipes, the proxy's stdout. It speaks to a person only through
stderr, prefixed ``acp-proxy:``.

The parts: ``indexer`` (records -> rows), ``writer`` (rows -> SQLite, the writer process),
``session`` (one journal, live or recovered), ``recovery`` (dead runs' journals). This module is
the process's entry point only (``python -m acp_proxy.record.recorder``, spawned by the relay).
The journal's record format is in ``journal.py``; the frames' columns in ``protocol/frames.py``.
"""

from __future__ import annotations

import gc
import os
import signal
import sqlite3
import sys
from pathlib import Path

from acp_proxy.record import journal as jr
from acp_proxy.record.recovery import recover_dead_runs
from acp_proxy.record.session import Session
from acp_proxy.record.writer import LOCK_PATIENCE, say
from acp_proxy.store import database as store

RESUMED_EXIT = 3  # the recorder could not lock the journal: someone else is recording it


# -- the process ---------------------------------------------------------------------------


_M_TRIM_THRESHOLD = -1  # glibc's mallopt() parameters
_M_MMAP_THRESHOLD = -3
KEEP_FREED_BYTES = 64 * 1024 * 1024


def _reuse_freed_memory() -> None:
    """Keep big buffers' memory for the next ones instead of handing it back to the kernel.

    A big frame passes through a few buffers of its size here (the line, its text, the
    batch to the writer, and in the writer the decoded batch). By default glibc maps each one
    afresh and unmaps it when freed, and the kernel clears every page again at first touch:
    that was a third of the recorder's time on 1 MiB frames (profiled). From the heap, kept
    up to KEEP_FREED_BYTES, freed pages are reused as they are. Elsewhere than glibc: nothing."""
    try:
        import ctypes

        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt(_M_MMAP_THRESHOLD, 32 * 1024 * 1024)  # glibc's largest; bigger frames still get a mapping
    mallopt(_M_TRIM_THRESHOLD, KEEP_FREED_BYTES)


def _without_dataframes() -> None:
    """sqlite-utils imports numpy and pandas when they are installed, for column types no
    recording holds: numpy alone was a third of the recorder's start-up (~50 ms of CPU, on the
    way to the first commit of a burst of big frames). A None in ``sys.modules`` makes their
    import fail as if they were absent, in this process (and the writer it forks) only."""
    for name in ("numpy", "pandas"):
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]


def _site_hooks() -> None:
    """Started without ``site`` (``python -S``: the relay gives it its paths, see
    ``relay/recording.py``), the recorder still runs the installation's ``sitecustomize`` and
    ``usercustomize``, as ``site`` would have: hooks someone installed on purpose."""
    if not sys.flags.no_site:
        return
    for name in ("sitecustomize", "usercustomize"):
        try:
            __import__(name)
        except ImportError as exc:
            if exc.name != name:
                say(f"error in {name}: {exc}")
        except Exception as exc:  # site goes on after a broken hook too
            say(f"error in {name}: {type(exc).__name__}: {exc}")


def main(argv: list[str]) -> int:
    """``python -m acp_proxy.record.recorder --journal PATH [--wake-fd N] [--ready-fd N] |
    --recover PATH``."""
    _site_hooks()
    _without_dataframes()
    _reuse_freed_memory()
    # A terminal's ^C or a hang-up reaches the whole foreground group; the relay decides what
    # they mean. The recorder stops only when its journal is recorded.
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    # Frames and rows are short-lived and acyclic: a full collection every few hundred
    # allocations cost ~12% of the decoder's time (profiled). Collect far less often.
    gc.freeze()
    gc.set_threshold(100_000, 50, 100)
    args = dict(zip(argv[::2], argv[1::2], strict=False))
    recovering = "--recover" in args
    path = Path(args.get("--recover") or args["--journal"])
    wake_fd = int(args["--wake-fd"]) if "--wake-fd" in args else None
    if wake_fd is not None:
        os.set_blocking(wake_fd, False)
        os.set_inheritable(wake_fd, False)
    try:
        fd = jr.open_journal(path)
    except OSError:
        return 0  # recorded and removed already
    # Live: share the lock with the relay. A recovery the proxy asked for after its recorder
    # died: wait until that recorder's writer is gone too.
    if not jr.lock(fd, exclusive=recovering, timeout=LOCK_PATIENCE if recovering else 0.0):
        return RESUMED_EXIT
    if not jr.names_file(path, fd):
        return RESUMED_EXIT  # recorded (and removed) by another process before the lock was ours
    if "--ready-fd" in args:
        # The proxy may exit once the journal's lock is ours: tell it (end of file on its pipe).
        try:
            os.close(int(args["--ready-fd"]))
        except OSError:
            pass
    try:
        session = Session(path, fd, wake_fd=wake_fd)
    except (store.StoreError, sqlite3.Error) as exc:
        say(f"cannot record: {exc} (the journal {path.name} is kept for the next acp-proxy command)")
        return 2
    except jr.JournalDamaged as exc:
        say(f"cannot record: the journal {path.name} is damaged ({exc})")
        return 2
    except OSError:
        return 2
    if recovering:
        session.recover()
        return 0
    # Runs whose processes all died (kill -9, a power cut) are recorded by the next run too, not
    # only by the next query command: an editor may start many runs before anyone reads them.
    # Here, at idle priority, the relay waits for none of it.
    recover_dead_runs(session.db_path)
    return session.follow()


if __name__ == "__main__":
    # The proxy waits for this exit: tearing the interpreter down (modules, caches), at the
    # lowest priority, kept it waiting up to 50 ms longer. Everything said went out by os.write.
    os._exit(main(sys.argv[1:]))
