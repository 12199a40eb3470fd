"""The listening side of ``acp-proxy serve``: the socket, and each accepted connection handed to
hypercorn's trio ``TCPServer`` over a ``CoalescingStream``.

Owns: binding, accepting, the graceful stop (hypercorn's own ``worker_serve`` loop, less its
lifespan and QUIC parts, which serve has no use for) and coalescing what the server writes to one
client: in a stream of many small messages (WebSocket chunks, SSE events) each message used to be
one ``send`` system call, the proxy's largest cost per message. Writes now go to a buffer that a
writer task sends once the connection's producers have paused for a scheduling round, so a burst
leaves as one ``send`` and a lone message waits one round (microseconds).

Must not know: ASGI, HTTP, WebSocket, the journal. Bytes are sent in the order written, unchanged;
a writer that falls behind holds its producers at ``HIGH_WATER`` bytes (backpressure, memory
bounded), and a broken connection is reported to the next write.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import trio
import trio.testing

HIGH_WATER = 256 * 1024  # buffered bytes at which a writer's producers wait for it
BATCH = 64 * 1024  # bytes at which the writer sends without waiting for the burst to end
LINGER = 0.001  # seconds the writer waits at most for a burst to end
HEAD_SECONDS = 10.0  # how long a new connection may take to send its request head before hypercorn gets it


class CoalescingStream(trio.abc.HalfCloseableStream):
    """A ``SocketStream`` whose ``send_all`` returns once the bytes are buffered (or, past
    ``HIGH_WATER``, once the writer has caught up); ``run_writer`` sends them."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.transport = stream
        self.socket = stream.socket  # hypercorn reads the peer's address from it
        self._buffer = bytearray()
        self._wanted = trio.Event()  # bytes are waiting
        self._drained = trio.Event()  # the buffer went below HIGH_WATER
        self._error: BaseException | None = None
        self._closed = False
        self._sending = trio.StrictFIFOLock()  # one send at a time: the writer's, or a drain's
        self._unread = b""  # bytes read to tell the protocol, handed back to whoever serves it

    async def run_writer(self) -> None:
        """Send what is buffered, a burst at a time, until the stream is closed or broken."""
        while not self._closed:
            if not self._buffer:
                self._wanted = trio.Event()
                await self._wanted.wait()
                continue
            # Let the producers finish their burst: wait until every task of the proxy is
            # blocked (the upstream's socket read dry, each message on its way here written),
            # at most LINGER seconds, so a burst of messages leaves in one send and a lone one
            # goes as soon as nothing else is ready.
            with trio.move_on_after(LINGER):
                await trio.testing.wait_all_tasks_blocked()
            await self._flush()

    async def _flush(self) -> None:
        async with self._sending:
            if not self._buffer or self._error is not None:
                return
            data = bytes(self._buffer)
            self._buffer.clear()
            try:
                await self.transport.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                self._error = exc
                self._closed = True
            finally:
                self._drained.set()

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        if self._error is not None:
            raise trio.BrokenResourceError("the connection broke") from self._error
        if self._closed:
            raise trio.ClosedResourceError("the stream is closed")
        self._buffer += data
        self._wanted.set()
        while len(self._buffer) >= HIGH_WATER and not self._closed:
            self._drained = trio.Event()
            await self._drained.wait()
        if self._error is not None:
            raise trio.BrokenResourceError("the connection broke") from self._error
        await trio.lowlevel.checkpoint()

    async def wait_send_all_might_not_block(self) -> None:
        await self.transport.wait_send_all_might_not_block()

    def unread(self, data: bytes) -> None:
        """Give ``data`` back: the next ``receive_some`` returns it first."""
        self._unread = data + self._unread

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        if self._unread:
            data, self._unread = self._unread, b""
            await trio.lowlevel.checkpoint()
            return data
        return await self.transport.receive_some(max_bytes)

    async def _drain(self) -> None:
        """What is still buffered, sent before an EOF or a close (the writer may be gone)."""
        if self._buffer and self._error is None:
            await self._flush()

    async def detach(self) -> trio.SocketStream:
        """The socket itself, once what is buffered has been sent, for a caller that sends
        whole reads of its own (serve's WebSocket pass-through): coalescing would only add a
        task switch and a copy to each. This stream then buffers nothing more; ``aclose``
        still closes the socket."""
        await self._drain()
        self._closed = True  # the writer task ends; a write through this stream is refused
        self._wanted.set()
        return self.transport

    async def send_eof(self) -> None:
        await self._drain()
        await self.transport.send_eof()

    async def aclose(self) -> None:
        try:
            with trio.move_on_after(5) as scope:
                scope.shield = True
                await self._drain()
        finally:
            self._closed = True
            self._wanted.set()
            self._drained.set()
            await self.transport.aclose()


async def _connection(
    server_for: Callable[[Any], Awaitable[None]], app: Any, config: Any, stream: trio.SocketStream
) -> None:
    """One client connection: an HTTP/1.1 WebSocket upgrade is served by ``wsserver``, anything
    else (HTTP/1.1, h2c, a head that does not come) by hypercorn, with what was read handed back."""
    from acp_proxy.relay.remote import wsserver

    coalescing = CoalescingStream(stream)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(coalescing.run_writer)
        try:
            try:
                head = await wsserver.read_head(coalescing, HEAD_SECONDS)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                return
            if wsserver.is_upgrade(head):
                try:
                    await wsserver.WebSocketDoor(app, coalescing, head, config.websocket_max_message_size).serve()
                except Exception as exc:  # the application failed: this connection ends, serve goes on
                    report = getattr(app, "connection_failed", None)
                    if report is not None:
                        report(exc)
            else:
                coalescing.unread(head)
                await server_for(coalescing)
        finally:
            await coalescing.aclose()
            nursery.cancel_scope.cancel()


async def serve(
    app: Any,
    config: Any,
    shutdown_trigger: Callable[[], Awaitable[None]],
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``app`` on ``config.bind`` until ``shutdown_trigger`` returns; then give open
    connections ``config.graceful_timeout`` to end. ``task_status`` gets the bound addresses."""
    from hypercorn.app_wrappers import ASGIWrapper
    from hypercorn.trio.tcp_server import TCPServer
    from hypercorn.trio.worker_context import WorkerContext
    from hypercorn.typing import ConnectionState
    from hypercorn.utils import repr_socket_addr

    context = WorkerContext(None)
    sockets = config.create_sockets()
    listeners = []
    binds = []
    for sock in sockets.insecure_sockets:
        sock.listen(config.backlog)
        listeners.append(trio.SocketListener(trio.socket.from_stdlib_socket(sock)))
        binds.append(f"http://{repr_socket_addr(sock.family, sock.getsockname())}")
    server_for = partial(TCPServer, ASGIWrapper(app), config, context, ConnectionState({}))
    async with trio.open_nursery() as connections:
        async with trio.open_nursery() as accepting:
            handler = partial(_connection, server_for, app, config)
            accepting.start_soon(partial(trio.serve_listeners, handler, listeners, handler_nursery=connections))
            task_status.started(binds)
            await shutdown_trigger()
            accepting.cancel_scope.cancel()
        await context.terminated.set()
        connections.cancel_scope.deadline = trio.current_time() + (config.graceful_timeout or math.inf)
