"""The client side of a live run's control socket: what ``acp-proxy ctl``, the Python API and
pytest fixture (``testing.agent``) and the inspector's buttons call.

Owns: ``Controller`` (a run found by REF in a database, its socket, one request per connection:
one JSON line out, one JSON answer line in), the translation between the ``frames`` seq a person
sees and the proxy's hold numbers, and one-line failures (``ControlFailed``, a ``UsageError``:
exit 2 at the CLI). Must not know: what a request does in the proxy (``faults.live``), click,
rendering. SQL stays in ``read.controls``.

A socket that is gone or refuses (its proxy was killed: the file is stale) is "not live"; the
stale file is removed so nothing mistakes it for a live run's.
"""

from __future__ import annotations

import json
import socket
import stat
import time
from pathlib import Path
from typing import Any

from acp_proxy.errors import UsageError

TIMEOUT_S = 10.0
INDEXED_PATIENCE_S = 5.0  # how long a held row may take to reach the database (the recorder's lag)
POLL_S = 0.05


class ControlFailed(UsageError):
    """The run's proxy said no, or could not be reached."""


class Controller:
    """One live run's controls. ``db``: the database; ``ref``: a run id or ``last``."""

    def __init__(self, db: str | Path, ref: str = "last", timeout: float = TIMEOUT_S) -> None:
        from acp_proxy.read.controls import control_target

        self.db = Path(db)
        self.timeout = timeout
        target = control_target(self._open(), ref)
        self.run_id = target.run_id
        self.socket = target.socket
        if target.status != "running":
            self._remove_stale()
            raise ControlFailed(f"run {self.run_id} is not live: it has ended ({target.status})")

    def _open(self) -> Any:
        from acp_proxy.record import recovery

        return recovery.open_for_reading(self.db)

    # -- the wire ----------------------------------------------------------------------------

    def request(self, request: dict[str, Any]) -> Any:
        """One request; its answer's ``ok`` value, or ``ControlFailed`` with one line."""
        line = json.dumps(request).encode() + b"\n"
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(self.timeout)
                sock.connect(self.socket)
                try:
                    sock.sendall(line)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the proxy answered before reading it (busy): its answer is still there
                data = b""
                while b"\n" not in data:
                    chunk = sock.recv(65536)
                    if not chunk:
                        break
                    data += chunk
        except (FileNotFoundError, ConnectionRefusedError):
            self._remove_stale()
            raise ControlFailed(
                f"run {self.run_id} is not live: its control socket is gone (the proxy exited)"
            ) from None
        except TimeoutError:
            raise ControlFailed(f"run {self.run_id}'s proxy did not answer within {self.timeout:g} s") from None
        except OSError as exc:
            why = (exc.strerror or str(exc)).lower()
            raise ControlFailed(f"cannot reach the control socket of run {self.run_id}: {why}") from None
        try:
            answer = json.loads(data.split(b"\n", 1)[0])
        except ValueError:
            raise ControlFailed(f"run {self.run_id}'s proxy closed the connection without an answer") from None
        if not isinstance(answer, dict) or "ok" not in answer:
            error = answer.get("error") if isinstance(answer, dict) else None
            raise ControlFailed(str(error) if error else "the proxy's answer was not understood")
        return answer["ok"]

    def _remove_stale(self) -> None:
        """A socket file nobody listens on (its proxy was SIGKILLed) is removed."""
        path = Path(self.socket)
        try:
            if not stat.S_ISSOCK(path.lstat().st_mode):
                return
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
                probe.settimeout(1.0)
                probe.connect(self.socket)
            return  # someone listens there: not ours to remove
        except (ConnectionRefusedError, FileNotFoundError):
            pass
        except OSError:
            return
        try:
            path.unlink()
        except OSError:
            pass

    # -- faults ------------------------------------------------------------------------------

    def fault_add(self, rule: str) -> dict[str, Any]:
        return dict(self.request({"op": "fault-add", "rule": rule}))

    def faults(self) -> list[dict[str, Any]]:
        return list(self.request({"op": "fault-list"}))

    def fault_remove(self, rule_id: int) -> dict[str, Any]:
        return dict(self.request({"op": "fault-remove", "id": rule_id}))

    def fault_clear(self) -> dict[str, Any]:
        return dict(self.request({"op": "fault-clear"}))

    # -- breakpoints and held frames ---------------------------------------------------------

    def break_(self, filter_text: str) -> dict[str, Any]:
        return dict(self.request({"op": "break", "filter": filter_text}))

    def unbreak(self, point_id: int) -> dict[str, Any]:
        """Remove breakpoint ``point_id``; what it holds stays held."""
        return dict(self.request({"op": "unbreak", "id": point_id}))

    def breaks(self) -> list[dict[str, Any]]:
        return list(self.request({"op": "breaks"}))

    def clear(self) -> dict[str, Any]:
        """Remove every breakpoint; ``still_held`` names the frames held, by seq."""
        answer = dict(self.request({"op": "clear"}))
        holds = set(answer.get("still_held", []))
        answer["still_held"] = [h["seq"] for h in self.held() if h["hold"] in holds]
        return answer

    def held(self) -> list[dict[str, Any]]:
        """The frames held now, each with the ``seq`` its row has in ``frames`` (first key).
        Waits (bounded) for the recorder to have written the rows of frames just held."""
        from acp_proxy.read.controls import held_seqs

        held = list(self.request({"op": "held"}))
        deadline = time.monotonic() + INDEXED_PATIENCE_S
        while True:
            seqs = held_seqs(self._open(), self.run_id, [h["ts_ns"] for h in held])
            if len(seqs) == len(held) or time.monotonic() > deadline:
                break
            time.sleep(POLL_S)  # the recorder writes a held row within its commit interval
        return [{"seq": seqs.get(h["ts_ns"]), **h} for h in held]

    def held_frame(self, hold: int) -> str:
        """The whole text of held frame ``hold`` (``held`` shows its first characters)."""
        return str(self.request({"op": "held-frame", "hold": hold}))

    def _hold_of(self, seq: int) -> int:
        held = self.held()
        for h in held:
            if h["seq"] == seq:
                return int(h["hold"])
        shown = ", ".join(str(h["seq"]) for h in held) or "none"
        raise ControlFailed(f"frame {seq} is not held (held: {shown})")

    def release(self, seq: int, with_: str | None = None) -> dict[str, Any]:
        """Forward held frame ``seq`` (or ``with_``, an edited frame, in its place)."""
        self.request({"op": "release", "hold": self._hold_of(seq), "with": with_})
        return {"released": seq}

    def drop(self, seq: int) -> dict[str, Any]:
        self.request({"op": "drop", "hold": self._hold_of(seq)})
        return {"dropped": seq}

    # -- send and resend ---------------------------------------------------------------------

    def send(self, to: str, frame: str, resend_of: int | None = None) -> dict[str, Any]:
        """Write ``frame`` (JSON text) to the agent or the client. A request gets an id of the
        proxy's own; its answer is recorded and kept by the proxy (``sent``)."""
        request: dict[str, Any] = {"op": "send", "to": to, "frame": frame}
        if resend_of is not None:
            request["resend_of"] = resend_of
        return dict(self.request(request))

    def resend(self, seq: int, with_: str | None = None) -> dict[str, Any]:
        """Send recorded request ``seq`` again (or ``with_`` in its place), to whom it went."""
        from acp_proxy.read.controls import recorded_request

        recorded = recorded_request(self._open(), self.run_id, seq)
        to = "agent" if recorded.dir == "c2a" else "client"
        return self.send(to, with_ if with_ is not None else recorded.raw, resend_of=seq)

    def sent(self) -> list[dict[str, Any]]:
        """The requests the proxy sent, with their answers once they came."""
        return list(self.request({"op": "sent"}))
