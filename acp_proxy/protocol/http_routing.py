"""Which Streamable HTTP stream an ACP message belongs to (the transport RFD's routing rules).

Owns: reading the few fields the remote transport routes by (``method``, ``id``, the
``sessionId`` of a request's params or a response's result), which client methods carry an
``Acp-Session-Id`` header, and ``Routes``: the agent side's table of where each message of the
agent goes (the connection-scoped SSE stream or a session's) — the rules the official SDK's
server follows (``acp.http.server.ConnectionState``), so a stdio agent served by
``acp-proxy serve -- AGENT`` answers on the streams an SDK client listens to.

Must not know: HTTP, SSE bytes, trio, the journal. Messages come in as bytes and are never
changed: the routing reads them, the relay forwards them as they came.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

# Methods that act on a session that exists: their POST names it in Acp-Session-Id and their
# response comes back on that session's stream. The ones that make or attach a session
# (session/new, session/load, ...) answer on the connection stream: the client has no session
# stream open yet.
SESSION_SCOPED = frozenset(
    ("session/set_mode", "session/set_config_option", "session/prompt", "session/cancel", "session/close")
)
CONNECTION = ""  # the connection-scoped stream's key in ``Routes``


@dataclass(frozen=True, slots=True)
class Fields:
    """What routing reads of one message; ``json`` is False when it is no JSON object."""

    json: bool
    method: str | None = None
    id_key: str | None = None  # the id as a string (1 and "1" route alike), None without one
    params_session: str | None = None
    result_session: str | None = None

    @property
    def is_request(self) -> bool:
        return self.method is not None and self.id_key is not None

    @property
    def is_response(self) -> bool:
        return self.method is None and self.id_key is not None

    @property
    def session(self) -> str | None:
        return self.params_session or self.result_session


def read(data: bytes) -> Fields:
    """The routing fields of ``data`` (a JSON-RPC message, or anything else)."""
    try:
        message = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return Fields(False)
    if not isinstance(message, dict):
        return Fields(False)
    method = message.get("method")
    ident = message.get("id")
    return Fields(
        True,
        method if isinstance(method, str) else None,
        None if ident is None or isinstance(ident, dict | list) else str(ident),
        _session(message.get("params")),
        _session(message.get("result")),
    )


def _session(value: Any) -> str | None:
    if isinstance(value, dict):
        session = value.get("sessionId")
        if isinstance(session, str):
            return session
    return None


def session_header(fields: Fields) -> str | None:
    """The Acp-Session-Id a client POSTs ``fields``' message with, or None."""
    return fields.params_session if fields.method in SESSION_SCOPED else None


def is_initialize(fields: Fields) -> bool:
    return fields.method == "initialize" and fields.id_key is not None


def one_line(data: bytes) -> bytes:
    """``data`` as one stdio line. A line break in JSON text can only be whitespace between
    tokens (inside a string it is escaped), so a space in its place changes no meaning."""
    if b"\n" not in data and b"\r" not in data:
        return data
    return data.replace(b"\r\n", b" ").replace(b"\n", b" ").replace(b"\r", b" ")


@dataclass
class Routes:
    """The agent side of one connection: where each agent message goes.

    ``sessions``: the session streams that exist (made by a response that establishes a
    session, or by a GET naming one). ``pending``: client requests on a session, by id, so
    that their responses go back on that session's stream."""

    sessions: set[str] = field(default_factory=set)
    pending: dict[str, str] = field(default_factory=dict)

    def from_client(self, fields: Fields) -> None:
        """Note a client message on its way to the agent."""
        if fields.is_request and fields.params_session is not None and fields.id_key is not None:
            self.pending[fields.id_key] = fields.params_session

    def peek(self, fields: Fields) -> str:
        """The stream ``to_client`` would name, without noting anything (a fault rule's look
        at where a frame goes)."""
        if fields.is_response:
            routed = self.pending.get(fields.id_key or "")
            if fields.result_session is None and routed is not None and routed in self.sessions:
                return routed
            return CONNECTION
        session = fields.params_session
        return session if session is not None and session in self.sessions else CONNECTION

    def to_client(self, fields: Fields) -> str:
        """The stream of an agent message: a session id, or ``CONNECTION``."""
        if fields.is_response:
            established = fields.result_session
            if established is not None:
                self.sessions.add(established)
            routed = self.pending.pop(fields.id_key or "", None)
            if established is None and routed is not None and routed in self.sessions:
                return routed
            return CONNECTION
        session = fields.params_session
        if session is not None and session in self.sessions:
            return session
        return CONNECTION


def error_response(request: bytes, code: int, message: str) -> bytes | None:
    """A JSON-RPC error answering ``request`` (None when it has no id to answer): what a stdio
    client gets when the remote endpoint refused its request at the HTTP level, so that it is
    answered instead of left waiting."""
    try:
        parsed = json.loads(request)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(parsed, dict) or parsed.get("id") is None:
        return None
    answer = {"jsonrpc": "2.0", "id": parsed["id"], "error": {"code": code, "message": message}}
    return json.dumps(answer, separators=(",", ":")).encode()
