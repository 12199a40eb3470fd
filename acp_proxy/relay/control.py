"""The control socket of a live run (``run --control``): where ``acp-proxy ctl`` talks to the relay.

Owns: the socket's place (beside the run's journal, or in a private directory under the
system's temporary directory when that path is too long for a Unix socket), its creation (0600,
in a 0700 directory, removed at the end), the wire (one JSON request line in, one JSON answer
line out, per connection), one controller at a time, and carrying out what a request changed:
each action journaled (a META record's ``control`` rows: the recorder writes them to the
``controls`` table), the gate's plan swapped, the run's fault spec journaled (a META record: the run row's
``fault_spec`` then holds every run-time rule with the times it was added and removed), a
direction waiting on a held frame woken, a frame ``ctl send`` asked for written (through the
relay's ``inject``: journaled, then written under the pipe's lock, between two whole lines),
and the stderr lines saying what is held and, once decided, for how long (``wait_held``).

Must not know: what a request means (``faults.live``), the rule language, SQL. Only a relay
with a gate serves a socket: a run without ``--control`` never imports this module.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trio

from acp_proxy.faults.gate import Gate, Hold, Step
from acp_proxy.faults.live import Decision, LiveControl
from acp_proxy.protocol import wire
from acp_proxy.relay.spawn import say
from acp_proxy.store.dbfile import make_private_dir

MAX_REQUEST = 1024 * 1024
SOCKET_PATH_MAX = 100  # sun_path holds 108 bytes on Linux, 104 on the BSDs
BUSY = "another acp-proxy ctl is talking to this run; try again"
BUSY_READ_S = 2.0  # how long a second controller's request is waited for before it is told
REQUEST_S = 30.0  # one controller's whole exchange; others are told BUSY meanwhile


def socket_path(journal_path: Path) -> Path:
    """Where a run's control socket goes: beside its journal when that path fits."""
    beside = journal_path.with_suffix(".ctl")
    if len(os.fsencode(beside)) <= SOCKET_PATH_MAX:
        return beside
    directory = Path(tempfile.gettempdir()) / f"acp-proxy-{os.getuid()}"
    make_private_dir(directory)
    return directory / (journal_path.stem[-40:] + ".ctl")


def listen(path: Path) -> socket.socket:
    """The listening socket, 0600 (bound under a umask that lets nobody else near it)."""
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        sock.bind(str(path))
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    sock.listen(4)
    sock.setblocking(False)
    return sock


async def wait_held(control: ControlServer | None, gate: Gate, hold: Hold) -> Decision:
    """Wait (this direction only) until a person decides held frame ``hold``; say on stderr what
    is held and, once decided, for how long. Without a control socket the frame goes on."""
    live = gate.live
    assert live is not None
    held = live.held.get(hold.number)
    what = f"{held.kind or 'frame'} {held.method or ''}".rstrip() if held is not None else "a frame"
    say(f"holding {hold.direction} {what} (hold {hold.number}): see acp-proxy ctl last held")
    if control is not None:
        await control.wait_decision(hold.number)
    decision = live.take(hold.number) or Decision("release")
    done = "dropped" if decision.action == "drop" else "released edited" if decision.data else "released"
    say(f"{done} {hold.direction} {what} (hold {hold.number}) after {decision.held_ns / 1e9:.3f}s")
    return decision


class ControlServer:
    """Serves one run's socket. ``changed_plan`` journals the new fault spec; ``inject``
    carries out the steps of a frame ``send`` writes (journal, then the pipe, under its lock)."""

    def __init__(
        self,
        live: LiveControl,
        gate: Gate,
        changed_plan: Callable[[dict[str, Any]], None],
        inject: Callable[[list[Step]], Awaitable[None]] | None = None,
    ) -> None:
        self.live = live
        self.gate = gate
        self.changed_plan = changed_plan
        self.inject = inject
        self.waiting: dict[int, trio.Event] = {}
        self.busy = False
        self.to_send: list[list[Step]] = []
        """What the last request asked to write, as the gate's steps (recorded before written)."""
        live.serving = True
        if live.early:  # the breakpoints of the command line (--break): actions too
            changed_plan({"control": live.early})
            live.early = []

    async def wait_decision(self, number: int) -> None:
        """Block the calling direction until held frame ``number`` is decided."""
        if number in self.live.decisions:
            return
        event = self.waiting.setdefault(number, trio.Event())
        await event.wait()

    async def serve(self, sock: socket.socket, path: Path) -> None:
        listener = trio.SocketListener(trio.socket.from_stdlib_socket(sock))
        try:
            async with trio.open_nursery() as nursery:
                while True:
                    stream = await listener.accept()
                    nursery.start_soon(self._connection, stream)
        finally:
            try:
                path.unlink()
            except OSError:
                pass
            with trio.CancelScope(shield=True):
                await listener.aclose()

    async def _connection(self, stream: trio.SocketStream) -> None:
        try:
            if self.busy:
                # Its request is read first: closing on unread bytes would reset the connection,
                # and the controller would see a broken pipe instead of this line.
                with trio.move_on_after(BUSY_READ_S):
                    await _read_line(stream)
                await stream.send_all(json.dumps({"error": BUSY}).encode() + b"\n")
                return
            self.busy = True
            try:
                with trio.move_on_after(REQUEST_S):
                    request = await _read_line(stream)
                    answer = self.handle(request)
                    for steps in self.to_send:
                        if self.inject is not None:
                            await self.inject(steps)
                    self.to_send = []
                    await stream.send_all(json.dumps(answer).encode() + b"\n")
            finally:
                self.busy = False
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        finally:
            await stream.aclose()

    def handle(self, request: bytes | None) -> dict[str, Any]:
        if request is None:
            return {"error": "the request was not one line of at most 1 MiB"}
        try:
            parsed = wire.loads(request)  # depth-bounded: no request can raise RecursionError here
        except ValueError:
            return {"error": "the request is not JSON"}
        if not isinstance(parsed, dict):
            return {"error": "the request is not a JSON object"}
        answer, changes = self.live.handle(parsed)
        values: dict[str, Any] = {}
        if changes.plan:
            self.gate.plan = self.live.plan
            values["fault_spec"] = json.dumps(self.live.spec(), default=str)
        if changes.control:
            # Journaled before any frame the action writes: the recorder then links the two.
            values["control"] = changes.control
        if values:
            self.changed_plan(values)  # one META record per request
        for direction, data, note, control in changes.send:
            # The gate's tracker sees it now, before any answer can arrive.
            self.to_send.append(self.gate.sent(direction, data, note, control))
        for number in changes.decided:
            event = self.waiting.pop(number, None)
            if event is not None:
                event.set()
        return answer


async def _read_line(stream: trio.SocketStream) -> bytes | None:
    data = b""
    while b"\n" not in data:
        chunk = await stream.receive_some(65536)
        if not chunk:
            break
        data += chunk
        if len(data) > MAX_REQUEST:
            return None
    return data.split(b"\n", 1)[0] if data else None
