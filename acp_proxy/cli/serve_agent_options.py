"""``acp-proxy serve -- AGENT``'s checks and handing over to ``relay.remote.agent_server``.

Owns: the fault plan (its rules, the remote wire's actions included, apply to every connection, as
with --upstream), ``--redact`` handed on, finding the agent before serving (a usage error when it
cannot be: exit 2), the recorded command line. Must not know: HTTP, the journal, SQL.
"""

from __future__ import annotations

from pathlib import Path

from acp_proxy.errors import UsageError


def serve_agent(
    listen: str,
    host: str,
    port: int,
    allowed: frozenset[str],
    agent: list[str],
    db_path: Path | None,
    no_record: bool,
    fault_rules: tuple[str, ...],
    seed: int | None,
    faults_file: Path | None = None,
    redact: list[str] | None = None,
) -> None:
    from acp_proxy.cli.run_command import build_fault_plan

    plan = build_fault_plan(fault_rules, faults_file, seed, remote=True)
    from acp_proxy.relay.spawn import RelayError, resolve_agent

    try:
        "".join(agent).encode()
        resolve_agent(agent)  # an agent that cannot be found is said now, not at the first client
    except UnicodeEncodeError:
        raise UsageError("the AGENT command line must be UTF-8 text") from None
    except RelayError as exc:
        raise UsageError(f"AGENT {exc}") from None
    record_to = None
    if not no_record:
        from acp_proxy.cli.group import resolve_db
        from acp_proxy.record import recovery

        record_to = resolve_db(db_path)
        recovery.open_for_writing(record_to).conn.close()  # a refused database is refused before serving
    import trio

    from acp_proxy.relay.remote.agent_server import AgentServeOptions
    from acp_proxy.relay.remote.agent_server import serve_agent as serve_forever

    options = AgentServeOptions(
        agent=agent,
        db_path=record_to,
        listen_host=host,
        listen_port=port,
        allowed_hosts=allowed | {host.lower()},
        argv=["acp-proxy", "serve", "--listen", listen, "--", *agent],
        fault_plan=plan,
        redact=redact,
    )
    try:
        trio.run(serve_forever, options)
    except OSError as exc:
        raise UsageError(f"cannot listen on {listen}: {(exc.strerror or str(exc)).lower()}") from None
