"""What was said about frames: the faults applied to them and the conformance findings stored
for them (``check --save``, ``run --check``).

Owns: reading them for a set of runs, kept to a session's frames when asked, masked by the
``Redactor`` (a fault's rule and detail, a finding's message can quote a frame), as plain dicts
that point at their frame by (run_id, seq).

Must not know: click, rich, HTTP, MCP; how they are rendered; how a finding is computed (that
is ``checks/``). Never writes.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from acp_proxy.protocol.redact import Redactor
from acp_proxy.read import queries

FrameKey = tuple[int, int]


def faults(
    db: Any, run_ids: list[int], keys: set[FrameKey] | None = None, redactor: Redactor | None = None
) -> list[dict[str, Any]]:
    """The faults applied in these runs (only on the frames ``keys`` names, when given), with the
    direction, kind and method of their frame, in relay order."""
    marks = ",".join("?" * len(run_ids)) or "null"
    found = queries.rows(
        db,
        f"""select f.*, x.dir, x.kind, x.method from faults f
            left join frames x on x.run_id = f.run_id and x.seq = f.seq
            where f.run_id in ({marks}) order by f.run_id, f.seq, f.id""",
        run_ids,
    )
    return _masked(_kept(found, keys), ("rule", "detail"), redactor)


def findings(
    db: Any, run_ids: list[int], keys: set[FrameKey] | None = None, redactor: Redactor | None = None
) -> list[dict[str, Any]]:
    """The findings stored for these runs (only on the frames ``keys`` names, when given)."""
    marks = ",".join("?" * len(run_ids)) or "null"
    found = queries.rows(db, f"select * from findings where run_id in ({marks}) order by run_id, seq, id", run_ids)
    return _masked(_kept(found, keys), ("message",), redactor)


def by_frame(items: Iterable[dict[str, Any]]) -> dict[FrameKey, list[dict[str, Any]]]:
    out: dict[FrameKey, list[dict[str, Any]]] = {}
    for item in items:
        out.setdefault((item["run_id"], item["seq"]), []).append(item)
    return out


def _kept(found: list[dict[str, Any]], keys: set[FrameKey] | None) -> list[dict[str, Any]]:
    return found if keys is None else [f for f in found if (f["run_id"], f["seq"]) in keys]


def _masked(found: list[dict[str, Any]], names: tuple[str, ...], redactor: Redactor | None) -> list[dict[str, Any]]:
    if redactor is None or not redactor.enabled:
        return found
    for item in found:
        for name in names:
            if item.get(name):
                item[name] = redactor.text(item[name])
    return found


def faults_after(db: Any, run_id: int, after_seq: int = 0) -> list[dict[str, Any]]:
    """One run's applied faults on frames after ``after_seq``, in relay order (a live follower
    reads them as they are committed; an export reads them all)."""
    return queries.rows(
        db,
        "select seq, ts_ns, rule, action, detail from faults where run_id = ? and seq > ? order by seq, id",
        [run_id, after_seq],
    )


def findings_after(db: Any, run_id: int, after_id: int = 0) -> list[dict[str, Any]]:
    """One run's stored findings after the findings id ``after_id``, each with its frame's time
    (the live checker may store them long after their frames)."""
    return queries.rows(
        db,
        "select x.id, x.seq, f.ts_ns, x.rule, x.severity, x.message from findings x "
        "left join frames f on f.run_id = x.run_id and f.seq = x.seq where x.run_id = ? and x.id > ? order by x.id",
        [run_id, after_id],
    )
