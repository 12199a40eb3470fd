"""The round-trip workload: request/response latency through every relay at once, interleaved
in blocks, as scheduled and on one CPU."""

from __future__ import annotations

import contextlib
import math
import os
import time
from pathlib import Path
from typing import Any

from relay.common import (
    AGENT,
    PY,
    REQUEST,
    BenchError,
    Config,
    Relay,
    Spawned,
    check_commit_recording,
    check_proxy_recording,
)


def percentile(sorted_values: list[int], p: float) -> int:
    """Nearest-rank percentile of an ascending list."""
    rank = max(1, math.ceil(p / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


class Tripper:
    """One relay with the echo agent behind it, driven one timed round trip at a time."""

    def __init__(self, relay: Relay, cfg: Config, scratch: Path) -> None:
        self.relay = relay
        self.scratch = scratch
        self.spawned_ns = time.perf_counter_ns()
        self.run = Spawned(relay.wrap([PY, AGENT, "echo"], scratch), cfg.timeout)
        self.sent = 0
        self.buf = b""
        self.times: list[int] = []
        self.first_response_ms = math.nan

    def start(self, warmup: int) -> None:
        """The first trip (it times start-up), then ``warmup`` unmeasured ones."""
        self.trip()
        self.first_response_ms = (time.perf_counter_ns() - self.spawned_ns) / 1e6
        for _ in range(warmup):
            self.trip()

    def trip(self) -> int:
        """Send one request, wait for its response; nanoseconds taken."""
        i = self.sent
        request = (REQUEST % i).encode()
        t0 = time.perf_counter_ns()
        os.write(self.run.stdin_fd, request)
        while (end := self.buf.find(b"\n")) < 0:
            chunk = os.read(self.run.stdout_fd, 65536)
            if not chunk:
                raise BenchError(f"EOF after {i} round trips{self.run.stderr_tail()}")
            self.buf += chunk
        t1 = time.perf_counter_ns()
        line, self.buf = self.buf[:end], self.buf[end + 1 :]
        if f'"id":{i},'.encode() not in line:
            raise BenchError(f"trip {i}: unexpected response {line[:200]!r}")
        self.sent += 1
        return t1 - t0

    def finish(self) -> dict:
        self.run.finish()
        times = sorted(self.times)
        result: dict[str, Any] = {
            "trips": len(times),
            "p50_us": percentile(times, 50) / 1e3,
            "p99_us": percentile(times, 99) / 1e3,
            "mean_us": sum(times) / len(times) / 1e3,
            "first_response_ms": self.first_response_ms,
        }
        if self.relay.records_db:  # response sizes vary with the id's digits: count rows only
            want = {"c2a": (self.sent, None), "a2c": (self.sent, None)}
            result["recorded"] = check_proxy_recording(self.scratch, want)
        if self.relay.commit_db:
            check_commit_recording(self.scratch, 2 * self.sent)
        return result


RT_BLOCKS = 10  # the measured trips of each relay come in this many blocks, interleaved
RT_BLOCK_WARMUP = 3  # unmeasured trips each time the client switches to a relay


def round_trips(
    relays: list[Relay], cfg: Config, scratches: dict[str, Path], *, one_cpu: bool = False
) -> dict[str, dict | Exception]:
    """All relays at once: blocks of trips, relay after relay, so load drift hits them alike.

    Each relay is started (and warmed up) on its own, then the measured trips go round the
    relays in RT_BLOCKS blocks, each block starting with a different relay. ``one_cpu``: the
    client and every process of every relay (recorders included) share one CPU.
    """
    if not one_cpu:
        return _round_trips(relays, cfg, scratches)
    allowed = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(allowed)})  # inherited by every process spawned meanwhile
    try:
        return _round_trips(relays, cfg, scratches)
    finally:
        os.sched_setaffinity(0, allowed)


def _round_trips(relays: list[Relay], cfg: Config, scratches: dict[str, Path]) -> dict[str, dict | Exception]:
    outcome: dict[str, dict | Exception] = {}
    live: dict[str, Tripper] = {}
    with contextlib.ExitStack() as stack:
        for relay in relays:
            try:
                tripper = Tripper(relay, cfg, scratches[relay.key])
                stack.enter_context(tripper.run)
                tripper.start(cfg.warmup_trips)
                live[relay.key] = tripper
            except BenchError as exc:
                outcome[relay.key] = exc
        per_block = math.ceil(cfg.trips / RT_BLOCKS)
        for block in range(RT_BLOCKS):
            keys = list(live)
            shift = block % max(1, len(keys))
            for key in keys[shift:] + keys[:shift]:
                tripper = live[key]
                try:
                    for _ in range(RT_BLOCK_WARMUP):
                        tripper.trip()
                    tripper.times.extend(tripper.trip() for _ in range(per_block))
                except BenchError as exc:
                    outcome[key] = exc
                    del live[key]
        for key, tripper in live.items():
            try:
                outcome[key] = tripper.finish()
            except BenchError as exc:
                outcome[key] = exc
    direct = outcome.get("direct")
    if isinstance(direct, dict):  # added latency: against the direct pipe of the same round
        for key, result in outcome.items():
            if isinstance(result, dict) and key != "direct":
                result["added_p50_us"] = result["p50_us"] - direct["p50_us"]
                result["added_p99_us"] = result["p99_us"] - direct["p99_us"]
    return outcome
