"""What a remote run's recording says beside a message about the HTTP exchange that carried it.

Owns: the note ``acp-proxy serve`` journals with an upstream's HTTP error answer (``HTTP 501
answer to a POST``, with the content type when it is not JSON), written by ``http_answer_note``
and read back by ``http_status``, so the relay that writes it and the checks that read it agree
on one spelling. A note can grow later parts (the tracker appends ``; ...``): only its start is
read.

Must not know: HTTP libraries, sockets, SQL, what a status means for a rule.
"""

from __future__ import annotations

import re

_NOTE = re.compile(r"HTTP (\d{3}) answer to a ")


def http_answer_note(status: int, method: str, content_type: str) -> str | None:
    """The note of an answer with ``status`` to an HTTP ``method`` whose body is recorded as a
    message; None for a successful JSON answer (it is a message like any)."""
    note = None if 200 <= status < 300 else f"HTTP {status} answer to a {method}"
    if "json" not in content_type:
        note = f"{note or f'HTTP {status} answer to a {method}'} ({content_type or 'no content-type'})"
    return note


def http_status(note: object) -> int | None:
    """The HTTP status ``note`` (a frame's) records, None when it records none."""
    if not isinstance(note, str):
        return None
    found = _NOTE.match(note)
    return int(found.group(1)) if found else None
