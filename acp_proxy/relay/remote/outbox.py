"""One SSE stream's messages on their way from a served agent to its reader (``serve -- AGENT``).

Owns: the ``Outbox`` each Streamable HTTP stream of ``relay.remote.agent_server`` holds its
messages in (at most ``OUTBOX`` messages and ``OUTBOX_BYTES`` bytes, so a reader that lags holds
back its own agent through the pipe, never serve's memory), and ``StreamEnd``, where a fault
rule ends or cuts that stream.

Must not know: HTTP, SSE's wire format, the agent, the journal, fault rules beyond the end they
put in a stream.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import trio

OUTBOX = 1024  # messages a stream holds for a reader that has not come yet (the SDK's)
OUTBOX_BYTES = 1024 * 1024  # and bytes: a slow reader's stream holds back its agent past this


@dataclass(frozen=True)
class StreamEnd:
    """Put in a stream's outbox by a fault rule: the SSE stream ends there, cleanly
    (``close=stream``: ``partial`` is None) or cut after ``partial`` (``abort``)."""

    partial: bytes | None = None


Outgoing = bytes | StreamEnd
"""What an SSE stream's outbox holds: a message's line, or where a fault ends the stream."""


class Outbox:
    """One SSE stream's messages on their way: held for a reader that has not come yet or reads
    slower than the agent writes. At most ``OUTBOX`` messages and ``OUTBOX_BYTES`` bytes (one
    message of any size when it is alone): past that ``put`` waits, so the connection's router
    stops reading the agent's stdout, the pipe fills and the agent itself waits. A slow reader
    costs serve that much memory, not the whole stream; it holds back its own connection only."""

    def __init__(self) -> None:
        self.items: deque[Outgoing] = deque()
        self.size = 0  # bytes of the messages held
        self.closed = False
        self._changed = trio.Event()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    def _full(self) -> bool:
        return bool(self.items) and (len(self.items) >= OUTBOX or self.size >= OUTBOX_BYTES)

    async def put(self, line: bytes) -> None:
        """Hold one message, once there is room (nothing, once the stream is closed)."""
        while self._full() and not self.closed:
            await self._changed.wait()
        if not self.closed:
            self.items.append(line)
            self.size += len(line)
            self._wake()

    def end(self, end: StreamEnd) -> None:
        """A fault's end of the stream, after what is held; it never waits."""
        if not self.closed:
            self.items.append(end)
            self._wake()

    async def get(self) -> Outgoing | None:
        """The next item; None once the outbox is closed and empty."""
        while not self.items:
            if self.closed:
                return None
            await self._changed.wait()
        item = self.items.popleft()
        if isinstance(item, bytes):
            self.size -= len(item)
        self._wake()
        return item

    def close(self) -> None:
        self.closed = True
        self._wake()
