"""Rows into SQLite: the writer process the recorder forks, and the pipe between them.

Owns: ``RunWriter`` (one transaction per batch: frames, protocol facts, the run row's counters
and the journal state they bring it to; row by row when a batch cannot go in whole),
``FactsApplier`` (the tracker's Changes as sessions/turns rows), the run row a journal starts
(``ensure_run``), WAL checkpoints off the insert path, and the link: the recorder's end
(``_WriterLink``: fork, length-prefixed msgpack messages, long lines beside them) and the
writer's (``_Inbox``, ``_writer_main``).

Must not know: journal records, framing, decoding, the tracker's state, the relay. What it
records comes as messages from ``indexer.Indexer``; which run and files, from a ``WriterJob``
(the recorder's ``session.Session``).
"""

from __future__ import annotations

import fcntl
import json
import os
import queue
import sqlite3
import struct
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

import msgspec

from acp_proxy.checks.live import LiveCheck
from acp_proxy.protocol import wire
from acp_proxy.protocol.redact import Redactor
from acp_proxy.record import journal as jr
from acp_proxy.record.indexer import place_beside
from acp_proxy.store import database as store

LOCK_PATIENCE = 600.0  # seconds to wait for the database at start-up before leaving the journal to a recovery
WRITE_PATIENCE = float("inf")  # a commit waits out any write lock: the journal holds the frames meanwhile
CHECKPOINT_BYTES = 16 * 1024 * 1024

_LENGTH = struct.Struct("<I")
_IOV_MAX = 512  # buffers per writev (Linux takes 1,024)


def say(message: str) -> None:
    """One line for a person, on stderr (the recorder has no other voice)."""
    try:
        os.write(2, f"acp-proxy: {message}\n".encode())
    except OSError:
        pass


class WriterJob(Protocol):
    """What the writer process needs to know of its recording (``session.Session`` is one)."""

    db_path: Path
    run_id: int
    journal_path: Path
    journal_fd: int
    limit: int | None
    check: str | None
    wake_fd: int | None
    redactor: Redactor | None  # run --redact: the journal is kept whole (see RunWriter)


# -- rows -> SQLite ------------------------------------------------------------------------


class RunWriter:
    """Applies the recorder's messages to SQLite: one transaction per batch, holding the frames,
    the protocol facts, the run row's counters and the journal state they bring it to.

    A batch that cannot be inserted whole is inserted row by row, so one bad row costs one row
    (counted in ``not_recorded``, with the reason). Another process's write lock is waited out
    (up to LOCK_PATIENCE); the journal holds everything meanwhile.
    """

    def __init__(
        self,
        db: Any,
        run_id: int,
        journal_path: Path,
        journal_fd: int | None,
        *,
        checkpointer: _Checkpointer | None = None,
        live: LiveCheck | None = None,
        keep_journal: bool = False,
    ) -> None:
        self.db = db
        self.conn: sqlite3.Connection = db.conn
        self.run_id = run_id
        self.journal_path = journal_path
        # ``keep_journal`` (run --redact): committed space is not given back, so that a resumed
        # recorder and a live reader can read the journal from its start to learn the secrets
        # already masked (indexer.relearn_secrets); the journal goes when the run ends.
        self.freer = jr.SpaceFreer(journal_fd) if journal_fd is not None and not keep_journal else None
        self.checkpointer = checkpointer
        self.live = live
        self.facts = FactsApplier(db, run_id)
        row = self.conn.execute(
            "select not_recorded, not_recorded_reason, journal_state from runs where id = ?", [run_id]
        ).fetchone()
        # What this side could not store (the recorder counts lines lost to journal gaps).
        lost_before = json.loads(row[2]).get("lost", 0) if row and row[2] else 0
        self.not_recorded = max(0, (row[0] or 0) - lost_before) if row else 0
        self.reason: str | None = row[1] if row else None
        self.facts_failed = False
        self.said: set[str] = set()

    def apply(self, message: dict[str, Any]) -> None:
        if "learn" in message:
            self.facts.learn(message["learn"])
            return
        if "beside" in message:
            place_beside(message)
        dropped = message.get("dropped")
        if dropped:
            self._count(message["count"], dropped)
            message["batches"] = []
        try:
            store.wait_for_write_lock(lambda: self._commit(message), WRITE_PATIENCE, self._waiting)
        except sqlite3.Error as exc:
            self._count(message["count"], str(exc))
            self._say_once("recording failed", f"recording failed ({exc}); the conversation is still relayed")
            return
        if self.freer is not None and "offset" in message:
            self.freer.free_to(message["offset"])
        if self.checkpointer is not None:
            self.checkpointer.wrote(message["nbytes"])
        if "end" in message:
            self._finished()
        elif self.live is not None:
            self.live.committed()

    def _waiting(self) -> None:
        self._say_once("locked", "the database is locked by another process; recording waits (nothing is lost)")

    def _count(self, count: int, reason: str) -> None:
        self.not_recorded += count
        if self.reason is None:
            self.reason = reason

    def _say_once(self, key: str, text: str) -> None:
        if key not in self.said:
            self.said.add(key)
            say(text)

    def _commit(self, message: dict[str, Any]) -> None:
        conn = self.conn
        failed = 0
        reasons: list[str] = []
        with conn:  # one transaction per batch; rolled back whole if it cannot commit
            conn.execute("BEGIN")
            for sql, rows in message["batches"]:
                failed += self._insert(sql, rows, reasons)
            if message["changes"]:
                conn.execute("SAVEPOINT facts")
                try:
                    self.facts.apply(message["changes"])
                except Exception as exc:
                    # Protocol facts are derived; the frames they come from must not be lost with them.
                    conn.execute("ROLLBACK TO facts")
                    if not self.facts_failed:
                        say(f"could not record protocol facts ({type(exc).__name__}: {exc})")
                    self.facts_failed = True
                conn.execute("RELEASE facts")
            not_recorded = self.not_recorded + failed
            reason = self.reason or (reasons[0] if reasons else None)
            values = {name: value for name, value in message["run"].items() if name != "lost"}
            lost = message["run"].get("lost", 0)
            if lost and reason is None:
                reason = message.get("gap_reason") or "the journal could not be written"
            if "end" in message:
                values.update(message["end"])
            values["not_recorded"] = not_recorded + lost
            values["not_recorded_reason"] = reason
            values["journal_state"] = message["state"]
            sets = ", ".join(f"{name} = ?" for name in values)
            conn.execute(f"UPDATE runs SET {sets} WHERE id = ?", [*_storable(values).values(), self.run_id])
        self.not_recorded = not_recorded
        self.reason = reason

    def _insert(self, sql: str, rows: list[tuple], reasons: list[str]) -> int:
        """Insert ``rows``; when the statement fails, row by row. How many could not be."""
        conn = self.conn
        conn.execute("SAVEPOINT rows")
        try:
            conn.executemany(sql, rows)
            conn.execute("RELEASE rows")
            return 0
        except (sqlite3.Error, OverflowError, ValueError, TypeError) as exc:
            if isinstance(exc, sqlite3.OperationalError) and store._is_busy(exc):
                raise
            conn.execute("ROLLBACK TO rows")
            conn.execute("RELEASE rows")
        failed = 0
        for row in rows:
            conn.execute("SAVEPOINT row")
            try:
                conn.execute(sql, row)
            except (sqlite3.Error, OverflowError, ValueError, TypeError) as exc:
                if isinstance(exc, sqlite3.OperationalError) and store._is_busy(exc):
                    raise
                conn.execute("ROLLBACK TO row")
                failed += 1
                if not reasons:
                    reasons.append(f"a frame could not be stored ({type(exc).__name__}: {exc})")
            conn.execute("RELEASE row")
        if failed:
            self._say_once("row", f"{failed} frame(s) could not be stored: {reasons[0]}")
        return failed

    def _finished(self) -> None:
        """The run is recorded: its journal goes (committed first: a crash here only leaves a
        journal that a recovery sees is done)."""
        try:
            os.unlink(self.journal_path)
        except OSError:
            pass
        jr.remove_empty_dir(self.journal_path.parent)


def _storable(values: dict[str, Any]) -> dict[str, Any]:
    """Values SQLite can hold: an integer outside 64 bits (a peer's protocolVersion, say) is NULL."""
    for name, value in values.items():
        if isinstance(value, int) and not wire.INT64_MIN <= value <= wire.INT64_MAX:
            values[name] = None
    return values


class FactsApplier:
    """Applies the tracker's Changes (see its module docstring) to the sessions, session_runs,
    turns, runs and frames tables. One per run: it maps the tracker's run-local session and turn
    keys to row ids between batches; a session loaded or resumed here that an earlier run saw
    is that earlier row."""

    def __init__(self, db: Any, run_id: int) -> None:
        self.db, self.run_id = db, run_id
        self.session_rows: dict[int, int] = {}
        self.turn_rows: dict[int, int] = {}

    def apply(self, changes: list[dict[str, Any]]) -> None:
        db = self.db
        for change in changes:
            table, key, values = change["table"], change["key"], _storable(dict(change["values"]))
            if table == "runs":
                db["runs"].update(key["id"], values)
            elif table == "frames":
                sets = ", ".join(f"{name} = ?" for name in values)
                db.execute(
                    f"update frames set {sets} where run_id = ? and seq = ?",
                    [*values.values(), key["run_id"], key["seq"]],
                )
            elif table == "sessions":
                self._session(key["session_key"], values)
            elif table == "session_runs":
                row = {
                    "session_row": self.session_rows[key["session_key"]],
                    "run_id": key["run_id"],
                    **values,
                }
                db["session_runs"].insert(row, ignore=True)
            elif table == "turns":
                values["session_row"] = self.session_rows[values.pop("session_key")]
                if key["turn_key"] in self.turn_rows:
                    db["turns"].update(self.turn_rows[key["turn_key"]], values)
                else:
                    self.turn_rows[key["turn_key"]] = db["turns"].insert(values).last_pk

    def learn(self, changes: list[dict[str, Any]]) -> None:
        """Rebuild the key -> row maps from Changes a resume replayed (already applied once)."""
        conn = self.db.conn
        for change in changes:
            table, key, values = change["table"], change["key"], change["values"]
            if table == "sessions" and "session_id" in values:
                row = conn.execute("select max(id) from sessions where session_id = ?", [values["session_id"]])
                found = row.fetchone()[0]
                if found is not None:
                    self.session_rows[key["session_key"]] = found
            elif table == "turns" and values.get("prompt_seq") is not None:
                row = conn.execute(
                    "select id from turns where run_id = ? and prompt_seq = ?", [self.run_id, values["prompt_seq"]]
                ).fetchone()
                if row is not None:
                    self.turn_rows[key["turn_key"]] = row[0]

    def _session(self, session_key: int, values: dict[str, Any]) -> None:
        db = self.db
        row = self.session_rows.get(session_key)
        if row is None and values.get("created_by") not in ("session/new", "session/fork"):
            found = db.execute("select max(id) from sessions where session_id = ?", [values["session_id"]]).fetchone()[
                0
            ]
            row = self.session_rows[session_key] = found
        if row is None:
            self.session_rows[session_key] = db["sessions"].insert(values).last_pk
            return
        current = db["sessions"].get(row)
        update = {k: v for k, v in values.items() if k not in _SESSION_SET_ONCE or current[k] is None}
        db["sessions"].update(row, update)


_SESSION_SET_ONCE = ("created_run_id", "created_by", "parent_session_id", "first_seen_ns")


class _Checkpointer:
    """PASSIVE WAL checkpoints from a thread of their own, so inserts never wait for one."""

    def __init__(self, path: Path, every_bytes: int = CHECKPOINT_BYTES) -> None:
        self.path = path
        self.every_bytes = every_bytes
        self.written = 0
        self.wake = threading.Event()
        self.stopping = False
        self.thread = threading.Thread(target=self._run, name="checkpoint", daemon=True)
        self.thread.start()

    def wrote(self, nbytes: int) -> None:
        self.written += nbytes
        if self.written >= self.every_bytes:
            self.written = 0
            self.wake.set()

    def _run(self) -> None:
        conn = sqlite3.connect(str(self.path), isolation_level=None)
        conn.execute("PRAGMA busy_timeout = 1000")
        while True:
            self.wake.wait()
            self.wake.clear()
            if self.stopping:
                break
            _checkpoint(conn, "PASSIVE")
        conn.close()

    def stop(self) -> None:
        self.stopping = True
        self.wake.set()
        self.thread.join(timeout=5)


# -- the writer process --------------------------------------------------------------------


class _WriterLink:
    """The recorder's end of the pipe to its writer process (forked, so it starts at once).

    The writer says so on a second pipe as soon as the run's last transaction is committed,
    before its housekeeping (folding the WAL into the database file): the recorder,
    and so the proxy, exit then, with everything recorded and visible to any reader."""

    def __init__(self, session: WriterJob, writer: Callable[[int, int, WriterJob], int] | None = None) -> None:
        read_fd, write_fd = os.pipe()
        try:  # a deeper pipe lets decoding run ahead of a briefly slow disk
            fcntl.fcntl(write_fd, fcntl.F_SETPIPE_SZ, 1 << 20)
        except OSError:
            pass
        done_read, done_write = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:  # the writer
            os.close(write_fd)
            os.close(done_read)
            if session.wake_fd is not None:
                os.close(session.wake_fd)  # the relay must see the recorder's end go with the recorder
            status = 1
            try:
                status = (writer or _writer_main)(read_fd, done_write, session)
            except BaseException as exc:  # never let a bug here pass silently
                say(f"the database writer failed: {type(exc).__name__}: {exc}")
            finally:
                os._exit(status)
        os.close(read_fd)
        os.close(done_write)
        self.fd = write_fd
        self.done_fd = done_read
        self.encoder = msgspec.msgpack.Encoder()

    def send(self, message: dict[str, Any]) -> None:
        """The message, then its long lines' bytes as they are (see _SparseInserts.take).
        Raises OSError once the writer is gone."""
        lines = message.pop("lines", ())
        payload = self.encoder.encode(message)
        _write_all_v(self.fd, [_LENGTH.pack(len(payload)), payload, *lines])

    def close(self) -> int:
        """End the link; 0 once the writer reports the run's end committed (it may still be
        tidying up, on its own), else its exit status (non-zero)."""
        try:
            os.close(self.fd)
        except OSError:
            pass
        try:
            report = os.read(self.done_fd, 1)
        except OSError:
            report = b""
        os.close(self.done_fd)
        if report:
            return 0
        _, status = os.waitpid(self.pid, 0)
        return status


class _Inbox:
    """The writer's end of the link: messages in order, each read and decoded by a thread of
    its own while the one before it is committed.

    sqlite3 lets go of the GIL while it inserts and commits, so reading overlaps writing, and
    the recorder's write returns as soon as the pipe is read instead of after each commit:
    without this the two took turns (a 1 MiB pipe holds less than one batch of big frames;
    64 x 1 MiB frames, medians of 11 runs: 298 MB/s, 317 with this). At most AHEAD messages
    are held here, the one being committed included."""

    AHEAD = 2

    def __init__(self, fd: int) -> None:
        self.reader = os.fdopen(fd, "rb", buffering=1 << 20)
        self.queue: queue.SimpleQueue[dict[str, Any] | BaseException | None] = queue.SimpleQueue()
        self.room = threading.Semaphore(self.AHEAD)
        threading.Thread(target=self._read_all, name="inbox", daemon=True).start()

    def __iter__(self) -> Iterator[dict[str, Any]]:
        while True:
            item = self.queue.get()
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
            self.room.release()

    def _read_all(self) -> None:
        decoder = msgspec.msgpack.Decoder()
        try:
            while True:
                self.room.acquire()
                message = self._read_one(decoder)
                self.queue.put(message)
                if message is None:
                    return
        except BaseException as exc:  # the writer's main thread reports it
            self.queue.put(exc)

    def _read_one(self, decoder: msgspec.msgpack.Decoder) -> dict[str, Any] | None:
        """The next whole message; None at the end of the link, or where the recorder died
        mid-message (the journal still holds what it was sending)."""
        reader = self.reader
        header = reader.read(_LENGTH.size)
        if len(header) < _LENGTH.size:
            return None
        (length,) = _LENGTH.unpack(header)
        payload = reader.read(length)
        if len(payload) < length:
            return None
        message = decoder.decode(payload)
        if "beside" in message:
            lines = [reader.read(place[3]) for place in message["beside"]]
            if any(len(line) != place[3] for line, place in zip(lines, message["beside"], strict=True)):
                return None
            message["lines"] = lines
        return message


def _report_committed(fd: int) -> None:
    try:
        os.write(fd, b"\0")
        os.close(fd)
    except OSError:
        pass


def _write_all_v(fd: int, buffers: list[bytes]) -> None:
    """Write every buffer in order, with no copy to join them."""
    views = [memoryview(b) for b in buffers if b]
    while views:
        written = os.writev(fd, views[:_IOV_MAX])
        while views and written >= len(views[0]):
            written -= len(views[0])
            views.pop(0)
        if written:
            views[0] = views[0][written:]


def _writer_main(fd: int, done_fd: int, session: WriterJob) -> int:
    """The writer process: length-prefixed msgpack transactions in, SQLite rows out; one byte
    out on ``done_fd`` once the run's last transaction is committed (none if it never is).

    With a live check it forks the checker first (before any thread or connection exists here)
    and tells it about each commit."""
    live: LiveCheck | None = None
    if session.check:
        live = LiveCheck(
            session.db_path,
            session.run_id,
            schema=session.check != "lifecycle",
            close_fds=(fd, done_fd, session.journal_fd),
        )
    db = open_for_recording(session.db_path, session.limit)
    conn = db.conn
    # Checkpoints happen in their own thread (see _Checkpointer), never inside a COMMIT.
    conn.execute("PRAGMA wal_autocheckpoint = 0")
    # A savepoint's journal in memory: on disk it is a temporary file created and removed for
    # every batch (it holds the few b-tree pages a batch changes, never the frames' text).
    conn.execute("PRAGMA temp_store = MEMORY")
    if session.limit is not None:
        conn.execute("PRAGMA journal_size_limit = 0")  # --db-limit: a reset WAL gives its space back
    every = CHECKPOINT_BYTES if session.limit is None else max(256 * 1024, min(CHECKPOINT_BYTES, session.limit // 8))
    checkpointer = _Checkpointer(session.db_path, every)
    writer = RunWriter(
        db,
        session.run_id,
        session.journal_path,
        session.journal_fd,
        checkpointer=checkpointer,
        live=live,
        keep_journal=session.redactor is not None,
    )
    ended = False
    for message in _Inbox(fd):
        writer.apply(message)
        ended = ended or "end" in message
    if session.limit is not None:
        # --db-limit: the WAL is emptied before anyone is told: what is left on disk once the
        # proxy exits is the database alone.
        checkpointer.stop()
        _checkpoint(conn, "TRUNCATE")
    if live is not None:
        live.finish()  # the proxy waits for the recorder, so a check is complete when it exits
    if not ended:
        return 1  # the recorder learns it from the exit status, then has the journal recovered
    _report_committed(done_fd)
    os.close(session.journal_fd)  # removed already (the run ended); its lock goes with it
    # Housekeeping nobody waits for: the last frames are committed (in the WAL, where every
    # reader sees them); here they are copied into the database file, and the WAL emptied if
    # no one else is using it. The next run then knows the file from its header alone
    # (``dbfile.known_as_ours``) instead of loading SQLite before its agent starts. Without
    # waiting: with another writer or a reader on an older snapshot, this does what a passive
    # checkpoint does and leaves the WAL as it is.
    if session.limit is None:
        checkpointer.stop()
        _checkpoint(conn, "TRUNCATE", wait=False)
    return 0


def _checkpoint(conn: sqlite3.Connection, mode: str, *, wait: bool = True) -> None:
    """A checkpoint that never fails the writer (its run is recorded already). ``wait=False``:
    no busy handler, so a mode that would wait for other connections does what it can at once."""
    try:
        if not wait:
            conn.execute("PRAGMA busy_timeout = 0")
        conn.execute(f"PRAGMA wal_checkpoint({mode})")
    except sqlite3.Error:
        pass


def open_for_recording(db_path: Path, limit: int | None) -> Any:
    """The database for writing, waiting out another process's lock; no recovery of others."""
    return store.wait_for_write_lock(lambda: store.open_for_writing(db_path, limit_bytes=limit), LOCK_PATIENCE)


def ensure_run(
    db: Any, start: dict[str, Any], journal_path: Path, redactor: Redactor | None = None
) -> tuple[int, dict[str, Any] | None, bool]:
    """The journal's run row (created from its START record if no recorder made it yet), its
    committed journal state, and whether it existed. ``redactor``: masks the agent's command
    line and directory (run --redact)."""
    name = journal_path.name
    conn = db.conn
    row = conn.execute("select id, journal_state from runs where journal = ?", [name]).fetchone()
    if row is not None:
        return row[0], (json.loads(row[1]) if row[1] else None), True
    run = {
        "started_ns": start["started_ns"],
        "status": "running",
        "argv": json.dumps([redactor.text(w) for w in start["argv"]] if redactor else start["argv"]),
        "cwd": redactor.text(start["cwd"]) if redactor and start.get("cwd") else start.get("cwd"),
        "proxy_pid": start.get("proxy_pid"),
        "agent_pid": start.get("agent_pid"),
        "interactive": int(bool(start.get("interactive"))),
        "options": json.dumps(start.get("options", {})),
        "fault_spec": start.get("fault_spec"),
        "seed": start.get("seed"),
        "journal": name,
    }
    with conn:
        conn.execute("BEGIN IMMEDIATE")
        run_id = db["runs"].insert(_storable(run)).last_pk
    return run_id, None, False
