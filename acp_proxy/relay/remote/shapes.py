"""The plain facts of the remote wire: which headers travel, where an SSE event ends, what of an
address is a secret, which names the proxy answers to.

Owns: hop-by-hop header filtering (RFC 9110 §7.6.1), splitting an SSE byte stream into the
``data`` of its events without changing a byte of what is forwarded, masking credentials in
URLs and argv, the loopback test for ``--listen`` and the Host header check.

Must not know: trio, httpx, hypercorn, the journal. Pure functions and one small state machine,
tested alone.
"""

from __future__ import annotations

import ipaddress
import zlib
from urllib.parse import SplitResult, parse_qsl, urlencode, urlsplit, urlunsplit

# Headers that describe one hop, not the message: a proxy must not forward them (RFC 9110
# §7.6.1), plus the ones the next hop recomputes (host, content-length on a request).
HOP_BY_HOP = frozenset(
    (
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "http2-settings",
    )
)
_REQUEST_DROPPED = HOP_BY_HOP | {"host", "content-length"}
# A WebSocket handshake is made again on the upstream side: its own key, version, extensions.
_WEBSOCKET_DROPPED = _REQUEST_DROPPED | {
    "sec-websocket-key",
    "sec-websocket-version",
    "sec-websocket-extensions",
    "sec-websocket-accept",
    "sec-websocket-protocol",
    "date",
    "server",
}
MASK = "***"
LOOPBACK_NAMES = frozenset(("localhost", "127.0.0.1", "::1"))


def _named(headers: list[tuple[bytes, bytes]], dropped: frozenset[str]) -> list[tuple[bytes, bytes]]:
    """``headers`` without the ``dropped`` names, nor the ones a ``Connection`` header names."""
    listed = {
        token.strip().lower()
        for name, value in headers
        if name.lower() == b"connection"
        for token in value.decode("latin-1").split(",")
    }
    return [(n, v) for n, v in headers if (low := n.decode("latin-1").lower()) not in dropped and low not in listed]


def request_headers(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """What of a client's request headers goes upstream (Authorization and cookies do: the
    upstream decides on them; the proxy never stores them). A client that names no
    Accept-Encoding gets none upstream either: ``identity`` is said in its place, as an HTTP
    client library would otherwise ask for gzip and the client would get bytes it cannot read."""
    named = _named(headers, _REQUEST_DROPPED)
    if header(named, "accept-encoding") is None:
        named.append((b"accept-encoding", b"identity"))
    return named


def response_headers(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """What of an upstream answer's headers goes back to the client (content-length stays: the
    body is forwarded byte for byte)."""
    return _named(headers, HOP_BY_HOP | {"date", "server"})


def websocket_headers(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """What of one side's WebSocket handshake headers is repeated on the other side's."""
    return _named(headers, _WEBSOCKET_DROPPED)


def header(headers: list[tuple[bytes, bytes]], name: str) -> str | None:
    """The last value of ``name`` (case-insensitive), or None."""
    wanted = name.lower().encode()
    found = None
    for key, value in headers:
        if key.lower() == wanted:
            found = value.decode("latin-1")
    return found


class SseEvents:
    """Finds the events in an SSE byte stream as it arrives, chunk by chunk (the chunks are
    forwarded unchanged; this only reads them). An event ends at a blank line; its ``data``
    lines, joined by newlines, are its message. Comments and events without data (keepalives)
    are no messages. Line ends are CRLF, LF or CR (the SSE grammar)."""

    def __init__(self) -> None:
        self._pending = b""
        self._data: list[bytes] = []

    def feed(self, chunk: bytes) -> list[bytes]:
        """The messages of the events that ``chunk`` completes, in order."""
        buffer = self._pending + chunk
        found: list[bytes] = []
        start = 0
        while True:
            cr = buffer.find(b"\r", start)
            lf = buffer.find(b"\n", start)
            if cr < 0 and lf < 0:
                break
            end = lf if cr < 0 or (0 <= lf < cr) else cr
            if end == cr and end == len(buffer) - 1:
                break  # a CR at the end of a chunk: its LF may be in the next one
            line = buffer[start:end]
            start = end + 2 if end == cr and buffer[end + 1 : end + 2] == b"\n" else end + 1
            self._line(line, found)
        self._pending = buffer[start:]
        return found

    def _line(self, line: bytes, found: list[bytes]) -> None:
        if not line:
            if self._data:
                found.append(b"\n".join(self._data))
            self._data = []
            return
        if line.startswith(b":"):
            return
        name, _, value = line.partition(b":")
        if name == b"data":
            self._data.append(value[1:] if value.startswith(b" ") else value)


MAX_DECODED = 256 * 1024 * 1024  # what one body may decode to for the recording


class BodyDecoder:
    """A body sent with ``Content-Encoding``, decoded chunk by chunk for the recording only (what
    is forwarded stays encoded, byte for byte). gzip and deflate are decoded; any other coding
    (br, zstd...) or a body that does not decode is recorded as it came, and ``note`` says so."""

    def __init__(self, encoding: str | None) -> None:
        self.codings = [name.strip().lower() for name in (encoding or "").split(",") if name.strip()]
        self.codings = [name for name in self.codings if name != "identity"]
        self.ok = all(name in ("gzip", "x-gzip", "deflate") for name in self.codings)
        # Codings are listed in the order they were applied: undone from the last. wbits 47
        # takes a gzip or a zlib header (deflate in HTTP is zlib data).
        self._steps = [zlib.decompressobj(wbits=47) for _ in self.codings] if self.ok else []
        self._decoded = 0

    @property
    def active(self) -> bool:
        return bool(self.codings)

    def decode(self, chunk: bytes) -> bytes:
        """The decoded bytes ``chunk`` completes (``chunk`` itself once decoding has failed, or
        once the body would decode to more than ``MAX_DECODED`` bytes: a small compressed body
        must not make the recording hold gigabytes)."""
        if not self.ok:
            return chunk
        given = chunk
        try:
            for step in self._steps:
                room = MAX_DECODED - self._decoded
                chunk = step.decompress(chunk, room + 1)
                if len(chunk) > room or step.unconsumed_tail:
                    self.ok = False
                    self.codings.append(f"(over {MAX_DECODED // (1024 * 1024)} MiB decoded)")
                    return given
        except zlib.error:
            self.ok = False
            self.codings.append("(undecodable)")
            return given
        self._decoded += len(chunk)
        return chunk

    @property
    def note(self) -> str | None:
        if not self.codings:
            return None
        named = ", ".join(self.codings)
        return f"content-encoding {named}: recorded decoded" if self.ok else f"content-encoding {named}: not decoded"


def mask_url(url: str) -> str:
    """``url`` with its user information and every query value masked: a token in an address
    is a credential like any other."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return MASK
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{MASK}@{netloc.rsplit('@', 1)[1]}"
    query = parts.query
    if query:
        query = urlencode([(name, MASK) for name, _ in parse_qsl(query, keep_blank_values=True)], safe="*")
    return urlunsplit(SplitResult(parts.scheme, netloc, parts.path, query, ""))


def websocket_url(url: str) -> str:
    """The upstream's WebSocket address: the same endpoint, ``ws``/``wss`` for ``http``/``https``."""
    parts = urlsplit(url)
    scheme = {"http": "ws", "https": "wss"}.get(parts.scheme, parts.scheme)
    return urlunsplit(parts._replace(scheme=scheme))


def check_upstream(url: str) -> str | None:
    """Why ``url`` cannot be an upstream, or None."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        return f"--upstream {mask_url(url)!r} is not a URL: {exc}"
    if parts.scheme not in ("http", "https", "ws", "wss"):
        return f"--upstream must be an http://, https://, ws:// or wss:// URL, not {mask_url(url)!r}"
    if not parts.hostname:
        return f"--upstream {mask_url(url)!r} names no host"
    del port
    return None


def http_url(url: str) -> str:
    """The upstream's HTTP address, whichever scheme it was given with."""
    parts = urlsplit(url)
    scheme = {"ws": "http", "wss": "https"}.get(parts.scheme, parts.scheme)
    return urlunsplit(parts._replace(scheme=scheme))


def is_loopback(host: str) -> bool:
    name = host.strip("[]").lower()
    if name in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def split_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) -> (host, port); ValueError if it is not one."""
    host, sep, port_text = text.rpartition(":")
    if not sep or not host or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ValueError(f"--listen {text!r} is not HOST:PORT (a port from 0 to 65535)")
    return host.strip("[]"), int(port_text)


def host_allowed(host_header: str | None, port: int, allowed: frozenset[str]) -> bool:
    """Whether a request's Host names this server: a loopback name, or one of ``allowed``
    (``--listen``'s host and ``--allow-host``), with the bound port. Anything else is a
    DNS-rebinding attempt: a hostile name resolved to this address."""
    if not host_header:
        return False
    name, sep, port_text = host_header.rpartition(":")
    if not sep or "]" in port_text:  # no port: only a client of port 80 leaves it out
        name, port_text = host_header, "80"
    if not port_text.isdigit() or int(port_text) != port:
        return False
    name = name.strip("[]").lower()
    return name in LOOPBACK_NAMES or name in allowed


class LineCutter:
    """A served stdio agent's byte stream cut into its lines (``\\n``, a trailing ``\\r`` dropped),
    each at most ``limit`` bytes: a line over it is one message no transport would carry (a
    WebSocket message and a request body have the same bound), so it is left out whole and
    counted in ``too_long`` (its size) instead of being held in memory to the end.

    Each chunk is searched once (no re-scan of what is pending), so a line of many reads costs
    what its bytes do."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.pending = bytearray()
        self.skipping = 0
        """Bytes of an over-long line left out so far (0: not inside one)."""
        self.too_long: list[int] = []

    def feed(self, data: bytes) -> list[bytes]:
        lines: list[bytes] = []
        start = 0
        while True:
            end = data.find(b"\n", start)
            piece = memoryview(data)[start : len(data) if end < 0 else end]
            if self.skipping:
                self.skipping += len(piece)
            elif len(self.pending) + len(piece) > self.limit:
                self.skipping = len(self.pending) + len(piece)
                self.pending.clear()
            else:
                self.pending += piece
            if end < 0:
                return lines
            if self.skipping:
                self.too_long.append(self.skipping)
                self.skipping = 0
            else:
                line = bytes(self.pending)
                lines.append(line[:-1] if line.endswith(b"\r") else line)
                self.pending.clear()
            start = end + 1

    def end(self) -> list[bytes]:
        """What is left when the stream ends: an unterminated last line, as it is."""
        if self.skipping:
            self.too_long.append(self.skipping)
            self.skipping = 0
            return []
        line, self.pending = bytes(self.pending), bytearray()
        return [line] if line else []
