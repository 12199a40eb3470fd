"""The turn waterfall of a run too long to fold on each view, from the tables the recorder keeps.

Owns: the bars and marks of the inspector's waterfall for runs past the page's fold limit,
computed by SQL: each prompt turn from the ``turns`` table (its span, acceptance, first output
and end, as the recorder's tracker found them with the same state machine the fold runs), and
each permission wait from the ``session/request_permission`` requests (the ``method`` index)
and their answers (``idx_frames_request``). So a page of a million-frame run costs its turns and
permission requests, not its frames. Tool-call lanes need every tool-call update of the run
(no index leads to them), so they are drawn only where the run is folded
(``web.timeline.waterfall``); ``LANES_LEFT_OUT`` says so to the page.

It also owns the shape both waterfalls draw, so they cannot drift: one dict per bar or mark,
``turn`` (``turn_label``: the session by its id and the turn's number), ``lane``, ``kind``,
``start_ms`` and ``end_ms`` from the turn's prompt, ``detail``, made only by ``bar``,
``turn_bar`` and ``mark``, which ``web.timeline.waterfall`` uses too.

Must not know: click, rich, HTTP, how the chart is drawn. Never writes. Nothing it returns is a
frame's text: stop reasons and statuses are the protocol's words.
"""

from __future__ import annotations

from typing import Any

from acp_proxy.read import queries

LANES_LEFT_OUT = "tool calls and a proxy chain's inner turns"
"""What this waterfall does not draw (the folded one does)."""


def turn_label(session_id: str | None, turn_index: int, hop: int = 0) -> str:
    """A waterfall row's name, the same in both waterfalls: the session by its id (ids repeat
    across runs, not within one run's or one session's page), a proxy chain's hop when there is one."""
    where = f"session {session_id}" if session_id else "no session"
    return f"{where}{f' (hop {hop})' if hop else ''} · turn {turn_index}"


def bar(turn: str, lane: str, kind: str, start_ms: float | None, end_ms: float | None, detail: str) -> dict[str, Any]:
    """One bar of the waterfall (a tool call, a permission wait), in ms from the turn's prompt."""
    return {"turn": turn, "lane": lane, "kind": kind, "start_ms": start_ms, "end_ms": end_ms, "detail": detail}


def turn_bar(
    turn: str, end_ms: float | None, *, stop_reason: str | None, status: str | None, ended: bool
) -> dict[str, Any]:
    """A prompt turn's own bar, from its prompt (0) to its end; its detail is the stop reason, or
    while it is still open the turn's status."""
    return bar(turn, "turn", "turn", 0.0, end_ms, stop_reason or (status if not ended else "") or "")


def mark(turn: str, what: str, at: float | None) -> dict[str, Any]:
    """A moment in a turn (its acceptance, first output, end): a bar that starts where it ends."""
    return bar(turn, what, what, at, at, "")


def from_tables(db: Any, run_ids: list[int]) -> list[dict[str, Any]]:
    """The waterfall of ``run_ids``' prompt turns, from ``turns`` and the permission requests."""
    if not run_ids:
        return []
    marks = ",".join("?" * len(run_ids))
    turns = queries.rows(
        db,
        "select run_id, session_row, session_id, turn_index, start_ns, accepted_ns, first_output_ns,"
        f" end_ns, stop_reason, status from turns where run_id in ({marks})"
        " order by run_id, session_row, turn_index",
        run_ids,
    )
    permissions = queries.rows(
        db,
        "select q.run_id, q.session_id, q.ts_ns as start_ns, a.ts_ns as end_ns, a.kind as answer"
        " from frames q left join frames a on a.run_id = q.run_id and a.request_seq = q.seq"
        f" where q.method = 'session/request_permission' and q.kind = 'request' and q.run_id in ({marks})"
        " order by q.run_id, q.seq",
        run_ids,
    )
    out: list[dict[str, Any]] = []
    for turn in turns:
        label = turn_label(turn["session_id"], turn["turn_index"])
        t0, end = turn["start_ns"], turn["end_ns"]

        def ms(ns: int | None, t0: int = t0) -> float | None:
            return None if ns is None or t0 is None else round((ns - t0) / 1e6, 3)

        out.append(
            turn_bar(label, ms(end), stop_reason=turn["stop_reason"], status=turn["status"], ended=end is not None)
        )
        if turn["accepted_ns"] is not None:
            out.append(mark(label, "acceptance", ms(turn["accepted_ns"])))
        for wait in permissions:
            inside = (
                wait["run_id"] == turn["run_id"]
                and wait["session_id"] == turn["session_id"]
                and t0 is not None
                and wait["start_ns"] >= t0
                and (end is None or wait["start_ns"] <= end)
            )
            if inside:
                out.append(
                    bar(
                        label,
                        "permission",
                        "permission wait",
                        ms(wait["start_ns"]),
                        ms(wait["end_ns"] if wait["end_ns"] is not None else end),
                        "answered" if wait["answer"] == "response" else (wait["answer"] or ""),
                    )
                )
        if turn["first_output_ns"] is not None:
            out.append(mark(label, "first output", ms(turn["first_output_ns"])))
        if end is not None:
            out.append(mark(label, "end", ms(end)))
    return out
