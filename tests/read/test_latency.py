"""The per-method latency table by SQL (what `stats`, MCP and the inspector show) agrees with
nearest-rank percentiles computed here in Python from the recorded rows, on recordings made by
the recorder with latencies of every shape."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from acp_proxy.read import latency, queries
from acp_proxy.record.importers import Record, write_run
from acp_proxy.store import database as store

METHODS = {"c2a": ["session/prompt", "session/new", "_vendor/ping"], "a2c": ["fs/read_text_file", "terminal/create"]}


def _f(obj: dict[str, object]) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def python_percentiles(db: Any, run_ids: list[int] | None) -> list[dict[str, Any]]:
    """The oracle: per method and request direction, from every answered request's row."""
    by_method: dict[tuple[str, str], list[float]] = {}
    errors: dict[tuple[str, str], int] = {}
    for row in queries.rows(db, "select * from frames where latency_ns is not null"):
        if row["kind"] not in ("response", "error") or (run_ids is not None and row["run_id"] not in run_ids):
            continue
        key = (row["method"] or "?", {"a2c": "c2a", "c2a": "a2c"}[row["dir"]])
        by_method.setdefault(key, []).append(row["latency_ns"] / 1e6)
        errors[key] = errors.get(key, 0) + (row["kind"] == "error")
    out = []
    for (method, direction), values in sorted(by_method.items()):
        values.sort()
        out.append(
            {
                "method": method,
                "dir": direction,
                "hop": 0,  # no proxy/successor envelopes here: tests/read/test_hops.py has them
                "count": len(values),
                "errors": errors[(method, direction)],
                "p50_ms": queries.percentile(values, 0.50),
                "p95_ms": queries.percentile(values, 0.95),
                "p99_ms": queries.percentile(values, 0.99),
                "max_ms": values[-1],
            }
        )
    return out


def recording(db: Path, seed: int, answered: int) -> None:
    rng = random.Random(seed)
    records = [Record("c2a", 0, _f({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}}))]
    records.append(Record("a2c", 5, _f({"jsonrpc": "2.0", "id": 0, "result": {"protocolVersion": 1}})))
    ts = 10
    for n in range(1, answered + 1):
        way = rng.choice(["c2a", "a2c"])
        back = "a2c" if way == "c2a" else "c2a"
        ts += 10
        records.append(Record(way, ts, _f({"jsonrpc": "2.0", "id": n, "method": rng.choice(METHODS[way])})))
        ts += rng.choice([1, 7, 1000, rng.randrange(1, 10**9)])  # ties, spread and outliers
        if rng.random() < 0.2:
            answer = {"jsonrpc": "2.0", "id": n, "error": {"code": -32000, "message": "no"}}
        else:
            answer = {"jsonrpc": "2.0", "id": n, "result": {}}
        records.append(Record(back, ts, _f(answer)))
    write_run(db, records, {"argv": ["latency"]})


@pytest.mark.parametrize(("seed", "answered"), [(1, 1), (2, 37), (3, 400)])
def test_the_sql_table_is_the_python_percentiles(tmp_path: Path, seed: int, answered: int) -> None:
    db_path = tmp_path / "rec.db"
    recording(db_path, seed, answered)
    recording(db_path, seed + 100, answered)  # a second run: the scope matters
    db = store.open_for_reading(db_path)
    for scope in ([1], [2], [1, 2], None):
        assert latency.latency_table(db, scope) == python_percentiles(db, scope), scope
    assert latency.latency_table(db, []) == []


def test_samples_are_the_answered_requests_named_by_the_request_direction(tmp_path: Path) -> None:
    db_path = tmp_path / "rec.db"
    recording(db_path, 7, 60)
    db = store.open_for_reading(db_path)
    expected = [
        {
            "method": row["method"] or "?",
            "dir": {"a2c": "c2a", "c2a": "a2c"}[row["dir"]],
            "latency_ms": round(row["latency_ns"] / 1e6, 3),
            "error": row["kind"] == "error",
            "hop": 0,
        }
        for row in queries.rows(db, "select * from frames order by run_id, seq")
        if row["kind"] in ("response", "error") and row["latency_ns"] is not None
    ]
    assert len(expected) == 61 and any(s["error"] for s in expected) and {s["dir"] for s in expected} == {"c2a", "a2c"}
    assert latency.samples(db, [1]) == expected
    assert latency.samples(db, [1], limit=10) == expected[-10:], "the latest, in relay order"
