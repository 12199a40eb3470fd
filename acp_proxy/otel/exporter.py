"""The thin shell between span descriptions (``spans``) and an OpenTelemetry collector.

Owns: turning each ``spans.Span`` into a span of the SDK's tracer (so the SDK's sampler,
limits and resource settings — ``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``,
``OTEL_TRACES_SAMPLER``, ``OTEL_EXPORTER_OTLP_HEADERS`` — apply), and delivering them over
OTLP/HTTP from a thread of its own that never makes its caller wait: spans that cannot be
delivered (the collector refuses, is down, or is too slow for the bounded queue) are counted as
lost, with the first reason, and the caller carries on. Metric measurements go to histograms of
the SDK's meter and leave through its periodic reader.

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
"""How long one delivery may take, retries included (the SDK's own default is 10 s)."""
MAX_QUEUED_SPANS = 20_000
"""Spans waiting for a slow collector beyond this are given up (counted lost)."""
BATCH_SPANS = 512
METRIC_INTERVAL_S = 15.0
SERVICE_NAME = "acp-proxy"

_UNITS = {"gen_ai.client.token.usage": "{token}"}


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
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.resources import SERVICE_NAME as SERVICE_KEY
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
        from opentelemetry.sdk.trace.id_generator import IdGenerator

        self._reasons = _quiet_sdk()
        self._trace = trace
        self._context = otel_context
        service = os.environ.get("OTEL_SERVICE_NAME") or SERVICE_NAME
        resource = Resource.create({SERVICE_KEY: service, "service.version": __version__})
        self.where = where
        self.sent = 0
        self.lost = 0
        self.error: str | None = None
        self._max_queued = max_queued
        self._queue: deque[Any] = deque()
        self._in_flight = 0
        self._cond = threading.Condition()
        self._closed = False
        self._span_exporter = OTLPSpanExporter(endpoint=where.traces, timeout=timeout)
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
            OTLPMetricExporter(endpoint=where.metrics, timeout=timeout),
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
            histogram = self._histograms[point.metric] = self._meter.create_histogram(
                point.metric, unit=_UNITS.get(point.metric, "s")
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
            with self._cond:
                if self._closed:
                    return  # ``close`` gave up on this batch and counted it lost
                self._in_flight = 0
                if ok:
                    self.sent += len(batch)
                else:
                    self.lost += len(batch)
                    self.error = self.error or self._reasons.last or "the collector did not accept them"
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
