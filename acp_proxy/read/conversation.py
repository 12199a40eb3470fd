"""A recording's conversations: a run's or a session's frames folded, with the runs' end state.

Owns: reading the frames that concern a reference (masked first, when masking is on), telling
the fold which runs are over (a turn of a run still recording is ``running``, not
``unfinished``: only an ended run's open turns and unanswered requests are final), keeping a
session's own conversation, and the plain-data (JSON-able) view of a folded conversation.
``show``, the MCP ``show`` tool, ``diff`` and the inspector all fold through ``conversations``.

Must not know: click, rich, HTTP, MCP; how a conversation is rendered. The fold's rules are
``read/fold.py``'s; this module only feeds it. Never writes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from acp_proxy.protocol.redact import Redactor
from acp_proxy.read import fold as fd
from acp_proxy.read import queries
from acp_proxy.read.queries import Ref


@dataclass(frozen=True)
class Folded:
    """What ``conversations`` computed for one reference."""

    ref: Ref
    run_ids: list[int]
    ended: dict[int, bool]
    """Run id -> whether the run is over."""
    frames: list[dict[str, Any]]
    """The frames that concern the reference, in relay order, masked when masking is on."""
    conversations: list[fd.Conversation]
    """By session, in the order they began; a connection without any session is left out when
    it holds nothing."""


def conversations(db: Any, ref: Ref, redactor: Redactor | None = None, *, include_stderr: bool = False) -> Folded:
    """The folded conversations of ``ref``, from its frames masked by ``redactor`` (when enabled)
    and with each run's end state."""
    run_ids = queries.run_ids_of(db, ref)
    ended = queries.runs_ended(db, run_ids)
    rows = queries.frames_of(db, ref, include_stderr=include_stderr)
    if redactor is not None and redactor.enabled:
        rows = [redactor.frame_row(row) for row in rows]
    folded = fold_rows((r for r in rows if r["dir"] != "stderr"), ended=ended)
    if ref.is_session:
        folded = {k: v for k, v in folded.items() if k == ref.session_id}
    kept = sorted(
        (c for k, c in folded.items() if k is not None or not c.empty),
        key=lambda c: c.timeline[0].seq if c.timeline else 0,
    )
    return Folded(ref, run_ids, ended, rows, kept)


def fold_rows(
    rows: Iterable[dict[str, Any]], *, ended: Mapping[Any, bool] | None = None
) -> dict[str | None, fd.Conversation]:
    """Fold recorded frame rows (as ``queries`` returns them) into conversations by session
    (``fold.fold_rows``: each run's rows read through ``protocol.rows.run_events``); ``ended``:
    run id -> whether that run is over. Runs not named are taken as ended."""
    return fd.fold_rows(rows, ended=ended)


def conversation_json(conv: fd.Conversation) -> dict[str, Any]:
    """A JSON-able view of a folded conversation (entities by timeline order)."""
    import dataclasses

    def plain(value: Any) -> Any:
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            out = {"entity": getattr(value, "entity", None)} if isinstance(value, fd.Entity) else {}
            out.update({f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)})
            return out
        if isinstance(value, (bytes, bytearray)):
            return value.decode(errors="replace")
        if isinstance(value, dict):
            return {str(k): plain(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [plain(v) for v in value]
        return value

    return plain(conv)
