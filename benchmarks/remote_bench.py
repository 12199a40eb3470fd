"""``acp-proxy serve`` under load: a WebSocket stream of 100,000 ``agent_message_chunk``
notifications through the recording proxy vs straight from the agent, and the round-trip p50.

    python benchmarks/remote_bench.py [--chunks N] [--round-trips N]

The agent is ``remote_bench.py agent``: a trio-websocket server that answers ``bench/storm``
with N chunk notifications (~300 bytes each) and then the response, and any other request with
a response of the same id. The client (this process) times from sending ``bench/storm`` to its
response, and each of the round trips. Every process has a deadline; the recording is checked
(every message a frame) once serve has stopped.
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--round-trips", type=int, default=1_000)
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    upstream = subprocess.Popen([sys.executable, __file__, "agent"], stdout=subprocess.PIPE, env=env)
    with tempfile.TemporaryDirectory() as scratch:
        db = Path(scratch) / "bench.db"
        try:
            port = int(line_of(upstream, "stdout", b"PORT").split()[1])
            direct = trio.run(client, f"ws://127.0.0.1:{port}/acp", args.chunks, args.round_trips)
            serve = subprocess.Popen(
                [
                    *(sys.executable, "-m", "acp_proxy", "serve", "--listen", "127.0.0.1:0"),
                    *("--upstream", f"http://127.0.0.1:{port}/acp", "--db", str(db)),
                ],
                stderr=subprocess.PIPE,
                env=env,
            )
            try:
                address = line_of(serve, "stderr", b"serving").decode().split("serving ")[1].split()[0]
                proxied = trio.run(client, address.replace("http", "ws", 1) + "/acp", args.chunks, args.round_trips)
                start = time.perf_counter()
                serve.send_signal(signal.SIGTERM)
                serve.wait(timeout=DEADLINE)
                recorded_after = time.perf_counter() - start
            finally:
                serve.kill()
        finally:
            upstream.kill()
            upstream.wait(timeout=60)
        with sqlite3.connect(db) as conn:
            (frames,) = conn.execute("select count(*) from frames where dir != 'stderr'").fetchone()
    expected = 2 + args.chunks + 2 * args.round_trips
    print(f"{args.chunks:,} chunks over WebSocket, {args.round_trips:,} round trips")
    print(f"  direct:  {direct[0]:.2f} s ({args.chunks / direct[0]:,.0f} msg/s), p50 {direct[1] * 1e3:.2f} ms")
    print(f"  serve:   {proxied[0]:.2f} s ({args.chunks / proxied[0]:,.0f} msg/s), p50 {proxied[1] * 1e3:.2f} ms")
    print(f"  recorded {frames:,} of {expected:,} messages; serve finished recording {recorded_after:.1f} s after")


if __name__ == "__main__":
    if sys.argv[1:] == ["agent"]:
        trio.run(agent)
    else:
        main()
