"""One row of the ``frames`` table, as the recorder builds it and the tracker annotates it.

Owns: the in-memory shape of a recorded frame, shared by the recorder (which fills the wire
facts), the tracker (which adds protocol facts: pairing, replay, unknown variants) and the
filter predicate (which reads it for live filtering), and the frames table's columns
(``FRAME_COLUMNS``: names, types and order, which the store's schema is made from). Its
attributes are exactly those columns.

Must not know: SQL, pipes, or how any field is computed. Import-cheap on purpose (no msgspec):
the store imports it on every query command's path.
"""

from __future__ import annotations

from operator import attrgetter, is_not

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on a query's path
if TYPE_CHECKING:
    from acp_proxy.protocol.wire import Frame

# Column order of the frames table is the order the recorder's INSERT uses.
FRAME_COLUMNS: dict[str, type] = {
    "run_id": int,
    "seq": int,
    "ts_ns": int,
    "dir": str,  # c2a | a2c | stderr: the way the line travelled
    "raw": str,  # the line without its "\n" (a "\r" stays); NULL when not valid UTF-8
    "raw_bytes": bytes,  # the line when it is not valid UTF-8
    "size": int,  # full length in bytes, without "\n"
    "terminated": int,  # 0 for a last line that ended at EOF without "\n"
    "cut": int,  # 1 when raw holds only the first --max-record-bytes of the line
    "kind": str,  # request | notification | response | error | batch | invalid | stderr
    "method": str,  # responses carry their request's method
    "rpc_id": str,  # JSON text, so 1 and "1" differ
    "session_id": str,
    "update_kind": str,  # session/update variant
    "item_id": str,  # messageId / toolCallId / planId / terminalId / compactionId ...
    "request_seq": int,  # on responses: the seq of the request answered
    "latency_ns": int,  # on responses: time since the request
    "error_code": int,
    "error_message": str,
    "replay": int,  # 1: history sent inside a session/load or session/resume replay window
    "batch_seq": int,  # on a batch element: the seq of the batch line it came in
    "batch_index": int,  # on a batch element: its position in the batch
    "forwarded": int,  # 0 when the proxy did not pass the frame on (see note)
    "unanswered": int,  # on requests: 1 when no response came before the run ended
    "unknown": str,  # extension | future, for methods and update variants not in the schema
    "note": str,  # why a frame was flagged, dropped or not forwarded
    "fault": str,  # the fault applied to this frame, if any
    "decode_error": str,
    "origin": str,  # "proxy" on lines acp-proxy wrote itself (injected, error replies); else NULL
    # Remote ACP (``acp-proxy serve``); NULL on stdio runs:
    "transport": str,  # websocket | http: how the message travelled
    "connection": str,  # the Acp-Connection-Id the message belongs to
    "stream": str,  # websocket | post | sse | sse:<sessionId>: which HTTP exchange carried it
}
COLUMNS = tuple(FRAME_COLUMNS)
_values = attrgetter(*COLUMNS)
_NONES = (None,) * len(COLUMNS)


class FrameRecord:
    # ``findings``: optional (rule_id, severity) pairs a check found on this frame, for the
    # filter's ``finding`` term; left unset (no findings) unless someone checked the frame.
    # ``mark``: a person's mark on the frame (its comment, "" for none), for the ``marked`` and
    # ``comment:`` terms; left unset (unmarked) on a live frame.
    __slots__ = (*COLUMNS, "findings", "frame", "line", "mark")

    def __init__(self, run_id: int, seq: int, ts_ns: int, direction: str, line: bytes, frame: Frame | None) -> None:
        self.run_id = run_id
        self.seq = seq
        self.ts_ns = ts_ns
        self.dir = direction
        self.line = line
        """The bytes recorded for the line (a prefix when ``cut``)."""
        self.frame = frame
        """The decoded envelope; None for stderr lines."""
        self.raw: str | None = None
        self.raw_bytes: bytes | None = None
        self.size = len(line)
        self.terminated = 1
        self.cut = 0
        self.kind: str | None = None
        self.method: str | None = None
        self.rpc_id: str | None = None
        self.session_id: str | None = None
        self.update_kind: str | None = None
        self.item_id: str | None = None
        self.request_seq: int | None = None
        self.latency_ns: int | None = None
        self.error_code: int | None = None
        self.error_message: str | None = None
        self.replay = 0
        self.batch_seq: int | None = None
        self.batch_index: int | None = None
        self.forwarded = 1
        self.unanswered: int | None = None
        self.unknown: str | None = None
        self.note: str | None = None
        self.fault: str | None = None
        self.decode_error: str | None = None
        self.origin: str | None = None
        self.transport: str | None = None
        self.connection: str | None = None
        self.stream: str | None = None
        if frame is not None:
            self.kind = frame.kind
            self.method = frame.method
            self.rpc_id = frame.rpc_id
            self.session_id = frame.session_id
            self.update_kind = frame.update_kind
            self.item_id = frame.item_id
            self.error_code = frame.error_code
            self.error_message = frame.error_message
            self.decode_error = frame.decode_error

    def row(self) -> tuple:
        return _values(self)

    def sparse_row(self) -> tuple[tuple[bool, ...], tuple]:
        """The row's shape (which columns are not NULL) and all its values.

        Binding a None costs Python's sqlite3 module two internal exceptions (about 0.4 µs
        each, measured), more than inserting the rest of the row: the recorder groups rows by
        shape and binds only the columns that hold a value.
        """
        values = _values(self)
        return tuple(map(is_not, values, _NONES)), values

    def as_dict(self) -> dict:
        return {name: getattr(self, name) for name in COLUMNS}

    def __repr__(self) -> str:
        return f"FrameRecord(seq={self.seq}, dir={self.dir}, kind={self.kind}, method={self.method})"
