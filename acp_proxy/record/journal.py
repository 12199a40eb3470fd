"""The run's journal: an append-only file holding every chunk the relay forwards, before it does.

Owns: where journals live (a directory of their own beside the database, 0700; one file per
run, 0600), their record format, the relay's appends (``JournalWriter``), reading records back
(``JournalReader``), the locks that tell a live run's journal from a dead one, the wake-up pipe
from the relay to the recorder, and freeing the space of records already committed.

Must not know: trio, SQL, JSON-RPC. The relay imports this before the agent starts, so it
imports nothing but the standard library's cheapest modules (``ctypes`` only when space is freed).

Why a journal: the relay must never wait for the recorder, the writer or a database lock, and
nothing it has forwarded may be lost when any acp-proxy process is killed. So the relay's only
recording work is one ``writev`` to this file per chunk, and the journal is the queue between
the relay and the recorder: bounded by the disk, not by memory. The recorder reads it at its
own pace and the writer commits, with each batch of frames, the journal position they came
from (exactly-once: a recovery resumes there). Committed space is punched out of the file,
all but its head.

Rule: a chunk is journaled just *before* it is forwarded. A process killed between the two
leaves a chunk recorded that its receiver may not have got; the other order would lose chunks
the receiver did get. The invariant is "every frame a peer received is in the recording".

Locks (``flock``): the relay and the recorder each hold a shared lock on the journal while they
live (the writer inherits the recorder's; the checker reads committed rows only and holds
none). Whoever gets an exclusive lock without waiting knows that every process of that run is
gone, and may recover the journal. A journal is created under a temporary name and renamed only
once its creator holds the lock, so no recoverer can mistake a journal being born for a dead
one; a temporary one left by a creator that died is removed once old.

File layout: ``MAGIC``, then records, each a ``HEADER`` (marker, kind, direction, payload
length, timestamp in ns) and its payload. A record is written with one ``writev``; a short
write (a full disk) is cut back off, so the file only ever ends in a torn record when the relay
was killed in the middle of an append, and a reader drops that torn tail.
"""

from __future__ import annotations

import errno
import fcntl
import os
import struct
import time
from _thread import allocate_lock

from acp_proxy.store.dbfile import JOURNAL_SUFFIX, MODE_FILE, make_private_dir

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing before the agent starts
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path
    from typing import Any, TypeVar

    PathText = TypeVar("PathText", str, Path)

MAGIC = b"acp-proxy journal 1\n"
HEADER = struct.Struct("<BBBIq")  # marker, kind, direction, payload length, ts_ns
_pack = HEADER.pack
MARK = 0xA5
BATCH_RECORDS = 500  # records per writev in ``lines`` (two vectors each; IOV_MAX is 1024)
SUFFIX = JOURNAL_SUFFIX
PARTIAL_SUFFIX = ".new"  # a journal whose creator does not hold its lock yet: never recovered

# Record kinds.
START = 1  # JSON object describing the run (argv, cwd, options, db, marker); the first record
DATA = 2  # bytes of one direction, as read and (just after) forwarded
EOF = 3  # the direction reached end of file
LINE = 4  # LINE_META + meta JSON + one line the gate framed itself (faults, notice stripping)
META = 5  # JSON object of run-row columns (agent pid, exit status; "final": the relay's goodbye)
UNDELIVERED = 6  # POSITION: from this byte of the direction's data on, its receiver got nothing
GAP = 7  # GAP_COUNTS: what of the direction could not be journaled (see JournalWriter)
UNSENT = 8  # the direction's last LINE record did not (wholly) reach its receiver: the pipe closed
KINDS = frozenset((START, DATA, EOF, LINE, META, UNDELIVERED, GAP, UNSENT))
CONTROL_KINDS = frozenset((START, META))  # records of the run, not of a direction

LINE_META = struct.Struct("<I")
POSITION = struct.Struct("<q")
# Lost bytes, newlines among them, bytes before the first of those newlines (the end of the line
# that was being received) and after the last (the start of the next), and why (GAP_REASONS).
GAP_COUNTS = struct.Struct("<qqqqq")
LIMIT_REACHED, WRITE_FAILED = 1, 2
GAP_REASONS = {LIMIT_REACHED: "--db-limit reached", WRITE_FAILED: "the journal could not be written"}

DIRECTIONS = ("c2a", "a2c", "stderr")
C2A, A2C, STDERR = 0, 1, 2

LIMIT_CHECK_BYTES = 1 << 20  # how often (in bytes appended) the relay re-measures --db-limit
# The relay writes a wake-up byte after an append only if it wrote none for this long (timed
# after the append); the recorder, while it finds work, reads the journal every POLL_SECONDS
# anyway, and it blocks on the pipe only when QUIET_SECONDS have passed, by a clock read before
# it last looked, since it last found records or read a wake-up byte (timed after the read).
# With QUIET_SECONDS > WAKE_INTERVAL no append is missed: one the recorder did not see when it
# last looked ended after that look, so more than WAKE_INTERVAL after the last wake-up byte the
# recorder read, and it was followed by a new byte. A wake-up per append would cost the relay a
# syscall per chunk; this costs one per WAKE_INTERVAL.
WAKE_INTERVAL = 0.02
POLL_SECONDS = 0.01
QUIET_SECONDS = 0.05
READ_BYTES = 1 << 20  # how much a reader takes from the file at once


def line_payload(line: Any, meta: dict[str, Any]) -> bytes:
    """A LINE record's payload: what the gate did to one line (``meta``, JSON), and the line
    (a ``framing.Line``: its data, size, and whether it was terminated or cut)."""
    import json  # only a gated relay writes LINE records: the plain path never imports json

    blob = json.dumps({**meta, "size": line.size, "terminated": line.terminated, "cut": line.cut}).encode()
    return LINE_META.pack(len(blob)) + blob + line.data


def journal_dir(db_path: PathText) -> PathText:
    """The directory holding the journals of runs recorded into ``db_path``: a ``Path`` for a
    ``Path``, text for text (the relay's, before its agent has answered: no ``pathlib`` yet)."""
    if isinstance(db_path, str):
        return os.path.join(os.path.dirname(db_path), os.path.basename(db_path) + SUFFIX)
    return db_path.with_name(db_path.name + SUFFIX)


def remove_empty_dir(directory: Path) -> None:
    """Remove the journals' directory once it is empty (a run recorded whole leaves nothing
    beside its database); a run that creates a journal meanwhile makes it again (``create``)."""
    try:
        os.rmdir(directory)
    except OSError:
        pass  # not empty (other runs' journals), or gone already


def files_size(paths: list[Path], journals: Path | None) -> int:
    """Bytes on disk of ``paths`` and of every file in ``journals`` (what --db-limit counts)."""
    total = 0
    for path in paths:
        try:
            total += os.stat(path).st_size
        except OSError:
            pass
    if journals is not None:
        try:
            entries = list(os.scandir(journals))
        except OSError:
            entries = []
        for entry in entries:
            try:
                total += entry.stat().st_blocks * 512  # journals are sparse: count what is allocated
            except OSError:
                pass
    return total


def limited_files(db_path: str | Path) -> list[Path]:
    from pathlib import Path

    return [Path(db_path), Path(f"{db_path}-wal"), Path(f"{db_path}-shm")]


# -- the relay's side ----------------------------------------------------------------------


class JournalWriter:
    """Appends records for the relay; never raises for a full disk or a reached limit.

    What could not be appended is counted per direction and announced to the reader by a GAP
    record as soon as an append works again (the reader then knows its framing broke there).
    """

    def __init__(
        self, fd: int, path: str | Path, limit_bytes: int | None = None, db_path: str | Path | None = None
    ) -> None:
        self.fd = fd
        self._held_fd = -1  # the descriptor (and lock) kept between ``end`` and ``release``
        self._lock = allocate_lock()  # the relay's directions append from threads of their own
        self._path = path  # text until someone asks for ``path``
        self.size = os.fstat(fd).st_size
        self.journaled = [0, 0, 0]  # DATA bytes appended, per direction: UNDELIVERED positions
        # Per direction, what could not be appended since the last GAP record (GAP_COUNTS).
        self.lost = [[0, 0, 0, 0, 0] for _ in DIRECTIONS]
        self.lost_total = [0, 0]  # bytes, newlines never journaled over the run
        self._failure = WRITE_FAILED
        self.limit_bytes = limit_bytes
        self.db_path = db_path
        self.max_size = _largest_file() - RESERVE_BYTES  # room kept for the records that say what was lost
        self.over_limit = False
        self._checked_at = 0
        self._refused = 0  # bytes refused since the last measurement, while over the limit
        self.problem: str | None = None
        self.on_problem: Callable[[str], None] | None = None
        self.wake_fd: int | None = None
        self._woken = -WAKE_INTERVAL  # when the last wake-up byte was written (monotonic seconds)
        self.on_reader_gone: Callable[[], None] | None = None
        if limit_bytes is not None:
            self._check_limit()

    @classmethod
    def create(
        cls, directory: str | Path, *, limit_bytes: int | None = None, db_path: str | Path | None = None
    ) -> JournalWriter:
        """A new journal in ``directory`` (created 0700), locked, under its final name."""
        name = f"{time.time_ns()}-{os.getpid()}-{os.urandom(4).hex()}"
        partial = os.path.join(directory, name + PARTIAL_SUFFIX)
        for attempt in range(10):
            make_private_dir(directory)
            try:
                fd = os.open(partial, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_APPEND, MODE_FILE)
                break
            except FileNotFoundError:
                # Another run's recorder removed the directory, empty, in between: make it again.
                if attempt == 9:
                    raise
        try:
            os.fchmod(fd, MODE_FILE)
            fcntl.flock(fd, fcntl.LOCK_SH)
            _write_all(fd, MAGIC)
            final = os.path.join(directory, name + SUFFIX)
            os.rename(partial, final)
        except BaseException:
            os.close(fd)
            try:
                os.unlink(partial)
            except OSError:
                pass
            raise
        return cls(fd, final, limit_bytes, db_path)

    @property
    def path(self) -> Path:
        """The journal file. Made a ``Path`` only when asked: the relay creates its journal
        before its agent has answered, and ``pathlib`` (with ``re`` and ``urllib``) is ~7 ms of
        a bare interpreter's start-up, measured."""
        path = self._path
        if isinstance(path, str):
            from pathlib import Path

            path = self._path = Path(path)
        return path

    @property
    def name(self) -> str:
        return os.path.basename(self._path)

    def attach_wake(self, fd: int) -> None:
        """The write end of the recorder's wake-up pipe (made non-blocking here)."""
        os.set_blocking(fd, False)
        self.wake_fd = fd

    # -- appends ---------------------------------------------------------------------------

    def data(self, direction: int, ts_ns: int, data: bytes | memoryview) -> int:
        """One chunk of a direction, about to be forwarded; its position in the direction's
        journaled bytes (for ``undelivered``)."""
        with self._lock:
            start = self.journaled[direction]
            if not self.over_limit and self.problem is None and self.size + len(data) < self.max_size:
                # the common case, spelled out: every chunk relayed goes through here
                size = len(data)
                try:
                    written = os.writev(self.fd, (_pack(MARK, DATA, direction, size, ts_ns), data))
                except OSError:
                    written = -1
                if written == HEADER.size + size:
                    self.size += written
                    self.journaled[direction] = start + size
                    if self.limit_bytes is not None and self.size - self._checked_at >= LIMIT_CHECK_BYTES:
                        self._check_limit()
                    if self.wake_fd is not None:
                        now = time.monotonic()
                        if now - self._woken >= WAKE_INTERVAL:
                            self._woken = now
                            self._wake()
                    return start
                self._undo(written)  # then the slow path says why, and counts the loss
            if self.lost[direction][0] and not self._report_gap(direction, ts_ns):
                self._lose(direction, data)
            elif self._append(DATA, direction, ts_ns, data):
                self.journaled[direction] += len(data)
            else:
                self._lose(direction, data)
            return start

    def _undo(self, written: int) -> None:
        if written > 0:
            try:
                os.ftruncate(self.fd, self.size)
            except OSError:
                pass

    def undelivered(self, direction: int, chunk_start: int, delivered: int) -> None:
        """The receiver of ``direction`` got only the first ``delivered`` bytes of the chunk
        journaled at ``chunk_start``, and will get nothing after them."""
        with self._lock:
            position = min(chunk_start + delivered, self.journaled[direction])
            self._append(UNDELIVERED, direction, time.time_ns(), POSITION.pack(position))

    def record(self, kind: int, direction: int, ts_ns: int, payload: bytes = b"") -> bool:
        """Any other record (EOF, META, LINE, START)."""
        with self._lock:
            if kind in (EOF, LINE) and self.lost[direction][0] and not self._report_gap(direction, ts_ns):
                if kind == LINE:
                    self._lose(direction, b"\n")  # the gate's lines are whole: one more lost line
                return False
            if self._append(kind, direction, ts_ns, payload):
                return True
            if kind == LINE:
                self._lose(direction, b"\n")
            return False

    def lines(self, direction: int, ts_ns: int, payloads: list[bytes]) -> None:
        """LINE records of one direction with one time stamp, each what ``record`` appends,
        by one ``writev`` (per ``BATCH_RECORDS``) while the journal has room and has lost
        nothing: a read of many small messages (serve's WebSocket relay) is then one system
        call, not one per message. Anything else goes record by record, as ``record`` does."""
        with self._lock:
            done = 0
            while done < len(payloads) and not (self.over_limit or self.problem or self.lost[direction][0]):
                batch = payloads[done : done + BATCH_RECORDS]
                vectors: list[bytes] = []
                for payload in batch:
                    vectors.append(HEADER.pack(MARK, LINE, direction, len(payload), ts_ns))
                    vectors.append(payload)
                want = HEADER.size * len(batch) + sum(map(len, batch))
                if self.size + want > self.max_size:
                    break
                try:
                    written = os.writev(self.fd, vectors)
                except OSError:
                    written = -1
                if written != want:
                    self._undo(written)  # the slow path below says why, and counts the loss
                    break
                self.size += want
                done += len(batch)
                if self.limit_bytes is not None and self.size - self._checked_at >= LIMIT_CHECK_BYTES:
                    self._check_limit()
            if done and self.wake_fd is not None:
                now = time.monotonic()  # after the append: see WAKE_INTERVAL
                if now - self._woken >= WAKE_INTERVAL:
                    self._woken = now
                    self._wake()
            for payload in payloads[done:]:
                gap_unsaid = self.lost[direction][0] and not self._report_gap(direction, ts_ns)
                if gap_unsaid or not self._append(LINE, direction, ts_ns, payload):
                    self._lose(direction, b"\n")

    def _append(self, kind: int, direction: int, ts_ns: int, payload: bytes | memoryview) -> bool:
        if kind in (DATA, LINE):  # the small records still say what happened
            if self.over_limit:
                self._maybe_recheck(len(payload))
                if self.over_limit:
                    self._failure = LIMIT_REACHED
                    return False
            if self.size + HEADER.size + len(payload) > self.max_size:
                self._failure = WRITE_FAILED
                self._trouble("the journal reached the largest file this process may write (RLIMIT_FSIZE)")
                return False
        header = HEADER.pack(MARK, kind, direction, len(payload), ts_ns)
        want = HEADER.size + len(payload)
        try:
            written = os.writev(self.fd, (header, payload)) if payload else os.write(self.fd, header)
        except OSError as exc:
            self._failure = WRITE_FAILED
            self._trouble(f"cannot write the journal ({exc.strerror or exc}): frames are relayed but not recorded")
            return False
        if written != want:  # a full disk mid-record: cut it off, so the file stays readable
            try:
                os.ftruncate(self.fd, self.size)
            except OSError:
                pass
            self._failure = WRITE_FAILED
            self._trouble("the journal's disk is full: frames are relayed but not recorded")
            return False
        self.size += want
        if self.limit_bytes is not None and self.size - self._checked_at >= LIMIT_CHECK_BYTES:
            self._check_limit()
        if self.wake_fd is not None:
            now = time.monotonic()  # after the append: see WAKE_INTERVAL
            if now - self._woken >= WAKE_INTERVAL:
                self._woken = now
                self._wake()
        return True

    def _wake(self) -> None:
        # One byte, never waited for: a full pipe means a wake-up is already pending.
        try:
            os.write(self.wake_fd, b"\0")  # type: ignore[arg-type]
        except BlockingIOError:
            pass
        except OSError:
            self.wake_fd = None
            if self.on_reader_gone is not None:
                self.on_reader_gone()

    def _lose(self, direction: int, data: bytes | memoryview) -> None:
        chunk = bytes(data)
        newlines = chunk.count(b"\n")
        entry = self.lost[direction]
        if not entry[1]:  # no newline lost yet: all of it ends the line being received
            entry[2] += chunk.find(b"\n") if newlines else len(chunk)
        entry[3] = len(chunk) - chunk.rfind(b"\n") - 1 if newlines else entry[3] + len(chunk)
        entry[0] += len(chunk)
        entry[1] += newlines
        entry[4] = self._failure
        self.lost_total[0] += len(chunk)
        self.lost_total[1] += newlines

    def unreported(self) -> list[int]:
        """Newlines lost and not yet told in a GAP record, per direction (c2a, a2c, stderr): the
        relay's last word carries them."""
        return [entry[1] for entry in self.lost]

    def _report_gap(self, direction: int, ts_ns: int) -> bool:
        if not self._append(GAP, direction, ts_ns, GAP_COUNTS.pack(*self.lost[direction])):
            return False
        self.lost[direction] = [0, 0, 0, 0, 0]
        return True

    def _trouble(self, message: str) -> None:
        if self.problem is None:
            self.problem = message
            if self.on_problem is not None:
                self.on_problem(message)

    # -- --db-limit ------------------------------------------------------------------------

    def _check_limit(self) -> None:
        self._checked_at = self.size
        if self.limit_bytes is None or self.db_path is None:
            return
        files = limited_files(self.db_path)
        used = files_size(files, self.path.parent)
        try:
            pending = os.fstat(self.fd).st_blocks * 512  # this run's lines not committed yet
        except OSError:
            pending = 0
        # What the journal holds must still go through the WAL into the database, and the
        # recorder drops a batch that would not fit (it counts a batch and the WAL twice): a
        # journal that filled the limit alone would leave it no room to record anything. So the
        # relay stops journaling while what it holds would not fit three times over.
        self.over_limit = used + files_size(files[1:2], None) + 2 * pending >= self.limit_bytes
        if self.over_limit:
            self._trouble(
                f"--db-limit reached ({used:,} of {self.limit_bytes:,} bytes): frames are relayed but not recorded"
            )

    def _maybe_recheck(self, offered: int) -> None:
        # While over the limit nothing is appended; re-measure every LIMIT_CHECK_BYTES offered,
        # since the recorder frees what it commits.
        self._refused += offered
        if self._refused >= LIMIT_CHECK_BYTES:
            self._refused = 0
            self._check_limit()

    def close(self) -> None:
        """Release the journal (and its lock): the recorder finishes it, or a recovery will."""
        self.end()
        self.release()

    def end(self) -> None:
        """No more records: the recorder sees the wake-up pipe close and finishes. The lock is
        kept (``release``) until the recorder holds its own: a slow recorder that had not taken
        it yet would otherwise find a live run's journal taken for a dead one's."""
        with self._lock:
            if self.wake_fd is not None:
                try:
                    os.close(self.wake_fd)
                except OSError:
                    pass
            self.wake_fd = None
            if self.fd >= 0:
                self._held_fd = self.fd
            self.fd = -1  # an append after this fails (and is counted), never reaches a reused fd

    def release(self) -> None:
        """Let go of the journal's lock: from now on, a process that can lock it exclusively
        may recover it."""
        with self._lock:
            fd, self._held_fd = self._held_fd, -1
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass


RESERVE_BYTES = 64 * 1024


def _largest_file() -> int:
    """RLIMIT_FSIZE: past it a write fails (EFBIG) like on a full disk, for the last records too."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    except (ImportError, OSError, ValueError):
        return 1 << 62
    return soft if soft != resource.RLIM_INFINITY and soft > 0 else 1 << 62


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


# -- the reader's side ---------------------------------------------------------------------


class Record:
    """One record read back; ``offset`` is where it starts in the file, ``end`` where the next does.

    (A plain class, not a NamedTuple: ``typing`` costs the proxy's start-up more than it gives.)
    """

    __slots__ = ("direction", "end", "kind", "offset", "payload", "ts_ns")

    def __init__(self, kind: int, direction: int, ts_ns: int, payload: bytes, offset: int, end: int) -> None:
        self.kind = kind
        self.direction = direction
        self.ts_ns = ts_ns
        self.payload = payload
        self.offset = offset
        self.end = end


class JournalDamaged(Exception):
    """The journal holds bytes that are no record (not a torn tail: something overwrote it)."""


class JournalReader:
    """Complete records from ``offset`` on, as far as the file goes now; call again for more.

    A record whose bytes are not all there yet stays unread (``pending`` counts them): while
    its writer lives it is being appended; once the writer is gone it is a torn tail.
    """

    def __init__(self, fd: int, offset: int | None = None) -> None:
        self.fd = fd
        if offset is None:
            head = os.pread(fd, len(MAGIC), 0)
            if head != MAGIC:
                raise JournalDamaged("not an acp-proxy journal")
            offset = len(MAGIC)
        self.offset = offset
        self.pending = 0

    def records(self) -> Iterator[Record]:
        fd = self.fd
        size = os.fstat(fd).st_size
        while size - self.offset >= HEADER.size:
            base = self.offset
            block = os.pread(fd, min(size - base, READ_BYTES), base)
            pos = 0
            while len(block) - pos >= HEADER.size:
                mark, kind, direction, length, ts_ns = HEADER.unpack_from(block, pos)
                if mark != MARK or kind not in KINDS or direction > STDERR:
                    raise JournalDamaged(f"no journal record at byte {base + pos}")
                start = base + pos
                end = start + HEADER.size + length
                if end > size:  # still being appended, or torn
                    self.pending = size - start
                    return
                body = pos + HEADER.size
                if body + length <= len(block):
                    payload = block[body : body + length]
                    pos = body + length
                else:  # bigger than the block: read it on its own, then a fresh block
                    payload = os.pread(fd, length, start + HEADER.size)
                    if len(payload) != length:
                        self.pending = size - start
                        return
                    pos = -1
                self.offset = end
                yield Record(kind, direction, ts_ns, payload, start, end)
                if pos < 0:
                    break
        self.pending = size - self.offset


# -- locks and dead runs -------------------------------------------------------------------


def lock(fd: int, *, exclusive: bool, timeout: float | None = 0.0) -> bool:
    """flock ``fd``; False when not granted within ``timeout`` seconds (0: do not wait)."""
    how = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        try:
            fcntl.flock(fd, how | fcntl.LOCK_NB)
            return True
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EINTR):
                raise
        if deadline is not None and time.monotonic() >= deadline:
            return False
        time.sleep(0.02)  # polling another process's lock, with a deadline


def open_journal(path: Path) -> int:
    return os.open(path, os.O_RDWR)


def names_file(path: Path, fd: int) -> bool:
    """Whether ``path`` still names the file open as ``fd``: a journal locked only after another
    process recorded and removed it is an empty name's leftover, not a run to record."""
    try:
        named, held = os.stat(path), os.fstat(fd)
    except OSError:
        return False
    return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)


def dead_journals(directory: Path) -> Iterator[tuple[Path, int]]:
    """Journals in ``directory`` whose run has no live process, each exclusively locked: the
    caller recovers it and closes the descriptor."""
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return
    for name in names:
        if name.endswith(PARTIAL_SUFFIX):
            _remove_abandoned(directory / name)
            continue
        if not name.endswith(SUFFIX):
            continue
        path = directory / name
        try:
            fd = open_journal(path)
        except OSError:
            continue
        try:
            granted = lock(fd, exclusive=True)
        except OSError:
            granted = False
        if not granted:
            os.close(fd)
            continue
        if not names_file(path, fd):  # recovered and removed between listing and locking
            os.close(fd)
            continue
        yield path, fd


PARTIAL_PATIENCE_S = 60.0
"""A journal still being created after this long was abandoned: its creator died between
creating and renaming it (it holds no record yet, only the magic)."""


def _remove_abandoned(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        if time.time() - os.fstat(fd).st_mtime < PARTIAL_PATIENCE_S or not lock(fd, exclusive=True):
            return
        os.unlink(path)
    except OSError:
        pass
    finally:
        os.close(fd)


# -- freeing committed space ---------------------------------------------------------------

_FALLOC_FL_KEEP_SIZE = 0x01
_FALLOC_FL_PUNCH_HOLE = 0x02
PUNCH_STEP = 1 << 20  # punch when at least this much more is committed
_PAGE_MASK = 0xFFF


class SpaceFreer:
    """Gives committed journal bytes back to the file system (a hole punched into the file,
    which keeps its size and offsets). Where holes are not supported the bytes stay until the
    journal is removed at the end of the run."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.freed = -1  # not known yet: where the journal's head ends
        self._fallocate: Callable[..., int] | None = None
        self.supported = True

    def free_to(self, offset: int, *, force: bool = False) -> None:
        if self.freed < 0:
            self.freed = self._head_end()
        upto = offset & ~_PAGE_MASK  # whole pages: a partial page would only be zeroed
        if not self.supported or upto <= self.freed or (upto - self.freed < PUNCH_STEP and not force):
            return
        if self._fallocate is None:
            try:
                import ctypes

                libc = ctypes.CDLL(None, use_errno=True)
                func = libc.fallocate
                func.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong)
                self._fallocate = func
            except (OSError, AttributeError):
                self.supported = False
                return
        if self._fallocate(self.fd, _FALLOC_FL_PUNCH_HOLE | _FALLOC_FL_KEEP_SIZE, self.freed, upto - self.freed):
            self.supported = False  # EOPNOTSUPP and friends: freed when the journal is removed
            return
        self.freed = upto

    def _head_end(self) -> int:
        """The first page boundary after the magic line and the START record. They stay: a
        recorder that resumes, or the next command recovering the run, reads them first to learn
        which run and database the journal belongs to."""
        try:
            first = next(iter(JournalReader(self.fd).records()), None)
        except (OSError, JournalDamaged):
            first = None
        if first is None or first.kind != START:
            self.supported = False  # not a head we know the end of: free nothing
            return 0
        return (first.end + _PAGE_MASK) & ~_PAGE_MASK
