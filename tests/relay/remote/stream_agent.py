"""A WebSocket agent for load tests (trio-websocket): a request ``{"id": I, "method": "stream",
"params": {"n": N, "size": S}}`` is answered with N ``session/update`` notifications of about S
bytes each, then the response; any other request with an empty result. Prints ``PORT <n>`` once
listening; serves until killed."""

from __future__ import annotations

import json

import trio
import trio_websocket


def chunk(size: int) -> str:
    update = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "x" * size}}
    return json.dumps({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s1", "update": update}})


async def handler(request: trio_websocket.WebSocketRequest) -> None:
    ws = await request.accept()
    try:
        while True:
            message = json.loads(await ws.get_message())
            if message.get("method") == "stream":
                text = chunk(message["params"]["size"])
                for _ in range(message["params"]["n"]):
                    await ws.send_message(text)
            await ws.send_message(json.dumps({"jsonrpc": "2.0", "id": message.get("id"), "result": {}}))
    except trio_websocket.ConnectionClosed:
        pass


async def main() -> None:
    async with trio.open_nursery() as nursery:
        server = await nursery.start(trio_websocket.serve_websocket, handler, "127.0.0.1", 0, None)
        print(f"PORT {server.port}", flush=True)


if __name__ == "__main__":
    trio.run(main)
