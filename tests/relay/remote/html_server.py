"""Not an ACP agent: a web server that answers every request with an HTML page (200). Prints
``PORT <n>`` once listening; serves until killed."""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PAGE = b"<!doctype html><html><body><h1>Welcome to nginx!</h1></body></html>"


class Handler(BaseHTTPRequestHandler):
    def _page(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        self.rfile.read(length)
        self.send_response(200)
        self.send_header("content-type", "text/html")
        self.send_header("content-length", str(len(PAGE)))
        self.end_headers()
        self.wfile.write(PAGE)

    do_GET = do_POST = do_DELETE = _page

    def log_message(self, *args: object) -> None:
        pass


if __name__ == "__main__":
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(f"PORT {server.server_address[1]}", flush=True)
    server.serve_forever()
