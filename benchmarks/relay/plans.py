"""The run: which workload runs on which relay columns (``Plan``), in what order, how often,
and what each cell keeps."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from relay.common import BY_KEY, RELAYS, BenchError, Config, Relay, end_strays, remove_db, wait_for_lingerers
from relay.lock import locked_database
from relay.round_trips import round_trips
from relay.startup import startup
from relay.streams import live_lag, remote_stream, sdk_stream
from relay.throughput import big_frames, storm


@dataclass
class Cell:
    """Results of one (workload, relay) pair over the repeats."""

    runs: list[dict] = field(default_factory=list)
    error: str | None = None


def best(cell: Cell, key: str, how: str) -> float | None:
    """Over a cell's runs: the "max", "min" or "median" of one figure."""
    values = sorted(run[key] for run in cell.runs if key in run)
    if not values:
        return None
    if how == "median":
        return values[(len(values) - 1) // 2]
    return values[-1] if how == "max" else values[0]


@dataclass
class Plan:
    """A workload: ``run`` measures one relay at a time; ``group`` all of them together."""

    name: str  # workload key, e.g. "storm", "rt", "big:64x1048576", "sdk"
    relays: list[str]
    run: Callable[[Relay, Path], dict] | None = None
    group: Callable[[list[Relay], dict[str, Path]], dict[str, dict | Exception]] | None = None
    rounds: int = 1  # runs per --repeat: more for a figure timed over a short window


def make_plans(cfg: Config, examples: Path, skip_sdk: str | None) -> list[Plan]:
    all_keys = [relay.key for relay in RELAYS]
    plans = [
        # Delivery takes ~50 ms of a storm: at that scale the machine's stalls decide (the
        # direct pipe's own figure varied 1.9x between the rounds of one run): more tries.
        Plan("storm", all_keys, lambda relay, scratch: storm(relay, cfg, scratch), rounds=2),
        Plan("rt", all_keys, group=lambda relays, scratches: round_trips(relays, cfg, scratches)),
        # On one CPU, only the columns the figure is judged against: another column's own work
        # (an exporter retrying, a checker catching up) would share that CPU with the
        # conversation being measured (with the otlp column there, recording's p99 went from
        # about +80 µs to +286).
        Plan(
            "rt:1cpu",
            ["direct", "cat", "proxy", "proxy_rec"],
            group=lambda relays, scratches: round_trips(relays, cfg, scratches, one_cpu=True),
        ),
    ]
    for count, size in cfg.big:
        plans.append(
            Plan(
                f"big:{count}x{size}",
                all_keys,
                lambda relay, scratch, c=count, s=size: big_frames(relay, c, s, cfg, scratch),
            )
        )
    plans.append(Plan("startup", ["direct", "cat", "proxy", "proxy_rec"], lambda r, s: startup(r, cfg, s)))
    plans.append(Plan("lock", ["proxy_rec"], lambda relay, scratch: locked_database(relay, cfg, scratch)))
    for rate, seconds in cfg.live:

        def live_plan(relay: Relay, scratch: Path, rate: int = rate, seconds: float = seconds) -> dict:
            return live_lag(rate, seconds, cfg, scratch)

        plans.append(Plan(f"live:{rate}", ["proxy_rec"], live_plan))
    if skip_sdk is None:
        plans.append(
            Plan(
                "sdk",
                ["direct", "cat", "proxy", "proxy_rec"],
                lambda relay, scratch: sdk_stream(relay, examples, cfg, scratch),
            )
        )
    remote_keys = ["direct", "proxy", "proxy_rec"]
    plans.append(Plan("remote", remote_keys, group=lambda relays, scr: remote_stream(relays, cfg, scr)))
    return plans


def execute(plans: list[Plan], repeat: int, workdir: Path, progress: Callable[[str], None]) -> dict:
    cells: dict[tuple[str, str], Cell] = {(plan.name, key): Cell() for plan in plans for key in plan.relays}

    def record(plan: Plan, key: str, result: dict | Exception) -> None:
        cell = cells[plan.name, key]
        if isinstance(result, Exception):
            cell.error = f"{plan.name} / {BY_KEY[key].title}: {result}"
            progress(f"  FAILED: {cell.error}")
        else:
            cell.runs.append(result)

    def cleanup(plan: Plan, keys: list[str], scratches: dict[str, Path]) -> None:
        wait_for_lingerers()
        for scratch in scratches.values():
            remove_db(scratch)
        strays = end_strays()
        if strays:
            for key in keys:
                record(plan, key, BenchError(f"processes left behind: {strays}"))

    for round_no in range(repeat * max(plan.rounds for plan in plans)):
        for plan in plans:
            if round_no >= repeat * plan.rounds:
                continue
            # commit/line is orders of magnitude off every target: one run says it all.
            keys = [key for key in plan.relays if not (round_no and key == "commit")]
            name = plan.name.replace(":", "-")
            scratches = {key: workdir / f"{name}-{key}-{round_no}" for key in keys}
            if plan.group is not None:
                progress(f"[{round_no + 1}/{repeat * plan.rounds}] {plan.name:<18} all relays, interleaved")
                try:
                    outcome = plan.group([BY_KEY[key] for key in keys], scratches)
                except (BenchError, OSError) as exc:
                    outcome = dict.fromkeys(keys, exc)
                for key in keys:
                    record(plan, key, outcome.get(key, BenchError("no result")))
                cleanup(plan, keys, scratches)
                continue
            assert plan.run is not None
            for key in keys:
                progress(f"[{round_no + 1}/{repeat * plan.rounds}] {plan.name:<18} {BY_KEY[key].title}")
                try:
                    record(plan, key, plan.run(BY_KEY[key], scratches[key]))
                except (BenchError, OSError) as exc:
                    record(plan, key, exc)
                finally:
                    cleanup(plan, [key], {key: scratches[key]})
    return cells
