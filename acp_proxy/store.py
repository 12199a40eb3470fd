"""The recording's database: location, schema, migrations, views.

Owns: where the database lives by default, opening it safely, the table layout and its
forward migrations keyed on ``PRAGMA user_version``, and the views that make it pleasant in
``sqlite-utils`` and Datasette.

Opening safely means: a database that is not acp-proxy's (user_version 0 with tables in it, or
no ``runs`` and ``frames`` tables) or that a newer acp-proxy wrote is refused with one line, and
left byte for byte as it was — it is examined read-only before anything is written, WAL mode
included. Files are created 0600 and directories 0700, whatever the umask. And whoever opens a
database first records the journals of runs whose processes are all gone (``recover_dead_runs``),
so that no run stays ``running`` once its proxy is gone, and no frame a peer received is lost.

Must not know: pipes, processes, the relay, or how frames are decoded. The recorder writes rows;
query commands read them; both get their connection from here.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

from .errors import AcpProxyError
from .locations import default_db_path

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing before the agent starts
if TYPE_CHECKING:
    from typing import Any

    import sqlite_utils

__all__ = ["default_db_path"]

SCHEMA_VERSION = 3
BUSY_TIMEOUT_MS = 10_000  # how long a connection waits for another's write lock before failing
# A test hook: lower SQLite's limit on one value (SQLITE_LIMIT_LENGTH, 1e9 bytes by default) in
# every connection that writes, so that lines over it can be tested without a gigabyte of disk.
LENGTH_LIMIT_VAR = "ACP_PROXY_SQLITE_MAX_LENGTH"
OWN_TABLES = frozenset(("runs", "frames", "sessions", "session_runs", "turns", "faults", "findings"))

# Column order of the frames table is the order the recorder's INSERT uses.
FRAME_COLUMNS: dict[str, type] = {
    "run_id": int,
    "seq": int,
    "ts_ns": int,
    "dir": str,  # c2a | a2c | stderr: the way the line travelled
    "raw": str,  # the line without its "\n" (a "\r" stays); NULL when not valid UTF-8
    "raw_bytes": bytes,  # the line when it is not valid UTF-8
    "size": int,  # full length in bytes, without "\n"
    "terminated": int,  # 0 for a last line that ended at EOF without "\n"
    "cut": int,  # 1 when raw holds only the first --max-record-bytes of the line
    "kind": str,  # request | notification | response | error | batch | invalid | stderr
    "method": str,  # responses carry their request's method
    "rpc_id": str,  # JSON text, so 1 and "1" differ
    "session_id": str,
    "update_kind": str,  # session/update variant
    "item_id": str,  # messageId / toolCallId / planId / terminalId / compactionId ...
    "request_seq": int,  # on responses: the seq of the request answered
    "latency_ns": int,  # on responses: time since the request
    "error_code": int,
    "error_message": str,
    "replay": int,  # 1: history sent inside a session/load or session/resume replay window
    "batch_seq": int,  # on a batch element: the seq of the batch line it came in
    "batch_index": int,  # on a batch element: its position in the batch
    "forwarded": int,  # 0 when the proxy did not pass the frame on (see note)
    "unanswered": int,  # on requests: 1 when no response came before the run ended
    "unknown": str,  # extension | future, for methods and update variants not in the schema
    "note": str,  # why a frame was flagged, dropped or not forwarded
    "fault": str,  # the fault applied to this frame, if any
    "decode_error": str,
    "origin": str,  # "proxy" on lines acp-proxy wrote itself (injected, error replies); else NULL
}
_FRAME_COLUMNS_ADDED = {"origin": 2}  # column -> the schema version that added it

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
    "journal": str,  # the run's journal file (in DB.journal/) while it is not fully recorded
    "journal_state": str,  # JSON: where recording resumes in the journal (committed with the frames)
    "recovered_frames": int,  # frames recorded from the journal after an acp-proxy process died
}
_RUN_COLUMNS_ADDED = {"journal": 3, "journal_state": 3, "recovered_frames": 3}


class StoreError(AcpProxyError):
    """The database cannot be used; the message is one line meant for a person."""


def prepare(path: Path) -> None:
    """Make sure a run can record into ``path`` before its agent starts: the directories (0700)
    and the file (0600) exist, and the file is empty or an acp-proxy database this version can
    write. Cheap (no sqlite-utils, no write to the database); StoreError otherwise."""
    try:
        _create_private(path)
    except OSError as exc:
        raise StoreError(f"cannot open database {path}: {_reason(exc)}") from exc
    check_own(path)


def _create_private(path: Path) -> None:
    from .journal import make_private_dir

    make_private_dir(path.parent)
    # Create the file ourselves so it is 0600 from its first byte, never world-readable.
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        if os.fstat(fd).st_size == 0:
            os.fchmod(fd, 0o600)  # the umask may have taken bits away
    finally:
        os.close(fd)


def check_own(path: Path) -> int:
    """The schema version of an existing ``path`` (0: empty), examined read-only; StoreError when
    it is not acp-proxy's or is newer than this version."""
    try:
        if os.stat(path).st_size == 0:
            return 0
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
        try:
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            tables = {row[0] for row in conn.execute("select name from sqlite_master where type = 'table'")}
        finally:
            conn.close()
    except (OSError, sqlite3.Error) as exc:
        raise StoreError(f"cannot open database {path}: {_reason(exc)}") from exc
    tables = {name for name in tables if not name.startswith("sqlite_")}
    if version > SCHEMA_VERSION:
        raise StoreError(f"{path} was written by a newer acp-proxy (schema {version} > {SCHEMA_VERSION})")
    if (version == 0 and tables) or (version > 0 and not {"runs", "frames"} <= tables):
        raise StoreError(f"{path} is not an acp-proxy database (it has other tables); choose another --db")
    return version


def open_for_writing(path: Path, limit_bytes: int | None = None, *, recover: bool = True) -> sqlite_utils.Database:
    """Create or open the database 0600, in WAL mode, migrated to the current schema.

    It is examined read-only first (``check_own``): a foreign or newer database is refused
    untouched. ``limit_bytes`` caps the file's size (SQLite's ``max_page_count``): past it,
    writes fail as they would on a full disk. With ``recover``, the journals of dead runs are
    recorded first.
    """
    try:
        _create_private(path)
    except OSError as exc:
        raise StoreError(f"cannot open database {path}: {_reason(exc)}") from exc
    check_own(path)
    try:
        conn = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        _apply_length_limit(conn)
        import sqlite_utils  # only writers need it (~0.2 s to import): query commands start faster

        db = sqlite_utils.Database(conn)
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
    if recover:
        recover_dead_runs(path)
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


_recovering = False


def recover_dead_runs(path: Path) -> int:
    """Record the journals of runs into ``path`` whose processes are all gone (and mark those
    runs ``crashed``); how many were recovered. Cheap when there are none: a ``stat``, a directory
    listing and a lock attempt per live journal; the recorder is imported only to recover one."""
    global _recovering
    directory = Path(f"{path}.journal")
    if _recovering or not directory.is_dir():
        return 0
    from .journal import dead_journals

    _recovering = True
    count = 0
    try:
        for journal_path, fd in dead_journals(directory):
            try:
                from .recorder import recover_journal  # only now: it needs the decoder and the tracker

                recover_journal(path, journal_path, fd)
                count += 1
            except (OSError, sqlite3.Error, StoreError) as exc:
                _say(f"could not recover {journal_path.name}: {_reason(exc)}")
            finally:
                os.close(fd)
    finally:
        _recovering = False
    return count


def _say(message: str) -> None:
    try:
        os.write(2, f"acp-proxy: {message}\n".encode())
    except OSError:
        pass


class ReadDb:
    """A read-only connection with the one method the query side uses (``execute``)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def execute(self, sql: str, params: Any = ()) -> sqlite3.Cursor:
        return self.conn.execute(sql, params)


def open_for_reading(path: Path) -> ReadDb:
    """Open an existing database; never creates one (a typo must not yield an empty answer).

    A database from an older acp-proxy is migrated first (the one write a reader makes), so
    that queries can name every current column."""
    if not path.exists():
        raise StoreError(f"no database at {path} (record one with: acp-proxy run -- AGENT)")
    if Path(f"{path}.journal").is_dir() and 0 < check_own(path) <= SCHEMA_VERSION:
        recover_dead_runs(path)
    conn, version = _connect_read_only(path)
    if version > SCHEMA_VERSION:
        conn.close()
        raise StoreError(f"{path} was written by a newer acp-proxy (schema {version} > {SCHEMA_VERSION})")
    if version == 0:
        conn.close()
        raise StoreError(f"{path} is not an acp-proxy database")
    if version < SCHEMA_VERSION:
        conn.close()
        try:
            open_for_writing(path).conn.close()
        except StoreError as exc:
            raise StoreError(
                f"{path} has an older schema ({version} < {SCHEMA_VERSION}) and could not be upgraded: {exc}"
            ) from None
        conn, version = _connect_read_only(path)
    return ReadDb(conn)


def _connect_read_only(path: Path) -> tuple[sqlite3.Connection, int]:
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        return conn, conn.execute("PRAGMA user_version").fetchone()[0]
    except sqlite3.Error as exc:
        raise StoreError(f"cannot read database {path}: {_reason(exc)}") from exc


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    return str(exc)


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
    db["runs"].create(v1_runs, pk="id", not_null={"started_ns", "status"})
    v1_frames = {name: kind for name, kind in FRAME_COLUMNS.items() if name not in _FRAME_COLUMNS_ADDED}
    db["frames"].create(v1_frames, pk=("run_id", "seq"), not_null={"run_id", "seq", "ts_ns", "dir"})
    db["sessions"].create(
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
    db["session_runs"].create(
        {"session_row": int, "run_id": int, "how": str, "first_seq": int},
        pk=("session_row", "run_id"),
    )
    db["turns"].create(
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
    db["faults"].create(
        {"id": int, "run_id": int, "seq": int, "ts_ns": int, "rule": str, "action": str, "detail": str},
        pk="id",
    )
    db["findings"].create(
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
        db[table].create_index(cols, find_unique_name=True)
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


def _create_v3(db: sqlite_utils.Database) -> None:
    # Journal first: the relay appends every chunk to a journal file, the recorder commits with
    # each batch where in the journal it got to, and a recovery resumes there.
    for name in ("journal", "journal_state"):
        db.execute(f"ALTER TABLE runs ADD COLUMN {name} TEXT")
    db.execute("ALTER TABLE runs ADD COLUMN recovered_frames INTEGER")


MIGRATIONS: list[Callable[[sqlite_utils.Database], None]] = [_create_v1, _create_v2, _create_v3]


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
