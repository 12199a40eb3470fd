"""The writer's last checkpoint: it empties the WAL when nobody else uses the database (the next
run then knows the file from its header, ``dbfile.known_as_ours``), and with a reader on an older
snapshot it does what it can at once instead of waiting out the busy timeout."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from acp_proxy.record.writer import _checkpoint
from acp_proxy.store import database as store
from acp_proxy.store.dbfile import BUSY_TIMEOUT_MS, known_as_ours


def written(path: Path) -> sqlite3.Connection:
    """A writer's connection (busy timeout as the writer has it) that has committed rows."""
    store.open_for_writing(path).conn.close()
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    for started in range(50):
        conn.execute("insert into runs (started_ns, status) values (?, 'ended')", [started])
    return conn


def test_alone_it_empties_the_wal(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    conn = written(db)
    try:
        assert Path(f"{db}-wal").stat().st_size > 0 and not known_as_ours(db)
        _checkpoint(conn, "TRUNCATE", wait=False)
        assert Path(f"{db}-wal").stat().st_size == 0
        assert known_as_ours(db)
    finally:
        conn.close()
    with sqlite3.connect(db) as reader:
        assert reader.execute("select count(*) from runs").fetchone() == (50,)
    reader.close()


def test_beside_a_reader_on_an_older_snapshot_it_does_not_wait(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    conn = written(db)
    reader = sqlite3.connect(db, isolation_level=None)
    try:
        reader.execute("begin")
        (seen,) = reader.execute("select count(*) from runs").fetchone()  # the snapshot is taken
        conn.execute("insert into runs (started_ns, status) values (99, 'ended')")
        t0 = time.monotonic()
        _checkpoint(conn, "TRUNCATE", wait=False)
        # With the writer's busy handler, a TRUNCATE checkpoint waits for the reader for the whole
        # busy timeout (10 s); without one it returns at once, the WAL left as it is.
        assert time.monotonic() - t0 < BUSY_TIMEOUT_MS / 1000 / 2
        assert Path(f"{db}-wal").stat().st_size > 0 and not known_as_ours(db)
        assert reader.execute("select count(*) from runs").fetchone() == (seen,)  # its snapshot held
        reader.execute("commit")
    finally:
        reader.close()
        conn.close()
