"""The one-way workloads: the chunk storm and big frames (agent -> client, timed to the relay's
exit, so that a recording is complete)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from bench_agent import CHUNK_LINE_BYTES, GO, HELLO, READY

from relay.common import (
    AGENT,
    PY,
    BenchError,
    Config,
    Relay,
    Spawned,
    check_arrival,
    check_commit_recording,
    check_proxy_recording,
    drain,
    read_line,
    wait_recording_begun,
)


def one_way(relay: Relay, agent: list[str], lines: int, line_bytes: int, cfg: Config, scratch: Path) -> dict:
    """Agent -> client, timed from the go line to 'all bytes read and the relay exited'."""
    with Spawned(relay.wrap(agent, scratch), cfg.timeout, sample_rss=relay.key != "direct") as run:
        os.write(run.stdin_fd, HELLO)
        ready = read_line(run)
        if ready != READY:
            raise BenchError(f"handshake: expected READY, got {ready[:200]!r}{run.stderr_tail()}")
        if relay.records_db:
            wait_recording_begun(scratch, 2, cfg.timeout)
        t0 = time.perf_counter_ns()
        os.write(run.stdin_fd, GO)
        got = drain(run.stdout_fd, lines * line_bytes)
        delivered = (time.perf_counter_ns() - t0) / 1e9
        run.finish()
        elapsed = (time.perf_counter_ns() - t0) / 1e9
        rss = run.rss
        cpu = run.cpu
        extra = drain(run.stdout_fd)  # the relay has exited: anything more is an error
        got = (got[0] + extra[0], got[1] + extra[1])
    check_arrival(got, lines * line_bytes, lines)
    result: dict[str, Any] = {"seconds": elapsed, "delivered_seconds": delivered, "lines": lines, "bytes": got[0]}
    if rss:
        result["peak_rss"] = rss
        result["peak_rss_sum"] = sum(rss.values())
        result["cpu_seconds"] = cpu  # start-up included
    if relay.records_db:
        want = {
            "c2a": (2, len(HELLO) - 1 + len(GO) - 1),
            "a2c": (1 + lines, len(READY) - 1 + lines * (line_bytes - 1)),
        }
        result["recorded"] = check_proxy_recording(scratch, want)
    if relay.commit_db:
        check_commit_recording(scratch, 3 + lines)
    return result


def storm(relay: Relay, cfg: Config, scratch: Path) -> dict:
    frames = cfg.commit_storm_frames if relay.key == "commit" else cfg.storm_frames
    result = one_way(relay, [PY, AGENT, "storm", str(frames)], frames, CHUNK_LINE_BYTES, cfg, scratch)
    result["frames_per_s"] = frames / result["seconds"]
    result["delivered_frames_per_s"] = frames / result["delivered_seconds"]
    if "cpu_seconds" in result:
        result["cpu_us_per_frame"] = result["cpu_seconds"] / frames * 1e6
    return result


def big_frames(relay: Relay, count: int, size: int, cfg: Config, scratch: Path) -> dict:
    result = one_way(relay, [PY, AGENT, "big", str(count), str(size)], count, size, cfg, scratch)
    result["mb_per_s"] = result["bytes"] / result["seconds"] / 1e6
    if "cpu_seconds" in result:
        result["cpu_ms_per_mb"] = result["cpu_seconds"] / (result["bytes"] / 1e6) * 1e3
    return result
