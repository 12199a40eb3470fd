"""Replay reports like a test runner: one deviation per divergence, a summary line and an exit
status however the client ends it (stdin EOF, SIGTERM, SIGINT), a different permission answer
named (and, with --follow-client, the recording's branch for it), batch lines as recorded."""

from __future__ import annotations

import json
import signal
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from acp_proxy.record.importers import Record, write_run
from acp_proxy.replay import replayer as rp
from acp_proxy.replay.client import ClientReplayer
from tests.conftest import PROXY, proxy_env, start_proxy, wait_for_output, watchdog
from tests.peers import agent_argv, proxied, run_client, transcript

TIMEOUT_S = 60


def frame_rows(db: Path, run_id: int) -> list[dict[str, Any]]:
    conn = sqlite3.connect(db)
    conn.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in conn.execute("select * from frames where run_id = ? order by seq", [run_id])]
    finally:
        conn.close()


@pytest.fixture(scope="module")
def recordings(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Run 1: the SDK pair, permissions allowed; run 2: the same, permissions denied."""
    db = tmp_path_factory.mktemp("report") / "rec.db"
    transcript(run_client(proxied(agent_argv("--permission"), db)))
    transcript(run_client(proxied(agent_argv("--permission"), db), "--deny"))
    return db


def client_lines(db: Path, run_id: int) -> list[bytes]:
    return [r["raw"].encode() for r in frame_rows(db, run_id) if r["dir"] == "c2a"]


# -- how it ends ----------------------------------------------------------------------------------


@pytest.mark.parametrize("ending", ["EOF", "SIGTERM", "SIGINT"])
@pytest.mark.parametrize("deviate", [False, True])
def test_every_ending_gives_the_summary_and_the_verdict(recordings: Path, ending: str, deviate: bool) -> None:
    proc = start_proxy(["replay", "--db", str(recordings), "--timing", "fast", "--strict", "1"])
    timer = watchdog(proc, TIMEOUT_S)
    try:
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        lines = client_lines(recordings, 1)
        last = [r["raw"].encode() for r in frame_rows(recordings, 1) if r["dir"] == "a2c"][-1]
        if deviate:
            proc.stdin.write(b'{"jsonrpc":"2.0","id":77,"method":"_vendor/odd","params":{}}\n')
        proc.stdin.write(b"".join(line + b"\n" for line in lines))
        proc.stdin.flush()
        wait_for_output(proc.stdout, last, TIMEOUT_S)  # the whole recording played; still reading
        if ending == "EOF":
            proc.stdin.close()
        else:
            proc.send_signal(getattr(signal, ending))
        status = proc.wait(timeout=TIMEOUT_S)
        said_lines = proc.stderr.read().decode().splitlines()
    finally:
        timer.cancel()
    said = "stdin closed" if ending == "EOF" else f"ended by {ending}"
    n = len(lines) + deviate
    lines = said_lines
    assert all(line.startswith("acp-proxy: ") for line in lines), lines
    if deviate:
        assert status == 1
        assert (
            lines[-1]
            == f"acp-proxy: replay failed with 1 deviation(s) from the recording: {n} client message(s), {said}"
        )
        assert len(lines) == 2  # the deviation and the summary: what followed is not counted again
    else:
        assert status == 0
        assert lines == [f"acp-proxy: replay passed: {n} client message(s), {said}, no deviation from the recording"]


# -- one deviation per divergence -----------------------------------------------------------------


def test_one_changed_prompt_is_one_deviation(recordings: Path) -> None:
    agent = [*PROXY, "replay", "--db", str(recordings), "--timing", "fast", "--strict", "1"]
    result = run_client(agent, "--prompt", "changed", "--prompt", "second prompt", env=proxy_env())
    assert result.returncode == 1
    replay_lines = [line for line in result.stderr.splitlines() if line.startswith("acp-proxy: replay")]
    assert len(replay_lines) == 2, replay_lines  # the deviation, the summary
    assert "session/prompt params differ" in replay_lines[0] and "changed" in replay_lines[0]
    assert replay_lines[1].startswith("acp-proxy: replay failed with 1 deviation(s)")


def test_a_strict_client_that_carries_on_after_a_refused_request_is_judged_on_the_rest(recordings: Path) -> None:
    lines = client_lines(recordings, 1)
    prompt = json.loads(lines[2])
    prompt["params"]["prompt"][0]["text"] = "changed"
    replayer = rp.Replayer(frame_rows(recordings, 1), strict=True)
    for line in [lines[0], lines[1], json.dumps(prompt).encode()]:
        replayer.receive(line)
    assert len(replayer.finish()) == 1  # not also "never sent" for the prompt it stood for


# -- a different answer to the agent's request -----------------------------------------------------


def test_a_different_permission_answer_is_named(recordings: Path) -> None:
    agent = [*PROXY, "replay", "--db", str(recordings), "--timing", "fast", "1"]
    result = run_client(agent, "--deny", env=proxy_env())
    deviations = [line for line in result.stderr.splitlines() if "session/request_permission" in line]
    assert len(deviations) == 2, result.stderr  # one per prompt: each is the client's own choice
    assert "reject-once" in deviations[0] and "allow-once" in deviations[0]
    assert deviations[0].endswith("the recorded branch plays on")


def permission_answer(lines: list[bytes]) -> tuple[int, bytes]:
    for n, line in enumerate(lines):
        if b'"outcome"' in line:
            return n, line
    raise AssertionError("no permission answer recorded")


@pytest.mark.parametrize("follow", [False, True])
def test_follow_client_plays_the_recordings_branch_for_that_answer(recordings: Path, follow: bool) -> None:
    # Both runs as one recording: turn 1 with an allow, another with a reject. The live client
    # sends run 1's messages but rejects, as run 2's client did.
    rows = frame_rows(recordings, 1) + frame_rows(recordings, 2)
    live = client_lines(recordings, 1)
    at, _ = permission_answer(live)
    _, rejected = permission_answer(client_lines(recordings, 2))
    live[at] = rejected
    replayer = rp.Replayer(rows, follow_client=follow)
    sent: list[dict[str, Any]] = []
    for line in live[: at + 1]:
        sent += [json.loads(s.data) for s in replayer.receive(line)]
    updates = [m["params"]["update"] for m in sent if m.get("method") == "session/update"]
    statuses = [u.get("status") for u in updates if u.get("sessionUpdate") == "tool_call_update"]
    prompt_id = json.loads(live[2])["id"]
    answered = [m for m in sent if m.get("id") == prompt_id and "result" in m]
    (deviation,) = [d for d in replayer.deviations if "request_permission" in d]
    if follow:
        assert statuses == ["failed"]  # what the agent did after a reject, as recorded in run 2
        assert "playing the recording's branch for that answer" in deviation
    else:
        assert statuses == ["completed"]
        assert deviation.endswith("the recorded branch plays on")
    assert [a["result"]["stopReason"] for a in answered] == ["end_turn"]  # the live prompt is answered


# -- batch lines ----------------------------------------------------------------------------------

INIT = b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}}'
BATCH = (
    b'[ {"jsonrpc":"2.0","id":0,"result":{"protocolVersion":1,"agentInfo":{"name":"b"}}} ,'
    b'  {"jsonrpc":"2.0","method":"_vendor/hello","params":{"x":1}} ]'
)


def batch_recording(tmp_path: Path) -> list[dict[str, Any]]:
    db = tmp_path / "batch.db"
    run_id = write_run(db, [Record("c2a", 1, INIT), Record("a2c", 2, BATCH)], {})
    return frame_rows(db, run_id)


def test_a_recorded_batch_line_is_served_byte_for_byte(tmp_path: Path) -> None:
    rows = batch_recording(tmp_path)
    assert next(r["kind"] for r in rows if r["dir"] == "a2c") == "batch"
    replayer = rp.Replayer(rows, strict=True)
    assert [s.data for s in replayer.receive(INIT)] == [BATCH + b"\n"]
    assert replayer.finish() == []


def test_a_batch_with_another_id_is_one_line_with_that_id(tmp_path: Path) -> None:
    replayer = rp.Replayer(batch_recording(tmp_path))
    (sent,) = replayer.receive(INIT.replace(b'"id":0', b'"id":"c-9"'))
    batch = json.loads(sent.data)
    assert [m.get("id") for m in batch] == ["c-9", None] and batch[1]["method"] == "_vendor/hello"


CLIENT_BATCH = (
    b'[{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}},  '
    b'{"jsonrpc":"2.0","method":"_vendor/hi","params":{}}]'
)


def test_the_fake_client_sends_a_recorded_batch_line_byte_for_byte(tmp_path: Path) -> None:
    db = tmp_path / "client-batch.db"
    answer = b'{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":1}}'
    run_id = write_run(db, [Record("c2a", 1, CLIENT_BATCH), Record("a2c", 2, answer)], {})
    replayer = ClientReplayer(frame_rows(db, run_id))
    assert replayer.start() == [CLIENT_BATCH + b"\n"]
    assert not replayer.done  # the request inside it waits for its answer
    assert replayer.receive(answer + b"\n") == [] and replayer.done
    assert replayer.finish() == []
