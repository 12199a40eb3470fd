"""Run-time control of a live relay: fault rules added and removed, breakpoints, held frames.

Owns: ``LiveControl``, the state a person changes through ``acp-proxy ctl`` while the relay
runs — run-time fault rules (numbered, with the time each was added and removed), breakpoints
(filters that hold a matching frame instead of forwarding it), the frames held and what was
decided for them, the requests the proxy sent itself (``ctl send``/``resend``: ids of its own,
answers kept), the record of each action (``Changes.control``: numbered, timed rows the
relay journals and the recorder writes to ``controls``) — and ``handle``, which turns one
control request (a JSON object) into one answer and a list of what changed. The current
``FaultPlan`` (start-up rules, then run-time rules) is rebuilt on each change, keeping every
surviving rule's counters and random streams.

Must not know: sockets, trio, pipes, the journal. The relay's control server reads requests
and carries out what changed (swaps the gate's plan, journals the new fault spec, wakes a
direction waiting on a held frame); the gate asks ``should_hold`` and builds the steps of a
release from the ``Decision``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from acp_proxy.errors import UsageError
from acp_proxy.faults.actions import Rule
from acp_proxy.faults.plan import FaultPlan
from acp_proxy.faults.rules import RuleError, parse_rule
from acp_proxy.protocol import filters, wire
from acp_proxy.protocol.frames import FrameRecord
from acp_proxy.protocol.vocabulary import OTHER

SOURCE = "ctl"
SENT_ID_PREFIX = "acp-proxy-ctl-"
"""Requests the proxy sends get string ids with this prefix and a counter: the ids of its own
direction's peer are (by every SDK) numbers or strings of their own, so they cannot collide,
and the answer comes back in the other direction, where peers' ids never pair."""
RECEIVER = {"c2a": "agent", "a2c": "client"}
DIRECTION_TO = {"agent": "c2a", "client": "a2c"}
MAX_SENT_KEPT = 1000  # answers kept for ``sent``; the oldest go first
MAX_HELD_SHOWN = 200  # characters of a held frame shown by ``held``


class ControlError(UsageError, ValueError):
    """A request that cannot be carried out: its message is the one line the user sees."""


@dataclass
class LiveRule:
    id: int
    rule: Rule
    added_ns: int
    removed_ns: int | None = None


@dataclass
class Breakpoint:
    id: int
    text: str
    expr: filters.Expr


@dataclass
class Held:
    """A frame held by a breakpoint. ``number`` counts holds (1, 2, ...: what the control wire
    names); ``ts_ns`` is the time its held row was journaled with, unique within the run, which
    is how a door finds the ``frames`` seq a person sees (``read.controls.held_seqs``)."""

    number: int
    direction: str
    data: bytes
    since_ns: int
    breakpoint: int
    rec: FrameRecord
    method: str | None = None
    kind: str | None = None

    def describe(self, now_ns: int) -> dict[str, Any]:
        text = self.data.decode(errors="replace")
        return {
            "hold": self.number,
            "ts_ns": self.since_ns,
            "dir": self.direction,
            "kind": self.kind,
            "method": self.method,
            "held_s": round((now_ns - self.since_ns) / 1e9, 3),
            "breakpoint": self.breakpoint,
            "bytes": len(self.data),
            "frame": text if len(text) <= MAX_HELD_SHOWN else text[:MAX_HELD_SHOWN] + "...",
        }


@dataclass
class Sent:
    """A request ``acp-proxy ctl send|resend`` wrote: its answer is the proxy's, kept here."""

    id: str
    direction: str
    method: str | None
    sent_ns: int
    resend_of: int | None = None
    answer: str | None = None
    answered_ns: int | None = None

    def describe(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "to": RECEIVER[self.direction],
            "method": self.method,
            "resend_of": self.resend_of,
            "answered": self.answer is not None,
            "answer": self.answer,
        }


@dataclass(frozen=True)
class Decision:
    """What to do with a held frame: forward it (``data`` None) or an edit, or drop it."""

    action: str  # release | drop
    data: bytes | None = None
    held_ns: int = 0
    held: Held | None = None  # the frame it decides, once taken
    control: int | None = None  # the number of the action that decided it (``Changes.control``)


@dataclass
class Changes:
    """What a request changed, for the relay to carry out."""

    plan: bool = False
    decided: list[int] = field(default_factory=list)
    send: list[tuple[str, bytes, str, int | None]] = field(default_factory=list)
    """Frames to write now: (direction, one line without its newline, the note to record, the
    number of the action that sent it)."""
    control: list[dict[str, Any]] = field(default_factory=list)
    """The actions to record, one ``controls`` row each (``control_row``)."""


class LiveControl:
    """The state behind one run's control socket. ``clock`` gives the time in ns."""

    def __init__(self, base: FaultPlan | None, clock: Callable[[], int]) -> None:
        self.base_rules: tuple[Rule, ...] = base.rules if base is not None else ()
        self.seed = base.seed if base is not None else None
        self.clock = clock
        self.rules: list[LiveRule] = []
        self.breakpoints: list[Breakpoint] = []
        self.held: dict[int, Held] = {}
        self.decisions: dict[int, Decision] = {}
        self.sent: dict[tuple[str, str], Sent] = {}
        """Requests the proxy sent, by (direction, id as canonical JSON text)."""
        self._next_rule = 1
        self._next_hold = 1
        self._next_sent = 1
        self._last_hold_ns = 0
        self._next_break = 1
        self._next_action = 1
        self.serving = False
        self.early: list[dict[str, Any]] = []
        """Actions recorded before a control server serves (``run --break``): it journals them."""
        self.plan: FaultPlan | None = base if base else None

    # -- what the gate asks ----------------------------------------------------------------

    def should_hold(self, rec: FrameRecord) -> int | None:
        """The id of the first breakpoint this frame matches, None when it goes on."""
        for point in self.breakpoints:
            if point.expr.matches(rec):
                return point.id
        return None

    def hold(self, rec: FrameRecord, data: bytes, breakpoint: int) -> Held:
        # Strictly increasing: the time is the held row's key (two lines of one read differ).
        now = max(self.clock(), self._last_hold_ns + 1)
        self._last_hold_ns = now
        held = Held(self._next_hold, rec.dir, data, now, breakpoint, rec, rec.method, rec.kind)
        self._next_hold += 1
        self.held[held.number] = held
        return held

    def answer_to_sent(self, rec: FrameRecord, data: bytes) -> Sent | None:
        """The request the proxy sent that this frame answers (recorded, kept, not forwarded)."""
        if rec.kind not in ("response", "error") or rec.rpc_id is None:
            return None
        sent = self.sent.get((OTHER[rec.dir], rec.rpc_id))
        if sent is None or sent.answer is not None:
            return None
        sent.answer = data.decode(errors="replace")
        sent.answered_ns = self.clock()
        return sent

    def take(self, number: int) -> Decision | None:
        """The decision for a held frame, once made (it is no longer held then)."""
        decision = self.decisions.pop(number, None)
        if decision is not None:
            decision = replace(decision, held=self.held.pop(number, None))
        return decision

    # -- requests ----------------------------------------------------------------------------

    def handle(self, request: dict[str, Any]) -> tuple[dict[str, Any], Changes]:
        """One request, one answer: ``{"ok": ...}`` or ``{"error": "one line"}``."""
        changes = Changes()
        try:
            answer = self._handle(request, changes)
        except (ControlError, RuleError, filters.FilterError) as exc:
            return {"error": str(exc).splitlines()[0] if str(exc) else type(exc).__name__}, Changes()
        return {"ok": answer}, changes

    def _handle(self, request: dict[str, Any], changes: Changes) -> Any:
        op = request.get("op")
        if op == "fault-add":
            rule = parse_rule(_text(request, "rule"), SOURCE)
            live = LiveRule(self._next_rule, rule, self.clock())
            self._next_rule += 1
            self.rules.append(live)
            self._rebuild()
            changes.plan = True
            self._record(changes, "fault-add", f"#{live.id} {rule.text}", ts_ns=live.added_ns)
            return {"id": live.id, "rule": rule.text}
        if op == "fault-list":
            return [self._describe_rule(r) for r in self.rules if r.removed_ns is None]
        if op == "fault-remove":
            rule_id = _number(request, "id")
            found = next((r for r in self.rules if r.id == rule_id and r.removed_ns is None), None)
            if found is None:
                raise ControlError(f"no run-time fault rule {rule_id} (see: fault list)")
            found.removed_ns = self.clock()
            self._rebuild()
            changes.plan = True
            self._record(changes, "fault-remove", f"#{rule_id} {found.rule.text}", ts_ns=found.removed_ns)
            return {"removed": rule_id}
        if op == "fault-clear":
            now = self.clock()
            removed = [r.id for r in self.rules if r.removed_ns is None]
            for r in self.rules:
                if r.removed_ns is None:
                    r.removed_ns = now
            self._rebuild()
            changes.plan = bool(removed)
            self._record(changes, "fault-clear", " ".join(f"#{n}" for n in removed) or None, ts_ns=now)
            return {"removed": removed}
        if op == "break":
            text = _text(request, "filter")
            expr = filters.parse(text)
            point = Breakpoint(self._next_break, text, expr)
            self._next_break += 1
            self.breakpoints.append(point)
            self._record(changes, "break", f"#{point.id} {text}")
            return {"id": point.id, "filter": text}
        if op == "unbreak":
            point_id = _number(request, "id")
            if not any(p.id == point_id for p in self.breakpoints):
                raise ControlError(f"no breakpoint {point_id} (see: breaks)")
            gone = next(p for p in self.breakpoints if p.id == point_id)
            self.breakpoints = [p for p in self.breakpoints if p.id != point_id]
            self._record(changes, "unbreak", f"#{point_id} {gone.text}")
            return {"removed": point_id}
        if op == "breaks":
            return [{"id": p.id, "filter": p.text} for p in self.breakpoints]
        if op == "clear":
            removed = [p.id for p in self.breakpoints]
            self.breakpoints = []
            self._record(changes, "clear", " ".join(f"#{n}" for n in removed) or None)
            return {"removed": removed, "still_held": sorted(self.held)}
        if op == "held":
            now = self.clock()
            return [self.held[n].describe(now) for n in sorted(self.held)]
        if op == "held-frame":
            number = _number(request, "hold")
            if number not in self.held:
                raise ControlError(f"hold {number} is not held")
            return self.held[number].data.decode(errors="replace")
        if op in ("release", "drop"):
            number = _number(request, "hold")
            held = self.held.get(number)
            if held is None or number in self.decisions:
                holding = ", ".join(str(n) for n in sorted(self.held) if n not in self.decisions) or "none"
                raise ControlError(f"hold {number} is not held (holds: {holding})")
            data = None
            if op == "release" and request.get("with") is not None:
                data = edited_frame(_text(request, "with"))
            now = self.clock()
            held_ns = now - held.since_ns
            what = "edited" if data is not None else None
            number_ = self._record(changes, op, what, hold=number, held_ns=held_ns, held_ts=held.since_ns, ts_ns=now)
            self.decisions[number] = Decision(op, data, held_ns, control=number_)
            changes.decided.append(number)
            return {op + "d" if op == "release" else "dropped": number}
        if op == "send":
            return self._send(request, changes)
        if op == "sent":
            return [s.describe() for s in self.sent.values()]
        raise ControlError(f"unknown control request {op!r}")

    def _send(self, request: dict[str, Any], changes: Changes) -> dict[str, Any]:
        """A frame written to one peer as if the other had sent it. A request gets a fresh id
        of the proxy's own (``SENT_ID_PREFIX``): its answer comes back to the proxy."""
        to = request.get("to")
        direction = DIRECTION_TO.get(to) if isinstance(to, str) else None
        if direction is None:
            raise ControlError("send needs --to agent or --to client")
        value = _frame_object(_text(request, "frame"), "the frame")
        resend_of = request.get("resend_of")
        resend_of = resend_of if isinstance(resend_of, int) and not isinstance(resend_of, bool) else None
        method = value.get("method")
        sent: Sent | None = None
        if isinstance(method, str) and "id" in value:
            rpc_id = f"{SENT_ID_PREFIX}{self._next_sent}"
            self._next_sent += 1
            value["id"] = rpc_id
            sent = Sent(rpc_id, direction, method, self.clock(), resend_of)
        elif "method" not in value and "id" not in value:
            raise ControlError("the frame is neither a request, a notification nor a response (no method, no id)")
        data = compact(value)
        if sent is not None:
            key = (direction, wire.decode(data).rpc_id or "")
            if len(self.sent) >= MAX_SENT_KEPT:
                self.sent.pop(next(iter(self.sent)))
            self.sent[key] = sent
        what = (
            f"resent by acp-proxy ctl (frame {resend_of} again)" if resend_of is not None else "sent by acp-proxy ctl"
        )
        if sent is not None:
            what += "; its answer is the proxy's, not forwarded"
        action = "resend" if resend_of is not None else "send"
        argument = f"to {RECEIVER[direction]}" + (f" {method}" if isinstance(method, str) else "")
        control = self._record(changes, action, argument, seq=resend_of, ts_ns=sent.sent_ns if sent else None)
        changes.send.append((direction, data, what, control))
        return {"sent": RECEIVER[direction], "id": value.get("id"), "method": method}

    def _record(
        self,
        changes: Changes,
        action: str,
        argument: str | None = None,
        *,
        hold: int | None = None,
        held_ns: int | None = None,
        held_ts: int | None = None,
        seq: int | None = None,
        ts_ns: int | None = None,
    ) -> int:
        """One action to record (a ``controls`` row), numbered within the run. Frames are never
        copied into it: a frame an action wrote is recorded as a frame (``result_seq``), where
        every door masks it, and ``argument`` only names it."""
        number = self._next_action
        self._next_action += 1
        when = ts_ns if ts_ns is not None else self.clock()
        row: dict[str, Any] = {"number": number, "ts_ns": when, "action": action}
        for key, value in (("argument", argument), ("hold", hold), ("held_ns", held_ns), ("held_ts", held_ts)):
            if value is not None:
                row[key] = value
        if seq is not None:
            row["seq"] = seq
        changes.control.append(row)
        if not self.serving:
            self.early.append(row)
        return number

    def spec(self) -> dict[str, Any]:
        """The run's fault spec: the plan's rules and seed, plus every run-time rule's history."""
        out: dict[str, Any] = self.plan.describe() if self.plan is not None else {"seed": self.seed, "rules": []}
        out["runtime"] = [self._describe_rule(r) for r in self.rules]
        return out

    def _describe_rule(self, live: LiveRule) -> dict[str, Any]:
        out = {"id": live.id, **live.rule.describe(), "added_ns": live.added_ns}
        if live.removed_ns is not None:
            out["removed_ns"] = live.removed_ns
        return out

    def _rebuild(self) -> None:
        """A new plan of the start-up rules then the active run-time ones; a surviving rule
        keeps its counters and random streams (a rule's index may change, its state not)."""
        old = self.plan
        active = [r.rule for r in self.rules if r.removed_ns is None]
        rules = [*self.base_rules, *active]
        if not rules:
            # Counters of a plan with no rules need not survive: nothing reads them.
            self.plan = None
            return
        plan = FaultPlan(rules, self.seed, old.start_ns if old is not None else None)
        self.seed = plan.seed
        if old is not None:
            states = {id(rule): state for rule, state in zip(old.rules, old._states, strict=True)}
            plan._states = [states.get(id(rule), fresh) for rule, fresh in zip(plan.rules, plan._states, strict=True)]
            plan.frames_seen = old.frames_seen
            plan._last_session = old._last_session
        self.plan = plan


def edited_frame(text: str) -> bytes:
    """The line ``release --with`` writes: a JSON object, written compactly on one line."""
    return compact(_frame_object(text, "--with"))


def compact(value: dict[str, Any]) -> bytes:
    """One JSON line; text that is not valid Unicode (a lone surrogate) is written escaped."""
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()
    except UnicodeEncodeError:
        return json.dumps(value, separators=(",", ":")).encode()


def _frame_object(text: str, what: str) -> dict[str, Any]:
    try:
        value = wire.loads(text)  # depth-bounded
    except ValueError as exc:
        raise ControlError(f"{what} is not JSON: {str(exc).splitlines()[0] if str(exc) else exc}") from None
    if not isinstance(value, dict):
        raise ControlError(f"{what} must be a JSON object (a JSON-RPC message)")
    return value


def _text(request: dict[str, Any], key: str) -> str:
    value = request.get(key)
    if not isinstance(value, str):
        raise ControlError(f"the request needs {key} as text")
    return value


def _number(request: dict[str, Any], key: str) -> int:
    value = request.get(key)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ControlError(f"the request needs {key} as a number")
    return value
