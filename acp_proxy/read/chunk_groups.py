"""Chunk groups within a page of frames: consecutive chunks of one message, told apart cheaply.

Owns: which frames are chunks of one message (``key``: the same run, direction, session,
``*_chunk`` update kind, item and replay flag), and marking a page of frames (in relay order)
with the group each chunk belongs to (``mark``): ``group`` is the id (``RUN:SEQ``) of the first
chunk of its run of consecutive chunks *within the page*, and ``group_cont`` is true on the
page's first frame when the frame recorded just before it (a one-row look-behind by
``(run_id, seq)``, on the index) is a chunk of the same message, so that a group crossing a
page edge is shown as continuing there.

Why per page and not per run: a whole-run group index (a window over every frame) costs ~1 s
on a million frames and would have to be rebuilt as a live run grows; a page's groups cost the
page plus one indexed row, whatever the run's length.

Must not know: HTTP, HTML, how a door draws a group; masking (the rows handed in are already
masked; the look-behind reads only unmaskable columns). Never writes.
"""

from __future__ import annotations

from typing import Any

_KEY_COLUMNS = ("run_id", "dir", "session_id", "update_kind", "item_id", "replay")


def key(row: dict[str, Any]) -> str | None:
    """Frames with the same key, one after another, are chunks of one message; None when the
    frame is not a chunk (a ``*_chunk`` update notification)."""
    update = row.get("update_kind")
    if not update or not str(update).endswith("_chunk") or row.get("kind") != "notification":
        return None
    return "|".join(
        str(v)
        for v in (row["run_id"], row["dir"], row.get("session_id"), update, row.get("item_id"), row.get("replay") or 0)
    )


def before(db: Any, run_id: int, seq: int) -> dict[str, Any] | None:
    """The frame recorded just before ``(run_id, seq)`` in its run (only the columns ``key``
    reads), None for the run's first."""
    cursor = db.execute(
        """select run_id, dir, kind, session_id, update_kind, item_id, replay from frames
           where run_id = ? and seq < ? order by seq desc limit 1""",
        [run_id, seq],
    )
    found = cursor.fetchone()
    if found is None:
        return None
    names = [d[0] for d in cursor.description]
    return dict(zip(names, found, strict=True))


def mark(rows: list[dict[str, Any]], keys: list[str | None], previous: dict[str, Any] | None) -> None:
    """Set ``group`` (None: not a chunk) on each of ``rows`` (in relay order; ``keys[i]`` is
    ``key`` of row i), and ``group_cont`` on the first: whether it continues the message of
    ``previous`` (the frame before the page, ``before``)."""
    head: str | None = None
    last: str | None = None
    for index, (row, this) in enumerate(zip(rows, keys, strict=True)):
        if this is None:
            head = None
        elif this != last or head is None:
            head = f"{row['run_id']}:{row['seq']}"
        row["group"] = head
        if index == 0:
            row["group_cont"] = this is not None and previous is not None and key(previous) == this
        last = this


def mark_page(db: Any, rows: list[dict[str, Any]], keys: list[str | None]) -> None:
    """``mark`` with the look-behind read from ``db`` (skipped when the page has no chunk first)."""
    if not rows:
        return
    previous = before(db, rows[0]["run_id"], rows[0]["seq"]) if keys[0] is not None else None
    mark(rows, keys, previous)
