"""The thin shell between span descriptions (``spans``) and an OpenTelemetry collector.

Owns: turning each ``spans.Span`` into a span of the SDK's tracer (so the SDK's sampler,
limits and resource settings — ``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``,
``OTEL_TRACES_SAMPLER``, ``OTEL_EXPORTER_OTLP_HEADERS`` — apply), and delivering them over
OTLP (``protocols``: gRPC, HTTP with protobuf or JSON) from a thread of its own that never makes
its caller wait: spans that cannot be delivered (the collector refuses, is down, or is too slow
for the bounded queue) are counted as lost, with the first reason, and the caller carries on.
Metric measurements go to histograms of the SDK's meter, with the bucket boundaries the semantic
conventions advise (``BUCKETS``), and leave through its periodic reader; measurements a collector
refuses are counted too (``points_lost``), with their reason.

Must not know: frames, rows, SQL, ACP. It imports the SDK when an ``Exporter`` is made, so the rest
of acp-proxy works without the ``[otel]`` extra.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from acp_proxy import __version__
from acp_proxy.otel.endpoints import Endpoints

if TYPE_CHECKING:
    from acp_proxy.otel.spans import Point, Span

EXPORT_TIMEOUT_S = 5.0
"""How long one delivery may take, retries included (the SDK's own default is 10 s), unless
``OTEL_EXPORTER_OTLP_TIMEOUT`` says otherwise."""
MAX_QUEUED_SPANS = 20_000
"""Spans waiting for a slow collector beyond this are given up (counted lost)."""
BATCH_SPANS = 512
METRIC_INTERVAL_S = 15.0
SERVICE_NAME = "acp-proxy"

_DURATION_GENAI = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
BUCKETS: dict[str, tuple[str, tuple[float, ...]]] = {
    # Each histogram's unit and the ExplicitBucketBoundaries its semantic convention advises (the
    # SDK's default, 0, 5, 10, 25, ... 10000, puts every call under 5 s in one bucket).
    # GenAI, semantic-conventions v1.39.0 docs/gen-ai/gen-ai-metrics.md (the same advice in
    # open-telemetry/semantic-conventions-genai, where the GenAI conventions moved, which also
    # defines time_to_first_chunk with it):
    "gen_ai.client.operation.duration": ("s", _DURATION_GENAI),
    "gen_ai.client.operation.time_to_first_chunk": ("s", _DURATION_GENAI),
    "gen_ai.client.token.usage": (
        "{token}",
        (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864),
    ),
    # RPC, semantic-conventions v1.44.0 docs/rpc/rpc-metrics.md: its own advice, which tops out at
    # 10 s (a longer call, such as a whole prompt turn, lands in the overflow bucket; the turn's
    # duration is gen_ai.client.operation.duration, whose buckets reach 81.92 s).
    "rpc.client.call.duration": ("s", (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10)),
}


class _Reasons(logging.Handler):
    """Keeps the SDK's last complaint (why a delivery failed) instead of printing it: the proxy's
    own words go to stderr prefixed, and one line says what was lost."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.last: str | None = None

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.last = record.getMessage().replace("\n", " ")[:300]
        except Exception:  # a log record that cannot be formatted is no reason to fail
            self.last = record.msg if isinstance(record.msg, str) else "unknown error"


def _quiet_sdk() -> _Reasons:
    reasons = _Reasons()
    for name in ("opentelemetry", "urllib3"):
        logger = logging.getLogger(name)
        logger.handlers = [reasons]
        logger.propagate = False
    return reasons


class Exporter:
    """Delivers spans and measurements to one collector. ``add`` never blocks; ``close`` waits at
    most ``timeout`` seconds for what is queued, then counts the rest as lost."""

    def __init__(self, where: Endpoints, *, timeout: float = EXPORT_TIMEOUT_S, max_queued: int = MAX_QUEUED_SPANS):
        from opentelemetry import context as otel_context
        from opentelemetry import trace
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
        from opentelemetry.sdk.trace.id_generator import IdGenerator

        from acp_proxy.otel import protocols

        self._reasons = _quiet_sdk()
        self._trace = trace
        self._context = otel_context
        resource = _resource()
        timeout = where.timeout_s or timeout
        self.where = where
        self.sent = 0
        self.lost = 0
        self.error: str | None = None
        self.points_sent = 0
        self.points_lost = 0
        """Metric data points the collector did not take (refused, down, too slow)."""
        self.points_error: str | None = None
        self._max_queued = max_queued
        self._queue: deque[Any] = deque()
        self._in_flight = 0
        self._cond = threading.Condition()
        self._closed = False
        self._span_exporter = protocols.span_exporter(where, timeout)
        exporter = self

        class Ids(IdGenerator):
            """Hands the SDK the ids the span builder chose (its parents and links use them)."""

            trace_id = 0
            span_id = 0

            def generate_span_id(self) -> int:
                return self.span_id

            def generate_trace_id(self) -> int:
                return self.trace_id

        class Enqueue(SpanProcessor):
            def on_end(self, span: Any) -> None:
                exporter._enqueue(span)

        self._ids = Ids()
        self._provider = TracerProvider(resource=resource, id_generator=self._ids)
        self._provider.add_span_processor(Enqueue())
        self._tracer = self._provider.get_tracer("acp-proxy", __version__)
        self._reader = PeriodicExportingMetricReader(
            _counting(protocols.metric_exporter(where, timeout), self),
            export_interval_millis=METRIC_INTERVAL_S * 1000,
            export_timeout_millis=timeout * 1000,
        )
        self._meters = MeterProvider(resource=resource, metric_readers=[self._reader])
        self._meter = self._meters.get_meter("acp-proxy", __version__)
        self._histograms: dict[str, Any] = {}
        self._thread = threading.Thread(target=self._deliver, name="otlp", daemon=True)
        self._thread.start()

    # -- input ------------------------------------------------------------------------------------

    def add(self, spans: Iterable[Span], points: Iterable[Point] = ()) -> None:
        for span in spans:
            self._start_and_end(span)
        for point in points:
            self._record(point)

    def _start_and_end(self, s: Span) -> None:
        trace = self._trace
        from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags

        flags = TraceFlags(TraceFlags.SAMPLED)
        if s.parent_id is not None:
            parent = trace.NonRecordingSpan(SpanContext(s.trace_id, s.parent_id, is_remote=False, trace_flags=flags))
            ctx = trace.set_span_in_context(parent, self._context.Context())
        else:
            ctx = self._context.Context()  # a root: never the current span of whoever calls
        self._ids.trace_id, self._ids.span_id = s.trace_id, s.span_id
        links = [Link(SpanContext(t, i, is_remote=False, trace_flags=flags)) for t, i in s.links]
        span = self._tracer.start_span(
            s.name,
            context=ctx,
            kind=SpanKind.CLIENT if s.kind == "client" else SpanKind.INTERNAL,
            attributes=s.attributes,
            links=links,
            start_time=s.start_ns,
            record_exception=False,
            set_status_on_exception=False,
        )
        for event in s.events:
            span.add_event(event.name, event.attributes, event.ts_ns)
        if s.error is not None:
            span.set_status(Status(StatusCode.ERROR, s.error))
        span.end(end_time=s.end_ns)

    def _record(self, point: Point) -> None:
        histogram = self._histograms.get(point.metric)
        if histogram is None:
            unit, bounds = BUCKETS.get(point.metric, ("s", None))
            histogram = self._histograms[point.metric] = self._meter.create_histogram(
                point.metric, unit=unit, explicit_bucket_boundaries_advisory=bounds
            )
        histogram.record(point.value, point.attributes)

    def _enqueue(self, span: Any) -> None:
        with self._cond:
            if self._closed or len(self._queue) >= self._max_queued:
                self.lost += 1
                self.error = self.error or "the collector did not keep up: the queue of spans was full"
                return
            self._queue.append(span)
            self._cond.notify()

    # -- delivery ---------------------------------------------------------------------------------

    def _deliver(self) -> None:
        from opentelemetry.sdk.trace.export import SpanExportResult

        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return
                batch = [self._queue.popleft() for _ in range(min(BATCH_SPANS, len(self._queue)))]
                self._in_flight = len(batch)
            try:
                ok = self._span_exporter.export(batch) == SpanExportResult.SUCCESS
            except Exception as exc:  # the SDK's exporter should not raise; it must not stop delivery
                ok = False
                self._reasons.last = f"{type(exc).__name__}: {exc}"
            reason = getattr(self._span_exporter, "error", None) or self._reasons.last
            with self._cond:
                if self._closed:
                    return  # ``close`` gave up on this batch and counted it lost
                self._in_flight = 0
                if ok:
                    self.sent += len(batch)
                else:
                    self.lost += len(batch)
                    self.error = self.error or reason or "the collector did not accept them"
                self._cond.notify_all()

    def close(self, timeout: float) -> None:
        """Wait up to ``timeout`` s for queued spans to be delivered; count what is left as lost."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while (self._queue or self._in_flight) and time.monotonic() < deadline:
                self._cond.wait(max(0.0, min(0.2, deadline - time.monotonic())))
            left = len(self._queue) + self._in_flight
            if left:
                self.lost += left
                self.error = self.error or self._reasons.last or f"not delivered within {timeout:g} s"
            self._queue.clear()
            self._in_flight = 0
            self._closed = True
            self._cond.notify_all()
        # Metrics: one last collection and delivery, bounded like the spans'.
        remaining = max(0.5, deadline - time.monotonic())
        done = threading.Event()

        def flush() -> None:
            try:
                self._meters.shutdown(timeout_millis=remaining * 1000)
            except Exception:  # a collector that fails here costs measurements, nothing else
                pass
            done.set()

        threading.Thread(target=flush, name="otlp-metrics", daemon=True).start()
        done.wait(remaining + 1)


def _resource() -> Any:
    """The SDK's resource (``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_SERVICE_NAME``, which wins, as the
    specification says), named ``acp-proxy`` when neither names the service."""
    from opentelemetry.sdk.resources import SERVICE_NAME as SERVICE_KEY
    from opentelemetry.sdk.resources import Resource

    resource = Resource.create({"service.version": __version__})
    named = os.environ.get("OTEL_SERVICE_NAME") or "service.name=" in os.environ.get("OTEL_RESOURCE_ATTRIBUTES", "")
    return resource if named else resource.merge(Resource({SERVICE_KEY: SERVICE_NAME}))


def _counting(inner: Any, exporter: Exporter) -> Any:
    """``inner`` (a metric exporter) counting the data points each export delivers or loses."""
    from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult

    class Counting(MetricExporter):
        def __init__(self) -> None:
            super().__init__(inner._preferred_temporality, inner._preferred_aggregation)

        def export(self, metrics_data: Any, timeout_millis: float = 10_000, **kwargs: Any) -> Any:
            points = sum(
                len(m.data.data_points)
                for rm in metrics_data.resource_metrics
                for sm in rm.scope_metrics
                for m in sm.metrics
            )
            try:
                result = inner.export(metrics_data, timeout_millis=timeout_millis, **kwargs)
            except Exception as exc:  # must not stop the reader; counted below
                exporter._reasons.last = f"{type(exc).__name__}: {exc}"
                result = MetricExportResult.FAILURE
            with exporter._cond:
                if result == MetricExportResult.SUCCESS:
                    exporter.points_sent += points
                else:
                    exporter.points_lost += points
                    reason = getattr(inner, "error", None) or exporter._reasons.last
                    exporter.points_error = exporter.points_error or reason or "the collector did not accept them"
            return result

        def force_flush(self, timeout_millis: float = 10_000) -> bool:
            return bool(inner.force_flush(timeout_millis))

        def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
            inner.shutdown(timeout_millis=timeout_millis)

    return Counting()
