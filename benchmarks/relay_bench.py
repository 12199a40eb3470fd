"""Relay benchmark: acp-proxy side by side with a direct pipe, a `cat` hop and two hand-rolled relays.

    python benchmarks/relay_bench.py            # the full run, best of 3 (~3 minutes on 2 cores)
    python benchmarks/relay_bench.py --quick    # reduced sizes, one round: a smoke test (< 1 min)
    python benchmarks/relay_bench.py --json results.json --repeat 5

What is measured
----------------
Nine ways of putting bytes between a client (this script) and an agent (``bench_agent.py``):

- **direct**: the client talks to the agent's pipes; there is no relay at all.
- **cat hop**: ``sh -c 'cat | AGENT | cat'`` — a relay made of two ``cat`` processes, the floor
  of any relay (it copies bytes, looks at nothing, records nothing).
- **tee relay**: ``naive_relays.py tee`` — Python, a thread per direction, ``readline``, write
  to the other side, append the line to a file.
- **commit/line**: ``naive_relays.py sqlite`` — the same with ``json.loads``, one ``INSERT`` and
  one ``COMMIT`` per line (SQLite defaults). It is slow, so the chunk storm gives it 1/20 of the
  frames (marked ``*``); its rate per frame is what matters.
- **proxy --no-record** and **proxy recording**: ``python -m acp_proxy run [--no-record |
  --db TMP] -- AGENT``.
- **recording + faults** and **recording + check**: the recording proxy with a fault rule that
  matches nothing (so agent->client frames are judged line by line) or with ``--check`` (live
  conformance checks with schema validation).
- **recording + otlp**: the recording proxy with ``--otlp`` to a collector that is down. It
  needs the ``[otel]`` extra: without it the column is skipped, with a note under the table.

Workloads:

- **chunk storm**: the agent writes N 300-byte ``session/update`` ``agent_message_chunk``
  notifications, pre-built, in 1 MiB writes. First the client and the agent shake hands
  through the relay (one request, one response: every process is up, start-up is not
  counted); the clock starts when the client sends the request that releases the storm and
  stops when the client has read every byte *and* the relay process has exited — for the
  recording proxy, that is when the recording is complete (the proxy waits for its recorder,
  which waits until its writer has committed the run's last transaction; the writer's last
  checkpoint, folding the WAL into the database file, comes after and nobody waits for it),
  and with ``--check`` when every frame has been checked. ``delivered frames/s`` stops the clock
  when the client has read every byte instead: what the conversation itself sees.
- **round trips**: the client sends a request line and waits for the agent's response line
  before sending the next; each trip is timed with ``perf_counter_ns`` in the client. All
  relays run at once: each is started and warmed up on its own, then the measured trips go
  round them in 10 blocks (3 unmeasured trips after each switch), so that a change in the
  machine's load hits every relay alike. *Added* latency is the relay's percentile minus the
  direct pipe's. The workload runs twice: as the scheduler places the processes (shown, not
  judged), then with the client and every process of the direct pipe, the `cat` hop and both
  proxy columns on one CPU (judged; the other columns' own background work would share that
  CPU with the conversation being measured). On a VM without guest halt-polling
  (``guest_halt_poll_ns`` 0, recorded in ``--json``), waking a process on the other, idle
  vCPU goes through the hypervisor and costs ~25 µs; the direct
  pipe's two processes often share a vCPU, a relay's three or four cannot, so "as scheduled"
  the `cat` hop alone adds +45-55 µs at p50 in some runs and +5 in others. On one CPU every
  column pays the same wake-ups and the figure is what the relay itself adds; the recorder,
  writer and checker share that CPU too (idle class), the worst case for what they take from
  the conversation.
- **live**: an agent streams 300-byte chunks at 2,000 and at 10,000 frames/s for 30 s into the
  recording proxy while a reader polls the run as an open inspector page does; the row is how
  long after the agent wrote the run's last frame the page got it (``live_bench.py``, which also
  reads from the database alone, for comparison).
- **big frames**: COUNT single-line frames of SIZE bytes from agent to client (timed like the
  storm), in MB/s (10^6 bytes per second), and the relay's peak RSS.
- **start-up**: from spawning the relay (and so the agent) to the first response to
  ``initialize``, for ``cat`` as the agent (it answers before any interpreter could start: the
  relay's own path, judged <= 30 ms over direct, the median of 9 spawns with the database
  already there), for a Python agent that answers at once and for one that first keeps a core
  busy for 300 ms, as real agents loading their code do; the median of a few spawns each. An
  editor waits for that answer: a proxy that starts its agent first only adds its own path to
  the spawn (the interpreter's start-up is shown as the floor of any Python relay). The
  package's bytecode is compiled first (``compileall``), as an installed copy has it: a
  checkout run with ``PYTHONDONTWRITEBYTECODE`` would otherwise compile every module at every
  start.
- **locked database**: round trips through the recording proxy while another process holds
  the database's write lock (25 s; 5 s with ``--quick``); the worst trip during the lock,
  against the median trip before it. Afterwards every trip must be in the recording.
- **SDK**: the official Python SDK: ``examples/sdk_client.py --summary`` driving
  ``examples/sdk_agent.py --chunks N``, directly, through the ``cat`` hop (the floor) and
  through acp-proxy (both modes). The
  client flushes a ``prompt:`` line just before it sends its prompt and a ``stop:`` line when
  the response has come, after all N chunks: chunks/s over that prompt turn (no start-up, no
  handshake). Also shown: the same up to the client's exit (after the relay's, so after the
  recording is complete). Skipped, with a note, when those examples are missing.
- **remote**: ``acp-proxy serve --db`` in front of a WebSocket agent (``remote_bench.py``): a
  stream of N chunk notifications and then round trips, directly (the ``direct`` column) and
  through serve (the ``proxy recording`` column), interleaved in each round; every message must
  be a ``frames`` row once serve has stopped. Judged: stream >= 0.8x direct, p50 added <= 0.5 ms.

After every run the script checks that the client got every byte and line the agent sent; after
every recording run, that the database holds one ``frames`` row per line, per direction, and
that the run row says nothing was lost. A failed check marks the cell ``FAILED`` and makes the
script exit with status 1.

How to read the table
---------------------
One row per figure, one column per relay; the ``target`` column names the performance target and
which columns it judges (``rec``: proxy recording, ``no-rec``: proxy --no-record, no prefix: both
proxy columns); a judged cell ends in ``ok`` or ``MISS``. Targets in parentheses are aims,
shown but not judged.

- ``frames/s``, ``MB/s`` (10^6 bytes/s), ``chunks/s``: throughput, end to end as above.
- ``x direct`` / ``x cat hop`` / ``x tee relay``: that throughput divided by the named column's.
- ``p50 us`` / ``p99 us``: round-trip time percentiles as the client sees them; ``added``: in
  each round, minus the direct pipe's percentile in that same round (they run interleaved),
  then the median over rounds.
- ``first response ms``: from spawning the relay to the first response (start-up; not judged).
- ``peak RSS MiB``: the sum, over the relay's own processes (never the agent), of each one's peak
  resident memory (``VmHWM``, sampled from ``/proc`` every 10 ms): for acp-proxy, the proxy, its
  recorder and whatever the recorder forks (the JSON output has each apart; pages a forked
  child shares with its parent count twice, so the sum is an upper bound); for the cat hop, the
  shell and both ``cat``. "Bounded by a few frames" is judged as: peak RSS on big frames <= the
  same relay's peak RSS in the chunk storm (its fixed cost, full queues included) + 4 frames.

``--repeat N`` (default 3, 1 with ``--quick``) runs everything N times and keeps each cell's
best (highest throughput, lowest percentile; ratios are between best figures: external load
only ever slows a run down) — except ``added`` latencies (paired within each round, then the
median over rounds: the direct pipe's latency on this kind of VM swings between ~15 and ~70 µs
with CPU placement) and peak RSS (the highest); the commit/line relay runs once, the chunk storm
2N times (the client has every byte ~50 ms after the go: in a window that short the machine's
stalls decide, and the direct pipe's own figure varied 1.9x between the rounds of one run).
Every process has a deadline
(``Config.timeout``); temporary files go in one temporary directory, removed at the end.

Numbers from a shared or busy machine are indicative only; compare columns within one run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from relay.common import BY_KEY, RELAYS, REPO, Config, become_subreaper
from relay.plans import execute, make_plans
from relay.streams import sdk_examples
from relay.table import build_rows, print_table, shown


def environment() -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "loadavg_at_start": os.getloadavg(),
        "guest_halt_poll_ns": _read_text("/sys/module/haltpoll/parameters/guest_halt_poll_ns"),
        "acp_proxy_commit": _git("rev-parse", "HEAD"),
        "acp_proxy_dirty_files": _git("status", "--porcelain", "--", "acp_proxy"),
    }


def _read_text(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def otlp_note() -> str | None:
    """Why the ``recording + otlp`` column is skipped (the ``[otel]`` extra is missing: ``run
    --otlp`` would refuse to start), or None when it can run."""
    from acp_proxy.otel.command import missing_sdk

    return missing_sdk()


def sdk_note_for(examples: Path) -> str | None:
    """Why the SDK workload is skipped, or None when it can run."""
    if sdk_examples(examples) is None:
        return "examples/sdk_agent.py or examples/sdk_client.py not found"
    return None


def compile_package() -> None:
    """Bytecode for every module of the acp_proxy the relays run, where it is missing or stale
    (pip does this when it installs; an editable checkout may never have written any)."""
    import compileall

    import acp_proxy

    compileall.compile_dir(Path(acp_proxy.__file__).parent, quiet=1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="reduced sizes: a smoke test in about a minute")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also save every figure as JSON here")
    parser.add_argument(
        "--repeat",
        type=int,
        metavar="N",
        help="run everything N times, interleaved, and keep each cell's best (default: 3; 1 with --quick)",
    )
    parser.add_argument(
        "--examples",
        type=Path,
        default=REPO / "examples",
        metavar="DIR",
        help="where sdk_agent.py and sdk_client.py live (default: the repo's examples/)",
    )
    parser.add_argument(
        "--only",
        metavar="WORKLOADS",
        help="comma-separated workloads to run: storm, rt, big, startup, lock, live, sdk, remote (default: all)",
    )
    parser.add_argument(
        "--relays",
        metavar="KEYS",
        help=f"comma-separated relay columns to run (default: all): {', '.join(BY_KEY)}",
    )
    args = parser.parse_args(argv)
    cfg = Config.quick() if args.quick else Config.full()
    plans = make_plans(cfg, args.examples, sdk_note_for(args.examples))
    if args.only:
        wanted = set(args.only.split(","))
        plans = [plan for plan in plans if plan.name.split(":")[0] in wanted]
    if args.relays:
        keys = args.relays.split(",")
        unknown = [key for key in keys if key not in BY_KEY]
        if unknown:
            parser.error(f"unknown relay column(s): {', '.join(unknown)}")
        for plan in plans:
            plan.relays = [key for key in plan.relays if key in keys]
    otlp_skipped = otlp_note()
    if otlp_skipped is not None:
        for plan in plans:
            plan.relays = [key for key in plan.relays if key != "proxy_otlp"]
    relays = [relay for relay in RELAYS if otlp_skipped is None or relay.key != "proxy_otlp"]
    repeat = max(1, args.repeat if args.repeat is not None else (1 if args.quick else 3))
    env = environment()
    sdk_note = sdk_note_for(args.examples)
    become_subreaper()
    compile_package()

    def progress(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="acp-relay-bench-") as tmp:
        cells = execute(plans, repeat, Path(tmp), progress)
    elapsed = time.monotonic() - started

    rows, judged = build_rows(cfg, cells, sdk_note)
    errors = [cell.error for cell in cells.values() if cell.error]
    passed = sum(item["pass"] for item in judged)
    title = (
        f"acp-proxy relay benchmark{' (--quick)' if args.quick else ''}: "
        f"{env['cpus']} CPUs, Python {env['python']}, best of {repeat}, {elapsed:.0f} s"
    )
    footnotes = [
        f"* commit/line relay: {cfg.commit_storm_frames:,} frames (it commits each one).",
        "peak RSS: sum of each relay process's VmHWM (proxy + recorder for acp-proxy), the agent excluded.",
        f"targets: {passed} of {len(judged)} met.",
    ]
    if otlp_skipped is not None:
        footnotes.append(f"{BY_KEY['proxy_otlp'].title}: skipped — {otlp_skipped}.")
    if errors:
        footnotes += ["FAILED:", *(f"  {error}" for error in errors)]
    print_table(shown(rows), title, footnotes, relays)

    if args.json is not None:
        results = {f"{name}/{key}": {"error": cell.error, "runs": cell.runs} for (name, key), cell in cells.items()}
        document = {
            "config": cfg.__dict__,
            "environment": env,
            "seconds": elapsed,
            "sdk_skipped": sdk_note,
            "otlp_skipped": otlp_skipped,
            "results": results,
            "targets": judged,
            "errors": errors,
        }
        args.json.write_text(json.dumps(document, indent=2, default=str) + "\n")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
