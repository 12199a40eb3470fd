"""What a fault rule is once parsed, and what a fault does: the data the plan and the gate share.

Owns: ``Action`` and its kinds (drop, delay, duplicate, reorder, corrupt, truncate, split, error,
inject, kill, close, stall; and the remote wire's hold, release, abort, status, half-close,
restart), each with what carrying it out needs; ``fault_label`` (the
frames.fault value); ``Rule`` (one parsed rule: action, filter, counting options) and
``RuleSet`` (rules from one source, with its seed).

Must not know: the rule language's syntax (``rules``), the seeded decisions (``plan``), pipes,
trio, processes (``gate`` and the relay carry actions out).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from acp_proxy.protocol import filters
from acp_proxy.protocol.vocabulary import DIRECTIONS

SUB = 0x1A  # ASCII "substitute": made to stand in for a character received in error


# -- actions -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Action:
    """One fault to apply to one frame. ``name`` is its value in the frames.fault column."""

    rule_index: int
    rule_text: str
    name: ClassVar[str] = ""

    def detail(self) -> str:
        """A short description of the arguments, for the faults table."""
        return ""


@dataclass(frozen=True, slots=True)
class Drop(Action):
    after: bool = False
    """drop=after: the frame is delivered and its answer is lost (the response to a request,
    and on HTTP the POST's own answer)."""
    name: ClassVar[str] = "drop"

    def detail(self) -> str:
        return "after: delivered, its answer lost" if self.after else ""


@dataclass(frozen=True, slots=True)
class Delay(Action):
    seconds: float
    name: ClassVar[str] = "delay"

    def detail(self) -> str:
        return f"{self.seconds * 1000:g}ms"


@dataclass(frozen=True, slots=True)
class Duplicate(Action):
    copies: int
    """Extra copies written after the frame."""
    name: ClassVar[str] = "duplicate"

    def detail(self) -> str:
        return f"{self.copies} extra"


@dataclass(frozen=True, slots=True)
class Reorder(Action):
    name: ClassVar[str] = "reorder"


@dataclass(frozen=True, slots=True)
class Corrupt(Action):
    data: bytes
    """What to write instead of the line: invalid JSON of the line's length, then its newline."""
    name: ClassVar[str] = "corrupt"

    def detail(self) -> str:
        return f"byte {self.data.index(SUB)} -> 0x1a" if SUB in self.data else ""


@dataclass(frozen=True, slots=True)
class Truncate(Action):
    data: bytes
    """What to write instead of the line: its kept prefix, then its newline."""
    name: ClassVar[str] = "truncate"

    def detail(self) -> str:
        kept = len(self.data) - self.data.endswith(b"\n")
        return f"kept {kept} bytes"


@dataclass(frozen=True, slots=True)
class Split(Action):
    parts: tuple[bytes, ...]
    """The frame's bytes as written (after any replacement), in pieces; joined they are whole."""
    pause: float
    """Seconds between two writes."""
    name: ClassVar[str] = "split"

    def detail(self) -> str:
        return f"{len(self.parts)} writes, {self.pause * 1000:g}ms apart"


@dataclass(frozen=True, slots=True)
class ErrorReply(Action):
    data: bytes
    """The whole JSON-RPC error line, newline included."""
    to_sender: bool
    """True: the frame was a request — send ``data`` back to its sender, do not forward the
    request. False: the frame was a response — forward ``data`` in its place."""
    name: ClassVar[str] = "error"

    def detail(self) -> str:
        return ("reply " if self.to_sender else "replace ") + self.data.decode(errors="replace").strip()


@dataclass(frozen=True, slots=True)
class Inject(Action):
    data: bytes
    """The line to write, newline included, in the matched frame's direction."""
    position: str
    """"before" or "after" the matched frame."""
    name: ClassVar[str] = "inject"

    def detail(self) -> str:
        return f"{self.position}: {self.data.decode(errors='replace').strip()}"


@dataclass(frozen=True, slots=True)
class Kill(Action):
    signum: int
    signame: str
    name: ClassVar[str] = "kill"

    def detail(self) -> str:
        return self.signame


@dataclass(frozen=True, slots=True)
class Close(Action):
    pipe: str
    """``agent-stdin`` or ``client-stdout``."""
    name: ClassVar[str] = "close"

    def detail(self) -> str:
        return self.pipe


@dataclass(frozen=True, slots=True)
class Stall(Action):
    direction: str
    """The direction stopped from this frame on (the matched frame's)."""
    name: ClassVar[str] = "stall"

    def detail(self) -> str:
        return self.direction


@dataclass(frozen=True, slots=True)
class Hold(Action):
    barrier: str
    seconds: float | None
    """The longest wait; None: until released or the connection ends."""
    name: ClassVar[str] = "hold"

    def detail(self) -> str:
        return self.barrier + ("" if self.seconds is None else f" (at most {self.seconds * 1000:g}ms)")


@dataclass(frozen=True, slots=True)
class Release(Action):
    barrier: str
    name: ClassVar[str] = "release"

    def detail(self) -> str:
        return self.barrier


@dataclass(frozen=True, slots=True)
class Abort(Action):
    partial: bytes
    """What is written of the frame before its stream is cut: its first half."""
    name: ClassVar[str] = "abort"

    def detail(self) -> str:
        return f"cut after {len(self.partial)} bytes"


@dataclass(frozen=True, slots=True)
class Status(Action):
    code: int
    retry_after: int | None
    name: ClassVar[str] = "status"

    def detail(self) -> str:
        return f"HTTP {self.code}" + ("" if self.retry_after is None else f", Retry-After: {self.retry_after}")


@dataclass(frozen=True, slots=True)
class HalfClose(Action):
    direction: str
    """The direction closed from this frame on."""
    name: ClassVar[str] = "half-close"

    def detail(self) -> str:
        return self.direction


@dataclass(frozen=True, slots=True)
class Restart(Action):
    name: ClassVar[str] = "restart"


REMOTE_ACTIONS = (Hold, Release, Abort, Status, HalfClose, Restart)


def fault_label(actions: Iterable[Action]) -> str | None:
    """The frames.fault value for a frame: action names joined by ",", None when none."""
    names = [action.name for action in actions]
    return ",".join(dict.fromkeys(names)) if names else None


# -- rules ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Rule:
    """One parsed rule. Immutable: the counters live in the plan."""

    text: str
    source: str
    action: str
    arg: str | None
    """The action's argument as given (unquoted); None when absent."""
    params: dict[str, Any] = field(hash=False, compare=False)
    """The argument, parsed: what the action needs to build its faults."""
    filter_text: str | None
    expr: filters.Expr | None = field(hash=False, compare=False)
    """The compiled filter, None for a rule without ``if``."""
    nth: int | None = None
    first: int | None = None
    every: int | None = None
    p: float | None = None
    times: int | None = None
    after_ns: int | None = None
    after_frames: int | None = None
    directions: frozenset[str] = frozenset(DIRECTIONS)
    """The directions this rule could ever match (fewer when the filter pins ``dir:``)."""

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"rule": self.text, "source": self.source, "action": self.action}
        if self.arg is not None:
            out["arg"] = self.arg
        if self.filter_text is not None:
            out["if"] = self.filter_text
        for name in ("nth", "first", "every", "p", "times", "after_ns", "after_frames"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        return out

    def _selects(self, match: int) -> bool:
        if self.nth is not None:
            return match == self.nth
        if self.first is not None:
            return match <= self.first
        if self.every is not None:
            return match % self.every == 0
        return True


@dataclass(frozen=True, slots=True)
class RuleSet:
    """Rules from one source, and the seed it names, if any."""

    rules: tuple[Rule, ...]
    seed: int | None = None
