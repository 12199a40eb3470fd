"""Two hand-rolled line relays, the yardsticks the relay benchmark compares acp-proxy with.

    python benchmarks/naive_relays.py tee    LOGFILE -- AGENT ARGV...
    python benchmarks/naive_relays.py sqlite DBFILE  -- AGENT ARGV...

Both spawn the agent and run one thread per direction: ``readline`` from one side, write the
line to the other side and flush, then hand the line to a sink.

- ``tee``: the sink appends the line (after a direction byte) to a buffered file. It decodes
  and indexes nothing: the floor for any relay written this way in Python.
- ``sqlite``: the sink does ``json.loads``, one ``INSERT`` and one ``COMMIT`` per line, with
  SQLite's default settings (rollback journal, ``synchronous=FULL``) — what a first attempt at
  "record into a database" looks like.

The relay exits with the agent's status once the agent has exited and its output is drained.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import BinaryIO

Sink = Callable[[str, bytes], None]


def tee_sink(path: str) -> tuple[Sink, Callable[[], None]]:
    log = open(path, "ab")  # noqa: SIM115 - closed by the returned closer
    lock = threading.Lock()
    marks = {"c2a": b">", "a2c": b"<"}

    def sink(direction: str, line: bytes) -> None:
        with lock:
            log.write(marks[direction] + line)

    return sink, log.close


def sqlite_sink(path: str) -> tuple[Sink, Callable[[], None]]:
    conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    conn.execute(
        "CREATE TABLE IF NOT EXISTS frames (id INTEGER PRIMARY KEY, dir TEXT, raw TEXT, method TEXT, rpc_id TEXT)"
    )
    lock = threading.Lock()

    def sink(direction: str, line: bytes) -> None:
        try:
            message = json.loads(line)
        except ValueError:
            message = None
        method = rpc_id = None
        if isinstance(message, dict):
            method = message.get("method")
            rpc_id = json.dumps(message["id"]) if "id" in message else None
        with lock:
            conn.execute("BEGIN")
            conn.execute(
                "INSERT INTO frames (dir, raw, method, rpc_id) VALUES (?, ?, ?, ?)",
                (direction, line.decode(errors="replace"), method, rpc_id),
            )
            conn.execute("COMMIT")

    return sink, conn.close


def pump(source: BinaryIO, target: BinaryIO, direction: str, sink: Sink) -> None:
    try:
        for line in iter(source.readline, b""):
            target.write(line)
            target.flush()
            sink(direction, line)
    except (BrokenPipeError, ValueError):
        pass  # the other side went away
    finally:
        if direction == "c2a":
            try:
                target.close()  # client EOF -> agent EOF
            except BrokenPipeError:
                pass


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--" or argv[0] not in ("tee", "sqlite"):
        raise SystemExit(__doc__)
    mode, path, _, *agent = argv
    sink, close = (tee_sink if mode == "tee" else sqlite_sink)(path)
    proc = subprocess.Popen(agent, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    c2a = threading.Thread(target=pump, args=(sys.stdin.buffer, proc.stdin, "c2a", sink), daemon=True)
    a2c = threading.Thread(target=pump, args=(proc.stdout, sys.stdout.buffer, "a2c", sink))
    c2a.start()
    a2c.start()
    a2c.join()
    returncode = proc.wait()
    close()
    return returncode


if __name__ == "__main__":
    status = main(sys.argv[1:])
    # The c2a thread may still be blocked reading the client, holding stdin's lock: leave
    # without the interpreter's shutdown, which would wait for that lock.
    sys.stdout.flush()
    os._exit(status if status >= 0 else 128 - status)
