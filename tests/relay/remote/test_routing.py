"""The pure parts of the bridges: the SDK server's routing rules (``protocol.http_routing``) and
``run --connect``'s header words (``cli.connect_options``)."""

from __future__ import annotations

import pytest

from acp_proxy.cli.connect_options import parse_headers, recorded_argv
from acp_proxy.errors import UsageError
from acp_proxy.protocol import http_routing as routing


def test_routing_reads_the_fields_it_routes_by_and_nothing_else() -> None:
    prompt = routing.read(b'{"jsonrpc":"2.0","id":7,"method":"session/prompt","params":{"sessionId":"s1"}}')
    assert (prompt.is_request, prompt.id_key, prompt.session) == (True, "7", "s1")
    assert routing.session_header(prompt) == "s1"
    load = routing.read(b'{"jsonrpc":"2.0","id":"8","method":"session/load","params":{"sessionId":"s1"}}')
    assert routing.session_header(load) is None  # it attaches a session: no session stream yet
    assert routing.is_initialize(routing.read(b'{"jsonrpc":"2.0","id":0,"method":"initialize"}'))
    assert not routing.is_initialize(routing.read(b'{"jsonrpc":"2.0","method":"initialize"}'))
    for junk in (b"", b"{not json", b"[1]", b"42", b"\xff\xfe"):
        assert routing.read(junk).json is False


def test_routes_send_each_agent_message_where_the_sdk_server_does() -> None:
    routes = routing.Routes()
    new = b'{"jsonrpc":"2.0","id":1,"result":{"sessionId":"s1"}}'
    assert routes.to_client(routing.read(new)) == routing.CONNECTION  # the client has no s1 stream yet
    assert routes.sessions == {"s1"}
    routes.from_client(routing.read(b'{"jsonrpc":"2.0","id":2,"method":"session/prompt","params":{"sessionId":"s1"}}'))
    update = b'{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{}}}'
    assert routes.to_client(routing.read(update)) == "s1"
    assert routes.to_client(routing.read(b'{"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}}')) == "s1"
    assert routes.to_client(routing.read(b'{"jsonrpc":"2.0","id":2,"result":{}}')) == routing.CONNECTION
    unknown = b'{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"zz"}}'
    assert routes.to_client(routing.read(unknown)) == routing.CONNECTION


def test_peek_names_the_stream_to_client_will_and_notes_nothing() -> None:
    """A fault rule looks where a frame would go (to end or cut that stream) before it goes."""
    routes = routing.Routes()
    routes.to_client(routing.read(b'{"jsonrpc":"2.0","id":1,"result":{"sessionId":"s1"}}'))
    routes.from_client(routing.read(b'{"jsonrpc":"2.0","id":2,"method":"session/prompt","params":{"sessionId":"s1"}}'))
    messages = [
        b'{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{}}}',
        b'{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"zz"}}',
        b'{"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}}',
        b'{"jsonrpc":"2.0","id":2,"result":{}}',  # answered once already: the connection's
        b'{"jsonrpc":"2.0","id":3,"result":{"sessionId":"s2"}}',
    ]
    for message in messages:
        fields = routing.read(message)
        before = (set(routes.sessions), dict(routes.pending))
        seen = routes.peek(fields)
        assert (routes.sessions, routes.pending) == before
        assert seen == routes.to_client(fields), message


def test_a_message_becomes_one_line_without_a_change_of_meaning() -> None:
    assert routing.one_line(b'{"a": 1}') == b'{"a": 1}'
    assert routing.one_line(b'{\r\n  "a": "x\\ny"\n}') == b'{   "a": "x\\ny" }'


def test_an_http_refusal_of_a_request_is_answered_with_a_json_rpc_error() -> None:
    made = routing.error_response(b'{"jsonrpc":"2.0","id":"r1","method":"x"}', -32603, "nope")
    assert made == b'{"jsonrpc":"2.0","id":"r1","error":{"code":-32603,"message":"nope"}}'
    assert routing.error_response(b'{"jsonrpc":"2.0","method":"x"}', -32603, "nope") is None
    assert routing.error_response(b"{junk", -32603, "nope") is None


def test_headers_are_name_value_pairs_and_the_recorded_argv_masks_every_value() -> None:
    pairs = parse_headers(("Authorization: Bearer t0k", "X-Team:  a:b "), None)
    assert pairs == [("Authorization", "Bearer t0k"), ("X-Team", "a:b")]
    assert parse_headers((), "Bearer from-env") == [("Authorization", "Bearer from-env")]
    assert parse_headers(("authorization: given",), "Bearer from-env") == [("authorization", "given")]
    argv = recorded_argv("wss://u:pw@h/acp?token=t1", [*pairs, ("Authorization", "Bearer from-env")])
    assert argv[:4] == ["acp-proxy", "run", "--connect", "wss://***@h/acp?token=***"]
    assert "t0k" not in " ".join(argv) and "from-env" not in " ".join(argv) and "pw" not in " ".join(argv)
    for bad in ("no colon", ": empty name", "Bad Name: x", "X: line\nbreak"):
        with pytest.raises(UsageError):
            parse_headers((bad,), None)
