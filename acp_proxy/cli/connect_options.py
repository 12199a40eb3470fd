"""``acp-proxy run --connect URL``'s options: their checks and handing over to the bridge.

Owns: what ``--connect`` and ``--header`` accept (one line, exit 2: a URL that is no ws(s):// or
http(s):// address, a header that is not ``NAME: VALUE``, an AGENT or an option that means
nothing without a local agent), ``$ACP_PROXY_AUTHORIZATION``, the command line as it is
recorded (the URL's secrets and every header value masked), and the exit status.

Must not know: HTTP, WebSocket, the journal, SQL.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from acp_proxy.errors import AcpProxyError, UsageError

AUTH_VARIABLE = "ACP_PROXY_AUTHORIZATION"
_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # an HTTP field name (RFC 9110 §5.1)


class MissingExtra(AcpProxyError):
    """--connect's libraries are not installed (the ``remote`` extra)."""


def parse_headers(given: tuple[str, ...], env_value: str | None) -> list[tuple[str, str]]:
    """``NAME: VALUE`` words (and the Authorization of ``$ACP_PROXY_AUTHORIZATION``) as pairs."""
    pairs: list[tuple[str, str]] = []
    for text in given:
        name, sep, value = text.partition(":")
        name, value = name.strip(), value.strip()
        if not sep or not _TOKEN.match(name) or any(c in value for c in "\r\n\0"):
            shown = name if _TOKEN.match(name) else "?"
            raise UsageError(f"--header must be 'NAME: VALUE' (a header named {shown!r} is not one)")
        try:
            value.encode("latin-1")
        except UnicodeEncodeError:
            raise UsageError(f"--header {name}: its value must be Latin-1 text") from None
        pairs.append((name, value))
    if env_value and not any(name.lower() == "authorization" for name, _ in pairs):
        if any(c in env_value for c in "\r\n\0"):
            raise UsageError(f"${AUTH_VARIABLE} must be one line")
        pairs.append(("Authorization", env_value.strip()))
    return pairs


def recorded_argv(url: str, headers: list[tuple[str, str]]) -> list[str]:
    """The command line as the run row shows it: no credential in it."""
    from acp_proxy.relay.remote import shapes

    argv = ["acp-proxy", "run", "--connect", shapes.mask_url(url)]
    for name, _ in headers:
        argv += ["--header", f"{name}: {shapes.MASK}"]
    return argv


def connect_and_exit(
    url: str | None,
    headers: tuple[str, ...],
    agent: tuple[str, ...],
    db_path: Path | None,
    no_record: bool,
    plan: Any,
    redirect_stderr: Callable[[Path | None], None],
    unsupported: dict[str, bool],
) -> None:
    if url is None:
        raise UsageError("--header is for --connect URL")
    if agent:
        raise UsageError("--connect URL relays to a remote agent: give no AGENT after --")
    for option, given in unsupported.items():
        if given:
            raise UsageError(f"{option} is not available with --connect")
    try:
        import httpx  # noqa: F401
        import trio_websocket  # noqa: F401
    except ImportError as exc:
        raise MissingExtra(
            f"--connect needs the remote extra ({exc.name} is missing): pip install 'acp-proxy[remote]'"
        ) from None
    from acp_proxy.relay.remote import shapes

    problem = shapes.check_upstream(url)
    if problem is not None:
        raise UsageError(problem.replace("--upstream", "--connect"))
    pairs = parse_headers(headers, os.environ.get(AUTH_VARIABLE))
    from acp_proxy.cli.group import resolve_db

    record_to = None
    if not no_record:
        from acp_proxy.record import recovery

        record_to = resolve_db(db_path)
        recovery.open_for_writing(record_to).conn.close()  # a refused database is refused first
    redirect_stderr(record_to)
    from acp_proxy.relay.remote.connect import ConnectOptions, run_connected

    options = ConnectOptions(url=url, headers=pairs, db_path=record_to, argv=recorded_argv(url, pairs), fault_plan=plan)
    code = run_connected(options)
    raise SystemExit(code)
