"""What the ``run`` and ``export`` commands call for OpenTelemetry (``--otlp``, ``--format otlp``).

Owns: checking the options (one line per mistake, before the agent starts), telling in one line
which extra to install when the SDK is missing, starting the live follower, and sending a
recorded run or session after the fact, with one line saying what was delivered and what lost.

Must not know: the relay, how spans are shaped (``spans``) or delivered (``exporter``).
"""

from __future__ import annotations

import importlib.util
import os
import time
from pathlib import Path
from typing import Any

from acp_proxy.errors import AcpProxyError, UsageError
from acp_proxy.otel import INSTALL_HINT
from acp_proxy.otel.endpoints import GRPC, Endpoints, endpoints

FROM_ENVIRONMENT = "env"
"""``--otlp`` given without a URL: the collector named by ``OTEL_EXPORTER_OTLP_ENDPOINT``."""
EXPORT_TIMEOUT_S = 60.0
"""How long ``export --format otlp`` waits for the collector to take everything."""
_SDK_MODULES = {
    "http": ("opentelemetry.sdk.trace", "opentelemetry.exporter.otlp.proto.http.trace_exporter"),
    "grpc": ("opentelemetry.sdk.trace", "opentelemetry.exporter.otlp.proto.grpc.trace_exporter"),
}
GRPC_HINT = "OTLP over gRPC needs its exporter: pip install 'acp-proxy[otel]' (opentelemetry-exporter-otlp-proto-grpc)"


class OtlpExportError(AcpProxyError):
    """Spans that could not be delivered after the fact (exit status 1)."""

    exit_code = 1


def missing_sdk(where: Endpoints | None = None) -> str | None:
    """The install hint when the ``[otel]`` extra (or, for ``where`` over gRPC, its gRPC
    exporter) is missing; found without importing the SDK: ``run`` asks before its agent starts."""
    grpc = where is not None and GRPC in (where.protocol, where.metrics_protocol)
    for kind in ("http", "grpc") if grpc else ("http",):
        for name in _SDK_MODULES[kind]:
            try:
                if importlib.util.find_spec(name) is None:
                    return INSTALL_HINT if kind == "http" else GRPC_HINT
            except (ImportError, ValueError):
                return INSTALL_HINT if kind == "http" else GRPC_HINT
    return None


def live_endpoints(otlp: str | None, content: bool, no_record: bool) -> Endpoints | None:
    """Where ``run --otlp`` sends spans (None: it does not), or a ``UsageError``."""
    if otlp is None:
        if content:
            raise UsageError("--otlp-content says what --otlp sends: give --otlp URL too")
        return None
    if no_record:
        raise UsageError("--otlp exports what is recorded: it cannot be used with --no-record")
    where = endpoints(None if otlp == FROM_ENVIRONMENT else otlp, os.environ)
    if where is None:
        raise UsageError("--otlp needs a URL, or OTEL_EXPORTER_OTLP_ENDPOINT set (e.g. http://localhost:4318)")
    missing = missing_sdk(where)
    if missing:
        raise UsageError(missing)
    return where


def start_live(db_path: Path, where: Endpoints, content: bool) -> None:
    """Start the follower for the run this process is about to record (a terminal run records no
    frames: nothing to follow)."""
    if os.isatty(0):
        return
    from acp_proxy.otel.follow import spawn

    spawn(db_path, proxy_pid=os.getpid(), not_before_ns=time.time_ns(), where=where, content=content)


def export(db_path: Path, ref_text: str, endpoint: str | None, content: bool, redactor: Any = None) -> str:
    """Send the spans of a recorded run, or of a session's turns, to the collector at
    ``endpoint`` (else the environment's); the line to print. ``redactor``: masks what
    ``content`` lets into spans (None: the built-in rules). Raises ``UsageError`` for a bad
    option or reference, ``OtlpExportError`` when spans were lost."""
    from acp_proxy.read import queries
    from acp_proxy.record import recovery

    where = endpoints(endpoint, os.environ)
    if where is None:
        raise UsageError(
            "--format otlp needs --endpoint URL (or OTEL_EXPORTER_OTLP_ENDPOINT), e.g. http://localhost:4318"
        )
    missing = missing_sdk(where)
    if missing:
        raise UsageError(missing)
    db = recovery.open_for_reading(db_path)
    ref = queries.resolve(db, ref_text)
    run_ids = queries.run_ids_of(db, ref)
    if not run_ids:
        raise UsageError(f"{ref.describe()} has no recorded run")
    from acp_proxy.otel.exporter import Exporter
    from acp_proxy.otel.follow import delivery_report
    from acp_proxy.otel.spans import build, recording_ids

    exporter = Exporter(where)
    total = 0
    for run_id in run_ids:
        start_ns, end_ns = queries.run_bounds(db, run_id)
        spans, points = build(
            queries.run_messages(db, run_id),
            annotations=run_annotations(db, run_id),
            end_ns=end_ns,
            run_id=run_id,
            content=content,
            redactor=redactor,
            start_ns=start_ns,
            ids=recording_ids(queries.run_identity(db, run_id)),
        )
        if ref.is_session:
            spans = [s for s in spans if s.session_id in (ref.session_id, None)]
        exporter.add(spans, points)
        total += len(spans)
    db.conn.close()
    exporter.close(EXPORT_TIMEOUT_S)
    runs = ", ".join(map(str, run_ids))
    if exporter.lost or exporter.points_lost:
        raise OtlpExportError(f"run(s) {runs}: {delivery_report(exporter, total)}")
    return f"sent {exporter.sent} spans of {ref.describe()} (run(s) {runs}) to {where.traces}"


def run_annotations(db: Any, run_id: int) -> list[Any]:
    """A run's applied faults and stored findings, as span events on their frames' spans."""
    from acp_proxy.otel.spans import fault_annotation, finding_annotation
    from acp_proxy.read import faults as said

    faults = [fault_annotation(f) for f in said.faults_after(db, run_id)]
    return faults + [finding_annotation(x) for x in said.findings_after(db, run_id)]
