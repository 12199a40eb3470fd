"""An upstream that compresses: a POST is answered with its JSON-RPC result gzipped, a GET with an
SSE stream of two events gzipped, when the request accepts gzip (``Content-Encoding: gzip``);
plain otherwise. Prints ``PORT <n>`` once listening; serves until killed."""

from __future__ import annotations

import gzip
import json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

RESULT = {"jsonrpc": "2.0", "id": 0, "result": {"protocolVersion": 1, "note": "compressed " * 20}}
EVENTS = b"".join(
    b"event: message\ndata: "
    + json.dumps({"jsonrpc": "2.0", "method": "session/update", "params": {"n": n}}).encode()
    + b"\n\n"
    for n in range(2)
)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _answer(self, body: bytes, kind: str) -> None:
        compressed = "gzip" in (self.headers.get("accept-encoding") or "")
        if compressed:
            body = gzip.compress(body, mtime=0)  # the same bytes each time: comparable
        self.send_response(200)
        self.send_header("content-type", kind)
        self.send_header("acp-connection-id", "c-gzip")
        if compressed:
            self.send_header("content-encoding", "gzip")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self._answer(json.dumps(RESULT).encode(), "application/json")

    def do_GET(self) -> None:
        self._answer(EVENTS, "text/event-stream")

    def log_message(self, *args: object) -> None:
        pass


if __name__ == "__main__":
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(f"PORT {server.server_address[1]}", flush=True)
    server.serve_forever()
