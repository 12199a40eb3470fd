"""Every door on a remote recording: the SDK's WebSocket and HTTP clients talk to its example server
through ``acp-proxy serve``; then ``show``, ``check``, ``stats``, ``replay`` (as a fake agent,
driven by the SDK's stdio client), ``diff`` of the two remote runs, the MCP server (the MCP SDK's
client) and OTLP export (a real receiver) read that database, and what they say is asserted."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import PROXY, proxy_env, run_proxy
from tests.relay.remote.conftest import sdk_client, start_serve

pytest.importorskip("hypercorn", reason="serve needs the remote extra (hypercorn)")
pytestmark = pytest.mark.spawns

PROMPT = "hello through the doors"
ECHO = f"echo: {PROMPT}"


@pytest.fixture(scope="module")
def remote_db(upstream: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A database with two remote runs of the same conversation: 1 over WebSocket, 2 over HTTP."""
    db = tmp_path_factory.mktemp("doors") / "remote.db"
    server = start_serve("--upstream", upstream, "--db", str(db))
    try:
        ws = sdk_client("ws", server.endpoint("ws"), PROMPT)
        http = sdk_client("http", server.url, PROMPT)
    finally:
        said = server.stop()
    assert f"<< {ECHO}" in ws and f"<< {ECHO}" in http, (ws, http)
    assert "Traceback" not in said
    yield db


def transports(db: Path) -> list[str]:
    with sqlite3.connect(db) as conn:
        return [json.loads(options)["transport"] for (options,) in conn.execute("select options from runs order by id")]


def proxy(*args: str) -> str:
    done = run_proxy(list(args), env=proxy_env())
    assert done.returncode == 0, done.stderr
    return done.stdout.decode()


def test_show_tells_the_remote_conversation(remote_db: Path) -> None:
    assert transports(remote_db) == ["websocket", "http"]
    for ref in ("1", "2"):
        text = proxy("show", "--db", str(remote_db), ref)
        assert PROMPT in text and ECHO in text and "end_turn" in text


def test_check_finds_the_remote_runs_conformant(remote_db: Path) -> None:
    for ref in ("1", "2"):
        done = run_proxy(["check", "--db", str(remote_db), ref], env=proxy_env())
        assert done.returncode == 0, done.stdout.decode() + done.stderr.decode()
        assert done.stdout.decode().strip() == f"no findings for run {ref}"
        # It read the whole remote conversation: the seven messages of CONVERSATION.
        assert "checked 7 frames" in done.stderr.decode()


def test_stats_counts_the_remote_messages(remote_db: Path) -> None:
    stats = json.loads(proxy("stats", "--db", str(remote_db), "--json", "1"))
    assert [(m["method"], m["count"], m["errors"]) for m in stats["latency"]] == [
        ("initialize", 1, 0),
        ("session/new", 1, 0),
        ("session/prompt", 1, 0),
    ]
    (turn,) = stats["turns"]
    assert (turn["stop_reason"], turn["status"], turn["chunks"]) == ("end_turn", "ended", 1)


def test_diff_of_the_websocket_and_the_http_run_finds_the_same_conversation(remote_db: Path) -> None:
    done = run_proxy(["diff", "--db", str(remote_db), "--json", "1", "2"], env=proxy_env())
    assert done.returncode == 0, done.stdout.decode() + done.stderr.decode()
    report = json.loads(done.stdout)
    assert report["differ"] is False and report["connection"]["differs"] == []
    (turn,) = report["turns"]
    assert turn["left"]["agent"] == turn["right"]["agent"] == ECHO
    assert turn["left"]["prompt"] == turn["right"]["prompt"] == PROMPT


def test_replay_serves_the_remote_agent_to_the_sdks_stdio_client(remote_db: Path) -> None:
    from tests.peers import run_client, transcript

    fake = [*PROXY, "replay", "--db", str(remote_db), "1", "--timing", "fast"]
    lines = transcript(run_client(fake, "--prompt", PROMPT))
    assert any(ECHO in line for line in lines), lines


def test_the_mcp_server_shows_the_remote_conversation(remote_db: Path, tmp_path: Path) -> None:
    pytest.importorskip("mcp", reason="the MCP server needs the mcp extra")
    from tests.mcp.test_mcp import session

    _, answers = session(remote_db, [("show", {"ref": "1"}), ("list_runs", {})], errlog=tmp_path / "mcp.err")
    shown, listed = answers
    assert not shown.error and ECHO in shown.text
    assert not listed.error and len(listed.json()["items"]) == 2


def test_otlp_export_of_a_remote_run_sends_its_turn(remote_db: Path) -> None:
    pytest.importorskip("opentelemetry", reason="OTLP export needs the otel extra")
    from tests.otlp_receiver import receiver

    with receiver() as got:
        done = run_proxy(
            ["export", "--db", str(remote_db), "1", "--format", "otlp", "--endpoint", got.url], env=proxy_env()
        )
        assert done.returncode == 0, done.stderr
        assert got.wait_for(lambda r: len(r.spans) > 0, 30)
    names = [span.name for span in got.spans]
    assert any(name.startswith("invoke_agent") for name in names), names
    assert "acp.connection" in names and "session/prompt" in names
