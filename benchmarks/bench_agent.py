"""Fake ACP agents for ``relay_bench.py``: they speak just enough NDJSON JSON-RPC to load a relay.

    python benchmarks/bench_agent.py storm N          # N ~300-byte agent_message_chunk lines
    python benchmarks/bench_agent.py big COUNT SIZE   # COUNT single-line frames of SIZE bytes each
    python benchmarks/bench_agent.py echo             # one response line per request line
    python benchmarks/bench_agent.py echo SECONDS     # the same, after SECONDS of CPU-bound start-up
    python benchmarks/bench_agent.py paced RATE SECONDS  # RATE chunk lines a second for SECONDS

``storm`` and ``big`` build their output before they start, then shake hands: they read one
request (``HELLO``) and answer it (``READY``) — once the client has that answer, every process
in between is up — then wait for the next request (``GO``), write everything as fast as the
pipe takes it, in big writes, and exit without waiting for stdin to close. ``echo`` answers
each request with a response carrying the same id, and exits at end of input; with SECONDS it
first keeps a core busy that long, as a real agent loading its code does (they took 89-1,541
ms to first answer ``initialize``).

``paced`` shakes hands as ``storm`` does, then writes its chunks on a clock (every 5 ms, the
lines due by then), each carrying the wall-clock time it was written (``t=NS``, time_ns), so a
reader can tell how long after the agent wrote a frame it saw it; it exits after SECONDS.

Line sizes include the terminating ``\\n``. Nothing is written to stderr.
"""

from __future__ import annotations

import json
import os
import sys

SESSION = "sess_7f3a9c2e5b8d4a1f"
CHUNK_LINE_BYTES = 300
WRITE_BYTES = 1 << 20

_CHUNK_HEAD = (
    '{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"' + SESSION + '",'
    '"update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"'
)
_CHUNK_TAIL = '"}}}}\n'
_FILLER = "The quick brown fox jumps over the lazy dog while the agent streams its answer. " * 4

HELLO = b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}}\n'
READY = b'{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":1}}\n'
GO = (
    b'{"jsonrpc":"2.0","id":1,"method":"session/prompt","params":{"sessionId":"' + SESSION.encode() + b'",'
    b'"prompt":[{"type":"text","text":"go"}]}}\n'
)


def chunk_line(index: int, size: int = CHUNK_LINE_BYTES) -> bytes:
    """One ``agent_message_chunk`` notification of exactly ``size`` bytes (with its newline)."""
    room = size - len(_CHUNK_HEAD) - len(_CHUNK_TAIL)
    text = f"[{index:07d}] {_FILLER}"[:room].ljust(room, ".")
    return (_CHUNK_HEAD + text + _CHUNK_TAIL).encode()


def write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def handshake() -> None:
    """HELLO -> READY, then wait for GO."""
    sys.stdin.buffer.readline()
    write_all(1, READY)
    sys.stdin.buffer.readline()


def storm(count: int) -> None:
    payload = b"".join(chunk_line(i) for i in range(count))
    handshake()
    view = memoryview(payload)
    for start in range(0, len(view), WRITE_BYTES):
        write_all(1, view[start : start + WRITE_BYTES])


def big(count: int, size: int) -> None:
    """Each frame is one notification line of ``size`` bytes; the text is written in 1 MiB pieces."""
    head = _CHUNK_HEAD.encode()
    tail = _CHUNK_TAIL.encode()
    text_bytes = size - len(head) - len(tail)
    if text_bytes < 0:
        raise SystemExit(f"bench_agent: a frame needs at least {len(head) + len(tail)} bytes")
    block = b"x" * min(WRITE_BYTES, max(text_bytes, 1))
    handshake()
    for _ in range(count):
        write_all(1, head)
        left = text_bytes
        while left:
            piece = block if left >= len(block) else block[:left]
            write_all(1, piece)
            left -= len(piece)
        write_all(1, tail)


def paced(rate: float, seconds: float) -> None:
    import time

    handshake()
    begun = time.monotonic()
    sent = 0
    total = int(rate * seconds)
    while sent < total:
        due = min(total, int((time.monotonic() - begun) * rate) + 1)
        if due > sent:
            now = time.time_ns()
            write_all(1, b"".join(paced_line(i, now) for i in range(sent, due)))
            sent = due
        time.sleep(0.005)  # a clock, not synchronisation: the agent writes at a rate


def paced_line(index: int, now_ns: int) -> bytes:
    """A chunk line whose text starts with its index and the time it was written."""
    room = CHUNK_LINE_BYTES - len(_CHUNK_HEAD) - len(_CHUNK_TAIL)
    text = f"[{index:07d} t={now_ns}] {_FILLER}"[:room].ljust(room, ".")
    return (_CHUNK_HEAD + text + _CHUNK_TAIL).encode()


def echo(start_up: float = 0.0) -> None:
    if start_up:
        import time

        deadline = time.perf_counter() + start_up
        while time.perf_counter() < deadline:
            pass
    out = sys.stdout.buffer
    for line in sys.stdin.buffer:
        request = json.loads(line)
        response = {"jsonrpc": "2.0", "id": request.get("id"), "result": {"stopReason": "end_turn"}}
        out.write(json.dumps(response, separators=(",", ":")).encode() + b"\n")
        out.flush()


def main(argv: list[str]) -> None:
    mode, *args = argv
    if mode == "storm":
        storm(int(args[0]))
    elif mode == "big":
        big(int(args[0]), int(args[1]))
    elif mode == "paced":
        paced(float(args[0]), float(args[1]))
    elif mode == "echo":
        echo(float(args[0]) if args else 0.0)
    else:
        raise SystemExit(f"bench_agent: unknown mode {mode!r} (storm | big | echo | paced)")


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except BrokenPipeError:
        os._exit(1)  # the reader went away: leave quietly, without a traceback
