"""The byte movers: each direction of the conversation read, journaled and written.

Owns: ``Pump`` (one direction moved by a thread of its own: poll, read, journal, write; used
when no frame needs a verdict), the trio streams over inherited descriptors that a gate's tasks
use instead (``open_stream``: counting writes, so the journal learns what a receiver that went
away did not get), and closing descriptors and streams exactly once.

Must not know: the agent's process, signals, the shutdown sequence, the recorder (``stdio``'s),
SQL, JSON-RPC. Import-cheap: trio is imported only when a gate needs streams; a ``Pump`` needs
none, so the relay starts them before trio is loaded (an agent that answers at once is heard).
"""

from __future__ import annotations

import os
import stat
import time
from _thread import allocate_lock, start_new_thread

from acp_proxy.record import journal as jr

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing before the agent starts
if TYPE_CHECKING:
    from typing import Any

CHUNK = 65536
# The agent's output pipe is deepened to this where the kernel allows (``deepen``), and its pump
# reads as much at once: a burst of big frames then crosses in 1 MiB reads, each one journal
# record and one write, instead of sixteen of each (an agent writing 1 MiB frames filled the
# default 64 KiB pipe sixteen times a frame, and the relay woke up as often).
DEEP_PIPE = 1 << 20


def deepen(fd: int, size: int = DEEP_PIPE) -> int:
    """Make the pipe ``fd`` hold ``size`` bytes (``F_SETPIPE_SZ``); what it holds now (CHUNK when
    the kernel said no: a limit on pipe memory, not a pipe, not Linux)."""
    import fcntl

    try:
        return max(CHUNK, min(size, fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, size)))
    except (OSError, AttributeError):
        return CHUNK


def trio_streams() -> tuple[type, type]:
    """The stream classes, defined once trio is imported (it is not, before the agent starts)."""
    import trio

    class CountingStream(trio.abc.HalfCloseableStream):
        """A stream whose writes say how much got through (``send_counted``), so that the
        journal can learn what a receiver that went away did not get."""

        async def send_all(self, data: bytes | bytearray | memoryview) -> None:
            if await self.send_counted(data) < len(data):
                raise trio.BrokenResourceError

        async def send_counted(self, data: bytes | bytearray | memoryview) -> int:
            raise NotImplementedError

        async def send_eof(self) -> None:
            await self.aclose()

    class ThreadFdStream(CountingStream):
        """A stream over a file or character device, which epoll cannot watch (`< file`, /dev/null)."""

        def __init__(self, fd: int) -> None:
            self.fd = fd
            self.closed = False

        async def receive_some(self, max_bytes: int | None = None) -> bytes:
            return await trio.to_thread.run_sync(os.read, self.fd, max_bytes or CHUNK, abandon_on_cancel=True)

        async def send_counted(self, data: bytes | bytearray | memoryview) -> int:
            view = memoryview(data)
            sent = 0
            while sent < len(view):
                try:
                    sent += await trio.to_thread.run_sync(os.write, self.fd, view[sent:])
                except OSError:
                    break
            return sent

        async def wait_send_all_might_not_block(self) -> None:
            return

        async def aclose(self) -> None:
            if not self.closed:
                self.closed = True
                os.close(self.fd)

    class PipeStream(CountingStream):
        """A pipe or socket, with exactly one scheduler pass per ``receive_some`` and none per
        write that the pipe takes at once.

        trio's ``FdStream`` passes through the scheduler before and after every read and
        write, even when the bytes are already there; for a relay that is most of its cost per
        hop. Measured with a minimal relay on a 2-core VM, a request/response round trip added
        115 µs at p50 through ``FdStream`` and 62 µs through this (a two-thread blocking relay:
        52 µs). A read that did not have to wait still passes the scheduler once, so a peer that
        never stops sending cannot starve the other tasks, and every read remains a
        cancellation point.
        """

        def __init__(self, fd: int) -> None:
            self.fd = fd
            os.set_blocking(fd, False)
            self.closed = False

        async def receive_some(self, max_bytes: int | None = None) -> bytes:
            waited = False
            while True:
                if self.closed:
                    raise trio.ClosedResourceError
                try:
                    data = os.read(self.fd, max_bytes or CHUNK)
                except BlockingIOError:
                    await trio.lowlevel.wait_readable(self.fd)
                    waited = True
                    continue
                except OSError as exc:
                    raise trio.BrokenResourceError from exc
                if not waited:
                    await trio.lowlevel.checkpoint()
                return data

        async def send_counted(self, data: bytes | bytearray | memoryview) -> int:
            """Write all of ``data``; how much got through before the pipe broke or closed."""
            view = memoryview(data)
            sent = 0
            while sent < len(view):
                if self.closed:
                    break
                try:
                    sent += os.write(self.fd, view[sent:])
                except BlockingIOError:
                    try:
                        await trio.lowlevel.wait_writable(self.fd)
                    except (trio.ClosedResourceError, OSError):
                        break
                except OSError:
                    break
            return sent

        async def wait_send_all_might_not_block(self) -> None:
            await trio.lowlevel.wait_writable(self.fd)

        async def aclose(self) -> None:
            if not self.closed:
                self.closed = True
                trio.lowlevel.notify_closing(self.fd)  # wakes a task waiting on it, with ClosedResourceError
                os.close(self.fd)
            await trio.lowlevel.checkpoint()

    return ThreadFdStream, PipeStream


def open_stream(fd: int, streams: tuple[type, type]) -> Any:
    mode = os.fstat(fd).st_mode
    if stat.S_ISREG(mode) or stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return streams[0](fd)
    return streams[1](fd)


class Latch:
    """Set once, waited for: what this module needs of ``threading.Event``, on a bare lock.

    ``threading`` imports ``functools`` and ``collections`` (2-4 ms of a bare interpreter's
    start-up, measured), and a ``Pump`` starts before an instant agent's first answer."""

    def __init__(self) -> None:
        self._set = False
        self._lock = allocate_lock()
        self._lock.acquire()  # held until ``set``: a waiter blocks in ``acquire``

    def set(self) -> None:
        if not self._set:
            self._set = True
            self._lock.release()

    def is_set(self) -> bool:
        return self._set

    def wait(self, timeout: float) -> bool:
        """True once set, False if ``timeout`` seconds passed first."""
        if self._lock.acquire(timeout=max(0.0, timeout)):
            self._lock.release()
            return True
        return self._set


class Pump:
    """One direction, moved by a thread of its own: wait (``poll``), read, journal, write.

    Used when no option needs a verdict per frame (then a gate decides, in trio tasks). A thread
    blocked in ``poll`` costs nothing, and a chunk costs two or three syscalls and a few
    microseconds of Python, against ~2x that for a trio task (a scheduler pass, epoll
    registrations and a failed read per wait). It waits only in ``poll``, on its pipes and on
    its stop pipe, so ``stop`` ends it at once wherever it is; the descriptors stay open until
    the relay knows it is done.
    """

    def __init__(self, src: int, dst: int, code: int, journal: jr.JournalWriter | None, read_size: int = CHUNK) -> None:
        self.read_size = read_size
        self.src = src
        self.dst = dst
        self.code = code
        self.journal = journal
        self.stop_r, self.stop_w = os.pipe()
        self.finished = Latch()
        self.dst_open = True
        self.delivered = 0  # bytes the receiver took
        self.on_broken: Any = None  # called (in the pump's thread) when the receiver went away
        self.on_end: Any = None  # called (in the pump's thread) at EOF, before the pump returns
        self.notify_fd = -1  # gets a byte when the pump has finished (wakes whoever waits for it)
        self.tell_first = False  # also a byte once its first chunk is delivered (``Flow.hold_off``)
        self.name = ""

    def start(self, name: str) -> None:
        """Run in a thread of its own: ``_thread``'s, not ``threading``'s (see ``Latch``), so a
        daemon (a proxy that exits does not wait for it). ``name``: the direction, in this
        pump's ``repr`` (what a traceback from its thread names)."""
        self.name = name
        start_new_thread(self.run, ())

    def __repr__(self) -> str:
        return f"<Pump {self.name or '(not started)'}>"

    def run(self) -> None:
        import select

        src, journal, code = self.src, self.journal, self.code
        # Reads deeper than CHUNK go into one buffer, reused: a fresh 1 MiB bytes object per read
        # cost ~25 us even for a 200-byte line (glibc mapped and cleared it each time), readv
        # into this costs what a 64 KiB read does. Each chunk is journaled and forwarded before
        # the next read, so nothing holds on to it. It is made when a read first fills CHUNK
        # (more is waiting), not before: an agent's first answer does not wait for it.
        deep = self.read_size > CHUNK
        into: tuple[bytearray, ...] = ()
        view: memoryview | None = None
        try:
            for fd in (src, self.dst):
                os.set_blocking(fd, False)
        except OSError:
            pass
        reading = select.poll()
        reading.register(src, select.POLLIN)
        reading.register(self.stop_r, select.POLLIN)
        stop = self.stop_r
        try:
            while True:
                events = reading.poll()
                if any(fd == stop for fd, _ in events):
                    return
                data: bytes | memoryview
                try:
                    if view is None:
                        data = os.read(src, CHUNK)
                        if deep and len(data) == CHUNK:
                            into = (bytearray(self.read_size),)
                            view = memoryview(into[0])
                    else:
                        data = view[: os.readv(src, into)]
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if not data:
                    if journal is not None:
                        journal.record(jr.EOF, code, time.time_ns())
                    if self.on_end is not None:
                        self.on_end()
                    return
                ts = time.time_ns()
                start = journal.data(code, ts, data) if journal is not None else 0
                if self.dst_open:
                    sent = self._write(data)
                    self.delivered += sent
                    if sent == len(data):
                        if self.tell_first:
                            self.tell_first = False
                            self.notify()
                        continue
                    self.dst_open = False
                    if journal is not None:
                        journal.undelivered(code, start, sent)
                    if self.on_broken is not None:
                        self.on_broken()
        finally:
            self.finished.set()
            self.notify()

    def notify(self) -> None:
        """A byte to ``notify_fd``: look at this pump (never waited for: a full pipe has one)."""
        if self.notify_fd >= 0:
            try:
                os.write(self.notify_fd, b"\0")
            except OSError:
                pass

    def _write(self, data: bytes | memoryview) -> int:
        import select

        view = memoryview(data)
        sent = 0
        waiting = None
        while sent < len(view):
            try:
                sent += os.write(self.dst, view[sent:])
            except BlockingIOError:
                if waiting is None:
                    waiting = select.poll()
                    waiting.register(self.dst, select.POLLOUT)
                    waiting.register(self.stop_r, select.POLLIN)
                events = waiting.poll()
                if any(fd == self.stop_r for fd, _ in events):
                    break
            except OSError:
                break
        return sent

    def stop(self) -> None:
        try:
            os.write(self.stop_w, b"\0")
        except OSError:
            pass

    def close(self) -> None:
        for fd in (self.stop_r, self.stop_w):
            try:
                os.close(fd)
            except OSError:
                pass


class CloseOnce:
    """Closes each descriptor at most once, from any thread (a second close could hit a
    descriptor another thread has opened since under the same number)."""

    def __init__(self) -> None:
        self.lock = allocate_lock()
        self.closed: set[int] = set()

    def __call__(self, fd: int) -> None:
        with self.lock:
            if fd in self.closed:
                return
            self.closed.add(fd)
            try:
                os.close(fd)
            except OSError:
                pass


async def close_quietly(stream: Any) -> None:
    import trio

    try:
        await stream.aclose()
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        pass
