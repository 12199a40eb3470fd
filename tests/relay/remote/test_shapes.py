"""The plain facts of the remote wire, alone: SSE event boundaries, masking, names."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from acp_proxy.relay.remote import shapes


def feed_all(chunks: list[bytes]) -> list[bytes]:
    events = shapes.SseEvents()
    return [message for chunk in chunks for message in events.feed(chunk)]


STREAM = b': keepalive\n\ndata: {"a":1}\n\ndata: {"b":\ndata: 2}\r\n\r\nevent: x\ndata:{"c":3}\r\rid: 9\n\n'
MESSAGES = [b'{"a":1}', b'{"b":\n2}', b'{"c":3}']


def test_sse_events_are_the_data_of_each_event_comments_and_empty_events_skipped() -> None:
    assert feed_all([STREAM]) == MESSAGES


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7, 64])
def test_sse_events_do_not_depend_on_where_the_chunks_are_cut(size: int) -> None:
    chunks = [STREAM[i : i + size] for i in range(0, len(STREAM), size)]
    assert feed_all(chunks) == MESSAGES


def test_an_event_without_its_blank_line_is_not_a_message_yet() -> None:
    events = shapes.SseEvents()
    assert events.feed(b'data: {"a":1}\n') == []
    assert events.feed(b"\n") == [b'{"a":1}']


@pytest.mark.parametrize(
    ("url", "masked"),
    [
        ("https://user:pw@agent.example/acp?token=abc&x=1", "https://***@agent.example/acp?token=***&x=***"),
        ("http://127.0.0.1:8000/acp", "http://127.0.0.1:8000/acp"),
        ("wss://agent.example/acp#frag", "wss://agent.example/acp"),
    ],
)
def test_mask_url_hides_user_information_and_query_values(url: str, masked: str) -> None:
    assert shapes.mask_url(url) == masked


def test_hop_by_hop_headers_and_the_ones_connection_names_are_not_forwarded() -> None:
    headers = [
        (b"Connection", b"keep-alive, X-Hop"),
        (b"X-Hop", b"1"),
        (b"Host", b"127.0.0.1:1"),
        (b"Authorization", b"Bearer t"),
        (b"Content-Length", b"3"),
        (b"Acp-Connection-Id", b"c"),
    ]
    assert shapes.request_headers(headers) == [
        (b"Authorization", b"Bearer t"),
        (b"Acp-Connection-Id", b"c"),
        (b"accept-encoding", b"identity"),  # the client named none: none is asked for upstream
    ]
    assert shapes.request_headers([(b"Accept-Encoding", b"gzip")]) == [(b"Accept-Encoding", b"gzip")]
    assert (b"Content-Length", b"3") in shapes.response_headers(headers)


@pytest.mark.parametrize(
    ("host", "allowed"),
    [
        ("127.0.0.1:8765", True),
        ("localhost:8765", True),
        ("[::1]:8765", True),
        ("devbox.lan:8765", True),
        ("evil.example:8765", False),
        ("127.0.0.1:9999", False),
        ("localhost", False),
        (None, False),
    ],
)
def test_host_header_must_name_this_server(host: str | None, allowed: bool) -> None:
    assert shapes.host_allowed(host, 8765, frozenset({"devbox.lan"})) is allowed


def test_listen_and_loopback() -> None:
    assert shapes.split_listen("127.0.0.1:0") == ("127.0.0.1", 0)
    assert shapes.split_listen("[::1]:80") == ("::1", 80)
    for bad in ("127.0.0.1", "host:port", ":80", "h:70000"):
        with pytest.raises(ValueError):
            shapes.split_listen(bad)
    assert shapes.is_loopback("127.0.0.2") and shapes.is_loopback("::1") and shapes.is_loopback("localhost")
    assert not shapes.is_loopback("0.0.0.0") and not shapes.is_loopback("devbox.lan")


def test_upstream_urls() -> None:
    assert shapes.check_upstream("http://127.0.0.1:1/acp") is None
    assert shapes.check_upstream("ws://h/acp") is None
    assert "http://" in (shapes.check_upstream("ftp://h/acp") or "")
    assert shapes.websocket_url("https://h/acp") == "wss://h/acp"
    assert shapes.http_url("ws://h:1/acp") == "http://h:1/acp"


def test_a_body_decoder_decodes_gzip_and_deflate_in_pieces_and_flags_the_rest() -> None:
    import gzip
    import zlib

    body = b'{"jsonrpc":"2.0","id":1,"result":{}}' * 50
    for coding, encoded in (("gzip", gzip.compress(body)), ("deflate", zlib.compress(body))):
        decoder = shapes.BodyDecoder(coding)
        assert b"".join(decoder.decode(encoded[i : i + 7]) for i in range(0, len(encoded), 7)) == body
        assert decoder.note == f"content-encoding {coding}: recorded decoded"
    assert not shapes.BodyDecoder(None).active and shapes.BodyDecoder("identity").note is None
    brotli = shapes.BodyDecoder("br")
    assert brotli.decode(b"\x0b") == b"\x0b" and brotli.note == "content-encoding br: not decoded"
    broken = shapes.BodyDecoder("gzip")
    assert broken.decode(b"not gzip") == b"not gzip"
    assert broken.note == "content-encoding gzip, (undecodable): not decoded"


def test_a_compressed_bomb_is_recorded_as_it_came_not_decoded_past_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    import gzip

    monkeypatch.setattr(shapes, "MAX_DECODED", 1024 * 1024)
    bomb = gzip.compress(b"\0" * (64 * 1024 * 1024))  # 64 MiB of zeros in ~64 KiB
    decoder = shapes.BodyDecoder("gzip")
    pieces = [bomb[i : i + 4096] for i in range(0, len(bomb), 4096)]
    out = [decoder.decode(piece) for piece in pieces]
    assert sum(len(o) for o in out) < 2 * 1024 * 1024 + len(bomb)  # never the 64 MiB
    assert decoder.note == "content-encoding gzip, (over 1 MiB decoded): not decoded"
    assert out[-1] == pieces[-1]  # from the limit on, the pieces as they came
    small = shapes.BodyDecoder("gzip")
    assert small.decode(gzip.compress(b"x" * 1000)) == b"x" * 1000  # under it: decoded


def test_a_request_body_over_the_limit_is_refused_before_it_is_held_whole() -> None:
    import trio

    from acp_proxy.relay.remote import asgi

    events = [{"type": "http.request", "body": b"x" * 1000, "more_body": True} for _ in range(10)]
    read = []

    async def receive() -> dict[str, object]:
        read.append(1)
        return events[len(read) - 1]

    async def main() -> None:
        with pytest.raises(asgi.BodyTooLarge, match="over 0 MiB is refused"):
            await asgi.read_body(receive, limit=2500)
        assert len(read) == 3  # stopped at the chunk that passed the limit, not at the end

    trio.run(main)
    events[-1] = {"type": "http.request", "body": b"", "more_body": False}
    read.clear()
    assert trio.run(asgi.read_body, receive) == b"x" * 9000


# -- a served agent's stdout cut into lines (LineCutter) --------------------------------------

_LINE_BYTES = st.binary(max_size=40).map(lambda b: b.replace(b"\n", b""))


@settings(max_examples=300)
@given(
    lines=st.lists(_LINE_BYTES, max_size=12), cuts=st.lists(st.integers(0, 400), max_size=10), limit=st.integers(1, 30)
)
def test_a_line_cutter_gives_every_line_up_to_its_limit_and_counts_the_longer_ones(
    lines: list[bytes], cuts: list[int], limit: int
) -> None:
    stream = b"".join(line + b"\n" for line in lines)
    cutter = shapes.LineCutter(limit)
    got: list[bytes] = []
    at = 0
    for cut in sorted(cuts):  # the stream in reads of any size, a line split across many
        got += cutter.feed(stream[at:cut])
        at = max(at, cut)
    got += cutter.feed(stream[at:])
    got += cutter.end()
    assert got == [line.removesuffix(b"\r") for line in lines if len(line) <= limit]
    assert cutter.too_long == [len(line) for line in lines if len(line) > limit]


def test_a_line_cutter_keeps_no_more_than_its_limit_of_an_endless_line() -> None:
    cutter = shapes.LineCutter(1000)
    for _ in range(1000):
        assert cutter.feed(b"x" * 4096) == []
        assert len(cutter.pending) <= 1000
    assert cutter.feed(b"x\nafter\n") == [b"after"]
    assert cutter.too_long == [4096 * 1000 + 1]
    assert cutter.feed(b"tail") == [] and cutter.end() == [b"tail"]
