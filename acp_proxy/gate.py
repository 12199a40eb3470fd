"""The gate: per-line verdicts for the options that must look at a frame before it is forwarded.

Owns: deciding, line by line, what the relay forwards and what it tells the recorder, when an
option needs a decision per frame (today: ``--strip-replayed-notices``). It frames the stream,
decodes each line and keeps a tracker of its own to know where replay windows are.

Must not know: trio, pipes, processes, SQL. The relay feeds it chunks and carries out the
``Step``s it returns, in order. Without such an option the relay never builds a gate, and its
fast path forwards chunks without waiting for a newline.

Rule: only complete lines are judged; bytes are never altered. A line that is forwarded goes
out exactly as it came in (CRLF and all); a line that is held back is still recorded, with
``forwarded = 0`` and the reason.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from . import wire
from .framing import Line, LineFramer
from .record import FrameRecord
from .tracker import Tracker


@dataclass(frozen=True, slots=True)
class Forward:
    """Send these bytes on and record them as ordinary data."""

    data: bytes


@dataclass(frozen=True, slots=True)
class Withhold:
    """Do not forward this line; record it with ``forwarded = 0`` and ``note``."""

    line: Line
    note: str


Step = Forward | Withhold


class Gate:
    def __init__(self, strip_replayed_notices: bool) -> None:
        self.strip_replayed_notices = strip_replayed_notices
        self.tracker = Tracker(run_id=0)
        self.framers = {"c2a": LineFramer(), "a2c": LineFramer()}
        self.seq = 0
        self.stripped = 0

    def client_chunk(self, data: bytes) -> list[Step]:
        """Client -> agent: always forwarded at once; observed so replay windows are known."""
        now = time.time_ns()
        for line in self.framers["c2a"].feed(data):
            self._observe("c2a", line, now)
        return [Forward(data)]

    def agent_chunk(self, data: bytes) -> list[Step]:
        """Agent -> client: complete lines are judged; forwarded runs are joined into one write."""
        now = time.time_ns()
        steps: list[Step] = []
        run: list[bytes] = []
        for line in self.framers["a2c"].feed(data):
            reason = self._observe("a2c", line, now)
            if reason is None:
                run.append(line.data)
                run.append(b"\n")
                continue
            if run:
                steps.append(Forward(b"".join(run)))
                run = []
            steps.append(Withhold(line, reason))
        if run:
            steps.append(Forward(b"".join(run)))
        return steps

    def agent_end(self) -> list[Step]:
        """At the agent's EOF: an unterminated last line goes out as it is (nothing to judge)."""
        line = self.framers["a2c"].finish()
        return [Forward(line.data)] if line is not None else []

    def _observe(self, direction: str, line: Line, ts_ns: int) -> str | None:
        self.seq += 1
        rec = FrameRecord(0, self.seq, ts_ns, direction, line.data, wire.decode(line.data))
        reason = None
        if direction == "a2c" and self.strip_replayed_notices:
            reason = self.tracker.should_strip(rec)
        self.tracker.observe(rec)
        self.tracker.drain()  # the gate needs the tracker's state, not its rows
        if reason is not None:
            self.stripped += 1
            return f"stripped: {reason}"
        return None
