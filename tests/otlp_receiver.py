"""A real OTLP/HTTP receiver for tests: an HTTP server on loopback that decodes what exporters
post with opentelemetry-proto's own messages (``ExportTraceServiceRequest`` on ``/v1/traces``,
``ExportMetricsServiceRequest`` on ``/v1/metrics``).

Modes: ``ok`` answers every export; ``hang`` accepts connections and never answers (a collector
that is stuck); ``refused_port()`` is a port nothing listens on (a collector that is down).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    if kind is None:
        return None
    return getattr(v, kind)


def _attributes(attrs: Any) -> dict[str, Any]:
    return {a.key: _value(a.value) for a in attrs}


@dataclass
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    kind: int
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    events: list[tuple[str, int, dict[str, Any]]]
    links: list[tuple[str, str]]
    status_code: int
    status_message: str
    resource: dict[str, Any]


@dataclass
class Receiver:
    mode: str = "ok"
    spans: list[ReceivedSpan] = field(default_factory=list)
    metrics: dict[str, list[Any]] = field(default_factory=dict)
    posts: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    url: str = ""
    stop: threading.Event = field(default_factory=threading.Event)

    def wait_for(self, predicate: Any, timeout: float) -> bool:
        """Poll until ``predicate(self)`` holds or ``timeout`` passes."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if predicate(self):
                    return True
            time.sleep(0.05)
        with self.lock:
            return bool(predicate(self))

    def take_traces(self, body: bytes) -> None:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        for rs in request.resource_spans:
            resource = _attributes(rs.resource.attributes)
            for ss in rs.scope_spans:
                for s in ss.spans:
                    self.spans.append(
                        ReceivedSpan(
                            name=s.name,
                            trace_id=s.trace_id.hex(),
                            span_id=s.span_id.hex(),
                            parent_id=s.parent_span_id.hex(),
                            kind=s.kind,
                            start_ns=s.start_time_unix_nano,
                            end_ns=s.end_time_unix_nano,
                            attributes=_attributes(s.attributes),
                            events=[(e.name, e.time_unix_nano, _attributes(e.attributes)) for e in s.events],
                            links=[(link.trace_id.hex(), link.span_id.hex()) for link in s.links],
                            status_code=s.status.code,
                            status_message=s.status.message,
                            resource=resource,
                        )
                    )

    def take_metrics(self, body: bytes) -> None:
        from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

        request = ExportMetricsServiceRequest()
        request.ParseFromString(body)
        for rm in request.resource_metrics:
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    points = m.histogram.data_points if m.HasField("histogram") else []
                    self.metrics.setdefault(m.name, []).extend(
                        (_attributes(p.attributes), p.count, p.sum) for p in points
                    )


@contextmanager
def receiver(mode: str = "ok") -> Iterator[Receiver]:
    """A receiver on a free loopback port for the duration of the block."""
    state = Receiver(mode=mode)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length)
            with state.lock:
                state.posts += 1
            if state.mode == "hang":
                state.stop.wait(120)  # never answers while the test runs
                return
            with state.lock:
                if self.path.endswith("/v1/traces"):
                    state.take_traces(body)
                elif self.path.endswith("/v1/metrics"):
                    state.take_metrics(body)
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        state.stop.set()
        server.shutdown()
        server.server_close()


def refused_port() -> str:
    """The address of a port nothing listens on (bound, then closed)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return f"http://127.0.0.1:{port}"
