"""Files the commands write (``export -o``, ``run --stderr-file``): never at the cost of data.

Owns: deciding whether a path may be written (never a SQLite database, never the database in
use, never an existing file that is not one of our exports unless ``--force``) and writing an
export whole or not at all (a temporary file beside the target, renamed over it once complete;
on failure the temporary goes and the target is as it was).

Must not know: export formats beyond recognising their first line, SQL, click.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from acp_proxy.errors import UsageError

SQLITE_MAGIC = b"SQLite format 3\x00"
_DB_COMPANIONS = ("", "-wal", "-shm", "-journal")


def _reason(exc: OSError) -> str:
    return (exc.strerror or str(exc)).lower()


def _head(path: Path, size: int = 4096) -> bytes | None:
    """The first bytes of ``path``; None when there is no such file."""
    try:
        with open(path, "rb") as handle:
            return handle.read(size)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {_reason(exc)}") from None


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _is_our_export(head: bytes) -> bool:
    """Whether ``head`` starts like a file ``export`` writes (any of its formats)."""
    first = head.split(b"\n", 1)[0]
    try:
        value = json.loads(first)
    except ValueError:
        return False
    if not isinstance(value, dict):
        return False
    keys = set(value)
    return "acp_proxy_export" in keys or {"ts", "type"} <= keys or {"ts", "direction", "json"} <= keys


def refuse_database(path: Path, db_path: Path | None, what: str) -> None:
    """A database (the one in use, its companions, or any SQLite file) is never an output."""
    if db_path is not None:
        for suffix in _DB_COMPANIONS:
            if _same_file(path, Path(f"{db_path}{suffix}")):
                raise UsageError(f"{path} is the database in use: it cannot be {what}")
    head = _head(path, len(SQLITE_MAGIC))
    if head is not None and head.startswith(SQLITE_MAGIC):
        raise UsageError(f"{path} is a SQLite database: acp-proxy never writes over one (choose another file)")


def check_export_target(path: Path, db_path: Path | None, *, force: bool) -> None:
    """May an export replace ``path``? Missing, empty or one of our exports: yes; a database:
    never; any other file: only with ``--force``."""
    refuse_database(path, db_path, "an export's output")
    head = _head(path)
    if head and not force and not _is_our_export(head):
        raise UsageError(f"{path} exists and is not an acp-proxy export: --force replaces it")


def write_whole(path: Path, lines: Iterable[bytes]) -> int:
    """Write ``lines`` (newline added to each) to a temporary file beside ``path`` (0600), then
    rename it over ``path``; the number of lines. On any failure nothing is left behind and
    ``path`` is untouched (``UsageError``, one line)."""
    target = Path(os.path.realpath(path))  # a symlink's target is replaced, not the link
    try:
        fd, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {_reason(exc)}") from None
    written = 0
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "wb") as out_file:
            for line in lines:
                out_file.write(line + b"\n")
                written += 1
            out_file.flush()
            os.fsync(out_file.fileno())
        os.replace(temporary, target)
    except OSError as exc:  # a full disk: one line, the target as it was, no partial file
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise UsageError(f"cannot write {path}: {_reason(exc)} (nothing was changed)") from None
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    return written
