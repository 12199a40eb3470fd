"""Real OTLP receivers for tests: an HTTP server on loopback that decodes what exporters post
with opentelemetry-proto's own messages (``ExportTraceServiceRequest`` on ``/v1/traces``,
``ExportMetricsServiceRequest`` on ``/v1/metrics``), as protobuf or as OTLP/JSON (parsed strictly:
an unknown field or a malformed id fails the export); and a gRPC server (``grpc_receiver``) with
opentelemetry-proto's own service stubs.

Modes: ``ok`` answers every export; ``hang`` accepts connections and never answers (a collector
that is stuck); ``no_metrics`` answers metrics with HTTP 405, as Arize Phoenix does;
``busy_once`` answers the first export with HTTP 503 (a collector asking for a retry);
``refused_port()`` is a port nothing listens on (a collector that is down).
"""

from __future__ import annotations

import base64
import json
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
    bounds: dict[str, list[float]] = field(default_factory=dict)
    """Each histogram's explicit bucket boundaries, as received."""
    headers: list[dict[str, str]] = field(default_factory=list)
    """The headers (or gRPC metadata) of each export, names in lower case."""
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

    def take_traces(self, body: bytes, json_body: bool = False) -> None:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

        request = _parse(ExportTraceServiceRequest(), body, json_body)
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

    def take_metrics(self, body: bytes, json_body: bool = False) -> None:
        from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

        request = _parse(ExportMetricsServiceRequest(), body, json_body)
        for rm in request.resource_metrics:
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    points = m.histogram.data_points if m.HasField("histogram") else []
                    for p in points:
                        self.bounds[m.name] = list(p.explicit_bounds)
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
            json_body = (self.headers.get("Content-Type") or "").startswith("application/json")
            with state.lock:
                state.posts += 1
                state.headers.append({k.lower(): v for k, v in self.headers.items()})
            if state.mode == "hang":
                state.stop.wait(120)  # never answers while the test runs
                return
            busy = state.mode == "busy_once" and state.posts == 1
            if busy or (state.mode == "no_metrics" and self.path.endswith("/v1/metrics")):
                self.send_response(503 if busy else 405)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            try:
                with state.lock:
                    if self.path.endswith("/v1/traces"):
                        state.take_traces(body, json_body)
                    elif self.path.endswith("/v1/metrics"):
                        state.take_metrics(body, json_body)
            except Exception:  # not OTLP: a collector answers 400
                self.send_response(400)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
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


_ID_KEYS = ("traceId", "spanId", "parentSpanId")


def _parse(message: Any, body: bytes, json_body: bool) -> Any:
    """``body`` into ``message``: protobuf, or OTLP/JSON (ids in hex, as the OTLP specification
    has them; protobuf's own JSON mapping wants base64)."""
    if not json_body:
        message.ParseFromString(body)
        return message
    from google.protobuf.json_format import ParseDict

    def unhex(value: Any) -> Any:
        if isinstance(value, dict):
            return {
                k: base64.b64encode(bytes.fromhex(v)).decode() if k in _ID_KEYS and isinstance(v, str) else unhex(v)
                for k, v in value.items()
            }
        if isinstance(value, list):
            return [unhex(v) for v in value]
        return value

    return ParseDict(unhex(json.loads(body)), message)


@contextmanager
def grpc_receiver(mode: str = "ok") -> Iterator[Receiver]:
    """A gRPC OTLP receiver (trace and metrics services) on a free loopback port; ``url`` is
    its http:// address (insecure). Modes: ``ok``, ``no_metrics`` (metrics answered
    UNIMPLEMENTED)."""
    from concurrent import futures

    import grpc
    from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

    state = Receiver(mode=mode)

    def seen(context: Any) -> None:
        with state.lock:
            state.posts += 1
            state.headers.append({k.lower(): v for k, v in context.invocation_metadata()})

    class Traces(trace_service_pb2_grpc.TraceServiceServicer):  # type: ignore[misc]
        def Export(self, request: Any, context: Any) -> Any:
            seen(context)
            with state.lock:
                state.take_traces(request.SerializeToString())
            return trace_service_pb2.ExportTraceServiceResponse()

    class Metrics(metrics_service_pb2_grpc.MetricsServiceServicer):  # type: ignore[misc]
        def Export(self, request: Any, context: Any) -> Any:
            seen(context)
            if state.mode == "no_metrics":
                context.abort(grpc.StatusCode.UNIMPLEMENTED, "no metrics here")
            with state.lock:
                state.take_metrics(request.SerializeToString())
            return metrics_service_pb2.ExportMetricsServiceResponse()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Traces(), server)
    metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(Metrics(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    state.url = f"http://127.0.0.1:{port}"
    try:
        yield state
    finally:
        state.stop.set()
        server.stop(grace=None)
