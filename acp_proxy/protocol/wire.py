"""JSON-RPC envelope decoding of one line, with msgspec.

Owns: turning one line's bytes into a ``Frame`` — its kind (request, notification, response,
error, batch, invalid), its id as canonical JSON text (so ``1`` and ``"1"`` stay different, and
an absent id is not a null id), its method, the ``sessionId`` it concerns, and for
``session/update`` the variant name and the id of the item it updates.

Must not know: pipes, SQL, pairing or any state across lines (that is the tracker's). It never
re-encodes a line: params and results are kept as ``msgspec.Raw`` slices of the input, and
whatever cannot be decoded is reported with its error, never dropped.

Rule: decoding is total. Any bytes give a ``Frame`` and nothing here raises: a line nested
deeper than msgspec's recursion limit is decoded from a copy with its deep members replaced by
``null`` (and says so), an id that is no JSON scalar keeps its text, and an error code that is
not a 64-bit integer is reported instead of handed on (SQLite could not store it).

Also owns the one bounded decode of a JSON value every layer above uses (``loads``,
``decode_value``, ``decode_as``): a value nested deeper than FLATTEN_DEPTH comes back with its
deeper members replaced by ``null``, so no walker above ever meets a depth that exhausts the
stack, and a frame that deep says so in its ``decode_error``.
"""

from __future__ import annotations

import itertools
import json
import operator
import re
from collections.abc import Callable
from typing import Any, TypeVar

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


class _LooseError(Struct):
    """An error member whose code msgspec cannot turn into a Python value (e.g. 100,000 digits)."""

    code: Raw = Raw()
    message: Any = None


_envelope_decoder = msgspec.json.Decoder(_Envelope)
_loose_decoder = msgspec.json.Decoder(_LooseEnvelope)
_error_decoder = msgspec.json.Decoder(_Error)
_loose_error_decoder = msgspec.json.Decoder(_LooseError)
_array_decoder = msgspec.json.Decoder(list[Raw])
_any_decoder = msgspec.json.Decoder()
_encode = msgspec.json.encode
_WHITESPACE = (b" ", b"\t", b"\r", b"\n")
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1  # what SQLite's INTEGER holds
FLATTEN_DEPTH = 200  # members nested deeper are replaced by null when msgspec's recursion limit is hit
FLATTEN_MAX_BYTES = 4 * 1024 * 1024  # past this, a too-deep line is not scanned (the scan is Python)
# A JSON string (escapes included) or one bracket: the tokens that decide nesting depth.
_DEPTH_TOKENS = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')


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
    try:
        frame = _decode(line)
    except RecursionError:
        frame = _decode_flattened(line)
    except Exception as exc:  # a msgspec or interpreter limit nobody foresaw: still a frame
        frame = invalid(f"undecodable: {type(exc).__name__}: {exc}")
    if utf8_valid is None:
        try:
            line.decode()
            utf8_valid = True
        except UnicodeDecodeError:
            utf8_valid = False
    if not utf8_valid and frame.decode_error is None:
        frame.decode_error = _describe_error(line)
    elif frame.decode_error is None and _may_be_deep(line) and too_deep(line):
        frame.decode_error = DEEP_NOTE
    return frame


def _decode_flattened(line: bytes) -> Frame:
    """A line too deep for msgspec: decode a copy whose members below FLATTEN_DEPTH are null."""
    if len(line) > FLATTEN_MAX_BYTES:
        return invalid(f"nested too deeply to decode (a {len(line):,}-byte line)")
    flat = flatten(line, FLATTEN_DEPTH)
    if flat is None:
        return invalid(_describe_error(line) or "invalid JSON: unbalanced brackets")
    try:
        frame = _decode(flat)
    except Exception as exc:
        return invalid(f"nested too deeply to decode: {type(exc).__name__}")
    note = f"nested deeper than {FLATTEN_DEPTH} levels: the deeper members were not decoded"
    frame.decode_error = f"{frame.decode_error}; {note}" if frame.decode_error else note
    return frame


_HALF_DEPTH = FLATTEN_DEPTH // 2
_BIG_LINE = 64 * 1024  # from this length on, _may_be_deep finds instead of counting
DEEP_NOTE = f"nested deeper than {FLATTEN_DEPTH} levels: the deeper members are shown as null"
# What decides nesting depth: a JSON string (with its escapes), whose brackets do not count.
_STRING_BYTES = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_STRING_TEXT = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_BRACKET_STEPS = bytes.maketrans(b"[{]}", b"\x02\x02\x00\x00")
_T = TypeVar("_T")


def _may_be_deep(line: bytes) -> bool:
    # The hot path's test: two C-speed counts, true for a tiny share of real frames. A count
    # walks every byte (~1 ms a megabyte, measured); on a big line, ``find`` (memchr) stops at
    # the (_HALF_DEPTH + 1)-th bracket or at the end, for a fraction of that.
    if len(line) < _BIG_LINE:
        return line.count(b"[") > _HALF_DEPTH or line.count(b"{") > _HALF_DEPTH
    return _more_than(line, b"[", _HALF_DEPTH) or _more_than(line, b"{", _HALF_DEPTH)


def _more_than(line: bytes, byte: bytes, limit: int) -> bool:
    """``line.count(byte) > limit``, by at most ``limit + 1`` finds."""
    at = -1
    for _ in range(limit + 1):
        at = line.find(byte, at + 1)
        if at < 0:
            return False
    return True


def too_deep(data: bytes | str) -> bool:
    """Whether ``data`` nests deeper than FLATTEN_DEPTH. Cheap: most lines have fewer brackets
    than that; for the rest, strings are cut out and the depth is the highest running sum of
    the brackets left (+1 opening, -1 closing), all in C-speed string and iterator operations."""
    if isinstance(data, str):
        if data.count("[") + data.count("{") <= FLATTEN_DEPTH:
            return False
        stripped = _STRING_TEXT.sub("", data).encode("utf-8", "surrogatepass")
    else:
        if data.count(b"[") + data.count(b"{") <= FLATTEN_DEPTH:
            return False
        stripped = _STRING_BYTES.sub(b"", data)
    steps = stripped.translate(_BRACKET_STEPS, _NOT_BRACKETS)  # opening 2, closing 0
    # After the i-th bracket the depth is (sum of steps so far) - i.
    return max(map(operator.sub, itertools.accumulate(steps), itertools.count(1)), default=0) > FLATTEN_DEPTH


def bounded(data: bytes | str) -> bytes | str:
    """``data``, or when it nests deeper than FLATTEN_DEPTH a copy with the deeper members
    replaced by ``null`` (``data`` itself when its brackets do not balance)."""
    if not too_deep(data):
        return data
    if isinstance(data, str):
        flat = flatten(data.encode("utf-8", "surrogatepass"), FLATTEN_DEPTH)
        return data if flat is None else flat.decode("utf-8", "surrogatepass")
    return flatten(data, FLATTEN_DEPTH) or data


def _bounded_call(decode_fn: Callable[[Any], _T], data: bytes | str) -> _T:
    try:
        return decode_fn(bounded(data))
    except RecursionError:  # unbalanced and deep, or called from deep in a stack
        raise msgspec.DecodeError(f"JSON nested too deeply to decode (over {FLATTEN_DEPTH} levels)") from None


def loads(data: bytes | str) -> Any:
    """``json.loads`` with depth bounded at FLATTEN_DEPTH (deeper members become null). Raises
    ValueError for invalid JSON, never RecursionError."""
    return _bounded_call(json.loads, data)


def decode_value(data: bytes | str) -> Any:
    """``msgspec.json.decode`` with depth bounded at FLATTEN_DEPTH (deeper members become null).
    Raises msgspec.DecodeError (a ValueError) for invalid JSON, never RecursionError."""
    # too_deep's first test, inline: the checker decodes every frame through here, and nearly
    # every line has fewer brackets than the bound (two calls fewer per frame).
    if isinstance(data, str):
        shallow = data.count("[") + data.count("{") <= FLATTEN_DEPTH
    else:
        shallow = data.count(b"[") + data.count(b"{") <= FLATTEN_DEPTH
    if shallow:
        try:
            return _any_decoder.decode(data)
        except RecursionError:  # called from deep in a stack
            raise msgspec.DecodeError(f"JSON nested too deeply to decode (over {FLATTEN_DEPTH} levels)") from None
    return _bounded_call(_any_decoder.decode, data)


def decode_as(decoder: msgspec.json.Decoder[_T], data: bytes | str) -> _T:
    """``decoder.decode(data)`` for a typed decoder, depth bounded the same way: tried as it is
    first (no scan on the hot path), flattened only when msgspec runs out of stack."""
    try:
        return decoder.decode(data)
    except RecursionError:
        return _bounded_call(decoder.decode, data)


def flatten(line: bytes, depth: int) -> bytes | None:
    """``line`` with every array or object nested deeper than ``depth`` replaced by ``null``;
    None when its brackets do not balance. Iterative: no nesting depth can exhaust a stack."""
    out: list[bytes] = []
    level = 0
    cut_at = -1
    kept = 0
    for match in _DEPTH_TOKENS.finditer(line):
        first = line[match.start()]
        if first == 0x22:  # a string: brackets inside it do not count
            continue
        if first in (0x5B, 0x7B):  # [ {
            level += 1
            if level == depth + 1:
                cut_at = match.start()
            continue
        if level == depth + 1:
            out.append(line[kept:cut_at])
            out.append(b"null")
            kept = match.end()
        level -= 1
        if level < 0:
            return None
    if level != 0:
        return None
    out.append(line[kept:])
    return b"".join(out)


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
        if b"\\u" in data:
            frame = _decode_without_lone_surrogates(data)
            if frame is not None:
                return frame
        return invalid(_describe_error(line) or str(exc))


def _decode_without_lone_surrogates(data: bytes) -> Frame | None:
    """JSON allows an escaped UTF-16 surrogate without its pair (``"\\ud800"``); msgspec does
    not. Classify a copy with such escapes replaced by U+FFFD, and say so."""
    fixed = _SURROGATE_ESCAPE.sub(_keep_pairs, data)
    if fixed == data:
        return None
    try:
        frame = _classify(_loose_decoder.decode(fixed))
    except Exception:
        return None
    note = "lone UTF-16 surrogate escapes, read as U+FFFD"
    frame.decode_error = f"{frame.decode_error}; {note}" if frame.decode_error else note
    return frame


# A surrogate escape, and the low half after it when the two make a valid pair.
_SURROGATE_ESCAPE = re.compile(
    rb"\\u[dD][89abAB][0-9a-fA-F]{2}(?:\\u[dD][c-fC-F][0-9a-fA-F]{2})?|\\u[dD][c-fC-F][0-9a-fA-F]{2}"
)


def _keep_pairs(match: re.Match[bytes]) -> bytes:
    return match.group() if len(match.group()) == 12 else b"\\ufffd"


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
    except RecursionError:
        return None  # valid as far as anyone can tell; the caller says what it could decode
    except Exception as exc:
        return f"undecodable: {type(exc).__name__}"
    return None


def canonical_id(raw: Raw) -> str | None:
    """The id as canonical JSON text; None when absent. Never raises: non-scalar ids, and ids
    msgspec cannot represent (100,000 digits, nesting past its limit), are kept as given."""
    if not raw:
        return None
    try:
        value = _any_decoder.decode(raw)
        if value is None or (isinstance(value, (int, str)) and not isinstance(value, bool)):
            return _encode(value).decode()
    except Exception:  # DecodeError, RecursionError, ValueError (int digits): keep the text
        pass
    return bytes(raw).decode("utf-8", "replace")


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
        err: _Error | _LooseError = _error_decoder.decode(raw)
    except Exception:
        try:
            err = _loose_error_decoder.decode(raw)
        except Exception:
            return None, None, "error member is not an object"
    message = err.message if isinstance(err.message, str) else None
    code = err.code
    if isinstance(code, Raw):
        return None, message, f"error code is not a 64-bit integer: {_clip(bytes(code))}"
    if not isinstance(code, int) or isinstance(code, bool):
        return None, message, None
    if not INT64_MIN <= code <= INT64_MAX:
        return None, message, f"error code is not a 64-bit integer: {_clip(_int_text(code))}"
    return code, message, None


def _int_text(value: int) -> bytes:
    try:
        return str(value).encode()
    except ValueError:  # more digits than Python converts (sys.set_int_max_str_digits)
        return f"an integer of {value.bit_length():,} bits".encode()


def _clip(text: bytes, keep: int = 40) -> str:
    shown = text[:keep].decode("utf-8", "replace")
    return shown if len(text) <= keep else f"{shown}... ({len(text):,} bytes)"
