"""A scripted ACP agent for tests: answers each request with the frames its script gives.

Usage: python scripted_agent.py SCRIPT.json

The script is a JSON object: ``{"on": {METHOD: [STEP, ...]}, "start": [STEP, ...]}``. When a
request (or notification) with METHOD arrives, its steps are written in order; ``start`` steps
are written before anything is read. A step is a frame (a JSON object, written as one line, in
which every string ``"$id"`` is replaced by the request's id and ``"$session"`` by its
``params.sessionId``), or ``{"raw": "..."}`` for bytes written as they are (a stray line, a
split frame), or ``{"exit": N}`` to exit with status N at that point.

``on_response`` maps a response id (as JSON text, e.g. ``"0"``) to the steps written when the
client answers the agent's request with that id.

Steps for a METHOD are used once per occurrence: a list of lists gives one list per call
(``{"on": {"session/prompt": [[...first prompt...], [...second prompt...]]}}``); a flat list is
reused for every call. Requests with no script are answered with an empty result, notifications
are ignored. Everything is flushed after each step, so a test sees frames as they are written.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def substitute(value: Any, request_id: Any, session_id: Any) -> Any:
    if value == "$id":
        return request_id
    if value == "$session":
        return session_id
    if isinstance(value, dict):
        return {k: substitute(v, request_id, session_id) for k, v in value.items()}
    if isinstance(value, list):
        return [substitute(v, request_id, session_id) for v in value]
    return value


def write_steps(steps: list[Any], request_id: Any, session_id: Any) -> None:
    out = sys.stdout.buffer
    for step in steps:
        if isinstance(step, dict) and "exit" in step:
            out.flush()
            raise SystemExit(step["exit"])
        if isinstance(step, dict) and "raw" in step:
            out.write(step["raw"].encode())
        else:
            out.write(json.dumps(substitute(step, request_id, session_id)).encode() + b"\n")
        out.flush()


def main() -> None:
    with open(sys.argv[1]) as f:
        script = json.load(f)
    handlers: dict[str, Any] = script.get("on", {})
    calls: dict[str, int] = {}
    write_steps(script.get("start", []), None, None)
    for line in sys.stdin.buffer:
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if not isinstance(message, dict):
            continue
        if "method" not in message:  # the client answering one of our requests
            steps = script.get("on_response", {}).get(json.dumps(message.get("id")))
            if steps:
                write_steps(steps, message.get("id"), None)
            continue
        method = message["method"]
        request_id = message.get("id")
        session_id = (message.get("params") or {}).get("sessionId") if isinstance(message.get("params"), dict) else None
        steps = handlers.get(method)
        if steps and isinstance(steps[0], list):
            index = calls.get(method, 0)
            calls[method] = index + 1
            steps = steps[index] if index < len(steps) else None
        if steps is None:
            if "id" in message:
                write_steps([{"jsonrpc": "2.0", "id": "$id", "result": {}}], request_id, session_id)
            continue
        write_steps(steps, request_id, session_id)


if __name__ == "__main__":
    main()
