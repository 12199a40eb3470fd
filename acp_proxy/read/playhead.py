"""A recorded conversation as it stood at one frame: the playhead that steps through a run.

Owns: the run folded up to and including a given ``seq`` (the fold ``show`` and the inspector
use, fed a frame at a time by ``read.checkpoints``; the run taken as still going at that point,
so its open turns are ``running``, not ``unfinished``), cut to what a page holds
(``checkpoints.window``: the last entries, each content's tail, and how much was left out),
masked, and the places around it: the first, the previous and the next relayed frame, and the
last one. Stepping is frame by frame over what was relayed (stderr lines are not frames of the
conversation).

Must not know: click, rich, HTTP, MCP; how a conversation is rendered (the caller's ``shape``
turns a conversation into plain data). Never writes. It costs, once a run has been folded that
far, at most ``checkpoints.EVERY`` frames of folding a step; a first visit far into a run folds
for at most ``checkpoints.BUDGET`` seconds and answers with its progress (``Folding``), to be
asked again. A fold state too large to keep raises ``TooLong`` (one line).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from acp_proxy.protocol.redact import Redactor
from acp_proxy.read import checkpoints as cp
from acp_proxy.read import conversation as folding
from acp_proxy.read import fold as fd

TooLong = cp.TooLong

_RELAYED = "run_id = ? and dir != 'stderr'"


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
    conversations: list[dict[str, Any]]
    """Each conversation as ``shape`` made it, masked, cut to what a page holds:
    ``hidden_entries`` and ``hidden_turns`` say how many came before the ones kept, a timeline
    entry's ``hidden_chunks`` how many items of its content (or bytes of a terminal's output)
    came before the tail it holds."""


@dataclass(frozen=True)
class Folding:
    """The fold is on its way to frame ``seq`` (``position`` of ``total`` frames folded): ask
    again."""

    run_id: int
    seq: int
    position: int
    total: int


def _one(db: Any, sql: str, params: list[Any]) -> Any:
    return db.execute(sql, params).fetchone()[0]


def _started(db: Any, run_id: int) -> Any:
    found = db.execute("select started_ns from runs where id = ?", [run_id]).fetchone()
    if found is None:
        raise LookupError(f"no run {run_id}")
    return found[0]


def at(
    db: Any,
    run_id: int,
    seq: int | None,
    redactor: Redactor | None = None,
    *,
    cache: cp.Cache | None = None,
    shape: Callable[[fd.Conversation], dict[str, Any]] = folding.conversation_json,
    budget: float | None = None,
) -> Playhead | Folding:
    """Run ``run_id`` as it stood once frame ``seq`` was relayed (None or below the first frame:
    before anything; beyond the last: at the last), or how far the fold got in ``budget``
    seconds (None: ``checkpoints.BUDGET``). ``cache``: the server's checkpoints (None: a fold of this
    call's own).
    ``LookupError`` when the run does not exist."""
    started = _started(db, run_id)
    first = _one(db, f"select min(seq) from frames where {_RELAYED}", [run_id])
    last = _one(db, f"select max(seq) from frames where {_RELAYED}", [run_id])
    if seq is not None and last is not None and seq > last:
        seq = last
    here = None
    if seq is not None:
        here = _one(db, f"select max(seq) from frames where {_RELAYED} and seq <= ?", [run_id, seq])
    rules = tuple(repr(r) for r in redactor.rules) if redactor is not None else ()
    key = (run_id, started, redactor is not None and redactor.enabled, rules)
    make = lambda: cp.Checkpoints(run_id, redactor)  # noqa: E731
    points = make() if cache is None else cache.get(key, make)
    with points.lock:
        total = points.total(db, last)
        fold = points.snapshots[0] if here is None else points.reach(db, here, budget=budget)
        if fold is None:
            return Folding(run_id, here or 0, points.work.position, total)
        masker = fold.redactor
        conversations = fold.conversations()
        kept = sorted(
            (c for k, c in conversations.items() if k is not None or not c.empty),
            key=lambda c: c.timeline[0].seq if c.timeline else 0,
        )
        shown = [_shown(cp.window(c), shape, masker) for c in kept]
        frame, position = (dict(fold.frame) if fold.frame is not None else None), fold.position
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
        frame=frame,
        conversations=shown,
    )


def _shown(
    cut: cp.Window, shape: Callable[[fd.Conversation], dict[str, Any]], masker: Redactor | None
) -> dict[str, Any]:
    data = shape(cut.conversation)
    data["hidden_entries"], data["hidden_turns"] = cut.hidden_entries, cut.hidden_turns
    for item, left in zip(data.get("timeline") or [], cut.hidden, strict=False):
        if left:
            item["hidden_chunks"] = left
    return masker.value(data) if masker is not None and masker.enabled else data
