"""The SDK's remote client (``acp.connect_to_agent`` over ``acp.http.create_http_stream`` or
``acp.ws.create_websocket_stream``, as its examples use them) driven through a conversation under
faults: every call has a deadline, and each outcome is one line on stdout, so a test asserts on
what the client saw (an answer, an error, a timeout, a retry).

``python sdk_fault_client.py http|ws URL [--wait S] [--short S] [--again-wait S] [--retry]
[--two-prompts] [--again]``

- ``--wait``: how long each call may take; ``--short``, ``--again-wait``: how long the prompt,
  ``--again``'s request may take, for a test where a fault keeps their answer from coming.

- ``--retry``: a prompt that fails with an HTTP status (or a closed socket) is sent once more.
- ``--two-prompts``: prompt "one", and once its echo arrived, prompt "two" while the first is
  still unanswered; both answers are awaited.
- ``--again``: after the prompt, ask for a second session.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from acp import connect_to_agent, text_block
from acp.interfaces import Client

ECHOES: dict[str, asyncio.Event] = {}


class FaultClient(Client):
    async def request_permission(self, session_id: str, tool_call: Any, options: Any, **kwargs: Any) -> Any:
        return {"outcome": {"outcome": "selected", "optionId": options[0]["optionId"]}}

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        content = getattr(update, "content", None)
        text = getattr(content, "text", None) if content is not None else None
        if text:
            print(f"<< {text}", flush=True)
            ECHOES.setdefault(text, asyncio.Event()).set()

    async def write_text_file(self, *args: Any, **kwargs: Any) -> None:
        return None

    async def read_text_file(self, *args: Any, **kwargs: Any) -> Any:
        return {"content": ""}


def said(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "timeout"
    return f"error {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}".rstrip()


async def step(name: str, call: Any, wait: float) -> Any:
    try:
        result = await asyncio.wait_for(call, wait)
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        print(f"{name}: {said(exc)}", flush=True)
        return None
    return result


async def main(args: argparse.Namespace) -> None:
    if args.kind == "ws":
        from acp.ws import create_websocket_stream

        transport = await create_websocket_stream(args.url)
    else:
        from acp.http import create_http_stream

        transport = create_http_stream(args.url)
    conn = connect_to_agent(FaultClient(), transport)  # type: ignore[abstract]  # a Protocol with defaults
    try:
        init = await step("initialize", conn.initialize(protocol_version=1), args.wait)
        if init is None:
            return
        print("initialized", flush=True)
        session = await step("session", conn.new_session(cwd=".", mcp_servers=[]), args.wait)
        if session is None:
            return
        print("session: ok", flush=True)
        sid = session.session_id
        if args.two_prompts:
            ECHOES.setdefault("echo: one", asyncio.Event())
            first = asyncio.ensure_future(
                step("prompt one", conn.prompt(session_id=sid, prompt=[text_block("one")]), args.wait)
            )
            await asyncio.wait_for(ECHOES["echo: one"].wait(), args.wait)
            print("sending two", flush=True)
            second = step("prompt two", conn.prompt(session_id=sid, prompt=[text_block("two")]), args.wait)
            for name, result in zip(("one", "two"), await asyncio.gather(first, second), strict=True):
                if result is not None:
                    print(f"stop reason {name}: {result.stop_reason}", flush=True)
            return
        short = args.short or args.wait
        result = await step("prompt", conn.prompt(session_id=sid, prompt=[text_block(args.prompt)]), short)
        if result is None and args.retry:
            print("retrying", flush=True)
            result = await step("prompt", conn.prompt(session_id=sid, prompt=[text_block(args.prompt)]), short)
        if result is not None:
            print(f"stop reason: {result.stop_reason}", flush=True)
        if args.await_echo:
            # The echo and the prompt's answer travel on different HTTP streams: wait for the
            # echo before closing, so what is seen does not depend on which came first.
            try:
                await asyncio.wait_for(ECHOES.setdefault(args.await_echo, asyncio.Event()).wait(), args.wait)
            except TimeoutError:
                print(f"no {args.await_echo!r}", flush=True)
        if args.again:
            again = await step("session again", conn.new_session(cwd=".", mcp_servers=[]), args.again_wait or args.wait)
            if again is not None:
                print("session again: ok", flush=True)
    finally:
        for closing in (conn.close(), transport.close()):
            try:
                await asyncio.wait_for(closing, args.wait)
            except BaseException:
                pass


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("kind", choices=("http", "ws"))
    parser.add_argument("url")
    parser.add_argument("--prompt", default="hi")
    parser.add_argument("--await-echo", default=None, help="wait for this echo before closing")
    parser.add_argument("--wait", type=float, default=30.0)
    parser.add_argument("--short", type=float, default=None)
    parser.add_argument("--again-wait", type=float, default=None)
    parser.add_argument("--retry", action="store_true")
    parser.add_argument("--two-prompts", action="store_true")
    parser.add_argument("--again", action="store_true")
    asyncio.run(main(parser.parse_args()))
