"""``acp-proxy serve``: the reverse proxy in front of a remote ACP agent (Streamable HTTP and
WebSocket on one endpoint).

Owns: serve's options and help, their checks (one line, exit 2: the listen address, loopback
unless ``--allow-host`` names the host, the upstream URL, the extra being installed), masking the
command line before it is recorded, and handing over to ``relay.remote.server``.

Must not know: HTTP, WebSocket, the journal or SQL.
"""

from __future__ import annotations

from pathlib import Path

import click

from acp_proxy.cli.group import cli, resolve_db
from acp_proxy.cli.options import FilePath, db_option
from acp_proxy.errors import AcpProxyError, UsageError


class MissingExtra(AcpProxyError):
    """serve's libraries are not installed (the ``remote`` extra)."""


class _AgentAfterDashes(click.Command):
    """serve's command: it notes whether ``--`` was given (an AGENT comes only after it, so a
    stray word is a usage error, not a program to start)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta["serve_dashes"] = "--" in args
        return super().parse_args(ctx, args)


@cli.command(cls=_AgentAfterDashes, context_settings={"allow_interspersed_args": False})
@click.option(
    "--listen",
    default="127.0.0.1:8765",
    show_default=True,
    metavar="HOST:PORT",
    help="Where clients connect (port 0: any free one). Loopback unless --allow-host names HOST.",
)
@click.option(
    "--upstream",
    default=None,
    metavar="URL",
    help="The agent's endpoint: http(s)://HOST:PORT/acp or ws(s)://... (or -- AGENT: a stdio agent).",
)
@click.option(
    "--allow-host",
    "allow_hosts",
    multiple=True,
    metavar="NAME",
    help="Also answer requests whose Host is NAME, and allow listening on it (repeatable).",
)
@db_option
@click.option("--no-record", is_flag=True, help="Relay only; write nothing to any database.")
@click.option(
    "--fault",
    "fault_rules",
    multiple=True,
    metavar="RULE",
    help="Inject a fault on every connection, WebSocket or Streamable HTTP (repeatable; as run --fault,"
    " plus the remote actions). See `acp-proxy faults-help` and docs/remote-faults.md.",
)
@click.option(
    "--faults",
    "faults_file",
    type=FilePath(),
    default=None,
    help="A TOML file of fault rules (as run --faults; $ACP_PROXY_FAULTS is read too).",
)
@click.option("--seed", type=int, default=None, help="Seed for the random choices of fault rules.")
@click.option(
    "--redact",
    "redact_rules",
    multiple=True,
    is_flag=False,
    flag_value="",
    metavar="[RULE]",
    help="Store a masked copy of each message (as run --redact): built-in secrets and what RULE names, "
    "a JSON path or a regular expression (repeatable). What is forwarded is never altered.",
)
@click.argument("agent", nargs=-1, required=False, type=click.UNPROCESSED, metavar="[-- AGENT [ARGS]...]")
def serve(
    listen: str,
    upstream: str | None,
    allow_hosts: tuple[str, ...],
    db_path: Path | None,
    no_record: bool,
    fault_rules: tuple[str, ...],
    faults_file: Path | None,
    seed: int | None,
    redact_rules: tuple[str, ...],
    agent: tuple[str, ...],
) -> None:
    """Relay remote ACP clients to an agent at --upstream, recording every message.

    Clients connect to the same path as on the upstream (e.g. /acp) over WebSocket or
    Streamable HTTP; each client connection is a run. Credentials are relayed, never recorded.
    SIGINT or SIGTERM stops it after finishing the recordings.

    \b
    Examples:
        acp-proxy serve --upstream http://127.0.0.1:8000/acp
        acp-proxy serve --listen 127.0.0.1:0 --upstream wss://agent.example/acp --db remote.db
        acp-proxy serve --upstream ws://h/acp --fault 'drop if method:session/prompt kind:response'
        acp-proxy serve --upstream http://h/acp --fault 'status=503:2 if method:session/prompt nth=1'

    With `-- AGENT...` instead of --upstream, a stdio agent is served to remote clients on any
    path: each client connection starts its own AGENT process (stopped with the connection).

    \b
        acp-proxy serve --listen 127.0.0.1:8000 -- python examples/sdk_agent.py
    """
    try:
        import hypercorn  # noqa: F401
        import trio_websocket  # noqa: F401
    except ImportError as exc:
        raise MissingExtra(
            f"serve needs the remote extra ({exc.name} is missing): pip install 'acp-proxy[remote]'"
        ) from None
    from acp_proxy.relay.remote import shapes

    try:
        host, port = shapes.split_listen(listen)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    allowed = frozenset(name.lower().strip("[]") for name in allow_hosts)
    if not shapes.is_loopback(host) and host.lower() not in allowed:
        raise UsageError(f"--listen {host} is not a loopback address; add --allow-host {host} to serve on it")
    if agent and not click.get_current_context().meta.get("serve_dashes"):
        raise UsageError(f"unexpected argument {agent[0]!r} (a stdio agent comes after --)")
    if (upstream is None) == (not agent):
        raise UsageError("give --upstream URL or -- AGENT [ARGS]... (one of the two)")
    if redact_rules and no_record:
        raise UsageError("--redact masks what is recorded: it cannot be used with --no-record")
    redact = [rule for rule in redact_rules if rule] if redact_rules else None
    if redact:
        from acp_proxy.protocol.redact import Redactor

        Redactor(redact)  # a bad rule: one line, exit 2
    if agent:
        from acp_proxy.cli.serve_agent_options import serve_agent

        return serve_agent(
            listen, host, port, allowed, list(agent), db_path, no_record, fault_rules, seed, faults_file, redact
        )
    assert upstream is not None
    problem = shapes.check_upstream(upstream)
    if problem is not None:
        raise UsageError(problem)
    from acp_proxy.cli.run_command import build_fault_plan

    plan = build_fault_plan(fault_rules, faults_file, seed, remote=True)
    record_to = None
    if not no_record:
        from acp_proxy.record import recovery

        record_to = resolve_db(db_path)
        recovery.open_for_writing(record_to).conn.close()  # a refused database is refused before serving
    # What the run rows say ran: the upstream masked (a token in its address is a credential).
    argv = ["acp-proxy", "serve", "--listen", listen, "--upstream", shapes.mask_url(upstream)]
    import trio

    from acp_proxy.relay.remote.server import ServeOptions
    from acp_proxy.relay.remote.server import serve as serve_forever

    options = ServeOptions(
        upstream=upstream,
        db_path=record_to,
        listen_host=host,
        listen_port=port,
        allowed_hosts=allowed | {host.lower()},
        argv=argv,
        fault_plan=plan,
        redact=redact,
    )
    try:
        trio.run(serve_forever, options)
    except OSError as exc:
        raise UsageError(f"cannot listen on {listen}: {(exc.strerror or str(exc)).lower()}") from None
