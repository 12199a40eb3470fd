"""The inspector on a million frames, in a real browser, beside the same page on a short run.

    python benchmarks/inspector_bench.py                  # 1,000,000 frames, 3 rounds
    python benchmarks/inspector_bench.py --frames 200000 --rounds 1 --hold 5

A recording of ``--frames`` frames (a prompt answered by chunks, written by the recorder's own
path, ``write_run``) and one of 10 frames (the floor: what any page costs) are served by two
``acp-proxy ui`` processes; headless Chromium (Playwright, the system's ``/usr/bin/chromium``)
opens each run's page in turn, interleaved by round so that the machine's load hits both alike:

- ``first frames ms``: from navigation start to the first timeline row in the page (the target:
  <= 1,000 ms on the long run);
- ``end ms``: from scrolling the list to its bottom to the run's last frame showing there;
- after ``--hold`` seconds open and following live (the default 10): ``DOM nodes`` (<= 20,000),
  ``JS heap MB`` (<= 150, after a forced garbage collection) and ``server RSS MB`` (<= 300).

Medians over rounds; ``x floor`` is the long run's first-frames time over the short run's. The
tests assert what the page holds (rows in view, bounded DOM); the times are judged here, not in
timed tests. Every process has a deadline.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

from acp_proxy.record.importers import Record, write_run  # noqa: E402

CHROMIUM = Path("/usr/bin/chromium")
DEADLINE = 900
FIRST_ROW = """
    new MutationObserver((_, observer) => {
        if (document.querySelector('#timeline tbody tr[data-frame]')) {
            window.__first_row_ms = performance.now();
            observer.disconnect();
        }
    }).observe(document, { childList: true, subtree: true });
"""


def _line(message: dict[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode() + b"\n"


def build(db: Path, frames: int) -> None:
    """A run of ``frames`` frames: initialize, a session, a prompt answered by chunks, its end."""
    v1, sid = {"protocolVersion": 1}, {"sessionId": "s1"}
    head = [
        Record("c2a", 1_000, _line({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": v1})),
        Record("a2c", 2_000, _line({"jsonrpc": "2.0", "id": 0, "result": {"protocolVersion": 1}})),
        Record("c2a", 3_000, _line({"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": "/"}})),
        Record("a2c", 4_000, _line({"jsonrpc": "2.0", "id": 1, "result": {"sessionId": "s1"}})),
        Record("c2a", 5_000, _line({"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": sid})),
    ]

    def chunk(i: int) -> bytes:
        update = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": f"w{i} "}}
        return _line({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s1", "update": update}})

    chunks = [Record("a2c", 6_000 + i, chunk(i)) for i in range(max(frames - 6, 0))]
    end = Record("a2c", 10**7 + frames, _line({"jsonrpc": "2.0", "id": 2, "result": {"stopReason": "end_turn"}}))
    write_run(db, [*head, *chunks, end], {"argv": ["bench-agent"]})


class Ui:
    """``acp-proxy ui`` on ``db``, killed at the deadline."""

    def __init__(self, db: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "acp_proxy", "ui", "--no-open", "--port", "0", "--db", str(db)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self.timer = threading.Timer(DEADLINE, self.proc.kill)
        self.timer.start()
        assert self.proc.stdout is not None
        self.login = self.proc.stdout.readline().decode().strip()
        if not self.login.startswith("http://"):
            raise SystemExit(f"acp-proxy ui did not start: {self.login!r}")
        self.base = self.login.partition("/?token=")[0]

    def rss_mb(self) -> float:
        status = Path(f"/proc/{self.proc.pid}/status").read_text()
        return int(status.split("VmRSS:")[1].split()[0]) / 1024

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.timer.cancel()


def measure_page(context: Any, ui: Ui, frames: int, hold: float) -> dict[str, float]:
    page = context.new_page()
    page.goto(ui.login)
    page.add_init_script(FIRST_ROW)
    page.goto(ui.base + "/runs/1")
    page.locator('#timeline tbody tr[data-frame="1:1"]').wait_for()
    first_ms = float(page.evaluate("window.__first_row_ms"))
    started = time.monotonic()
    page.locator("#timeline-scroll").evaluate("s => s.scrollTop = s.scrollHeight")
    page.locator(f'#timeline tbody tr[data-frame="1:{frames}"]').wait_for()
    end_ms = (time.monotonic() - started) * 1000
    page.wait_for_timeout(hold * 1000)  # open and following live: what the page then holds
    nodes = float(page.evaluate("document.getElementsByTagName('*').length"))
    cdp = context.new_cdp_session(page)
    cdp.send("HeapProfiler.collectGarbage")
    heap_mb = cdp.send("Runtime.getHeapUsage")["usedSize"] / 1e6
    page.close()
    return {"first": first_ms, "end": end_ms, "nodes": nodes, "heap": heap_mb, "rss": ui.rss_mb()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=1_000_000, help="frames in the long run (default 1,000,000)")
    parser.add_argument("--rounds", type=int, default=3, help="pages opened per run (default 3)")
    parser.add_argument("--hold", type=float, default=10.0, help="seconds a page stays open (default 10)")
    parser.add_argument("--json", action="store_true", help="the figures as JSON")
    options = parser.parse_args()
    if not CHROMIUM.exists():
        raise SystemExit(f"Chromium is not installed at {CHROMIUM} (apt-get install chromium)")
    from playwright import sync_api

    with tempfile.TemporaryDirectory() as tmp:
        long_db, short_db = Path(tmp) / "long.db", Path(tmp) / "short.db"
        started = time.monotonic()
        build(long_db, options.frames)
        build(short_db, 10)
        print(f"recorded {options.frames:,} frames in {time.monotonic() - started:.0f} s", file=sys.stderr)
        runs = {"floor (10 frames)": (Ui(short_db), 10), f"{options.frames:,} frames": (Ui(long_db), options.frames)}
        results: dict[str, list[dict[str, float]]] = {name: [] for name in runs}
        try:
            with sync_api.sync_playwright() as p:
                browser = p.chromium.launch(
                    executable_path=str(CHROMIUM), headless=True, args=["--no-sandbox", "--disable-gpu"]
                )
                context = browser.new_context(viewport={"width": 1500, "height": 1000})
                context.set_default_timeout(DEADLINE * 1000 // 3)
                measure_page(context, next(iter(runs.values()))[0], 10, 0)  # warm-up: caches, the JIT
                for _ in range(options.rounds):
                    for name, (ui, frames) in runs.items():
                        results[name].append(measure_page(context, ui, frames, options.hold))
                browser.close()
        finally:
            for ui, _ in runs.values():
                ui.stop()
    table = {
        name: {key: statistics.median(r[key]) for key in ("first", "end", "nodes", "heap", "rss")}
        for name, rounds in results.items()
        for r in [{key: [one[key] for one in rounds] for key in rounds[0]}]
    }
    floor = table["floor (10 frames)"]["first"]
    if options.json:
        print(json.dumps(table, indent=2))
        return
    print(
        f"{'run':<20} {'first frames ms':>15} {'x floor':>8} {'end ms':>8} {'DOM nodes':>10} "
        f"{'JS heap MB':>10} {'server RSS MB':>13}"
    )
    for name, row in table.items():
        print(
            f"{name:<20} {row['first']:>15.0f} {row['first'] / floor:>8.2f} {row['end']:>8.0f} "
            f"{row['nodes']:>10,.0f} {row['heap']:>10.1f} {row['rss']:>13.0f}"
        )
    long_row = table[f"{options.frames:,} frames"]
    verdicts = [
        ("first frames <= 1,000 ms", long_row["first"] <= 1000),
        ("DOM nodes <= 20,000", long_row["nodes"] <= 20_000),
        ("JS heap <= 150 MB", long_row["heap"] <= 150),
        ("server RSS <= 300 MB", long_row["rss"] <= 300),
    ]
    print("targets: " + "; ".join(f"{what}: {'ok' if ok else 'MISS'}" for what, ok in verdicts))


if __name__ == "__main__":
    main()
