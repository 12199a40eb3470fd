"""An ACP client built on the official Python SDK that prints a deterministic transcript.

    python examples/sdk_client.py [--prompt TEXT]... [--load SESSION_ID] [--cwd DIR]
                                  [--deny | --no-permission] [--summary] [--timeout S]
                                  -- AGENT [ARGV...]

It spawns ``AGENT ARGV...`` (everything after ``--``; the full environment is passed on), sends
``initialize``, then ``session/new`` — or ``session/load SESSION_ID``, printing the history the
agent replays — then one ``session/prompt`` per ``--prompt`` (default: "hello world" and
"second prompt"; with ``--load``, no prompt unless given), and closes the agent's stdin.
Permission requests are answered with the first ``allow_*`` option; ``--deny`` picks the first
``reject_*`` option (or ``cancelled`` when there is none); ``--no-permission`` answers with a
JSON-RPC "method not found" error.

Transcript (stdout), one line per event, ``KIND: DETAIL``; text is kept on one line (``\\n``,
``\\r`` and ``\\`` escaped)::

    init: protocol=1 agent=NAME/VERSION loadSession=true   the initialize response
    prompt: TEXT                                            a prompt the client sends
    user: TEXT | agent: TEXT | thought: TEXT                message chunks (non-text: <image ...>)
    tool_call: ID STATUS TITLE                              a tool call starts
    tool_call_update: ID STATUS                             a tool call changes
    plan: N entries | update: KIND                          plans; any other update variant
    permission: ID [OPTION,...] -> CHOICE                   CHOICE: option id, cancelled, error
    updates: KIND=N ...                                     --summary: counts instead of lines
    stop: REASON                                            a prompt's stop reason
    loaded: N updates                                       end of a session/load
    session: ID                                             last line, on success only

Exit status 0 on success; 1 with one ``sdk_client: ...`` line on stderr when the agent cannot
be started, fails a request, closes the connection, exits non-zero, or when ``--timeout``
(default 30 s, for the whole conversation) runs out; 2 for a usage error.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import sys
from typing import Any

from acp import PROTOCOL_VERSION, Client, RequestError, spawn_agent_process, text_block
from acp.schema import (
    AgentMessageChunk,
    AgentPlanUpdate,
    AgentThoughtChunk,
    AllowedOutcome,
    ClientCapabilities,
    DeniedOutcome,
    EmbeddedResourceContentBlock,
    ImageContentBlock,
    Implementation,
    PermissionOption,
    RequestPermissionResponse,
    ResourceContentBlock,
    TextContentBlock,
    ToolCallProgress,
    ToolCallStart,
    ToolCallUpdate,
    UserMessageChunk,
)

DEFAULT_PROMPTS = ["hello world", "second prompt"]
CLIENT_NAME = "acp-proxy-sdk-client"
CLIENT_VERSION = "0.1.0"
SHUTDOWN_GRACE_S = 10.0  # the proxy finishes its recording before it exits: give it time to


class ClientFailure(Exception):
    """A failure worth one clear line on stderr."""


def one_line(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")


def describe_content(content: Any) -> str:
    if isinstance(content, TextContentBlock):
        return one_line(content.text)
    if isinstance(content, ImageContentBlock):
        return f"<image {content.mime_type}>"
    if isinstance(content, ResourceContentBlock):
        return f"<resource_link {content.uri}>"
    if isinstance(content, EmbeddedResourceContentBlock):
        return f"<resource {content.resource.uri}>"
    return f"<{getattr(content, 'type', 'content')}>"


class TranscriptClient(Client):
    """Answers the agent's requests and prints what it sees, in the order it sees it."""

    def __init__(self, permission: str, summary: bool) -> None:
        self.permission = permission  # "allow", "deny" or "error"
        self.summary = summary
        self.counts: collections.Counter[str] = collections.Counter()
        self.updates_seen = 0

    def emit(self, line: str) -> None:
        print(line, flush=True)

    def flush_counts(self) -> None:
        if self.summary and self.counts:
            self.emit("updates: " + " ".join(f"{kind}={n}" for kind, n in sorted(self.counts.items())))
            self.counts.clear()

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        # Printed before any await: the SDK starts handlers in arrival order, so lines keep it.
        self.updates_seen += 1
        kind = getattr(update, "session_update", type(update).__name__)
        if self.summary:
            self.counts[kind] += 1
            return
        self.emit(describe_update(update, kind))

    async def request_permission(
        self, session_id: str, tool_call: ToolCallUpdate, options: list[PermissionOption], **kwargs: Any
    ) -> RequestPermissionResponse:
        offered = ",".join(option.option_id for option in options)
        head = f"permission: {tool_call.tool_call_id} [{offered}] -> "
        if self.permission == "error":
            self.emit(head + "error")
            raise RequestError.method_not_found("session/request_permission")
        prefix = "allow" if self.permission == "allow" else "reject"
        choice = next((option for option in options if option.kind.startswith(prefix)), None)
        if choice is None:
            self.emit(head + "cancelled")
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        self.emit(head + choice.option_id)
        selected = AllowedOutcome(outcome="selected", option_id=choice.option_id)
        return RequestPermissionResponse(outcome=selected)


def describe_update(update: Any, kind: str) -> str:
    if isinstance(update, UserMessageChunk):
        return f"user: {describe_content(update.content)}"
    if isinstance(update, AgentMessageChunk):
        return f"agent: {describe_content(update.content)}"
    if isinstance(update, AgentThoughtChunk):
        return f"thought: {describe_content(update.content)}"
    if isinstance(update, ToolCallStart):
        return f"tool_call: {update.tool_call_id} {update.status or '-'} {one_line(update.title)}"
    if isinstance(update, ToolCallProgress):
        return f"tool_call_update: {update.tool_call_id} {update.status or '-'}"
    if isinstance(update, AgentPlanUpdate):
        return f"plan: {len(update.entries)} entries"
    return f"update: {kind}"


async def converse(options: argparse.Namespace, client: TranscriptClient) -> str:
    """Run the whole conversation; return the session id."""
    command, *args = options.agent
    step = "starting the agent"
    process = None
    try:
        async with spawn_agent_process(
            client,
            command,
            *args,
            env=dict(os.environ),
            transport_kwargs={"stderr": None, "shutdown_timeout": SHUTDOWN_GRACE_S},
        ) as (conn, process):
            try:
                async with asyncio.timeout(options.timeout):
                    step = "initialize"
                    init = await conn.initialize(
                        protocol_version=PROTOCOL_VERSION,
                        client_capabilities=ClientCapabilities(),
                        client_info=Implementation(name=CLIENT_NAME, version=CLIENT_VERSION),
                    )
                    info = init.agent_info
                    can_load = bool(init.agent_capabilities and init.agent_capabilities.load_session)
                    client.emit(
                        f"init: protocol={init.protocol_version} "
                        f"agent={info.name if info else '?'}/{info.version if info else '?'} "
                        f"loadSession={'true' if can_load else 'false'}"
                    )
                    if options.load:
                        if not can_load:
                            raise ClientFailure("the agent does not advertise loadSession")
                        step = "session/load"
                        before = client.updates_seen
                        await conn.load_session(cwd=options.cwd, session_id=options.load, mcp_servers=[])
                        client.flush_counts()
                        client.emit(f"loaded: {client.updates_seen - before} updates")
                        session_id = options.load
                    else:
                        step = "session/new"
                        session_id = (await conn.new_session(cwd=options.cwd, mcp_servers=[])).session_id
                    for text in options.prompts:
                        step = "session/prompt"
                        client.emit(f"prompt: {one_line(text)}")
                        response = await conn.prompt(session_id=session_id, prompt=[text_block(text)])
                        client.flush_counts()
                        client.emit(f"stop: {response.stop_reason}")
            except TimeoutError:
                raise ClientFailure(f"timed out after {options.timeout:g} s waiting for {step}") from None
            step = "the agent to exit"
        # Leaving the block closed the agent's stdin and waited for it (terminating it if needed).
    except RequestError as exc:
        raise ClientFailure(f"{step} failed: error {exc.code} {exc}{data_suffix(exc.data)}") from None
    except ConnectionError:
        raise ClientFailure(f"the agent closed the connection during {step}{exit_suffix(process)}") from None
    except OSError as exc:
        if step == "starting the agent":
            raise ClientFailure(f"cannot start the agent {command!r}: {exc.strerror or exc}") from None
        raise ClientFailure(f"{step} failed: {exc}") from None
    if process is not None and process.returncode:
        raise ClientFailure(f"the agent exited with status {process.returncode}")
    return session_id


def data_suffix(data: Any) -> str:
    return f" ({data})" if data else ""


def exit_suffix(process: Any) -> str:
    code = getattr(process, "returncode", None)
    return "" if code is None else f" (agent exit status {code})"


def split_argv(argv: list[str]) -> tuple[list[str], list[str]]:
    if "--" not in argv:
        return argv, []
    cut = argv.index("--")
    return argv[:cut], argv[cut + 1 :]


def parse_args(argv: list[str]) -> argparse.Namespace:
    own, agent = split_argv(argv)
    parser = argparse.ArgumentParser(
        prog="sdk_client.py",
        usage="%(prog)s [options] -- AGENT [ARGV...]",
        description="Drive an ACP agent with the official SDK and print a transcript.",
    )
    parser.add_argument("--prompt", action="append", dest="prompts", metavar="TEXT", help="repeatable")
    parser.add_argument("--load", metavar="SESSION_ID", help="load this session instead of creating one")
    parser.add_argument("--cwd", default=os.getcwd(), help="session cwd (default: the current directory)")
    answer = parser.add_mutually_exclusive_group()
    answer.add_argument("--deny", action="store_true", help="reject permission requests")
    answer.add_argument("--no-permission", action="store_true", help="answer permission requests with method-not-found")
    parser.add_argument("--summary", action="store_true", help="count updates instead of printing each one")
    parser.add_argument("--timeout", type=float, default=30.0, metavar="S", help="run limit (default 30)")
    options = parser.parse_args(own)
    if not agent:
        parser.error("missing the agent command after --")
    if options.timeout <= 0:
        parser.error("--timeout must be positive")
    options.agent = agent
    if options.prompts is None:
        options.prompts = [] if options.load else list(DEFAULT_PROMPTS)
    return options


def main(argv: list[str] | None = None) -> int:
    options = parse_args(sys.argv[1:] if argv is None else argv)
    permission = "error" if options.no_permission else "deny" if options.deny else "allow"
    client = TranscriptClient(permission, options.summary)
    try:
        session_id = asyncio.run(converse(options, client))
    except ClientFailure as exc:
        print(f"sdk_client: {exc}", file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        print("sdk_client: interrupted", file=sys.stderr, flush=True)
        return 130
    client.emit(f"session: {session_id}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
