"""The SDK's ``examples/http_server.py`` (agent-client-protocol 0.12, its sdist), served by
hypercorn on a port the system chooses: the echo agent, one instance per connection. It prints
``PORT <n>`` once listening. Run as ``python sdk_server.py``; it serves until killed."""

from __future__ import annotations

import asyncio
import socket
import sys
from typing import Any
from uuid import uuid4

from acp import Agent, InitializeResponse, NewSessionResponse, PromptResponse, text_block, update_agent_message
from acp.http.asgi import create_asgi_app
from acp.interfaces import Client
from acp.schema import ClientCapabilities, Implementation


class EchoAgent(Agent):
    _conn: Client

    def on_connect(self, conn: Client) -> None:
        self._conn = conn

    async def initialize(
        self,
        protocol_version: int,
        client_capabilities: ClientCapabilities | None = None,
        client_info: Implementation | None = None,
        **kwargs: Any,
    ) -> InitializeResponse:
        return InitializeResponse(protocol_version=protocol_version)

    async def new_session(self, cwd: str = "", **kwargs: Any) -> NewSessionResponse:
        return NewSessionResponse(session_id=uuid4().hex)

    async def prompt(self, session_id: str, prompt: list[Any], **kwargs: Any) -> PromptResponse:
        for block in prompt:
            text = block.get("text", "") if isinstance(block, dict) else getattr(block, "text", "")
            await self._conn.session_update(
                session_id=session_id,
                update=update_agent_message(text_block(f"echo: {text}")),
            )
        return PromptResponse(stop_reason="end_turn")


app = create_asgi_app(lambda conn: EchoAgent())


async def main() -> None:
    import hypercorn.asyncio
    from hypercorn.config import Config

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.set_inheritable(True)
    config = Config()
    config.bind = [f"fd://{sock.fileno()}"]
    config.alpn_protocols = ["h2", "http/1.1"]
    config.accesslog = None
    config.loglevel = "WARNING"
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    await hypercorn.asyncio.serve(app, config)  # type: ignore[arg-type]


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
