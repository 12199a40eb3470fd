"""Live lag: how long after the agent wrote a frame an open inspector page shows it.

    python benchmarks/live_bench.py                 # 2,000 and 10,000 frames/s, 30 s each
    python benchmarks/live_bench.py --rate 2000 --seconds 5

``relay_bench.py --only live`` runs the same workload as a row of its table.

The agent (``bench_agent.py paced RATE SECONDS``) writes ``agent_message_chunk`` lines on a
clock, each stamped with the wall-clock time it was written; the proxy records them
(``acp-proxy run --db``). Two readers poll the run as an open page's virtual list does
(``web.model.frames_page``, every ``POLL_S`` = the page's 400 ms: the frames after its cursor, a
page of them, then the newest by its offset), interleaved in one thread so that the machine's
load hits both alike:

- **journal**: the inspector as it is (``read.live``: committed rows, then the journal's tail);
- **database**: the same reader without the journal (what a page saw before: committed rows only).

A frame's lag is the time a reader got it minus the time the agent wrote it; reported as p50 and
max over the frames a page was sent, and for the run's last frame (the target: <= 1 s).
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

from acp_proxy.protocol.redact import Redactor  # noqa: E402
from acp_proxy.read import frames as selections  # noqa: E402
from acp_proxy.read import live  # noqa: E402
from acp_proxy.web import model  # noqa: E402

AGENT = str(HERE / "bench_agent.py")
POLL_S = 0.4  # app.js's POLL_MS
PAGE = 200  # app.js's PAGE
HELLO = b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}}\n'
GO = (
    b'{"jsonrpc":"2.0","id":1,"method":"session/prompt","params":{"sessionId":"sess_7f3a9c2e5b8d4a1f",'
    b'"prompt":[{"type":"text","text":"go"}]}}\n'
)


class Reader:
    """One page's view of the run: a cursor, asked after every poll; first-seen times per frame."""

    def __init__(self, db: Path, journals: live.Journals | None) -> None:
        self.db = db
        self.journals = journals
        self.primed = selections.Primed(Redactor())
        self.cursor: str | None = None
        self.lags: list[float] = []  # ms, one per chunk the agent wrote
        self.requests = 0
        self.request_s = 0.0
        self.conn: sqlite3.Connection | None = None
        self.total = 0  # frames the page knows of
        self.last_seen = 0  # the seq of the newest frame it got

    def _ask(self, **query: Any) -> dict[str, Any]:
        assert self.conn is not None
        began = time.perf_counter()
        page = model.frames_page(
            self.conn, "run", "1", Redactor(), self.primed, limit=PAGE, journals=self.journals, **query
        )
        self.requests += 1
        self.request_s += time.perf_counter() - began
        seen = time.time_ns()
        for row in page["rows"]:
            stamp = _stamp(row.get("snippet") or "") or _stamp(row.get("preview") or "")
            if stamp is not None:
                self.lags.append((seen - stamp) / 1e6)
                self.last_seen = row["seq"]
        return page

    def poll(self) -> None:
        """What ``app.js``'s virtual list asks on each tick: the frames after its cursor (a
        page of them); when more came, the newest frame by its offset, which becomes the cursor
        (the frames between are fetched when scrolled into view)."""
        if self.conn is None:
            if not self.db.exists():
                return
            self.conn = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, check_same_thread=False)
        try:
            page = self._ask(after=self.cursor or "0:0")
        except (sqlite3.OperationalError, model.NotFound):
            return  # not created yet
        self.total += page["total"]
        if len(page["rows"]) == page["total"]:
            self.cursor = page["cursor"] or self.cursor
            return
        newest = self._ask(offset=max(0, self.total - 1))
        if newest["rows"]:
            self.cursor = newest["rows"][-1]["id"]


def _stamp(text: str) -> int | None:
    at = text.find(" t=")
    if at < 0:
        return None
    digits = text[at + 3 : at + 3 + 19]
    return int(digits) if digits.isdigit() else None


def measure(rate: int, seconds: float, db: Path, timeout: float = 300.0) -> dict[str, Any]:
    """One paced run recorded into ``db``, read by both readers; their lags and the run's counts."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    argv = [sys.executable, "-m", "acp_proxy", "run", "--db", str(db), "--"]
    argv += [sys.executable, AGENT, "paced", str(rate), str(seconds)]
    proc = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=REPO, env=env
    )
    timer = threading.Timer(timeout, proc.kill)
    timer.daemon = True
    timer.start()
    assert proc.stdin is not None and proc.stdout is not None
    readers = {"journal": Reader(db, live.Journals(db)), "database": Reader(db, None)}
    try:
        proc.stdin.write(HELLO)
        proc.stdin.flush()
        proc.stdout.readline()  # READY: every process is up
        drained = threading.Thread(target=lambda: proc.stdout.read() if proc.stdout else b"", daemon=True)
        drained.start()
        proc.stdin.write(GO)
        proc.stdin.flush()
        ends = time.monotonic() + seconds + timeout
        while proc.poll() is None and time.monotonic() < ends:
            began = time.monotonic()
            for reader in readers.values():
                reader.poll()
            time.sleep(max(0.0, POLL_S - (time.monotonic() - began)))  # the page's poll clock
        for reader in readers.values():
            reader.poll()
        # The database reader's last frame comes once the recorder has committed it.
        deadline = time.monotonic() + 60
        final = readers["journal"].last_seen
        while readers["database"].last_seen < final and time.monotonic() < deadline:
            time.sleep(POLL_S)  # the page's poll clock
            readers["database"].poll()
    finally:
        timer.cancel()
        proc.stdin.close()
        proc.wait(timeout=60)
    out: dict[str, Any] = {"rate": rate, "seconds": seconds, "written": int(rate * seconds)}
    for name, reader in readers.items():
        lags = sorted(reader.lags)
        last = reader.lags[-1] if reader.lags else None
        out[name] = {
            "seen": len(lags),
            "p50_ms": lags[len(lags) // 2] if lags else None,
            "max_ms": lags[-1] if lags else None,
            "last_ms": last,
            "requests": reader.requests,
            "ms_per_request": 1e3 * reader.request_s / max(1, reader.requests),
        }
        for figure in ("p50_ms", "max_ms", "last_ms"):  # flat, for relay_bench's table
            if out[name][figure] is not None:
                out[f"{name}_{figure}"] = out[name][figure]
    if readers["journal"].last_seen < int(rate * seconds):
        raise RuntimeError(f"the page never got the last frame ({readers['journal'].last_seen} seen)")
    return out


def main(argv: list[str] | None = None) -> int:
    import tempfile

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=int, action="append", help="frames/s (repeatable; default 2000 and 10000)")
    parser.add_argument("--seconds", type=float, default=30.0, help="how long the agent streams (default 30)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also save the figures as JSON here")
    args = parser.parse_args(argv)
    results = []
    with tempfile.TemporaryDirectory(prefix="acp-live-bench-") as tmp:
        for rate in args.rate or [2000, 10000]:
            results.append(measure(rate, args.seconds, Path(tmp) / f"r{rate}.db"))
    print(f"{'frames/s':>9} {'reader':<9} {'seen':>8} {'p50 ms':>8} {'max ms':>9} {'last ms':>9} {'ms/req':>7}")
    failed = False
    for r in results:
        for name in ("journal", "database"):
            f = r[name]
            p50, worst, last = (f["p50_ms"] or 0, f["max_ms"] or 0, f["last_ms"] or 0)
            print(
                f"{r['rate']:>9,} {name:<9} {f['seen']:>8,} {p50:>8,.0f} {worst:>9,.0f} {last:>9,.0f} "
                f"{f['ms_per_request']:>7,.1f}"
            )
        failed |= not (r["journal"]["last_ms"] is not None and r["journal"]["last_ms"] <= 1000)
    print("seen: frames a page was sent (the virtual list skips to the newest; the rest load on scroll)")
    print("target: the journal reader's page shows the run's last frame <= 1,000 ms after it was written")
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
