"""The payloads ``ConnectionState`` decodes: the rare frames whose payload changes the state.

Owns: the msgspec shapes of ``initialize`` and its answer, session set-up requests and answers,
prompt answers, ``$/cancel_request``, ``state_update`` and ``session_info_update``; a total decoder
(None when a payload does not fit, never an exception); the pattern that pairs a line recorded
only in part by the id in its head; and what each ``session/update`` variant does to the state
(one dict lookup on the hot path: ``ACTIONS``).

Must not know: the state machine, events, rows, rendering, message content.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec
from msgspec import UNSET, Raw, Struct

from acp_proxy.protocol import vocabulary as acp
from acp_proxy.protocol import wire

# Members are Any (or Raw, to keep a JSON object's text verbatim): a peer sending a number where a
# string belongs must not make the frame undecodable; the handlers check types themselves.


class _InitParams(Struct):
    protocolVersion: Any = None
    clientInfo: Raw = Raw()
    info: Raw = Raw()
    clientCapabilities: Raw = Raw()
    capabilities: Raw = Raw()


class _InitResult(Struct):
    protocolVersion: Any = None
    agentInfo: Raw = Raw()
    info: Raw = Raw()
    agentCapabilities: Raw = Raw()
    capabilities: Raw = Raw()
    authMethods: Raw = Raw()


class InitRequest(Struct):
    params: _InitParams | None = None


class InitResponse(Struct):
    result: _InitResult | None = None


class _Params(Struct):
    cwd: Any = None
    replayFrom: Any = None
    title: Any = UNSET
    requestId: Raw = Raw()


class Request(Struct):
    params: _Params | None = None


class _Result(Struct):
    sessionId: Any = None
    stopReason: Any = UNSET
    messageId: Any = UNSET


class Response(Struct):
    result: _Result | None = None


class _UpdateBody(Struct):
    state: Any = None
    stopReason: Any = None
    title: Any = UNSET


class _UpdateParams(Struct):
    update: _UpdateBody | None = None


class Update(Struct):
    params: _UpdateParams | None = None


_decoders: dict[type, msgspec.json.Decoder[Any]] = {}


def decode(kind: type, line: bytes) -> Any:
    """The frame decoded as ``kind``; None when it does not fit (never raises: a frame nested
    past msgspec's limit is decoded with its deep members null, like the wire layer does)."""
    decoder = _decoders.get(kind)
    if decoder is None:
        decoder = _decoders[kind] = msgspec.json.Decoder(kind)
    try:
        return wire.decode_as(decoder, line)
    except (msgspec.DecodeError, UnicodeError):  # ValidationError included
        return None


def json_text(raw: Raw) -> str | None:
    """A member's JSON text exactly as sent (absent and null give None)."""
    if not raw:
        return None
    data = bytes(raw)
    return None if data == b"null" else data.decode("utf-8", "replace")


def as_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def as_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


# A line recorded only in part (--max-record-bytes) does not decode; when its head shows it to be
# a response, its id still pairs it, so a huge result is not reported as a missing answer.
CUT_RESPONSE = re.compile(
    rb'\s*\{\s*(?:"jsonrpc"\s*:\s*"2\.0"\s*,\s*)?"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.)*"|null)\s*,'
    rb'\s*(?:"jsonrpc"\s*:\s*"2\.0"\s*,\s*)?"(?:result|error)"\s*:'
)

# -- what a session/update variant does to the state (one dict lookup on the hot path) ----------------
ACT_STATE = 1  # v2 state_update: work and idle
ACT_TITLE = 2  # session_info_update: the title
ACT_INFER = 4  # only one version has it: evidence of the version spoken when none was negotiated


def _variant_actions() -> tuple[dict[str, int], dict[str, int]]:
    v1, v2 = acp.vocabulary(1).updates, acp.vocabulary(2).updates
    actions: dict[str, int] = {}
    evidence: dict[str, int] = {}
    for name, version in [*((n, 1) for n in v1 - v2), *((n, 2) for n in v2 - v1)]:
        actions[name] = ACT_INFER
        evidence[name] = version
    actions["state_update"] = actions.get("state_update", 0) | ACT_STATE
    actions["session_info_update"] = actions.get("session_info_update", 0) | ACT_TITLE
    return actions, evidence


ACTIONS, EVIDENCE = _variant_actions()
LIVE_ONLY = acp.vocabulary().live_only
RESTORES = ("session/load", "session/resume")
CREATES = ("session/new", "session/fork")
