"""End to end with the official Python SDK: its client, through `acp-proxy run`, to its agent."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from tests.peers import agent_argv, proxied, run_client, transcript, without_session

pytestmark = pytest.mark.spawns  # every test here starts processes


def frames(db: Path) -> list[dict]:
    conn = sqlite3.connect(db)
    conn.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in conn.execute("select * from frames where dir != 'stderr' order by seq")]
    finally:
        conn.close()


def test_sdk_client_sees_the_same_conversation_and_every_frame_is_recorded(tmp_path: Path) -> None:
    direct = transcript(run_client(agent_argv()))
    db = tmp_path / "rec.db"
    through = transcript(run_client(proxied(agent_argv(), db)))
    assert without_session(through) == without_session(direct)
    assert "stop: end_turn" in through

    recorded = frames(db)
    # Every line of both directions, in relay order, exactly as sent.
    kinds = [(f["dir"], f["kind"], f["method"]) for f in recorded]
    assert kinds[:4] == [
        ("c2a", "request", "initialize"),
        ("a2c", "response", kinds[1][2]),
        ("c2a", "request", "session/new"),
        ("a2c", "response", kinds[3][2]),
    ]
    assert [f["seq"] for f in recorded] == sorted(f["seq"] for f in recorded)
    prompts = [f for f in recorded if f["method"] == "session/prompt" and f["kind"] == "request"]
    assert [json.loads(f["raw"])["params"]["prompt"][0]["text"] for f in prompts] == ["hello world", "second prompt"]
    updates = [f for f in recorded if f["kind"] == "notification"]
    assert {f["update_kind"] for f in updates} == {"agent_message_chunk"}
    session = through[-1].removeprefix("session: ")
    assert {f["session_id"] for f in updates} == {session}
    for f in recorded:
        message = json.loads(f["raw"])
        assert f["rpc_id"] == (json.dumps(message["id"]) if "id" in message else None)
        assert f["terminated"] == 1 and f["decode_error"] is None
    # Ids: the client's requests are numbered from 0, and each has exactly one response.
    requests = {f["rpc_id"] for f in recorded if f["kind"] == "request" and f["dir"] == "c2a"}
    responses = [f["rpc_id"] for f in recorded if f["kind"] == "response" and f["dir"] == "a2c"]
    assert sorted(responses) == sorted(requests)


def test_bytes_recorded_equal_bytes_relayed(tmp_path: Path) -> None:
    db = tmp_path / "rec.db"
    transcript(run_client(proxied(agent_argv("--chunks", "500"), db), "--summary"))
    conn = sqlite3.connect(db)
    try:
        run = conn.execute("select bytes_a2c, frames_a2c, exit_code, status from runs").fetchone()
        total = conn.execute("select sum(size + terminated), count(*) from frames where dir = 'a2c'").fetchone()
        chunks = conn.execute("select count(*) from frames where update_kind = 'agent_message_chunk'").fetchone()
    finally:
        conn.close()
    assert (run[0], run[1]) == (total[0], total[1])
    assert chunks[0] == 2 * 500
    assert run[3] == "ended"
