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
    status: str = "running"


def control_target(db: ReadDb, ref: str) -> ControlTarget:
    """The run REF names (a run id or ``last``; a session names its newest run), its socket and
    its status (a run not ``running`` cannot be controlled); ``UsageError`` (one line) when it
    was never controllable."""
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
    return ControlTarget(run_id, path, str(row[1]))


HELD_NOTE = "held by breakpoint "  # how the gate's note on a held row starts (faults.gate)


def held_seqs(db: ReadDb, run_id: int, times: list[int]) -> dict[int, int]:
    """The ``frames`` seq of each held row recorded so far, by the time it was journaled with
    (the proxy's key for a held frame: ``faults.live.Held.ts_ns``)."""
    if not times:
        return {}
    marks = ",".join("?" * len(times))
    rows = db.execute(
        f"select ts_ns, seq from frames where run_id = ? and forwarded = 0 and ts_ns in ({marks})"
        " and note like ? and batch_seq is null",
        [run_id, *times, HELD_NOTE + "%"],
    ).fetchall()
    return {ts: seq for ts, seq in rows}


@dataclass(frozen=True)
class RecordedRequest:
    seq: int
    dir: str
    raw: str


def recorded_request(db: ReadDb, run_id: int, seq: int) -> RecordedRequest:
    """Frame ``seq`` of the run, when it is a request that can be sent again; ``UsageError``."""
    row = db.execute("select dir, kind, method, raw from frames where run_id = ? and seq = ?", [run_id, seq]).fetchone()
    if row is None:
        raise UsageError(f"run {run_id} has no frame {seq} (yet)")
    direction, kind, _method, raw = row
    if kind != "request" or direction not in ("c2a", "a2c") or not isinstance(raw, str):
        what = f"a {kind}" if kind else "not a JSON-RPC message"
        raise UsageError(f"frame {run_id}:{seq} is {what}, not a request: only requests can be resent")
    return RecordedRequest(seq, direction, raw)
