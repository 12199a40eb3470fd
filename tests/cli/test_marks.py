"""``acp-proxy mark`` / ``unmark`` on a recording of the official SDK pair, and the filter terms
``marked`` and ``comment:`` through ``frames``; marks on a database from before marks."""

from __future__ import annotations

import contextlib
import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from acp_proxy.cli.commands import cli
from acp_proxy.read import frames
from acp_proxy.record import recovery
from acp_proxy.store import database as store
from tests.store.test_store import make_v1_database, user_version


def invoke(db: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, [args[0], "--db", str(db), *args[1:]])


def seqs(db: Path, *words: str) -> list[int]:
    result = invoke(db, "frames", "--json", *words)
    assert result.exit_code == 0, result.output
    return [row["seq"] for row in json.loads(result.stdout)]


@pytest.fixture
def recording(sdk_recording: tuple[Path, str], tmp_path: Path) -> Path:
    db = tmp_path / "marks.db"
    shutil.copy(sdk_recording[0], db)  # the shared recording stays read-only
    return db


def test_mark_then_frames_marked_finds_exactly_that_frame(recording: Path) -> None:
    assert seqs(recording, "marked") == []
    result = invoke(recording, "mark", "1:3", "--note", "Why so slow?")
    assert result.exit_code == 0 and result.stdout == "marked 1:3 (Why so slow?)\n", result.output
    assert invoke(recording, "mark", "last:2").exit_code == 0
    run2 = seqs(recording, "run:last")
    assert seqs(recording, "marked") == [3, 2]  # run 1's frame 3, then run 2's frame 2
    assert seqs(recording, "comment:slow") == [3]
    assert seqs(recording, "-marked", "run:last") == [s for s in run2 if s != 2]
    rows = json.loads(invoke(recording, "frames", "--json", "marked").stdout)
    assert [row["mark"] for row in rows] == ["Why so slow?", ""]
    shown = invoke(recording, "frames", "run:1", "seq:3").stdout
    assert 'marked:"Why so slow?"' in shown
    assert "mark" not in json.loads(invoke(recording, "frames", "--json", "run:1", "seq:4").stdout)[0]
    db = recovery.open_for_reading(recording)  # what every door reads
    with contextlib.closing(db.conn):
        rows = list(frames.Selection(db, frames.parse(db, "run:1 seq:3..4")).rows())
    assert rows[0]["mark"] == "Why so slow?" and "mark" not in rows[1]  # an unmarked frame: as it was

    assert invoke(recording, "mark", "1:3").exit_code == 0  # no --note: the comment stays
    assert seqs(recording, "comment:slow") == [3]
    assert invoke(recording, "unmark", "1:3").stdout == "unmarked 1:3\n"
    assert seqs(recording, "marked") == [2]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("mark", "1:9999"), "run 1 has no frame 9999 (its frames are 1.."),
        (("mark", "99:1"), "no run 99"),
        (("mark", "last"), "does not name a frame: write RUN:SEQ"),
        (("mark", "1:x"), "does not name a frame"),
        (("unmark", "1:1"), "frame 1:1 is not marked"),
    ],
)
def test_mark_mistakes_are_one_line_and_exit_2(recording: Path, args: tuple[str, ...], says: str) -> None:
    result = invoke(recording, *args)
    assert result.exit_code == 2, result.output
    assert says in result.stderr and result.stderr.startswith("acp-proxy:") and result.stderr.count("\n") == 1


def test_an_older_database_gets_the_marks_table_and_keeps_its_frames(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    make_v1_database(path)
    assert invoke(path, "mark", "1:1", "--note", "old frame").exit_code == 0
    assert user_version(path) == store.SCHEMA_VERSION
    assert seqs(path, "comment:old") == [1]
    with sqlite3.connect(path) as conn:
        assert conn.execute("select run_id, seq, note from marks").fetchall() == [(1, 1, "old frame")]


def test_export_then_import_keeps_the_marks_and_masks_a_secret_in_a_note(recording: Path, tmp_path: Path) -> None:
    assert invoke(recording, "mark", "1:3", "--note", "slow here").exit_code == 0
    assert invoke(recording, "mark", "1:5", "--note", "token sk-ant-api03-abcdefghijklmnopqrstuvwxyz").exit_code == 0
    assert invoke(recording, "mark", "1:6").exit_code == 0
    exported = tmp_path / "run1.jsonl"
    result = invoke(recording, "export", "1", "-o", str(exported))
    assert result.exit_code == 0, result.output
    header = json.loads(exported.read_text().splitlines()[0])
    assert [(m["seq"], m.get("note")) for m in header["marks"]] == [
        (3, "slow here"),
        (5, "token [redacted]"),
        (6, None),
    ]
    assert "abcdefghijklmnopqrstuvwxyz" not in exported.read_text()

    into = tmp_path / "imported.db"
    result = invoke(into, "import", str(exported))
    assert result.exit_code == 0, result.output
    assert seqs(into, "marked") == [3, 5, 6]
    assert seqs(into, "comment:slow") == [3]
    rows = json.loads(invoke(into, "frames", "--json", "marked").stdout)
    original = json.loads(invoke(recording, "frames", "--json", "run:1", "marked").stdout)
    # The same frames, not just the same numbers: what each marked frame is came back too.
    assert [(r["seq"], r["method"], r["kind"]) for r in rows] == [(r["seq"], r["method"], r["kind"]) for r in original]
