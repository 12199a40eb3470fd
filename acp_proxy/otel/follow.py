"""The live OpenTelemetry exporter (``run --otlp``): a process of its own that follows one run's
committed rows in the database and sends their spans to a collector.

Owns: finding the run its proxy records (by the proxy's pid and start time), following that run's
frames, faults and findings in seq order as the writer commits them, feeding them to the span
builder, handing the spans to the ``Exporter``, and writing what was delivered and lost on the run
row (``otlp_spans``, ``otlp_spans_lost``, ``otlp_error``) once the run is over.

Why a process that reads the database, started detached by the ``run`` command (``spawn``), and
not a step of the relay or the recorder: a collector that is down or slow must cost spans, never
frames and never time on the relay. Here the database is the queue; the process runs at the
lowest CPU priority (``SCHED_IDLE`` where there is one), holds none of the proxy's pipes (an
editor waiting for the proxy's stderr to close never waits for it), and outlives the proxy only
to deliver what is left, for at most ``FLUSH_TIMEOUT_S``. It is started before the agent and
never waited for.

Must not know: the relay, the recorder, the link format, how frames are decoded or written.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sqlite3
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from acp_proxy.otel.endpoints import Endpoints
from acp_proxy.record import supervise

if TYPE_CHECKING:
    from acp_proxy.otel.spans import SpanBuilder

POLL_S = 0.2  # polling the database: there is no change feed to wait on (as `tail`)
BATCH_ROWS = 2000
FIND_RUN_TIMEOUT_S = 60.0
"""How long to wait for the proxy's run row (its recorder answers within 30 s, or the run fails)."""
GONE_GRACE_S = 5.0
"""After the proxy is gone with its run still `running`, how long new rows may still arrive."""
FLUSH_TIMEOUT_S = 10.0
"""After the run, how long queued spans may take to reach the collector before they count lost."""
PROCESS_NAME = b"acp-proxy-otlp"

_SELECT_FRAMES = "select * from frames where run_id = ? and seq > ? order by seq limit ?"


def delivery_report(exporter: Any, total: int | None = None) -> str:
    """What was lost, and why, in one line (spans, then metric data points)."""
    parts = []
    if exporter.lost:
        of = f" of {total}" if total is not None else ""
        parts.append(f"{exporter.lost}{of} spans could not be sent to {exporter.where.traces}: {exporter.error}")
    if exporter.points_lost:
        parts.append(
            f"{exporter.points_lost} metric points could not be sent to {exporter.where.metrics}: "
            f"{exporter.points_error}"
        )
    return "; ".join(parts)


def spawn(db_path: Path, *, proxy_pid: int, not_before_ns: int, where: Endpoints, content: bool) -> None:
    """Start the follower for the run that proxy ``proxy_pid`` is about to record, detached, at
    idle priority, with stdin/stdout/stderr on /dev/null. Never waits for it."""
    config = {
        "db": str(db_path),
        "proxy_pid": proxy_pid,
        "not_before_ns": not_before_ns,
        "where": dataclasses.asdict(where),
        "content": content,
    }
    argv = [sys.executable, "-m", "acp_proxy.otel.follow", json.dumps(config)]
    actions = [(os.POSIX_SPAWN_OPEN, fd, os.devnull, os.O_RDWR, 0) for fd in (0, 1, 2)]
    try:
        idle = (os.SCHED_IDLE, os.sched_param(0))
        os.posix_spawn(sys.executable, argv, os.environ, file_actions=actions, setsid=True, scheduler=idle)
    except (AttributeError, NotImplementedError, OSError, TypeError):
        # No SCHED_IDLE here (or not allowed): the follower lowers its own priority.
        os.posix_spawn(sys.executable, argv, os.environ, file_actions=actions, setsid=True)


def main(argv: list[str]) -> int:
    from acp_proxy.store import database as store

    try:
        config = json.loads(argv[0])
    except (IndexError, ValueError):
        return 2
    _become_follower()
    db_path = Path(config["db"])
    run_id: int | None = None
    try:
        run_id = _find_run(db_path, config["proxy_pid"], config["not_before_ns"])
        if run_id is None:
            return 0
        return follow(db_path, run_id, config)
    except BaseException as exc:  # a bug here must be seen on the run row, and touch nothing else
        if run_id is not None:
            try:
                store.update_run(db_path, run_id, {"otlp_error": f"the exporter failed: {type(exc).__name__}: {exc}"})
            except Exception:
                pass
        return 1


def _become_follower() -> None:
    supervise.run_idle()  # spawned idle-class already where posix_spawn could say so
    try:
        with open("/proc/self/comm", "wb") as comm:
            comm.write(PROCESS_NAME)
    except OSError:
        pass  # not Linux: the name is cosmetic


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _connect(db_path: Path) -> sqlite3.Connection | None:
    from acp_proxy.store.database import BUSY_TIMEOUT_MS, file_uri

    if not db_path.exists():
        return None
    try:
        conn = sqlite3.connect(file_uri(db_path), uri=True)
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        conn.execute("select 1 from runs limit 1")
    except sqlite3.Error:
        return None
    return conn


def _find_run(db_path: Path, proxy_pid: int, not_before_ns: int) -> int | None:
    """The id of the run proxy ``proxy_pid`` records; None once it is clear there is none."""
    deadline = time.monotonic() + FIND_RUN_TIMEOUT_S
    while time.monotonic() < deadline:
        conn = _connect(db_path)
        if conn is not None:
            try:
                row = conn.execute(
                    "select id from runs where proxy_pid = ? and started_ns >= ? order by id limit 1",
                    [proxy_pid, not_before_ns],
                ).fetchone()
            except sqlite3.Error:
                row = None
            finally:
                conn.close()
            if row is not None:
                return int(row[0])
        if not _alive(proxy_pid):
            return None  # the proxy stopped before it recorded anything (e.g. no such agent)
        time.sleep(POLL_S)
    return None


def follow(db_path: Path, run_id: int, config: dict[str, Any]) -> int:
    from acp_proxy.otel.exporter import Exporter
    from acp_proxy.otel.spans import SpanBuilder, fault_annotation, recording_ids
    from acp_proxy.read import faults as said
    from acp_proxy.read import queries
    from acp_proxy.store import database as store

    conn = _connect(db_path)
    if conn is None:
        return 1
    conn.row_factory = sqlite3.Row
    (started_ns,) = conn.execute("select started_ns from runs where id = ?", [run_id]).fetchone()
    exporter = Exporter(Endpoints(**config["where"]))
    ids = recording_ids(queries.run_identity(conn, run_id))  # the ids an export of this run sends
    builder = SpanBuilder(run_id=run_id, content=bool(config.get("content")), start_ns=started_ns, ids=ids)
    last_seq = 0
    last_finding = 0
    quiet_since: float | None = None
    while True:
        rows = [dict(r) for r in conn.execute(_SELECT_FRAMES, [run_id, last_seq, BATCH_ROWS])]
        if rows:
            upto = rows[-1]["seq"]
            # Faults are committed with their frames; a fault row past this batch waits for it.
            for fault in said.faults_after(conn, run_id, last_seq):
                if fault["seq"] <= upto:
                    builder.annotate(*fault_annotation(fault))
            last_finding = _findings(conn, builder, run_id, last_finding)
            for row in rows:
                exporter.add(builder.feed(row), builder.take_points())
            last_seq = upto
            quiet_since = None
            continue
        status = conn.execute("select status, ended_ns from runs where id = ?", [run_id]).fetchone()
        if status is None:
            return 1
        if status["status"] != "running":
            # The writer commits the run's end after its last frames: everything is in.
            _findings(conn, builder, run_id, last_finding)
            exporter.add(builder.finish(status["ended_ns"]), builder.take_points())
            break
        if not _alive(config["proxy_pid"]):
            now = time.monotonic()
            quiet_since = quiet_since or now
            if now - quiet_since > GONE_GRACE_S:
                exporter.add(builder.finish(), builder.take_points())
                break
        time.sleep(POLL_S)
    conn.close()
    exporter.close(FLUSH_TIMEOUT_S)
    # Metric points lost have no column of their own: they are counted in ``otlp_error``.
    error = delivery_report(exporter) or None
    counts = {"otlp_spans": exporter.sent, "otlp_spans_lost": exporter.lost, "otlp_error": error}
    store.update_run(db_path, run_id, counts)
    return 0


def _findings(conn: sqlite3.Connection, builder: SpanBuilder, run_id: int, after_id: int) -> int:
    """Findings the live checker stored since the last look (it may lag behind the frames)."""
    from acp_proxy.otel.spans import finding_annotation
    from acp_proxy.read import faults as said

    for row in said.findings_after(conn, run_id, after_id):
        builder.annotate(*finding_annotation(row))
        after_id = max(after_id, row["id"])
    return after_id


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
