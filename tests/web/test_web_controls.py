"""``/runs/ID/controls.json``: a run's recorded ctl actions for the inspector's page, masked."""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest

pytest.importorskip("datasette", reason="the [ui] extra (Datasette) is not installed")

from tests.web_support import SECRETS, app, get, get_json, synthetic_db


@pytest.fixture(scope="module")
def ds(tmp_path_factory: pytest.TempPathFactory) -> Any:
    db = synthetic_db(tmp_path_factory.mktemp("controls") / "synthetic.db")
    with sqlite3.connect(db) as conn:
        ts = conn.execute("select min(ts_ns) from frames").fetchone()[0]
        rule = f'delay=1ms if text:"{SECRETS["key"]}"'
        conn.executemany(
            "insert into controls (run_id, number, ts_ns, action, argument, hold, seq, result_seq, held_ns)"
            " values (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (1, 1, ts + 1, "fault-add", f"#1 {rule}", None, None, None, None),
                (1, 2, ts + 2, "fault-clear", None, None, None, None, None),
            ],
        )
    return app(db)


def test_a_runs_actions_come_masked_in_time_order(ds: Any) -> None:
    data = get_json(ds, "/runs/1/controls.json")
    assert [c["action"] for c in data["controls"]] == ["fault-add", "fault-clear"]
    assert data["controls"][0]["text"].startswith("acp-proxy ctl fault-add: fault added #1 delay=1ms")
    assert SECRETS["key"] not in str(data) and data["held"] == {}
    assert get(ds, "/runs/99/controls.json").status_code == 404
