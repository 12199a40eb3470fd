"""Run-time control of a live relay: fault rules added and removed, breakpoints, held frames.

Owns: ``LiveControl``, the state a person changes through ``acp-proxy ctl`` while the relay
runs — run-time fault rules (numbered, with the time each was added and removed), breakpoints
(filters that hold a matching frame instead of forwarding it), the frames held and what was
decided for them — and ``handle``, which turns one control request (a JSON object) into one
answer and a list of what changed. The current ``FaultPlan`` (start-up rules, then run-time
rules) is rebuilt on each change, keeping every surviving rule's counters and random streams.

Must not know: sockets, trio, pipes, the journal. The relay's control server reads requests
and carries out what changed (swaps the gate's plan, journals the new fault spec, wakes a
direction waiting on a held frame); the gate asks ``should_hold`` and builds the steps of a
release from the ``Decision``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from acp_proxy.errors import UsageError
from acp_proxy.faults.actions import Rule
from acp_proxy.faults.plan import FaultPlan
from acp_proxy.faults.rules import RuleError, parse_rule
from acp_proxy.protocol import filters
from acp_proxy.protocol.frames import FrameRecord

SOURCE = "ctl"
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
    """A frame held by a breakpoint. ``number`` is the gate's count of lines, both directions."""

    number: int
    direction: str
    data: bytes
    since_ns: int
    breakpoint: int
    method: str | None = None
    kind: str | None = None

    def describe(self, now_ns: int) -> dict[str, Any]:
        text = self.data.decode(errors="replace")
        return {
            "seq": self.number,
            "dir": self.direction,
            "kind": self.kind,
            "method": self.method,
            "held_s": round((now_ns - self.since_ns) / 1e9, 3),
            "breakpoint": self.breakpoint,
            "bytes": len(self.data),
            "frame": text if len(text) <= MAX_HELD_SHOWN else text[:MAX_HELD_SHOWN] + "...",
        }


@dataclass(frozen=True)
class Decision:
    """What to do with a held frame: forward it (``data`` None) or an edit, or drop it."""

    action: str  # release | drop
    data: bytes | None = None
    held_ns: int = 0


@dataclass
class Changes:
    """What a request changed, for the relay to carry out."""

    plan: bool = False
    decided: list[int] = field(default_factory=list)


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
        self._next_rule = 1
        self._next_break = 1
        self.plan: FaultPlan | None = base if base else None

    # -- what the gate asks ----------------------------------------------------------------

    def should_hold(self, rec: FrameRecord) -> int | None:
        """The id of the first breakpoint this frame matches, None when it goes on."""
        for point in self.breakpoints:
            if point.expr.matches(rec):
                return point.id
        return None

    def hold(self, number: int, rec: FrameRecord, data: bytes, breakpoint: int) -> Held:
        held = Held(number, rec.dir, data, self.clock(), breakpoint, rec.method, rec.kind)
        self.held[number] = held
        return held

    def take(self, number: int) -> Decision | None:
        """The decision for a held frame, once made (it is no longer held then)."""
        decision = self.decisions.pop(number, None)
        if decision is not None:
            self.held.pop(number, None)
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
            return {"removed": rule_id}
        if op == "fault-clear":
            now = self.clock()
            removed = [r.id for r in self.rules if r.removed_ns is None]
            for r in self.rules:
                if r.removed_ns is None:
                    r.removed_ns = now
            self._rebuild()
            changes.plan = bool(removed)
            return {"removed": removed}
        if op == "break":
            text = _text(request, "filter")
            expr = filters.parse(text)
            point = Breakpoint(self._next_break, text, expr)
            self._next_break += 1
            self.breakpoints.append(point)
            return {"id": point.id, "filter": text}
        if op == "breaks":
            return [{"id": p.id, "filter": p.text} for p in self.breakpoints]
        if op == "clear":
            removed = [p.id for p in self.breakpoints]
            self.breakpoints = []
            return {"removed": removed, "still_held": sorted(self.held)}
        if op == "held":
            now = self.clock()
            return [self.held[n].describe(now) for n in sorted(self.held)]
        if op in ("release", "drop"):
            number = _number(request, "seq")
            held = self.held.get(number)
            if held is None or number in self.decisions:
                holding = ", ".join(str(n) for n in sorted(self.held) if n not in self.decisions) or "none"
                raise ControlError(f"frame {number} is not held (held: {holding})")
            data = None
            if op == "release" and request.get("with") is not None:
                data = edited_frame(_text(request, "with"))
            self.decisions[number] = Decision(op, data, self.clock() - held.since_ns)
            changes.decided.append(number)
            return {op + "d" if op == "release" else "dropped": number}
        raise ControlError(f"unknown control request {op!r}")

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
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ControlError(f"--with is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ControlError("--with must be a JSON object (a JSON-RPC message)")
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


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
