"""A WebSocket upstream for the pass-through tests (trio-websocket): every message is echoed as
it came (text or binary); ``{"method": "close", "code": C, "reason": R}`` closes the socket
with that code, ``{"method": "die"}`` ends the process without a close frame. Prints
``PORT <n>`` once listening; serves until killed."""

from __future__ import annotations

import json
import os

import trio
import trio_websocket


async def handler(request: trio_websocket.WebSocketRequest) -> None:
    ws = await request.accept()
    try:
        while True:
            message = await ws.get_message()
            order = json.loads(message) if isinstance(message, str) and message.startswith("{") else {}
            if order.get("method") == "close":
                await ws.aclose(order["code"], order.get("reason"))
                return
            if order.get("method") == "die":
                os._exit(0)
            await ws.send_message(message)
    except trio_websocket.ConnectionClosed:
        pass


async def main() -> None:
    async with trio.open_nursery() as nursery:
        server = await nursery.start(trio_websocket.serve_websocket, handler, "127.0.0.1", 0, None)
        print(f"PORT {server.port}", flush=True)


if __name__ == "__main__":
    trio.run(main)
