"""The inspector's side of a live run's control wire (``run --control``): one JSON request line
to the run's socket, one JSON answer line back.

Owns: that exchange, bounded in time, and turning every way it can fail (a socket that is gone,
a proxy that does not answer, an answer that is not one) into one line. A minimal client of its
own: the command line's is ``cli.ctl_command``'s, a door this door must not import, and no
shared client is on main yet (when ``relay/control_client.py`` lands, this module should call it).

Must not know: what a request means (``faults.live`` in the proxy decides), SQL (the socket is
found by ``read.controls``), HTTP.
"""

from __future__ import annotations

import json
import socket
from typing import Any

TIMEOUT_S = 5.0
MAX_ANSWER = 4 * 1024 * 1024
OPS = frozenset(
    ("held", "release", "drop", "break", "breaks", "clear", "fault-add", "fault-list", "fault-remove", "fault-clear")
)


class ControlFailed(Exception):
    """The run's proxy said no, or could not be reached; ``str()`` is one line for a person."""


def ask(path: str, run_id: int, request: dict[str, Any], timeout: float = TIMEOUT_S) -> Any:
    """Send ``request`` to the proxy listening on ``path``; its answer's ``ok`` value."""
    line = json.dumps(request).encode() + b"\n"
    data = b""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(path)
            sock.sendall(line)
            while b"\n" not in data and len(data) < MAX_ANSWER:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
    except (FileNotFoundError, ConnectionRefusedError):
        raise ControlFailed(f"the control socket of run {run_id} is gone (its proxy has exited)") from None
    except TimeoutError:
        raise ControlFailed(f"run {run_id}'s proxy did not answer within {timeout:g} s") from None
    except OSError as exc:
        why = (exc.strerror or str(exc)).lower()
        raise ControlFailed(f"cannot reach the control socket of run {run_id}: {why}") from None
    try:
        answer = json.loads(data.split(b"\n", 1)[0])
    except ValueError:
        raise ControlFailed(f"run {run_id}'s proxy closed the connection without an answer") from None
    if not isinstance(answer, dict) or "ok" not in answer:
        error = answer.get("error") if isinstance(answer, dict) else None
        raise ControlFailed(" ".join(str(error).split())[:300] if error else "the proxy's answer was not understood")
    return answer["ok"]
