"""``read.controls``: control rows placed on pages of frames (each once, wherever the pages are
cut) and masked by a door's redactor before a filter reads them."""

from __future__ import annotations

from typing import Any

import pytest

from acp_proxy.protocol import filters
from acp_proxy.protocol.redact import Redactor
from acp_proxy.read import controls

SECRET = "Bearer abcdef0123456789xyz"


def frame(run: int, seq: int, ts: int) -> dict[str, Any]:
    return {"run_id": run, "seq": seq, "ts_ns": ts, "kind": "request", "note": None}


def control(run: int, number: int, ts: int, action: str = "fault-add", argument: str | None = None) -> dict[str, Any]:
    return {"run_id": run, "number": number, "ts_ns": ts, "action": action, "argument": argument, "kind": "control"}


FRAMES = [frame(1, s, s * 10) for s in range(1, 8)] + [frame(2, s, 1000 + s * 10) for s in range(1, 5)]
CONTROLS = [
    control(1, 1, 0),  # before the run's first frame
    control(1, 2, 10),  # at a frame's time: before it
    control(1, 3, 35),
    control(1, 4, 500),  # after the run's last frame
    control(2, 1, 1025),
    control(2, 2, 9999),  # after the selection's last frame
]


@pytest.mark.parametrize("size", [1, 2, 3, 5, 11, 50])
def test_each_control_lands_on_exactly_one_page_in_time_order(size: int) -> None:
    shown: list[dict[str, Any]] = []
    for start in range(0, len(FRAMES), size):
        page = FRAMES[start : start + size]
        before = None if start == 0 else (FRAMES[start - 1]["run_id"], FRAMES[start - 1]["ts_ns"])
        shown += controls.page_controls(page, CONTROLS, None, before=before, last=start + size >= len(FRAMES))
    assert [r for r in shown if r["kind"] != "control"] == FRAMES
    assert [(r["run_id"], r["number"]) for r in shown if r["kind"] == "control"] == [
        (c["run_id"], c["number"]) for c in CONTROLS
    ]
    order = [(r["run_id"], r["ts_ns"]) for r in shown]
    assert order == sorted(order)


def test_an_empty_selection_shows_every_selected_control_once() -> None:
    assert len(controls.page_controls([], CONTROLS, None, before=None, last=True)) == len(CONTROLS)
    assert controls.page_controls([], CONTROLS, None, before=None, last=False) == []


def test_an_argument_is_masked_before_a_filter_reads_it() -> None:
    rows = [control(1, 1, 5, argument=f'#1 delay=1ms if text:"{SECRET}"')]
    hidden = controls.masked(rows, Redactor())
    assert SECRET not in str(hidden) and hidden[0]["text"].startswith("acp-proxy ctl fault-add: fault added #1")
    assert controls.masked(rows, Redactor(enabled=False)) is rows
    probe = filters.parse('note:"abcdef0123456789xyz"')
    assert controls.selected(rows, probe) != [] and controls.selected(hidden, probe) == []
