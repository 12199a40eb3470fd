"""The recording's database: location, schema, migrations, views.

Owns: where the database lives by default, opening it safely (mode 0600, WAL, busy timeout), the table layout and its
forward migrations keyed on ``PRAGMA user_version``, and the views that make it pleasant in
``sqlite-utils`` and Datasette.

Opening safely means: a database that is not acp-proxy's (user_version 0 with tables in it, or
no ``runs`` and ``frames`` tables) or that a newer acp-proxy wrote is refused with one line, and
left byte for byte as it was — it is examined read-only before anything is written, WAL mode
included. Files are created 0600 and directories 0700, whatever the umask.

Must not know: pipes, processes, the relay, journals, or how frames are decoded (the recorder's
layer). Recording dead runs' journals before a read is ``record/recovery.py``'s: its openers wrap
these, and ``open_for_reading`` takes it as a callback (``recover``), so that this layer imports
nothing above it. The recorder writes rows; query commands read them; both get their connection
from here.
"""

from __future__ import annotations

import os
import re
import sqlite3
import stat
import time
from collections.abc import Callable
from pathlib import Path

from acp_proxy.locations import default_db_path
from acp_proxy.protocol.frames import FRAME_COLUMNS
from acp_proxy.store.dbfile import (  # noqa: F401 - prepare, file_uri and the constants are store's API too
    BUSY_TIMEOUT_MS,
    JOURNAL_SUFFIX,
    PROGRESS_STEPS,
    SCHEMA_VERSION,
    StoreError,
    check_own,
    create_private,
    file_uri,
    let_signals_in,
    prepare,
)
from acp_proxy.store.dbfile import reason as _reason

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing before the agent starts
if TYPE_CHECKING:
    from typing import Any

    import sqlite_utils

__all__ = ["FRAME_COLUMNS", "default_db_path"]

# A test hook: lower SQLite's limit on one value (SQLITE_LIMIT_LENGTH, 1e9 bytes by default) in
# every connection that writes, so that lines over it can be tested without a gigabyte of disk.
LENGTH_LIMIT_VAR = "ACP_PROXY_SQLITE_MAX_LENGTH"
OWN_TABLES = frozenset(
    ("runs", "frames", "sessions", "session_runs", "turns", "faults", "findings", "marks", "controls")
)

# column -> the schema version that added it
_FRAME_COLUMNS_ADDED = {"origin": 2, "transport": 7, "connection": 7, "stream": 7}

RUN_COLUMNS: dict[str, type] = {
    "id": int,
    "started_ns": int,
    "ended_ns": int,
    "status": str,  # running | ended | crashed
    "argv": str,  # JSON list: the agent command
    "cwd": str,
    "proxy_pid": int,
    "agent_pid": int,
    "exit_code": int,
    "exit_signal": int,
    "interactive": int,  # 1: stdin was a terminal, the agent ran attached to it, frames not recorded
    "options": str,  # JSON: the run's options
    "protocol_version": int,
    "client_protocol_version": int,
    "agent_protocol_version": int,
    "client_name": str,
    "client_version": str,
    "agent_name": str,
    "agent_version": str,
    "client_info": str,
    "agent_info": str,
    "client_capabilities": str,
    "agent_capabilities": str,
    "auth_methods": str,
    "fault_spec": str,
    "seed": int,
    "frames": int,
    "frames_c2a": int,
    "frames_a2c": int,
    "stderr_lines": int,
    "bytes_c2a": int,
    "bytes_a2c": int,
    "not_recorded": int,
    "not_recorded_reason": str,
    "unanswered_requests": int,  # requests no response answered before the run ended
    "unpaired_responses": int,  # responses (and errors) that matched no pending request
    "otlp_spans": int,  # spans the OpenTelemetry collector accepted (run --otlp)
    "otlp_spans_lost": int,  # spans built but never delivered: collector down, slow or refusing
    "otlp_error": str,  # why spans were lost (the first failure)
    "source": str,  # an imported run: the file it was read from (NULL: recorded by a proxy)
    "source_format": str,  # an imported run: jsonl | jsons | inspector | jetbrains
    "source_unknown": str,  # an imported run: JSON list of what its format cannot say (stderr, timing, ...)
    "journal": str,  # the run's journal file (in DB.journal/) while it is not fully recorded
    "journal_state": str,  # JSON: where recording resumes in the journal (committed with the frames)
    "recovered_frames": int,  # frames recorded from the journal after an acp-proxy process died
}
_RUN_COLUMNS_ADDED = {
    **{
        name: 4 for name in ("otlp_spans", "otlp_spans_lost", "otlp_error", "source", "source_format", "source_unknown")
    },
    **{name: 5 for name in ("journal", "journal_state", "recovered_frames")},
}


class NotYetADatabase(StoreError):
    """There is no recording at the path yet: no file, or one a proxy is still creating (no
    tables). ``tail`` waits for one; the other commands say so."""


def open_for_writing(path: Path, limit_bytes: int | None = None) -> sqlite_utils.Database:
    """Create or open the database 0600, in WAL mode, migrated to the current schema.

    It is examined read-only first (``check_own``): a foreign or newer database is refused
    untouched. ``limit_bytes`` caps the file's size (SQLite's ``max_page_count``): past it,
    writes fail as they would on a full disk. Dead runs' journals are not recorded here: that is
    ``record.recovery.open_for_writing``.
    """
    try:
        create_private(path)
    except OSError as exc:
        raise StoreError(f"cannot open database {path}: {_reason(exc)}") from exc
    check_own(path)
    try:
        conn = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        _apply_length_limit(conn)
        import sqlite_utils  # only writers need it (~0.2 s to import): query commands start faster

        # No plugins: loading them reads every installed distribution's entry points (~10 ms of a
        # recorder's start-up), and no acp-proxy query calls a function a plugin could add.
        db = sqlite_utils.Database(conn, execute_plugins=False)
        _set_pragmas(db)
        migrate(db)
        if limit_bytes is not None:
            page_size = db.execute("PRAGMA page_size").fetchone()[0]
            db.execute(f"PRAGMA max_page_count = {max(1, int(limit_bytes) // page_size)}")
    except (OSError, sqlite3.Error) as exc:
        raise StoreError(f"cannot open database {path}: {_reason(exc)}") from exc
    for suffix in ("-wal", "-shm"):
        side = Path(str(path) + suffix)
        if side.exists():
            try:
                os.chmod(side, 0o600)
            except OSError:
                pass
    return db


def _apply_length_limit(conn: sqlite3.Connection) -> None:
    value = os.environ.get(LENGTH_LIMIT_VAR)
    if value and value.isdigit():
        conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, int(value))


def max_value_bytes(conn: sqlite3.Connection) -> int:
    """The longest string or blob ``conn`` stores (SQLITE_LIMIT_LENGTH, which bounds a whole row)."""
    return conn.getlimit(sqlite3.SQLITE_LIMIT_LENGTH)


def wait_for_write_lock(step: Callable[[], Any], patience: float, on_wait: Callable[[], None] | None = None) -> Any:
    """Run ``step`` until it gets past another connection's write lock, for up to ``patience``
    seconds; other errors, and a lock held longer, are raised."""
    deadline = time.monotonic() + patience
    waited = False
    while True:
        try:
            return step()
        except sqlite3.OperationalError as exc:
            if not _is_busy(exc) or time.monotonic() >= deadline:
                raise
            if not waited and on_wait is not None:
                on_wait()
            waited = True
        except StoreError as exc:
            if not isinstance(exc.__cause__, sqlite3.OperationalError) or not _is_busy(exc.__cause__):
                raise
            if time.monotonic() >= deadline:
                raise
        time.sleep(0.05)  # busy_timeout already waited; this only spaces the retries


def _is_busy(exc: sqlite3.Error) -> bool:
    text = str(exc)
    return "locked" in text or "busy" in text


class ReadDb:
    """A read-only connection with the one method the query side uses (``execute``)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def execute(self, sql: str, params: Any = ()) -> sqlite3.Cursor:
        return self.conn.execute(sql, params)


def refuse_special_file(path: Path, needed: str = "a database file") -> None:
    """A database (or a file acp-proxy writes) is a regular file: a FIFO would hang the open
    (SQLite blocks reading it), a directory or a device is no database. A missing path is fine
    here (a writer creates it). ``needed`` names what the path should have been, for the message."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise StoreError(f"cannot use {path} as a database: {_reason(exc)}") from None
    if stat.S_ISREG(mode):
        return
    what = (
        "a directory"
        if stat.S_ISDIR(mode)
        else "a FIFO"
        if stat.S_ISFIFO(mode)
        else "a device"
        if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
        else "a socket"
        if stat.S_ISSOCK(mode)
        else "not a regular file"
    )
    raise StoreError(f"{path} is {what}, not {needed}")


def open_for_reading(path: Path, recover: Callable[[Path], object] | None = None) -> ReadDb:
    """Open an existing database; never creates one (a typo must not yield an empty answer).

    A database from an older acp-proxy is migrated first (the one write a reader makes), so
    that queries can name every current column. ``recover`` (``record.recovery``'s
    ``recover_dead_runs``) records the journals of dead runs first; it is called only when the
    database has a journal directory (or a hot rollback journal)."""
    if not os.path.lexists(path):
        raise NotYetADatabase(f"no database at {path} (record one with: acp-proxy run -- AGENT)")
    refuse_special_file(path)
    journals = Path(f"{path}.journal")
    if journals.is_dir() or os.path.lexists(f"{path}-journal"):
        if check_own(path) > 0:  # it also rolls back what a writer killed mid-transaction left
            if recover is not None:
                recover(path)
        elif any(journals.glob(f"*{JOURNAL_SUFFIX}")):
            # Runs were relayed before their recorder created the schema (all killed then, or
            # still starting): the database is ours in the making, not a typo. Create it and
            # record the dead runs' journals, instead of answering "no recording yet".
            open_for_writing(path).conn.close()
            if recover is not None:
                recover(path)
    conn, version = _connect_read_only(path)
    if version > SCHEMA_VERSION:
        conn.close()
        raise StoreError(f"{path} was written by a newer acp-proxy (schema {version} > {SCHEMA_VERSION})")
    if version == 0:
        # Version and tables in one statement: a proxy's first migration may commit between two.
        try:
            version, tables = conn.execute(
                "select (select user_version from pragma_user_version()), (select count(*) from sqlite_master)"
            ).fetchone()
        except sqlite3.Error:
            tables = 1
        conn.close()
        if tables == 0:
            raise NotYetADatabase(f"{path} holds no recording yet (record one with: acp-proxy run -- AGENT)")
        if version > 0:
            return open_for_reading(path, recover)  # created meanwhile
        raise StoreError(f"{path} is not an acp-proxy database")
    if version < SCHEMA_VERSION:
        conn.close()
        try:
            open_for_writing(path).conn.close()
            if recover is not None:
                recover(path)
        except StoreError as exc:
            raise StoreError(
                f"{path} has an older schema ({version} < {SCHEMA_VERSION}) and could not be upgraded: {exc}"
            ) from None
        conn, version = _connect_read_only(path)
    return ReadDb(conn)


def _connect_read_only(path: Path) -> tuple[sqlite3.Connection, int]:
    refuse_special_file(path)
    try:
        conn = sqlite3.connect(file_uri(path), uri=True, check_same_thread=False)
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        conn.set_progress_handler(let_signals_in, PROGRESS_STEPS)  # Ctrl-C stops a long query
        return conn, conn.execute("PRAGMA user_version").fetchone()[0]
    except sqlite3.Error as exc:
        raise StoreError(f"cannot read database {path}: {_reason(exc)}") from exc


# -- a connection for user SQL: reads only, by construction ----------------------------------

_ACTIONS = [
    "CREATE_INDEX",
    "CREATE_TABLE",
    "CREATE_TEMP_INDEX",
    "CREATE_TEMP_TABLE",
    "CREATE_TEMP_TRIGGER",
    "CREATE_TEMP_VIEW",
    "CREATE_TRIGGER",
    "CREATE_VIEW",
    "DELETE",
    "DROP_INDEX",
    "DROP_TABLE",
    "DROP_TEMP_INDEX",
    "DROP_TEMP_TABLE",
    "DROP_TEMP_TRIGGER",
    "DROP_TEMP_VIEW",
    "DROP_TRIGGER",
    "DROP_VIEW",
    "INSERT",
    "PRAGMA",
    "READ",
    "SELECT",
    "TRANSACTION",
    "UPDATE",
    "ATTACH",
    "DETACH",
    "ALTER_TABLE",
    "REINDEX",
    "ANALYZE",
    "CREATE_VTABLE",
    "DROP_VTABLE",
    "FUNCTION",
    "SAVEPOINT",
    "RECURSIVE",
]
_AUTH_NAMES = {
    getattr(sqlite3, f"SQLITE_{name}"): name.replace("_", " ")
    for name in _ACTIONS
    if hasattr(sqlite3, f"SQLITE_{name}")
}
_READ_ACTIONS = frozenset(
    {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE}
)
# PRAGMAs that only ever read, whatever their argument (a table or index name) ...
_READ_PRAGMAS = frozenset(
    {
        "table_info",
        "table_xinfo",
        "table_list",
        "index_info",
        "index_xinfo",
        "index_list",
        "foreign_key_list",
        "foreign_key_check",
        "collation_list",
        "database_list",
        "function_list",
        "module_list",
        "pragma_list",
        "compile_options",
        "integrity_check",
        "quick_check",
        "freelist_count",
        "page_count",
        "data_version",
    }
)
# ... and those that read without an argument but write with one.
_QUERY_PRAGMAS = frozenset(
    {"user_version", "schema_version", "application_id", "page_size", "encoding", "journal_mode", "auto_vacuum"}
)
_FIRST_WORDS = ("select", "with", "values", "explain", "pragma")
_REFUSED = (
    "acp-proxy sql only reads: SELECT, WITH, VALUES, EXPLAIN and read-only PRAGMAs "
    "(table_info, index_list, user_version, ...)"
)
_DENIED_FUNCTIONS = frozenset({"load_extension", "readfile", "writefile", "edit", "fts3_tokenizer"})


class SqlRefused(StoreError):
    """A statement ``acp-proxy sql`` will not run because it would not only read."""


def _authorize(refusals: list[str]) -> Any:
    def authorizer(action: int, arg1: str | None, arg2: str | None, db_name: str | None, source: str | None) -> int:
        if action == sqlite3.SQLITE_FUNCTION:
            if (arg2 or "").lower() in _DENIED_FUNCTIONS:
                refusals.append(f"the function {arg2}()")
                return sqlite3.SQLITE_DENY
            return sqlite3.SQLITE_OK
        if action in _READ_ACTIONS:
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_PRAGMA:
            name = (arg1 or "").lower()
            if name in _READ_PRAGMAS or (name in _QUERY_PRAGMAS and arg2 is None):
                return sqlite3.SQLITE_OK
            refusals.append(f"PRAGMA {arg1}" + (f" = {arg2}" if arg2 is not None else ""))
            return sqlite3.SQLITE_DENY
        what = _AUTH_NAMES.get(action, f"action {action}")
        if action == sqlite3.SQLITE_ATTACH:
            what = "ATTACH (VACUUM INTO writes its copy through one)"
        refusals.append(what + (f" {arg1}" if arg1 and action != sqlite3.SQLITE_ATTACH else ""))
        return sqlite3.SQLITE_DENY

    return authorizer


def _first_word(sql: str) -> str:
    """The statement's first keyword, past whitespace and comments."""
    i, n = 0, len(sql)
    while i < n:
        if sql[i].isspace():
            i += 1
        elif sql.startswith("--", i):
            end = sql.find("\n", i)
            i = n if end < 0 else end + 1
        elif sql.startswith("/*", i):
            end = sql.find("*/", i + 2)
            i = n if end < 0 else end + 2
        else:
            break
    j = i
    while j < n and (sql[j].isalnum() or sql[j] == "_"):
        j += 1
    return sql[i:j].lower()


class SqlReader:
    """Runs a person's SQL against a recording and can only read, by four separate means:
    the file is opened read-only (``mode=ro``); ``PRAGMA query_only`` refuses writes even to
    temporary tables; no database may be attached (``VACUUM INTO`` attaches its target, so it
    is refused too); and an SQLite authorizer lets through only reading actions. Statements the
    authorizer never hears of (``REINDEX`` of nothing, ``VACUUM``) are refused by their first
    word before they are prepared.

    A table-valued function read with ``*`` (``select * from pragma_table_info('frames')``,
    ``json_each(...)``) makes SQLite ask, the first time it connects the function's table,
    whether the schema table's columns may be *updated*. Inside a statement that began as a
    SELECT that question is answered yes: it writes nothing. A real write of the schema table
    begins as an UPDATE, INSERT or DELETE, and is refused (SQLite also refuses it unless
    ``PRAGMA writable_schema`` is on, which is refused too)."""

    _SCHEMA_TABLES = frozenset({"sqlite_master", "sqlite_schema", "sqlite_temp_master", "sqlite_temp_schema"})
    _SCHEMA_COLUMNS = frozenset({"type", "name", "tbl_name", "rootpage", "sql"})

    def __init__(self, path: Path) -> None:
        db = open_for_reading(path)
        self.conn = db.conn
        self.conn.execute("PRAGMA query_only = 1")
        self.conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
        self._refusals: list[str] = []
        self._reading = _authorize(self._refusals)
        self._in_select = False  # this statement's preparation began with a SELECT
        self.conn.set_authorizer(self.authorize)
        # A statement that runs was prepared: the next preparation starts afresh.
        self.conn.set_trace_callback(self._statement_ran)

    def _statement_ran(self, _sql: str) -> None:
        self._in_select = False

    def authorize(self, action: int, arg1: str | None, arg2: str | None, db: str | None, source: str | None) -> int:
        """The SQLite authorizer: reading actions only (``_authorize``), and the schema-table
        question a ``*`` over a table-valued function asks inside a SELECT."""
        if action == sqlite3.SQLITE_SELECT:
            self._in_select = True
        elif (
            action == sqlite3.SQLITE_UPDATE
            and self._in_select
            and (arg1 or "").lower() in self._SCHEMA_TABLES
            and (arg2 or "").lower() in self._SCHEMA_COLUMNS
            and source is None
        ):
            return sqlite3.SQLITE_OK
        verdict = int(self._reading(action, arg1, arg2, db, source))
        if verdict != sqlite3.SQLITE_OK:
            self._in_select = False  # the preparation fails here
        return verdict

    def execute(self, sql: str, params: Any = ()) -> sqlite3.Cursor:
        """A cursor over the rows; ``SqlRefused`` for anything but a read, ``StoreError`` for
        an SQL error (one line each)."""
        word = _first_word(sql)
        if word not in _FIRST_WORDS:
            raise SqlRefused(f"refused {word.upper() or 'an empty statement'}: {_REFUSED}")
        self._refusals.clear()
        self._in_select = False
        try:
            return self.conn.execute(sql, params)
        except sqlite3.Error as exc:
            if str(exc) == "interrupted":  # Ctrl-C, raised in the progress handler
                raise KeyboardInterrupt from None
            if self._refusals:
                # Name the statement, not the catalogue write SQLite does for it underneath.
                named = [r for r in self._refusals if "sqlite_" not in r] or self._refusals
                raise SqlRefused(f"refused {named[0]}: {_REFUSED}") from None
            raise StoreError(f"SQL error: {exc}") from None
        except (OverflowError, ValueError, UnicodeEncodeError) as exc:  # parameters Python cannot bind
            raise StoreError(f"SQL error: {exc}") from None

    def close(self) -> None:
        self.conn.close()


def _set_pragmas(db: sqlite_utils.Database) -> None:
    # Larger pages cut per-row overhead for the write-heavy frames table (it only takes effect
    # on a new, empty database file; existing files keep theirs).
    db.execute("PRAGMA page_size = 16384")
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = NORMAL")
    # After a checkpoint, give back WAL space beyond 64 MiB instead of keeping the high-water mark.
    db.execute("PRAGMA journal_size_limit = 67108864")


def migrate(db: sqlite_utils.Database) -> None:
    """Bring the schema forward to SCHEMA_VERSION, one step at a time, each in a transaction."""
    version = db.execute("PRAGMA user_version").fetchone()[0]
    if version > SCHEMA_VERSION:
        raise StoreError(f"database was written by a newer acp-proxy (schema {version} > {SCHEMA_VERSION})")
    while version < SCHEMA_VERSION:
        step = MIGRATIONS[version]
        db.execute("BEGIN IMMEDIATE")
        try:
            # Re-read under the write lock: another proxy may have migrated meanwhile.
            current = db.execute("PRAGMA user_version").fetchone()[0]
            if current == version:
                step(db)
                db.execute(f"PRAGMA user_version = {version + 1}")
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        version = db.execute("PRAGMA user_version").fetchone()[0]


def _create_v1(db: sqlite_utils.Database) -> None:
    v1_runs = {name: kind for name, kind in RUN_COLUMNS.items() if name not in _RUN_COLUMNS_ADDED}
    db.table("runs").create(v1_runs, pk="id", not_null={"started_ns", "status"})
    v1_frames = {name: kind for name, kind in FRAME_COLUMNS.items() if name not in _FRAME_COLUMNS_ADDED}
    db.table("frames").create(v1_frames, pk=("run_id", "seq"), not_null={"run_id", "seq", "ts_ns", "dir"})
    db.table("sessions").create(
        {
            "id": int,
            "session_id": str,
            "cwd": str,
            "title": str,
            "created_run_id": int,
            "created_by": str,  # session/new | session/load | session/resume | session/fork | seen
            "parent_session_id": str,  # for session/fork
            "first_seen_ns": int,
            "last_seen_ns": int,
            "closed_ns": int,
            "deleted_ns": int,
        },
        pk="id",
    )
    db.table("session_runs").create(
        {"session_row": int, "run_id": int, "how": str, "first_seq": int},
        pk=("session_row", "run_id"),
    )
    db.table("turns").create(
        {
            "id": int,
            "run_id": int,
            "session_row": int,
            "session_id": str,
            "turn_index": int,  # 1-based within the session
            "protocol_version": int,
            "prompt_seq": int,
            "start_ns": int,
            "accepted_ns": int,
            "message_id": str,  # v2: the accepted user message id
            "first_output_ns": int,
            "end_ns": int,
            "end_seq": int,
            "stop_reason": str,
            "status": str,  # running | ended | error | unfinished
            "chunks": int,
            "tool_calls": int,
            "permission_requests": int,
        },
        pk="id",
    )
    db.table("faults").create(
        {"id": int, "run_id": int, "seq": int, "ts_ns": int, "rule": str, "action": str, "detail": str},
        pk="id",
    )
    db.table("findings").create(
        {
            "id": int,
            "run_id": int,
            "seq": int,
            "rule": str,
            "severity": str,
            "message": str,
            "spec": str,
        },
        pk="id",
    )
    for table, cols in (
        ("frames", ["method"]),
        ("sessions", ["session_id"]),
        ("session_runs", ["run_id"]),
        ("turns", ["run_id", "session_row"]),
        ("faults", ["run_id", "seq"]),
        ("findings", ["run_id", "seq"]),
    ):
        db.table(table).create_index(cols, find_unique_name=True)
    # Every index costs ~0.5-1 µs per recorded frame (measured), so frames get few, and partial
    # ones where the rows worth finding are rare. Frames of a run or a session are found through
    # the primary key (run_id, seq): sessions know their runs. No index on ts_ns: time filters
    # scan within the runs selected.
    db.execute("CREATE INDEX idx_frames_request ON frames (run_id, request_seq) WHERE request_seq IS NOT NULL")
    db.execute(
        "CREATE INDEX idx_frames_rare ON frames (kind, run_id, seq) "
        "WHERE kind IN ('error', 'invalid', 'batch') OR unanswered = 1 OR fault IS NOT NULL"
    )
    for name, sql in VIEWS.items():
        db.create_view(name, sql, replace=True)


VIEWS = {
    "rpc_pairs": """
        select q.run_id, q.seq as request_seq, q.dir, q.method, q.rpc_id, q.session_id,
               r.seq as response_seq, r.kind as outcome, r.error_code, r.error_message,
               r.latency_ns / 1e6 as latency_ms
        from frames q left join frames r on r.run_id = q.run_id and r.request_seq = q.seq
        where q.kind = 'request'
    """,
    "unanswered": """
        select run_id, seq, dir, method, rpc_id, session_id, ts_ns
        from frames where kind = 'request' and unanswered = 1
    """,
    "turn_metrics": """
        select t.run_id, t.session_id, t.turn_index, t.stop_reason, t.status,
               (t.accepted_ns - t.start_ns) / 1e6 as to_acceptance_ms,
               (t.first_output_ns - t.start_ns) / 1e6 as to_first_output_ms,
               (t.end_ns - t.start_ns) / 1e6 as duration_ms,
               t.chunks, t.tool_calls, t.permission_requests
        from turns t
    """,
    "conversation": """
        select run_id, seq, ts_ns, dir, kind, method, session_id, update_kind, item_id, replay, raw
        from frames where kind != 'stderr' and batch_seq is null
    """,
}


def _create_v2(db: sqlite_utils.Database) -> None:
    # Frames the proxy writes (fault injection) travel a direction like any other; this says who
    # wrote them, for the filter term dir:proxy.
    db.execute("ALTER TABLE frames ADD COLUMN origin TEXT")
    # The same rare rows, spelled with = instead of IN: SQLite evaluates a partial index's IN
    # list on every insert at a cost of 1.5-2.5 µs per frame (measured), more than a whole
    # ordinary index; equalities cost almost nothing. A query's kind = ? still implies it.
    db.execute("DROP INDEX idx_frames_rare")
    db.execute(f"CREATE INDEX idx_frames_rare ON frames (kind, run_id, seq) WHERE {RARE_FRAMES}")


RARE_FRAMES = "kind = 'error' OR kind = 'invalid' OR kind = 'batch' OR unanswered = 1 OR fault IS NOT NULL"
"""The rows ``idx_frames_rare`` holds: few in any recording, and the ones worth finding."""


def _iso(column: str) -> str:
    """SQL for an ISO-8601 UTC text (millisecond precision) of a nanosecond column."""
    return f"strftime('%Y-%m-%dT%H:%M:%fZ', {column} / 1e9, 'unixepoch')"


READABLE_VIEWS = {
    "rpc_pairs": f"""
        select q.run_id, q.seq as request_seq, q.dir, q.method, q.rpc_id, q.session_id,
               r.seq as response_seq, r.kind as outcome, r.error_code, r.error_message,
               r.latency_ns / 1e6 as latency_ms, {_iso("q.ts_ns")} as requested
        from frames q left join frames r on r.run_id = q.run_id and r.request_seq = q.seq
        where q.kind = 'request'
        order by q.run_id, q.seq
    """,
    "unanswered": f"""
        select run_id, seq, dir, method, rpc_id, session_id, ts_ns, {_iso("ts_ns")} as ts
        from frames where kind = 'request' and unanswered = 1
        order by run_id, seq
    """,
    "turn_metrics": f"""
        select t.run_id, t.session_id, t.turn_index, t.stop_reason, t.status,
               (t.accepted_ns - t.start_ns) / 1e6 as to_acceptance_ms,
               (t.first_output_ns - t.start_ns) / 1e6 as to_first_output_ms,
               (t.end_ns - t.start_ns) / 1e6 as duration_ms,
               t.chunks, t.tool_calls, t.permission_requests, {_iso("t.start_ns")} as started
        from turns t
        order by t.run_id, t.session_row, t.turn_index
    """,
    "conversation": f"""
        select run_id, seq, ts_ns, {_iso("ts_ns")} as ts, dir, kind, method, session_id, update_kind, item_id,
               replay, raw
        from frames where kind != 'stderr' and batch_seq is null
        order by run_id, seq
    """,
    "run_overview": f"""
        select id, {_iso("started_ns")} as started, {_iso("ended_ns")} as ended,
               (ended_ns - started_ns) / 1e9 as duration_s, status, agent_name, agent_version,
               client_name, client_version, protocol_version, argv, cwd, exit_code, exit_signal,
               frames, frames_c2a, frames_a2c, stderr_lines, not_recorded, unanswered_requests,
               started_ns, ended_ns
        from runs
        order by id desc
    """,
    "frame_timeline": f"""
        select run_id, seq, {_iso("ts_ns")} as ts, dir, kind, method, rpc_id, session_id, update_kind,
               item_id, latency_ns / 1e6 as latency_ms, error_code, error_message, replay, forwarded,
               fault, unknown, size, raw, ts_ns
        from frames
        order by run_id, seq
    """,
    "fault_log": f"""
        select f.id, f.run_id, f.seq, {_iso("f.ts_ns")} as ts, f.action, f.detail, f.rule,
               x.dir, x.kind, x.method
        from faults f left join frames x on x.run_id = f.run_id and x.seq = f.seq
        order by f.run_id, f.seq, f.id
    """,
    "finding_log": f"""
        select x.id, x.run_id, x.seq, {_iso("fr.ts_ns")} as ts, x.severity, x.rule, x.message, x.spec,
               fr.dir, fr.kind, fr.method
        from findings x left join frames fr on fr.run_id = x.run_id and fr.seq = x.seq
        order by x.run_id, x.seq, x.id
    """,
}
"""Views for reading the database in Datasette or sqlite-utils: ordered, with ISO-8601 times
beside the nanosecond ones (schema 3 on)."""

RUN_CHILDREN = ("frames", "faults", "findings", "turns")
"""Tables whose ``run_id`` references ``runs(id)`` from schema 3 on."""


def _create_v3(db: sqlite_utils.Database) -> None:
    # Foreign keys to runs, so Datasette links each frame, fault, finding and turn to its run.
    # SQLite cannot add a constraint to a table in place, and rebuilding frames (sqlite-utils'
    # transform: copy every row, rebuild every index) took 26 s on a 1,000,000-frame recording;
    # this step took 0.09 s there, views included. A REFERENCES clause changes no stored row and
    # no b-tree, so the column definitions are edited in the schema text instead: SQLite's
    # ALTER TABLE documentation gives this procedure (writable_schema, then a new
    # schema_version) for constraint changes that leave the file format alone, and sqlite-utils
    # used it to add foreign keys for years. Same path for new and existing databases. Nothing
    # enforces the keys (PRAGMA foreign_keys stays off), so the recorder's insert order is free.
    schema_version = db.execute("PRAGMA schema_version").fetchone()[0]
    db.execute("PRAGMA writable_schema = ON")
    try:
        for table in RUN_CHILDREN:
            (sql,) = db.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", [table]).fetchone()
            new_sql, count = _RUN_ID_COLUMN.subn(r'\1 REFERENCES "runs"("id")', sql, count=1)
            if count != 1:
                raise StoreError(f"cannot add a foreign key to {table}: unexpected table definition")
            db.execute("UPDATE sqlite_master SET sql = ? WHERE type = 'table' AND name = ?", [new_sql, table])
        db.execute(f"PRAGMA schema_version = {schema_version + 1}")
    finally:
        db.execute("PRAGMA writable_schema = OFF")
    for name, sql in READABLE_VIEWS.items():
        db.execute(f"DROP VIEW IF EXISTS [{name}]")
        db.execute(f"CREATE VIEW [{name}] AS {sql}")


# The run_id column as sqlite-utils spells it in CREATE TABLE: '"run_id" INTEGER' (NOT NULL on frames);
# older sqlite-utils quoted names with brackets.
_RUN_ID_COLUMN = re.compile(r'((?:"run_id"|\[run_id\]) INTEGER(?: NOT NULL)?)(?=\s*[,)])')


def _create_v4(db: sqlite_utils.Database) -> None:
    # What an OpenTelemetry export lost (spans are given up rather than ever slowing a run), and
    # where an imported run came from. Plain columns: ALTER TABLE ADD COLUMN rewrites no row.
    for name, kind in RUN_COLUMNS.items():
        if _RUN_COLUMNS_ADDED.get(name) == 4:
            sql_type = "INTEGER" if kind is int else "TEXT"
            db.execute(f"ALTER TABLE runs ADD COLUMN [{name}] {sql_type}")


def _create_v5(db: sqlite_utils.Database) -> None:
    # Journal first: the relay appends every chunk to a journal file, the recorder commits with
    # each batch where in the journal it got to, and a recovery resumes there.
    for name in ("journal", "journal_state"):
        db.execute(f"ALTER TABLE runs ADD COLUMN {name} TEXT")
    db.execute("ALTER TABLE runs ADD COLUMN recovered_frames INTEGER")


def _create_marks(db: sqlite_utils.Database) -> None:
    # Marks and comments a person puts on frames (``acp-proxy mark``), live or finished: a table
    # of their own, so the frames the recorder wrote are never touched by anyone else. One mark
    # per frame; its note is optional.
    db.execute(
        """CREATE TABLE marks (
            run_id INTEGER NOT NULL REFERENCES runs(id),
            seq INTEGER NOT NULL,
            note TEXT,
            marked_ns INTEGER NOT NULL,
            PRIMARY KEY (run_id, seq)
        )"""
    )


def _create_v7(db: sqlite_utils.Database) -> None:
    # Remote ACP (``acp-proxy serve``): the transport, connection and stream beside each frame.
    # Nullable and unindexed: a stdio run leaves them NULL, and an older database reads as before.
    for name, version in _FRAME_COLUMNS_ADDED.items():
        if version == 7:
            db.execute(f"ALTER TABLE frames ADD COLUMN [{name}] TEXT")


def _create_controls(db: sqlite_utils.Database) -> None:
    # What a person did to a live run through its control socket (``acp-proxy ctl``): one row per
    # action, beside the frames rather than among them. A frame row is a line that travelled a
    # pipe (seq orders lines; counters, pairing and turns are built on that); an action is not
    # one. ``number`` counts a run's actions; ``seq`` is the frame it acted on (the held row a
    # release or drop decided, the frame a resend sent again), ``result_seq`` the frame it wrote
    # (the released or edited copy, the frame sent), ``held_ns`` how long a decided frame was held.
    db.execute(
        """CREATE TABLE controls (
            id INTEGER PRIMARY KEY,
            run_id INTEGER NOT NULL REFERENCES runs(id),
            number INTEGER NOT NULL,
            ts_ns INTEGER NOT NULL,
            action TEXT NOT NULL,
            argument TEXT,
            hold INTEGER,
            seq INTEGER,
            result_seq INTEGER,
            held_ns INTEGER
        )"""
    )
    db.execute("CREATE INDEX idx_controls_run ON controls (run_id, number)")


MIGRATIONS: list[Callable[[sqlite_utils.Database], None]] = [
    _create_v1,
    _create_v2,
    _create_v3,
    _create_v4,
    _create_v5,
    _create_marks,  # schema 6: marks and notes on frames
    _create_v7,  # schema 7: remote transports
    _create_controls,  # schema 8: control actions of live runs
]


def set_mark(path: Path, run_id: int, seq: int, note: str | None) -> None:
    """Mark frame (run_id, seq), with ``note`` (None keeps the note it had, if any)."""
    db = open_for_writing(path)
    try:
        with db.conn:
            db.execute("BEGIN")
            db.execute(
                """INSERT INTO marks (run_id, seq, note, marked_ns) VALUES (?, ?, ?, ?)
                   ON CONFLICT (run_id, seq) DO UPDATE SET note = coalesce(excluded.note, note),
                   marked_ns = excluded.marked_ns""",
                [run_id, seq, note, time.time_ns()],
            )
    except sqlite3.Error as exc:
        raise StoreError(f"cannot write a mark to {path}: {_reason(exc)}") from exc
    finally:
        db.conn.close()


def add_marks(path: Path, run_id: int, marks: list[dict[str, Any]]) -> None:
    """The marks an import brings back for run ``run_id`` (each ``seq``, ``note``, ``marked_ns``),
    on the frames it has; a mark naming a frame the run lacks is left out."""
    db = open_for_writing(path)
    try:
        with db.conn:
            db.execute("BEGIN")
            for mark in marks:
                db.execute(
                    """INSERT INTO marks (run_id, seq, note, marked_ns)
                       SELECT ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM frames WHERE run_id = ? AND seq = ?)
                       ON CONFLICT (run_id, seq) DO NOTHING""",
                    [
                        run_id,
                        mark["seq"],
                        mark.get("note"),
                        mark.get("marked_ns") or time.time_ns(),
                        run_id,
                        mark["seq"],
                    ],
                )
    except sqlite3.Error as exc:
        raise StoreError(f"cannot write marks to {path}: {_reason(exc)}") from exc
    finally:
        db.conn.close()


def remove_mark(path: Path, run_id: int, seq: int) -> bool:
    """Remove the mark of frame (run_id, seq); False when it had none."""
    db = open_for_writing(path)
    try:
        with db.conn:
            db.execute("BEGIN")
            cursor = db.execute("DELETE FROM marks WHERE run_id = ? AND seq = ?", [run_id, seq])
        return bool(cursor.rowcount)
    except sqlite3.Error as exc:
        raise StoreError(f"cannot remove a mark from {path}: {_reason(exc)}") from exc
    finally:
        db.conn.close()


def update_run(path: Path, run_id: int, values: dict[str, Any]) -> None:
    """Set columns of one run row (``values``: column -> value), in one short transaction.

    For processes that follow a run from outside the recorder (the OpenTelemetry exporter
    counting what it delivered); the recorder itself writes through its own connection.
    """
    unknown = [name for name in values if name not in RUN_COLUMNS or name == "id"]
    if unknown:
        raise ValueError(f"not a column of runs: {', '.join(unknown)}")
    try:
        conn = sqlite3.connect(str(path), isolation_level=None)
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open database {path}: {_reason(exc)}") from exc
    try:
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        sets = ", ".join(f"[{name}] = ?" for name in values)
        conn.execute(f"UPDATE runs SET {sets} WHERE id = ?", [*values.values(), run_id])
    except sqlite3.Error as exc:
        raise StoreError(f"cannot update run {run_id} in {path}: {_reason(exc)}") from exc
    finally:
        conn.close()


def replace_findings(path: Path, run_ids: list[int], findings: list[dict]) -> None:
    """Store a check's findings for ``run_ids``, replacing what an earlier check stored for them.

    ``findings``: dicts with ``run_id``, ``seq``, ``rule_id``, ``severity``, ``message``, ``spec``
    (``checks.Finding.as_dict``). One transaction, so a reader never sees half a check.
    """
    db = open_for_writing(path)
    try:
        marks = ",".join("?" * len(run_ids)) or "null"
        with db.conn:
            db.execute("BEGIN")
            db.execute(f"DELETE FROM findings WHERE run_id IN ({marks})", list(run_ids))
            _insert_findings(db.conn, findings)
    except sqlite3.Error as exc:
        raise StoreError(f"cannot write findings to {path}: {_reason(exc)}") from exc
    finally:
        db.conn.close()


def add_findings(conn: sqlite3.Connection, findings: list[dict]) -> None:
    """Append findings (as in ``replace_findings``) in one transaction of their own."""
    with conn:
        conn.execute("BEGIN")
        _insert_findings(conn, findings)


def _insert_findings(conn: sqlite3.Connection, findings: list[dict]) -> None:
    conn.executemany(
        "INSERT INTO findings (run_id, seq, rule, severity, message, spec) VALUES (?, ?, ?, ?, ?, ?)",
        [(f["run_id"], f["seq"], f["rule_id"], f["severity"], f["message"], f["spec"]) for f in findings],
    )
