"""A database a run has recorded into before is known from SQLite's file header, without SQLite
(``dbfile.known_as_ours``): what ``prepare`` does before the agent starts. Anything the header
cannot vouch for goes to ``check_own``, which opens the file with SQLite."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from acp_proxy.store import database as store
from acp_proxy.store import dbfile


def recorded(path: Path) -> Path:
    """A database as a writer leaves it: migrated, WAL mode, and (closed) its WAL gone."""
    store.open_for_writing(path).conn.close()
    return path


def examined(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The modes ``check_own`` opened a file with SQLite in, from here on."""
    calls: list[str] = []
    real = dbfile._examine

    def spy(path: dbfile.PathLike, mode: str) -> tuple[int, set[str]]:
        calls.append(mode)
        return real(path, mode)

    monkeypatch.setattr(dbfile, "_examine", spy)
    return calls


def test_a_database_recorded_into_is_prepared_without_opening_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = recorded(tmp_path / "r.db")
    assert dbfile.known_as_ours(db)
    calls = examined(monkeypatch)
    dbfile.prepare(db, tmp_path / "r.db.journal")
    assert calls == []


def test_a_wal_with_frames_in_it_sends_the_question_to_sqlite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Another connection wrote and is still open: its pages are in the WAL, not in the header.
    db = recorded(tmp_path / "r.db")
    other = sqlite3.connect(db)
    try:
        other.execute("insert into runs (started_ns, status) values (1, 'running')")
        other.commit()
        assert Path(f"{db}-wal").stat().st_size > 0
        assert not dbfile.known_as_ours(db)
        calls = examined(monkeypatch)
        dbfile.prepare(db)
        assert calls == ["ro"]
    finally:
        other.close()


def test_an_emptied_wal_is_no_reason_to_open_the_file(tmp_path: Path) -> None:
    db = recorded(tmp_path / "r.db")
    Path(f"{db}-wal").write_bytes(b"")
    assert dbfile.known_as_ours(db)


def test_a_newer_database_is_still_refused_before_the_agent_starts(tmp_path: Path) -> None:
    db = recorded(tmp_path / "r.db")
    with sqlite3.connect(db) as conn:
        conn.execute(f"PRAGMA user_version = {store.SCHEMA_VERSION + 1}")
    conn.close()
    assert not dbfile.known_as_ours(db)
    with pytest.raises(dbfile.StoreError, match="newer acp-proxy"):
        dbfile.prepare(db)


def test_a_file_that_is_not_sqlite_is_still_refused(tmp_path: Path) -> None:
    db = tmp_path / "notes.db"
    db.write_bytes(b"not a database\n" * 20)
    assert not dbfile.known_as_ours(db)
    with pytest.raises(dbfile.StoreError, match="cannot open database"):
        dbfile.prepare(db)


def test_another_programs_database_with_our_number_is_refused_untouched_by_the_writer(tmp_path: Path) -> None:
    # The header cannot tell it from ours: ``prepare`` lets it by, and the recorder's opener,
    # which examines it with SQLite before it writes anything, refuses it, byte for byte as it was.
    db = tmp_path / "other.db"
    with sqlite3.connect(db) as conn:
        conn.execute("create table notes (text)")
        conn.execute(f"PRAGMA user_version = {store.SCHEMA_VERSION}")
    conn.close()
    before = db.read_bytes()
    assert dbfile.known_as_ours(db)
    dbfile.prepare(db)
    with pytest.raises(dbfile.StoreError, match="not an acp-proxy database"):
        store.open_for_writing(db)
    assert db.read_bytes() == before


@settings(max_examples=300, deadline=None)
@given(head=st.binary(max_size=300), wal=st.sampled_from([None, b"", b"x"]))
def test_any_file_is_known_only_by_a_whole_header_of_ours(
    tmp_path_factory: pytest.TempPathFactory, head: bytes, wal: bytes | None
) -> None:
    # Total on input: any bytes as the file, with or without a WAL beside it. Known exactly when
    # the file starts with SQLite's magic and our schema version, and no WAL has bytes in it.
    db = tmp_path_factory.mktemp("h") / "x.db"
    db.write_bytes(head)
    if wal is not None:
        Path(f"{db}-wal").write_bytes(wal)
    version = int.from_bytes(head[60:64], "big")
    whole = len(head) >= 100 and head.startswith(b"SQLite format 3\x00") and version == store.SCHEMA_VERSION
    assert dbfile.known_as_ours(db) == (whole and not wal)


@settings(max_examples=50, deadline=None)
@given(head=st.binary(min_size=100, max_size=100))
def test_a_header_of_ours_over_any_page_is_known(tmp_path_factory: pytest.TempPathFactory, head: bytes) -> None:
    # The property above rarely draws SQLite's magic by chance: here every file carries it.
    db = tmp_path_factory.mktemp("h") / "x.db"
    header = b"SQLite format 3\x00" + head[16:60] + store.SCHEMA_VERSION.to_bytes(4, "big") + head[64:]
    db.write_bytes(header + head)
    assert dbfile.known_as_ours(db)


def test_a_missing_or_unreadable_path_is_not_known(tmp_path: Path) -> None:
    assert not dbfile.known_as_ours(tmp_path / "absent.db")
    assert not dbfile.known_as_ours(tmp_path)  # a directory
