"""The turn waterfall of a run past the page's fold limit: drawn from the recorder's tables
(``read.waterfall``), it agrees with the folded one on every turn, mark and permission wait, on
recordings made by the real recorder (a synthetic conversation, a v2 turn with its acceptance)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("datasette", reason="the [ui] extra (Datasette) is not installed")

from acp_proxy.read import waterfall
from acp_proxy.web import model
from tests.web.test_web_routes import v2_traffic
from tests.web_support import app, get_json, record, synthetic_db


def _both(db: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, Any], dict[str, Any]]:
    ds = app(db)
    folded = get_json(ds, "/runs/1.json?parts=summary,charts")
    monkeypatch.setattr(model, "FOLD_LIMIT", 0)
    tables = get_json(ds, "/runs/1.json?parts=summary,charts")
    assert folded["folded"] is True and tables["folded"] is False
    return folded, tables


def _shape(waterfall: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """What both waterfalls draw: every bar and mark but the tool-call lanes, permission waits by
    their times (the folded one names their lane and detail by the tool call, which needs the
    fold), each with the same keys."""
    waits = "permission wait"
    return sorted(
        (
            tuple(sorted(w)),
            w["turn"],
            w["kind"],
            w["lane"] if w["kind"] != waits else "",
            w["start_ms"],
            w["end_ms"],
            w["detail"] if w["kind"] != waits else "",
        )
        for w in waterfall
        if w["kind"] != "tool call"
    )


def test_past_the_fold_limit_the_waterfall_comes_from_the_tables_and_agrees(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = synthetic_db(tmp_path / "synthetic.db")
    folded, tables = _both(db, monkeypatch)
    assert "waterfall_left_out" not in folded and tables["waterfall_left_out"] == waterfall.LANES_LEFT_OUT
    kinds = {w["kind"] for w in tables["waterfall"]}
    assert {"turn", "first output", "end", "permission wait"} <= kinds and "tool call" not in kinds
    assert _shape(tables["waterfall"]) == _shape(folded["waterfall"])
    assert tables["latency"] == folded["latency"]  # the latency samples are SQL either way


def test_a_v2_turns_acceptance_is_drawn_from_the_tables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "v2.db"
    record(db, v2_traffic())
    folded, tables = _both(db, monkeypatch)
    marks = {w["kind"]: w for w in tables["waterfall"]}
    assert marks["acceptance"]["start_ms"] == 2.0 and marks["first output"]["start_ms"] == 6.0
    assert marks["turn"]["detail"] == "end_turn" and marks["turn"]["end_ms"] == 16.0
    assert _shape(tables["waterfall"]) == _shape(folded["waterfall"])


def test_no_turn_no_bars(tmp_path: Path) -> None:
    from acp_proxy.store import database as store

    db = tmp_path / "empty.db"
    record(db, [])
    reader = store.open_for_reading(db)
    try:
        assert waterfall.from_tables(reader, [1]) == [] and waterfall.from_tables(reader, []) == []
    finally:
        reader.conn.close()
