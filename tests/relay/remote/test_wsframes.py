"""The WebSocket frame cutter of serve's pass-through relay: wherever the bytes are cut into
reads, it forwards exactly the frames of the messages it has returned (so each is journaled
before it leaves), with payloads wsproto agrees on, and closes on what wsproto refuses."""

from __future__ import annotations

import os
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from wsproto.frame_protocol import FrameProtocol, Opcode

from acp_proxy.relay.remote import wsframes
from acp_proxy.relay.remote.wsframes import BINARY, CLOSE, PING, PONG, TEXT, FrameCutter

LIMIT = 1 << 20


def encode(opcode: int, payload: bytes, *, fin: bool = True, masked: bool, rsv: int = 0, wide: int = 0) -> bytes:
    """One frame, written by hand (not by the code under test). ``wide``: force a 16- or 64-bit
    length field (2 or 8) whatever the size."""
    size = len(payload)
    first = (0x80 if fin else 0) | rsv | opcode
    bit = 0x80 if masked else 0
    if wide == 8 or (not wide and size >= 65536):
        head = bytes((first, bit | 127)) + struct.pack("!Q", size)
    elif wide == 2 or (not wide and size >= 126):
        head = bytes((first, bit | 126)) + struct.pack("!H", size)
    else:
        head = bytes((first, bit | size))
    if not masked:
        return head + payload
    key = os.urandom(4)
    return head + key + bytes(b ^ key[i % 4] for i, b in enumerate(payload))


def reference(data: bytes, masked: bool) -> list[tuple[int, bytes]]:
    """wsproto's reading of whole frames: messages joined, control frames as they are."""
    protocol = FrameProtocol(client=not masked, extensions=[])
    protocol.receive_bytes(data)
    found: list[tuple[int, bytes]] = []
    parts: list[bytes] = []
    kind = 0
    for frame in protocol.received_frames():
        if frame.opcode in (Opcode.CLOSE, Opcode.PING, Opcode.PONG):
            payload = frame.payload
            if frame.opcode == Opcode.CLOSE:
                code, reason = payload
                payload = struct.pack("!H", code) + reason.encode() if code != 1005 else b""
            found.append((int(frame.opcode), bytes(payload)))
            continue
        if frame.opcode != Opcode.CONTINUATION:
            kind = int(frame.opcode)
        payload = frame.payload.encode() if isinstance(frame.payload, str) else bytes(frame.payload)
        parts.append(payload)
        if frame.message_finished:
            found.append((kind, b"".join(parts)))
            parts = []
    if parts or len(protocol._frame_decoder.buffer):
        found.append((-1, b"an open message, or a frame cut short"))
    return found


# Text payloads are UTF-8 (long ones with two-byte characters, so fragments cut through them);
# binary ones anything, some long enough for 16- and 64-bit lengths.
texts = st.one_of(st.text(max_size=300), st.integers(63, 35_000).map(lambda n: "é" * n)).map(str.encode)
blobs = st.one_of(st.binary(max_size=300), st.integers(126, 70_000).map(os.urandom))
kinds = st.one_of(st.tuples(st.just(TEXT), texts), st.tuples(st.just(BINARY), blobs))
messages = st.lists(
    st.tuples(
        kinds,
        st.integers(1, 4),  # fragments
        st.lists(st.sampled_from([PING, PONG]), max_size=2),  # control frames among them
    ).map(lambda t: (t[0][0], t[0][1], t[1], t[2])),
    max_size=8,
)


def conversation(items: list[tuple[int, bytes, int, list[int]]], masked: bool) -> tuple[bytes, list[tuple[int, bytes]]]:
    """The bytes of ``items`` (each message fragmented, control frames after its first
    fragment) and what the cutter must return for them."""
    out: list[bytes] = []
    expected: list[tuple[int, bytes]] = []
    for opcode, payload, pieces, controls in items:
        step = max(1, -(-len(payload) // pieces))
        cuts = [payload[i : i + step] for i in range(0, len(payload), step)] or [b""]
        for index, part in enumerate(cuts):
            last = index == len(cuts) - 1
            out.append(encode(opcode if index == 0 else 0, part, fin=last, masked=masked))
            if last:
                expected.append((opcode, payload))
            for control in controls if index == 0 else []:
                # Among the fragments they are returned before the message (it ends after them).
                out.append(encode(control, b"p%d" % control, masked=masked))
                expected.append((control, b"p%d" % control))
    return b"".join(out), expected


@settings(max_examples=150, deadline=None)
@given(messages, st.booleans(), st.lists(st.integers(1, 70_000), max_size=30))
def test_each_read_forwards_exactly_the_frames_of_the_messages_it_returned(
    items: list[tuple[int, bytes, int, list[int]]], masked: bool, sizes: list[int]
) -> None:
    data, expected = conversation(items, masked)
    cutter = FrameCutter(masked=masked, max_message=LIMIT)
    forwarded = b""
    got: list[tuple[int, bytes]] = []
    start = 0
    for size in [*sizes, len(data)]:
        piece = data[start : start + size]
        start += len(piece)
        if not piece:
            continue
        cut = cutter.feed(piece)
        forwarded += cut.forward
        got.extend(cut.items)
        # What left so far is whole frames, and exactly the messages returned so far.
        assert reference(forwarded, masked) == got
        assert data.startswith(forwarded)
    assert cutter.error is None
    assert forwarded == data
    assert got == expected


def test_lengths_of_7_16_and_64_bits_and_a_frame_split_in_its_header() -> None:
    for size in (1, 125, 126, 65535, 65536, 200_000):
        payload = bytes(range(256)) * (size // 256) + bytes(size % 256)
        for masked in (True, False):
            data = encode(BINARY, payload, masked=masked)
            cutter = FrameCutter(masked=masked, max_message=LIMIT)
            first = cutter.feed(data[:1])
            second = cutter.feed(data[1:-1])
            third = cutter.feed(data[-1:])
            assert first.forward == second.forward == b"" and not first.items and not second.items
            assert third == (data, [(BINARY, payload)])
            assert cutter.feed(data) == (data, [(BINARY, payload)])  # all at once


@pytest.mark.parametrize(
    ("frames", "code"),
    [
        ([encode(TEXT, b'{"x":"\xff"}', masked=True)], 1007),
        ([encode(TEXT, b"\xc3", fin=False, masked=True), encode(0, b"(", masked=True)], 1007),
        ([encode(TEXT, b"{}", masked=False)], 1002),  # a client's frame must be masked
        ([encode(TEXT, b"{}", masked=True, rsv=0x40)], 1002),  # no extension was negotiated
        ([encode(PING, b"x" * 126, masked=True)], 1002),  # a control frame of more than 125 bytes
        ([encode(PING, b"", fin=False, masked=True)], 1002),  # a fragmented control frame
        ([encode(0x3, b"", masked=True)], 1002),  # a reserved opcode
        ([encode(0, b"x", masked=True)], 1002),  # a continuation of nothing
        ([encode(TEXT, b"a", fin=False, masked=True), encode(TEXT, b"b", masked=True)], 1002),
        ([encode(TEXT, b"{}", masked=True, wide=2)], 1002),  # a length not in its shortest form
        ([encode(CLOSE, b"\x03", masked=True)], 1002),  # a close code of one byte
        ([encode(BINARY, b"x" * (LIMIT + 1), masked=True)], 1009),
        ([encode(BINARY, b"x" * LIMIT, fin=False, masked=True), encode(0, b"x", masked=True)], 1009),
    ],
    ids=[
        "bad-utf8",
        "bad-utf8-across-fragments",
        "unmasked",
        "rsv",
        "big-control",
        "fragmented-control",
        "opcode",
        "lone-continuation",
        "interleaved-messages",
        "long-length",
        "short-close",
        "too-big",
        "too-big-in-fragments",
    ],
)
def test_what_wsproto_refuses_is_an_error_with_its_close_code_and_nothing_of_it_is_forwarded(
    frames: list[bytes], code: int
) -> None:
    good = encode(TEXT, b'{"ok":1}', masked=True)
    cutter = FrameCutter(masked=True, max_message=LIMIT)
    cut = cutter.feed(good + b"".join(frames))
    assert cut == (good, [(TEXT, b'{"ok":1}')])
    assert cutter.error is not None and cutter.error[0] == code
    assert cutter.feed(good) == (b"", [])  # nothing after an error


def test_a_message_over_the_limit_is_refused_from_its_header() -> None:
    cutter = FrameCutter(masked=False, max_message=1000)
    cut = cutter.feed(encode(BINARY, b"x" * 5000, masked=False)[:20])
    assert cut == (b"", []) and cutter.error == (1009, "message too big")


def test_the_frames_serve_sends_itself_are_what_wsproto_reads() -> None:
    assert reference(wsframes.close_frame(1011), masked=False) == [(CLOSE, struct.pack("!H", 1011))]
    masked = wsframes.close_frame(1007, "invalid UTF-8 ü", mask=os.urandom(4))
    assert reference(masked, masked=True) == [(CLOSE, struct.pack("!H", 1007) + "invalid UTF-8 ü".encode())]
    # A code no peer may send (no code, no close frame) is said as 1000.
    assert wsframes.close_reason(reference(wsframes.close_frame(1006), masked=False)[0][1]) == (1000, "")
    assert wsframes.close_reason(b"") == (1005, "")
    big = os.urandom(70_000)
    assert reference(wsframes.frame(BINARY, big, mask=os.urandom(4)), masked=True) == [(BINARY, big)]
