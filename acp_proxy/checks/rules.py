"""Conformance checks: recorded frames in, findings out (Wireshark's "expert info" for ACP).

Owns: the public face of the checks — ``check`` (frames of one or more runs in, one
``lifecycle.Checker`` per run, findings out) — and the names the doors use, gathered here:
``RULES``, ``Rule``, ``Finding`` (``catalogue``), ``Checker`` (``lifecycle``), ``schemas``
(``schema``). The parts: ``catalogue`` says what the rules are, ``schema`` validates payloads
against the official JSON Schema of the negotiated version (``compiled`` makes that fast),
``lifecycle`` keeps the rules of order and pairing no schema can state.

Must not know: SQL, pipes, processes, click or rich.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from acp_proxy.checks.catalogue import RULES, Finding, Rule, Severity
from acp_proxy.checks.lifecycle import Checker, _field
from acp_proxy.checks.schema import SchemaSet, schemas

__all__ = ["RULES", "Checker", "Finding", "Rule", "SchemaSet", "Severity", "check", "schemas"]


def check(
    frames: Iterable[Any],
    *,
    versions: Mapping[int, int | None] | None = None,
    schema: bool = True,
    unstable: bool = True,
    ended: Mapping[int, bool] | None = None,
) -> Iterator[Finding]:
    """Findings for frames of one or more runs in (run, relay) order: one ``Checker`` per run.

    ``versions``: run id -> protocol version known from the run row; ``ended``: run id -> whether
    that run is over (default: yes), which decides whether pending requests count as unanswered.
    """
    checker: Checker | None = None
    current: Any = object()
    for rec in frames:
        run_id = _field(rec, "run_id")
        if run_id != current:
            if checker is not None:
                yield from checker.finish(ended=(ended or {}).get(current, True))
            current = run_id
            checker = Checker(version=(versions or {}).get(run_id), schema=schema, unstable=unstable)
        assert checker is not None
        yield from checker.feed(rec)
    if checker is not None:
        yield from checker.finish(ended=(ended or {}).get(current, True))
