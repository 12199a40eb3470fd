"""The start-up workload: from spawning a relay (and so its agent) to the first response to
``initialize``, with the interpreter's own start-up as the floor."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

from bench_agent import HELLO

from relay.common import AGENT, PY, BenchError, Config, Relay, Spawned, read_line


def first_response_ms(argv: list[str], timeout: float) -> float:
    """Spawn ``argv`` (a relay and its agent), send ``initialize``, time its first answer."""
    t0 = time.perf_counter_ns()
    with Spawned(argv, timeout) as run:
        os.write(run.stdin_fd, HELLO)
        line = read_line(run)
        elapsed = (time.perf_counter_ns() - t0) / 1e6
        if b'"id":0' not in line:
            raise BenchError(f"unexpected first response {line[:200]!r}")
        run.finish()
    return elapsed


def startup(relay: Relay, cfg: Config, scratch: Path) -> dict:
    """First response to ``initialize``, from spawning the relay: an agent that answers at once
    and one that first spends ``cfg.slow_start`` seconds of CPU loading itself, as real agents
    do. The median of ``cfg.startup_trials`` spawns each, alternating the two."""
    compile_package()
    instant, slow = [], []
    for _ in range(cfg.startup_trials):
        instant.append(first_response_ms(relay.wrap([PY, AGENT, "echo"], scratch), cfg.timeout))
        slow.append(first_response_ms(relay.wrap([PY, AGENT, "echo", str(cfg.slow_start)], scratch), cfg.timeout))
    # ``cat`` as the agent: it answers before any Python could, so all that is measured is the
    # relay's own path to the first line. The database is there already (the spawns above).
    cat = [first_response_ms(relay.wrap(["cat"], scratch), cfg.timeout) for _ in range(cfg.cat_trials)]
    result: dict[str, Any] = {
        "instant_ms": sorted(instant)[len(instant) // 2],
        "slow_ms": sorted(slow)[len(slow) // 2],
        "cat_ms": sorted(cat)[len(cat) // 2],
        "instant_all": instant,
        "slow_all": slow,
        "cat_all": cat,
    }
    if relay.key == "direct":
        result.update(interpreter_start_ms(cfg))
    return result


def compile_package() -> None:
    """The package's bytecode written, as ``pip install`` leaves it for a regular install. An
    editable install run with PYTHONDONTWRITEBYTECODE set compiles every module changed since
    its last bytecode again at each start, and the proxy's start-up would measure the compiler."""
    import compileall

    import acp_proxy

    compileall.compile_dir(Path(acp_proxy.__file__).parent, quiet=1)


# The interpreter's floors, each run as ``PY FLAGS -c pass``: as installed (``site`` reads every
# ``.pth`` file, and runs the ones that import), without ``site``, and isolated as well.
FLOORS = {"python_ms": (), "python_S_ms": ("-S",), "python_IS_ms": ("-I", "-S")}


def interpreter_start_ms(cfg: Config) -> dict[str, float]:
    """The floors of any Python relay: this interpreter starting and exiting, with ``site``,
    without and isolated (median of 5 each, interleaved)."""
    times: dict[str, list[float]] = {key: [] for key in FLOORS}
    for _ in range(5):
        for key, flags in FLOORS.items():
            t0 = time.perf_counter_ns()
            subprocess.run([PY, *flags, "-c", "pass"], check=True, timeout=cfg.timeout)
            times[key].append((time.perf_counter_ns() - t0) / 1e6)
    return {key: sorted(values)[2] for key, values in times.items()}
