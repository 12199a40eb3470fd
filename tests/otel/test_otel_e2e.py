"""OpenTelemetry export end to end: a real OTLP/HTTP receiver in the test gets the span tree of a
real SDK recording, exported after the fact (``export --format otlp``) and live (``run --otlp``);
a collector that hangs or refuses costs spans, counted on the run row, and never time.
"""

from __future__ import annotations

import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from acp_proxy.cli.commands import cli
from acp_proxy.otel.spans import build
from tests.conftest import proxy_env, run_proxy
from tests.otlp_receiver import ReceivedSpan, receiver, refused_port
from tests.peers import agent_argv, peer_env, proxied, run_client, session_of, transcript

CLIENT_KIND, INTERNAL_KIND = 3, 1  # OTLP's SpanKind numbers
ERROR_STATUS = 2


def run_rows(db: Path, sql: str, *params: Any) -> list[dict[str, Any]]:
    conn = sqlite3.connect(db)
    conn.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in conn.execute(sql, params)]
    finally:
        conn.close()


def tree(spans: list[ReceivedSpan]) -> dict[str, ReceivedSpan]:
    return {s.span_id: s for s in spans}


def parent(spans: list[ReceivedSpan], span: ReceivedSpan) -> ReceivedSpan | None:
    return tree(spans).get(span.parent_id)


def shape(spans: list[ReceivedSpan]) -> list[tuple[Any, ...]]:
    """Everything about a trace but its ids: names, kinds, times, attributes, events, status, and
    where each span hangs (its parent's name)."""
    by_id = tree(spans)
    return sorted(
        (
            s.name,
            s.kind,
            s.start_ns,
            s.end_ns,
            tuple(sorted((k, repr(v)) for k, v in s.attributes.items())),
            tuple((name, ts, tuple(sorted(a.items()))) for name, ts, a in s.events),
            s.status_code,
            by_id[s.parent_id].name if s.parent_id else None,
            len(s.links),
        )
        for s in spans
    )


def wait_for_counts(db: Path, run_id: int, timeout: float = 90) -> dict[str, Any]:
    """The run row once its exporter has written what it delivered (poll with a deadline)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        (row,) = run_rows(db, "select * from runs where id = ?", run_id)
        if row["otlp_spans"] is not None:
            return row
        time.sleep(0.1)
    raise AssertionError(f"the exporter of run {run_id} wrote nothing in {timeout} s")


def test_an_exported_recording_arrives_as_a_tree_of_turns_tools_and_calls(
    sdk_recording: tuple[Path, str],
) -> None:
    db, session = sdk_recording
    with receiver() as got:
        result = run_proxy(
            ["export", "--db", str(db), session, "--format", "otlp", "--endpoint", got.url],
            env=proxy_env(OTEL_SERVICE_NAME="my-editor"),
        )
        assert result.returncode == 0, result.stderr
        assert b"sent 14 spans of session" in result.stderr and result.stdout == b""
        assert got.wait_for(lambda r: "gen_ai.client.operation.duration" in r.metrics, 30)
    spans = got.spans
    assert {s.resource["service.name"] for s in spans} == {"my-editor"}
    turns = sorted((s for s in spans if s.name == "invoke_agent acp-proxy-sdk-agent"), key=lambda s: s.start_ns)
    prompts = run_rows(db, "select * from frames where method = 'session/prompt' and kind = 'request' order by run_id")
    assert [t.start_ns for t in turns] == [p["ts_ns"] for p in prompts]
    for turn, run_id in zip(turns, (1, 2), strict=True):
        assert turn.parent_id == "" and turn.kind == CLIENT_KIND and turn.status_code != ERROR_STATUS
        assert turn.attributes["gen_ai.operation.name"] == "invoke_agent"
        assert turn.attributes["gen_ai.conversation.id"] == session
        assert (turn.attributes["gen_ai.agent.name"], turn.attributes["gen_ai.agent.version"]) == (
            "acp-proxy-sdk-agent",
            "0.1.0",
        )
        assert turn.attributes["gen_ai.response.finish_reasons"] == ["end_turn"]
        assert turn.attributes["acp.run.id"] == run_id
        children = [s for s in spans if s.parent_id == turn.span_id]
        tool = next(s for s in children if s.name == "execute_tool Write notes.txt")
        assert tool.kind == INTERNAL_KIND and tool.trace_id == turn.trace_id
        assert tool.attributes["gen_ai.tool.call.id"] == f"call_{run_id}"
        assert (tool.attributes["acp.tool.kind"], tool.attributes["acp.tool.status"]) == ("edit", "completed")
        (ask,) = [s for s in spans if s.parent_id == tool.span_id]
        assert ask.name == "session/request_permission" and ask.attributes["acp.permission.outcome"] == "selected"
        prompt = next(s for s in children if s.name == "session/prompt")
        assert prompt.attributes["rpc.system.name"] == "jsonrpc" and prompt.attributes["rpc.method"] == "session/prompt"
        assert prompt.attributes["jsonrpc.request.id"] == "2"
        (turn_row,) = run_rows(db, "select * from turns where run_id = ?", run_id)
        # One truth: first output as the turns table has it.
        assert turn.attributes["gen_ai.response.time_to_first_chunk"] == pytest.approx(
            (turn_row["first_output_ns"] - turn_row["start_ns"]) / 1e9
        )
        assert turn.end_ns == turn_row["end_ns"]
    # The set-up calls hang from their run's connection span; no session's are left out.
    connections = [s for s in spans if s.name == "acp.connection"]
    assert len(connections) == 2 and all(s.parent_id == "" for s in connections)
    for name, count in (("initialize", 2), ("session/new", 1), ("session/load", 1)):
        calls = [s for s in spans if s.name == name]
        assert len(calls) == count and all(parent(spans, call) in connections for call in calls)
    assert len({s.span_id for s in spans}) == len(spans) == 14
    durations = got.metrics["rpc.client.call.duration"]
    assert sum(count for _, count, _ in durations) == 8  # every answered request of both runs


def live_run(
    tmp_path: Path, url: str | None, *, db_name: str = "live.db", from_env: bool = False
) -> tuple[Path, float]:
    """The SDK pair through `run --otlp URL` (``from_env``: `--otlp` alone, the URL in
    OTEL_EXPORTER_OTLP_ENDPOINT); the database and how long the client took."""
    db = tmp_path / db_name
    agent = agent_argv("--permission", "--state-dir", str(tmp_path / "state"))
    extra = ("--otlp",) if from_env else ("--otlp", url) if url else ()
    env = peer_env(OTEL_EXPORTER_OTLP_ENDPOINT=url) if from_env and url else peer_env()
    started = time.monotonic()
    lines = transcript(run_client(proxied(agent, db, *extra), "--prompt", "hello", "--prompt", "again", env=env))
    took = time.monotonic() - started
    assert session_of(lines)
    return db, took


@pytest.mark.spawns
def test_a_live_trace_is_the_trace_an_export_of_the_run_sends(tmp_path: Path) -> None:
    with receiver() as live:
        # A "#" in the file name: the exporter must open the file it names, not "live".
        db, _ = live_run(tmp_path, live.url, db_name="live#1.db", from_env=True)
        row = wait_for_counts(db, 1)
        assert not (tmp_path / "live").exists()
        assert (row["otlp_spans"], row["otlp_spans_lost"], row["otlp_error"]) == (len(live.spans), 0, None)
    with receiver() as exported:
        result = run_proxy(["export", "--db", str(db), "1", "--format", "otlp", "--endpoint", exported.url])
        assert result.returncode == 0, result.stderr
    names = [s.name for s in live.spans]
    assert names.count("invoke_agent acp-proxy-sdk-agent") == 2 and names.count("execute_tool Write notes.txt") == 2
    assert shape(live.spans) == shape(exported.spans)
    # The same ids too: exporting a run that was followed live adds no second copy to a backend.
    assert sorted((s.trace_id, s.span_id, s.parent_id) for s in live.spans) == sorted(
        (s.trace_id, s.span_id, s.parent_id) for s in exported.spans
    )


def test_metrics_a_collector_refuses_live_are_counted_on_the_run(tmp_path: Path) -> None:
    with receiver("no_metrics") as phoenix:  # Arize Phoenix answers /v1/metrics with 405
        db, _ = live_run(tmp_path, phoenix.url)
        row = wait_for_counts(db, 1)
    assert (row["otlp_spans"], row["otlp_spans_lost"]) == (len(phoenix.spans), 0) and row["otlp_spans"] > 0
    assert row["otlp_error"] and "metric points could not be sent" in row["otlp_error"]
    assert "405" in row["otlp_error"] and not phoenix.metrics


def turn_durations(db: Path) -> list[int]:
    return [t["end_ns"] - t["start_ns"] for t in run_rows(db, "select * from turns order by id")]


@pytest.mark.spawns
@pytest.mark.parametrize("collector", ["hangs", "refuses"])
def test_a_collector_that_hangs_or_refuses_costs_spans_not_time(tmp_path: Path, collector: str) -> None:
    _, baseline = live_run(tmp_path, None, db_name="baseline.db")
    baseline_turns = turn_durations(tmp_path / "baseline.db")
    with receiver("hang") as stuck:
        url = stuck.url if collector == "hangs" else refused_port()
        db, took = live_run(tmp_path, url)
        # The proxy neither waits for the collector nor keeps the client's pipes open for it: a
        # relay held up by a 5 s export timeout, or by the exporter's 10 s flush, would show here.
        assert took < baseline + 6.0, (took, baseline)
        assert all(t < b + 2_000_000_000 for t, b in zip(turn_durations(db), baseline_turns, strict=True))
        row = wait_for_counts(db, 1)
        if collector == "hangs":
            assert stuck.posts >= 1  # it did try
    frames = run_rows(db, "select * from frames where run_id = 1 and dir != 'stderr' order by seq")
    built, _ = build(frames, run_id=1)
    assert (row["otlp_spans"], row["otlp_spans_lost"]) == (0, len(built))
    assert row["otlp_error"]
    # Nothing of the conversation was lost: every frame is recorded.
    assert row["not_recorded"] == 0 and row["frames"] == len(run_rows(db, "select seq from frames where run_id = 1"))


# -- options and missing extras: one line -------------------------------------------------------


@pytest.mark.spawns
@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["run", "--otlp", "ftp://collector", "--", "true"], "http(s) address"),
        (["run", "--otlp", "http://[::1", "--", "true"], "'http://[::1' is not an address"),
        (["run", "--otlp-content", "--", "true"], "give --otlp URL too"),
        (["run", "--no-record", "--otlp", "http://127.0.0.1:4318", "--", "true"], "cannot be used with --no-record"),
        (["run", "--otlp", "--", "true"], "OTEL_EXPORTER_OTLP_ENDPOINT"),
        (["export", "last", "--endpoint", "http://127.0.0.1:4318"], "go with --format otlp"),
        (["export", "last", "--format", "otlp"], "needs --endpoint"),
    ],
)
def test_otlp_option_mistakes_are_one_line(tmp_path: Path, args: list[str], expected: str) -> None:
    result = run_proxy([*args[:1], "--db", str(tmp_path / "rec.db"), *args[1:]], timeout=30)
    assert result.returncode == 2, result.stderr
    text = result.stderr.decode()
    assert expected in text and "Traceback" not in text and result.stdout == b""
    assert text.count("\n") == 1 and text.startswith("acp-proxy: "), text
    assert not (tmp_path / "rec.db").exists()  # the agent never ran


def test_missing_otel_extra_is_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in [m for m in sys.modules if m == "opentelemetry" or m.startswith("opentelemetry.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "opentelemetry", None)  # import opentelemetry -> ImportError
    runner = CliRunner()
    live = runner.invoke(cli, ["run", "--db", str(tmp_path / "r.db"), "--otlp", "http://127.0.0.1:1", "--", "true"])
    assert live.exit_code == 2 and "pip install 'acp-proxy[otel]'" in live.output
    assert not (tmp_path / "r.db").exists()
    (tmp_path / "r.db").touch()
    export = runner.invoke(
        cli, ["export", "--db", str(tmp_path / "r.db"), "1", "--format", "otlp", "--endpoint", "http://127.0.0.1:1"]
    )
    assert export.exit_code == 2 and "pip install 'acp-proxy[otel]'" in export.stderr
    assert len(export.stderr.strip().splitlines()) == 1
    assert export.exception is None or isinstance(export.exception, SystemExit)


def test_the_receiver_decodes_what_the_sdk_sends(sdk_recording: tuple[Path, str]) -> None:
    """The receiver is real: a span the SDK posts comes back with its attributes."""
    from acp_proxy.otel.endpoints import endpoints
    from acp_proxy.otel.exporter import Exporter
    from acp_proxy.otel.spans import Span

    with receiver() as got:
        where = endpoints(got.url, {})
        assert where is not None
        exporter = Exporter(where)
        exporter.add([Span("x", 7, 9, None, "client", 10, 20, {"a": 1, "b": ["c"]})])
        exporter.close(10)
        assert exporter.sent == 1 and got.wait_for(lambda r: r.spans, 5)
    (span,) = got.spans
    assert (span.name, span.trace_id, span.span_id, span.start_ns, span.end_ns) == (
        "x",
        f"{7:032x}",
        f"{9:016x}",
        10,
        20,
    )
    assert span.attributes == {"a": 1, "b": ["c"]} and span.kind == CLIENT_KIND
