"""How fast recordings leave and enter: the span builder, and the importers.

    python benchmarks/export_bench.py              # 200,000-frame run (about a minute on 2 cores)
    python benchmarks/export_bench.py --frames 20000

Builds one synthetic run — initialize, a session, prompt turns each with a tool call and a
permission request, and a storm of ~300-byte agent message chunks — records it through the
recorder (``importers.write_run``), then times:

- the span builder (``otel.spans.build``) over the run's rows: frames/s, spans made;
- ``acp-proxy import`` of the run exported as jsonl and as inspector JSONL: frames/s (parsing
  twice, once to check and once to record, and recording through the recorder).

Nothing is sent anywhere: the OpenTelemetry SDK's cost is not in these figures.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from acp_proxy.otel.spans import build  # noqa: E402
from acp_proxy.read import exports  # noqa: E402
from acp_proxy.record import importers  # noqa: E402

SID = "sess_bench"


def traffic(frames: int) -> list[importers.Record]:
    out: list[importers.Record] = []
    ts = 1_700_000_000_000_000_000

    def add(direction: str, message: dict[str, Any]) -> None:
        nonlocal ts
        ts += 20_000
        out.append(importers.Record(direction, ts, json.dumps(message, separators=(",", ":")).encode()))

    def update(body: dict[str, Any]) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": SID, "update": body}}

    add("c2a", {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}})
    add("a2c", {"jsonrpc": "2.0", "id": 0, "result": {"protocolVersion": 1, "agentInfo": {"name": "bench"}}})
    add("c2a", {"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": "/w", "mcpServers": []}})
    add("a2c", {"jsonrpc": "2.0", "id": 1, "result": {"sessionId": SID}})
    turn = 0
    text = "x" * 200
    while len(out) < frames:
        turn += 1
        rid = 10 + turn
        prompt = {"sessionId": SID, "prompt": []}
        add("c2a", {"jsonrpc": "2.0", "id": rid, "method": "session/prompt", "params": prompt})
        add("a2c", update({"sessionUpdate": "tool_call", "toolCallId": f"c{turn}", "title": "Edit", "kind": "edit"}))
        ask = {"sessionId": SID, "toolCall": {"toolCallId": f"c{turn}"}, "options": []}
        add("a2c", {"jsonrpc": "2.0", "id": turn, "method": "session/request_permission", "params": ask})
        add("c2a", {"jsonrpc": "2.0", "id": turn, "result": {"outcome": {"outcome": "selected", "optionId": "a"}}})
        add("a2c", update({"sessionUpdate": "tool_call_update", "toolCallId": f"c{turn}", "status": "completed"}))
        for _ in range(1000):
            add("a2c", update({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}))
        add("a2c", {"jsonrpc": "2.0", "id": rid, "result": {"stopReason": "end_turn"}})
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=200_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "bench.db"
        records = traffic(args.frames)
        started = time.perf_counter()
        run_id = importers.write_run(db, records, {"source": "bench", "source_format": "jsonl"})
        print(f"recorded {len(records):,} frames through the recorder in {time.perf_counter() - started:.2f} s")
        conn = sqlite3.connect(db)
        conn.row_factory = sqlite3.Row
        rows = [dict(r) for r in conn.execute("select * from frames where run_id = ? order by seq", [run_id])]
        header = {"runs": [dict(r) for r in conn.execute("select * from runs where id = ?", [run_id])]}
        conn.close()
        started = time.perf_counter()
        spans, points = build(rows, run_id=run_id)
        took = time.perf_counter() - started
        print(f"span builder: {len(rows) / took:,.0f} frames/s ({len(spans):,} spans, {len(points):,} measurements)")
        for fmt in ("jsonl", "inspector"):
            path = Path(tmp) / f"run.{fmt}"
            path.write_bytes(b"".join(line + b"\n" for line in exports.export_lines(fmt, rows, header)))
            started = time.perf_counter()
            _, runs, _ = importers.import_file(db, path, fmt)
            took = time.perf_counter() - started
            print(f"import {fmt}: {runs[0].frames / took:,.0f} frames/s ({runs[0].frames:,} lines in {took:.2f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
