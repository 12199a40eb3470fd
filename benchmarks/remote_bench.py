"""``acp-proxy serve`` under load: a WebSocket stream of 100,000 ``agent_message_chunk``
notifications through the recording proxy vs straight from the agent, and the round-trip p50.

    python benchmarks/remote_bench.py [--chunks N] [--round-trips N] [--rounds N]

The agent is ``remote_bench.py agent``: a trio-websocket server that answers ``bench/storm``
with N chunk notifications (~300 bytes each) and then the response, and any other request with
a response of the same id. The client (this process) times from sending ``bench/storm`` to its
response, and each of the round trips. Every process has a deadline; the recording is checked
(every message a frame) once serve has stopped. ``measure`` is also ``relay_bench.py``'s
``remote`` workload.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio
import trio_websocket

DEADLINE = 600
CHUNK = {
    "jsonrpc": "2.0",
    "method": "session/update",
    "params": {
        "sessionId": "sess_7f3a9c2e5b8d4a1f",
        "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "x" * 180}},
    },
}


async def agent() -> None:
    chunk = json.dumps(CHUNK, separators=(",", ":"))

    async def handler(request: trio_websocket.WebSocketRequest) -> None:
        ws = await request.accept()
        try:
            while True:
                message = json.loads(await ws.get_message())
                if message.get("method") == "bench/storm":
                    for _ in range(message["params"]["n"]):
                        await ws.send_message(chunk)
                await ws.send_message(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": {}}))
        except trio_websocket.ConnectionClosed:
            pass

    async with trio.open_nursery() as nursery:
        server = await nursery.start(trio_websocket.serve_websocket, handler, "127.0.0.1", 0, None)
        print(f"PORT {server.port}", flush=True)


async def client(url: str, chunks: int, round_trips: int) -> tuple[float, float]:
    async with trio_websocket.open_websocket_url(url, max_message_size=1 << 24) as ws:
        start = time.perf_counter()
        await ws.send_message(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "bench/storm", "params": {"n": chunks}}))
        seen = 0
        while "result" not in await ws.get_message():
            seen += 1
        elapsed = time.perf_counter() - start
        assert seen == chunks, (seen, chunks)
        times = []
        for i in range(round_trips):
            start = time.perf_counter()
            await ws.send_message(json.dumps({"jsonrpc": "2.0", "id": 2 + i, "method": "bench/ping"}))
            await ws.get_message()
            times.append(time.perf_counter() - start)
        return elapsed, statistics.median(times)


def line_of(proc: subprocess.Popen[bytes], stream: str, needle: bytes) -> bytes:
    pipe = proc.stdout if stream == "stdout" else proc.stderr
    assert pipe is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = pipe.readline()
        if needle in line:
            return line
        if not line:
            break
    raise SystemExit(f"no {needle!r} from {proc.args}")


def cpu_seconds(pid: int) -> float:
    """utime + stime of one process, from /proc (0 where there is none)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def caught_up(db: Path, frames: int) -> float:
    """Seconds until ``db`` holds ``frames`` messages (SystemExit past the deadline)."""
    start = time.perf_counter()
    while time.perf_counter() - start < DEADLINE:
        try:
            with sqlite3.connect(db, timeout=5) as conn:
                (count,) = conn.execute("select count(*) from frames where dir != 'stderr'").fetchone()
        except sqlite3.OperationalError:  # no frames table yet
            count = 0
        if count >= frames:
            return time.perf_counter() - start
        time.sleep(0.05)  # a poll of the database, with a deadline
    raise SystemExit(f"the recorder had {count:,} of {frames:,} messages after {DEADLINE} s")


def _start_serve(port: int, env: dict[str, str], record: Path | None) -> tuple[subprocess.Popen[bytes], str]:
    """``serve --upstream`` to the agent at ``port``, recording into ``record`` (None:
    ``--no-record``); the process and its WebSocket URL."""
    storage = ["--db", str(record)] if record is not None else ["--no-record"]
    serve = subprocess.Popen(
        [
            *(sys.executable, "-m", "acp_proxy", "serve", "--listen", "127.0.0.1:0"),
            *("--upstream", f"http://127.0.0.1:{port}/acp", *storage),
        ],
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        address = line_of(serve, "stderr", b"serving").decode().split("serving ")[1].split()[0]
    except BaseException:
        serve.kill()
        serve.wait(timeout=60)
        raise
    return serve, address.replace("http", "ws", 1) + "/acp"


def measure(
    db: Path, chunks: int, round_trips: int, rounds: int = 1, relay_only: bool = True
) -> dict[str, list[dict[str, float]]]:
    """The stream and the round trips, directly, through ``serve --db DB`` and (``relay_only``)
    through ``serve --no-record``, interleaved over ``rounds`` (each round: direct, recording,
    relay only): per side a list of {msgs_per_s, p50_us} (and for serve its CPU time per
    message, start-up excluded). Checks that every message of the recorded runs is a frame
    once serve has stopped (SystemExit otherwise)."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    upstream = subprocess.Popen([sys.executable, __file__, "agent"], stdout=subprocess.PIPE, env=env)
    results: dict[str, list[dict[str, float]]] = {"direct": [], "serve": [], "serve_norec": []}
    servers: list[subprocess.Popen[bytes]] = []
    try:
        port = int(line_of(upstream, "stdout", b"PORT").split()[1])
        serve, recording_url = _start_serve(port, env, db)
        servers.append(serve)
        sides = [("serve", serve, recording_url)]
        if relay_only:
            bare, bare_url = _start_serve(port, env, None)
            servers.append(bare)
            sides.append(("serve_norec", bare, bare_url))
        per_round = 2 + chunks + 2 * round_trips
        for done in range(rounds):
            elapsed, p50 = trio.run(client, f"ws://127.0.0.1:{port}/acp", chunks, round_trips)
            results["direct"].append({"msgs_per_s": chunks / elapsed, "p50_us": p50 * 1e6})
            for side, process, url in sides:
                before = cpu_seconds(process.pid)
                elapsed, p50 = trio.run(client, url, chunks, round_trips)
                cpu = (cpu_seconds(process.pid) - before) / per_round
                results[side].append({"msgs_per_s": chunks / elapsed, "p50_us": p50 * 1e6, "cpu_us_per_msg": cpu * 1e6})
                if side == "serve":
                    # The recorder caught up after the stream (it yields to a flood): the next
                    # side is timed once it has, not while it competes for the cores.
                    results[side][-1]["caught_up_s"] = caught_up(db, (done + 1) * per_round)
        start = time.perf_counter()
        serve.send_signal(signal.SIGTERM)
        serve.wait(timeout=DEADLINE)
        results["serve"][-1]["recorded_after_s"] = time.perf_counter() - start
    finally:
        for process in servers:
            process.kill()
            process.wait(timeout=60)
        upstream.kill()
        upstream.wait(timeout=60)
    with sqlite3.connect(db) as conn:
        (frames,) = conn.execute("select count(*) from frames where dir != 'stderr'").fetchone()
    expected = rounds * (2 + chunks + 2 * round_trips)
    if frames != expected:
        raise SystemExit(f"serve recorded {frames:,} of {expected:,} messages")
    return results


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--round-trips", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=1, help="direct and proxied runs, interleaved")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        results = measure(Path(scratch) / "bench.db", args.chunks, args.round_trips, args.rounds)
    direct, served = results["direct"], results["serve"]
    best_direct = max(run["msgs_per_s"] for run in direct)
    best_served = max(run["msgs_per_s"] for run in served)
    print(f"{args.chunks:,} chunks over WebSocket, {args.round_trips:,} round trips, {args.rounds} round(s)")
    print(f"  direct:  {best_direct:,.0f} msg/s, p50 {statistics.median(r['p50_us'] for r in direct):,.0f} us")
    print(
        f"  serve:   {best_served:,.0f} msg/s ({best_served / best_direct:.2f}x direct), "
        f"p50 {statistics.median(r['p50_us'] for r in served):,.0f} us, "
        f"CPU {min(r['cpu_us_per_msg'] for r in served):,.1f} us/msg"
    )
    bare = results["serve_norec"]
    best_bare = max(run["msgs_per_s"] for run in bare)
    print(
        f"  serve --no-record: {best_bare:,.0f} msg/s ({best_bare / best_direct:.2f}x direct), "
        f"p50 {statistics.median(r['p50_us'] for r in bare):,.0f} us, "
        f"CPU {min(r['cpu_us_per_msg'] for r in bare):,.1f} us/msg"
    )
    paired = [s["msgs_per_s"] / d["msgs_per_s"] for s, d in zip(served, direct, strict=True)]
    print(
        "  serve / direct per round: "
        + ", ".join(f"{r:.2f}x" for r in paired)
        + f" (median {statistics.median(paired):.2f}x); recorder caught up "
        + ", ".join(f"{r['caught_up_s']:.1f}" for r in served)
        + " s after each stream"
    )
    print(f"  every message recorded; serve finished recording {served[-1]['recorded_after_s']:.1f} s after SIGTERM")


if __name__ == "__main__":
    if sys.argv[1:] == ["agent"]:
        trio.run(agent)
    else:
        main()
