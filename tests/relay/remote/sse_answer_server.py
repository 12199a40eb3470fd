"""Not the SDK: a minimal Streamable HTTP agent that answers each POSTed request with an SSE
stream of its own (the transport allows it; the SDK's server answers 202 and uses its GET
streams). initialize is answered with JSON and an ``Acp-Connection-Id``; any other request with
a ``session/update`` event, then its response, then the end of the stream. Prints ``PORT <n>``
once listening; serves until killed."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        message = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)))
        if message.get("method") == "initialize":
            body = json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": {"protocolVersion": 1}}).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("acp-connection-id", "c-1")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        update = {"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s-1", "update": {}}}
        answer = {"jsonrpc": "2.0", "id": message.get("id"), "result": {"stopReason": "end_turn"}}
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("connection", "close")
        self.end_headers()
        for event in (update, answer):
            self.wfile.write(b"data: " + json.dumps(event).encode() + b"\n\n")
            self.wfile.flush()

    def log_message(self, *args: object) -> None:
        pass


if __name__ == "__main__":
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(f"PORT {server.server_address[1]}", flush=True)
    server.serve_forever()
