"""Export formats for recorded frames: our own JSONL, and formats other viewers read.

Owns: turning frame rows (dicts, as ``queries`` returns them) into lines of an export file.
Must not know: SQL, files, click. Secrets are masked by the ``Redactor`` it is given (the
command's default; ``--no-redact`` gives a disabled one), and the header says which: either way
an export holds the conversation, file contents included, which is why files are created 0600.

Formats:

- ``jsonl`` — acp-proxy's own: a self-describing header line, then one object per frame with
  every recorded column; ``raw`` is the frame verbatim (``raw_base64`` when it is not UTF-8).
- ``jsons`` — the trace format of the ACP conductor's trace viewer (``sacp-trace-viewer``):
  one event per line (``request`` / ``response`` / ``notification`` / ``trace``), ``ts`` in
  seconds since the first frame, ``from``/``to`` naming ``client`` and ``agent``.
- ``inspector`` — the ACP Inspector's trace JSONL: ``ts`` (Unix ms), ``direction``
  (``fromClient`` / ``fromAgent``), ``json`` (the frame as a string).
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Iterator
from typing import Any

import msgspec

from acp_proxy import __version__
from acp_proxy.limits import EXPORT_FORMAT
from acp_proxy.protocol import wire
from acp_proxy.protocol.redact import Redactor
from acp_proxy.protocol.vocabulary import RECEIVER, SENDER

FORMATS = ("jsonl", "jsons", "inspector")
WARNING = "nothing is redacted: this file holds the whole conversation, including file contents and secrets"
REDACTED = "secrets are masked (--no-redact keeps them); this file still holds the conversation and file contents"


def warning(redactor: Redactor) -> str:
    return REDACTED if redactor.enabled else WARNING


_json = msgspec.json.Encoder()


def export_lines(
    fmt: str, frames: Iterable[dict[str, Any]], header: dict[str, Any], redactor: Redactor
) -> Iterator[bytes]:
    """The lines of an export (without newlines), secrets masked by ``redactor`` in every frame
    and in the runs of the header (a disabled one masks nothing)."""
    if redactor.enabled:
        frames = (redactor.frame_row(row) for row in frames)
        header = {**header, "runs": [redactor.run_row(run) for run in header.get("runs", [])]}
    if fmt == "jsonl":
        return _jsonl(frames, header, warning(redactor))
    if fmt == "jsons":
        return _jsons(frames)
    if fmt == "inspector":
        return _inspector(frames)
    raise ValueError(f"unknown export format {fmt!r} (one of: {', '.join(FORMATS)})")


def frame_object(row: dict[str, Any]) -> dict[str, Any]:
    """One frame as a JSON-able object: every column, raw bytes made JSON-safe."""
    obj = {key: value for key, value in row.items() if value is not None and key != "raw_bytes"}
    if row.get("raw_bytes") is not None:
        obj["raw_base64"] = base64.b64encode(row["raw_bytes"]).decode()
    return obj


def _jsonl(frames: Iterable[dict[str, Any]], header: dict[str, Any], warn: str) -> Iterator[bytes]:
    yield _json.encode({"acp_proxy_export": EXPORT_FORMAT, "version": __version__, "warning": warn, **header})
    for row in frames:
        yield _json.encode(frame_object(row))


def _payload(row: dict[str, Any]) -> dict[str, Any] | None:
    if row.get("raw") is None:
        return None
    try:
        value = wire.decode_value(row["raw"])
    except msgspec.DecodeError:
        return None
    return value if isinstance(value, dict) else None


def _jsons(frames: Iterable[dict[str, Any]]) -> Iterator[bytes]:
    start: int | None = None
    for row in frames:
        if row.get("batch_seq") is not None:
            continue  # the batch line's elements are exported one by one below
        if start is None:
            start = row["ts_ns"]
        ts = (row["ts_ns"] - start) / 1e9
        if row["dir"] == "stderr":
            yield _json.encode(
                {"ts": ts, "type": "trace", "component": "agent", "level": "info", "message": row.get("raw") or ""}
            )
            continue
        sender, receiver = SENDER.get(row["dir"], "agent"), RECEIVER.get(row["dir"], "client")
        message = _payload(row)
        if message is None:
            yield _json.encode(
                {
                    "ts": ts,
                    "type": "trace",
                    "component": sender,
                    "level": "warn",
                    "message": f"not JSON-RPC: {row.get('decode_error') or ''}: {row.get('raw') or ''}",
                }
            )
            continue
        kind = row.get("kind")
        base = {"ts": ts, "from": sender, "to": receiver}
        if kind in ("request", "notification"):
            event = {
                **base,
                "type": kind,
                "protocol": "acp",
                "method": message.get("method"),
                "session": row.get("session_id"),
                "params": message.get("params") or {},
            }
            if kind == "request":
                event["id"] = message.get("id")
            yield _json.encode(event)
        elif kind in ("response", "error"):
            yield _json.encode(
                {
                    **base,
                    "type": "response",
                    "id": message.get("id"),
                    "is_error": kind == "error",
                    "payload": message.get("error") if kind == "error" else message.get("result"),
                }
            )


def _inspector(frames: Iterable[dict[str, Any]]) -> Iterator[bytes]:
    for row in frames:
        if row["dir"] == "stderr" or row.get("batch_seq") is not None or row.get("raw") is None:
            continue
        yield _json.encode(
            {
                "ts": row["ts_ns"] // 1_000_000,
                "direction": "fromClient" if row["dir"] == "c2a" else "fromAgent",
                "json": row["raw"].rstrip("\r"),
            }
        )
