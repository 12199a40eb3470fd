"""The query CLI on a real recording (the SDK pair through the proxy), with click's CliRunner."""

from __future__ import annotations

import json
import re
import stat
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from acp_proxy.cli import cli

README = Path(__file__).resolve().parent.parent / "README.md"


def invoke(*args: str) -> click.testing.Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_runs(sdk_recording: tuple[Path, str]) -> None:
    db, _ = sdk_recording
    result = invoke("runs", "--db", str(db))
    assert result.exit_code == 0
    assert "acp-proxy-sdk-client 0.1.0 ⇄ acp-proxy-sdk-agent 0.1.0" in result.output
    runs = json.loads(invoke("runs", "--db", str(db), "--json").output)
    assert [r["id"] for r in runs] == [2, 1]
    assert all(r["exit_code"] == 0 and r["protocol_version"] == 1 for r in runs)
    lines = invoke("runs", "--db", str(db), "--jsonl").output.splitlines()
    assert [json.loads(line)["id"] for line in lines] == [2, 1]


def test_sessions(sdk_recording: tuple[Path, str]) -> None:
    db, session = sdk_recording
    (row,) = json.loads(invoke("sessions", "--db", str(db), "--json").output)
    assert row["session_id"] == session
    assert row["runs"] == "1,2"
    assert row["turns"] == 2
    assert session in invoke("sessions", "--db", str(db)).output


def test_show_a_session_across_runs_marks_history(sdk_recording: tuple[Path, str]) -> None:
    db, session = sdk_recording
    output = invoke("show", session[:8], "--db", str(db)).output
    assert "user       hello world" in output
    assert "permission call_1 [allow-once, reject-once] → allow-once" in output
    assert "history" in output  # the second run's session/load replay
    assert "user       again" in output
    turn_one = invoke("show", session, "--turn", "1", "--db", str(db)).output
    assert "hello world" in turn_one and "again" not in turn_one
    (conv,) = json.loads(invoke("show", session, "--json", "--db", str(db)).output)
    assert conv["session_id"] == session
    raw = invoke("show", "last", "--raw", "--db", str(db)).output
    assert "session/load" in raw


def test_frames_filters_and_formats(sdk_recording: tuple[Path, str]) -> None:
    db, session = sdk_recording
    table = invoke("frames", "run:1", "method:session/prompt", "--db", str(db)).output.splitlines()
    assert [line.split()[3] for line in table[1:]] == ["request", "response"]
    lines = invoke("frames", "run:1", "--jsonl", "--db", str(db)).output.splitlines()
    objects = [json.loads(line) for line in lines]
    assert [o["seq"] for o in objects] == sorted(o["seq"] for o in objects)
    assert objects[0]["method"] == "initialize" and objects[0]["raw"].startswith('{"jsonrpc"')
    raw = CliRunner().invoke(cli, ["frames", "run:1", "dir:c2a", "--raw", "--db", str(db)]).stdout_bytes
    assert raw.endswith(b"\n") and raw.count(b"\n") == len([o for o in objects if o["dir"] == "c2a"])
    replayed = invoke("frames", "replay", "--jsonl", "--db", str(db)).output.splitlines()
    assert replayed and all(json.loads(line)["run_id"] == 2 for line in replayed)
    bad = CliRunner().invoke(cli, ["frames", "kind:requst", "--db", str(db)])
    assert bad.exit_code != 0 and "did you mean request" in bad.output
    assert session in invoke("frames", f"session:{session[:6]}", "--db", str(db)).output


def test_stats(sdk_recording: tuple[Path, str]) -> None:
    db, _ = sdk_recording
    report = json.loads(invoke("stats", "last", "--json", "--db", str(db)).output)
    methods = {(m["method"], m["dir"]): m for m in report["latency"]}
    assert methods[("session/prompt", "c2a")]["count"] == 1
    assert methods[("session/request_permission", "a2c")]["p50_ms"] > 0
    assert report["unanswered"] == [] and report["errors"] == []
    assert "Latency" in invoke("stats", "--db", str(db)).output


def test_tail_from_start_stops_after_count(sdk_recording: tuple[Path, str]) -> None:
    db, _ = sdk_recording
    lines = invoke("tail", "--from-start", "--count", "3", "--jsonl", "--db", str(db)).output.splitlines()
    assert [json.loads(line)["seq"] for line in lines] == [1, 2, 3]


def test_export_jsonl_and_conductor_trace(sdk_recording: tuple[Path, str], tmp_path: Path) -> None:
    db, session = sdk_recording
    out = tmp_path / "session.jsonl"
    result = CliRunner().invoke(cli, ["export", session, "-o", str(out), "--db", str(db)])
    assert result.exit_code == 0
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    header, *frames = [json.loads(line) for line in out.read_text().splitlines()]
    assert header["acp_proxy_export"] == 1 and "nothing is redacted" in header["warning"]
    assert {f["run_id"] for f in frames} == {1, 2}
    trace = tmp_path / "trace.jsons"
    CliRunner().invoke(cli, ["export", "1", "--format", "jsons", "-o", str(trace), "--db", str(db)])
    events = [json.loads(line) for line in trace.read_text().splitlines()]
    assert events[0]["type"] == "request" and events[0]["method"] == "initialize"
    assert {e["type"] for e in events} >= {"request", "response", "notification"}
    assert all(e["from"] in ("client", "agent") for e in events if e["type"] != "trace")


def test_sql_is_read_only(sdk_recording: tuple[Path, str]) -> None:
    db, _ = sdk_recording
    rows = json.loads(
        invoke("sql", "select count(*) as n from frames where run_id = ?", "1", "--json", "--db", str(db)).output
    )
    assert rows[0]["n"] > 10
    refused = CliRunner().invoke(cli, ["sql", "delete from frames", "--db", str(db)])
    assert refused.exit_code != 0 and "readonly" in refused.output.replace("-", "")


@pytest.mark.parametrize(
    "args",
    [["show", "nope"], ["show", "999"], ["stats", "zzz"], ["export", "nope"]],
)
def test_bad_reference_is_one_line_and_nonzero(sdk_recording: tuple[Path, str], args: list[str]) -> None:
    db, _ = sdk_recording
    result = CliRunner().invoke(cli, [*args, "--db", str(db)])
    assert result.exit_code != 0
    assert len(result.output.strip().splitlines()) == 1
    assert "Traceback" not in result.output


@pytest.mark.parametrize("command", ["runs", "sessions", "frames", "stats", "tail", "sql select 1", "show last"])
def test_missing_database_is_one_line_and_nonzero(tmp_path: Path, command: str) -> None:
    result = CliRunner().invoke(cli, [*command.split(), "--db", str(tmp_path / "absent.db")])
    assert result.exit_code != 0
    assert result.output.strip().splitlines() == [
        f"Error: no database at {tmp_path / 'absent.db'} (record one with: acp-proxy run -- AGENT)"
    ]
    assert not (tmp_path / "absent.db").exists()


def all_commands() -> list[str]:
    return sorted(cli.commands)


@pytest.mark.parametrize("name", all_commands())
def test_every_command_has_help_with_an_example_and_is_in_the_readme(name: str) -> None:
    result = invoke(name, "--help")
    assert result.exit_code == 0
    assert result.output.startswith("Usage: ")
    command = cli.commands[name]
    if name not in ("faults-help",):
        assert re.search(r"acp-proxy " + re.escape(name), command.help or ""), f"{name}: no example in --help"
    assert f"acp-proxy {name}" in README.read_text(), f"{name} is not documented in README.md"


def test_tail_follows_a_run_while_it_is_recorded(tmp_path: Path) -> None:
    """`tail` in one process, a proxy recording in another: the frames show up as they land."""
    import subprocess

    from .conftest import PROXY, proxy_env, run_proxy

    db = tmp_path / "live.db"
    assert run_proxy(["run", "--db", str(db), "--", "true"]).returncode == 0  # the database exists
    tail = subprocess.Popen(
        [*PROXY, "tail", "--db", str(db), "--from-start", "--count", "2", "--jsonl", "--interval", "0.05", "run:2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=proxy_env(),
    )
    try:
        lines = b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n'
        assert run_proxy(["run", "--db", str(db), "--", "cat"], input=lines).returncode == 0
        out, err = tail.communicate(timeout=60)
    finally:
        tail.kill()
        tail.wait(timeout=10)
    assert tail.returncode == 0, err
    frames = [json.loads(line) for line in out.splitlines()]
    assert [(f["run_id"], f["dir"], f["method"]) for f in frames] == [(2, "c2a", "ping"), (2, "a2c", "ping")]
