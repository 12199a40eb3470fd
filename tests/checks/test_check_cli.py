"""`acp-proxy check` on real recordings: the official SDK pair is clean; a misbehaving agent is not.

Recordings are made through `acp-proxy run` as real subprocesses (each bounded by a timeout); the
command itself runs in-process with click's CliRunner.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from acp_proxy.cli.commands import cli
from acp_proxy.cli.views import session_label
from tests.conftest import python_agent, run_proxy

pytestmark = pytest.mark.spawns  # every test here starts processes


def invoke(*args: str) -> click.testing.Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.mark.parametrize("ref", ["1", "last", "all"])
def test_sdk_pair_is_clean(sdk_recording: tuple[Path, str], ref: str) -> None:
    db, _ = sdk_recording
    result = invoke("check", ref, "--db", str(db), "--json")
    # Not a single finding, warnings included: the SDK pair keeps every rule checked here.
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == []
    assert "frames/s" in result.stderr and "0 errors" in result.stderr


def test_sdk_session_is_clean_in_a_table(sdk_recording: tuple[Path, str]) -> None:
    db, session = sdk_recording
    result = invoke("check", session_label(session, 8), "--db", str(db))
    assert result.exit_code == 0
    assert "no findings" in result.stdout


@pytest.fixture(scope="module")
def bad_recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An agent that prints a log line on stdout, answers an id nobody sent, and ends a turn
    without answering the prompt."""
    db = tmp_path_factory.mktemp("bad") / "rec.db"
    agent = python_agent(
        "import sys, json\n"
        "def send(m):\n"
        "    sys.stdout.write(json.dumps(m) + '\\n'); sys.stdout.flush()\n"
        "for line in sys.stdin:\n"
        "    m = json.loads(line)\n"
        "    if m.get('method') == 'initialize':\n"
        "        print('Loading model...', flush=True)\n"
        "        send({'jsonrpc': '2.0', 'id': m['id'], 'result': {'protocolVersion': 1}})\n"
        "        send({'jsonrpc': '2.0', 'id': 99, 'result': {}})\n"
    )
    client = b"".join(
        json.dumps(m).encode() + b"\n"
        for m in (
            {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}},
            {"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": "/w", "mcpServers": []}},
        )
    )
    done = run_proxy(["run", "--db", str(db), "--", *agent], input=client, timeout=60)
    assert done.returncode == 0, done.stderr
    return db


def test_errors_exit_1_with_rules_and_frames(bad_recording: Path) -> None:
    result = invoke("check", "last", "--db", str(bad_recording), "--json")
    assert result.exit_code == 1
    found = json.loads(result.stdout)
    # In frame order: the session/new request (seq 2) is the one never answered.
    assert [(f["rule_id"], f["severity"]) for f in found] == [
        ("jsonrpc/unanswered", "warning"),
        ("jsonrpc/not-json", "error"),
        ("jsonrpc/unknown-id", "error"),
    ]
    assert all(f["run_id"] == 1 and isinstance(f["seq"], int) and f["spec"] for f in found)
    table = invoke("check", "last", "--db", str(bad_recording))
    assert table.exit_code == 1
    assert "jsonrpc/not-json" in table.stdout and "1 errors" not in table.stderr
    assert "2 errors, 1 warnings" in table.stderr


def test_save_writes_findings_rows(bad_recording: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy.db"
    copy.write_bytes(bad_recording.read_bytes())
    for _ in range(2):  # a second check replaces the first one's rows
        assert invoke("check", "1", "--db", str(copy), "--save").exit_code == 1
    with sqlite3.connect(copy) as conn:
        rows = conn.execute("select run_id, rule, severity from findings order by id").fetchall()
    assert rows == [
        (1, "jsonrpc/unanswered", "warning"),
        (1, "jsonrpc/not-json", "error"),
        (1, "jsonrpc/unknown-id", "error"),
    ]
    runs = json.loads(invoke("runs", "--db", str(copy), "--json").output)
    assert runs[0]["findings"] == 3

    # The frames command selects by them: any finding, a rule pattern, a severity.
    def seqs(*words: str) -> list[int]:
        return [f["seq"] for f in json.loads(invoke("frames", "--db", str(copy), "--json", "--", *words).stdout)]

    unanswered, not_json, unknown_id = (r[0] for r in conn_rows(copy))
    assert seqs("finding") == sorted([unanswered, not_json, unknown_id])
    assert seqs("finding:jsonrpc/un*") == sorted([unanswered, unknown_id])
    assert seqs("finding:warning") == [unanswered]
    assert unknown_id not in seqs("-finding:error")


def conn_rows(db: Path) -> list[tuple[int]]:
    with sqlite3.connect(db) as conn:
        return conn.execute("select seq from findings order by id").fetchall()


def test_unknown_ref_is_one_line(sdk_recording: tuple[Path, str]) -> None:
    db, _ = sdk_recording
    result = CliRunner().invoke(cli, ["check", "nope", "--db", str(db)])
    assert result.exit_code == 2  # bad input: 1 is kept for "the recording has errors"
    assert result.stdout == ""
    assert result.stderr.startswith("acp-proxy: no run or session matches 'nope'") and result.stderr.count("\n") == 1


# -- `acp-proxy run --check`: the same rules, live ----------------------------------------------

_LIVE_AGENT = python_agent(
    "import sys, json\n"
    "def send(m):\n"
    "    sys.stdout.write(json.dumps(m) + '\\n'); sys.stdout.flush()\n"
    "for line in sys.stdin:\n"
    "    m = json.loads(line)\n"
    "    if m.get('method') == 'initialize':\n"
    "        print('Loading model...', flush=True)\n"
    "        send({'jsonrpc': '2.0', 'id': m['id'], 'result': {'protocolVersion': 1}})\n"
    "        send({'jsonrpc': '2.0', 'id': 99, 'result': {}})\n"
    "    elif m.get('method') == 'session/new':\n"
    "        send({'jsonrpc': '2.0', 'id': m['id'], 'result': {'sessionId': 's1'}})\n"
    # A text content block without its text: only schema validation can see this one.
    "        send({'jsonrpc': '2.0', 'method': 'session/update', 'params': {'sessionId': 's1',\n"
    "              'update': {'sessionUpdate': 'agent_message_chunk', 'content': {'type': 'text'}}}})\n"
)
_LIVE_CLIENT = b"".join(
    json.dumps(m).encode() + b"\n"
    for m in (
        {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}},
        {"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": "/w", "mcpServers": []}},
    )
)


@pytest.mark.parametrize(
    ("option", "expected"),
    [
        (
            "--check",
            [
                ("jsonrpc/not-json", "error", "invalid", None),
                ("jsonrpc/unknown-id", "error", "response", "99"),
                ("schema/update", "error", "notification", None),
            ],
        ),
        # Lifecycle rules only: the chunk's missing text goes unreported.
        (
            "--check=lifecycle",
            [
                ("jsonrpc/not-json", "error", "invalid", None),
                ("jsonrpc/unknown-id", "error", "response", "99"),
            ],
        ),
    ],
)
def test_run_check_reports_live_without_changing_the_relay(
    tmp_path: Path, option: str, expected: list[tuple[str, str, str, str | None]]
) -> None:
    plain = run_proxy(["run", "--db", str(tmp_path / "plain.db"), "--", *_LIVE_AGENT], input=_LIVE_CLIENT)
    checked_db = tmp_path / "checked.db"
    checked = run_proxy(["run", "--db", str(checked_db), option, "--", *_LIVE_AGENT], input=_LIVE_CLIENT)
    assert plain.returncode == checked.returncode == 0, checked.stderr
    # What the client got is the same, byte for byte: checking never touches the forwarded bytes.
    assert checked.stdout == plain.stdout
    assert b"Loading model..." in checked.stdout
    assert b"acp-proxy: check:" not in plain.stderr
    said = [line for line in checked.stderr.decode().splitlines() if line.startswith("acp-proxy: check: ")]
    assert [line.split()[3] for line in said] == [rule for rule, *_ in expected]
    assert all(line.split()[2] == "error" for line in said)
    with sqlite3.connect(checked_db) as conn:
        rows = conn.execute(
            "select x.rule, x.severity, f.kind, f.rpc_id, x.seq, x.spec"
            " from findings x join frames f on f.run_id = x.run_id and f.seq = x.seq"
            " order by x.id"
        ).fetchall()
        unlinked = conn.execute(
            "select count(*) from findings x"
            " where not exists (select 1 from frames f where f.run_id = x.run_id and f.seq = x.seq)"
        ).fetchone()[0]
    # Every finding row points at its frame; the stderr line names the same seq.
    assert unlinked == 0
    assert [row[:4] for row in rows] == expected
    assert [f"at frame {row[4]}:" in line for row, line in zip(rows, said, strict=True)] == [True] * len(rows)
    assert all(row[5] for row in rows)
    # The recorded findings are the ones `acp-proxy check` finds afterwards.
    later = json.loads(invoke("check", "last", "--db", str(checked_db), "--json", "--no-schema").stdout)
    assert {(f["rule_id"], f["seq"]) for f in later} >= {(r[0], r[4]) for r in rows if r[0].startswith("jsonrpc/")}


# -- many recordings: `check all --jobs N` ----------------------------------------------------------


@pytest.fixture(scope="module")
def many_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Six runs recorded by the real recorder, each breaking different rules (the rule cases)."""
    from acp_proxy.record import journal
    from tests.checks import test_checks as crafted
    from tests.web_support import record

    db = tmp_path_factory.mktemp("many") / "rec.db"
    directions = {"c2a": journal.C2A, "a2c": journal.A2C}
    picked = [c for c in crafted.CASES if not c[0].startswith("turn/")][:6]
    for _rule, broken, _mended in picked:
        traffic = [(directions[d], (m if isinstance(m, bytes) else json.dumps(m).encode()) + b"\n") for d, m in broken]
        record(db, traffic)
    return db


def test_jobs_give_the_findings_of_one_process_in_run_order(many_runs: Path) -> None:
    alone = invoke("check", "all", "--jobs", "1", "--db", str(many_runs), "--json")
    parallel = invoke("check", "all", "--jobs", "3", "--db", str(many_runs), "--json")
    assert parallel.exit_code == alone.exit_code == 1
    found = json.loads(parallel.stdout)
    assert found == json.loads(alone.stdout)
    runs = [f["run_id"] for f in found]
    assert len(set(runs)) >= 5 and runs == sorted(runs)
    # The same frames counted, the same totals ("checked N frames in ...s (...): 3 errors, ...").
    assert parallel.stderr.split(" in ")[0] == alone.stderr.split(" in ")[0]
    assert parallel.stderr.split("): ")[1] == alone.stderr.split("): ")[1]


def test_jobs_must_be_auto_or_a_bounded_count(many_runs: Path) -> None:
    for bad in ("0", "9", "-1", "many", "1e9", "9" * 50):
        result = invoke("check", "all", "--jobs", bad, "--db", str(many_runs))
        assert result.exit_code == 2 and "Traceback" not in result.output, bad
        assert "is not auto or a whole number from 1 to 8" in result.stderr, result.stderr
    auto = invoke("check", "all", "--jobs", "AUTO", "--db", str(many_runs), "--json")
    assert auto.exit_code == 1 and json.loads(auto.stdout)


def test_auto_jobs_is_one_process_for_little_work_and_one_per_cpu_for_much(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from acp_proxy.limits import CHECK_AUTO_JOBS_FRAMES as ENOUGH
    from acp_proxy.read.conformance import auto_jobs

    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1, 2, 3}, raising=False)
    assert auto_jobs(runs=1, frames=10 * ENOUGH) == 1  # one run: one process, whatever its size
    assert auto_jobs(runs=50, frames=ENOUGH - 1) == 1  # little work: a worker's start-up costs more
    assert auto_jobs(runs=50, frames=ENOUGH) == 4  # one per CPU this process may use
    assert auto_jobs(runs=3, frames=ENOUGH) == 3  # never more than there are runs
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: set(range(64)), raising=False)
    assert auto_jobs(runs=500, frames=ENOUGH) == 8  # bounded
