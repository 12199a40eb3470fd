"""The one rows-to-events adapter: recorded ``frames`` rows as the protocol state machine reads them.

Owns: ``FrameLike`` (what ``ConnectionState.feed`` reads of a frame), ``RecordedFrame`` (a
``frames`` row as such a frame) and ``run_events`` — every view that reads the database (``show``,
``stats``' fold, ``diff``, the inspector, the MCP tools, the OpenTelemetry exporter) gets the
events and the turn of each recorded frame from here, the same ones the recorder's tracker saw.

Must not know: SQL, rendering, message content.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any, NamedTuple

from acp_proxy.protocol import events as ev
from acp_proxy.protocol.state import NO_EVENTS, ConnectionState, FrameLike
from acp_proxy.protocol.vocabulary import OTHER

__all__ = ["FrameLike", "Meaning", "RecordedFrame", "RunReader", "run_events"]


class RecordedFrame:
    """A ``frames`` row (a mapping of its columns) as ``feed`` reads it.

    Only the envelope columns are read: a recorded response's ``method`` and ``session_id`` are
    the recorder's annotations of its request, which ``feed`` works out again by pairing.
    """

    __slots__ = (
        "cut",
        "dir",
        "forwarded",
        "kind",
        "line",
        "method",
        "origin",
        "rpc_id",
        "seq",
        "session_id",
        "ts_ns",
        "update_kind",
    )

    def __init__(self, row: Mapping[str, Any]) -> None:
        self.seq: int = row["seq"]
        self.ts_ns: int = row.get("ts_ns") or 0
        self.dir: str = row["dir"]
        self.kind: str | None = row.get("kind")
        self.method: str | None = row.get("method")
        self.rpc_id: str | None = row.get("rpc_id")
        self.session_id: str | None = row.get("session_id")
        self.update_kind: str | None = row.get("update_kind")
        raw = row.get("raw")
        self.line: bytes = (
            raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else (row.get("raw_bytes") or b"")
        )
        forwarded = row.get("forwarded")
        self.forwarded: int = 1 if forwarded is None else forwarded
        self.cut: int = row.get("cut") or 0
        self.origin: str | None = row.get("origin")


class Meaning(NamedTuple):
    """One recorded frame's meaning: its row, the events it caused, the turn it belongs to."""

    row: Mapping[str, Any] | None
    """The ``frames`` row; None for what the end of the run caused."""
    events: tuple[ev.Event, ...]
    turn: int | None
    """The prompt seq of the turn the frame belongs to (``ConnectionState.turn_of``); None."""


class RunReader:
    """The rows of one run in seq order, their meaning out, one row at a time (a live follow feeds
    rows as they are recorded); ``finish`` when the run has ended."""

    def __init__(self, *, version: int | None = None, state: ConnectionState | None = None) -> None:
        self.state = state if state is not None else ConnectionState(version=version)
        self.last_ts = 0

    def feed(self, row: Mapping[str, Any]) -> Meaning:
        self.last_ts = row.get("ts_ns") or self.last_ts
        if row.get("dir") not in OTHER:
            return Meaning(row, NO_EVENTS, None)
        frame = RecordedFrame(row)
        events = self.state.feed(frame)
        return Meaning(row, events, self.state.turn_of(frame, events))

    def finish(self, ts_ns: int | None = None) -> tuple[ev.Event, ...]:
        """What the end of the run causes (at ``ts_ns``, else the last row's time)."""
        return self.state.finish(ts_ns if ts_ns is not None else self.last_ts)


def run_events(
    rows: Iterable[Mapping[str, Any]],
    *,
    ended: bool = True,
    ended_ns: int | None = None,
    version: int | None = None,
    state: ConnectionState | None = None,
) -> Iterator[Meaning]:
    """The meaning of one recorded run: each ``frames`` row (in seq order) with the events it
    causes and its turn, then, if the run has ``ended``, ``Meaning(None, events, None)`` for what
    its end causes (``Unanswered``, unfinished ``TurnEnded``; at ``ended_ns``, else the last
    row's time). A run still recording has not ended: its open turns stay ``running``.

    Every row is yielded, stderr lines and batch lines included (they cause no events; a batch's
    elements are rows of their own). This is how every view that reads the database gets the
    same events the recorder's tracker saw. ``state``: the machine to feed (a caller that asks
    it more, e.g. ``replaying``); ``version``: the protocol version known in advance.
    """
    reader = RunReader(version=version, state=state)
    for row in rows:
        yield reader.feed(row)
    if ended:
        yield Meaning(None, reader.finish(ended_ns), None)
