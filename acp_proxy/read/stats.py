"""A reference's statistics: latency per method, per-turn metrics, unanswered requests, errors.

Owns: the one report ``acp-proxy stats`` and the MCP ``stats`` tool show, for a run, a session
or every run, masked by the ``Redactor`` when masking is on (an error message can quote a
frame). The SQL is ``tables``'; a proxy chain's hops are rows of their own, with ``hop`` (0:
the recorded link's own; 1 and deeper: what its ``proxy/successor`` envelopes carry, from
``hops``).

Must not know: click, rich, HTTP, MCP. Never writes.
"""

from __future__ import annotations

from typing import Any

from acp_proxy.protocol.redact import Redactor
from acp_proxy.read import hops, latency, queries, tables
from acp_proxy.read.frames import prime


def stats(db: Any, text: str | None, redactor: Redactor | None = None) -> dict[str, Any]:
    """The report for what ``text`` names (a REF; ``all`` or None: every run)."""
    resolved, label, run_ids = queries.resolve_scope(db, text or "all")
    session_id = resolved.session_id if resolved is not None else None
    scope = None if resolved is None else run_ids
    report: dict[str, Any] = {
        "ref": label,
        "latency": latency.latency_table(db, scope),
        "turns": hops.every_turn(db, scope, session_id),
        "unanswered": tables.unanswered(db, scope),
        "errors": tables.errors(db, scope),
    }
    # The redactor reads the runs' frames first: an error message can repeat a secret that an
    # earlier frame named (a credential header, an env value), which it masks once it has learnt it.
    primed = prime(db, redactor, scope)
    return primed.value(report) if primed is not None else report
