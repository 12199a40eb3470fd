"""The gate: per-line verdicts for the options that must see a frame before it is forwarded.

Owns: deciding, line by line, what the relay writes, where, when, and what it tells the
recorder — for ``--strip-replayed-notices`` and for fault rules. It frames the directions that
need verdicts, decodes each line, runs the connection's protocol state machine through a
tracker of its own (fault selectors need the facts it annotates on a frame, such as "the
response to a session/prompt"; notice stripping needs its ``UpdateReplayed`` events), asks the
fault plan for actions and turns them into ``Step``s.

Must not know: trio, pipes, processes, SQL. The relay carries out the steps in order. Without
such an option the relay never builds a gate, and its fast path forwards chunks as read. The
remote wire's steps (``Wire``, ``AwaitBarrier``, ``ReleaseBarrier``) are carried out by
``relay/remote/faults.py``; ``run`` refuses the rules that make them (``faults.remote``), except
``drop=after``, whose ``Wire`` step a stdio relay has nothing to do for.

Rules: bytes are never altered except by a fault that says so. A direction no rule can touch is
still forwarded chunk by chunk (only observed). Every line of a judged direction is reported to
the recorder exactly once, with ``forwarded``, ``fault`` and ``note`` saying what happened,
and before its bytes are written (a ``Note`` precedes its ``Send``s).

Live control (``run --control``), in this order for each line: an answer to a request the
proxy sent (``ctl send``) is kept and recorded, never forwarded; then breakpoints: a held line
is recorded at once, not forwarded (its row is what a person names by seq), and waits; then,
once released, as an ordinary line, the fault rules in force at that moment judge the copy (or
the edit) that goes out, recorded as a second row. So a person sees and decides the frame the
peer sent, and the faults act on what is finally forwarded.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from acp_proxy.faults import actions as fl
from acp_proxy.faults.live import Decision, LiveControl
from acp_proxy.faults.plan import FaultPlan
from acp_proxy.protocol import events as ev
from acp_proxy.protocol import wire
from acp_proxy.protocol.frames import FrameRecord
from acp_proxy.protocol.framing import Line, LineFramer
from acp_proxy.protocol.tracker import NOTE_NOTICE_REPLAYED, Tracker
from acp_proxy.protocol.vocabulary import A2C, C2A, DIRECTIONS, OTHER

PIPE_OF = {C2A: "agent-stdin", A2C: "client-stdout"}


@dataclass(frozen=True, slots=True)
class Forward:
    """Write ``data`` towards ``direction``'s receiver and record it as ordinary stream data."""

    direction: str
    data: bytes


@dataclass(frozen=True, slots=True)
class Send:
    """Write ``data`` towards ``direction``'s receiver. Its record is the ``Note`` just before
    it (journal first: a line is recorded before any of its bytes are written)."""

    direction: str
    data: bytes


@dataclass(frozen=True, slots=True)
class Note:
    """Tell the recorder about one line: ``meta`` holds forwarded / fault / note / faults."""

    direction: str
    line: Line
    meta: dict[str, Any]
    ts_ns: int | None = None  # the record's time when it is a key (a held frame's); else the read's


@dataclass(frozen=True, slots=True)
class Pause:
    seconds: float


@dataclass(frozen=True, slots=True)
class Signal:
    """Signal the agent's process group."""

    signum: int


@dataclass(frozen=True, slots=True)
class ClosePipe:
    pipe: str  # agent-stdin | client-stdout


@dataclass(frozen=True, slots=True)
class Hold:
    """Hold this line (a breakpoint matched): the relay waits, in this direction only, for a
    decision, then carries out ``Gate.released``. The ``Note`` before it recorded the line,
    not forwarded, at once: a person names it by the ``frames`` seq it got."""

    direction: str
    line: Line
    number: int


@dataclass(frozen=True, slots=True)
class AwaitBarrier:
    """Wait, in this direction, until ``barrier`` is released or ``seconds`` have passed (None:
    no limit). Only the remote relay has barriers (``faults.remote``)."""

    barrier: str
    seconds: float | None


@dataclass(frozen=True, slots=True)
class ReleaseBarrier:
    barrier: str


@dataclass(frozen=True, slots=True)
class Wire:
    """A fault on the remote transport itself (restart, close=stream, abort, status,
    half-close, drop=after), for the remote relay to carry out where it stands in the steps.
    The gate has already decided what happens to the frame's bytes."""

    direction: str
    action: fl.Action


Step = Forward | Send | Note | Pause | Signal | ClosePipe | Hold | AwaitBarrier | ReleaseBarrier | Wire


OBSERVED_MAX_KEEP = 16 * 1024 * 1024
"""How much of one line a direction that is only observed holds (its chunks are forwarded as
read). A judged direction must hold each line whole: it is written only once judged."""


@dataclass
class _Direction:
    judged: bool
    framer: LineFramer = field(default_factory=LineFramer)
    stalled: bool = False
    held: list[Step] = field(default_factory=list)  # a reordered frame waiting for the next


class Gate:
    """Lines in (``chunk``, ``end``), steps out. ``clock`` gives each line's time (ns)."""

    def __init__(
        self,
        strip_replayed_notices: bool = False,
        plan: FaultPlan | None = None,
        clock: Callable[[], int] = time.time_ns,
        live: LiveControl | None = None,
    ) -> None:
        self.strip_replayed_notices = strip_replayed_notices
        self.plan = plan if plan else None
        self.live = live
        """Run-time control (``run --control``): it swaps ``plan`` and sets breakpoints, so
        every line of both directions is judged from the start."""
        self.clock = clock
        self.tracker = Tracker(0, changes=False)  # the gate needs state, not rows
        errors = self.plan is not None and any(rule.action == "error" for rule in self.plan.rules)
        self.directions: dict[str, _Direction] = {}
        for d in DIRECTIONS:
            # An error reply travels against its request: both directions then carry whole
            # lines only, so a reply can never land in the middle of a forwarded line.
            judged = (
                errors
                or live is not None
                or (self.plan is not None and self.plan.needs_verdict(d))
                or (d == "a2c" and strip_replayed_notices)
            )
            self.directions[d] = _Direction(judged, LineFramer(None if judged else OBSERVED_MAX_KEEP))
        self.closed: set[str] = set()
        self.half_closed: set[str] = set()
        self.lost: set[tuple[str, str]] = set()
        """(direction, id) of the answers drop=after loses: the response to a delivered request."""
        self.seq = 0

    def judged(self, direction: str) -> bool:
        return self.directions[direction].judged

    def chunk(self, direction: str, data: bytes) -> list[Step]:
        state = self.directions[direction]
        now = self.clock()
        lines = state.framer.feed(data)
        if not state.judged:
            for line in lines:
                self._observe_safely(direction, line, now)
            return [Forward(direction, data)]
        steps: list[Step] = []
        for line in lines:
            steps.extend(self._judge_safely(direction, line, now))
        if self.live is not None and self.live.held:
            steps = _held_rows_first(steps)
        return _coalesce(steps)

    def end(self, direction: str) -> list[Step]:
        """At EOF: judge an unterminated last line, release a held (reordered) frame."""
        state = self.directions[direction]
        line = state.framer.finish()
        if not state.judged:
            if line is not None:
                self._observe_safely(direction, line, self.clock())
            return []
        steps = self._judge_safely(direction, line, self.clock()) if line is not None else []
        steps.extend(state.held)
        state.held = []
        return steps

    def released(self, hold: Hold, decision: Decision) -> list[Step]:
        """The steps of a held line once decided. Its held row is recorded already (not
        forwarded); a release records the line again as forwarded (an edit: the edited line,
        ``origin = 'proxy'``), after the fault rules in force then have judged it, as any line:
        breakpoints first (a person sees the frame as the peer sent it), faults on what is
        finally forwarded. A drop writes no line: the held row stays the one not forwarded (the
        drop itself is a ``controls`` row). Each step records ``control``, the action's number,
        so the recorder links the action to the copy it wrote."""
        if decision.action == "drop":
            return []
        held_for = f"held {decision.held_ns / 1e9:.3f}s by a breakpoint"
        state = self.directions[hold.direction]
        line = hold.line
        if decision.data is None and decision.held is not None:
            rec = decision.held.rec
            meta: dict[str, Any] = {"note": f"released by acp-proxy ctl after it was {held_for}"}
        else:
            data = decision.data if decision.data is not None else line.data
            line = Line(data, len(data), True, False)
            rec = self._observe(hold.direction, line, self.clock(), "proxy")
            meta = {"origin": "proxy", "note": f"edited by acp-proxy ctl in place of a frame {held_for}"}
        if decision.control is not None:
            meta["control"] = decision.control  # the recorder links the action to this copy
        if state.stalled or PIPE_OF[hold.direction] in self.closed:
            why = "direction stalled by a fault" if state.stalled else "pipe closed by a fault"
            return [Note(hold.direction, line, {**meta, "forwarded": 0, "note": f"{meta['note']}; {why}"})]
        actions = self.plan.decide(rec) if self.plan is not None else []
        if not actions:
            return self._release(
                state, [Note(hold.direction, line, {**meta, "forwarded": 1}), Send(hold.direction, line.wire_bytes())]
            )
        return self._apply(hold.direction, state, line, actions, meta)

    def sent(self, direction: str, data: bytes, note: str, control: int | None = None) -> list[Step]:
        """A line ``acp-proxy ctl send`` writes towards ``direction``'s receiver: recorded
        (``origin = 'proxy'``), then written. Not offered to breakpoints or fault rules."""
        line = Line(data, len(data), True, False)
        self._observe(direction, line, self.clock(), "proxy")
        meta: dict[str, Any] = {"forwarded": 1, "origin": "proxy", "note": note}
        if control is not None:
            meta["control"] = control
        return [Note(direction, line, meta), Send(direction, data + b"\n")]

    # -- internals -------------------------------------------------------------------------

    # Belt and braces: decoding is total, but a verdict is computed from peer bytes by a tracker
    # and fault selectors. Should any of it raise, the line goes through untouched (and is
    # recorded as such): the gate may fail to judge a frame, never to forward it.

    def _observe_safely(self, direction: str, line: Line, ts_ns: int) -> None:
        try:
            self._observe(direction, line, ts_ns)
        except Exception:
            pass

    def _judge_safely(self, direction: str, line: Line, ts_ns: int) -> list[Step]:
        try:
            return self._judge(direction, line, ts_ns)
        except Exception as exc:
            state = self.directions[direction]
            note = Note(direction, line, {"forwarded": 1, "note": f"not judged ({type(exc).__name__}); forwarded"})
            return self._release(state, [note, Send(direction, line.wire_bytes())])

    def _observe(self, direction: str, line: Line, ts_ns: int, origin: str | None = None) -> FrameRecord:
        self.seq += 1
        rec = FrameRecord(0, self.seq, ts_ns, direction, line.data, wire.decode(line.data))
        rec.origin = origin
        self.tracker.observe(rec)
        self.tracker.drain()  # the gate needs the tracker's state, not its rows
        return rec

    def _judge(self, direction: str, line: Line, ts_ns: int) -> list[Step]:
        state = self.directions[direction]
        self.seq += 1
        rec = FrameRecord(0, self.seq, ts_ns, direction, line.data, wire.decode(line.data))
        rec.terminated = int(line.terminated)  # what a fault writes keeps the line's end as it was
        events = self.tracker.observe(rec)
        self.tracker.drain()
        if self.live is not None:
            if self.live.sent and self.live.answer_to_sent(rec, line.data) is not None:
                kept = "the answer to a request acp-proxy ctl sent: kept by the proxy, not forwarded"
                return self._release(state, [Note(direction, line, {"forwarded": 0, "note": kept})])
            point = None if state.stalled or PIPE_OF[direction] in self.closed else self.live.should_hold(rec)
            if point is not None:
                # Faults judge it once released (Gate.released): a person decides its fate first.
                held = self.live.hold(rec, line.data, point)
                why = f"held by breakpoint {point} (acp-proxy ctl); forwarded only if released"
                meta = {"forwarded": 0, "note": why, "hold": held.number}
                hold_note = Note(direction, line, meta, held.since_ns)
                return self._release(state, [hold_note, Hold(direction, line, held.number)])
        actions = self.plan.decide(rec) if self.plan is not None else []
        if events and direction == A2C and self.strip_replayed_notices and _replayed_notice(events):
            note = Note(direction, line, {"forwarded": 0, "note": f"stripped: {NOTE_NOTICE_REPLAYED}"})
            return self._release(state, [note])
        if state.stalled or PIPE_OF[direction] in self.closed:
            why = "direction stalled by a fault" if state.stalled else "pipe closed by a fault"
            if direction in self.half_closed:
                why = "direction half-closed by a fault"
            return [Note(direction, line, {"forwarded": 0, "note": why})]
        if rec.rpc_id is not None and rec.kind in ("response", "error") and (direction, rec.rpc_id) in self.lost:
            self.lost.discard((direction, rec.rpc_id))
            why = "its answer lost: drop=after on the request it answers"
            return self._release(state, [Note(direction, line, {"forwarded": 0, "note": why})])
        if not actions:
            return self._release(state, [Forward(direction, line.wire_bytes())])
        return self._apply(direction, state, line, actions, rec=rec)

    def _apply(
        self,
        direction: str,
        state: _Direction,
        line: Line,
        actions: list[fl.Action],
        base: dict[str, Any] | None = None,
        rec: FrameRecord | None = None,
    ) -> list[Step]:
        """``base``: a released frame's origin and note, kept beside what the faults did;
        ``rec``: the frame, for drop=after to know which answer to lose."""
        steps: list[Step] = []
        frame_steps: list[Step] = []
        data: bytes | None = line.wire_bytes()
        reorder = False
        notes: list[str] = []
        for action in actions:
            if isinstance(action, fl.Delay):
                steps.append(Pause(action.seconds))
            elif isinstance(action, fl.Inject):
                target = steps if action.position == "before" else frame_steps
                target.extend(self._injected(direction, action))
            elif isinstance(action, fl.Kill):
                steps.append(Signal(action.signum))
            elif isinstance(action, fl.Close) and action.pipe == "stream":
                steps.append(Wire(direction, action))
                data = None
                notes.append("its stream was closed")
            elif isinstance(action, fl.Close):
                steps.append(ClosePipe(action.pipe))
                self.closed.add(action.pipe)
                if action.pipe == PIPE_OF[direction]:
                    data = None
                    notes.append("its pipe was closed")
            elif isinstance(action, fl.Stall):
                state.stalled = True
                data = None
                notes.append(f"{direction} stalled")
            elif isinstance(action, fl.Drop) and action.after:
                if rec is not None and rec.rpc_id is not None and rec.kind == "request":
                    self.lost.add((OTHER[direction], rec.rpc_id))
                frame_steps.append(Wire(direction, action))
                notes.append("delivered; its answer lost")
            elif isinstance(action, fl.Drop):
                data = None
                notes.append("dropped")
            elif isinstance(action, fl.Hold):
                steps.append(AwaitBarrier(action.barrier, action.seconds))
            elif isinstance(action, fl.Release):
                frame_steps.append(ReleaseBarrier(action.barrier))
            elif isinstance(action, fl.Restart):
                steps.append(Wire(direction, action))
            elif isinstance(action, fl.HalfClose):
                self.directions[action.direction].stalled = True
                self.half_closed.add(action.direction)
                steps.append(Wire(direction, action))
                if action.direction == direction:
                    data = None
                    notes.append(f"{direction} half-closed")
            elif isinstance(action, fl.Status | fl.Abort):
                data = None
                frame_steps.append(Wire(direction, action))
                notes.append("answered " + action.detail() if isinstance(action, fl.Status) else action.detail())
            elif isinstance(action, fl.ErrorReply):
                if action.to_sender:
                    data = None
                    back = OTHER[direction]
                    # After the request's own note: the recorder pairs the reply with it.
                    reply = self._proxy_note(back, action.data, action, "error reply sent by acp-proxy")
                    frame_steps.append(reply)
                    frame_steps.append(Send(back, action.data))
                    notes.append("answered with an error by acp-proxy")
                elif data is not None:
                    data = action.data
                    notes.append("result replaced by an error")
            elif isinstance(action, (fl.Corrupt, fl.Truncate)):
                if data is not None:
                    data = action.data
                    notes.append("forwarded corrupted" if action.name == "corrupt" else "forwarded truncated")
            elif isinstance(action, fl.Reorder):
                reorder = True
        written: list[Step] = []
        if data is not None:
            split = next((a for a in actions if isinstance(a, fl.Split)), None)
            copies = next((a.copies for a in actions if isinstance(a, fl.Duplicate)), 0)
            for copy in range(1 + copies):
                if split is not None and copy == 0:
                    for i, part in enumerate(split.parts):
                        if i:
                            written.append(Pause(split.pause))
                        written.append(Send(direction, part))
                else:
                    written.append(Send(direction, data))
            if copies:
                notes.append(f"written {1 + copies} times")
        meta: dict[str, Any] = {
            "forwarded": int(data is not None),
            "fault": fl.fault_label(actions),
            "faults": [{"rule": a.rule_text, "action": a.name, "detail": a.detail()} for a in actions],
        }
        if base is not None:
            meta["origin"] = base.get("origin")
            if "control" in base:
                meta["control"] = base["control"]
            notes.insert(0, base["note"])
        if notes:
            meta["note"] = "; ".join(notes)
        written.insert(0, Note(direction, line, meta))
        written.extend(frame_steps)
        if reorder and data is not None:
            # Held until the next frame in this direction has gone out (or EOF).
            released = self._release(state, [])
            state.held = written
            return steps + released
        return self._release(state, steps + written)

    def _release(self, state: _Direction, steps: list[Step]) -> list[Step]:
        if not state.held:
            return steps
        held, state.held = state.held, []
        return steps + held

    def _injected(self, direction: str, action: fl.Inject) -> list[Step]:
        note = self._proxy_note(direction, action.data, action, "injected by acp-proxy")
        return [note, Send(direction, action.data)]

    def _proxy_note(self, direction: str, data: bytes, action: fl.Action, why: str) -> Note:
        body = data[:-1] if data.endswith(b"\n") else data
        line = Line(body, len(body), data.endswith(b"\n"), False)
        # The tracker sees what the receiver sees: an error reply answers the request.
        self._observe(direction, line, self.clock())
        # No "faults" entry: the fault's one row is on the frame that triggered it.
        meta = {
            "forwarded": 1,
            "fault": action.name,
            "origin": "proxy",
            "note": f"{why} (rule {action.rule_index + 1}: {action.rule_text})",
        }
        return Note(direction, line, meta)


def _replayed_notice(events: tuple[ev.Event, ...]) -> bool:
    return any(isinstance(e, ev.UpdateReplayed) and e.live_only for e in events)


def _held_rows_first(steps: list[Step]) -> list[Step]:
    """Every held line of a read is recorded before the relay waits on the first: a person
    sees each held frame in ``frames`` (and names it by its seq) while it is held."""
    first = next((i for i, step in enumerate(steps) if isinstance(step, Hold)), None)
    if first is None:
        return steps
    rows = [s for s in steps[first:] if isinstance(s, Note) and s.ts_ns is not None]
    rest = [s for s in steps[first:] if not (isinstance(s, Note) and s.ts_ns is not None)]
    return steps[:first] + rows + rest


def _coalesce(steps: list[Step]) -> list[Step]:
    """Join runs of plain forwards into one write: a storm of lines costs one syscall a chunk."""
    out: list[Step] = []
    run: list[bytes] = []
    direction = ""
    for step in steps:
        if isinstance(step, Forward) and (not run or step.direction == direction):
            run.append(step.data)
            direction = step.direction
            continue
        if run:
            out.append(Forward(direction, b"".join(run)))
            run = []
        if isinstance(step, Forward):
            run.append(step.data)
            direction = step.direction
        else:
            out.append(step)
    if run:
        out.append(Forward(direction, b"".join(run)))
    return out
