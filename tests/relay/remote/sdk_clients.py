"""The SDK's ``examples/http_client.py`` and ``ws_client.py`` (agent-client-protocol 0.12), with
the endpoint from the command line: ``python sdk_clients.py http|ws URL [PROMPT]``. Prints what
the client saw, one line each, as the examples do."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from acp import connect_to_agent, text_block
from acp.interfaces import Client


class ExampleClient(Client):
    async def request_permission(self, session_id: str, tool_call: Any, options: Any, **kwargs: Any) -> Any:
        return {"outcome": {"outcome": "selected", "optionId": options[0]["optionId"]}}

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        content = getattr(update, "content", None)
        text = getattr(content, "text", None) if content is not None else None
        if text:
            print(f"<< {text}", flush=True)

    async def write_text_file(self, *args: Any, **kwargs: Any) -> None:
        return None

    async def read_text_file(self, *args: Any, **kwargs: Any) -> Any:
        return {"content": ""}


async def main(kind: str, url: str, prompt: str) -> None:
    if kind == "ws":
        from acp.ws import create_websocket_stream

        transport = await create_websocket_stream(url)
    else:
        from acp.http import create_http_stream

        transport = create_http_stream(url)
    conn = connect_to_agent(ExampleClient(), transport)
    try:
        init = await conn.initialize(protocol_version=1)
        print(f"initialized (protocol v{init.protocol_version})", flush=True)
        session = await conn.new_session(cwd=".", mcp_servers=[])
        print("session: <id>" if session.session_id else "session: none", flush=True)
        result = await conn.prompt(session_id=session.session_id, prompt=[text_block(prompt)])
        print(f"stop reason: {result.stop_reason}", flush=True)
    finally:
        await conn.close()
        await transport.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else "hello"))
