"""``recovery.wait_recorded``: a caller that needs whole runs (the testing API, the tests) waits
for live recorders, which may outlive their proxy, and never for a dead run's journal."""

from __future__ import annotations

from pathlib import Path

from acp_proxy.record import journal as jr
from acp_proxy.record.recovery import runs_being_recorded, wait_recorded


def test_a_held_journal_is_waited_for_and_a_dead_one_is_not(tmp_path: Path) -> None:
    db = tmp_path / "rec.db"
    assert wait_recorded(db, 0.0)  # no journals at all
    live = jr.JournalWriter.create(jr.journal_dir(db))  # holds its lock, like a live proxy or recorder
    try:
        assert runs_being_recorded(db) == 1
        assert not wait_recorded(db, 0.2)
    finally:
        live.close()  # let go: now it is a dead run's journal, for the next command to recover
    assert wait_recorded(db, 0.0)
    assert live.path.exists()  # waiting took nothing from it
