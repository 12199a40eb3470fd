"""The lock on ``acp-proxy ui``: a per-launch token, the Host header, safe response headers, and
redaction of what Datasette's own pages send.

Owns: deciding, for each HTTP request, whether it may reach the application — local web UIs
have been remote-code-execution holes when any web page the user visits could call them
(MCP Inspector, CVE-2025-49596) — and the ASGI wrapper that carries the decision out:

- the Host header must name the server as it was bound: a loopback name (``localhost``,
  ``127.0.0.1``, ``[::1]``) or the ``--host`` given, with the bound port. Anything else is a
  DNS-rebinding attempt (a hostile name resolved to 127.0.0.1) and is refused (403);
- the token must come with every request: once as ``?token=T`` (answered with a redirect that
  drops it from the address bar and sets it as a cookie, HttpOnly, SameSite=Strict, so no other
  site's page can send it), then as that cookie, or as ``Authorization: Bearer T`` for scripts.
  Otherwise 401;
- every response says ``Cache-Control: no-store`` (recordings hold secrets), no framing, no
  referrer, no MIME sniffing;
- a response's start is held until its first body message, so an application that fails
  between the two can still answer with an error (never a half-sent 200);
- for plain ``datasette`` with the plugin (no masking at the source, which only ``acp-proxy ui``
  sets up: ``masking``), Datasette's own JSON and CSV answers have each string masked as the
  inspector masks frames; its HTML cells are masked by the plugin's ``render_cell``.

Must not know: the recording, Datasette's internals, click. ``decide`` is pure and tested alone.
"""

from __future__ import annotations

import csv
import hmac
import io
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlencode

from acp_proxy.protocol import wire
from acp_proxy.protocol.redact import Redactor

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")
SAFE_HEADERS = [
    (b"cache-control", b"no-store"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-content-type-options", b"nosniff"),
]
MAX_REDACTED_BODY = 64 * 1024 * 1024  # a Datasette answer larger than this is refused, not shown unmasked


@dataclass(frozen=True)
class Guard:
    """The token and the names this server answers to."""

    token: str
    host: str
    port: int
    extra_hosts: tuple[str, ...] = field(default=())

    @property
    def cookie_name(self) -> str:
        # Cookies do not tell ports apart: two inspectors on one machine must not share one.
        return f"acp_proxy_token_{self.port}"

    def allowed_hosts(self) -> set[str]:
        names = {*LOOPBACK_NAMES, _bracketed(self.host), *map(_bracketed, self.extra_hosts)}
        return {f"{name.lower()}:{self.port}" for name in names}


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


@dataclass(frozen=True)
class Decision:
    """What to do with a request: pass it on (``status`` 0), or answer it here."""

    status: int = 0
    body: str = ""
    headers: tuple[tuple[str, str], ...] = ()


PASS = Decision()


def decide(guard: Guard, method: str, path: str, query: str, headers: dict[str, str]) -> Decision:
    """``headers``: lower-case names -> values (the last of repeated ones)."""
    host = headers.get("host", "").strip().lower()
    if host not in guard.allowed_hosts():
        return Decision(403, "acp-proxy: this Host is not allowed (DNS rebinding protection); use the printed URL\n")
    pairs = parse_qsl(query, keep_blank_values=True)
    offered = [v for k, v in pairs if k == "token"]
    if offered:
        if not any(hmac.compare_digest(v.encode(), guard.token.encode()) for v in offered):
            return Decision(401, "acp-proxy: wrong token; use the URL `acp-proxy ui` printed\n")
        rest = urlencode([(k, v) for k, v in pairs if k != "token"])
        cookie = f"{guard.cookie_name}={guard.token}; HttpOnly; SameSite=Strict; Path=/"
        return Decision(303, "", (("location", path + ("?" + rest if rest else "")), ("set-cookie", cookie)))
    if _cookie(headers.get("cookie", ""), guard.cookie_name, guard.token):
        return PASS
    auth = headers.get("authorization", "")
    if auth[:7].lower() == "bearer " and hmac.compare_digest(auth[7:].strip().encode(), guard.token.encode()):
        return PASS
    return Decision(401, "acp-proxy: a token is required; open the URL `acp-proxy ui` printed (it carries one)\n")


def _cookie(header: str, name: str, token: str) -> bool:
    for part in header.split(";"):
        key, _, value = part.strip().partition("=")
        if key == name and hmac.compare_digest(value.encode(), token.encode()):
            return True
    return False


def _headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers") or []}


def wrap(
    app: App,
    guard_of: Callable[[], Guard | None],
    redactor: Callable[[], Redactor | None] | None,
    own_paths: Callable[[str], bool],
) -> App:
    """``app`` behind the guard (when ``guard_of``, asked at each request, gives one) and, for
    paths that are not the inspector's own (``own_paths``), behind redaction of Datasette's JSON
    and CSV (when ``redactor`` gives one that is enabled)."""

    async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        guard = guard_of()
        if guard is not None:
            query = scope.get("query_string", b"").decode("latin-1")
            decision = decide(guard, scope.get("method", "GET"), scope.get("path", "/"), query, _headers(scope))
            if decision.status:
                await _answer(send, decision)
                return
        send_safe = _with_safe_headers(_start_with_body(send))
        r = redactor() if redactor is not None else None
        if r is not None and r.enabled and not own_paths(scope.get("path", "/")):
            await _redacting(app, scope, receive, send_safe, r)
        else:
            await app(scope, receive, send_safe)

    return guarded


async def _answer(send: Send, decision: Decision) -> None:
    body = decision.body.encode()
    headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode())]
    headers += [(k.encode("latin-1"), v.encode("latin-1")) for k, v in decision.headers]
    await send({"type": "http.response.start", "status": decision.status, "headers": headers + SAFE_HEADERS})
    await send({"type": "http.response.body", "body": body})


def _start_with_body(send: Send) -> Send:
    """``send`` holding each response start back until its first body message: an application
    that fails between the two (Datasette's blob of an integer) can then still answer with an
    error of its own, whose start replaces the held one."""
    held: dict[str, Any] | None = None

    async def sending(message: dict[str, Any]) -> None:
        nonlocal held
        if message["type"] == "http.response.start":
            held = message
            return
        if held is not None and message["type"] == "http.response.body":
            start, held = held, None
            await send(start)
        await send(message)

    return sending


def _with_safe_headers(send: Send) -> Send:
    async def sending(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            # Ours replace the application's: Datasette lets browsers cache some answers.
            ours = {k for k, _ in SAFE_HEADERS}
            kept = [(k, v) for k, v in message.get("headers") or [] if k.lower() not in ours]
            message = {**message, "headers": [*kept, *SAFE_HEADERS]}
        await send(message)

    return sending


async def _redacting(app: App, scope: Scope, receive: Receive, send: Send, redactor: Redactor) -> None:
    """Run ``app``; hold back a JSON or CSV answer until it is whole, mask it, send it."""
    start: dict[str, Any] | None = None
    chunks: list[bytes] = []
    size = 0
    mode: str | None = None
    too_big = False

    async def capture(message: dict[str, Any]) -> None:
        nonlocal start, size, mode, too_big
        if message["type"] == "http.response.start":
            ctype = dict((k.lower(), v) for k, v in message.get("headers") or []).get(b"content-type", b"")
            mode = "json" if b"json" in ctype else "csv" if b"csv" in ctype or b"text/plain" in ctype else None
            if mode is None:
                await send(message)
            else:
                start = message
            return
        if mode is None:
            await send(message)
            return
        if message["type"] != "http.response.body" or too_big:
            return
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_REDACTED_BODY:
            too_big = True
            chunks.clear()
            return
        chunks.append(chunk)
        if message.get("more_body"):
            return
        await _flush(send, start or {}, redact_body(b"".join(chunks), mode, redactor))

    await app(scope, receive, capture)
    if too_big and start is not None:
        await _answer(
            send, Decision(413, "acp-proxy: this answer is too large to redact; narrow it, or start ui --no-redact\n")
        )


async def _flush(send: Send, start: dict[str, Any], body: bytes) -> None:
    headers = [(k, v) for k, v in start.get("headers") or [] if k.lower() != b"content-length"]
    headers.append((b"content-length", str(len(body)).encode()))
    await send({**start, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def redact_body(body: bytes, mode: str, redactor: Redactor) -> bytes:
    """A Datasette JSON or CSV answer with every string masked (``Redactor.raw``: a string that
    is a JSON frame is masked as one, anything else as text)."""
    if mode == "json":
        try:
            data = wire.loads(body)
        except ValueError:
            return redactor.line(body)
        masked = _strings(data, redactor)
        return body if masked is data else json.dumps(masked, ensure_ascii=False).encode()
    text = body.decode("utf-8", errors="replace")
    try:
        rows = list(csv.reader(io.StringIO(text, newline="")))
    except csv.Error:
        return redactor.text(text).encode()
    out = io.StringIO(newline="")
    writer = csv.writer(out, lineterminator="\r\n")
    for row in rows:
        writer.writerow([redactor.raw(cell) for cell in row])
    return out.getvalue().encode()


def _strings(value: Any, redactor: Redactor) -> Any:
    if isinstance(value, str):
        return redactor.raw(value)
    if isinstance(value, dict):
        items = {k: _strings(v, redactor) for k, v in value.items()}
        return value if all(items[k] is value[k] for k in value) else items
    if isinstance(value, list):
        items_list = [_strings(v, redactor) for v in value]
        return value if all(a is b for a, b in zip(items_list, value, strict=True)) else items_list
    return value
