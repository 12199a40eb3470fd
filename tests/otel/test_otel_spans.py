"""The span builder: frame rows in, span descriptions and measurements out — no SDK, no I/O.

Rows are built as the recorder builds them (``wire.decode`` of each line); nothing here spawns.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from acp_proxy.otel.endpoints import OtlpError, endpoints
from acp_proxy.otel.spans import Span, SpanBuilder, build, fault_annotation, recording_ids
from acp_proxy.protocol import wire
from acp_proxy.protocol.redact import MASK

MS = 1_000_000
T0 = 1_700_000_000_000_000_000
SID = "sess_1"


class Frames:
    """A run's frame rows, seq from 1, ``ms`` apart."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def add(self, direction: str, message: Any, *, at_ms: float | None = None, **extra: Any) -> int:
        line = message if isinstance(message, bytes) else json.dumps(message, separators=(",", ":")).encode()
        frame = wire.decode(line)
        seq = len(self.rows) + 1
        ts = T0 + int((at_ms if at_ms is not None else seq) * MS)
        self.rows.append(
            {
                "run_id": 1,
                "seq": seq,
                "ts_ns": ts,
                "dir": direction,
                "raw": line.decode("utf-8", "replace"),
                "kind": frame.kind,
                "method": frame.method,
                "rpc_id": frame.rpc_id,
                "session_id": frame.session_id,
                "update_kind": frame.update_kind,
                "error_code": frame.error_code,
                "error_message": frame.error_message,
                "forwarded": 1,
                **extra,
            }
        )
        return seq

    def c2a(self, message: Any, **kw: Any) -> int:
        return self.add("c2a", message, **kw)

    def a2c(self, message: Any, **kw: Any) -> int:
        return self.add("a2c", message, **kw)

    def ts(self, seq: int) -> int:
        return self.rows[seq - 1]["ts_ns"]


def request(rid: Any, method: str, params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}


def result(rid: Any, value: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "result": value}


def update(body: dict[str, Any], sid: str = SID) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": sid, "update": body}}


def handshake(f: Frames) -> None:
    f.c2a(request(0, "initialize", {"protocolVersion": 1, "clientInfo": {"name": "ed", "version": "2.0"}}))
    f.a2c(result(0, {"protocolVersion": 1, "agentInfo": {"name": "agentx", "version": "1.5"}}))
    f.c2a(request(1, "session/new", {"cwd": "/w", "mcpServers": []}))
    f.a2c(result(1, {"sessionId": SID}))


def a_turn_with_a_tool_and_a_permission(f: Frames, prompt: str = "write it") -> dict[str, int]:
    seqs = {
        "prompt": f.c2a(request(2, "session/prompt", {"sessionId": SID, "prompt": [{"type": "text", "text": prompt}]}))
    }
    seqs["thought"] = f.a2c(update({"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": "hm"}}))
    seqs["tool"] = f.a2c(
        update({"sessionUpdate": "tool_call", "toolCallId": "call_1", "title": "Write notes.txt", "kind": "edit"})
    )
    seqs["ask"] = f.a2c(
        request(
            7,
            "session/request_permission",
            {
                "sessionId": SID,
                "toolCall": {"toolCallId": "call_1"},
                "options": [{"optionId": "allow", "kind": "allow_once", "name": "Allow"}],
            },
        )
    )
    seqs["answer"] = f.c2a(result(7, {"outcome": {"outcome": "selected", "optionId": "allow"}}))
    seqs["done"] = f.a2c(update({"sessionUpdate": "tool_call_update", "toolCallId": "call_1", "status": "completed"}))
    seqs["text"] = f.a2c(update({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "done "}}))
    f.a2c(update({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "now"}}))
    seqs["end"] = f.a2c(result(2, {"stopReason": "end_turn"}))
    return seqs


def ids() -> Any:
    counter = iter(range(1, 1 << 30))
    return lambda bits: next(counter)


def by_name(spans: list[Span], name: str) -> Span:
    (span,) = [s for s in spans if s.name == name]
    return span


def test_a_turn_is_a_trace_of_its_own_with_tool_permission_and_rpc_children() -> None:
    f = Frames()
    handshake(f)
    seqs = a_turn_with_a_tool_and_a_permission(f)
    spans, points = build(f.rows, run_id=1, ids=ids())
    turn = by_name(spans, "invoke_agent agentx")
    tool = by_name(spans, "execute_tool Write notes.txt")
    ask = by_name(spans, "session/request_permission")
    prompt = by_name(spans, "session/prompt")
    connection = by_name(spans, "acp.connection")
    init, new = by_name(spans, "initialize"), by_name(spans, "session/new")

    assert turn.parent_id is None and turn.kind == "client" and turn.trace_id != connection.trace_id
    assert (tool.parent_id, ask.parent_id, prompt.parent_id) == (turn.span_id, tool.span_id, turn.span_id)
    assert {tool.trace_id, ask.trace_id, prompt.trace_id} == {turn.trace_id}
    assert init.parent_id == new.parent_id == connection.span_id and connection.parent_id is None
    assert (turn.start_ns, turn.end_ns) == (f.ts(seqs["prompt"]), f.ts(seqs["end"]))
    assert (tool.start_ns, tool.end_ns) == (f.ts(seqs["tool"]), f.ts(seqs["done"]))
    assert (ask.start_ns, ask.end_ns) == (f.ts(seqs["ask"]), f.ts(seqs["answer"]))
    assert turn.attributes | {} == {
        **turn.attributes,
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.conversation.id": SID,
        "gen_ai.agent.name": "agentx",
        "gen_ai.agent.version": "1.5",
        "acp.client.name": "ed",
        "gen_ai.response.finish_reasons": ["end_turn"],
        "gen_ai.response.time_to_first_chunk": (f.ts(seqs["thought"]) - f.ts(seqs["prompt"])) / 1e9,
        "acp.turn.status": "ended",
        "acp.turn.index": 1,
    }
    assert tool.attributes["gen_ai.tool.call.id"] == "call_1"
    assert (tool.attributes["acp.tool.kind"], tool.attributes["acp.tool.status"]) == ("edit", "completed")
    assert (ask.attributes["acp.permission.outcome"], ask.attributes["acp.permission.option_id"]) == (
        "selected",
        "allow",
    )
    assert ask.attributes["acp.direction"] == "a2c" and ask.attributes["jsonrpc.request.id"] == "7"
    assert prompt.attributes["rpc.system.name"] == "jsonrpc" and prompt.attributes["rpc.method"] == "session/prompt"
    assert (turn.trace_id, turn.span_id) in connection.links and turn.links == [
        (connection.trace_id, connection.span_id)
    ]
    # Content is opt-in: no message text by default.
    assert not any(k.startswith(("gen_ai.input", "gen_ai.output", "gen_ai.tool.call.a")) for k in turn.attributes)
    assert len(spans) == len({s.span_id for s in spans}) == 7
    metrics = {p.metric for p in points}
    assert metrics == {
        "rpc.client.call.duration",
        "gen_ai.client.operation.duration",
        "gen_ai.client.operation.time_to_first_chunk",
    }
    durations = [p for p in points if p.metric == "rpc.client.call.duration"]
    assert len(durations) == 4 and {p.attributes["rpc.method"] for p in durations} >= {"session/prompt"}


def test_spans_are_handed_over_as_they_finish() -> None:
    f = Frames()
    handshake(f)
    seqs = a_turn_with_a_tool_and_a_permission(f)
    builder = SpanBuilder(ids=ids())
    finished: dict[int, list[str]] = {}
    for row in f.rows:
        finished[row["seq"]] = [s.name for s in builder.feed(row)]
    assert finished[seqs["done"]] == ["execute_tool Write notes.txt"]
    assert finished[seqs["end"]] == ["session/prompt", "invoke_agent agentx"]
    assert [s.name for s in builder.finish()] == ["acp.connection"]


def test_content_is_opt_in_and_redacted() -> None:
    f = Frames()
    handshake(f)
    a_turn_with_a_tool_and_a_permission(f, prompt="use sk-ant-api03-abcdefghijklmnopqrstuvwx please")
    spans, _ = build(f.rows, ids=ids(), content=True)
    turn = by_name(spans, "invoke_agent agentx")
    inputs = json.loads(turn.attributes["gen_ai.input.messages"])
    assert inputs == [{"role": "user", "parts": [{"type": "text", "content": f"use {MASK} please"}]}]
    outputs = json.loads(turn.attributes["gen_ai.output.messages"])
    assert outputs == [
        {
            "role": "assistant",
            "parts": [{"type": "reasoning", "content": "hm"}, {"type": "text", "content": "done now"}],
            "finish_reason": "end_turn",
        }
    ]


def test_usage_errors_and_unanswered() -> None:
    f = Frames()
    handshake(f)
    f.c2a(request(2, "session/prompt", {"sessionId": SID, "prompt": []}))
    f.a2c(
        result(2, {"stopReason": "max_tokens", "usage": {"inputTokens": 120, "outputTokens": 30, "thoughtTokens": 5}})
    )
    f.c2a(request(3, "session/prompt", {"sessionId": SID, "prompt": []}))
    f.a2c({"jsonrpc": "2.0", "id": 3, "error": {"code": -32603, "message": "model overloaded"}})
    f.c2a(request(4, "session/set_mode", {"sessionId": SID, "modeId": "x"}))
    spans, points = build(f.rows, ids=ids())
    first, second = [s for s in spans if s.name.startswith("invoke_agent")]
    assert (first.attributes["gen_ai.usage.input_tokens"], first.attributes["gen_ai.usage.output_tokens"]) == (120, 30)
    assert first.attributes["gen_ai.usage.reasoning.output_tokens"] == 5 and first.error is None
    assert second.error == "model overloaded" and second.attributes["error.type"] == "-32603"
    failed = [s for s in spans if s.name == "session/prompt" and s.error]
    assert failed and failed[0].attributes["rpc.response.status_code"] == "-32603"
    pending = by_name(spans, "session/set_mode")
    assert pending.attributes["acp.unanswered"] is True and pending.error
    tokens = sorted(
        (p.attributes["gen_ai.token.type"], p.value) for p in points if p.metric == "gen_ai.client.token.usage"
    )
    assert tokens == [("input", 120), ("output", 30)]


def test_v2_idle_usage_cancel_notice_and_annotations() -> None:
    f = Frames()
    f.c2a(request(0, "initialize", {"protocolVersion": 2}))
    f.a2c(result(0, {"protocolVersion": 2, "agentInfo": {"name": "v2agent"}}))
    f.c2a(request(1, "session/new", {"cwd": "/w"}))
    f.a2c(result(1, {"sessionId": SID}))
    prompt = f.c2a(request(2, "session/prompt", {"sessionId": SID, "prompt": []}))
    f.a2c(result(2, {"messageId": "m1"}))
    f.a2c(update({"sessionUpdate": "state_update", "state": "running"}))
    notice = f.a2c(update({"sessionUpdate": "notice", "severity": "warning", "title": "slow"}))
    cancel = f.c2a({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": SID}})
    idle = f.a2c(
        update(
            {
                "sessionUpdate": "state_update",
                "state": "idle",
                "stopReason": "cancelled",
                "usage": {"inputTokens": 9, "outputTokens": 1},
            }
        )
    )
    builder = SpanBuilder(ids=ids())
    builder.annotate(
        *fault_annotation(
            {"seq": notice, "ts_ns": f.ts(notice), "rule": "delay=5ms", "action": "delay", "detail": "5ms"}
        )
    )
    builder.annotate(cancel, "acp.finding", None, {"acp.finding.rule": "r1", "acp.finding.severity": "error"})
    spans = [s for row in f.rows for s in builder.feed(row)] + builder.finish()
    turn = by_name(spans, "invoke_agent v2agent")
    assert (turn.start_ns, turn.end_ns) == (f.ts(prompt), f.ts(idle))
    assert turn.attributes["gen_ai.response.finish_reasons"] == ["cancelled"]
    assert turn.attributes["gen_ai.usage.input_tokens"] == 9 and turn.attributes["acp.message.id"] == "m1"
    events = {e.name: e for e in turn.events}
    assert set(events) == {"acp.notice", "acp.fault", "acp.cancel", "acp.finding"}
    assert events["acp.notice"].attributes == {"acp.frame.seq": notice, "acp.notice.severity": "warning"}
    assert events["acp.fault"].attributes["acp.fault.action"] == "delay"
    assert events["acp.finding"].ts_ns == f.ts(cancel)


def test_history_replay_makes_no_tool_spans_and_an_open_turn_ends_unfinished() -> None:
    f = Frames()
    handshake(f)
    f.c2a(request(5, "session/load", {"sessionId": SID, "cwd": "/w", "mcpServers": []}))
    f.a2c(update({"sessionUpdate": "tool_call", "toolCallId": "old", "title": "history"}))
    f.a2c(result(5, None))
    f.c2a(request(6, "session/prompt", {"sessionId": SID, "prompt": []}))
    f.a2c(update({"sessionUpdate": "tool_call", "toolCallId": "new", "title": "Run tests", "status": "in_progress"}))
    spans, _ = build(f.rows, ids=ids())
    assert [s.name for s in spans if s.name.startswith("execute_tool")] == ["execute_tool Run tests"]
    turn = by_name(spans, "invoke_agent agentx")
    assert turn.attributes["acp.turn.status"] == "unfinished" and turn.attributes["error.type"] == "unfinished"
    assert by_name(spans, "execute_tool Run tests").attributes["acp.tool.status"] == "in_progress"


# -- totality -----------------------------------------------------------------------------------

_IDS = st.sampled_from([1, 2, 3, "a", None])
_SIDS = st.sampled_from([SID, "sess_2", 7])
_UPDATES = st.fixed_dictionaries(
    {
        "sessionUpdate": st.sampled_from(
            [
                "tool_call",
                "tool_call_update",
                "agent_message_chunk",
                "notice",
                "state_update",
                "usage_update",
                "plan",
                "_x",
                3,
            ]
        )
    },
    optional={
        "toolCallId": st.sampled_from(["c1", "c2", 5]),
        "title": st.one_of(st.text(max_size=4), st.integers()),
        "status": st.sampled_from(["pending", "completed", "failed", 1]),
        "state": st.sampled_from(["running", "idle", "requires_action"]),
        "stopReason": st.sampled_from(["end_turn", None, 4]),
        "usage": st.one_of(st.none(), st.dictionaries(st.sampled_from(["inputTokens", "outputTokens"]), st.integers())),
        "content": st.one_of(st.none(), st.fixed_dictionaries({"type": st.just("text"), "text": st.text(max_size=5)})),
        "used": st.integers(),
    },
)
_PARAMS = st.one_of(
    st.none(),
    st.fixed_dictionaries(
        {},
        optional={
            "sessionId": _SIDS,
            "prompt": st.one_of(
                st.lists(st.fixed_dictionaries({"type": st.sampled_from(["text", "image", 1])}), max_size=2),
                st.integers(),
            ),
            "toolCall": st.one_of(st.none(), st.fixed_dictionaries({"toolCallId": st.sampled_from(["c1", 2])})),
            "update": _UPDATES,
            "protocolVersion": st.sampled_from([1, 2]),
        },
    ),
)
_RESULTS = st.one_of(
    st.none(),
    st.integers(),
    st.fixed_dictionaries(
        {},
        optional={
            "sessionId": _SIDS,
            "stopReason": st.sampled_from(["end_turn", None]),
            "messageId": st.sampled_from(["m", 4]),
            "usage": st.one_of(
                st.integers(), st.dictionaries(st.sampled_from(["inputTokens", "totalTokens"]), st.integers())
            ),
            "outcome": st.one_of(
                st.text(max_size=3), st.fixed_dictionaries({"outcome": st.sampled_from(["selected", 1])})
            ),
            "agentInfo": st.one_of(st.integers(), st.fixed_dictionaries({"name": st.text(max_size=3)})),
        },
    ),
)
_METHODS = st.sampled_from(
    [
        "initialize",
        "session/new",
        "session/load",
        "session/prompt",
        "session/request_permission",
        "fs/read_text_file",
        "_x",
    ]
)
_MESSAGES = st.one_of(
    st.builds(request, _IDS, _METHODS, _PARAMS),
    st.builds(
        lambda m, p: {"jsonrpc": "2.0", "method": m, "params": p},
        st.sampled_from(["session/update", "session/cancel", "$/cancel_request"]),
        _PARAMS,
    ),
    st.builds(result, _IDS, _RESULTS),
    st.builds(lambda i: {"jsonrpc": "2.0", "id": i, "error": {"code": -1, "message": "x"}}, _IDS),
)
_FRAMES = st.lists(
    st.tuples(st.sampled_from(["c2a", "a2c"]), st.one_of(_MESSAGES, st.binary(max_size=30)), st.integers(0, 5)),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(_FRAMES, st.booleans())
def test_any_rows_give_a_closed_tree_of_well_timed_spans(frames: list[tuple[str, Any, int]], content: bool) -> None:
    f = Frames()
    at = 0
    for direction, message, gap in frames:
        at += gap
        f.add(direction, message, at_ms=at)
    spans, points = build(f.rows, ids=ids(), content=content)
    by_id = {s.span_id: s for s in spans}
    assert len(by_id) == len(spans), "every span is handed over once"
    for s in spans:
        assert s.end_ns >= s.start_ns
        if s.parent_id is not None:
            parent = by_id[s.parent_id]
            assert parent.trace_id == s.trace_id
            assert parent.start_ns <= s.start_ns
    assert sum(s.name == "acp.connection" for s in spans) == 1
    assert all(p.value >= 0 for p in points if p.metric != "gen_ai.client.token.usage")


# -- where spans go --------------------------------------------------------------------------


def test_endpoints_append_the_signal_paths_and_honour_the_environment() -> None:
    base = endpoints("http://collector:4318/", {})
    assert base is not None and (base.traces, base.metrics) == (
        "http://collector:4318/v1/traces",
        "http://collector:4318/v1/metrics",
    )
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "https://otel.example:443/otlp"}
    got = endpoints(None, env)
    assert got is not None and got.traces == "https://otel.example:443/otlp/v1/traces"
    both = endpoints(None, {**env, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t:1/x"})
    assert both is not None and both.traces == "http://t:1/x"
    # An option wins over the environment, whole.
    over = endpoints("http://mine:4318", {**env, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t:1/x"})
    assert over is not None and over.traces == "http://mine:4318/v1/traces"
    assert endpoints(None, {}) is None


@pytest.mark.parametrize("url", ["localhost:4318", "ftp://x", "http://", "http://host:port"])
def test_a_bad_collector_address_is_one_line(url: str) -> None:
    for option, env in ((url, {}), (None, {"OTEL_EXPORTER_OTLP_ENDPOINT": url})):
        with pytest.raises(OtlpError) as caught:
            endpoints(option, env)
        assert "\n" not in str(caught.value) and url in str(caught.value)


def test_the_protocol_decides_the_signal_addresses() -> None:
    grpc = endpoints("http://collector:4317", {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})
    assert grpc is not None and (grpc.traces, grpc.metrics, grpc.protocol) == (
        "http://collector:4317",
        "http://collector:4317",
        "grpc",
    )
    mixed = endpoints(
        "http://c:4318",
        {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "http/json"},
    )
    assert mixed is not None and (mixed.traces, mixed.metrics) == ("http://c:4318", "http://c:4318/v1/metrics")
    assert (mixed.protocol, mixed.metrics_protocol) == ("grpc", "http/json")
    plain = endpoints("http://c:4318", {"OTEL_EXPORTER_OTLP_TIMEOUT": "2500"})
    assert plain is not None and (plain.protocol, plain.timeout_s) == ("http/protobuf", 2.5)


def test_grpc_without_its_exporter_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from acp_proxy.errors import UsageError
    from acp_proxy.otel.command import live_endpoints

    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.grpc", None)
    with pytest.raises(UsageError) as caught:
        live_endpoints("http://127.0.0.1:4317", content=False, no_record=False)
    assert "opentelemetry-exporter-otlp-proto-grpc" in str(caught.value) and "\n" not in str(caught.value)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")  # not needed over HTTP
    assert live_endpoints("http://127.0.0.1:4318", content=False, no_record=False) is not None


def test_recording_ids_are_the_same_for_the_same_run_and_differ_between_runs() -> None:
    f = Frames()
    handshake(f)
    a_turn_with_a_tool_and_a_permission(f)
    once, _ = build(f.rows, ids=recording_ids("run 1 at T"))
    again, _ = build(f.rows, ids=recording_ids("run 1 at T"))
    other, _ = build(f.rows, ids=recording_ids("run 2 at T"))
    key = [(s.name, s.trace_id, s.span_id, s.parent_id) for s in once]
    assert key == [(s.name, s.trace_id, s.span_id, s.parent_id) for s in again]
    assert len({s.span_id for s in once}) == len(once) and all(0 < s.span_id < 2**64 for s in once)
    assert all(0 < s.trace_id < 2**128 for s in once)
    assert not {s.span_id for s in once} & {s.span_id for s in other}
