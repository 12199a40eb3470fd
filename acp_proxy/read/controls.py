"""Where a run's control socket is, and whether it can still answer (``acp-proxy ctl``).

Owns: ``control_target`` (a REF resolved to a run, the socket its proxy named in the run's
options, and whether the run is over). Must not know: sockets, the control wire, the relay.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from acp_proxy.errors import UsageError
from acp_proxy.read import queries
from acp_proxy.store.database import ReadDb


@dataclass(frozen=True)
class ControlTarget:
    run_id: int
    socket: str


def control_target(db: ReadDb, ref: str) -> ControlTarget:
    """The run REF names (a run id or ``last``; a session names its newest run) and its socket;
    ``UsageError`` (one line) when it cannot be controlled."""
    resolved = queries.resolve(db, ref)
    run_ids = queries.run_ids_of(db, resolved)
    if not run_ids:
        raise UsageError(f"{resolved.describe()} has no runs")
    run_id = max(run_ids)
    row = db.execute("select options, status from runs where id = ?", [run_id]).fetchone()
    try:
        options = json.loads(row[0]) if row and row[0] else {}
    except ValueError:
        options = {}
    path = options.get("control") if isinstance(options, dict) else None
    if not isinstance(path, str):
        raise UsageError(f"run {run_id} was not started with --control: it has no control socket")
    if row[1] != "running":
        raise UsageError(f"run {run_id} has ended ({row[1]}): there is nothing to control")
    return ControlTarget(run_id, path)
