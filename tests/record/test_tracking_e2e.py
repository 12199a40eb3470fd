"""Protocol facts recorded at relay time, through the real proxy: pairing, sessions, turns, replay."""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest

from tests import v2_traffic as v2
from tests.conftest import TRAFFIC, python_agent, run_proxy, start_proxy, watchdog
from tests.peers import agent_argv, proxied, run_client, session_of, transcript

pytestmark = pytest.mark.spawns  # every test here starts processes

SCRIPTED_AGENT = Path(__file__).parents[1] / "scripted_agent.py"


def query(db: Path, sql: str, *params: Any) -> list[dict[str, Any]]:
    conn = sqlite3.connect(db)
    conn.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in conn.execute(sql, params)]
    finally:
        conn.close()


# -- v1, the official SDK pair --------------------------------------------------------------


def test_v1_pairing_latency_and_a_permission_request_with_a_colliding_id(tmp_path: Path) -> None:
    db = tmp_path / "rec.db"
    transcript(run_client(proxied(agent_argv("--permission"), db), "--prompt", "hi"))
    responses = query(db, "select * from frames where kind in ('response', 'error') order by seq")
    assert responses and all(r["request_seq"] is not None and r["latency_ns"] > 0 for r in responses)
    for r in responses:
        (req,) = query(db, "select * from frames where run_id = ? and seq = ?", r["run_id"], r["request_seq"])
        assert (req["method"], req["rpc_id"]) == (r["method"], r["rpc_id"])
        assert req["dir"] != r["dir"]
    # The agent's permission request reuses id 0 while the client's id-0 initialize is long done;
    # ids are per direction, so it pairs with the client's answer and nothing else.
    (perm,) = query(db, "select * from frames where method = 'session/request_permission' and kind = 'request'")
    assert (perm["dir"], perm["rpc_id"]) == ("a2c", "0")
    (answer,) = query(db, "select * from frames where request_seq = ?", perm["seq"])
    assert (answer["dir"], answer["kind"], answer["rpc_id"]) == ("c2a", "response", "0")
    (run,) = query(db, "select * from runs")
    assert (run["protocol_version"], run["client_name"], run["agent_name"]) == (
        1,
        "acp-proxy-sdk-client",
        "acp-proxy-sdk-agent",
    )
    assert query(db, "select count(*) n from unanswered")[0]["n"] == 0
    (turn,) = query(db, "select * from turns")
    assert (turn["stop_reason"], turn["permission_requests"], turn["tool_calls"]) == ("end_turn", 1, 1)


def test_v1_session_load_history_is_flagged_replay_and_the_session_is_one_row(tmp_path: Path) -> None:
    db = tmp_path / "rec.db"
    state = tmp_path / "state"
    agent = agent_argv("--state-dir", str(state))
    first = transcript(run_client(proxied(agent, db), "--prompt", "remember this"))
    session = session_of(first)
    transcript(run_client(proxied(agent, db), "--load", session))
    second_run = query(db, "select max(id) id from runs")[0]["id"]
    updates = query(db, "select * from frames where run_id = ? and update_kind is not null order by seq", second_run)
    assert updates and all(u["replay"] == 1 for u in updates)
    (load,) = query(
        db, "select * from frames where run_id = ? and method = 'session/load' and kind = 'request'", second_run
    )
    assert all(u["seq"] > load["seq"] for u in updates)
    (row,) = query(db, "select * from sessions where session_id = ?", session)
    runs = query(db, "select run_id, how from session_runs where session_row = ? order by run_id", row["id"])
    assert [r["run_id"] for r in runs] == [1, second_run]
    assert runs[1]["how"] == "session/load"
    live = query(db, "select count(*) n from frames where run_id = 1 and replay = 1")[0]["n"]
    assert live == 0


# -- v2, built from the seed document ---------------------------------------------------------


class ScriptedConversation:
    """Drive the proxy in front of the scripted v2 agent, one client frame at a time."""

    def __init__(self, tmp_path: Path, *proxy_args: str) -> None:
        script = tmp_path / "script.json"
        script.write_text(json.dumps(v2.AGENT_SCRIPT))
        self.db = tmp_path / "rec.db"
        self.proc = start_proxy(
            ["run", "--db", str(self.db), *proxy_args, "--", sys.executable, str(SCRIPTED_AGENT), str(script)]
        )
        self.received: list[dict[str, Any]] = []
        self.watchdog = watchdog(self.proc, 60)

    def send(self, frame: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(frame).encode() + b"\n")
        self.proc.stdin.flush()

    def read_until(self, predicate: Any) -> None:
        assert self.proc.stdout is not None
        while True:
            line = self.proc.stdout.readline()
            assert line, "the proxy closed its stdout early"
            message = json.loads(line)
            self.received.append(message)
            if predicate(message):
                return

    def finish(self) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        for line in self.proc.stdout:
            self.received.append(json.loads(line))
        self.proc.wait(timeout=30)
        self.watchdog.cancel()


def idle_with(reason: str | None) -> Any:
    def check(m: dict[str, Any]) -> bool:
        update = (m.get("params") or {}).get("update") or {}
        return (
            update.get("sessionUpdate") == "state_update"
            and update.get("state") == "idle"
            and (reason is None or update.get("stopReason") == reason)
        )

    return check


def response_to(request_id: int) -> Any:
    return lambda m: m.get("id") == request_id and "method" not in m


def converse(tmp_path: Path, *proxy_args: str) -> ScriptedConversation:
    c = ScriptedConversation(tmp_path, *proxy_args)
    c.send(v2.INITIALIZE)
    c.read_until(response_to(0))
    c.send(v2.NEW_SESSION)
    c.read_until(response_to(1))
    c.send(v2.PROMPT)
    c.read_until(lambda m: m.get("method") == "session/request_permission")
    c.read_until(lambda m: (m.get("params") or {}).get("update", {}).get("state") == "requires_action")
    c.send(v2.PERMISSION_ANSWER)
    c.read_until(idle_with("end_turn"))
    c.send(v2.PROMPT_2)
    c.read_until(lambda m: (m.get("params") or {}).get("update", {}).get("sessionUpdate") == "agent_message_chunk")
    c.send(v2.CANCEL)
    c.read_until(idle_with("cancelled"))
    c.send(v2.RESUME)
    c.read_until(response_to(4))
    c.finish()
    return c


def notices(messages: list[dict[str, Any]]) -> int:
    return sum(1 for m in messages if (m.get("params") or {}).get("update", {}).get("sessionUpdate") == "notice")


def test_v2_turns_acceptance_and_flags(tmp_path: Path) -> None:
    c = converse(tmp_path)
    assert c.proc.returncode == 0
    (run,) = query(c.db, "select * from runs")
    assert (run["protocol_version"], run["client_name"], run["agent_name"]) == (2, "seed-client", "seed-agent")
    turns = query(c.db, "select * from turns order by id")
    assert [(t["message_id"], t["stop_reason"], t["status"]) for t in turns] == [
        ("msg_user_8f7a1", "end_turn", "ended"),
        ("msg_user_2", "cancelled", "ended"),
    ]
    first = turns[0]
    assert first["start_ns"] <= first["accepted_ns"] <= first["first_output_ns"] <= first["end_ns"]
    assert (first["permission_requests"], first["tool_calls"]) == (1, 1)
    assert first["chunks"] >= 2  # agent_message_chunk, tool_call_content_chunk, compaction chunk
    unknown = {r["update_kind"]: r["unknown"] for r in query(c.db, "select * from frames where unknown is not null")}
    assert unknown == {"_vendor_progress": "extension", "future_thing": "future"}
    replayed = query(c.db, "select update_kind, note from frames where replay = 1 order by seq")
    assert [r["update_kind"] for r in replayed] == ["user_message", "notice", "agent_message", "state_update"]
    assert "notice inside replay window" in (replayed[1]["note"] or "")
    (session,) = query(c.db, "select * from sessions")
    assert session["session_id"] == v2.SESSION
    # Without the option, the replayed notice reaches the client like everything else.
    assert notices(c.received) == 2


def test_v2_replayed_notice_is_stripped_only_with_the_option(tmp_path: Path) -> None:
    c = converse(tmp_path, "--strip-replayed-notices")
    assert notices(c.received) == 1  # the live one
    (stripped,) = query(c.db, "select * from frames where forwarded = 0")
    assert (stripped["update_kind"], stripped["replay"]) == ("notice", 1)
    assert stripped["note"].startswith("stripped:")
    live = query(c.db, "select forwarded from frames where update_kind = 'notice' and replay = 0")
    assert live == [{"forwarded": 1}]
    # Everything else passed untouched: what the client read is what the agent wrote, minus one line.
    a2c = query(c.db, "select raw from frames where dir = 'a2c' and forwarded = 1 and batch_seq is null order by seq")
    assert [json.loads(r["raw"]) for r in a2c] == c.received


# -- the recorded fixtures, batches, unknowns, crashes ----------------------------------------


def replay_fixture(path: Path, db: Path) -> None:
    """Play a recorded conversation through the proxy in its original order.

    A fake agent writes each of the agent's frames after reading the client frames recorded
    before it; the test plays the client the same way, so the proxy sees the same sequence.
    """
    entries = [json.loads(line) for line in path.read_text().splitlines()]
    script = [(e["dir"], e["frame"]) for e in entries]
    agent = python_agent(
        "import sys\n"
        f"for direction, frame in {script!r}:\n"
        "    if direction == 'c2a':\n"
        "        sys.stdin.readline()\n"
        "    else:\n"
        "        sys.stdout.write(frame + '\\n')\n"
        "        sys.stdout.flush()\n"
    )
    proc = start_proxy(["run", "--db", str(db), "--", *agent])
    timer = watchdog(proc, 60)
    try:
        assert proc.stdin is not None and proc.stdout is not None
        for direction, frame in script:
            if direction == "c2a":
                proc.stdin.write(frame.encode() + b"\n")
                proc.stdin.flush()
            else:
                assert proc.stdout.readline() == frame.encode() + b"\n"
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0
    finally:
        timer.cancel()
        proc.kill()
        proc.wait()


def test_recorded_fixtures_every_response_is_paired_and_nothing_is_falsely_unanswered(tmp_path: Path) -> None:
    for path in sorted(TRAFFIC.glob("*.jsonl")):
        db = tmp_path / f"{path.stem}.db"
        replay_fixture(path, db)
        unpaired = query(db, "select seq, raw from frames where kind in ('response', 'error') and request_seq is null")
        assert unpaired == [], path.name
        assert query(db, "select * from unanswered") == [], path.name


def test_batch_unknown_variants_unknown_id_and_an_agent_dying_with_requests_pending(tmp_path: Path) -> None:
    db = tmp_path / "rec.db"
    lines = [
        '[{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"_vendor_x"}}},'
        '{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"later_thing"}}}]',
        '{"jsonrpc":"2.0","id":99,"result":{}}',
        '{"jsonrpc":"2.0","id":5,"method":"fs/read_text_file","params":{"sessionId":"s","path":"/x"}}',
    ]
    agent = python_agent(
        "import sys, os\n"
        f"sys.stdout.write({''.join(x + chr(10) for x in lines)!r})\n"
        "sys.stdout.flush()\n"
        "sys.stdin.readline()\n"
        "os._exit(9)\n"
    )
    request = b'{"jsonrpc":"2.0","id":1,"method":"session/prompt","params":{"sessionId":"s","prompt":[]}}\n'
    result = run_proxy(["run", "--db", str(db), "--", *agent], input=request)
    assert result.returncode == 9
    assert result.stdout == "".join(x + "\n" for x in lines).encode()
    (batch,) = query(db, "select * from frames where kind = 'batch'")
    elements = query(db, "select * from frames where batch_seq = ? order by batch_index", batch["seq"])
    assert [(e["batch_index"], e["update_kind"], e["unknown"]) for e in elements] == [
        (0, "_vendor_x", "extension"),
        (1, "later_thing", "future"),
    ]
    (stray,) = query(db, "select * from frames where rpc_id = '99'")
    assert stray["request_seq"] is None and "unknown id" in stray["note"]
    # The agent writes before it reads: which direction the relay reads first is a race.
    pending = query(db, "select method, dir from unanswered order by dir")
    assert pending == [{"method": "fs/read_text_file", "dir": "a2c"}, {"method": "session/prompt", "dir": "c2a"}]
    (run,) = query(db, "select exit_code, unanswered_requests, unpaired_responses from runs")
    assert run == {"exit_code": 9, "unanswered_requests": 2, "unpaired_responses": 1}
