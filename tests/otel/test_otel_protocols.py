"""OTLP as the standard asks for it, against real receivers (``tests/otlp_receiver.py``): each
protocol of ``OTEL_EXPORTER_OTLP_PROTOCOL`` (gRPC with opentelemetry-proto's own service stubs,
HTTP with protobuf and with JSON), the other ``OTEL_EXPORTER_OTLP_*`` / ``OTEL_*`` variables, the
bucket boundaries and attributes the semantic conventions ask for, metrics a collector refuses
counted and reported, and ids that do not change when a run is exported again.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import proxy_env, run_proxy
from tests.otlp_receiver import ReceivedSpan, Receiver, grpc_receiver, receiver

# The ExplicitBucketBoundaries the semantic conventions advise, copied from their text:
# GenAI: semantic-conventions v1.39.0, docs/gen-ai/gen-ai-metrics.md (time_to_first_chunk:
# open-telemetry/semantic-conventions-genai, docs/gen-ai/gen-ai-metrics.md);
# RPC: semantic-conventions v1.44.0, docs/rpc/rpc-metrics.md.
GENAI_SECONDS = [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92]
ADVISED_BUCKETS = {
    "gen_ai.client.operation.duration": GENAI_SECONDS,
    "gen_ai.client.operation.time_to_first_chunk": GENAI_SECONDS,
    "gen_ai.client.token.usage": [4**n for n in range(14)],  # [1, 4, 16, 64, ... 67108864]
    "rpc.client.call.duration": [0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10],
}

# Attributes the conventions make Required, or Recommended / Conditionally Required where the
# recording has the fact (GenAI: semantic-conventions v1.39.0 gen-ai-agent-spans.md, invoke_agent
# client span; gen-ai-spans.md, execute_tool span; gen-ai-metrics.md. RPC: v1.44.0 json-rpc.md,
# client span; rpc-metrics.md, rpc.client.call.duration; network.transport from the network
# registry). Each: the attributes and, where the value is fixed, the value.
SPAN_ATTRIBUTES: dict[str, dict[str, Any]] = {
    "invoke_agent": {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.provider.name": "acp",
        "gen_ai.agent.id": None,
        "gen_ai.agent.name": None,
        "gen_ai.agent.version": None,
        "gen_ai.conversation.id": None,
        "gen_ai.response.finish_reasons": None,
    },
    "execute_tool": {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": None,
        "gen_ai.tool.call.id": None,
        "gen_ai.tool.type": "extension",
    },
    "rpc": {
        "rpc.system.name": "jsonrpc",
        "rpc.method": None,
        "jsonrpc.protocol.version": "2.0",
        "jsonrpc.request.id": None,
        "network.transport": "pipe",
    },
}
METRIC_ATTRIBUTES: dict[str, dict[str, Any]] = {
    "gen_ai.client.operation.duration": {"gen_ai.operation.name": "invoke_agent", "gen_ai.provider.name": "acp"},
    "gen_ai.client.operation.time_to_first_chunk": {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.provider.name": "acp",
    },
    "rpc.client.call.duration": {"rpc.system.name": "jsonrpc", "rpc.method": None},
}


def export(db: Path, url: str, *args: str, **env: str) -> Any:
    return run_proxy(["export", "--db", str(db), *args, "--format", "otlp", "--endpoint", url], env=proxy_env(**env))


def kind_of(span: ReceivedSpan) -> str:
    if "rpc.system.name" in span.attributes:
        return "rpc"
    return str(span.attributes.get("gen_ai.operation.name", span.name))


@pytest.mark.parametrize("protocol", ["http/protobuf", "http/json", "grpc"])
def test_each_protocol_delivers_spans_and_histograms_with_the_advised_buckets(
    sdk_recording: tuple[Path, str], protocol: str
) -> None:
    db, session = sdk_recording
    serve = grpc_receiver if protocol == "grpc" else receiver
    with serve() as got:
        result = export(
            db,
            got.url,
            session,
            OTEL_EXPORTER_OTLP_PROTOCOL=protocol,
            OTEL_EXPORTER_OTLP_HEADERS="x-api-key=s3cret,x-tenant=t1",
            OTEL_RESOURCE_ATTRIBUTES="service.name=from-attributes,deployment.environment.name=ci",
        )
        assert result.returncode == 0, result.stderr
    assert len(got.spans) == 14
    assert {(s.resource["service.name"], s.resource["deployment.environment.name"]) for s in got.spans} == {
        ("from-attributes", "ci")
    }
    assert got.headers and all(h.get("x-api-key") == "s3cret" and h.get("x-tenant") == "t1" for h in got.headers)
    for name, bounds in got.bounds.items():
        assert bounds == ADVISED_BUCKETS[name], name
    # The SDK recording reports no token usage: the three others are there.
    assert set(got.bounds) == set(ADVISED_BUCKETS) - {"gen_ai.client.token.usage"}


def test_token_counts_use_the_advised_buckets() -> None:
    """The SDK recording reports no usage; a measurement made here goes the same way."""
    from acp_proxy.otel.endpoints import endpoints
    from acp_proxy.otel.exporter import Exporter
    from acp_proxy.otel.spans import Point

    with receiver() as got:
        where = endpoints(got.url, {})
        assert where is not None
        exporter = Exporter(where)
        exporter.add([], [Point("gen_ai.client.token.usage", 300, {"gen_ai.token.type": "input"})])
        exporter.close(10)
    assert exporter.points_sent == 1 and exporter.points_lost == 0
    assert got.bounds == {"gen_ai.client.token.usage": ADVISED_BUCKETS["gen_ai.client.token.usage"]}
    (point,) = got.metrics["gen_ai.client.token.usage"]
    assert point[1:] == (1, 300)


def test_spans_and_metrics_carry_the_attributes_the_conventions_ask_for(sdk_recording: tuple[Path, str]) -> None:
    db, session = sdk_recording
    with receiver() as got:
        result = export(db, got.url, session)
        assert result.returncode == 0, result.stderr
    seen = set()
    for span in got.spans:
        kind = kind_of(span)
        seen.add(kind)
        for key, value in SPAN_ATTRIBUTES.get(kind, {}).items():
            assert key in span.attributes, (span.name, key)
            assert value is None or span.attributes[key] == value, (span.name, key, span.attributes[key])
    assert set(SPAN_ATTRIBUTES) <= seen
    for metric, wanted in METRIC_ATTRIBUTES.items():
        assert got.metrics[metric], metric
        for attributes, _, _ in got.metrics[metric]:
            for key, value in wanted.items():
                assert key in attributes and (value is None or attributes[key] == value), (metric, key)


def ids(got: Receiver) -> list[tuple[str, str, str]]:
    return sorted((s.trace_id, s.span_id, s.parent_id) for s in got.spans)


def test_exporting_a_run_again_sends_the_same_ids(sdk_recording: tuple[Path, str], tmp_path: Path) -> None:
    db, _ = sdk_recording
    with receiver() as first, receiver() as second:
        assert export(db, first.url, "1").returncode == 0
        assert export(db, second.url, "1").returncode == 0
    assert ids(first) == ids(second) and len(ids(first)) == len({i[1] for i in ids(first)})
    # Where the database lives is no part of a run's identity: a copy exports the same trace.
    copy = tmp_path / "copy.db"
    copy.write_bytes(db.read_bytes())
    with receiver() as copied:
        assert export(copy, copied.url, "1").returncode == 0
    assert ids(copied) == ids(first)
    # Another run: other ids.
    with receiver() as other:
        assert export(db, other.url, "2").returncode == 0
    assert not {i[1] for i in ids(other)} & {i[1] for i in ids(first)}


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_metrics_a_collector_refuses_fail_the_export_in_one_line(
    sdk_recording: tuple[Path, str], protocol: str
) -> None:
    db, session = sdk_recording
    serve = grpc_receiver if protocol == "grpc" else receiver
    with serve("no_metrics") as got:
        result = export(db, got.url, session, OTEL_EXPORTER_OTLP_PROTOCOL=protocol)
    text = result.stderr.decode()
    assert result.returncode == 1, text
    assert len(got.spans) == 14 and not got.metrics  # the spans went; the metrics were refused
    assert len(text.strip().splitlines()) == 1 and "Traceback" not in text
    assert "metric points could not be sent" in text and "spans could not" not in text
    assert ("405" if protocol != "grpc" else "UNIMPLEMENTED") in text


@pytest.mark.parametrize("protocol", ["http/protobuf", "http/json"])
def test_a_collector_asking_for_a_retry_gets_one(sdk_recording: tuple[Path, str], protocol: str) -> None:
    db, session = sdk_recording
    with receiver("busy_once") as busy:
        result = export(db, busy.url, session, OTEL_EXPORTER_OTLP_PROTOCOL=protocol)
    assert result.returncode == 0, result.stderr
    assert len(busy.spans) == 14 and busy.posts >= 3  # the refused post, its retry, the metrics


def test_the_export_timeout_comes_from_the_environment(sdk_recording: tuple[Path, str]) -> None:
    db, session = sdk_recording
    with receiver("hang") as stuck:
        started = time.monotonic()
        result = export(db, stuck.url, session, OTEL_EXPORTER_OTLP_TIMEOUT="300")
        took = time.monotonic() - started
    assert result.returncode == 1 and b"14 spans could not be sent" in result.stderr
    # 300 ms per delivery, not acp-proxy's own 5 s bound.
    assert took < 4.5, took


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"OTEL_EXPORTER_OTLP_PROTOCOL": "http/xml"}, "OTEL_EXPORTER_OTLP_PROTOCOL='http/xml'"),
        ({"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "udp"}, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL='udp'"),
        ({"OTEL_EXPORTER_OTLP_TIMEOUT": "soon"}, "OTEL_EXPORTER_OTLP_TIMEOUT='soon'"),
    ],
)
def test_a_bad_otlp_variable_is_one_line(tmp_path: Path, env: dict[str, str], expected: str) -> None:
    for args in (
        ["run", "--db", str(tmp_path / "rec.db"), "--otlp", "http://127.0.0.1:4318", "--", "true"],
        ["export", "--db", str(tmp_path / "rec.db"), "last", "--format", "otlp", "--endpoint", "http://127.0.0.1:1"],
    ):
        result = run_proxy(args, env=proxy_env(**env), timeout=30)
        text = result.stderr.decode()
        assert result.returncode == 2 and expected in text and "Traceback" not in text, text
        assert len(text.strip().splitlines()) == 1
    assert not (tmp_path / "rec.db").exists()  # the agent never ran
