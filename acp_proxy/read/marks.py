"""Marks and comments people put on frames: which frame ``REF:SEQ`` names.

Owns: ``frame_ref`` (the frame a ``mark``/``unmark`` argument names, checked to exist) and
``marks`` (the marks of a run, a session or every run, with what each marked frame is);
``exported`` (the marks an export's header keeps, notes masked). Must
not know: how marks are stored (``store.set_mark`` / ``remove_mark`` write them, the filter
terms ``marked`` and ``comment:`` select by them, ``read.frames`` shows them).
"""

from __future__ import annotations

import sqlite3
from typing import Any

from acp_proxy.errors import UsageError
from acp_proxy.read import queries
from acp_proxy.store.database import ReadDb


def frame_ref(db: ReadDb, text: str) -> tuple[int, int]:
    """(run_id, seq) of the frame ``RUN:SEQ`` names (RUN: a run id or ``last``)."""
    ref, sep, seq_text = text.rpartition(":")
    if not sep or not ref or not seq_text.isascii() or not seq_text.isdigit() or len(seq_text) > 18:
        raise UsageError(f"{text!r} does not name a frame: write RUN:SEQ, e.g. last:12 or 3:40")
    resolved = queries.resolve(db, ref)
    if resolved.is_session:
        raise UsageError(f"{ref!r} names a session: a frame is named by its run, e.g. last:{seq_text}")
    seq = int(seq_text)
    assert resolved.run_id is not None  # not a session: a run
    if not db.execute("select 1 from frames where run_id = ? and seq = ?", [resolved.run_id, seq]).fetchone():
        high = db.execute("select max(seq) from frames where run_id = ?", [resolved.run_id]).fetchone()[0]
        known = f"its frames are 1..{high}" if high else "it has no frames yet"
        raise UsageError(f"run {resolved.run_id} has no frame {seq} ({known})")
    return resolved.run_id, seq


def marks(db: ReadDb, ref: str | None = None) -> list[dict[str, Any]]:
    """Every mark of the run or session ``ref`` names (None: of every run), in relay order, with
    what the marked frame is (direction, kind, method, update variant) and its note."""
    where, args = "1", []
    if ref:
        run_ids = queries.run_ids_of(db, queries.resolve(db, ref))
        where = f"m.run_id in ({','.join('?' * len(run_ids)) or 'null'})"
        args = list(run_ids)
    return queries.rows(
        db,
        "select m.run_id, m.seq, m.note, m.marked_ns, f.dir, f.kind, f.method, f.update_kind"
        f" from marks m left join frames f on f.run_id = m.run_id and f.seq = m.seq where {where}"
        " order by m.run_id, m.seq",
        args,
    )


def exported(db: ReadDb, run_ids: list[int], redactor: Any = None) -> list[dict[str, Any]]:
    """The marks of ``run_ids`` as an export's header keeps them (``import`` reads them back):
    run, frame seq (kept whole by an export of the run), note (through ``redactor`` when given:
    a person may paste a secret into a note) and when it was made. A database from before marks
    has none."""
    if not run_ids:
        return []
    try:
        rows = queries.rows(
            db,
            "select run_id, seq, note, marked_ns from marks"
            f" where run_id in ({','.join('?' * len(run_ids))}) order by run_id, seq",
            list(run_ids),
        )
    except sqlite3.OperationalError:  # no marks table: a file an older acp-proxy wrote, opened read-only
        return []
    out = []
    for row in rows:
        note = row["note"]
        if note is not None and redactor is not None:
            note = redactor.text(note)
        out.append({k: v for k, v in {**row, "note": note}.items() if v is not None})
    return out
