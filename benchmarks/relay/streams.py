"""The workloads other scripts measure: live lag (``live_bench.py``), the official SDK's
examples, and ``acp-proxy serve`` over WebSocket (``remote_bench.py``)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from relay.common import HERE, PY, BenchError, Config, Relay, Spawned


def live_lag(rate: int, seconds: float, cfg: Config, scratch: Path) -> dict:
    """An agent streaming ``rate`` frames/s for ``seconds``, read as an open inspector page reads
    it (``live_bench.py``: through the journal, and from the database alone, interleaved)."""
    import live_bench  # imports acp_proxy: only when this workload runs

    try:
        return live_bench.measure(rate, seconds, scratch, cfg.timeout)
    except RuntimeError as exc:
        raise BenchError(str(exc)) from None


def sdk_examples(examples: Path) -> tuple[Path, Path] | None:
    agent, client = examples / "sdk_agent.py", examples / "sdk_client.py"
    return (agent, client) if agent.is_file() and client.is_file() else None


def sdk_stream(relay: Relay, examples: Path, cfg: Config, scratch: Path) -> dict:
    """The SDK client's prompt turn, timed from its ``prompt:`` line to its ``stop:`` line.

    The client prints (and flushes) ``prompt: x`` just before it sends the prompt and
    ``stop: end_turn`` when the response arrives, after every update: what lies between is the
    stream, without start-up, ``initialize`` or ``session/new``. Also timed: from ``prompt:``
    until the client has exited, which is after the relay (and so the recording) has finished.
    """
    chunks = cfg.sdk_chunks
    agent_py, client_py = examples / "sdk_agent.py", examples / "sdk_client.py"
    agent = [PY, str(agent_py), "--chunks", str(chunks), "--chunk-bytes", str(cfg.sdk_chunk_bytes)]
    via = relay.wrap([], scratch) if relay.key != "direct" else []
    client = [PY, str(client_py), "--prompt", "x", "--summary", "--timeout", str(cfg.timeout)]
    seen: dict[str, int] = {}  # transcript line kind -> when it arrived
    transcript = b""
    with Spawned([*client, "--", *via, *agent], cfg.timeout + 10, stdin=subprocess.DEVNULL) as run:
        while chunk := os.read(run.stdout_fd, 65536):
            now = time.perf_counter_ns()
            transcript += chunk
            for line in transcript.split(b"\n")[:-1]:  # complete lines only
                seen.setdefault(line.split(b":", 1)[0].decode(errors="replace"), now)
        run.finish()
        exited = time.perf_counter_ns()
    text = transcript.decode(errors="replace")
    # --summary: the client counts the updates it received instead of printing each one.
    if f"updates: agent_message_chunk={chunks}\n" not in text or "stop: end_turn" not in text:
        raise BenchError(f"the SDK client did not get {chunks} chunks and end_turn: {text[-300:]!r}")
    if relay.records_db:
        check_sdk_recording(scratch, chunks)
    return {
        "chunks": chunks,
        "stream_seconds": (seen["stop"] - seen["prompt"]) / 1e9,
        "to_exit_seconds": (exited - seen["prompt"]) / 1e9,
        "chunks_per_s": chunks / ((seen["stop"] - seen["prompt"]) / 1e9),
        "to_exit_chunks_per_s": chunks / ((exited - seen["prompt"]) / 1e9),
    }


def check_sdk_recording(db: Path, chunks: int) -> None:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        (chunk_rows,) = conn.execute(
            "SELECT count(*) FROM frames WHERE dir = 'a2c' AND update_kind = 'agent_message_chunk'"
        ).fetchone()
        status, not_recorded, counted = conn.execute(
            "SELECT status, not_recorded, frames_c2a + frames_a2c FROM runs"
        ).fetchone()
        (rows,) = conn.execute("SELECT count(*) FROM frames WHERE dir IN ('c2a', 'a2c')").fetchone()
    finally:
        conn.close()
    if chunk_rows != chunks or status != "ended" or not_recorded or rows != counted:
        raise BenchError(
            f"SDK recording: {chunk_rows} agent_message_chunk rows (expected {chunks}), "
            f"{rows} rows for {counted} frames counted, run {status!r}, not_recorded={not_recorded}"
        )


def remote_stream(relays: list[Relay], cfg: Config, scratches: dict[str, Path]) -> dict[str, dict | Exception]:
    """``acp-proxy serve`` (recording) vs the WebSocket agent directly: remote_bench.py's
    stream of chunks and round trips, interleaved in one round with ``serve --no-record`` (the
    relay alone). The direct side's figures go to the ``direct`` column, serve's to ``proxy
    recording``, serve --no-record's to ``proxy --no-record``."""
    sys.path.insert(0, str(HERE))
    try:
        import remote_bench
    finally:
        sys.path.remove(str(HERE))
    try:
        bare = any(relay.key == "proxy" for relay in relays)
        results = remote_bench.measure(scratches["proxy_rec"], cfg.remote_chunks, cfg.remote_trips, relay_only=bare)
    except SystemExit as exc:  # a check failed (a message not recorded, a peer that did not start)
        raise BenchError(str(exc)) from None
    direct = results["direct"][0]
    outcome: dict[str, dict | Exception] = {"direct": direct}
    for side, key in (("serve", "proxy_rec"), ("serve_norec", "proxy")):
        if results[side]:
            result = results[side][0]
            result["added_p50_us"] = result["p50_us"] - direct["p50_us"]
            outcome[key] = result
    return {relay.key: outcome[relay.key] for relay in relays if relay.key in outcome}
