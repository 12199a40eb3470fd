"""The database as a file: creating it private, naming it to SQLite, and examining it read-only.

Owns: what ``acp-proxy run`` checks before its agent starts — the directories (0700) and the
file (0600) exist, the file is empty or an acp-proxy database this version can write, and the
database's directory and the run's journal folder take new files with bytes in them (a folder
that is a file, a read-only or full disk stop the run here, not after its agent started) —
and the pieces of that every other opener shares (``file_uri``, ``check_own``). An editor waits
for the agent's first answer, so this module imports only ``os`` and ``stat`` at import, and
``_sqlite3`` only to examine a file that is not empty and not known as ours from its header
(``known_as_ours``); no ``pathlib`` or ``urllib`` (~5 ms of start-up between them, measured):
a path is anything ``os`` takes.

Must not know: the schema's tables and columns (``store``), sqlite-utils, the journal's format.
"""

from __future__ import annotations

import os

from acp_proxy.errors import AcpProxyError

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing before the agent starts
if TYPE_CHECKING:
    from typing import TypeAlias

    PathLike: TypeAlias = "str | os.PathLike[str]"

SCHEMA_VERSION = 8
BUSY_TIMEOUT_MS = 10_000  # how long a connection waits for another's write lock before failing
MODE_DIR = 0o700
MODE_FILE = 0o600
# A run's journal file ends so (in DB.journal/): a reader looks for them before it reads.
JOURNAL_SUFFIX = ".journal"
# What urllib.parse.quote leaves alone (with "/" safe): everything else is percent-escaped.
# What a run writes first, per directory: the journal's first records, SQLite's WAL header and
# first pages. A disk without room for this probe cannot record a run.
PROBE_BYTES = 64 * 1024
# SQLite's file header (sqlite.org/fileformat.html, 1.3): its first 16 bytes, and where the
# 4-byte big-endian ``PRAGMA user_version`` sits in its 100.
SQLITE_MAGIC = b"SQLite format 3\x00"
USER_VERSION_OFFSET = 60
HEADER_BYTES = 100
_URI_SAFE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-~/")


class StoreError(AcpProxyError):
    """The database cannot be used; the message is one line meant for a person."""


def prepare(path: PathLike, journals: PathLike | None = None) -> None:
    """Make sure a run can record into ``path`` before its agent starts: the directories (0700)
    and the file (0600) exist, the file is empty or an acp-proxy database this version can
    write, and its directory and ``journals`` (the run's journal folder, created 0700) take a
    new file of ``PROBE_BYTES``. Cheap (no sqlite-utils, no write to the database, and no SQLite
    at all for a database ``known_as_ours``); StoreError otherwise."""
    try:
        create_private(path)
    except OSError as exc:
        raise StoreError(f"cannot open database {path}: {reason(exc)}") from exc
    if not known_as_ours(path):
        check_own(path)
    directory = os.path.dirname(os.path.abspath(path))
    try:
        probe_dir(directory)
    except OSError as exc:
        raise StoreError(f"cannot record into {path}: its directory {directory}: {reason(exc)}") from exc
    if journals is not None:
        try:
            make_private_dir(journals)
            probe_dir(journals)
        except OSError as exc:
            raise StoreError(f"cannot record into {path}: its journal folder {journals}: {reason(exc)}") from exc


def known_as_ours(path: PathLike) -> bool:
    """``path`` is an acp-proxy database of this schema that nothing writes to now, read from
    SQLite's file header without SQLite: loading ``_sqlite3`` and opening the file cost 2-5 ms
    before the agent starts, measured, on every run.

    ``user_version`` at SCHEMA_VERSION says the migrations that created its tables committed
    (each step sets it in its own transaction). Another program's database that happens to
    carry that number is still refused untouched, by the recorder's own ``check_own`` before it
    writes; only the message comes once the agent runs. False leaves the question to
    ``check_own`` here: another version, not SQLite, or a WAL or rollback journal with bytes in
    it (pages the file's header may not show yet: the last writer empties the WAL as it leaves,
    ``record.writer``, unless someone else still uses it)."""
    name = os.fspath(path)
    try:
        for side in ("-wal", "-journal"):
            try:
                if os.stat(name + side).st_size:
                    return False
            except FileNotFoundError:
                pass
        fd = os.open(name, os.O_RDONLY)
        try:
            head = os.read(fd, HEADER_BYTES)
        finally:
            os.close(fd)
    except OSError:
        return False
    version = int.from_bytes(head[USER_VERSION_OFFSET : USER_VERSION_OFFSET + 4], "big")
    return len(head) == HEADER_BYTES and head.startswith(SQLITE_MAGIC) and version == SCHEMA_VERSION


def probe_dir(directory: PathLike) -> None:
    """A file of ``PROBE_BYTES`` can be created in ``directory`` (then it is removed); OSError
    otherwise: not a directory, permission denied, read-only file system, no space left."""
    name = os.path.join(directory, f".acp-proxy-probe-{os.getpid()}-{os.urandom(4).hex()}")
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, MODE_FILE)
    try:
        written = 0
        block = bytes(PROBE_BYTES)
        while written < PROBE_BYTES:
            written += os.write(fd, block[written:])
    finally:
        os.close(fd)
        os.unlink(name)


def create_private(path: PathLike) -> None:
    """Create ``path`` (and its directories) ourselves, so it is 0600 from its first byte."""
    make_private_dir(os.path.dirname(os.path.abspath(path)))
    fd = os.open(path, os.O_RDWR | os.O_CREAT, MODE_FILE)
    try:
        if os.fstat(fd).st_size == 0:
            os.fchmod(fd, MODE_FILE)  # the umask may have taken bits away
    finally:
        os.close(fd)


def make_private_dir(path: PathLike) -> None:
    """Create ``path`` and any missing parent 0700, whatever the umask (existing ones are left)."""
    missing = []
    probe = os.fspath(path)
    while not os.path.exists(probe):
        missing.append(probe)
        parent = os.path.dirname(probe)
        if parent == probe or not parent:
            break
        probe = parent
    for directory in reversed(missing):
        try:
            os.mkdir(directory, MODE_DIR)
        except FileExistsError:
            continue
        os.chmod(directory, MODE_DIR)  # mkdir's mode is filtered by the umask; this is not


def check_own(path: PathLike) -> int:
    """The schema version of an existing ``path`` (0: empty), examined read-only; StoreError when
    it is not acp-proxy's or is newer than this version."""
    try:
        if os.stat(path).st_size == 0:
            return 0
    except OSError as exc:
        raise StoreError(f"cannot open database {path}: {reason(exc)}") from exc
    # ``_sqlite3`` is ``sqlite3`` without its Python half (which loads ``datetime`` for its
    # adapters, ~1-3 ms before the agent starts, measured): the same connections and errors.
    import _sqlite3 as sqlite3

    try:
        try:
            version, tables = _examine(path, "ro")
        except sqlite3.OperationalError:
            if not _has_hot_journal(path):
                raise
            # A writer was killed inside a transaction. A read-only connection cannot roll its
            # journal back, and every reader fails until someone does: any SQLite connection
            # that may write does it first, restoring the last committed state.
            version, tables = _examine(path, "rw")
    except (OSError, sqlite3.Error) as exc:
        raise StoreError(f"cannot open database {path}: {reason(exc)}") from exc
    tables = {name for name in tables if not name.startswith("sqlite_")}
    if version > SCHEMA_VERSION:
        raise StoreError(f"{path} was written by a newer acp-proxy (schema {version} > {SCHEMA_VERSION})")
    if (version == 0 and tables) or (version > 0 and not {"runs", "frames"} <= tables):
        raise StoreError(f"{path} is not an acp-proxy database (it has other tables); choose another --db")
    return version


def _examine(path: PathLike, mode: str) -> tuple[int, set[str]]:
    import _sqlite3 as sqlite3  # see check_own

    conn = sqlite3.connect(file_uri(path, mode), uri=True, check_same_thread=False)
    try:
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        # One read transaction: another proxy's first migration may commit between two reads,
        # and version 0 beside its new tables would look like somebody else's database.
        conn.execute("BEGIN")
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        tables = {row[0] for row in conn.execute("select name from sqlite_master where type = 'table'")}
        conn.execute("COMMIT")
    finally:
        conn.close()
    return version, tables


def _has_hot_journal(path: PathLike) -> bool:
    try:
        return os.stat(f"{os.fspath(path)}-journal").st_size > 0
    except OSError:
        return False


PROGRESS_STEPS = 100_000  # SQLite VM steps between two looks at pending signals (about 1 ms)


def let_signals_in() -> int:
    """A progress handler for read connections: a long query stays stoppable with Ctrl-C.

    Python runs signal handlers only between bytecodes of the main thread, and a query holds
    that thread inside SQLite. This callback is bytecode: Ctrl-C's KeyboardInterrupt is raised
    here, and SQLite ends the query with "interrupted" (its caller answers exit 130)."""
    return 0


def file_uri(path: PathLike, mode: str = "ro") -> str:
    """An SQLite URI naming exactly ``path``: every character SQLite's URI parser would read
    (``?``, ``#``, ``%``) is percent-escaped, so a file name can never add a query parameter
    or name another file."""
    raw = os.fsencode(os.path.abspath(path))
    quoted = "".join(chr(byte) if byte in _URI_SAFE else f"%{byte:02X}" for byte in raw)
    return f"file:{quoted}?mode={mode}"


def reason(exc: BaseException) -> str:
    """An exception as the end of a sentence: "permission denied", not "[Errno 13] ..."."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    return str(exc)
