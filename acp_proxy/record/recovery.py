"""Recovery: recording the journals of runs whose processes are all gone, and the database
openers that do it first.

Owns: finding dead runs' journals (``recover_dead_runs``), recording one (``recover_journal``:
the run ends ``crashed`` with what was recovered, and the journal goes), and the openers the
commands use (``open_for_reading``, ``open_for_writing``): store's, with dead runs recorded
first, so that no run stays ``running`` once its proxy is gone and no frame a peer received is
lost.

Must not know: how records are indexed or rows written (``session.Session`` does both). Import-
cheap on purpose: every query command imports it; the recorder's code is imported only when
there is a journal to recover.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from acp_proxy.store import database as store
from acp_proxy.store.dbfile import StoreError
from acp_proxy.store.dbfile import reason as _reason

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on a query's path
if TYPE_CHECKING:
    import sqlite_utils


def open_for_reading(path: Path) -> store.ReadDb:
    """``store.open_for_reading``, with the journals of dead runs recorded first (see there)."""
    return store.open_for_reading(path, recover=recover_dead_runs)


def open_for_writing(path: Path, limit_bytes: int | None = None) -> sqlite_utils.Database:
    """``store.open_for_writing``, then the journals of dead runs recorded."""
    db = store.open_for_writing(path, limit_bytes)
    recover_dead_runs(path)
    return db


def runs_being_recorded(path: Path) -> int:
    """How many runs into ``path`` are still being recorded: journals left once the dead ones
    were recovered (their proxy or recorder holds the lock; a proxy exits with its agent and its
    recorder may finish after it). A directory listing."""
    from acp_proxy.store.dbfile import JOURNAL_SUFFIX

    try:
        names = os.listdir(f"{path}.journal")
    except OSError:
        return 0
    return sum(1 for name in names if name.endswith(JOURNAL_SUFFIX))


def wait_recorded(path: Path, timeout: float) -> bool:
    """Wait until no run into ``path`` is still being recorded (every journal left is a dead
    run's, or none is left), at most ``timeout`` seconds; whether that came. For a caller that
    needs the whole run, not what is committed so far: a proxy exits with its agent, and its
    recorder may finish after it."""
    import fcntl
    import time

    from acp_proxy.store.dbfile import JOURNAL_SUFFIX

    directory = Path(f"{path}.journal")
    deadline = time.monotonic() + timeout

    def held(name: str) -> bool:
        try:
            fd = os.open(directory / name, os.O_RDONLY)
        except OSError:
            return False  # recorded and removed meanwhile
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True  # its proxy or recorder holds it: live
        except OSError:
            return False
        finally:
            os.close(fd)  # the probe's lock goes with it
        return False

    while True:
        try:
            names = [name for name in os.listdir(directory) if name.endswith(JOURNAL_SUFFIX)]
        except OSError:
            return True
        if not any(held(name) for name in names):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)  # polling other processes' progress, with a deadline


def recover_dead_runs(path: Path) -> int:
    """Record the journals of runs into ``path`` whose processes are all gone (and mark those
    runs ``crashed``); how many were recovered. Cheap when there are none: a ``stat``, a directory
    listing and a lock attempt per live journal; the recorder is imported only to recover one."""
    directory = Path(f"{path}.journal")
    if not directory.is_dir():
        return 0
    from acp_proxy.record.journal import dead_journals

    count = 0
    for journal_path, fd in dead_journals(directory):
        try:
            recover_journal(path, journal_path, fd)
            count += 1
        except (OSError, sqlite3.Error, StoreError) as exc:
            _say(f"could not recover {journal_path.name}: {_reason(exc)}")
        finally:
            os.close(fd)
    return count


def recover_journal(db_path: Path, journal_path: Path, fd: int) -> None:
    """Record a dead run's journal into ``db_path`` (``fd`` is exclusively locked): the run
    ends ``crashed`` with what was recovered, and the journal goes."""
    from acp_proxy.record import journal as jr
    from acp_proxy.record.session import Session  # only now: it needs the decoder and the tracker

    try:
        session = Session(journal_path, fd, db_path=db_path)
    except jr.JournalDamaged:
        # No START record: the proxy died before it said what it ran; there is no run to record.
        try:
            os.unlink(journal_path)
        except OSError:
            pass
        jr.remove_empty_dir(journal_path.parent)
        return
    session.recover()


def _say(message: str) -> None:
    try:
        os.write(2, f"acp-proxy: {message}\n".encode())
    except OSError:
        pass
