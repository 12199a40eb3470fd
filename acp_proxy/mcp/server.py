"""``acp-proxy mcp``: an MCP server over the recordings, so a coding agent can read them.

Owns: the command, and the registration of the tools (``tools.Tools``) and prompts
(``prompts``) on the official MCP SDK's server: every tool read-only, with its input schema
(described parameters), its ``outputSchema`` (the model of ``shapes`` it answers) and its
answer as structured content plus the same JSON as text (``show``: the conversation's text).
The tools: ``summary`` (insights: hot spot, long tail, outliers, errors), ``session_info``
(both sides' capabilities, protocol, mode, model), ``list_runs``, ``list_sessions``,
``sessions_by_client``, ``show``, ``exchanges`` (requests paired with their answers),
``frames`` (the filter language), ``frame``, ``marks`` (marked frames and their notes),
``stats``, ``check``, ``diff``.

Redacted by default: every frame passes the redactor before it is matched, folded, rendered or
returned (credential headers and fields, ``env`` values, bearer tokens, API-key and JWT shapes,
and the ``--redact`` rules); ``--no-redact`` shows what was recorded.

Must not know: how frames are recorded; SQL (every answer is computed by the read layer,
``acp_proxy/read/``, and only rendered here); stdout is the MCP channel and nothing else writes
there (the SDK's logging goes to stderr, prefixed). Imported by every command (it registers
``mcp``): the SDK, pydantic and the tools are imported only when the server starts.

Every tool opens the database read-only for its call, so recordings made meanwhile are seen.
A mistake (a bad reference, filter or number) is a tool error with one line, never a crash.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import click

from acp_proxy.cli.options import db_option, redact_options
from acp_proxy.errors import AcpProxyError, UsageError

if TYPE_CHECKING:
    from acp_proxy.mcp.tools import Tools

INSTALL_HINT = "acp-proxy mcp needs the [mcp] extra: pip install 'acp-proxy[mcp]'"


class MissingExtra(AcpProxyError):
    """The MCP SDK (the ``[mcp]`` extra) is not installed."""


def _missing_extra() -> str | None:
    try:
        import mcp.server.mcpserver  # noqa: F401
    except ImportError:
        return INSTALL_HINT
    return None


# -- the server -------------------------------------------------------------------------------------


def build_server(tools: Tools) -> Any:
    """The MCP SDK's server with every tool registered, read-only, each with its output schema,
    and the prompts."""
    import logging

    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp.types import ToolAnnotations

    from acp_proxy import __version__
    from acp_proxy.mcp import prompts

    server = MCPServer(
        "acp-proxy",
        version=__version__,
        instructions="Read-only access to acp-proxy recordings of Agent Client Protocol conversations "
        "between an editor and a coding agent. Start with `summary` (insights: hot spot, long tail, "
        "outliers, errors); then `session_info`, `exchanges`, `frames` (the filter language), `show`, "
        "`stats`, `check` (spec conformance), `diff`, `sessions_by_client`, `marks` (frames people "
        "marked, with their notes). Every list is paged: "
        "`total`, `next`. Secrets are masked.",
        log_level="WARNING",
    )
    # The SDK logs to stderr through rich; say it the way acp-proxy says things.
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("acp-proxy: mcp: %(message)s"))
    logging.getLogger().handlers = [handler]
    read_only = ToolAnnotations(
        read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
    )
    for method in tools.all():
        server.add_tool(
            _as_tool(method, ToolError),
            name=method.__name__,
            description=method.__doc__,
            annotations=read_only,
            structured_output=True,
        )
    prompts.register(server)
    return server


def _as_tool(method: Callable[..., Any], tool_error: type[Exception]) -> Callable[..., Any]:
    """``method`` as the SDK calls a tool: its answer as structured content (validated by the
    SDK against the output model, which it publishes as the tool's ``outputSchema``) and the
    same JSON as text (``show``: the conversation's text) for clients that read only text; its
    mistakes as the SDK's tool errors (a one-line error result)."""
    import functools
    import inspect

    from mcp.types import CallToolResult, TextContent

    from acp_proxy.mcp import shapes

    signature = inspect.signature(method, eval_str=True)
    model = signature.return_annotation

    @functools.wraps(method)
    def tool(*args: Any, **kwargs: Any) -> Any:
        try:
            answer = method(*args, **kwargs)
        except UsageError as exc:
            raise tool_error(str(exc)) from None
        structured = answer.model_dump(mode="json")
        text = answer.text if isinstance(answer, shapes.ShowAnswer) else shapes.dumps(structured)
        return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=structured)

    tool.__signature__ = signature.replace(return_annotation=Annotated[CallToolResult, model])  # type: ignore[attr-defined]
    return tool


@click.command("mcp")
@db_option
@redact_options
def mcp(db_path: Path | None, redact_rules: tuple[str, ...], no_redact: bool) -> None:
    """Serve the recordings to a coding agent over MCP (stdio), read-only.

    Tools: summary (insights), session_info, list_runs, list_sessions, sessions_by_client,
    show, exchanges, frames (the filter language), frame, marks, stats, check, diff; every answer
    structured and paged. Prompts: triage a slow session, audit spec violations, compare
    clients. Secrets are masked unless --no-redact. Stdout carries MCP only. Add it to an MCP
    client's settings:

    \b
    Examples:
        claude mcp add acp-proxy -- acp-proxy mcp
        acp-proxy mcp --db ./session.db --redact 'ticket-[0-9]+'
    """
    missing = _missing_extra()
    if missing:
        raise MissingExtra(missing)
    from acp_proxy.locations import default_db_path
    from acp_proxy.mcp.tools import Tools
    from acp_proxy.protocol.redact import Redactor

    redactor = Redactor(redact_rules, enabled=not no_redact)  # a bad rule: one line, exit 2
    path = db_path if db_path is not None else default_db_path()
    server = build_server(Tools(path, redactor))
    try:
        server.run("stdio")
    except KeyboardInterrupt:
        pass
