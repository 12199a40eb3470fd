"""The link between the relay and the recorder process: a tiny length-prefixed message format.

Owns: message types and their encoding. Must not know: trio, SQL, JSON-RPC. Kept apart so the
relay can speak it without importing anything the recorder needs (start-up time matters: the
proxy stands between an editor and its agent).

A message is a header ``<BBqI`` (type, direction, ts_ns, payload length) and the payload.
"""

from __future__ import annotations

import struct
from typing import Any

import msgspec

from .protocol.framing import Line

HEADER = struct.Struct("<BBqI")

# Message types.
DATA = 1  # payload: bytes as read from one direction; the recorder frames them
EOF = 2  # the direction reached end of file
LINE = 3  # payload: LINE_META header + meta JSON + one line the relay framed itself
META = 4  # payload: JSON object of run-row columns (agent pid, exit status, ...)
START = 5  # payload: JSON object describing the run; first message, answered by "ready"

LINE_META = struct.Struct("<I")

DIRECTIONS = ("c2a", "a2c", "stderr")
C2A, A2C, STDERR = 0, 1, 2


def encode(kind: int, direction: int, ts_ns: int, payload: bytes = b"") -> bytes:
    return HEADER.pack(kind, direction, ts_ns, len(payload)) + payload


def encode_line(direction: int, ts_ns: int, line: Line, meta: dict[str, Any]) -> bytes:
    meta = {**meta, "size": line.size, "terminated": line.terminated, "cut": line.cut}
    blob = msgspec.json.encode(meta)
    return encode(LINE, direction, ts_ns, LINE_META.pack(len(blob)) + blob + line.data)
