"""Proxy chains: the conversation a ``proxy/successor`` envelope carries, as frames of its own.

Owns: ``Unwrapper`` — one connection's frames in, the inner frames their ``proxy/successor``
envelopes carry out (rows in the shape of ``frames`` rows, with ``hop`` one more than the
outer frame's). The rules are the proxy-chains RFD's and the schema's ``ProxySuccessorRequest``
/ ``...Notification``: the envelope's ``params`` flatten the wrapped message's ``method`` and
``params``; an outer ``id`` makes it a request, whose answer is the outer answer, "unchanged,
as the same JSON value". The recording is the conductor's link to one component (its "client"
side is the conductor): what the component sends its successor travels a2c outside and is the
inner client's (c2a) inside; what the conductor delivers from the successor travels c2a
outside and is the inner agent's (a2c). The inner request keeps the outer id (the envelope has
none of its own), so it pairs with its answer like any request.

Must not know: what the inner conversation means (its frames go through the same state machine,
checker and fold as any), SQL, rendering.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from acp_proxy.protocol import wire
from acp_proxy.protocol.vocabulary import OTHER

SUCCESSOR = "proxy/successor"


def _text(line: Any) -> str | None:
    if isinstance(line, bytes):
        return line.decode("utf-8", "replace")
    return line if isinstance(line, str) else None


class Unwrapper:
    """One connection's ``proxy/successor`` envelopes, unwrapped. ``unwrap`` every frame in relay
    order; it answers the inner frame (a ``frames``-row dict) or None. Never raises."""

    def __init__(self) -> None:
        self._pending: dict[tuple[str, str | None], int] = {}
        """(direction, outer id) of a pending ``proxy/successor`` request -> its seq."""

    def unwrap(self, row: Mapping[str, Any], line: Any = None) -> dict[str, Any] | None:
        """The inner frame of ``row`` (a ``frames`` row, or any mapping with its fields; ``line``:
        the frame's bytes when the row has no ``raw``), None when it carries none."""
        kind = row.get("kind")
        direction = row.get("dir")
        if direction not in OTHER or row.get("cut"):
            return None
        if kind in ("request", "notification"):
            if row.get("method") != SUCCESSOR:
                return None
        elif kind in ("response", "error"):
            if not self._pending or (OTHER[direction], row.get("rpc_id")) not in self._pending:
                return None
        else:
            return None
        text = _text(row.get("raw") if line is None else line)
        if text is None:
            return None
        try:
            outer = wire.decode_value(text)  # depth-bounded, like every decode above the wire
        except msgspec.DecodeError:
            return None
        if not isinstance(outer, dict):
            return None
        inner: dict[str, Any] = {"jsonrpc": "2.0"}
        if kind in ("request", "notification"):
            params = outer.get("params")
            method = params.get("method") if isinstance(params, dict) else None
            if not isinstance(method, str):
                return None  # the schema check says what is wrong with the envelope
            if kind == "request":
                inner["id"] = outer.get("id")
                self._pending[(direction, row.get("rpc_id"))] = row.get("seq") or 0
            inner["method"] = method
            assert isinstance(params, dict)
            if params.get("params") is not None:
                inner["params"] = params["params"]
        else:
            self._pending.pop((OTHER[direction], row.get("rpc_id")), None)
            inner["id"] = outer.get("id")
            if "error" in outer:
                inner["error"] = outer["error"]
            else:
                inner["result"] = outer.get("result")
        data = msgspec.json.encode(inner)
        frame = wire.decode(data)
        return {
            "run_id": row.get("run_id"),
            "seq": row.get("seq"),
            "ts_ns": row.get("ts_ns"),
            "dir": OTHER[direction],
            "raw": data.decode(),
            "raw_bytes": len(data),
            "cut": 0,
            "kind": frame.kind,
            "method": frame.method,
            "rpc_id": frame.rpc_id,
            "session_id": frame.session_id,
            "update_kind": frame.update_kind,
            "item_id": getattr(frame, "item_id", None),
            "forwarded": row.get("forwarded", 1),
            "fault": None,
            "batch_seq": None,
            "hop": (row.get("hop") or 0) + 1,
        }
