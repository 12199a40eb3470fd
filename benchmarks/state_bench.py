"""Microbenchmark of the protocol state on the chunk path: what one frame of a chunk storm costs.

    python benchmarks/state_bench.py                 # 200,000 chunk frames, best of 5
    python benchmarks/state_bench.py --frames 50000 --repeat 3

Rows (CPU time per frame, best of the rounds; the frames are built before the clock starts):

- ``tracker``: ``Tracker.observe`` on each recorded chunk frame plus ``drain`` every 4,000 frames,
  as the recorder does between two flushes (framing and decoding not included);
- ``decode+tracker``: the same with ``wire.decode`` and the ``FrameRecord`` built inside the clock
  (the recorder's whole per-frame work before the row is handed to the writer);
- ``gate``: ``Gate.chunk`` on the storm's bytes in 1 MiB reads with ``--strip-replayed-notices``
  (the relay's per-line work when a direction is judged: framing, decoding, state, verdict).

Every frame belongs to an open prompt turn of one session, as in a real storm.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_agent import GO, HELLO, READY, chunk_line

from acp_proxy.faults.gate import Gate
from acp_proxy.protocol import wire
from acp_proxy.protocol.frames import FrameRecord
from acp_proxy.protocol.tracker import Tracker

FLUSH_ROWS = 4000
READ_BYTES = 1 << 20


def _prologue() -> list[tuple[str, bytes]]:
    return [("c2a", HELLO.rstrip(b"\n")), ("a2c", READY.rstrip(b"\n")), ("c2a", GO.rstrip(b"\n"))]


def _records(lines: list[tuple[str, bytes]]) -> list[FrameRecord]:
    return [FrameRecord(1, seq, seq * 1000, d, line, wire.decode(line)) for seq, (d, line) in enumerate(lines, 1)]


def bench_tracker(chunks: list[bytes]) -> float:
    records = _records(_prologue() + [("a2c", c) for c in chunks])
    tracker = Tracker(1)
    head, storm = records[:3], records[3:]
    for rec in head:
        tracker.observe(rec)
    tracker.drain()
    started = time.process_time()
    for n, rec in enumerate(storm, 1):
        tracker.observe(rec)
        if n % FLUSH_ROWS == 0:
            tracker.drain()
    tracker.drain()
    return (time.process_time() - started) / len(storm)


def bench_decode_tracker(chunks: list[bytes]) -> float:
    tracker = Tracker(1)
    for rec in _records(_prologue()):
        tracker.observe(rec)
    tracker.drain()
    seq = 3
    started = time.process_time()
    for line in chunks:
        seq += 1
        rec = FrameRecord(1, seq, seq * 1000, "a2c", line, wire.decode(line, utf8_valid=True))
        tracker.observe(rec)
        if seq % FLUSH_ROWS == 0:
            tracker.drain()
    tracker.drain()
    return (time.process_time() - started) / len(chunks)


def bench_gate(chunks: list[bytes]) -> float:
    gate = Gate(strip_replayed_notices=True)
    gate.chunk("c2a", HELLO)
    gate.chunk("a2c", READY)
    gate.chunk("c2a", GO)
    data = b"".join(c + b"\n" for c in chunks)
    reads = [data[i : i + READ_BYTES] for i in range(0, len(data), READ_BYTES)]
    started = time.process_time()
    for piece in reads:
        gate.chunk("a2c", piece)
    gate.end("a2c")
    return (time.process_time() - started) / len(chunks)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    # As the recorder runs: frames are short-lived and acyclic, full collections are rare.
    gc.freeze()
    gc.set_threshold(100_000, 50, 100)
    chunks = [chunk_line(i).rstrip(b"\n") for i in range(args.frames)]
    rows = {"tracker": bench_tracker, "decode+tracker": bench_decode_tracker, "gate": bench_gate}
    print(f"{args.frames:,} chunk frames, best of {args.repeat} (CPU time per frame)")
    for name, bench in rows.items():
        best = min(bench(chunks) for _ in range(args.repeat))
        print(f"  {name:<15} {best * 1e6:6.2f} us/frame  ({1 / best:,.0f} frames/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
