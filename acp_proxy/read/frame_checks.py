"""Schema and lifecycle marks for any recorded run, computed on demand, a budget at a time.

Owns: ``RunChecks``, one run's conformance check kept between requests: a ``checks.Checker``
fed the run's frames in relay order, from where it stopped, for at most a time budget per call
(a live page asks again with every poll, so a million-frame run is checked in steps and a live
run costs only its new frames), its findings kept by frame; once the run has ended and every
frame has been fed, the end-of-run findings (unanswered requests, unfinished turns) too. The
same checker ``acp-proxy check`` and ``run --check`` run, over the same rows, so the marks are
theirs — for runs recorded without ``--check`` as well.

Must not know: click, rich, HTTP, where the cache of ``RunChecks`` lives (a door keeps one per
run). Never writes: ``check --save`` stores findings.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from typing import Any

from acp_proxy.protocol.redact import Redactor
from acp_proxy.read import queries

BATCH = 2000
BUDGET_S = 0.4
"""The longest one request spends feeding frames to the checker."""


class RunChecks:
    """One run's findings so far (``checked``: the last seq fed; ``done``: ended and finished)."""

    def __init__(self, run_id: int) -> None:
        from acp_proxy.checks.rules import Checker

        self.run_id = run_id
        self._checker_type = Checker
        self.checker: Any = None
        self.checked = 0
        self.done = False
        self.by_seq: dict[int, list[dict[str, Any]]] = defaultdict(list)
        self.count = 0
        self._lock = threading.Lock()

    def advance(self, db: Any, upto: int | None = None, budget_s: float = BUDGET_S) -> None:
        """Feed the frames after ``checked`` (up to seq ``upto``, when given, or all) until the
        budget is spent; finish when the run has ended and nothing is left to feed."""
        from acp_proxy.checks.rules import FRAME_COLUMNS

        with self._lock:
            if self.done:
                return
            row = db.execute("select protocol_version, status from runs where id = ?", [self.run_id]).fetchone()
            if row is None:
                raise LookupError(f"no run {self.run_id}")
            version, status = row
            if self.checker is None:
                self.checker = self._checker_type(version=version)
            started = time.perf_counter()
            columns = ", ".join(FRAME_COLUMNS)
            while time.perf_counter() - started < budget_s:
                rows = queries.rows(
                    db,
                    f"""select {columns} from frames where run_id = ? and dir != 'stderr' and seq > ?
                        order by seq limit ?""",
                    [self.run_id, self.checked, BATCH],
                )
                for rec in rows:
                    self._keep(self.checker.feed(rec))
                    self.checked = rec["seq"]
                if len(rows) < BATCH:
                    if status != "running":
                        self._keep(self.checker.finish(ended=True))
                        self.done = True
                    return
                if upto is not None and self.checked >= upto:
                    return

    def _keep(self, findings: list[Any]) -> None:
        for finding in findings:
            item = finding.as_dict()
            item["rule"] = item.pop("rule_id", None)  # as the timeline names a stored finding's rule
            seq = item.get("seq")
            if seq is not None:
                self.by_seq[int(seq)].append(item)
                self.count += 1

    def window(self, first: int, last: int, redactor: Redactor | None = None) -> list[dict[str, Any]]:
        """The findings on frames ``first``..``last`` (inclusive), masked."""
        with self._lock:
            if last - first <= 10 * BATCH:
                seqs = [seq for seq in range(first, last + 1) if seq in self.by_seq]
            else:
                seqs = sorted(seq for seq in self.by_seq if first <= seq <= last)
            found = [f for seq in seqs for f in self.by_seq[seq]]
        if redactor is not None and redactor.enabled:
            found = [redactor.value(f) for f in found]
        return found
