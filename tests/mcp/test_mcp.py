"""``acp-proxy mcp``: the MCP SDK's own client, over stdio, against a real recording."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import jsonschema
import pytest
from click.testing import CliRunner

from acp_proxy.cli.commands import cli
from acp_proxy.mcp.tools import MAX_FRAMES
from acp_proxy.protocol.redact import MASK
from acp_proxy.record.importers import Record, write_run
from tests.conftest import PROXY

TOOLS = {
    "summary",
    "session_info",
    "list_runs",
    "list_sessions",
    "sessions_by_client",
    "show",
    "exchanges",
    "frames",
    "frame",
    "marks",
    "stats",
    "check",
    "diff",
}
MAX_ANSWER = 100_000
SECRET = "Bearer abcdef0123456789xyz"


class Answer:
    def __init__(self, result: Any) -> None:
        self.error = bool(result.is_error)
        self.text = "".join(getattr(c, "text", "") for c in result.content)
        self.structured = result.structured_content

    def json(self) -> Any:
        assert not self.error, self.text
        assert self.structured is not None
        return self.structured


def session(
    db: Path, calls: list[tuple[str, dict[str, Any]]], *options: str, errlog: Path
) -> tuple[list[Any], list[Answer]]:
    """Start `acp-proxy mcp --db DB` with the SDK's stdio client, list its tools, make ``calls``."""
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(command=PROXY[0], args=[*PROXY[1:], "mcp", "--db", str(db), *options])

    async def main() -> tuple[list[Any], list[Answer]]:
        with anyio.fail_after(120), open(errlog, "w") as err:
            async with stdio_client(params, errlog=err) as (read, write), ClientSession(read, write) as client:
                await client.initialize()
                tools = (await client.list_tools()).tools
                answers = [Answer(await client.call_tool(name, args)) for name, args in calls]
                return tools, answers

    return anyio.run(main, backend="asyncio")


def cli_text(answer: Answer) -> str:
    """The text a client that reads no structured content sees: the same JSON (show: the text)."""
    if set(answer.structured) == {"ref", "total", "offset", "returned", "next", "text"}:
        return str(answer.structured["text"])
    return json.dumps(answer.structured, ensure_ascii=False, separators=(",", ":"))


def cli_stdout(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code in (0, 1), result.output
    return result.stdout


def test_every_tool_over_stdio_against_a_real_recording(sdk_recording: tuple[Path, str], tmp_path: Path) -> None:
    db, sid = sdk_recording
    calls = [
        ("list_runs", {}),
        ("list_sessions", {}),
        ("show", {"ref": "1"}),
        ("show", {"ref": sid, "turn": 2}),
        ("frames", {"filter": "run:1 method:session/prompt", "limit": 10}),
        ("frames", {"filter": "", "limit": 100_000, "max_chars": 20}),
        ("frame", {"run_id": 1, "seq": 2}),
        ("stats", {"ref": "1"}),
        ("check", {"ref": "last", "schema": True}),
        ("diff", {"left": "1", "right": "2"}),
        ("show", {"ref": "no-such-thing"}),
        ("frames", {"filter": "((("}),
        ("frame", {"run_id": 1, "seq": 99_999}),
        ("frames", {"limit": -1}),
    ]
    tools, answers = session(db, calls, errlog=tmp_path / "err.txt")
    assert {t.name for t in tools} == TOOLS
    assert all(t.annotations.read_only_hint and not t.annotations.destructive_hint for t in tools)
    assert all(t.description for t in tools)
    runs, sessions, show, show_turn, prompts, bounded, frame, stats, check, diff, *mistakes = answers

    assert all(t.output_schema and t.output_schema.get("type") == "object" for t in tools)
    assert all(t.input_schema["properties"][p].get("description") for t in tools for p in t.input_schema["properties"])
    schemas = {t.name: t.output_schema for t in tools}
    assert {"raw", "seq", "run_id"} <= set(schemas["frames"]["properties"]["items"]["items"]["properties"])
    assert {"total", "offset", "returned", "next"} <= set(schemas["frames"]["required"])
    for (name, _), answer in zip(calls, answers, strict=True):
        assert len(answer.text) <= MAX_ANSWER
        if not answer.error:
            jsonschema.validate(answer.structured, schemas[name])
            assert len(json.dumps(answer.structured)) <= MAX_ANSWER
            assert answer.text == cli_text(answer)
    runs = runs.json()
    assert [r["id"] for r in runs["items"]] == [2, 1] and runs["items"][0]["agent_name"] == "acp-proxy-sdk-agent"
    assert (runs["total"], runs["offset"], runs["returned"], runs["next"]) == (2, 0, 2, None)
    assert [s["session_id"] for s in sessions.json()["items"]] == [sid]
    # The conversation as `acp-proxy show` renders it.
    assert show.text == cli_stdout("show", "--db", str(db), "1")
    assert show_turn.text == cli_stdout("show", "--db", str(db), sid, "--turn", "2")
    assert "hello world" in show.text and "Write notes.txt" in show.text
    assert [(f["seq"], f["kind"]) for f in prompts.json()["items"]] == [(5, "request"), (12, "response")]
    assert prompts.json()["total"] == 2 and prompts.json()["next"] is None
    total = len(json.loads(cli_stdout("frames", "--db", str(db), "--json")))
    assert bounded.json()["total"] == total
    everything = bounded.json()["items"]
    assert len(everything) == min(total, MAX_FRAMES)
    assert all(len(f["raw"]) <= 20 + len("… [100000 more characters]") for f in everything)
    assert any(f["raw"].endswith("more characters]") for f in everything)
    one = frame.json()["frame"]
    assert one["method"] == "initialize" and one["kind"] == "response" and frame.json()["next_raw_offset"] is None
    assert json.loads(one["raw"])["result"]["agentInfo"]["name"] == "acp-proxy-sdk-agent"
    assert {r["method"] for r in stats.json()["latency"]} == {
        "initialize",
        "session/new",
        "session/prompt",
        "session/request_permission",
    }
    assert check.json()["counts"]["error"] == 0 and check.json()["checked"] == "run 2"
    assert check.json()["findings"]["total"] == sum(check.json()["counts"].values())
    compared = diff.json()
    assert compared["differ"] is True and "prompt" in compared["turns"]["items"][0]["differs"]
    assert compared["turns"]["total"] == len(compared["turns"]["items"]) and compared["turns"]["next"] is None
    for mistake in mistakes:
        assert mistake.error and len(mistake.text.splitlines()) <= 3 and "Traceback" not in mistake.text
    assert "no run or session matches" in mistakes[0].text and "bad filter" in mistakes[1].text
    assert "no frame 99999 in run 1" in mistakes[2].text and "whole number" in mistakes[3].text
    assert "Traceback" not in (tmp_path / "err.txt").read_text()


def secret_recording(db: Path) -> None:
    meta = {"proxy": {"headers": {"Authorization": SECRET}}}
    write_run(
        db,
        [
            Record(
                "c2a",
                1_000,
                json.dumps(
                    {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1, "_meta": meta}}
                ).encode(),
            ),
            Record("a2c", 2_000, b'{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":1}}'),
            Record("stderr", 3_000, f"token {SECRET}".encode()),
        ],
        {},
    )


@pytest.mark.spawns
@pytest.mark.parametrize("options", [(), ("--no-redact",)])
def test_secrets_are_masked_unless_asked(tmp_path: Path, options: tuple[str, ...]) -> None:
    db = tmp_path / "secret.db"
    secret_recording(db)
    calls = [("frames", {"filter": "run:1"}), ("frame", {"run_id": 1, "seq": 1}), ("show", {"ref": "1"})]
    _, answers = session(db, calls, *options, errlog=tmp_path / "err.txt")
    texts = [a.text for a in answers]
    if options:
        assert all("abcdef0123456789xyz" in t for t in texts[:2])
    else:
        assert all("abcdef0123456789xyz" not in t for t in texts) and all(MASK in t for t in texts[:2])


def test_nothing_but_mcp_on_stdout(sdk_recording: tuple[Path, str], tmp_path: Path) -> None:
    db, _ = sdk_recording
    messages = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "show", "arguments": {"ref": "zzz"}}},
        {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "list_runs", "arguments": {}}},
    ]
    proc = subprocess.Popen(
        [*PROXY, "mcp", "--db", str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    answers: list[dict[str, Any]] = []
    try:
        assert proc.stdin is not None and proc.stdout is not None
        for message in messages:
            proc.stdin.write(json.dumps(message).encode() + b"\n")
            proc.stdin.flush()
            if "id" in message:
                answers.append(json.loads(proc.stdout.readline()))  # every stdout line is one MCP message
        proc.stdin.close()
        rest = proc.stdout.read()
        proc.wait(timeout=30)
    finally:
        proc.kill()
    assert rest == b"" and [a["id"] for a in answers] == [1, 2, 3, 4]
    assert {t["name"] for t in answers[1]["result"]["tools"]} == TOOLS
    assert answers[2]["result"]["isError"] is True and answers[3]["result"]["isError"] is False
    assert b"Traceback" not in (proc.stderr.read() if proc.stderr else b"")


def test_missing_mcp_extra_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [m for m in sys.modules if m == "mcp" or m.startswith("mcp.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "mcp", None)
    result = CliRunner().invoke(cli, ["mcp"])
    assert (
        result.exit_code == 2
        and result.output.strip() == "acp-proxy: acp-proxy mcp needs the [mcp] extra: pip install 'acp-proxy[mcp]'"
    )


def test_a_bad_redaction_rule_is_one_line() -> None:
    result = CliRunner().invoke(cli, ["mcp", "--redact", "re:"])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1


def test_the_cli_imports_neither_the_sdk_nor_pydantic() -> None:
    # Every command registers `mcp`: without the extra (no SDK, no pydantic) they must all work,
    # and start without paying for either.
    code = (
        "import sys, acp_proxy.cli.commands; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'mcp', 'pydantic'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.spawns
def test_marks_and_their_notes_through_the_mcp_client(sdk_recording: tuple[Path, str], tmp_path: Path) -> None:
    db = tmp_path / "marked.db"
    db.write_bytes(sdk_recording[0].read_bytes())
    for args in (["1:3", "--note", "the agent's first answer"], ["2:4"]):
        assert CliRunner().invoke(cli, ["mark", "--db", str(db), *args]).exit_code == 0
    calls: list[tuple[str, dict[str, Any]]] = [
        ("marks", {}),
        ("marks", {"ref": "2"}),
        ("frames", {"filter": "marked"}),
        ("frames", {"filter": 'comment:"first answer"'}),
        ("frame", {"run_id": 1, "seq": 3}),
        ("frame", {"run_id": 1, "seq": 2}),
        ("marks", {"ref": "no-such-run"}),
    ]
    _tools, answers = session(db, calls, errlog=tmp_path / "err.txt")
    every, second, marked, commented, one, unmarked, bad = answers
    assert [(m["run_id"], m["seq"], m.get("note")) for m in every.json()["items"]] == [
        (1, 3, "the agent's first answer"),
        (2, 4, None),
    ]
    assert all(m["dir"] in ("c2a", "a2c", "stderr") and m["marked_ns"] > 0 for m in every.json()["items"])
    assert [(m["run_id"], m["seq"]) for m in second.json()["items"]] == [(2, 4)]
    assert [(f["run_id"], f["seq"], f["mark"]) for f in marked.json()["items"]] == [
        (1, 3, "the agent's first answer"),
        (2, 4, ""),
    ]
    assert [(f["run_id"], f["seq"]) for f in commented.json()["items"]] == [(1, 3)]
    assert one.json()["frame"]["mark"] == "the agent's first answer"
    assert "mark" not in unmarked.json()["frame"]  # an unmarked frame keeps its shape
    assert bad.error and "no-such-run" in bad.text
