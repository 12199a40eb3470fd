"""``stream_agent.py`` on stdio, for ``serve -- AGENT`` load tests: a request ``{"id": I,
"method": "stream", "params": {"n": N, "size": S}}`` is answered with N ``session/update``
notifications of about S bytes each (written as fast as its stdout takes them), then the
response; any other request with an empty result. It ends at the end of its stdin."""

from __future__ import annotations

import json
import sys

sys.path.insert(0, __file__.rsplit("/", 1)[0])

from stream_agent import chunk

if __name__ == "__main__":
    out = sys.stdout.buffer
    for line in sys.stdin.buffer:
        if not line.strip():
            continue
        message = json.loads(line)
        if "id" not in message or "method" not in message:
            continue
        if message["method"] == "stream":
            text = chunk(message["params"]["size"]).encode() + b"\n"
            for _ in range(message["params"]["n"]):
                out.write(text)
        out.write(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": {}}).encode() + b"\n")
        out.flush()
