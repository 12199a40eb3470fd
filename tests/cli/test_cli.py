"""The query CLI on a real recording (the SDK pair through the proxy), with click's CliRunner."""

from __future__ import annotations

import json
import re
import stat
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from acp_proxy.cli.commands import cli
from acp_proxy.cli.views import session_label

README = Path(__file__).resolve().parents[2] / "README.md"


def invoke(*args: str, **env: str) -> click.testing.Result:
    return CliRunner(env=env or None).invoke(cli, list(args), catch_exceptions=False)


def fails(*args: str) -> str:
    """Run a command that must refuse its input: exit 2, nothing on stdout, one line on stderr."""
    result = CliRunner().invoke(cli, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("acp-proxy: "), result.stderr
    assert "Traceback" not in result.stderr
    return result.stderr


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
    _header, line = invoke("sessions", "--db", str(db)).output.splitlines()
    assert line.split()[0] == session  # the whole id, on its one line


def test_show_a_session_across_runs_marks_history(sdk_recording: tuple[Path, str]) -> None:
    db, session = sdk_recording
    output = invoke("show", session_label(session, 8), "--db", str(db)).output
    assert "user       hello world" in output
    assert "permission call_1 [allow-once, reject-once] → allow-once" in output
    assert "history" in output  # the second run's session/load replay
    assert "user       again" in output
    turn_one = invoke("show", session, "--turn", "1", "--db", str(db)).output
    assert "hello world" in turn_one and "again" not in turn_one
    (conv,) = json.loads(invoke("show", session, "--json", "--db", str(db)).output)
    assert conv["session_id"] == session
    assert json.loads(invoke("show", session, "--jsonl", "--db", str(db)).output) == conv
    raw = invoke("show", "last", "--raw", "--db", str(db)).output
    assert "session/load" in raw


def test_show_check_and_stats_default_to_the_last_run(sdk_recording: tuple[Path, str]) -> None:
    db, _ = sdk_recording
    assert invoke("show", "--db", str(db)).output == invoke("show", "last", "--db", str(db)).output
    assert invoke("show", "--db", str(db)).output.startswith("Run 2 ·")
    assert json.loads(invoke("stats", "--json", "--db", str(db)).output)["ref"] == "run 2"
    assert json.loads(invoke("stats", "all", "--json", "--db", str(db)).output)["ref"] == "every run"
    checked = invoke("check", "--db", str(db))
    assert checked.exit_code == 0 and "no findings for run 2" in checked.stdout


def test_frames_one_line_each_with_a_summary(sdk_recording: tuple[Path, str]) -> None:
    db, _session = sdk_recording
    lines = invoke("frames", "run:1", "method:session/prompt", "--db", str(db)).output.splitlines()
    assert [line.split()[2:5] for line in lines] == [["→", "req", "session/prompt"], ["←", "resp", "session/prompt"]]
    assert lines[0].endswith("prompt: hello world")
    assert lines[1].endswith("stop: end_turn")
    chunks = invoke("frames", "run:1", "update:agent_message_chunk", "--db", str(db)).output.splitlines()
    assert [line.split(" agent: ", 1)[1] for line in chunks] == ["Client sent:", "hello world"]
    tool = invoke("frames", "run:1", "update:tool_call", "--db", str(db)).output
    assert "tool call_1: Write notes.txt [edit] pending" in tool
    verbose = invoke("frames", "run:1", "seq:1", "-v", "--db", str(db)).output.splitlines()
    assert len(verbose) == 2 and json.loads(verbose[1].strip())["method"] == "initialize"


def test_frames_formats(sdk_recording: tuple[Path, str]) -> None:
    db, session = sdk_recording
    lines = invoke("frames", "run:1", "--jsonl", "--db", str(db)).output.splitlines()
    objects = [json.loads(line) for line in lines]
    assert [o["seq"] for o in objects] == sorted(o["seq"] for o in objects)
    assert objects[0]["method"] == "initialize" and objects[0]["raw"].startswith('{"jsonrpc"')
    assert json.loads(invoke("frames", "run:1", "--json", "--db", str(db)).output) == objects
    raw = CliRunner().invoke(cli, ["frames", "run:1", "dir:c2a", "--raw", "--db", str(db)]).stdout_bytes
    assert raw.endswith(b"\n") and raw.count(b"\n") == len([o for o in objects if o["dir"] == "c2a"])
    replayed = invoke("frames", "replay", "--jsonl", "--db", str(db)).output.splitlines()
    assert replayed and all(json.loads(line)["run_id"] == 2 for line in replayed)
    bad = fails("frames", "kind:requst", "--db", str(db))
    assert "did you mean request" in bad and "at column 6 in 'kind:requst'" in bad
    assert session[:6] in invoke("frames", f"session:{session[:6]}", "--db", str(db)).output


def seqs(db: Path, *words: str) -> list[tuple[int, int]]:
    out = invoke("frames", "--db", str(db), "--jsonl", *words).output.splitlines()
    return [(json.loads(line)["run_id"], json.loads(line)["seq"]) for line in out]


@pytest.mark.parametrize(
    ("words", "as_written"),
    [
        (["-update:agent_message_chunk"], "-update:agent_message_chunk"),
        (["run:1", "-kind:request", "-dir:stderr"], "run:1 -kind:request -dir:stderr"),
        (["-(method:session/update OR dir:stderr)", "run:2"], "-(method:session/update OR dir:stderr) run:2"),
        (["-replay", "run:2"], "-replay run:2"),
        (["-note:stripped", "-n", "5"], "-note:stripped"),  # -note is the term; -n the option
        (['-"hello"'], '-"hello"'),
    ],
)
def test_a_leading_minus_is_a_negated_term_not_an_option(
    sdk_recording: tuple[Path, str], words: list[str], as_written: str
) -> None:
    db, _ = sdk_recording
    found = seqs(db, *words)
    assert found == seqs(db, "--", as_written)[: len(found)] and found
    everything = seqs(db)
    assert len(found) < len(everything) or "-n" in words


def test_options_still_work_around_filter_words(sdk_recording: tuple[Path, str]) -> None:
    db, _ = sdk_recording
    assert seqs(db, "run:1", "-n", "3") == [(1, 1), (1, 2), (1, 3)]
    assert seqs(db, "-n3", "run:1") == [(1, 1), (1, 2), (1, 3)]
    assert seqs(db, "--limit=2", "-kind:request") == [(1, 2), (1, 4)]
    assert "no such option" in fails("frames", "--db", str(db), "--nope").lower()


def test_stats(sdk_recording: tuple[Path, str]) -> None:
    db, _ = sdk_recording
    report = json.loads(invoke("stats", "1", "--json", "--db", str(db)).output)
    methods = {(m["method"], m["dir"]): m for m in report["latency"]}
    assert methods[("session/prompt", "c2a")]["count"] == 1
    assert methods[("session/request_permission", "a2c")]["p50_ms"] > 0
    assert report["unanswered"] == [] and report["errors"] == []
    sections = [json.loads(line)["section"] for line in invoke("stats", "--jsonl", "--db", str(db)).output.splitlines()]
    assert sections == ["latency", "turns", "unanswered", "errors"]
    assert "Latency" in invoke("stats", "--db", str(db)).output


def test_tail_from_start_stops_after_count(sdk_recording: tuple[Path, str]) -> None:
    db, _ = sdk_recording
    lines = invoke("tail", "--from-start", "--count", "3", "--jsonl", "--db", str(db)).output.splitlines()
    assert [json.loads(line)["seq"] for line in lines] == [1, 2, 3]
    negated = invoke("tail", "--from-start", "-c", "2", "-kind:request", "--jsonl", "--db", str(db)).output
    assert [json.loads(line)["kind"] for line in negated.splitlines()] == ["response", "response"]
    array = json.loads(invoke("tail", "--from-start", "-c", "2", "--json", "--db", str(db)).output)
    assert [f["seq"] for f in array] == [1, 2]


def test_tail_with_a_timeout_ends(sdk_recording: tuple[Path, str]) -> None:
    db, _ = sdk_recording
    quiet = invoke("tail", "--timeout", "0.3", "--interval", "0.05", "--db", str(db))
    assert quiet.exit_code == 0 and quiet.stdout == ""
    short = CliRunner().invoke(cli, ["tail", "--timeout", "0.3", "--interval", "0.05", "-c", "1", "--db", str(db)])
    assert short.exit_code == 1  # --count frames never came


def test_export_jsonl_and_conductor_trace(sdk_recording: tuple[Path, str], tmp_path: Path) -> None:
    db, session = sdk_recording
    out = tmp_path / "session.jsonl"
    result = CliRunner().invoke(cli, ["export", session, "-o", str(out), "--db", str(db)])
    assert result.exit_code == 0
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    header, *frames = [json.loads(line) for line in out.read_text().splitlines()]
    assert header["acp_proxy_export"] == 1 and "secrets are masked" in header["warning"]
    assert {f["run_id"] for f in frames} == {1, 2}
    recorded = {(r["run_id"], r["seq"]): r["raw"] for r in map(json.loads, lines_of("frames", "--jsonl", db))}
    assert all(f["raw"] == recorded[f["run_id"], f["seq"]] for f in frames)  # no secret: byte for byte
    trace = tmp_path / "trace.jsons"
    CliRunner().invoke(cli, ["export", "1", "--format", "jsons", "-o", str(trace), "--db", str(db)])
    events = [json.loads(line) for line in trace.read_text().splitlines()]
    assert events[0]["type"] == "request" and events[0]["method"] == "initialize"
    assert {e["type"] for e in events} >= {"request", "response", "notification"}
    assert all(e["from"] in ("client", "agent") for e in events if e["type"] != "trace")


def test_a_session_export_starts_each_run_with_its_setup(sdk_recording: tuple[Path, str]) -> None:
    db, session = sdk_recording
    _, *frames = [
        json.loads(line) for line in invoke("export", session_label(session, 6), "--db", str(db)).stdout.splitlines()
    ]
    by_run = {run: [(f["dir"], f["kind"], f["method"]) for f in frames if f["run_id"] == run] for run in (1, 2)}
    assert by_run[1][:4] == [
        ("c2a", "request", "initialize"),
        ("a2c", "response", "initialize"),
        ("c2a", "request", "session/new"),
        ("a2c", "response", "session/new"),
    ]
    assert by_run[2][:3] == [
        ("c2a", "request", "initialize"),
        ("a2c", "response", "initialize"),
        ("c2a", "request", "session/load"),
    ]
    # Every response in it answers a request that is in it too: nothing orphaned.
    seqs_in = {(f["run_id"], f["seq"]) for f in frames}
    assert all((f["run_id"], f["request_seq"]) in seqs_in for f in frames if f.get("request_seq"))


def test_export_all(sdk_recording: tuple[Path, str]) -> None:
    db, _ = sdk_recording
    header, *frames = [json.loads(line) for line in invoke("export", "all", "--db", str(db)).stdout.splitlines()]
    assert header["resolved"] == "every run" and [r["id"] for r in header["runs"]] == [1, 2]
    total = sum(r["frames"] for r in header["runs"])
    assert len(frames) == total and [(f["run_id"], f["seq"]) for f in frames] == sorted(
        (f["run_id"], f["seq"]) for f in frames
    )


def test_sql_reads(sdk_recording: tuple[Path, str]) -> None:
    db, _ = sdk_recording
    rows = json.loads(
        invoke("sql", "select count(*) as n from frames where run_id = ?", "1", "--json", "--db", str(db)).output
    )
    assert rows[0]["n"] > 10
    info = json.loads(invoke("sql", "pragma table_info(runs)", "--json", "--db", str(db)).output)
    assert "argv" in [row["name"] for row in info]
    three = invoke(
        "sql",
        "with recursive n(x) as (values(1) union all select x+1 from n where x<3) select x from n",
        "--db",
        str(db),
    )
    assert three.output.split() == ["x", "1", "2", "3"]


@pytest.mark.parametrize(
    "args",
    [["show", "nope"], ["show", "999"], ["stats", "zzz"], ["export", "nope"], ["check", "run:7"], ["diff", "1", "x"]],
)
def test_bad_reference_is_one_line_and_exit_2(sdk_recording: tuple[Path, str], args: list[str]) -> None:
    db, _ = sdk_recording
    fails(*args, "--db", str(db))


def test_a_number_is_a_run_never_a_session_prefix(sdk_recording: tuple[Path, str]) -> None:
    db, session = sdk_recording
    digits = next((n for n in range(3, 10) if not session.startswith(str(n))), 9)
    said = fails("show", str(digits), "--db", str(db))
    hint = f"for a session whose id starts with {digits}, write session:{digits}"
    assert said == f"acp-proxy: no run {digits} (runs are 1..2; {hint})\n"
    huge = fails("show", "9" * 40, "--db", str(db))
    assert huge.startswith("acp-proxy: no run 9999")
    assert invoke("show", f"session:{session[:5]}", "--db", str(db)).output.startswith(f"Session {session}")
    assert invoke("show", "run:1", "--db", str(db)).output.startswith("Run 1 ·")


@pytest.mark.parametrize("command", ["runs", "sessions", "frames", "stats", "sql select 1", "show last", "check"])
def test_missing_database_is_one_line_and_exit_2(tmp_path: Path, command: str) -> None:
    said = fails(*command.split(), "--db", str(tmp_path / "absent.db"))
    assert said == f"acp-proxy: no database at {tmp_path / 'absent.db'} (record one with: acp-proxy run -- AGENT)\n"
    assert not (tmp_path / "absent.db").exists()


def all_commands() -> list[str]:
    return sorted(cli.commands)


@pytest.mark.parametrize("name", all_commands())
def test_every_command_has_help_with_an_example_and_is_in_the_readme(name: str) -> None:
    result = invoke(name, "--help")
    assert result.exit_code == 0
    assert result.output.startswith("Usage: ")
    command = cli.commands[name]
    assert re.search(r"acp-proxy " + re.escape(name), command.help or ""), f"{name}: no example in --help"
    assert f"acp-proxy {name}" in README.read_text(), f"{name} is not documented in README.md"


@pytest.mark.spawns
def test_replay_client_prints_the_new_run(tmp_path: Path) -> None:
    """Covered end to end in test_replay_client; here: the run id comes from the proxy's pid."""
    from acp_proxy.store import database as store
    from tests.conftest import run_proxy

    db = tmp_path / "rec.db"
    assert run_proxy(["run", "--db", str(db), "--", "true"]).returncode == 0
    reader = store.open_for_reading(db)
    (pid,) = reader.execute("select proxy_pid from runs").fetchone()
    from acp_proxy.cli.commands import _run_of_proxy

    assert _run_of_proxy(db, pid) == 1
    assert _run_of_proxy(db, pid + 1_000_000) is None


@pytest.mark.spawns
def test_tail_follows_a_run_while_it_is_recorded(tmp_path: Path) -> None:
    """`tail` in one process, a proxy recording in another: the frames show up as they land."""
    import subprocess

    from tests.conftest import PROXY, proxy_env, run_proxy

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


def lines_of(command: str, option: str, db: Path) -> list[str]:
    return invoke(command, option, "--db", str(db)).stdout.splitlines()


def test_exports_mask_secrets_unless_told_not_to(tmp_path: Path) -> None:
    from tests.web_support import SECRETS, synthetic_db

    db = synthetic_db(tmp_path / "secrets.db")
    for fmt in ("jsonl", "jsons", "inspector"):
        masked = invoke("export", "1", "--format", fmt, "--db", str(db))
        assert masked.exit_code == 0, masked.output
        assert not [name for name, secret in SECRETS.items() if secret.split()[-1] in masked.stdout], fmt
        assert "[redacted]" in masked.stdout and "secrets are masked" in masked.stderr
    whole = invoke("export", "1", "--no-redact", "--db", str(db))
    assert all(secret in whole.stdout for name, secret in SECRETS.items() if name != "stderr")
    assert "nothing is redacted" in whole.stderr
    more = invoke("export", "1", "--redact", "re:edit a file", "--db", str(db)).stdout
    assert "edit a file" in whole.stdout and "edit a file" not in more
    header = json.loads(invoke("export", "1", "--db", str(db)).stdout.splitlines()[0])
    assert SECRETS["key"] not in json.dumps(header)  # argv and the runs' JSON columns too
    bad = CliRunner().invoke(cli, ["export", "1", "--redact", "re:", "--db", str(db)])
    assert bad.exit_code == 2 and bad.stderr.startswith("acp-proxy: ") and bad.stderr.count("\n") == 1
