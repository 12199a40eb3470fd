"""Replay: the recorded agent as a fake agent, end to end with the SDK client and in the pure core."""

from __future__ import annotations

import json
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest

from acp_proxy.replay import replayer as rp
from tests import v2_traffic as v2
from tests.conftest import PROXY, proxy_env
from tests.peers import agent_argv, expected_echo, expected_replay, proxied, run_client, session_of, transcript
from tests.record.test_tracking_e2e import converse

TIMEOUT_S = 60


def frame_rows(db: Path, run_id: int | None = None) -> list[dict[str, Any]]:
    conn = sqlite3.connect(db)
    conn.row_factory = sqlite3.Row
    try:
        run = run_id or conn.execute("select max(id) from runs").fetchone()[0]
        return [dict(r) for r in conn.execute("select * from frames where run_id = ? order by seq", [run])]
    finally:
        conn.close()


def replay_argv(db: Path, *args: str) -> list[str]:
    return [*PROXY, "replay", "--db", str(db), "--timing", "fast", *args, "last"]


def run_replay(db: Path, lines: list[dict[str, Any]], *args: str) -> subprocess.CompletedProcess[bytes]:
    """Feed ``lines`` to a replay all at once; enough for a client that never waits for answers."""
    data = b"".join(json.dumps(line).encode() + b"\n" for line in lines)
    return subprocess.run(replay_argv(db, *args), input=data, capture_output=True, timeout=TIMEOUT_S, env=proxy_env())


@pytest.fixture(scope="module")
def sdk_recording(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """The official SDK client and agent (with permission requests) recorded through the proxy."""
    db = tmp_path_factory.mktemp("sdk") / "rec.db"
    lines = transcript(run_client(proxied(agent_argv("--permission"), db)))
    assert lines[:-1] == expected_echo(permission="allow")
    return db, lines


# -- the SDK client against the fake agent ---------------------------------------------------


@pytest.mark.parametrize("timing", ["fast", "original", "4x"])
def test_sdk_client_sees_the_same_transcript_from_the_replay(
    sdk_recording: tuple[Path, list[str]], timing: str
) -> None:
    db, recorded = sdk_recording
    agent = [*PROXY, "replay", "--db", str(db), "--timing", timing, "--strict", "last"]
    replayed = transcript(run_client(agent, env=proxy_env()))
    # The recorded session id is kept, so even the session line matches.
    assert replayed == recorded


def test_replayed_frames_are_the_recorded_bytes(sdk_recording: tuple[Path, list[str]]) -> None:
    db, _ = sdk_recording
    rows = frame_rows(db, 1)
    replayer = rp.Replayer(rows, strict=True)
    sent: list[bytes] = [s.data for s in replayer.start()]
    for row in rows:
        if row["dir"] == "c2a":
            sent += [s.data for s in replayer.receive(row["raw"].encode() + b"\n")]
    assert sent == [r["raw"].encode() + b"\n" for r in rows if r["dir"] == "a2c"]
    assert replayer.finish() == []


def test_ids_are_remapped_to_the_clients(sdk_recording: tuple[Path, list[str]]) -> None:
    db, _ = sdk_recording
    rows = frame_rows(db, 1)
    replayer = rp.Replayer(rows)
    init = json.loads(next(r["raw"] for r in rows if r["method"] == "initialize" and r["kind"] == "request"))
    (answer,) = replayer.receive(json.dumps({**init, "id": "client-7"}).encode())
    message = json.loads(answer.data)
    assert message["id"] == "client-7" and message["result"]["agentInfo"]["name"] == "acp-proxy-sdk-agent"


def test_loading_the_recorded_session_replays_its_history(sdk_recording: tuple[Path, list[str]]) -> None:
    db, recorded = sdk_recording
    session = session_of(recorded)
    agent = [*PROXY, "replay", "--db", str(db), "--timing", "fast", "last"]
    result = run_client(agent, "--load", session, env=proxy_env())
    lines = transcript(result)
    # The same history the real agent replays for that session (see tests/peers.py).
    assert lines == [recorded[0], *expected_replay(permission="allow"), f"session: {session}"]
    assert "note: session/load not in the recording" in result.stderr


# -- strict and lenient on a deviating client ------------------------------------------------


def client_frames(db: Path) -> list[dict[str, Any]]:
    return [json.loads(r["raw"]) for r in frame_rows(db, 1) if r["dir"] == "c2a"]


def test_strict_answers_an_out_of_order_request_with_an_error_and_exits_1(
    sdk_recording: tuple[Path, list[str]],
) -> None:
    db, _ = sdk_recording
    init, new, prompt, *_ = client_frames(db)
    result = run_replay(db, [init, prompt, new], "--strict")
    replies = [json.loads(line) for line in result.stdout.splitlines()]
    errors = [r for r in replies if "error" in r]
    assert errors and errors[0]["id"] == prompt["id"]
    assert "expected session/new" in errors[0]["error"]["message"]
    assert result.returncode == 1
    stderr = result.stderr.decode()
    assert all(line.startswith("acp-proxy:") for line in stderr.splitlines())
    assert "replay failed with" in stderr


def test_strict_rejects_an_unknown_method_and_lenient_continues(
    sdk_recording: tuple[Path, list[str]],
) -> None:
    db, _ = sdk_recording
    init, new, *_ = client_frames(db)
    odd = {"jsonrpc": "2.0", "id": 99, "method": "_vendor/unheard_of", "params": {}}
    strict = run_replay(db, [init, odd, new], "--strict")
    assert strict.returncode == 1
    strict_replies = {r["id"]: r for r in map(json.loads, strict.stdout.splitlines())}
    assert "_vendor/unheard_of" in strict_replies[99]["error"]["message"]

    lenient = run_replay(db, [init, odd, new], "--lenient")
    assert lenient.returncode == 0, lenient.stderr
    replies = {r["id"]: r for r in map(json.loads, lenient.stdout.splitlines()) if "id" in r}
    assert "error" in replies[99]  # nothing recorded to answer it with
    assert "sessionId" in replies[new["id"]]["result"]  # and the conversation goes on
    assert "acp-proxy: replay: unexpected _vendor/unheard_of" in lenient.stderr.decode()


def test_lenient_plays_a_different_prompt_and_strict_does_not(sdk_recording: tuple[Path, list[str]]) -> None:
    db, _ = sdk_recording
    agent = [*PROXY, "replay", "--db", str(db), "--timing", "fast", "--lenient", "last"]
    lines = transcript(run_client(agent, "--prompt", "something else", env=proxy_env()))
    assert lines[1] == "prompt: something else" and "stop: end_turn" in lines
    strict = [*PROXY, "replay", "--db", str(db), "--timing", "fast", "--strict", "last"]
    result = run_client(strict, "--prompt", "something else", env=proxy_env())
    assert result.returncode == 1 and "params differ" in result.stderr


def test_stdout_carries_only_protocol(sdk_recording: tuple[Path, list[str]]) -> None:
    db, _ = sdk_recording
    result = run_replay(db, [{"jsonrpc": "2.0", "id": 1, "method": "nope"}], "--lenient")
    for line in result.stdout.splitlines():
        assert json.loads(line)["jsonrpc"] == "2.0"
    assert result.stderr and all(ln.startswith("acp-proxy:") for ln in result.stderr.decode().splitlines())


def test_bad_timing_is_a_usage_error(sdk_recording: tuple[Path, list[str]]) -> None:
    db, _ = sdk_recording
    result = subprocess.run(
        [*PROXY, "replay", "--db", str(db), "--timing", "soon", "last"],
        input=b"",
        capture_output=True,
        timeout=TIMEOUT_S,
        env=proxy_env(),
    )
    assert result.returncode == 2 and b"timing" in result.stderr


def test_parse_timing() -> None:
    assert [rp.parse_timing(t) for t in ("original", "fast", "2x", "0.5x", "3")] == [1.0, 0.0, 2.0, 0.5, 3.0]
    with pytest.raises(ValueError):
        rp.parse_timing("-1x")


# -- v2: history replay without notices -------------------------------------------------------


def update_of(data: bytes) -> dict[str, Any] | None:
    message = json.loads(data)
    return (message.get("params") or {}).get("update") if message.get("method") == "session/update" else None


def play_v2_until_resume(replayer: rp.Replayer) -> None:
    for frame in (v2.INITIALIZE, v2.NEW_SESSION, v2.PROMPT, v2.PERMISSION_ANSWER, v2.PROMPT_2, v2.CANCEL):
        replayer.receive(json.dumps(frame).encode())


@pytest.mark.spawns
def test_v2_resume_replays_every_history_update_but_the_notice(tmp_path: Path) -> None:
    c = converse(tmp_path)
    assert c.proc.returncode == 0
    rows = frame_rows(c.db)
    recorded_history = [json.loads(r["raw"])["params"]["update"] for r in rows if r["replay"]]
    assert any(u["sessionUpdate"] == "notice" for u in recorded_history)

    replayer = rp.Replayer(rows, strict=True)
    play_v2_until_resume(replayer)
    sends = replayer.receive(json.dumps(v2.RESUME).encode())
    updates = [u for u in (update_of(s.data) for s in sends) if u is not None]
    assert updates == [u for u in recorded_history if u["sessionUpdate"] != "notice"]
    assert [u.get("messageId") for u in updates if "messageId" in u] == ["msg_user_8f7a1", "msg_agent_c42b9"]
    assert json.loads(sends[-1].data) == {"jsonrpc": "2.0", "id": v2.RESUME["id"], "result": {}}
    assert replayer.finish() == []


@pytest.mark.spawns
def test_v2_live_notices_are_still_sent_live(tmp_path: Path) -> None:
    rows = frame_rows(converse(tmp_path).db)
    replayer = rp.Replayer(rows)
    replayer.receive(json.dumps(v2.INITIALIZE).encode())
    replayer.receive(json.dumps(v2.NEW_SESSION).encode())
    replayer.receive(json.dumps(v2.PROMPT).encode())
    after = replayer.receive(json.dumps(v2.PERMISSION_ANSWER).encode())
    kinds = [u["sessionUpdate"] for u in (update_of(s.data) for s in after) if u is not None]
    assert "notice" in kinds and kinds[-1] == "state_update"


@pytest.mark.spawns
def test_v2_resume_of_a_session_never_resumed_rebuilds_history_without_notices(tmp_path: Path) -> None:
    rows = frame_rows(converse(tmp_path).db)
    resume_seq = next(r["seq"] for r in rows if r["method"] == "session/resume")
    live_rows = [r for r in rows if r["seq"] < resume_seq]
    replayer = rp.Replayer(live_rows)
    play_v2_until_resume(replayer)
    sends = replayer.receive(json.dumps(v2.RESUME).encode())
    updates = [u for u in (update_of(s.data) for s in sends) if u is not None]
    live_updates = [json.loads(r["raw"])["params"]["update"] for r in live_rows if r["update_kind"]]
    assert updates == [u for u in live_updates if u["sessionUpdate"] != "notice"]
    assert {"msg_user_8f7a1", "msg_agent_c42b9", "msg_user_2", "msg_agent_2"} <= {u.get("messageId") for u in updates}
    assert json.loads(sends[-1].data)["id"] == v2.RESUME["id"]
    assert replayer.notes and replayer.deviations == []


@pytest.mark.spawns
def test_v2_replay_through_the_command(tmp_path: Path) -> None:
    """The v2 client frames fed to `acp-proxy replay`: the same agent frames, minus the replayed notice."""
    c = converse(tmp_path)
    frames = [
        v2.INITIALIZE,
        v2.NEW_SESSION,
        v2.PROMPT,
        v2.PERMISSION_ANSWER,
        v2.PROMPT_2,
        v2.CANCEL,
        v2.RESUME,
    ]
    result = run_replay(c.db, frames, "--strict")
    assert result.returncode == 0, result.stderr
    replayed = [json.loads(line) for line in result.stdout.splitlines()]
    notice_at = [
        i
        for i, m in enumerate(c.received)
        if (m.get("params") or {}).get("update", {}).get("sessionUpdate") == "notice"
    ]
    assert len(notice_at) == 2  # the live one and the one the agent wrongly replayed
    assert replayed == [m for i, m in enumerate(c.received) if i != notice_at[1]]


# -- diff ---------------------------------------------------------------------------------------


def run_diff(db: Path, left: str, right: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*PROXY, "diff", "--db", str(db), *args, left, right],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        env=proxy_env(),
    )


@pytest.mark.spawns
def test_diff_of_two_recordings_of_one_conversation_shows_no_difference(tmp_path: Path) -> None:
    db = tmp_path / "rec.db"
    for _ in range(2):
        transcript(run_client(proxied(agent_argv("--permission"), db)))
    result = run_diff(db, "1", "2")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no difference in 2 turn(s)" in result.stderr
    assert "hello world" in result.stdout and "Write notes.txt [edit] completed" in result.stdout
    data = json.loads(run_diff(db, "1", "2", "--json").stdout)
    assert data["differ"] is False and [t["differs"] for t in data["turns"]] == [[], []]
    assert data["turns"][0]["left"]["permissions"] == ["allow-once"]


@pytest.mark.spawns
def test_diff_shows_a_changed_agent_and_exits_1(tmp_path: Path) -> None:
    db = tmp_path / "rec.db"
    transcript(run_client(proxied(agent_argv("--permission"), db)))
    transcript(run_client(proxied(agent_argv(), db), "--prompt", "hello world", "--prompt", "changed"))
    result = run_diff(db, "1", "2", "--json")
    assert result.returncode == 1
    turns = json.loads(result.stdout)["turns"]
    assert turns[0]["differs"] == ["tool_calls", "permissions"]
    assert turns[1]["differs"] == ["prompt", "agent", "tool_calls", "permissions"]
    assert turns[1]["right"]["agent"] == "Client sent:changed"
    plain = run_diff(db, "1", "2")
    assert plain.returncode == 1 and "differs: tool_calls, permissions" in plain.stdout


@pytest.mark.spawns
def test_diff_of_a_recording_and_its_replay_shows_no_difference(tmp_path: Path) -> None:
    """Record the SDK client talking to the fake agent: the replay reproduces the conversation."""
    db = tmp_path / "rec.db"
    recorded = transcript(run_client(proxied(agent_argv("--permission"), db)))
    replay = [*PROXY, "replay", "--db", str(db), "--timing", "fast", "--strict", "1"]
    assert transcript(run_client(proxied(replay, db), env=proxy_env())) == recorded
    result = run_diff(db, "1", "last")
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.spawns
def test_diff_reports_a_missing_turn(tmp_path: Path) -> None:
    db = tmp_path / "rec.db"
    transcript(run_client(proxied(agent_argv(), db)))
    transcript(run_client(proxied(agent_argv(), db), "--prompt", "hello world"))
    turns = json.loads(run_diff(db, "1", "2", "--json").stdout)["turns"]
    assert [t["differs"] for t in turns] == [[], ["missing"]] and turns[1]["right"] is None
