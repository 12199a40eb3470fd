"""Where spans go and how: the collector's OTLP addresses and protocol, from an option or the
standard ``OTEL_EXPORTER_OTLP_*`` environment.

Owns: reading ``--otlp URL`` / ``--endpoint URL`` (the collector's base address, as in the
standard ``OTEL_EXPORTER_OTLP_ENDPOINT``, which is honoured too) into the two signal addresses;
the protocol (``OTEL_EXPORTER_OTLP_PROTOCOL`` and its ``_TRACES_`` / ``_METRICS_`` variants:
``http/protobuf``, the default, ``http/json`` or ``grpc``). Over HTTP the signal paths
``/v1/traces`` and ``/v1/metrics`` are appended to a base address; gRPC takes the base address
as it is. The signal-specific ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` /
``OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`` are full addresses and win over the base one from the
environment (never over an option). ``OTEL_EXPORTER_OTLP_TIMEOUT`` (milliseconds, as the
specification has it) is read here too. A mistake is one line.

Must not know: the SDK, HTTP, spans. Import-cheap: ``run`` reads its options before the agent
starts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from acp_proxy.errors import UsageError

HTTP_PROTOBUF, HTTP_JSON, GRPC = "http/protobuf", "http/json", "grpc"
PROTOCOLS = (GRPC, HTTP_PROTOBUF, HTTP_JSON)


class OtlpError(UsageError):
    """An OpenTelemetry option that cannot be used; one line for a person."""


@dataclass(frozen=True)
class Endpoints:
    traces: str
    metrics: str
    protocol: str = HTTP_PROTOBUF
    """How traces are sent (one of ``PROTOCOLS``)."""
    metrics_protocol: str = HTTP_PROTOBUF
    timeout_s: float | None = None
    """``OTEL_EXPORTER_OTLP_TIMEOUT`` (None: acp-proxy's own bound)."""


def check_url(url: str, what: str = "--otlp") -> str:
    """``url`` if it is an http(s) address with a host; else one line saying what is wrong."""
    try:
        parts = urlsplit(url.strip())
    except ValueError as exc:  # an unclosed IPv6 bracket, say
        raise OtlpError(f"{what}: {url!r} is not an address ({str(exc).lower()})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise OtlpError(f"{what} needs the collector's http(s) address, e.g. http://localhost:4318 (got {url!r})")
    try:
        parts.port  # noqa: B018 (raises on a port that is not a number)
    except ValueError:
        raise OtlpError(f"{what}: {url!r} has a bad port") from None
    return url.strip()


def protocol_of(env: Mapping[str, str], signal: str) -> str:
    """The protocol for ``signal`` (``TRACES`` or ``METRICS``), or one line naming the three."""
    for name in (f"OTEL_EXPORTER_OTLP_{signal}_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        value = (env.get(name) or "").strip()
        if value:
            if value not in PROTOCOLS:
                raise OtlpError(f"{name}={value!r}: acp-proxy sends OTLP over {', '.join(PROTOCOLS)}")
            return value
    return HTTP_PROTOBUF


def timeout_of(env: Mapping[str, str]) -> float | None:
    """``OTEL_EXPORTER_OTLP_TIMEOUT`` in seconds (the variable is in milliseconds)."""
    value = (env.get("OTEL_EXPORTER_OTLP_TIMEOUT") or "").strip()
    if not value:
        return None
    try:
        ms = float(value)
    except ValueError:
        ms = -1.0
    if not 0 < ms < float("inf"):
        raise OtlpError(f"OTEL_EXPORTER_OTLP_TIMEOUT={value!r}: give milliseconds, e.g. 10000")
    return ms / 1000


def _signal(base: str | None, full: str | None, protocol: str, path: str, what: str) -> str | None:
    if full:
        return check_url(full, what)
    if base is None:
        return None
    return base if protocol == GRPC else f"{base.rstrip('/')}/{path}"


def endpoints(url: str | None, env: Mapping[str, str]) -> Endpoints | None:
    """Where traces and metrics go: ``url`` (a base address) first, then the environment.

    None when neither names a collector."""
    protocol, metrics_protocol = protocol_of(env, "TRACES"), protocol_of(env, "METRICS")
    timeout = timeout_of(env)
    base = url if url else env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or None
    traces_full = None if url else env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or None
    metrics_full = None if url else env.get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT") or None
    if base is None and traces_full is None:
        return None
    if base is not None:
        base = check_url(base, "--otlp" if url else "OTEL_EXPORTER_OTLP_ENDPOINT")
    traces = _signal(base, traces_full, protocol, "v1/traces", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    assert traces is not None
    metrics = _signal(base, metrics_full, metrics_protocol, "v1/metrics", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")
    if metrics is None:  # only a traces address: the metrics one beside it
        root = traces.rsplit("/v1/traces", 1)[0].rstrip("/") if protocol != GRPC else traces
        metrics = root if metrics_protocol == GRPC else f"{root}/v1/metrics"
    return Endpoints(traces, metrics, protocol, metrics_protocol, timeout)
