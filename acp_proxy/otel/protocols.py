"""The OTLP exporters for each protocol: the SDK's own for ``http/protobuf`` and ``grpc``, and
acp-proxy's for ``http/json``, which the Python SDK does not have.

Owns: making the span and metric exporters an ``Endpoints`` names (headers from
``OTEL_EXPORTER_OTLP_HEADERS`` and compression come from the SDK's reading of the environment);
the OTLP/JSON encoding (the protobuf messages the SDK's encoders build, printed as the OTLP
specification's JSON mapping wants: lowerCamelCase keys, enums as integers, trace and span ids as
hex, not base64) and its delivery over HTTP with ``urllib``.

Must not know: spans' shape, the database, the queueing and counting (``exporter``). It imports
the SDK when an exporter is made (only ``exporter`` makes them), so it imports without the
``[otel]`` extra.
"""

from __future__ import annotations

import base64
import functools
import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

from acp_proxy.otel.endpoints import GRPC, HTTP_JSON, Endpoints

_ID_KEYS = frozenset({"traceId", "spanId", "parentSpanId"})


def span_exporter(where: Endpoints, timeout: float) -> Any:
    if where.protocol == GRPC:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpans

        return GrpcSpans(endpoint=where.traces, insecure=where.traces.startswith("http:"), timeout=timeout)
    if where.protocol == HTTP_JSON:
        return _json_exporters()[0](where.traces, timeout)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter(endpoint=where.traces, timeout=timeout)


def metric_exporter(where: Endpoints, timeout: float) -> Any:
    if where.metrics_protocol == GRPC:
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as GrpcMetrics

        return GrpcMetrics(endpoint=where.metrics, insecure=where.metrics.startswith("http:"), timeout=timeout)
    if where.metrics_protocol == HTTP_JSON:
        return _json_exporters()[1](where.metrics, timeout)
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

    return OTLPMetricExporter(endpoint=where.metrics, timeout=timeout)


# -- OTLP/JSON ------------------------------------------------------------------------------------


def to_json(message: Any) -> bytes:
    """A protobuf export request as OTLP/JSON."""
    from google.protobuf.json_format import MessageToDict

    body = _hex_ids(MessageToDict(message, use_integers_for_enums=True))
    return json.dumps(body, separators=(",", ":")).encode()


def _hex_ids(value: Any) -> Any:
    """OTLP/JSON spells trace and span ids in hex where protobuf's JSON mapping has base64."""
    if isinstance(value, dict):
        return {
            k: base64.b64decode(v).hex() if k in _ID_KEYS and isinstance(v, str) else _hex_ids(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_hex_ids(v) for v in value]
    return value


def _headers(signal: str) -> dict[str, str]:
    from opentelemetry.util.re import parse_env_headers

    text = os.environ.get(f"OTEL_EXPORTER_OTLP_{signal}_HEADERS") or os.environ.get("OTEL_EXPORTER_OTLP_HEADERS", "")
    return {**parse_env_headers(text, liberal=True), "Content-Type": "application/json"}


_RETRYABLE = frozenset({429, 502, 503, 504})
"""The answers OTLP/HTTP says to retry (as the SDK's own HTTP exporter does), with backoff."""


class _JsonPoster:
    """POSTs one OTLP/JSON body, retrying what may pass later within ``timeout`` seconds; True
    when the collector took it. The last refusal's reason is kept."""

    def __init__(self, url: str, timeout: float, signal: str) -> None:
        self.url = url
        self.timeout = timeout
        self.signal = signal
        self.error: str | None = None

    def post(self, body: bytes) -> bool:
        deadline = time.monotonic() + self.timeout
        backoff = 0.5
        while True:
            left = deadline - time.monotonic()
            request = urllib.request.Request(self.url, data=body, headers=_headers(self.signal), method="POST")
            try:
                with urllib.request.urlopen(request, timeout=max(0.01, left)) as answer:
                    answer.read()
                    return True
            except urllib.error.HTTPError as exc:
                self.error = f"{self.url} answered HTTP {exc.code} {exc.reason}"
                retry = exc.code in _RETRYABLE
            except (OSError, ValueError) as exc:
                self.error = f"{self.url}: {getattr(exc, 'reason', None) or exc}"
                retry = isinstance(exc, urllib.error.URLError) and not isinstance(exc.reason, TimeoutError)
            if not retry or time.monotonic() + backoff >= deadline:
                return False
            time.sleep(backoff)  # the collector asked for patience (or was not there yet)
            backoff *= 2


@functools.cache
def _json_exporters() -> tuple[type, type]:
    """The OTLP/JSON span and metric exporters (subclasses of the SDK's, made on first use)."""
    from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult, MetricsData
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    class JsonSpanExporter(SpanExporter):
        def __init__(self, url: str, timeout: float) -> None:
            self._poster = _JsonPoster(url, timeout, "TRACES")

        @property
        def error(self) -> str | None:
            return self._poster.error

        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

            ok = self._poster.post(to_json(encode_spans(spans)))
            return SpanExportResult.SUCCESS if ok else SpanExportResult.FAILURE

    class JsonMetricExporter(MetricExporter):
        def __init__(self, url: str, timeout: float) -> None:
            from opentelemetry.sdk.metrics import Histogram
            from opentelemetry.sdk.metrics.export import AggregationTemporality

            # Cumulative, as the SDK's OTLP exporters default to.
            super().__init__(preferred_temporality={Histogram: AggregationTemporality.CUMULATIVE})
            self._poster = _JsonPoster(url, timeout, "METRICS")

        @property
        def error(self) -> str | None:
            return self._poster.error

        def export(self, metrics_data: MetricsData, timeout_millis: float = 10_000, **_: Any) -> MetricExportResult:
            from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics

            ok = self._poster.post(to_json(encode_metrics(metrics_data)))
            return MetricExportResult.SUCCESS if ok else MetricExportResult.FAILURE

        def force_flush(self, timeout_millis: float = 10_000) -> bool:
            return True

        def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
            pass

    return JsonSpanExporter, JsonMetricExporter
