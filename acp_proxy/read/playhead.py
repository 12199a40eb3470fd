"""A recorded conversation as it stood at one frame: the playhead that steps through a run.

Owns: folding a run's frames up to and including a given ``seq`` (the same fold ``show`` and the
inspector use, ``read.conversation.fold_rows``; the run taken as still going at that point, so
its open turns are ``running``, not ``unfinished``), and the places around it: the first, the
previous and the next relayed frame, and the last one. Stepping is frame by frame over what was
relayed (stderr lines are not frames of the conversation).

Must not know: click, rich, HTTP, MCP; how a conversation is rendered. Never writes. It costs the
prefix it folds: ``LIMIT`` frames at most, past which ``TooLong`` says so (a person steps
through a conversation, not a million chunks; ``frames`` pages through those).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from acp_proxy.protocol.redact import Redactor
from acp_proxy.read import conversation as folding
from acp_proxy.read import fold as fd
from acp_proxy.read import queries

LIMIT = 20_000
"""The most frames a playhead folds (as many as the inspector folds for a whole page)."""

_RELAYED = "run_id = ? and dir != 'stderr'"


class TooLong(Exception):
    """The prefix to fold is longer than ``LIMIT``; ``str()`` is one line for a person."""


@dataclass(frozen=True)
class Playhead:
    """Run ``run_id`` folded up to frame ``seq`` (None: before its first frame)."""

    run_id: int
    seq: int | None
    first: int | None
    previous: int | None
    next: int | None
    last: int | None
    position: int
    """How many relayed frames the fold has read (1 at the first frame)."""
    total: int
    """How many relayed frames the run has."""
    frame: dict[str, Any] | None
    """The frame at the playhead (masked), or None before the first."""
    conversations: list[fd.Conversation]


def _one(db: Any, sql: str, params: list[Any]) -> Any:
    return db.execute(sql, params).fetchone()[0]


def at(db: Any, run_id: int, seq: int | None, redactor: Redactor | None = None) -> Playhead:
    """Run ``run_id`` as it stood once frame ``seq`` was relayed (None or below the first frame:
    before anything; beyond the last: at the last). ``LookupError`` when the run does not exist."""
    if not db.execute("select 1 from runs where id = ?", [run_id]).fetchone():
        raise LookupError(f"no run {run_id}")
    first = _one(db, f"select min(seq) from frames where {_RELAYED}", [run_id])
    last = _one(db, f"select max(seq) from frames where {_RELAYED}", [run_id])
    total = int(_one(db, f"select count(*) from frames where {_RELAYED}", [run_id]))
    if seq is not None and last is not None and seq > last:
        seq = last
    here = None
    if seq is not None:
        here = _one(db, f"select max(seq) from frames where {_RELAYED} and seq <= ?", [run_id, seq])
    position = 0
    if here is not None:
        position = int(_one(db, f"select count(*) from frames where {_RELAYED} and seq <= ?", [run_id, here]))
    if position > LIMIT:
        raise TooLong(f"frame {here} is {position:,} frames into run {run_id}: the playhead folds at most {LIMIT:,}")
    rows = (
        []
        if here is None
        else queries.rows(db, f"select * from frames where {_RELAYED} and seq <= ? order by seq", [run_id, here])
    )
    if redactor is not None and redactor.enabled:
        rows = [redactor.frame_row(row) for row in rows]
    # At the playhead the run is still going: what is open is open, not yet final.
    folded = folding.fold_rows(rows, ended={run_id: False})
    kept = sorted(
        (c for k, c in folded.items() if k is not None or not c.empty),
        key=lambda c: c.timeline[0].seq if c.timeline else 0,
    )
    previous, after = None, first
    if here is not None:
        previous = _one(db, f"select max(seq) from frames where {_RELAYED} and seq < ?", [run_id, here])
        after = _one(db, f"select min(seq) from frames where {_RELAYED} and seq > ?", [run_id, here])
    return Playhead(
        run_id=run_id,
        seq=here,
        first=first,
        previous=previous,
        next=after,
        last=last,
        position=position,
        total=total,
        frame=rows[-1] if rows else None,
        conversations=kept,
    )
