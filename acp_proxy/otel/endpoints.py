"""Where spans go: the collector's OTLP/HTTP addresses, from an option or the environment.

Owns: reading ``--otlp URL`` / ``--endpoint URL`` (the collector's base address, as in the
standard ``OTEL_EXPORTER_OTLP_ENDPOINT``, which is honoured too) into the two signal addresses,
``/v1/traces`` and ``/v1/metrics`` appended; the signal-specific
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`` are full addresses
and win over the base one from the environment (never over an option). A mistake is one line.

Must not know: the SDK, HTTP, spans. Import-cheap: ``run`` reads its options before the agent
starts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from acp_proxy.errors import UsageError


class OtlpError(UsageError):
    """An OpenTelemetry option that cannot be used; one line for a person."""


@dataclass(frozen=True)
class Endpoints:
    traces: str
    metrics: str


def check_url(url: str, what: str = "--otlp") -> str:
    """``url`` if it is an http(s) address with a host; else one line saying what is wrong."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise OtlpError(f"{what} needs the collector's http(s) address, e.g. http://localhost:4318 (got {url!r})")
    try:
        parts.port  # noqa: B018 (raises on a port that is not a number)
    except ValueError:
        raise OtlpError(f"{what}: {url!r} has a bad port") from None
    return url.strip()


def endpoints(url: str | None, env: Mapping[str, str]) -> Endpoints | None:
    """Where traces and metrics go: ``url`` (a base address) first, then the environment.

    None when neither names a collector."""
    base = url if url else env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or None
    traces = None if url else env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or None
    metrics = None if url else env.get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT") or None
    if base is None and traces is None:
        return None
    if base is not None:
        base = check_url(base, "--otlp" if url else "OTEL_EXPORTER_OTLP_ENDPOINT")
        root = base.rstrip("/")
        traces = traces or f"{root}/v1/traces"
        metrics = metrics or f"{root}/v1/metrics"
    assert traces is not None
    traces = check_url(traces, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    if metrics is None:
        metrics = traces.rsplit("/v1/traces", 1)[0].rstrip("/") + "/v1/metrics"
    return Endpoints(traces, check_url(metrics, "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"))
