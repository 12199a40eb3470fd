"""The locked-database workload: round trips while another process holds the write lock."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from relay.common import PY, BenchError, Config, Relay
from relay.round_trips import Tripper, percentile

LOCKER = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=60)
conn.execute("BEGIN IMMEDIATE")
conn.execute("CREATE TABLE IF NOT EXISTS _bench_lock (x)")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
conn.execute("ROLLBACK")
"""


def locked_database(relay: Relay, cfg: Config, scratch: Path) -> dict:
    """Round trips through the recording proxy while another process holds the database's write
    lock for ``cfg.lock_seconds``: the worst trip then, against the median trip before."""
    tripper = Tripper(relay, cfg, scratch)
    with tripper.run:
        tripper.start(cfg.warmup_trips)
        before = sorted(tripper.trip() for _ in range(200))
        locker = subprocess.Popen(
            [PY, "-c", LOCKER, str(scratch), str(cfg.lock_seconds)], stdout=subprocess.PIPE, text=True
        )
        try:
            assert locker.stdout is not None
            if locker.stdout.readline().strip() != "locked":
                raise BenchError("the locking process did not get the write lock")
            during = []
            deadline = time.monotonic() + cfg.lock_seconds
            while time.monotonic() < deadline:
                during.append(tripper.trip())
            locker.wait(timeout=cfg.timeout)
        finally:
            if locker.poll() is None:
                locker.kill()
                locker.wait()
        tripper.times = before + during
        result = tripper.finish()  # also checks that every trip was recorded, once the lock was gone
    during.sort()
    median_before = before[len(before) // 2]
    return {
        **result,
        "locked_trips": len(during),
        "locked_worst_ms": during[-1] / 1e6,
        "locked_p99_ms": percentile(during, 99) / 1e6,
        "unlocked_median_ms": median_before / 1e6,
        "locked_added_ms": (during[-1] - median_before) / 1e6,
    }
