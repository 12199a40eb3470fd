"""What ``acp-proxy run`` was asked to do, and how its agent ended: two plain value classes.

Owns: ``RunOptions`` (built by click's ``run`` and, for the usual command lines, by the
launcher before anything heavy is imported) and ``ExitStatus``.

Must not know: anything that moves bytes or starts processes. Import-cheap: the launcher
builds ``RunOptions`` while the agent's exec is under way, before the relay's modules load (no
``dataclasses``, no ``typing``, no ``pathlib`` at import).
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing before the agent starts
if TYPE_CHECKING:
    from typing import Any

    from acp_proxy.faults.plan import FaultPlan


class RunOptions:
    """What ``acp-proxy run`` was asked to do (a plain class: ``dataclasses`` costs start-up)."""

    def __init__(
        self,
        argv: list[str],
        db_path: str | os.PathLike[str] | None,  # None: --no-record
        grace: float = 2.0,
        max_record_bytes: int | None = 16 * 1024 * 1024,
        db_limit: int | None = None,
        strip_replayed_notices: bool = False,
        check: str | None = None,  # None | "full" | "lifecycle": live conformance checks (live_check.py)
        fault_plan: FaultPlan | None = None,
        options: dict[str, Any] | None = None,
        redact: list[str] | None = None,  # run --redact: store masked copies, by these rules and the built-in ones
        control: bool = False,  # run --control: a socket for acp-proxy ctl (relay/control.py)
        breakpoints: list[str] | None = None,  # run --break: filters holding frames from the start
    ) -> None:
        self.control = control
        self.breakpoints = breakpoints or []
        self.redact = redact
        self.argv = argv
        # Kept as text: the launcher builds this before the agent answers, without ``pathlib``.
        self.db_path = None if db_path is None else os.fspath(db_path)
        self.grace = grace
        self.max_record_bytes = max_record_bytes
        self.db_limit = db_limit
        self.strip_replayed_notices = strip_replayed_notices
        self.check = check
        self.fault_plan = fault_plan
        self.options = options if options is not None else {}

    def needs_gate(self) -> bool:
        """True when some frames need a verdict before they are forwarded."""
        return self.strip_replayed_notices or bool(self.fault_plan) or self.control

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RunOptions) and vars(self) == vars(other)

    def __repr__(self) -> str:
        return f"RunOptions({vars(self)!r})"


class ExitStatus:
    def __init__(self, code: int | None = None, signal: int | None = None) -> None:
        self.code = code
        self.signal = signal

    @classmethod
    def from_returncode(cls, returncode: int) -> ExitStatus:
        return cls(signal=-returncode) if returncode < 0 else cls(code=returncode)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ExitStatus) and (self.code, self.signal) == (other.code, other.signal)

    def __repr__(self) -> str:
        return f"ExitStatus(code={self.code}, signal={self.signal})"
