"""The database's versions: an older recording is upgraded in place, a newer one refused."""

from __future__ import annotations

import _sqlite3
import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import sqlite_utils
from click.testing import CliRunner

from acp_proxy.cli.commands import cli
from acp_proxy.store import database as store
from tests.conftest import python_agent, run_proxy, wait_recorded


def make_v1_database(path: Path) -> None:
    """A database as the first schema left it, with one recorded frame."""
    db = sqlite_utils.Database(sqlite3.connect(str(path), isolation_level=None))
    store.MIGRATIONS[0](db)
    db.execute("PRAGMA user_version = 1")
    db["runs"].insert({"id": 1, "started_ns": 1, "status": "ended", "argv": '["agent"]'})
    db["frames"].insert(
        {
            "run_id": 1,
            "seq": 1,
            "ts_ns": 1,
            "dir": "c2a",
            "raw": '{"jsonrpc":"2.0","method":"x"}',
            "kind": "notification",
            "method": "x",
        }
    )
    db.conn.close()


def columns(path: Path) -> list[str]:
    with sqlite3.connect(path) as conn:
        return [row[1] for row in conn.execute("PRAGMA table_info(frames)")]


def user_version(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        return conn.execute("PRAGMA user_version").fetchone()[0]


def test_a_query_upgrades_an_older_database_and_keeps_its_frames(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    make_v1_database(path)
    assert "origin" not in columns(path)
    result = CliRunner().invoke(cli, ["frames", "--db", str(path), "--json", "dir:proxy OR method:x"])
    assert result.exit_code == 0, result.output
    assert [row["seq"] for row in json.loads(result.stdout)] == [1]
    assert user_version(path) == store.SCHEMA_VERSION
    assert "origin" in columns(path)


@pytest.mark.spawns
def test_a_run_upgrades_an_older_database_and_records_into_it(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    make_v1_database(path)
    done = run_proxy(["run", "--db", str(path), "--", *python_agent("pass")], timeout=60)
    assert done.returncode == 0, done.stderr
    assert user_version(path) == store.SCHEMA_VERSION
    with sqlite3.connect(path) as conn:
        assert conn.execute("select id, status from runs order by id").fetchall() == [(1, "ended"), (2, "ended")]


def test_a_fresh_database_has_the_same_frames_columns_as_an_upgraded_one(tmp_path: Path) -> None:
    old, fresh = tmp_path / "old.db", tmp_path / "fresh.db"
    make_v1_database(old)
    store.open_for_reading(old).conn.close()
    store.open_for_writing(fresh).conn.close()
    assert columns(old) == columns(fresh) == list(store.FRAME_COLUMNS)


def test_a_newer_database_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    store.open_for_writing(path).conn.close()
    with sqlite3.connect(path) as conn:
        conn.execute(f"PRAGMA user_version = {store.SCHEMA_VERSION + 1}")
    with pytest.raises(store.StoreError, match="newer acp-proxy"):
        store.open_for_reading(path)
    with pytest.raises(store.StoreError, match="newer acp-proxy"):
        store.open_for_writing(path)
    assert user_version(path) == store.SCHEMA_VERSION + 1


def test_a_foreign_database_is_not_read(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as conn:
        conn.execute("create table t (x)")
    result = CliRunner().invoke(cli, ["runs", "--db", str(path)])
    assert result.exit_code == 2
    assert "is not an acp-proxy database" in result.output and "Traceback" not in result.output


@pytest.mark.spawns
def test_opening_a_recorded_database_to_read_loads_no_recorder_when_nothing_is_to_recover(tmp_path: Path) -> None:
    path = tmp_path / "rec.db"
    assert run_proxy(["run", "--db", str(path), "--", *python_agent("pass")], timeout=60).returncode == 0
    wait_recorded(path)
    assert not Path(f"{path}.journal").exists()  # recorded whole: nothing left beside the database
    code = (
        "import sys; from pathlib import Path; from acp_proxy.record import recovery; "
        f"recovery.open_for_reading(Path({str(path)!r})).conn.close(); "
        "heavy = ('acp_proxy.record.recorder', 'acp_proxy.record.session', 'sqlite_utils', 'trio', 'msgspec'); "
        "print(sorted(m for m in heavy if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == b"[]\n"


def test_a_newer_database_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    store.open_for_writing(path).conn.close()
    with sqlite3.connect(path) as conn:
        conn.execute(f"PRAGMA user_version = {store.SCHEMA_VERSION + 1}")
        conn.execute("PRAGMA journal_mode = DELETE")
    before = path.read_bytes()
    with pytest.raises(store.StoreError, match="newer acp-proxy"):
        store.open_for_writing(path)
    assert path.read_bytes() == before
    assert not Path(f"{path}-wal").exists()


KILLED_IN_A_TRANSACTION = """
import os, sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("PRAGMA cache_size = 10")  # small: the transaction's pages reach the file
conn.execute("BEGIN")
conn.execute("create table half_made (x)")
for _ in range(2000):
    conn.execute("insert into half_made values (?)", ["x" * 1000])
os._exit(9)  # kill -9 before COMMIT: the rollback journal is left hot
"""


@pytest.mark.spawns
def test_a_database_whose_creator_was_killed_mid_transaction_is_rolled_back_and_used(tmp_path: Path) -> None:
    # A read-only connection cannot roll a hot journal back, so every command failed with
    # "attempt to write a readonly database" until some writer did.
    path = tmp_path / "rec.db"
    killed = subprocess.run([sys.executable, "-c", KILLED_IN_A_TRANSACTION, str(path)], timeout=60)
    assert killed.returncode == 9
    assert Path(f"{path}-journal").stat().st_size > 0 and path.stat().st_size > 0
    queried = run_proxy(["runs", "--db", str(path)], timeout=60)
    assert queried.returncode == 2 and b"holds no recording yet" in queried.stderr, queried.stderr
    assert not Path(f"{path}-journal").exists() or Path(f"{path}-journal").stat().st_size == 0
    frame = b'{"jsonrpc":"2.0","method":"ping"}\n'
    done = run_proxy(["run", "--db", str(path), "--", "cat"], input=frame, timeout=60)
    assert (done.returncode, done.stdout) == (0, frame), done.stderr
    with sqlite3.connect(path) as conn:
        assert conn.execute("select count(*) from frames").fetchone() == (2,)
        assert conn.execute("select count(*) from sqlite_master where name = 'half_made'").fetchone() == (0,)


@pytest.mark.parametrize("opener", ["check_own", "open_for_reading"])
def test_a_database_being_created_by_another_proxy_is_never_taken_for_somebody_elses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, opener: str
) -> None:
    # Eight editors starting at once on a new database: one proxy's first migration commits while
    # another examines the file. Between its version (0) and its tables (now there) the file
    # looked like somebody else's database. Here the commit lands exactly there.
    path = tmp_path / "new.db"
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA journal_mode = WAL")  # a file, with no tables yet
    real_connect = sqlite3.connect
    migrated: list[bool] = []

    def connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn = real_connect(*args, **kwargs)

        def between(statement: str) -> None:
            if "sqlite_master" in statement and not migrated:
                migrated.append(True)
                other = real_connect(path, isolation_level=None)
                store.migrate(sqlite_utils.Database(other))
                other.close()

        conn.set_trace_callback(between)
        return conn

    monkeypatch.setattr(sqlite3, "connect", connect)
    monkeypatch.setattr(_sqlite3, "connect", connect)  # what check_own examines with (no datetime)
    if opener == "check_own":
        assert store.check_own(path) == 0  # what it saw was one moment: no tables, version 0
    else:
        store.open_for_reading(path).conn.close()  # a query: it reads the new database
    assert migrated
    monkeypatch.setattr(sqlite3, "connect", real_connect)
    monkeypatch.setattr(_sqlite3, "connect", real_connect)
    assert store.check_own(path) == store.SCHEMA_VERSION
