"""``acp-proxy ui``: serve the inspector (Datasette and this package's plugin) on loopback.

Owns: the command's options, checking them before anything starts (one line per mistake),
binding the socket (so that ``--port 0`` can print the port it got), the per-launch token, the
printed URL (stdout: the only thing written there), opening the browser, and a clean stop on
Ctrl-C or SIGTERM (exit 0, no traceback).

Must not know: the pages (``plugin``, ``model``) or how requests are checked (``guard``). It
imports Datasette only when run, so the rest of acp-proxy works without the ``[ui]`` extra.
"""

from __future__ import annotations

import ipaddress
import logging
import re
import secrets
import socket
import sys
from pathlib import Path
from typing import Any

import click

from acp_proxy.cli.options import db_option
from acp_proxy.errors import AcpProxyError

INSTALL_HINT = "acp-proxy ui needs the [ui] extra: pip install 'acp-proxy[ui]'"
LOOPBACK = "127.0.0.1"


class MissingExtra(AcpProxyError):
    """The optional dependencies of the inspector are not installed."""


def _missing_extra() -> str | None:
    """The one line to print when Datasette (or what it needs) cannot be imported."""
    try:
        import datasette.app  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        return INSTALL_HINT
    return None


def _token(value: str | None) -> str:
    if value is None:
        return secrets.token_urlsafe(24)
    if len(value) < 8 or len(value) > 200 or not value.isascii() or not all(c.isalnum() or c in "-_.~" for c in value):
        raise click.BadParameter("a token is 8 to 200 characters of A-Z, a-z, 0-9 and -_.~", param_hint="--token")
    return value


_HOST_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*")
WILDCARDS = ("0.0.0.0", "::", "[::]")


def _allowed_host(value: str) -> str:
    """A name the server answers to: a host name, an IPv4 or an IPv6 address (no port)."""
    bare = value[1:-1] if value.startswith("[") and value.endswith("]") else value
    try:
        ipaddress.ip_address(bare)
        return value
    except ValueError:
        pass
    if len(value) > 253 or not _HOST_NAME.fullmatch(value):
        raise click.BadParameter(
            f"{value!r} is not a host name or address (give it without a scheme, port or path)",
            param_hint="--allow-host",
        )
    return value


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        reason = exc.strerror.lower() if exc.strerror else str(exc)
        raise AcpProxyError(f"cannot listen on {host}:{port}: {reason}") from None
    except (UnicodeError, ValueError, TypeError):  # the resolver's answers to a name no host can have
        sock.close()
        raise AcpProxyError(f"cannot listen on {host!r}: not a host name or address") from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def _url(host: str, port: int, token: str) -> str:
    shown = f"[{host}]" if ":" in host and not host.startswith("[") else host
    return f"http://{shown}:{port}/?token={token}"


class _Prefixed(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return "acp-proxy: " + super().format(record).replace("\n", " ")


def _quiet_logging() -> None:
    # uvicorn logs access lines to stdout by default; stdout here is for the URL alone.
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Prefixed("%(message)s"))
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access", "datasette"):
        logger = logging.getLogger(name)
        logger.handlers = [handler]
        logger.propagate = False
        logger.setLevel(logging.WARNING)


@click.command("ui")
@db_option
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True, help="0: any free port.")
@click.option(
    "--host",
    default=None,
    metavar="HOST",
    help="Listen on this address instead of 127.0.0.1 (reachable by others: a warning is printed).",
)
@click.option("--token", default=None, metavar="T", help="Use this access token instead of a random one.")
@click.option("--no-open", is_flag=True, help="Do not open a browser; just print the URL.")
@click.option(
    "--redact",
    "redact_rules",
    multiple=True,
    metavar="RULE",
    help="Also mask what this JSON path (params._meta.token) or regular expression matches (repeatable).",
)
@click.option("--no-redact", is_flag=True, help="Show secrets as recorded (they are masked by default).")
@click.option(
    "--allow-host",
    "allow_hosts",
    multiple=True,
    metavar="NAME",
    help="Also answer requests that name this host (repeatable): how others reach --host 0.0.0.0. "
    "The token is still required.",
)
def ui(
    db_path: Path | None,
    port: int,
    host: str | None,
    token: str | None,
    no_open: bool,
    redact_rules: tuple[str, ...],
    no_redact: bool,
    allow_hosts: tuple[str, ...],
) -> None:
    """Look at recordings in a browser: runs, conversations, frames, charts, diffs.

    Serves a live inspector (a Datasette plugin) on 127.0.0.1 and prints its URL, which carries
    a random access token; every request needs it (then a cookie). Every table and view of the
    database is there too, read-only, with Datasette's filters, facets and SQL. Secrets
    (credential headers, env values, bearer tokens, API keys, JWTs) are masked before any page
    or query sees them, unless --no-redact. Ctrl-C stops it.

    \b
    Examples:
        acp-proxy ui
        acp-proxy ui --db rec.db --port 0 --no-open
        acp-proxy ui --redact params._meta.proxy --redact 'ticket-[0-9]+'
        acp-proxy ui --host 0.0.0.0 --allow-host devbox.lan
    """
    missing = _missing_extra()
    if missing:
        raise MissingExtra(missing)
    from acp_proxy.locations import default_db_path
    from acp_proxy.protocol.redact import Redactor
    from acp_proxy.record import recovery

    Redactor(redact_rules)  # a bad rule is a RedactError: one line, exit 2
    allow_hosts = tuple(_allowed_host(name) for name in allow_hosts)
    path = db_path if db_path is not None else default_db_path()
    recovery.open_for_reading(path).conn.close()  # exists, is ours, migrated: or one clear line
    token = _token(token)
    bind_host = host if host is not None else LOOPBACK
    sock = _bind(bind_host, port)
    # Warned only once listening: a host that cannot be bound is one line, the error alone.
    if host is not None and host not in ("127.0.0.1", "localhost", "::1"):
        click.echo(
            f"acp-proxy: warning: listening on {host}: anyone who can reach it and has the token sees the recordings",
            err=True,
        )
        if host in WILDCARDS and not allow_hosts:
            click.echo(
                "acp-proxy: warning: requests must name this host as it was given or as loopback; "
                "name the others with --allow-host NAME",
                err=True,
            )
    bound_port = sock.getsockname()[1]
    try:
        serve(
            path,
            sock,
            bind_host,
            bound_port,
            token,
            list(redact_rules),
            no_redact,
            open_browser=not no_open,
            allow_hosts=allow_hosts,
        )
    finally:
        sock.close()


def build(
    path: Path, host: str, port: int, token: str, rules: list[str], no_redact: bool, allow_hosts: tuple[str, ...] = ()
) -> Any:
    """The Datasette instance ``ui`` serves (the guard set on it), not yet started."""
    from datasette.app import Datasette

    from acp_proxy.web import plugin
    from acp_proxy.web.guard import Guard

    ds = Datasette(
        files=[],
        metadata={"plugins": {plugin.PLUGIN: {"redact": rules, "no_redact": no_redact}}},
        settings={"force_https_urls": False},
    )
    ds.add_database(_file_database(ds, path), name=path.stem)
    setattr(ds, plugin.UI_ATTRIBUTE, Guard(token=token, host=host, port=port, extra_hosts=tuple(allow_hosts)))
    plugin.quiet_errors()
    return ds


def _file_database(ds: Any, path: Path) -> Any:
    """Datasette's database for ``path``, opened by an escaped URI: Datasette's own puts the
    path into ``file:PATH?mode=ro`` as it is, where a ``#`` or ``?`` in a file name would cut
    it short (and open, or create, another file)."""
    from datasette import utils
    from datasette.database import Database

    from acp_proxy.store.database import SqlRefused, file_uri
    from acp_proxy.web import masking

    class EscapedPathDatabase(Database):
        def connect(self, write: bool = False) -> Any:
            import sqlite3

            if write:
                raise sqlite3.OperationalError("acp-proxy ui is read-only")
            conn = sqlite3.connect(file_uri(Path(self.path)), uri=True, check_same_thread=False)
            self._all_file_connections.append(conn)
            return conn

        async def execute(self, sql: str, *args: Any, **kwargs: Any) -> Any:
            # Datasette's own log of a failed query is its connection, SQL and parameters on
            # stderr; here it is the error alone, one line like every other.
            import sqlite3
            import sys

            log = kwargs.get("log_sql_errors", True)
            kwargs["log_sql_errors"] = False
            try:
                return await super().execute(sql, *args, **kwargs)
            except sqlite3.DatabaseError as exc:
                if masking.refused(exc):
                    # Past Datasette's handling of SQL errors (an empty CSV, a page that does not
                    # say why) to its error handler: a 403 with one line.
                    raise SqlRefused(masking.REFUSED) from None
                if not log:  # a query Datasette expects may fail (a facet's guess)
                    raise
                sys.stderr.write(f"acp-proxy: SQL error: {' '.join(str(exc).split())[:300]}\n")
                raise

        # Keys are asked of a connection without the masking views (``web.masking``): a view
        # has no primary or foreign keys, and Datasette's row URLs (RUN,SEQ) and links need them.

        async def _schema(self, fn: Any) -> Any:
            import asyncio
            import sqlite3

            def run() -> Any:
                conn = sqlite3.connect(file_uri(Path(self.path)), uri=True)
                try:
                    return fn(conn)
                finally:
                    conn.close()

            return await asyncio.to_thread(run)

        async def table_column_details(self, table: str) -> Any:
            return await self._schema(lambda conn: utils.table_column_details(conn, table))

        async def primary_keys(self, table: str) -> Any:
            return await self._schema(lambda conn: utils.detect_primary_keys(conn, table))

        async def foreign_keys_for_table(self, table: str) -> Any:
            return await self._schema(lambda conn: utils.get_outbound_foreign_keys(conn, table))

        async def get_all_foreign_keys(self) -> Any:
            return await self._schema(utils.get_all_foreign_keys)

    return EscapedPathDatabase(ds, path=str(path), is_mutable=True)


def serve(
    path: Path,
    sock: socket.socket,
    host: str,
    port: int,
    token: str,
    rules: list[str],
    no_redact: bool,
    open_browser: bool,
    allow_hosts: tuple[str, ...] = (),
) -> None:
    import asyncio
    import warnings

    import uvicorn

    _quiet_logging()
    # Datasette leaves a facet's coroutine unawaited when a request fails; the warning is not
    # the user's to read (stderr is one line per error).
    warnings.filterwarnings("ignore", message="coroutine .* was never awaited", category=RuntimeWarning)
    ds = build(path, host, port, token, rules, no_redact, allow_hosts)
    # A wildcard address is no place to browse to: the URL names the first allowed host.
    url = _url(allow_hosts[0] if host in WILDCARDS and allow_hosts else host, port, token)
    click.echo(f"acp-proxy: inspecting {path} (read-only but for marks); Ctrl-C stops", err=True)
    click.echo(url)
    sys.stdout.flush()
    config = uvicorn.Config(
        ds.app(),
        log_config=None,
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=2,
        ws="none",
    )
    server = uvicorn.Server(config)
    if open_browser:
        import webbrowser

        try:
            webbrowser.open(url)
        except Exception:  # no browser here: the printed URL is enough
            pass
    try:
        asyncio.run(server.serve(sockets=[sock]))
    except KeyboardInterrupt:
        pass
