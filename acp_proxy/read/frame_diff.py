"""Two runs compared frame by frame: which frames line up, which one side has and the other
lacks, and, for frames that line up, which fields changed.

Owns: aligning two runs' relayed frames (stderr lines are not frames) by what each frame is —
direction, kind, method, update variant — with ``difflib``'s longest matching blocks, then, for
each aligned pair, the JSON paths whose values differ. Volatile fields are left out as
``read.diff`` leaves them out of a turn's comparison: JSON-RPC ids, session ids, ``_meta``.
Both sides are masked before they are compared (a change inside a secret is not shown, and
cannot be inferred). At most ``LIMIT`` frames a side: the page says when it stopped.

Must not know: click, rich, HTTP, MCP; how a diff is rendered. Never writes.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterator
from typing import Any

from acp_proxy.protocol import wire
from acp_proxy.protocol.redact import Redactor
from acp_proxy.read import queries

LIMIT = 5000
VOLATILE = frozenset(("id", "sessionId", "_meta"))
SHOWN_CHARS = 300
MAX_CHANGES = 50  # per frame pair


def _frames(db: Any, run_id: int, redactor: Redactor | None) -> tuple[list[dict[str, Any]], bool]:
    rows = queries.rows(
        db,
        "select * from frames where run_id = ? and dir != 'stderr' order by seq limit ?",
        [run_id, LIMIT + 1],
    )
    cut = len(rows) > LIMIT
    rows = rows[:LIMIT]
    if redactor is not None and redactor.enabled:
        rows = [redactor.frame_row(r) for r in rows]
    return rows, cut


def _what(row: dict[str, Any]) -> tuple[Any, ...]:
    return (row["dir"], row.get("kind"), row.get("method"), row.get("update_kind"))


def _decoded(row: dict[str, Any]) -> Any:
    raw = row.get("raw")
    if raw is None:
        return None
    try:
        return wire.loads(raw)
    except ValueError:
        return raw


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 1] + "…"


def changes(left: Any, right: Any, path: tuple[Any, ...] = ()) -> Iterator[dict[str, Any]]:
    """The paths where ``left`` and ``right`` differ (``"-"``: absent on that side)."""
    if isinstance(left, dict) and isinstance(right, dict):
        for key in sorted(set(left) | set(right), key=str):
            if key in VOLATILE:
                continue
            if key not in left or key not in right:
                yield {
                    "path": [*path, key],
                    "left": _shown(left[key]) if key in left else "-",
                    "right": _shown(right[key]) if key in right else "-",
                }
            else:
                yield from changes(left[key], right[key], (*path, key))
        return
    if isinstance(left, list) and isinstance(right, list) and len(left) == len(right):
        for i, (a, b) in enumerate(zip(left, right, strict=True)):
            yield from changes(a, b, (*path, i))
        return
    if left != right:
        yield {"path": list(path), "left": _shown(left), "right": _shown(right)}


def _side(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "seq": row["seq"],
        "dir": row["dir"],
        "kind": row.get("kind"),
        "method": row.get("method"),
        "update_kind": row.get("update_kind"),
    }


def frame_diff(db: Any, left_run: int, right_run: int, redactor: Redactor | None = None) -> dict[str, Any]:
    """Run ``left_run`` against ``right_run`` frame by frame; ``LookupError`` for a missing run."""
    for run_id in (left_run, right_run):
        if not db.execute("select 1 from runs where id = ?", [run_id]).fetchone():
            raise LookupError(f"no run {run_id}")
    left, left_cut = _frames(db, left_run, redactor)
    right, right_cut = _frames(db, right_run, redactor)
    matcher = difflib.SequenceMatcher(None, [_what(r) for r in left], [_what(r) for r in right], autojunk=False)
    rows: list[dict[str, Any]] = []
    counts = {"same": 0, "changed": 0, "only_left": 0, "only_right": 0}
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            for a, b in zip(left[i1:i2], right[j1:j2], strict=True):
                found = list(changes(_decoded(a), _decoded(b)))
                kind = "changed" if found else "same"
                counts[kind] += 1
                rows.append({"op": kind, "left": _side(a), "right": _side(b), "changes": found[:MAX_CHANGES]})
            continue
        for a in left[i1:i2]:
            counts["only_left"] += 1
            rows.append({"op": "only_left", "left": _side(a), "right": None, "changes": []})
        for b in right[j1:j2]:
            counts["only_right"] += 1
            rows.append({"op": "only_right", "left": None, "right": _side(b), "changes": []})
    return {
        "left": left_run,
        "right": right_run,
        "rows": rows,
        "counts": counts,
        "cut": left_cut or right_cut,
        "limit": LIMIT,
    }
