"""One client connection's recording: a run, journaled like a stdio run and recorded by the
same recorder process.

Owns: starting a run (its journal, its START record with masked argv and the remote options,
its recorder), journaling each message just before it is forwarded as one LINE record with the
transport, connection and stream beside it, and finishing the run (its final META record, then
waiting for the recorder off the event loop).

Must not know: HTTP, WebSocket, ASGI, SQL. Credentials never reach it: the caller hands it
messages (JSON-RPC text, or an HTTP error body) and masked addresses only.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import trio

from acp_proxy.protocol.framing import Line
from acp_proxy.record import journal as jr
from acp_proxy.relay.stdio import ExitStatus, Recording, RunOptions

DIRECTIONS = {"c2a": jr.C2A, "a2c": jr.A2C}
# Runs recorded at once by one serve: each has a recorder process (tens of MiB), so a client that
# opens a thousand connections must not make a thousand of them; the rest are refused (503).
MAX_LIVE_RUNS = 64


class RemoteRun:
    """The run of one client connection (a WebSocket, or one Acp-Connection-Id over HTTP)."""

    def __init__(
        self,
        db_path: Path,
        argv: list[str],
        options: dict[str, Any],
        *,
        transport: str,
        connection: str | None,
        fault_plan: Any = None,
        redact: list[str] | None = None,
        agent_pid: int | None = None,  # serve -- AGENT: the connection's own agent
    ) -> None:
        # With --redact the recorder stores masked copies, as for run --redact; the options say
        # so, never the rules (they may name a secret).
        masked = {"redact": True} if redact is not None else {}
        run_options = RunOptions(
            argv=argv,
            db_path=db_path,
            options={**options, "transport": transport, **masked},
            fault_plan=fault_plan,
            redact=redact,
        )
        self.recording = Recording(run_options, attached=False)
        self.transport = transport
        self.connection = connection
        self.finished = False
        self._around: dict[str, tuple[bytes, bytes]] = {}  # per stream: the meta's JSON around the size
        self.recording.start(agent_pid=agent_pid, marker=f"serve-{transport}-{connection}")
        self.recording.start_recorder()

    def connected(self, connection: str) -> None:
        """The connection is named now (``run --connect`` over HTTP learns it from the answer to
        its first POST): the messages from here on carry it, and so does the run row's options."""
        self.connection = connection
        self._around.clear()  # the meta made for each stream named the connection it had
        options = self.recording.options.options
        options["connection"] = connection
        if not self.finished:
            self.recording.meta({"options": json.dumps(options)})

    def message(
        self, direction: str, data: bytes, *, stream: str, ts_ns: int | None = None, note: str | None = None
    ) -> None:
        """Journal one message (whole: an SSE event's data, a WebSocket message, a POST body)."""
        if self.finished:
            return
        stamp = time.time_ns() if ts_ns is None else ts_ns
        if note is None:
            payload = self._payload(stream, data)
        else:
            meta = {"transport": self.transport, "connection": self.connection, "stream": stream, "note": note}
            payload = jr.line_payload(Line(data, len(data), True, False), meta)
        self.recording.journal.record(jr.LINE, DIRECTIONS[direction], stamp, payload)

    def messages(self, direction: str, batch: list[tuple[bytes, str | None]], *, stream: str) -> None:
        """Journal messages that came in one read (each whole, with its note or None), stamped
        with that read's time and appended together: a stream of small messages pays for the
        clock and the write once per read."""
        if self.finished:
            return
        payloads = []
        for data, note in batch:
            if note is None:
                payloads.append(self._payload(stream, data))
            else:
                meta = {"transport": self.transport, "connection": self.connection, "stream": stream, "note": note}
                payloads.append(jr.line_payload(Line(data, len(data), True, False), meta))
        self.recording.journal.lines(DIRECTIONS[direction], time.time_ns(), payloads)

    def _payload(self, stream: str, data: bytes) -> bytes:
        """``jr.line_payload`` of a whole message on ``stream``, byte for byte, with the JSON
        around its size made once per stream: in a stream of chunks, encoding the same meta
        again for each was a third of the journaling's cost."""
        around = self._around.get(stream)
        if around is None:
            meta = {"transport": self.transport, "connection": self.connection, "stream": stream, "size": 0}
            head, _, _ = json.dumps(meta).rpartition("0}")
            around = self._around[stream] = (head.encode(), b', "terminated": true, "cut": false}')
        blob = b"%s%d%s" % (around[0], len(data), around[1])
        return jr.LINE_META.pack(len(blob)) + blob + data

    def noted(self, direction: str, line: Line, meta: dict[str, Any], *, stream: str, ts_ns: int | None = None) -> None:
        """Journal a message the fault gate judged, with what it did (forwarded, fault, note)."""
        if self.finished:
            return
        meta = {**meta, "transport": self.transport, "connection": self.connection, "stream": stream}
        stamp = time.time_ns() if ts_ns is None else ts_ns
        self.recording.journal.record(jr.LINE, DIRECTIONS[direction], stamp, jr.line_payload(line, meta))

    def event(self, text: str, *, stream: str, ts_ns: int | None = None) -> None:
        """Journal a transport event (a dropped SSE stream, a WebSocket closed with a code, an
        upstream that cannot be reached) as what it is: a line of the proxy's own, on the stderr
        side of the run (no peer sent it, so it is no message), with its stream beside it."""
        if self.finished:
            return
        meta = {"transport": self.transport, "connection": self.connection, "stream": stream, "origin": "proxy"}
        data = f"acp-proxy: {text}".encode()
        line = Line(data, len(data), True, False)
        stamp = time.time_ns() if ts_ns is None else ts_ns
        self.recording.journal.record(jr.LINE, jr.STDERR, stamp, jr.line_payload(line, meta))

    async def finish(self, code: int = 0) -> None:
        """End the run: the journal's last records, then the recorder's finish, in a thread
        (it can take a while, and the other connections go on meanwhile)."""
        if self.finished:
            return
        self.finished = True
        self.recording.final(ExitStatus(code=code))
        await trio.to_thread.run_sync(self.recording.close)
