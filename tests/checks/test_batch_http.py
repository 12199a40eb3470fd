"""A batch POSTed over Streamable HTTP and answered 501 (the remote-transport RFD: "Batch
JSON-RPC requests return 501"; the Python SDK's server answers {"error": "..."}) is one
``batch/http-501`` finding (info: the RFD documents the 501, no MUST is broken): in process on
rows shaped as ``serve`` records them, and end to end through ``acp-proxy serve`` in front of
the real SDK HTTP server."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from acp_proxy.checks.catalogue import RULES
from acp_proxy.checks.rules import check
from acp_proxy.protocol import transports
from tests.checks.test_checks import BATCH, a2c, res, v2_start
from tests.conftest import PROXY, proxy_env
from tests.read.test_agreement import record, rows_of

SDK_501 = {"error": "Batch requests are not supported"}


def _served(trace: list[tuple[str, Any]], status: int | None) -> list[dict[str, Any]]:
    """The rows of ``trace`` as serve records an HTTP connection: its last message is the body
    of an answer with ``status`` (None: a JSON-RPC message like any)."""
    records, _ = record([(d, m, True) for d, m in trace], ended=True)
    rows = rows_of(records)
    for row in rows:
        row.update(transport="http", connection="c1", stream="post")
    if status is not None:
        rows[-1]["note"] = transports.http_answer_note(status, "POST", "application/json")
    return rows


def test_the_note_serve_writes_is_the_status_the_check_reads() -> None:
    assert transports.http_status(transports.http_answer_note(501, "POST", "application/json")) == 501
    assert transports.http_status(transports.http_answer_note(404, "GET", "text/html")) == 404
    assert transports.http_status("HTTP 501 answer to a POST; response to no request") == 501
    assert transports.http_answer_note(200, "POST", "application/json") is None
    assert [transports.http_status(n) for n in (None, "", "a note", 501, "HTTP 5011 answer to a POST")] == [None] * 5


def test_a_batch_answered_501_over_http_is_one_finding_citing_the_transport_rfd() -> None:
    found = list(check(_served([*v2_start(), BATCH, a2c(SDK_501)], 501)))
    refused = [f for f in found if f.rule_id.startswith("batch/")]
    assert [(f.rule_id, f.severity, f.seq) for f in refused] == [("batch/http-501", "info", 9)]
    assert "HTTP 501" in refused[0].message and "seq 5" in refused[0].message
    assert refused[0].spec == RULES["batch/http-501"].spec
    assert refused[0].spec.startswith("rfds/streamable-http-websocket-transport.mdx#")
    # Its requests were never answered: said as for any request.
    assert {f.rule_id for f in found} == {"batch/http-501", "jsonrpc/unanswered"}


@pytest.mark.parametrize(
    ("trace", "status"),
    [
        ([*v2_start(), BATCH, a2c(SDK_501)], 400),  # another status: not the batch's refusal
        ([*v2_start(), a2c(SDK_501)], 501),  # a 501 with no batch before it
        ([*v2_start(), BATCH, a2c([res(7, {"sessions": []}), res(8, {"sessions": []})]), a2c(SDK_501)], 501),
    ],
    ids=["status-400", "no-batch", "batch-answered"],
)
def test_no_batch_finding_without_a_501_to_an_unanswered_batch(trace: list[Any], status: int) -> None:
    assert not [f for f in check(_served(trace, status)) if f.rule_id == "batch/http-501"]


TIMEOUT = 60


@pytest.fixture
def sdk_server() -> Iterator[str]:
    """The SDK's own HTTP server (tests/relay/remote/sdk_server.py): its address."""
    from tests.relay.remote.conftest import peer

    with peer("sdk_server.py", lifetime=300) as (_, url):
        yield url


@pytest.mark.spawns
def test_serve_records_the_sdk_servers_501_and_check_says_batches_do_not_cross(sdk_server: str, tmp_path: Path) -> None:
    pytest.importorskip("trio_websocket", reason="serve needs the remote extra (trio-websocket)")
    httpx = pytest.importorskip("httpx", reason="the SDK's HTTP server needs agent-client-protocol[http]")
    from tests.relay.remote.conftest import start_serve

    db_path = tmp_path / "rec.db"
    server = start_serve("--upstream", sdk_server, "--db", str(db_path))
    try:
        with httpx.Client(timeout=TIMEOUT) as client:
            json_body = {"content-type": "application/json"}
            init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}}
            answer = client.post(server.url, content=json.dumps(init).encode(), headers=json_body)
            connection = answer.headers["acp-connection-id"]
            batch: list[dict[str, Any]] = [
                {"jsonrpc": "2.0", "id": n, "method": "session/list", "params": {}} for n in (1, 2)
            ]
            answer = client.post(
                server.url,
                content=json.dumps(batch).encode(),
                headers={**json_body, "acp-connection-id": connection},
            )
        assert answer.status_code == 501, answer.text
        server.stop()
    finally:
        server.kill()
    done = subprocess.run(
        [*PROXY, "check", "all", "--db", str(db_path), "--json"], capture_output=True, timeout=TIMEOUT, env=proxy_env()
    )
    assert done.returncode in (0, 1), done.stderr
    report = json.loads(done.stdout)
    findings = report["findings"] if isinstance(report, dict) else report
    refused = [f for f in findings if f["rule_id"] == "batch/http-501"]
    assert len(refused) == 1 and refused[0]["severity"] == "info", findings
    assert "HTTP 501" in refused[0]["message"]
    assert not [f for f in findings if f["rule_id"] in ("batch/ignored", "batch/rejected", "jsonrpc/not-json")], (
        findings
    )
