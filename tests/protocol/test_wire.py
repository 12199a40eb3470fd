"""Envelope decoding: kinds, ids (absent is not null, 1 is not "1"), methods, update facts."""

from __future__ import annotations

import json

import pytest

from acp_proxy.protocol.wire import decode
from tests.conftest import TRAFFIC


def test_request_notification_response_error() -> None:
    assert decode(b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}').kind == "request"
    assert decode(b'{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"s"}}').kind == "notification"
    assert decode(b'{"jsonrpc":"2.0","id":1,"result":null}').kind == "response"
    err = decode(b'{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"Method not found"}}')
    assert (err.kind, err.error_code, err.error_message) == ("error", -32601, "Method not found")


def test_absent_id_differs_from_null_id_and_numbers_differ_from_strings() -> None:
    assert decode(b'{"jsonrpc":"2.0","method":"x"}').rpc_id is None
    assert decode(b'{"jsonrpc":"2.0","id":null,"method":"x"}').rpc_id == "null"
    assert decode(b'{"jsonrpc":"2.0","id":null,"method":"x"}').kind == "request"
    assert decode(b'{"id":1,"result":{}}').rpc_id == "1"
    assert decode(b'{"id":"1","result":{}}').rpc_id == '"1"'
    assert decode(b'{"id":"\\u0031","result":{}}').rpc_id == '"1"'


def test_session_update_variant_session_and_item() -> None:
    frame = decode(
        b'{"jsonrpc":"2.0","method":"session/update","params":{"update":{"toolCallId":"call_1",'
        b'"sessionUpdate":"tool_call_update","status":"completed"},"sessionId":"sess_1"}}'
    )
    assert (frame.session_id, frame.update_kind, frame.item_id) == ("sess_1", "tool_call_update", "call_1")
    plan = decode(
        b'{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":'
        b'{"sessionUpdate":"plan_update","plan":{"type":"items","planId":"plan-1","entries":[]}}}}'
    )
    assert plan.item_id == "plan-1"
    message = decode(
        b'{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":'
        b'{"sessionUpdate":"agent_message","messageId":"msg_1","content":[]}}}'
    )
    assert message.item_id == "msg_1"


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (b"", "empty line"),
        (b'{"a":', "invalid JSON"),
        (b"\xff\xfe{}", "invalid UTF-8 at byte 0"),
        (b"hello", "invalid JSON"),
        (b'{"jsonrpc":"2.0"}', "neither a request"),
        (b'{"jsonrpc":"2.0","method":5}', "method is not a string"),
    ],
)
def test_invalid_lines_say_why(line: bytes, reason: str) -> None:
    frame = decode(line)
    assert frame.kind == "invalid"
    assert frame.decode_error is not None and reason in frame.decode_error


def test_invalid_utf8_inside_a_valid_envelope_keeps_the_kind_and_says_why() -> None:
    frame = decode(b'{"jsonrpc":"2.0","id":4,"result":{"text":"caf\xc3"}}')
    assert (frame.kind, frame.rpc_id) == ("response", "4")
    assert frame.decode_error == "invalid UTF-8 at byte 45"


def test_batch_decodes_each_element() -> None:
    frame = decode(b'[{"jsonrpc":"2.0","id":1,"method":"a"}, {"jsonrpc":"2.0","id":1,"result":{}}, 7]')
    assert frame.kind == "batch"
    assert frame.elements is not None
    assert [(raw, f.kind) for raw, f in frame.elements] == [
        (b'{"jsonrpc":"2.0","id":1,"method":"a"}', "request"),
        (b'{"jsonrpc":"2.0","id":1,"result":{}}', "response"),
        (b"7", "invalid"),
    ]


def test_params_of_another_shape_are_still_a_request() -> None:
    frame = decode(b'{"jsonrpc":"2.0","id":3,"method":"_vendor/x","params":[1,2]}')
    assert (frame.kind, frame.method, frame.rpc_id) == ("request", "_vendor/x", "3")


def _expected_kind(message: dict) -> str:
    if "method" in message:
        return "request" if "id" in message else "notification"
    return "error" if "error" in message else "response"


@pytest.mark.parametrize("path", sorted(TRAFFIC.glob("*.jsonl")), ids=lambda p: p.stem)
def test_recorded_fixtures_decode_with_the_right_kinds_and_ids(path) -> None:
    for line in path.read_text().splitlines():
        entry = json.loads(line)
        message = json.loads(entry["frame"])
        frame = decode(entry["frame"].encode())
        assert frame.kind == _expected_kind(message)
        assert frame.rpc_id == (json.dumps(message["id"]) if "id" in message else None)
        assert frame.method == message.get("method")
        params = message.get("params") or {}
        assert frame.session_id == params.get("sessionId")
        if message.get("method") == "session/update":
            assert frame.update_kind == params["update"]["sessionUpdate"]
