"""``acp-proxy setup EDITOR -- AGENT...`` and ``acp-proxy doctor``: putting acp-proxy in front of
an agent in an editor, and saying what would stop it from working.

Owns: the two commands' options and what they print; finding acp-proxy's and the agent's
absolute paths; writing a settings file in place (atomically, its mode kept). The editors'
formats and the comment-keeping edit are ``editors``'.

Must not know: SQL beyond the health questions ``doctor`` asks through the store, how a run is
relayed or recorded.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sqlite3
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import click

from acp_proxy.cli import editors
from acp_proxy.cli.options import FilePath
from acp_proxy.errors import UsageError

MINIMAL_PATH = "/usr/bin:/bin:/usr/sbin:/sbin"
"""The PATH an editor started from a desktop launcher typically gives the agents it starts."""
EXTRAS = (
    ("ui", "datasette", "acp-proxy ui (the web inspector)"),
    ("otel", "opentelemetry.sdk", "acp-proxy otel (OTLP export)"),
    ("mcp", "mcp", "acp-proxy mcp (the MCP server)"),
)


def own_command() -> list[str]:
    """How to start acp-proxy, by absolute paths: the ``acp-proxy`` script beside this Python
    (the one being run), else the one on PATH, else this Python with ``-m acp_proxy``."""
    beside = Path(sys.executable).parent / "acp-proxy"
    if beside.is_file() and os.access(beside, os.X_OK):
        return [str(beside.absolute())]
    found = shutil.which("acp-proxy")
    if found:
        return [str(Path(found).absolute())]
    return [str(Path(sys.executable).absolute()), "-m", "acp_proxy"]


def agent_command(agent: list[str]) -> tuple[list[str], str | None]:
    """The agent's command with its program as an absolute path, and a warning when it is not
    found (the entry keeps the name as given then)."""
    program = agent[0]
    if os.sep in program:
        return [str(Path(program).expanduser().absolute()), *agent[1:]], None
    found = shutil.which(program)
    if found is None:
        return agent, f"{program} is not on PATH here; the entry names it as given"
    return [str(Path(found).absolute()), *agent[1:]], None


@click.command("setup")
@click.argument("editor", type=click.Choice(editors.EDITORS), metavar="EDITOR")
@click.option("--name", default=None, help="The agent's name in the editor. Default: AGENT's name, then (acp-proxy).")
@click.option(
    "--write",
    is_flag=True,
    help="Add the entry to the editor's settings file (replacing one of that name), keeping its comments "
    "and formatting. Without it, the entry is printed.",
)
@click.option(
    "--settings",
    "settings_file",
    type=FilePath(dir_okay=False),
    default=None,
    help="The settings file to write. Default: ~/.config/zed/settings.json (zed), ~/.jetbrains/acp.json (jetbrains).",
)
@click.option("--db", "db_path", type=FilePath(), default=None, help="Record into this database (`run --db`).")
@click.argument("agent", nargs=-1, required=True, type=click.UNPROCESSED, metavar="-- AGENT [ARGS]...")
def setup(
    editor: str, name: str | None, write: bool, settings_file: Path | None, db_path: Path | None, agent: tuple[str, ...]
) -> None:
    """Make EDITOR (zed, jetbrains or neovim) start AGENT through acp-proxy: print its entry, or --write it.

    The entry names acp-proxy and the agent by absolute paths: editors started from a desktop
    launcher do not get your shell's PATH, so a bare `acp-proxy` that works in a terminal
    fails there. zed: `agent_servers` in settings.json (JSON with comments); jetbrains:
    `agent_servers` in ~/.jetbrains/acp.json; neovim: a CodeCompanion adapter (Lua, printed:
    paste it into your config).

    \b
    Examples:
        acp-proxy setup zed -- claude-code-acp
        acp-proxy setup zed --name "Gemini (recorded)" --write -- gemini --experimental-acp
        acp-proxy setup jetbrains --write -- opencode acp
        acp-proxy setup neovim -- codex-acp
    """
    if write and editor not in editors.JSON_EDITORS:
        raise UsageError(f"--write edits JSON settings; {editor}'s agents are Lua code: paste the printed snippet")
    command, warning = agent_command(list(agent))
    run = ["run", *(["--db", str(Path(db_path).expanduser().absolute())] if db_path else []), "--", *command]
    full = [*own_command(), *run]
    label = name or f"{Path(agent[0]).name} (acp-proxy)"
    if warning:
        click.echo(f"acp-proxy: {warning}", err=True)
    if editor == "neovim":
        click.echo(editors.lua_snippet(label, full))
        return
    value = editors.entry(editor, full)
    target = settings_file or editors.settings_path(editor)
    if not write:
        click.echo(editors.snippet(label, value))
        click.echo(f"acp-proxy: add this to {target} (or run again with --write)", err=True)
        return
    try:
        text = target.read_text(encoding="utf-8") if target.exists() else ""
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {target}: {exc}") from None
    try:
        updated = editors.insert_entry(text, label, value)
    except editors.SettingsError as exc:
        raise UsageError(f"{target}: {exc}; nothing written") from None
    if editors.read_entries(updated).get(label) != value:  # the edit is checked before it lands
        raise UsageError(f"{target}: the entry could not be placed; nothing written")
    _write_in_place(target, updated)
    click.echo(f"acp-proxy: wrote {label!r} to {target}", err=True)


def _write_in_place(path: Path, text: str) -> None:
    """Replace ``path``'s content atomically (a crash leaves the old file or the new one), with
    its mode kept (0600 for a new file: settings may hold API keys)."""
    path = path.expanduser()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        mode = path.stat().st_mode & 0o7777 if path.exists() else 0o600
        real = path.resolve()  # a symlinked settings file (dotfiles) stays a symlink
        fd, scratch = tempfile.mkstemp(dir=real.parent, prefix=f".{real.name}.")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                out.write(text)
            os.chmod(scratch, mode)
            os.replace(scratch, real)
        except BaseException:
            Path(scratch).unlink(missing_ok=True)
            raise
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None


# -- doctor -----------------------------------------------------------------------------------------


@click.command("doctor")
@click.option(
    "--db", "db_path", type=FilePath(), default=None, help="The database to examine (default: where runs go)."
)
def doctor(db_path: Path | None) -> None:
    """Say where recordings go, whether editors will find acp-proxy, which extras are installed,
    and how the database is. Exits 1 when something needs attention.

    \b
    Examples:
        acp-proxy doctor
        acp-proxy doctor --db ./rec.db
    """
    from acp_proxy import __version__
    from acp_proxy.locations import default_db_path

    problems = 0

    def line(ok: bool | None, text: str) -> None:
        nonlocal problems
        mark = "ok  " if ok else "info" if ok is None else "FIX "
        problems += ok is False
        click.echo(f"{mark} {text}")

    click.echo(f"acp-proxy {__version__}, Python {sys.version.split()[0]} at {sys.executable}")
    db = db_path or default_db_path()
    source = "--db" if db_path else "$ACP_PROXY_DB" if os.environ.get("ACP_PROXY_DB") else "default"
    line(None, f"recordings go to {db} ({source})")
    _database_health(db, line)
    own = own_command()
    on_path = shutil.which("acp-proxy")
    line(on_path is not None, f"acp-proxy on this shell's PATH: {on_path or 'no'}")
    minimal = shutil.which("acp-proxy", path=MINIMAL_PATH)
    if minimal:
        line(True, f"editors started from the desktop (PATH={MINIMAL_PATH}) find it")
    else:
        line(None, "editors started from the desktop do not find a bare `acp-proxy`;")
        line(None, "  `acp-proxy setup EDITOR -- AGENT` writes its absolute path in the entry")
    line(None, f"setup writes the command {' '.join(own)}")
    for editor in editors.JSON_EDITORS:
        _editor_entries(editor, line)
    for extra, module, what in EXTRAS:
        present = importlib.util.find_spec(module.split(".")[0]) is not None and _find(module)
        line(None, f"extra [{extra}] {'installed' if present else 'not installed'}: {what}")
    if problems:
        raise SystemExit(1)


def _find(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _database_health(db: Path, line: Callable[[bool | None, str], None]) -> None:
    """The database's state, said (``line`` counts the problems). Read as it is: a doctor looks,
    it does not recover dead runs."""
    from acp_proxy.read import queries
    from acp_proxy.store import database as store

    if not db.exists():
        line(None, "no database there yet: the first `acp-proxy run` creates it")
        return
    try:
        reader = store.open_for_reading(db)
    except store.StoreError as exc:
        line(False, f"the database cannot be read: {exc}")
        return
    try:
        check, runs, running, version = queries.database_health(reader)
    except sqlite3.Error as exc:  # a damaged file: said, not raised
        line(False, f"the database cannot be read: {exc}")
        return
    finally:
        reader.conn.close()
    size = db.stat().st_size
    line(check == "ok", f"database {'intact' if check == 'ok' else 'damaged: ' + str(check)} "
         f"(schema {version}, {runs} run(s), {running} running, {size / 1e6:.1f} MB)")  # fmt: skip


def _editor_entries(editor: str, line: Callable[[bool | None, str], None]) -> None:
    """The editor's agent entries that go through acp-proxy, and whether their command exists."""
    path = editors.settings_path(editor)
    if not path.exists():
        return
    try:
        entries = editors.read_entries(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, editors.SettingsError) as exc:
        line(False, f"{editor}: {path} cannot be read: {exc}")
        return
    for name, value in entries.items():
        if not isinstance(value, dict) or not isinstance(value.get("command"), str):
            continue
        words = [value["command"], *[a for a in value.get("args") or [] if isinstance(a, str)]]
        if not any("acp-proxy" in w or w == "acp_proxy" for w in words):
            continue
        command = value["command"]
        found = os.access(command, os.X_OK) if os.sep in command else shutil.which(command, path=MINIMAL_PATH)
        line(
            bool(found),
            f"{editor}: {name!r} starts {command}"
            + ("" if found else " — not found by an editor's PATH: run `acp-proxy setup` again"),
        )
