"""An ACP agent on stdio, built on the official Python SDK, for demos, tests and benchmarks.

    python examples/sdk_agent.py [--permission] [--chunks N [--chunk-bytes B]]
                                 [--state-dir DIR] [--no-history] [--verbose]

What it does on each ``session/prompt``:

- default: echoes the prompt back as ``agent_message_chunk`` updates — ``Client sent:``, then one
  update per prompt block — and ends the turn with ``end_turn``;
- ``--chunks N``: instead of the echo, streams N ``agent_message_chunk`` updates, each line about
  B bytes on the wire (``--chunk-bytes``, default 300), for throughput benchmarks;
- ``--permission``: first announces a ``tool_call``, asks the client with
  ``session/request_permission`` (the SDK numbers the agent's requests from 0, so the first one
  has id 0 like the client's ``initialize`` — on purpose, to exercise per-direction id pairing;
  the next prompt's request has id 1, and so on), then reports a
  ``tool_call_update`` ``completed`` if an ``allow_*`` option was selected, ``failed`` otherwise
  (rejected, cancelled, or the request failed).

``session/load`` is supported (``loadSession`` is advertised): the session's stored history —
the ``user_message_chunk`` of each earlier prompt and every update the agent sent in reply — is
replayed as ``session/update`` notifications before the load request is answered. The agent is
a new process on every run, so with ``--state-dir DIR`` each session's history is kept in
``DIR/<session id>.json`` (created on ``session/new``, rewritten after every turn); without it
history lives only as long as the process; ``--no-history`` keeps none (for long benchmarks).
Session ids are random (uuid4 hex).

``session/cancel`` stops a running turn with ``cancelled``. Logs go to stderr only; stdout
carries nothing but the protocol.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import re
import sys
import tempfile
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from acp import (
    PROTOCOL_VERSION,
    Agent,
    Client,
    InitializeResponse,
    LoadSessionResponse,
    NewSessionResponse,
    PromptResponse,
    RequestError,
    run_agent,
    start_tool_call,
    update_agent_message,
    update_agent_message_text,
    update_tool_call,
    update_user_message,
)
from acp.schema import (
    AgentCapabilities,
    AllowedOutcome,
    Implementation,
    PermissionOption,
    SessionNotification,
    ToolCallUpdate,
)
from pydantic import BaseModel

log = logging.getLogger("sdk_agent")

AGENT_NAME = "acp-proxy-sdk-agent"
AGENT_VERSION = "0.1.0"
SESSION_ID_RE = re.compile(r"[A-Za-z0-9_-]{1,128}")
FILLER = "The quick brown fox jumps over the lazy dog while the agent streams its answer. "

PERMISSION_OPTIONS = [
    PermissionOption(option_id="allow-once", name="Allow once", kind="allow_once"),
    PermissionOption(option_id="reject-once", name="Reject", kind="reject_once"),
]


class Session:
    """One conversation: its id, cwd and history (session/update payloads as JSON objects)."""

    def __init__(self, session_id: str, cwd: str, history: list[dict[str, Any]] | None = None) -> None:
        self.session_id = session_id
        self.cwd = cwd
        self.history: list[dict[str, Any]] = history or []
        self.cancelled = False

    def tool_calls(self) -> int:
        return sum(1 for update in self.history if update.get("sessionUpdate") == "tool_call")


class SessionStore:
    """Sessions in memory, and as ``DIR/<id>.json`` files when a state directory is given."""

    def __init__(self, state_dir: Path | None) -> None:
        self.state_dir = state_dir
        self.sessions: dict[str, Session] = {}
        if state_dir is not None:
            state_dir.mkdir(parents=True, exist_ok=True)

    def create(self, cwd: str) -> Session:
        session = Session(uuid.uuid4().hex, cwd)
        self.sessions[session.session_id] = session
        self.save(session)
        return session

    def get(self, session_id: str) -> Session:
        session = self.sessions.get(session_id)
        if session is None:
            raise RequestError.invalid_params({"sessionId": session_id, "details": "unknown session"})
        return session

    def load(self, session_id: str, cwd: str) -> Session:
        if session_id in self.sessions:
            return self.sessions[session_id]
        path = self._path(session_id)
        if path is None or not path.is_file():
            raise RequestError.resource_not_found(session_id)
        data = json.loads(path.read_text(encoding="utf-8"))
        session = Session(session_id, cwd, list(data.get("history", [])))
        self.sessions[session_id] = session
        return session

    def save(self, session: Session) -> None:
        path = self._path(session.session_id)
        if path is None:
            return
        data = {"sessionId": session.session_id, "cwd": session.cwd, "history": session.history}
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(data, out)
        os.replace(tmp, path)

    def _path(self, session_id: str) -> Path | None:
        if self.state_dir is None or not SESSION_ID_RE.fullmatch(session_id):
            return None
        return self.state_dir / f"{session_id}.json"


def as_json(model: BaseModel) -> dict[str, Any]:
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def chunk_texts(count: int, line_bytes: int, session_id: str) -> Iterator[str]:
    """Texts for ``count`` chunks whose ``session/update`` lines are about ``line_bytes`` long."""
    probe = {
        "jsonrpc": "2.0",
        "method": "session/update",
        "params": as_json(SessionNotification(session_id=session_id, update=update_agent_message_text(""))),
    }
    overhead = len(json.dumps(probe, separators=(",", ":"))) + 1
    size = max(line_bytes - overhead, 16)
    filler = FILLER * (size // len(FILLER) + 1)
    for i in range(1, count + 1):
        head = f"[{i}/{count}] "
        yield head + filler[: max(size - len(head), 0)]


class ExampleAgent(Agent):
    """Echo agent with optional chunk storms, permission requests and persisted history."""

    def __init__(self, options: argparse.Namespace) -> None:
        self.options = options
        self.store = SessionStore(options.state_dir)
        self.client: Client | None = None

    def on_connect(self, conn: Client) -> None:
        self.client = conn

    async def initialize(
        self,
        protocol_version: int,
        client_capabilities: Any = None,
        client_info: Any = None,
        **kwargs: Any,
    ) -> InitializeResponse:
        log.info("initialize: client asked for protocol %s", protocol_version)
        return InitializeResponse(
            protocol_version=min(protocol_version, PROTOCOL_VERSION),
            agent_capabilities=AgentCapabilities(load_session=True),
            agent_info=Implementation(name=AGENT_NAME, version=AGENT_VERSION),
        )

    async def new_session(self, cwd: str, mcp_servers: Any = None, **kwargs: Any) -> NewSessionResponse:
        session = self.store.create(cwd)
        log.info("session/new: %s", session.session_id)
        return NewSessionResponse(session_id=session.session_id)

    async def load_session(
        self, cwd: str, session_id: str, mcp_servers: Any = None, **kwargs: Any
    ) -> LoadSessionResponse:
        session = self.store.load(session_id, cwd)
        log.info("session/load: %s, replaying %d updates", session_id, len(session.history))
        for stored in session.history:
            notification = SessionNotification.model_validate({"sessionId": session_id, "update": stored})
            await self._send(session_id, notification.update)
        return LoadSessionResponse()

    async def prompt(self, session_id: str, prompt: list[Any], **kwargs: Any) -> PromptResponse:
        session = self.store.get(session_id)
        session.cancelled = False
        log.info("session/prompt: %s, %d blocks", session_id, len(prompt))
        if not self.options.no_history:
            session.history.extend(as_json(update_user_message(block)) for block in prompt)
        try:
            stop = await self._turn(session, prompt)
        finally:
            self.store.save(session)
        log.info("session/prompt: %s -> %s", session_id, stop)
        return PromptResponse(stop_reason=stop)

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        log.info("session/cancel: %s", session_id)
        if session_id in self.store.sessions:
            self.store.sessions[session_id].cancelled = True

    async def _turn(self, session: Session, prompt: list[Any]) -> str:
        if self.options.permission:
            await self._tool_call_with_permission(session)
        replies: Iterable[Any]
        if self.options.chunks is not None:
            texts = chunk_texts(self.options.chunks, self.options.chunk_bytes, session.session_id)
            replies = map(update_agent_message_text, texts)
        else:
            echo = [update_agent_message(block) for block in prompt]
            replies = [update_agent_message_text("Client sent:"), *echo]
        for update in replies:
            if session.cancelled:
                return "cancelled"
            await self._send(session.session_id, update, session)
        return "cancelled" if session.cancelled else "end_turn"

    async def _tool_call_with_permission(self, session: Session) -> None:
        assert self.client is not None
        call_id = f"call_{session.tool_calls() + 1}"
        start = start_tool_call(
            call_id, "Write notes.txt", kind="edit", status="pending", raw_input={"path": "notes.txt"}
        )
        await self._send(session.session_id, start, session)
        status = "failed"
        try:
            answer = await self.client.request_permission(
                session_id=session.session_id,
                tool_call=ToolCallUpdate(tool_call_id=call_id, title="Write notes.txt", kind="edit"),
                options=PERMISSION_OPTIONS,
            )
        except RequestError as exc:
            log.info("session/request_permission failed: %s %s", exc.code, exc)
        else:
            outcome = answer.outcome
            if isinstance(outcome, AllowedOutcome):
                kinds = {option.option_id: option.kind for option in PERMISSION_OPTIONS}
                if kinds.get(outcome.option_id, "").startswith("allow"):
                    status = "completed"
        await self._send(session.session_id, update_tool_call(call_id, status=status), session)

    async def _send(self, session_id: str, update: Any, session: Session | None = None) -> None:
        assert self.client is not None
        await self.client.session_update(session_id=session_id, update=update)
        if session is not None and not self.options.no_history:
            session.history.append(as_json(update))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, metavar="N", help="stream N message chunks per prompt")
    parser.add_argument(
        "--chunk-bytes", type=int, default=300, metavar="B", help="about B bytes per chunk line (default 300)"
    )
    parser.add_argument("--permission", action="store_true", help="ask for permission before answering")
    parser.add_argument("--state-dir", type=Path, metavar="DIR", help="keep session histories in DIR")
    parser.add_argument("--no-history", action="store_true", help="keep no history (session/load then replays nothing)")
    parser.add_argument("--verbose", action="store_true", help="log each request to stderr")
    options = parser.parse_args(argv)
    if options.chunks is not None and options.chunks < 0:
        parser.error("--chunks must be >= 0")
    return options


def main(argv: list[str] | None = None) -> int:
    options = parse_args(argv)
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.INFO if options.verbose else logging.WARNING,
        format="sdk_agent: %(message)s",
    )
    try:
        asyncio.run(run_agent(ExampleAgent(options)))
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
