"""Frames nested past every recursion limit, from either side, through a real ``acp-proxy run``:
the recorder records them and every door reads them back (issue 31, depth)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from acp_proxy.cli.commands import cli
from acp_proxy.mcp.tools import Tools
from acp_proxy.otel.spans import build
from acp_proxy.protocol import wire
from acp_proxy.protocol.redact import Redactor
from acp_proxy.read.frames import Primed
from acp_proxy.store import database as store
from acp_proxy.web import model
from tests.conftest import PROXY, proxy_env, run_proxy

pytestmark = pytest.mark.spawns

TIMEOUT_S = 120
DECODED_DEPTH = 150

# An agent that never decodes JSON (a real one would die on these lines before the proxy did):
# it finds the method and id in the head of each line and answers with lines nested as deep:
# argv[1] levels in a chunk and an extension method's answer, argv[2] in the frames the state
# machine decodes (initialize, session/new, session/prompt).
AGENT = r"""
import re, sys
deep = "[" * int(sys.argv[1]) + "]" * int(sys.argv[1])
shallow = "[" * int(sys.argv[2]) + "]" * int(sys.argv[2])
answers = {
    "initialize": [
        '"result":{"protocolVersion":1,"agentCapabilities":{"loadSession":false,"_meta":{"x":%s}},'
        '"agentInfo":{"name":"deep-agent","version":"1","x":%s},"authMethods":[],"y":%s}' % (shallow, shallow, shallow)
    ],
    "session/new": ['"result":{"sessionId":"sess_deep","y":%s}' % shallow],
    "session/prompt": ['"result":{"stopReason":"end_turn","y":%s}' % shallow],
    "_deep/echo": ['"result":{"y":%s}' % deep],
}
out = sys.stdout
for line in sys.stdin:
    method = re.search(r'"method":"([^"]+)"', line)
    rid = re.match(r'\{"jsonrpc":"2\.0","id":(\d+)', line)
    if method is None or rid is None:
        continue
    if method.group(1) == "session/prompt":
        out.write('{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"sess_deep","update":'
                  '{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"deep"},"y":%s}}}\n' % deep)
    for body in answers.get(method.group(1), ['"result":{}']):
        out.write('{"jsonrpc":"2.0","id":%s,%s}\n' % (rid.group(1), body))
    out.flush()
"""


def client_lines(depth: int, handshake: int) -> bytes:
    """The client's side: ``initialize``, ``session/new`` and the prompt nested ``handshake``
    deep, an extension request ``depth`` deep (the agent answers likewise)."""
    deep = "[" * depth + "]" * depth
    shallow = "[" * handshake + "]" * handshake
    lines = [
        '{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1,'
        f'"clientCapabilities":{{"fs":{{"readTextFile":false}},"_meta":{{"x":{shallow}}}}},'
        f'"clientInfo":{{"name":"deep-client","version":"1","x":{shallow}}},"y":{shallow}}}}}',
        f'{{"jsonrpc":"2.0","id":1,"method":"session/new","params":{{"cwd":"/","mcpServers":[],"y":{shallow}}}}}',
        '{"jsonrpc":"2.0","id":2,"method":"session/prompt","params":{"sessionId":"sess_deep",'
        f'"prompt":[{{"type":"text","text":"hello"}}],"_meta":{{"y":{shallow}}}}}}}',
        f'{{"jsonrpc":"2.0","id":3,"method":"_deep/echo","params":{{"sessionId":"sess_deep","y":{deep}}}}}',
    ]
    return "".join(line + "\n" for line in lines).encode()


def record(db: Path, tmp: Path, depth: int, handshake: int) -> subprocess.CompletedProcess[bytes]:
    agent = tmp / "deep_agent.py"
    agent.write_text(AGENT)
    argv = ["run", "--db", str(db), "--", sys.executable, str(agent), str(depth), str(handshake)]
    result = run_proxy(argv, input=client_lines(depth, handshake), timeout=TIMEOUT_S)
    assert result.returncode == 0, result.stderr[-2000:]
    assert b"Traceback" not in result.stderr
    return result


def ok(*args: str) -> str:
    """``acp-proxy ARGS`` in-process (exit 0 or 1: findings); a RecursionError fails the test."""
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code in (0, 1), result.output
    return result.stdout


def test_a_2000_deep_conversation_from_both_sides_is_recorded_and_the_database_stays_usable(tmp_path: Path) -> None:
    db = tmp_path / "rec.db"
    for _ in range(2):  # the next run on the same database works too
        record(db, tmp_path, 2000, 2000)
    conn = sqlite3.connect(db)
    try:
        runs = conn.execute("select status, agent_name, client_name from runs order by id").fetchall()
        frames = conn.execute("select dir, kind, method, decode_error from frames where run_id = 2 order by seq")
        frames = frames.fetchall()
        sessions = conn.execute("select session_id from sessions").fetchall()
    finally:
        conn.close()
    assert runs == [("ended", "deep-agent", "deep-client")] * 2
    assert sessions and {s for (s,) in sessions} == {"sess_deep"}
    kinds = [(d, k) for d, k, _, _ in frames]
    assert kinds.count(("c2a", "request")) == 4 and kinds.count(("a2c", "response")) == 4
    assert all("nested deeper than" in (error or "") for _, _, _, error in frames)
    for args in (["runs"], ["sql", "select 1"], ["show", "last"]):
        result = run_proxy([*args, "--db", str(db)], timeout=TIMEOUT_S)
        assert result.returncode == 0 and b"Traceback" not in result.stderr, result.stderr[-2000:]


@pytest.fixture(scope="module", params=[990, 1000])
def deep_recording(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    """Two runs of the deep conversation, ``request.param`` levels deep where the state machine
    does not look (so the recorder before issue 31 recorded it too: the views are the point)."""
    tmp = tmp_path_factory.mktemp("deep")
    db = tmp / "rec.db"
    record(db, tmp, request.param, DECODED_DEPTH)
    record(db, tmp, request.param, DECODED_DEPTH)
    return db, request.param


def test_the_cli_views_read_a_deep_recording(deep_recording: tuple[Path, int], tmp_path: Path) -> None:
    db = str(deep_recording[0])
    assert "hello" in ok("show", "--db", db, "1") and "deep" in ok("show", "--db", db, "1")
    assert json.loads(ok("show", "--db", db, "1", "--json"))
    ok("diff", "--db", db, "1", "2")
    ok("check", "--db", db, "1")
    ok("stats", "--db", db, "1")
    ok("frames", "--db", db, "--json")
    for fmt in ("jsons", "jsonl", "inspector"):
        out = tmp_path / f"run.{fmt}"
        ok("export", "--db", db, "-f", fmt, "-o", str(out), "1")
        target = str(tmp_path / f"import-{fmt}.db")
        ok("import", "--db", target, "-f", fmt, str(out))
        assert "hello" in ok("show", "--db", target, "last")


def test_a_replay_of_a_deep_recording_answers_the_deep_client(deep_recording: tuple[Path, int]) -> None:
    db, depth = deep_recording
    argv = [*PROXY, "replay", "--db", str(db), "--timing", "fast", "1"]
    result = subprocess.run(
        argv, input=client_lines(depth, DECODED_DEPTH), capture_output=True, timeout=TIMEOUT_S, env=proxy_env()
    )
    assert b"Traceback" not in result.stderr, result.stderr[-2000:]
    assert result.returncode == 0, result.stderr[-2000:]
    answers = [wire.decode(line) for line in result.stdout.splitlines()]
    assert [f.rpc_id for f in answers if f.kind == "response"] == ["0", "1", "2", "3"]


def test_the_inspector_mcp_and_otlp_read_a_deep_recording(deep_recording: tuple[Path, int]) -> None:
    db, _ = deep_recording
    conn = sqlite3.connect(db)
    conn.row_factory = sqlite3.Row
    try:
        rows = [dict(r) for r in conn.execute("select * from frames where run_id = 1 order by seq")]
    finally:
        conn.close()
    read = store.open_for_reading(db)
    try:
        page = model.conversation(read, "run", "1", Redactor())
        primed = Primed(Redactor())
        frames = [model.frame(read, 1, row["seq"], Redactor(), primed) for row in rows]
        compared = model.diff(read, "1", "2", Redactor())
    finally:
        read.conn.close()
    assert len(rows) == 9 and page["conversations"] and page["timeline"] and all(f["json"] for f in frames) and compared
    tools = Tools(db, Redactor())
    assert "hello" in tools.show("1").text
    assert tools.diff("1", "2").model_dump(mode="json")
    assert tools.frames("run:1", limit=100).total == len(rows)
    spans, _ = build(rows, content=True)
    assert spans
