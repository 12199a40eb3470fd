"""OpenTelemetry export of recordings: live (``run --otlp``) and after the fact (``export --format otlp``).

Owns, module by module: ``spans`` — the pure span builder (frame rows in, span descriptions and
metric measurements out); ``exporter`` — the thin shell on ``opentelemetry-sdk`` and its OTLP/HTTP
exporter (the optional ``[otel]`` extra); ``follow`` — the live exporter, a low-priority process of
its own that follows a run's committed rows in the database, so that a collector that is down or
slow costs spans (counted on the run row), never frames and never time on the relay;
``command`` — what the ``run`` and ``export`` commands call.

Must not know (this package): the relay, the recorder, the link format. It reads the database
like every other reader.
"""

from __future__ import annotations

INSTALL_HINT = "OpenTelemetry export needs the [otel] extra: pip install 'acp-proxy[otel]'"


def missing_extra() -> str | None:
    """The one line to print when the OpenTelemetry SDK or its OTLP/HTTP exporter is missing."""
    try:
        import opentelemetry.exporter.otlp.proto.http.trace_exporter
        import opentelemetry.sdk.trace  # noqa: F401
    except ImportError:
        return INSTALL_HINT
    return None
