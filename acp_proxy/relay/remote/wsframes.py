"""WebSocket frames (RFC 6455) found in a byte stream that is forwarded as it came: where each
frame ends, each whole message's payload, the control frames, and our own close frames.

Owns: cutting one direction's bytes into frames as they arrive (a frame split across reads,
16- and 64-bit lengths, fragmented messages with control frames between their fragments),
unmasking a client's payloads for the recording, which bytes may be forwarded (those up to
the end of the last frame that leaves no message open: a message is journaled whole before
any of its bytes leave), the protocol errors a peer can make and the close code each gets
(1002, 1007 for a text message that is not UTF-8, 1009 for one over the size limit), and the
bytes of a close frame serve sends itself.

Why: serve's WebSocket relay without fault rules passes frames through byte for byte
(``wspass``). Server frames are unmasked and stay valid for the client; a client's frames stay
valid for the upstream with the mask the client chose, so with no extension negotiated (serve
declines them both ways) nothing needs re-framing; only the recording needs the payloads.

Must not know: sockets, trio, the journal, ACP. Pure: bytes in, cuts out.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

CONTINUATION, TEXT, BINARY, CLOSE, PING, PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA
_DATA = (TEXT, BINARY)
_CONTROL = (CLOSE, PING, PONG)
_U16 = struct.Struct("!H")
_U64 = struct.Struct("!Q")
# Close codes a peer may send (RFC 6455 7.4): the registered ones and 3000-4999.
_WHOLE = frozenset((0x80 | TEXT, 0x80 | BINARY))  # first bytes of a frame that is a whole message
_SENDABLE = frozenset((1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 1012, 1013, 1014))


class Cut(NamedTuple):
    """What one ``feed`` found: ``forward``, the bytes that may be forwarded now (whole frames,
    no message left open), and ``items``, the whole messages and control frames in them, in
    order, as (opcode, payload) with payloads unmasked and a fragmented message joined."""

    forward: bytes
    items: list[tuple[int, bytes]]


class FrameCutter:
    """One direction's frames. ``masked``: the direction's frames must be masked (a client's)
    and are unmasked for ``items``; the server's must not be. After a protocol error, ``error``
    is (close code, reason) and nothing more is cut."""

    def __init__(self, *, masked: bool, max_message: int) -> None:
        self.masked = masked
        self.max_message = max_message
        self.error: tuple[int, str] | None = None
        self._pending = bytearray()  # bytes not forwarded yet: from the start of an open message
        self._parsed = 0  # how much of _pending is whole frames already read (an open message's)
        self._opcode = 0  # the open (fragmented) message's opcode, 0 when none is open
        self._parts: list[bytes] = []
        self._size = 0
        self._held: list[tuple[int, bytes]] = []  # control frames among an open message's fragments

    def feed(self, data: bytes) -> Cut:
        if self.error is not None:
            return Cut(b"", [])
        if self._pending:
            self._pending += data
            buf: bytes | bytearray = self._pending
        else:
            buf = data
        end = len(buf)
        pos = self._parsed
        safe = 0  # the end of the last frame after which no message is open
        items: list[tuple[int, bytes]] = []
        masked = self.masked
        while end - pos >= 2:
            b0 = buf[pos]
            b1 = buf[pos + 1]
            length = b1 & 0x7F
            head = pos + 2
            if length == 126:
                if end - head < 2:
                    break
                length = _U16.unpack_from(buf, head)[0]
                head += 2
            elif length == 127:
                if end - head < 8:
                    break
                length = _U64.unpack_from(buf, head)[0]
                head += 8
            # The common frame (a whole text or binary message, masked as its direction must
            # be, length in its shortest form, within the limit) needs no further look.
            if (
                b0 not in _WHOLE
                or (b1 > 127) != masked
                or self._opcode
                or length > self.max_message
                or (head - pos == 4 and length < 126)
                or (head - pos == 10 and length < 65536)
            ):
                fault = self._check(b0, b1, length, head - pos)
                if fault is not None:
                    self.error = fault
                    break
            if masked:
                key = buf[head : head + 4]
                head += 4
            stop = head + length
            if stop > end:
                break
            payload = bytes(buf[head:stop])
            if masked and length:
                payload = unmask(payload, bytes(key))
            pos = stop
            opcode = b0 & 0x0F
            fin = b0 & 0x80
            if opcode >= CLOSE:
                if opcode == CLOSE and not _close_valid(payload):
                    self.error = (1002, "invalid close frame")
                    break
                if self._opcode:
                    self._held.append((opcode, payload))
                else:
                    items.append((opcode, payload))
                    safe = pos
                continue
            if opcode and fin:  # the common case: a whole message in one frame
                if opcode == TEXT and not _utf8(payload):
                    self.error = (1007, "invalid UTF-8 in a text message")
                    break
                items.append((opcode, payload))
                safe = pos
                continue
            if opcode:
                self._opcode = opcode
                self._parts = [payload]
                self._size = length
                continue
            self._parts.append(payload)
            self._size += length
            if fin:
                message = b"".join(self._parts)
                if self._opcode == TEXT and not _utf8(message):
                    self.error = (1007, "invalid UTF-8 in a text message")
                    break
                items.extend(self._held)
                items.append((self._opcode, message))
                self._opcode, self._parts, self._size, self._held = 0, [], 0, []
                safe = pos
        if safe == 0:
            if buf is not self._pending:
                self._pending = bytearray(buf)
            self._parsed = pos
            return Cut(b"", items)
        forward = bytes(buf[:safe])
        self._pending = bytearray(buf[safe:]) if safe < end else bytearray()
        self._parsed = pos - safe
        return Cut(forward, items)

    def _check(self, b0: int, b1: int, length: int, header: int) -> tuple[int, str] | None:
        """The protocol error a frame header makes, if any."""
        opcode = b0 & 0x0F
        if b0 & 0x70:
            return (1002, "reserved bits set without an extension")
        if bool(b1 & 0x80) != self.masked:
            return (1002, "a client frame must be masked" if self.masked else "a server frame must not be masked")
        if opcode >= CLOSE:
            if opcode not in _CONTROL:
                return (1002, f"unknown opcode {opcode}")
            if not b0 & 0x80 or length > 125:
                return (1002, "a control frame must be whole and at most 125 bytes")
            return None
        if opcode not in (CONTINUATION, *_DATA):
            return (1002, f"unknown opcode {opcode}")
        if (header == 4 and length < 126) or (header == 10 and (length < 65536 or length >> 63)):
            return (1002, "a frame length not in its shortest form")
        if opcode == CONTINUATION and not self._opcode:
            return (1002, "a continuation frame without a message")
        if opcode != CONTINUATION and self._opcode:
            return (1002, "a new message before the last one ended")
        if (self._size if opcode == CONTINUATION else 0) + length > self.max_message:
            return (1009, "message too big")
        return None


def unmask(payload: bytes, key: bytes) -> bytes:
    """``payload`` XORed with the 4-byte ``key`` repeated (masking is its own inverse)."""
    size = len(payload)
    repeated = (key * (size // 4 + 1))[:size]
    return (int.from_bytes(payload, "little") ^ int.from_bytes(repeated, "little")).to_bytes(size, "little")


def _utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _close_valid(payload: bytes) -> bool:
    if not payload:
        return True
    if len(payload) == 1:
        return False
    code = _U16.unpack_from(payload)[0]
    return (code in _SENDABLE or 3000 <= code <= 4999) and _utf8(payload[2:])


def close_reason(payload: bytes) -> tuple[int, str]:
    """A close frame's code and reason (1005 when it has none)."""
    if len(payload) < 2:
        return 1005, ""
    return _U16.unpack_from(payload)[0], payload[2:].decode("utf-8", "replace")


def frame(opcode: int, payload: bytes, mask: bytes | None = None) -> bytes:
    """One whole frame: unmasked (a server's), or masked with the 4-byte ``mask`` (a client's)."""
    size = len(payload)
    bit = 0x80 if mask is not None else 0
    if size < 126:
        head = bytes((0x80 | opcode, bit | size))
    elif size < 65536:
        head = bytes((0x80 | opcode, bit | 126)) + _U16.pack(size)
    else:
        head = bytes((0x80 | opcode, bit | 127)) + _U64.pack(size)
    if mask is None:
        return head + payload
    return head + mask + (unmask(payload, mask) if payload else b"")


def close_frame(code: int, reason: str = "", mask: bytes | None = None) -> bytes:
    """A close frame serve sends itself; a code no peer may send (1005, 1006...) says 1000."""
    sendable = code in _SENDABLE or 3000 <= code <= 4999
    data = _U16.pack(code if sendable else 1000) + reason.encode()[:123].decode("utf-8", "ignore").encode()
    return frame(CLOSE, data, mask)
