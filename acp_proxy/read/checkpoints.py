"""Checkpointed folds of one run: the playhead's way to any frame of a run of any length.

Owns: ``RunFold``, one run's fold fed a frame at a time — exactly ``fold.fold_rows`` for that
run, proxy-chain hops included, through the masking the run's frames get (its own ``Redactor``,
which learns a secret where the run names it, as every page's does) — with the content of a
long message, tool call, compaction or terminal trimmed to its tail (``trim``): the fold's rules
only ever append to that content or replace it, never read it, so what follows folds the same.
``Checkpoints``: one run's fold state snapshotted every ``EVERY`` relayed frames as the fold
first passes them, so reaching any frame costs at most ``EVERY`` frames of folding from the
snapshot before it once the run has been folded that far, and the first visit folds forward in
slices of at most ``BUDGET`` seconds (the caller answers with the progress and is asked again);
near snapshots (every ``NEAR`` frames, a few dozen, around the place asked for last) make the
steps around it cost at most ``NEAR`` frames.
Snapshots are keyed by seq and only ever taken of frames already recorded, so a live run's new
frames invalidate none of them. ``Cache``: the runs a server keeps checkpoints for, bounded.
``window``: a folded conversation cut to what a page can hold (the last ``ENTRIES`` entries
and turns, each content's last ``TAIL`` items), with how much was left out.

Why: folding a run costs tens of microseconds a frame, so a million frames are most of a
minute; folding the prefix again at every step, as the playhead did, bounded it to 20,000
frames. Memory stays bounded too: a trimmed fold state holds the entries of the conversation,
not every chunk, snapshots are thinned (every other one dropped, the interval doubled) past
``MAX_SNAPSHOTS``, and a state of more than ``MAX_ENTRIES`` entries is refused (``TooLong``).

Must not know: HTTP, click, rich; how a conversation is rendered. Never writes.
"""

from __future__ import annotations

import copy
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from acp_proxy.protocol.chains import Unwrapper
from acp_proxy.protocol.redact import Redactor
from acp_proxy.protocol.rows import RunReader
from acp_proxy.protocol.vocabulary import A2C, C2A
from acp_proxy.read import fold as fd
from acp_proxy.read import queries

EVERY = 2_000
"""Relayed frames between two snapshots (doubled each time the snapshots are thinned)."""
MAX_SNAPSHOTS = 256
"""Snapshots kept per run; past it every other one is dropped."""
NEAR = 128
"""Frames between two near snapshots: those a fold takes on its last ``NEAR * NEAR_KEPT``
frames to the frame asked for, so that stepping around it folds at most this many frames."""
NEAR_KEPT = 32
NEAR_ENTRIES = 5_000
"""A fold state holding more timeline entries than this gets no near snapshots."""
TAIL = 200
"""Content items (chunks) of one entity a fold state keeps and a page is sent."""
OUTPUT_TAIL = 64 * 1024
"""Bytes of a terminal's output a fold state keeps and a page is sent."""
ENTRIES = 500
"""Timeline entries and turns of one conversation a page is sent (its last ones)."""
MAX_ENTRIES = 200_000
"""The most timeline entries a fold state may hold: each snapshot copies them."""
SNAPSHOT_ENTRIES = 1_000_000
"""The most timeline entries one run's snapshots hold between them: past it they are thinned,
so a run of many entries gets fewer snapshots (and longer steps), not more memory."""
BUDGET = 1.0
"""Seconds of folding one request may spend before it answers with its progress."""
RUNS = 4
"""Runs a ``Cache`` keeps checkpoints for (the least recently used is dropped)."""
_BATCH = 2_000
_RELAYED = "run_id = ? and dir != 'stderr'"


class TooLong(Exception):
    """The fold state grew past what the playhead keeps; ``str()`` is one line for a person."""


class Tail(list[Any]):
    """An entity's content cut to its tail; ``hidden``: how many items came before it."""

    hidden = 0


class TailBytes(bytearray):
    """A terminal's output cut to its tail; ``hidden``: how many bytes came before it."""

    hidden = 0


def _trim_list(value: list[Any], keep: int) -> Tail:
    out = Tail(value[-keep:])
    out.hidden = _hidden(value) + len(value) - len(out)
    return out


def trim(conversations: Mapping[Any, fd.Conversation]) -> int:
    """Cut every content longer than twice its tail to its tail (in place); the number of
    timeline entries held."""
    entries = 0
    for conv in conversations.values():
        entries += len(conv.timeline)
        for entity in conv.timeline:
            for attr in ("content", "summary"):
                value = getattr(entity, attr, None)
                if isinstance(value, list) and len(value) > 2 * TAIL:
                    setattr(entity, attr, _trim_list(value, TAIL))
            if isinstance(entity, fd.Terminal) and len(entity.output) > 2 * OUTPUT_TAIL:
                cut = TailBytes(entity.output[-OUTPUT_TAIL:])
                cut.hidden = _hidden(entity.output) + len(entity.output) - OUTPUT_TAIL
                entity.output = cut
    return entries


class RunFold:
    """Run ``run_id``'s frames folded one at a time (``feed``, in seq order, stderr left out),
    masked by ``redactor`` first when it is enabled."""

    def __init__(self, run_id: int, redactor: Redactor | None) -> None:
        self.run_id = run_id
        self.redactor = redactor
        self.seq: int | None = None
        """The last frame fed (None: none yet)."""
        self.position = 0
        """How many relayed frames were fed (batch lines included, as ``frames`` counts them)."""
        self.frame: dict[str, Any] | None = None
        """The last frame fed, masked."""
        self.entries = 0
        """Timeline entries held when last trimmed."""
        self._reader = RunReader()
        self._folder = fd.Folder()
        self._unwrapper = Unwrapper()
        self._inner: RunFold | None = None

    def feed(self, row: dict[str, Any]) -> None:
        if self.redactor is not None and self.redactor.enabled:
            row = self.redactor.frame_row(row)
        self.seq, self.frame = row["seq"], row
        self.position += 1
        self._fold(row)

    def _fold(self, row: Mapping[str, Any]) -> None:
        # What fold_rows folds: relayed lines, a batch through its element rows.
        if row.get("dir") not in (C2A, A2C) or row.get("kind") == "batch":
            return
        _, events, turn = self._reader.feed(row)
        self._folder.apply_row(self.run_id, row, events, turn)
        inner = self._unwrapper.unwrap(row)
        if inner is not None:
            if self._inner is None:
                self._inner = RunFold(self.run_id, None)
            self._inner._fold(inner)

    def conversations(self) -> dict[Any, fd.Conversation]:
        """By session, as ``fold.fold_rows`` keys them (a hop's: ``<session> @hop<n>``). The
        fold's own objects: read them under the lock of the ``Checkpoints`` that holds it."""
        out: dict[Any, fd.Conversation] = dict(self._folder.conversations)
        if self._inner is not None:
            for conv in self._inner.conversations().values():
                shown = copy.copy(conv)
                shown.hop = conv.hop + 1
                out[f"{shown.session_id or 'connection'} @hop{shown.hop}"] = shown
        return out

    def trim(self) -> int:
        """``trim`` this fold's conversations (a hop's too); the timeline entries held (kept in
        ``entries``)."""
        entries = trim(self._folder.conversations)
        if self._inner is not None:
            entries += self._inner.trim()
        self.entries = entries
        return entries


@dataclass(frozen=True)
class Progress:
    """Where a fold that ran out of its budget stands: ``position`` of ``total`` frames, on its
    way to frame ``target``."""

    target: int
    position: int
    total: int


class Checkpoints:
    """One run's fold, reachable at any frame: snapshots every ``every`` frames, the working
    fold (where the last request left it), the run's relayed frame count by its last seq."""

    def __init__(self, run_id: int, redactor: Redactor | None) -> None:
        self.run_id = run_id
        self.lock = threading.Lock()
        self.every = EVERY
        start = RunFold(run_id, copy.deepcopy(redactor) if redactor is not None else None)
        self.snapshots: list[RunFold] = [copy.deepcopy(start)]
        """In seq order; the first is the fold before any frame."""
        self.near: list[RunFold] = []
        """Near snapshots (``NEAR`` frames apart) around the places asked for last."""
        self.work = start
        self._counted: tuple[int | None, int] = (None, 0)

    def total(self, db: Any, last: int | None) -> int:
        """The run's relayed frames up to ``last``, counted from where the last count ended."""
        upto, count = self._counted
        if last is None:
            return 0
        if upto is None or last < upto:
            upto, count = None, 0
        where = f"{_RELAYED} and seq <= ?" + (" and seq > ?" if upto is not None else "")
        params = [self.run_id, last] + ([upto] if upto is not None else [])
        count += int(db.execute(f"select count(*) from frames where {where}", params).fetchone()[0])
        self._counted = (last, count)
        return count

    def reach(self, db: Any, target: int, *, budget: float | None = None) -> RunFold | None:
        """The fold at frame ``target`` (a relayed frame of the run), or None when ``budget``
        seconds of folding did not get there (``work`` says how far it got; ask again)."""
        deadline = time.monotonic() + (BUDGET if budget is None else budget)
        base = self._snapshot_before(target)
        work = self.work
        if (work.seq is not None and work.seq > target) or (base.seq or 0) > (work.seq or 0):
            work = self.work = copy.deepcopy(base)
        near_from = target - NEAR * NEAR_KEPT  # where the fold takes near snapshots on its way
        while work.seq != target:
            rows = queries.rows(
                db,
                f"select * from frames where {_RELAYED} and seq > ? and seq <= ? order by seq limit {_BATCH}",
                [self.run_id, -1 if work.seq is None else work.seq, target],
            )
            if not rows:
                break  # the frame is not there (any more): the caller asked for a relayed one
            for row in rows:
                work.feed(row)
                if work.position % self.every == 0:
                    self._passed(work)
                elif work.position % NEAR == 0 and row["seq"] >= near_from:
                    self._near(work, target)
            if work.seq != target and time.monotonic() > deadline:
                return None
        return work

    def _snapshot_before(self, target: int) -> RunFold:
        found = self.snapshots[0]
        for snap in (*self.snapshots, *self.near):  # a few hundred at most
            if snap.seq is not None and snap.seq <= target and snap.seq > (found.seq or 0):
                found = snap
        return found

    def _near(self, work: RunFold, target: int) -> None:
        """A near snapshot of ``work``, on its way to ``target``: the steps around a place a
        person looks at fold from one of these (at most ``NEAR`` frames) instead of from the
        last snapshot (``every``). Only of a small state (copying it costs what it holds); the
        ones farthest from ``target`` are dropped past ``NEAR_KEPT``."""
        if work.trim() > NEAR_ENTRIES or any(s.seq == work.seq for s in self.near):
            return
        self.near.append(copy.deepcopy(work))
        if len(self.near) > NEAR_KEPT:
            self.near.sort(key=lambda s: abs((s.seq or 0) - target))
            del self.near[NEAR_KEPT:]

    def _passed(self, work: RunFold) -> None:
        """``work`` is at a multiple of the interval: trimmed, and snapshotted when it is past
        the last snapshot (the first time the fold gets there)."""
        if work.trim() > MAX_ENTRIES:
            raise TooLong(
                f"run {self.run_id} holds more than {MAX_ENTRIES:,} conversation entries by frame {work.seq}: "
                "too many for the playhead to keep; page through its frames instead"
            )
        last = self.snapshots[-1]
        if last.seq is not None and work.seq is not None and work.seq <= last.seq:
            return
        self.snapshots.append(copy.deepcopy(work))
        while len(self.snapshots) > MAX_SNAPSHOTS or (
            len(self.snapshots) > 2 and sum(s.entries for s in self.snapshots) > SNAPSHOT_ENTRIES
        ):
            # Thinned: every other one dropped (the start kept), the interval doubled.
            self.snapshots = self.snapshots[:1] + self.snapshots[2::2]
            self.every *= 2


class Cache:
    """The checkpoints a server keeps: at most ``RUNS`` runs (the least recently used dropped),
    one per run, masking and recording (``key``)."""

    def __init__(self, runs: int = RUNS) -> None:
        self.runs = runs
        self._lock = threading.Lock()
        self._held: OrderedDict[Any, Checkpoints] = OrderedDict()

    def get(self, key: Any, make: Callable[[], Checkpoints]) -> Checkpoints:
        with self._lock:
            found = self._held.get(key)
            if found is None:
                found = self._held[key] = make()
            self._held.move_to_end(key)
            while len(self._held) > self.runs:
                self._held.popitem(last=False)
            return found


@dataclass(frozen=True)
class Window:
    """A conversation cut to what a page holds: ``conversation`` (a copy; its entities the
    fold's, or copies of those with a tail of their content), ``hidden_entries`` and
    ``hidden_turns`` (how many came before the ones kept), ``hidden`` (per kept timeline entry:
    how many content items, or terminal bytes, came before its tail)."""

    conversation: fd.Conversation
    hidden_entries: int
    hidden_turns: int
    hidden: list[int]


def _hidden(value: Any) -> int:
    return int(getattr(value, "hidden", 0))


def window(conv: fd.Conversation) -> Window:
    shown = copy.copy(conv)
    skip = max(0, len(conv.timeline) - ENTRIES)
    entities: list[fd.Entity] = []
    hidden: list[int] = []
    for entity in conv.timeline[skip:]:
        cut, left = entity, 0
        for attr in ("content", "summary"):
            value = getattr(entity, attr, None)
            if isinstance(value, list) and (len(value) > TAIL or _hidden(value)):
                tail = _trim_list(value, TAIL)
                cut = copy.copy(cut) if cut is entity else cut
                setattr(cut, attr, list(tail))
                left += tail.hidden
        if isinstance(entity, fd.Terminal) and (len(entity.output) > OUTPUT_TAIL or _hidden(entity.output)):
            term = copy.copy(entity) if cut is entity else cut
            assert isinstance(term, fd.Terminal)
            term.output = bytearray(entity.output[-OUTPUT_TAIL:])
            left += _hidden(entity.output) + max(0, len(entity.output) - OUTPUT_TAIL)
            cut = term
        entities.append(cut)
        hidden.append(left)
    shown.timeline = entities
    turns = max(0, len(conv.turns) - ENTRIES)
    shown.turns = conv.turns[turns:]
    return Window(shown, skip, turns, hidden)
