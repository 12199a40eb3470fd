"""``acp-proxy sql`` reads table-valued functions (``pragma_table_info('frames')``, ``json_each``)
and still refuses every write, whichever way it is spelled around one of them."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from acp_proxy.cli.commands import cli
from acp_proxy.store import database as store


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sql-reader") / "rec.db"
    db = store.open_for_writing(path)
    db.execute("INSERT INTO runs (started_ns, status) VALUES (1, 'ended')")
    db.conn.commit()
    db.close()
    return path


def snapshot(path: Path) -> tuple[object, ...]:
    with sqlite3.connect(path) as conn:
        return (
            conn.execute("PRAGMA user_version").fetchone()[0],
            conn.execute("select type, name, sql from sqlite_master order by name").fetchall(),
            conn.execute("select * from runs").fetchall(),
            conn.execute("select count(*) from frames").fetchone()[0],
        )


TABLE_VALUED = [
    ("select * from pragma_table_info('frames')", "PRAGMA table_info(frames)"),
    ("select * from pragma_table_xinfo('runs')", "PRAGMA table_xinfo(runs)"),
    ("select * from pragma_index_list('frames')", "PRAGMA index_list(frames)"),
    ("select * from pragma_user_version", "PRAGMA user_version"),
    ("select * from pragma_table_list order by name", None),
    ("select * from json_each('[1, 2]')", None),
    ("select * from pragma_table_info('runs') as r join pragma_table_info('frames') as f on r.cid = f.cid", None),
]


@pytest.mark.parametrize(("query", "same_as"), TABLE_VALUED)
def test_table_valued_functions_are_read(recording: Path, query: str, same_as: str | None) -> None:
    reader = store.SqlReader(recording)
    try:
        rows = reader.execute(query).fetchall()
        assert rows
        if same_as is not None:
            assert rows == reader.execute(same_as).fetchall()
    finally:
        reader.close()


def test_sql_command_reads_pragma_table_info(recording: Path) -> None:
    """The command the issue ran: once refused as an UPDATE."""
    query = "select * from pragma_table_info('frames')"
    result = CliRunner().invoke(cli, ["sql", "--db", str(recording), "--jsonl", query])
    assert result.exit_code == 0, result.stderr
    names = {json.loads(line)["name"] for line in result.stdout.splitlines()}
    with sqlite3.connect(recording) as conn:
        assert names == {row[1] for row in conn.execute("PRAGMA table_info(frames)")}


# Writes, each possibly wrapped around a table-valued function that the reader now lets through.
_SOURCES = [
    "pragma_table_info('frames')",
    "pragma_table_list",
    "json_each('[1]')",
    "(select 1 as name)",
]
_WRITES = [
    "UPDATE sqlite_master SET sql = 'x' WHERE name IN (SELECT name FROM {src})",
    "UPDATE sqlite_schema SET name = 'x', type = 'x', tbl_name = 'x', rootpage = 0, sql = 'x'",
    "WITH x AS (SELECT * FROM {src}) UPDATE runs SET status = (SELECT count(*) FROM x)",
    "WITH x AS (SELECT * FROM {src}) DELETE FROM runs",
    "WITH x AS (SELECT * FROM {src}) INSERT INTO runs (started_ns, status) SELECT 2, 'x' FROM x",
    "WITH x AS (SELECT * FROM {src}) UPDATE sqlite_master SET sql = 'x'",
    "WITH x AS (SELECT * FROM {src}) DELETE FROM sqlite_master",
    "WITH x AS (SELECT * FROM {src}) INSERT INTO sqlite_master SELECT 'table', 'x', 'x', 0, 'x'",
    "PRAGMA writable_schema = 1",
    "SELECT * FROM pragma_writable_schema(1)",
    "SELECT * FROM pragma_user_version(7)",
    "SELECT * FROM pragma_journal_mode('delete')",
    "VALUES ((SELECT 1 FROM {src})) ; UPDATE runs SET status = 'x'",
]


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(template=st.sampled_from(_WRITES), source=st.sampled_from(_SOURCES), raw=st.booleans())
def test_every_write_around_a_table_valued_function_is_refused(
    recording: Path, template: str, source: str, raw: bool
) -> None:
    """Through ``execute`` (the first-word check too) or straight at the connection (the
    authorizer, query_only and the read-only file on their own): an error, nothing changed."""
    before = snapshot(recording)
    statement = template.format(src=source)
    reader = store.SqlReader(recording)
    try:
        with pytest.raises((sqlite3.Error, store.StoreError)):
            if raw:
                reader.conn.execute(statement).fetchall()
            else:
                reader.execute(statement).fetchall()
    finally:
        reader.close()
    assert snapshot(recording) == before


@pytest.mark.parametrize("statement", [w for w in _WRITES if "sqlite_" in w or "writable" in w])
def test_the_authorizer_alone_refuses_schema_writes(tmp_path: Path, statement: str) -> None:
    """The one question the reader now answers yes (may the schema table's columns be updated,
    asked while a ``*`` is expanded) lets no write of the schema through: on a writable
    connection with writable_schema already on, the reader's authorizer refuses by itself."""
    path = tmp_path / "w.db"
    store.open_for_writing(path).close()
    before = snapshot(path)
    reader = store.SqlReader(path)
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA writable_schema = 1")
        conn.set_authorizer(reader.authorize)
        with pytest.raises(sqlite3.Error):
            conn.execute(statement.format(src="pragma_table_info('frames')")).fetchall()
        conn.commit()
    finally:
        conn.close()
        reader.close()
    assert snapshot(path) == before
