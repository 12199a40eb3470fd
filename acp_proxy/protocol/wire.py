"""JSON-RPC envelope decoding of one line, with msgspec.

Owns: turning one line's bytes into a ``Frame`` — its kind (request, notification, response,
error, batch, invalid), its id as canonical JSON text (so ``1`` and ``"1"`` stay different, and
an absent id is not a null id), its method, the ``sessionId`` it concerns, and for
``session/update`` the variant name and the id of the item it updates.

Must not know: pipes, SQL, pairing or any state across lines (that is the tracker's). It never
re-encodes a line: params and results are kept as ``msgspec.Raw`` slices of the input, and
whatever cannot be decoded is reported with its error, never dropped.
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import UNSET, Raw, Struct, UnsetType

# Keys naming the entity a session/update variant upserts, in the order they are looked for.
# (v2 plan_update nests its planId inside `plan`; handled below.)
ITEM_ID_KEYS = (
    "messageId",
    "toolCallId",
    "planId",
    "terminalId",
    "compactionId",
    "subagentSessionId",
    "noticeId",
)

KINDS = ("request", "notification", "response", "error", "batch", "invalid")


class _Error(Struct):
    code: Any = None
    message: Any = None


class _Update(Struct):
    sessionUpdate: Any = UNSET
    messageId: Any = UNSET
    toolCallId: Any = UNSET
    planId: Any = UNSET
    terminalId: Any = UNSET
    compactionId: Any = UNSET
    subagentSessionId: Any = UNSET
    noticeId: Any = UNSET
    plan: Any = UNSET


class _Params(Struct):
    sessionId: Any = UNSET
    update: _Update | UnsetType = UNSET


class _Envelope(Struct):
    # Raw keeps a member as a slice of the input; an absent member is an empty Raw, an explicit
    # null is Raw(b"null") — that is how absent and null stay apart. Params are decoded in the
    # same pass (unknown members are skipped by msgspec without building them), which is what
    # keeps decoding near half a microsecond per frame.
    id: Raw = Raw()
    method: Any = UNSET
    params: _Params | UnsetType = UNSET
    result: Raw = Raw()
    error: Raw = Raw()


class _LooseEnvelope(Struct):
    """Fallback for params that are not ACP-shaped (an array, a string, odd member types)."""

    id: Raw = Raw()
    method: Any = UNSET
    result: Raw = Raw()
    error: Raw = Raw()


_envelope_decoder = msgspec.json.Decoder(_Envelope)
_loose_decoder = msgspec.json.Decoder(_LooseEnvelope)
_error_decoder = msgspec.json.Decoder(_Error)
_array_decoder = msgspec.json.Decoder(list[Raw])
_any_decoder = msgspec.json.Decoder()
_encode = msgspec.json.encode
_WHITESPACE = (b" ", b"\t", b"\r", b"\n")


class Frame(Struct, gc=False):
    """What one line (or one element of a batch line) says at the JSON-RPC level."""

    kind: str
    rpc_id: str | None = None
    """The id as canonical JSON text (``1`` and ``"1"`` differ); None when absent."""
    method: str | None = None
    result: Raw | None = None
    error_code: int | None = None
    error_message: str | None = None
    session_id: str | None = None
    update_kind: str | None = None
    item_id: str | None = None
    decode_error: str | None = None
    elements: list[tuple[bytes, Frame]] | None = None
    """For a batch line: each element's bytes and its own decoded frame."""


def invalid(reason: str) -> Frame:
    return Frame("invalid", decode_error=reason)


def decode(line: bytes, *, utf8_valid: bool | None = None) -> Frame:
    """Decode one line (without its newline). Never raises.

    msgspec does not validate UTF-8 inside members it skips, so a line that decodes can still
    hold invalid UTF-8: such a frame keeps its kind (a response is still an answer) and carries
    the decode error. ``utf8_valid`` lets a caller that already checked the line say so.
    """
    frame = _decode(line)
    if utf8_valid is None:
        try:
            line.decode()
            utf8_valid = True
        except UnicodeDecodeError:
            utf8_valid = False
    if not utf8_valid and frame.decode_error is None:
        frame.decode_error = _describe_error(line)
    return frame


def _decode(line: bytes) -> Frame:
    start = line[:1]
    if start in _WHITESPACE:
        start = line.lstrip()[:1]
    if start == b"[":
        return _decode_batch(line)
    if start != b"{":
        if not start:
            return invalid("empty line")
        return invalid(_describe_error(line) or "not a JSON object")
    return _decode_envelope(line, line)


def decode_object(raw: bytes) -> Frame:
    """Decode one element of a batch (already known to be valid JSON)."""
    if raw.lstrip()[:1] != b"{":
        return invalid("batch element is not a JSON object")
    return _decode_envelope(raw, raw)


def _decode_envelope(data: bytes, line: bytes) -> Frame:
    try:
        return _classify(_envelope_decoder.decode(data))
    except msgspec.DecodeError:
        pass
    try:
        return _classify(_loose_decoder.decode(data))
    except msgspec.DecodeError as exc:
        return invalid(_describe_error(line) or str(exc))


def _decode_batch(line: bytes) -> Frame:
    try:
        items = _array_decoder.decode(line)
    except msgspec.DecodeError as exc:
        return invalid(_describe_error(line) or str(exc))
    elements = [(raw, decode_object(raw)) for raw in map(bytes, items)]
    return Frame("batch", elements=elements, decode_error=None if items else "empty batch")


def _describe_error(line: bytes) -> str | None:
    """Name the common causes a person would want to see first."""
    try:
        line.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"invalid UTF-8 at byte {exc.start}"
    try:
        _any_decoder.decode(line)
    except msgspec.DecodeError as exc:
        return f"invalid JSON: {exc}"
    return None


def canonical_id(raw: Raw) -> str | None:
    """The id as canonical JSON text; None when absent. Non-scalar ids are kept as given."""
    if not raw:
        return None
    value = _any_decoder.decode(raw)
    if value is None or (isinstance(value, (int, str)) and not isinstance(value, bool)):
        return _encode(value).decode()
    return bytes(raw).decode()


def _classify(env: _Envelope | _LooseEnvelope) -> Frame:
    # Built in one constructor call: setting Struct fields one by one costs more than decoding.
    method = env.method
    rpc_id = canonical_id(env.id) if env.id else None
    if method is not UNSET:
        kind = "request" if env.id else "notification"
        if not isinstance(method, str):
            return Frame("invalid", rpc_id=rpc_id, decode_error="method is not a string")
        params = getattr(env, "params", UNSET)
        if params is UNSET:
            return Frame(kind, rpc_id=rpc_id, method=method)
        session_id = params.sessionId if isinstance(params.sessionId, str) else None
        update = params.update
        if update is UNSET:
            return Frame(kind, rpc_id=rpc_id, method=method, session_id=session_id)
        update_kind = update.sessionUpdate if isinstance(update.sessionUpdate, str) else None
        return Frame(
            kind,
            rpc_id=rpc_id,
            method=method,
            session_id=session_id,
            update_kind=update_kind,
            item_id=_item_id(update),
        )
    if env.error:
        code, message, problem = _read_error(env.error)
        return Frame("error", rpc_id=rpc_id, error_code=code, error_message=message, decode_error=problem)
    if env.result:
        return Frame("response", rpc_id=rpc_id, result=env.result)
    return Frame("invalid", rpc_id=rpc_id, decode_error="neither a request, a notification nor a response")


def _item_id(update: _Update) -> str | None:
    # Spelled out rather than looped over ITEM_ID_KEYS: this runs for every update of a chunk
    # storm, and direct attribute reads cost a third of getattr-by-name.
    value = update.messageId
    if value is UNSET:
        value = update.toolCallId
        if value is UNSET:
            value = update.planId
            if value is UNSET:
                value = update.terminalId
                if value is UNSET:
                    value = update.compactionId
                    if value is UNSET:
                        value = update.subagentSessionId
                        if value is UNSET:
                            value = update.noticeId
                            if value is UNSET:
                                return _plan_id(update.plan)
    return value if isinstance(value, str) else None


def _plan_id(plan: Any) -> str | None:
    if isinstance(plan, dict):
        plan_id = plan.get("planId")
        if isinstance(plan_id, str):
            return plan_id
    return None


def _read_error(raw: Raw) -> tuple[int | None, str | None, str | None]:
    try:
        err = _error_decoder.decode(raw)
    except msgspec.DecodeError:
        return None, None, "error member is not an object"
    code = err.code if isinstance(err.code, int) and not isinstance(err.code, bool) else None
    message = err.message if isinstance(err.message, str) else None
    return code, message, None
