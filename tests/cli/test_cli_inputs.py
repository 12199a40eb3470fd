"""Every bad input is one line on stderr and exit 2, and nothing escapes: database paths are
files (never URIs, never FIFOs), `sql` only reads, numbers are bounded, recorded text renders.

The cases the issue measured are here one by one; ``test_garbage_inputs`` throws generated ones.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from acp_proxy.cli.commands import cli
from acp_proxy.store import database as store
from tests.conftest import PROXY, proxy_env, python_agent, run_proxy


def refused(*args: str, env: dict[str, str] | None = None) -> str:
    """In-process: exit 2, one line on stderr prefixed acp-proxy:, nothing on stdout."""
    result = CliRunner(env=env).invoke(cli, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code == 2, (result.exit_code, result.output)
    assert result.stdout == "", result.stdout
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("acp-proxy: "), result.stderr
    return result.stderr


def refused_in_a_process(*args: str, env: dict[str, str] | None = None, timeout: float = 30) -> str:
    done = run_proxy(list(args), env=env, timeout=timeout)
    assert done.returncode == 2, done.stderr
    assert done.stdout == b""
    text = done.stderr.decode("utf-8", "replace")
    assert text.count("\n") == 1 and text.startswith("acp-proxy: ") and "Traceback" not in text, text
    return text


@pytest.fixture
def victim(sdk_recording: tuple[Path, str], tmp_path: Path) -> Path:
    """A copy of the SDK recording named `victim`, with another file next to it."""
    path = tmp_path / "victim"
    shutil.copy(sdk_recording[0], path)
    return path


def frames_count(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        return conn.execute("select count(*) from frames").fetchone()[0]


# -- the database path is a file name --------------------------------------------------------


@pytest.mark.parametrize("suffix", ["#x", "?mode=rw", "?mode=rwc#", "%00"])
def test_a_db_path_is_never_read_as_a_uri(victim: Path, suffix: str) -> None:
    before = frames_count(victim)
    said = refused("sql", "--db", f"{victim}{suffix}", "drop table frames")
    assert said == f"acp-proxy: no database at {victim}{suffix} (record one with: acp-proxy run -- AGENT)\n"
    assert frames_count(victim) == before
    assert not Path(f"{victim}{suffix}").exists()


def test_a_percent_in_a_db_path_names_that_file_not_another(victim: Path) -> None:
    other = victim.parent / "A.db"
    shutil.copy(victim, other)
    refused("runs", "--db", str(victim.parent / "%41.db"))  # %41 is "A" in a URI: must not read A.db
    named = victim.parent / "%41.db"
    shutil.copy(victim, named)
    result = CliRunner().invoke(cli, ["runs", "--json", "--db", str(named)])
    assert result.exit_code == 0 and len(json.loads(result.stdout)) == 2


def test_a_db_name_with_every_uri_character_opens(victim: Path) -> None:
    odd = victim.parent / "a #?%&=+;b.db"
    shutil.copy(victim, odd)
    result = CliRunner().invoke(cli, ["sql", "--db", str(odd), "--json", "select count(*) as n from runs"])
    assert json.loads(result.stdout) == [{"n": 2}]


def test_the_testing_api_opens_the_same_file(victim: Path) -> None:
    from acp_proxy.testing import ProxiedAgent

    odd = victim.parent / "rec #1?.db"
    shutil.copy(victim, odd)
    assert len(ProxiedAgent(["true"], db=odd).runs()) == 2


def test_a_directory_or_device_is_not_a_database(tmp_path: Path) -> None:
    assert "is a directory, not a database file" in refused("runs", "--db", str(tmp_path))
    assert "is a device, not a database file" in refused("frames", "--db", os.devnull)


@pytest.mark.spawns
def test_a_fifo_as_db_is_refused_without_hanging(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert "is a FIFO, not a database file" in refused("runs", "--db", str(fifo))
    # In a real process too, bounded: opening a FIFO for reading would block for ever.
    assert "is a FIFO" in refused_in_a_process("runs", "--db", str(fifo))
    assert "is a FIFO" in refused_in_a_process("run", "--db", str(fifo), "--", "true")
    assert "is a FIFO" in refused_in_a_process("tail", "--db", str(fifo))


def test_a_db_path_that_is_not_utf8_is_one_line(tmp_path: Path) -> None:
    name = os.fsdecode(bytes(tmp_path) + b"/\xff.db")
    assert "not valid UTF-8" in refused("runs", "--db", name)


# -- sql only reads ----------------------------------------------------------------------------

REFUSED_SQL = {
    "vacuum into": "VACUUM INTO '{dir}/copy.db'",
    "attach": "ATTACH '{dir}/attached.db' AS x",
    "attach memory": "ATTACH ':memory:' AS x",
    "pragma write": "PRAGMA user_version = 99",
    "pragma journal": "PRAGMA journal_mode = DELETE",
    "pragma optimize": "PRAGMA optimize",
    "insert": "INSERT INTO runs (started_ns, status) VALUES (1, 'x')",
    "delete": "DELETE FROM frames",
    "with delete": "WITH x AS (SELECT 1) DELETE FROM frames",
    "update": "UPDATE runs SET status = 'x'",
    "drop": "DROP TABLE frames",
    "create temp table": "CREATE TEMP TABLE t (x)",
    "create temp view": "CREATE TEMP VIEW v AS SELECT 1",
    "create table": "CREATE TABLE t (x)",
    "alter": "ALTER TABLE runs ADD COLUMN x",
    "reindex": "REINDEX",
    "analyze": "ANALYZE",
    "vacuum": "VACUUM",
    "begin": "BEGIN",
    "savepoint": "SAVEPOINT s",
    "detach": "DETACH main",
    "load_extension": "SELECT load_extension('/nonexistent')",
}


@pytest.mark.parametrize("name", sorted(REFUSED_SQL))
def test_sql_refuses_anything_but_reading(victim: Path, name: str) -> None:
    statement = REFUSED_SQL[name].format(dir=victim.parent)
    said = refused("sql", "--db", str(victim), statement)
    assert "refused" in said and "only reads" in said
    # No file created (a reader of a WAL database shares its -wal and -shm files; nothing else).
    assert {p.name for p in victim.parent.iterdir()} <= {"victim", "victim-wal", "victim-shm"}
    with sqlite3.connect(victim) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == store.SCHEMA_VERSION
        assert conn.execute("select count(*) from runs where status = 'x'").fetchone()[0] == 0


@pytest.mark.parametrize("name", sorted(REFUSED_SQL))
def test_each_guard_of_the_sql_reader_holds_on_its_own(victim: Path, name: str) -> None:
    """Below the first-word check, the connection itself refuses: authorizer, query_only, no
    attachments, read-only file."""
    statement = REFUSED_SQL[name].format(dir=victim.parent)
    reader = store.SqlReader(victim)
    try:
        with pytest.raises(sqlite3.Error):
            reader.conn.execute(statement).fetchall()
    finally:
        reader.close()
    assert not (victim.parent / "copy.db").exists() and not (victim.parent / "attached.db").exists()


def test_sql_errors_are_one_line(victim: Path) -> None:
    assert "SQL error" in refused("sql", "--db", str(victim), "select nope from frames")
    assert "SQL error" in refused("sql", "--db", str(victim), "select 1; select 2")
    assert "SQL error" in refused("sql", "--db", str(victim), "select ?", "1", "2")
    nothing = CliRunner().invoke(cli, ["sql", "--db", str(victim), "pragma table_info(nope)"])
    assert nothing.exit_code == 0 and nothing.stdout == "no rows\n"


# -- numbers and rules: bounded, the same way everywhere -------------------------------------


@pytest.mark.parametrize(
    "option",
    [
        ["--seed", "99999999999999999999999999"],
        ["--seed", "-99999999999999999999999999"],
        ["--grace", "nan"],
        ["--grace", "inf"],
        ["--grace", "-1"],
        ["--grace", "1e400"],
        ["--max-record-bytes", "9" * 400],
        ["--max-record-bytes", "2GB"],
        ["--db-limit", "0"],
        ["--fault", "split=999999999999@1ms"],
        ["--fault", "delay=99999999999999999999d"],
        ["--fault", "duplicate=999999999999"],
        ["--fault", "delay=1e308s"],
        ["--fault", "delay=1s~99999999999h"],
        ["--fault", "error=-99999999999999999999:x"],
        ["--fault", "drop nth=99999999999999999999999"],
        ["--fault", "drop if " + "(" * 5000 + "replay" + ")" * 5000],
        ["--fault", "drop if " + " OR ".join(["kind:request"] * 5000)],
    ],
)
def test_run_options_out_of_bounds_are_one_line_before_the_agent_starts(tmp_path: Path, option: list[str]) -> None:
    marker = tmp_path / "started"
    agent = python_agent(f"open({str(marker)!r}, 'w').close()")
    said = refused("run", "--db", str(tmp_path / "rec.db"), *option, "--", *agent)
    assert "Traceback" not in said
    assert not marker.exists() and not (tmp_path / "rec.db").exists()


def test_run_refuses_a_faults_file_nested_100k_deep(tmp_path: Path) -> None:
    rules = tmp_path / "deep.toml"
    rules.write_text("x = " + "[" * 100_000 + "]" * 100_000 + "\n")
    assert "nest too deeply" in refused("run", "--db", str(tmp_path / "rec.db"), "--faults", str(rules), "--", "true")


@pytest.mark.spawns
def test_run_refuses_a_faults_fifo_without_hanging(tmp_path: Path) -> None:
    fifo = tmp_path / "rules.toml"
    os.mkfifo(fifo)
    said = refused_in_a_process("run", "--db", str(tmp_path / "rec.db"), "--faults", str(fifo), "--", "true")
    assert "not a regular file" in said


@pytest.mark.spawns
def test_a_non_utf8_byte_in_acp_proxy_faults_is_one_line(tmp_path: Path) -> None:
    env = {k.encode(): v.encode() for k, v in proxy_env().items()}
    env[b"ACP_PROXY_FAULTS"] = b"drop if text:\xff"
    done = subprocess.run(
        [*PROXY, "run", "--db", str(tmp_path / "rec.db"), "--", "true"],
        env=env,  # type: ignore[arg-type]
        capture_output=True,
        timeout=30,
    )
    assert done.returncode == 2
    assert done.stderr == b"acp-proxy: bad fault rule: $ACP_PROXY_FAULTS is not UTF-8 text (byte 14 is 0xff)\n"


@pytest.mark.spawns
def test_a_non_utf8_fault_argument_is_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [*PROXY.copy(), "run", "--fault", os.fsdecode(b"drop if text:\xfe"), "--", "true"],
        env=proxy_env(),
        capture_output=True,
        timeout=30,
    )
    assert done.returncode == 2 and done.stderr.count(b"\n") == 1 and b"not valid UTF-8" in done.stderr


@pytest.mark.parametrize(
    "filter_text",
    ["(" * 5000 + "replay" + ")" * 5000, " OR ".join(["kind:request"] * 5000), "-" * 5000 + "replay", "x" * 100_000],
)
def test_filters_too_big_are_one_line(sdk_recording: tuple[Path, str], filter_text: str) -> None:
    said = refused("frames", "--db", str(sdk_recording[0]), "--", filter_text)
    assert said.startswith("acp-proxy: bad filter: ")
    assert len(said) < 400  # the long filter is shown around the mistake, not whole


@pytest.mark.parametrize(
    "args",
    [
        ["runs", "-n", "99999999999999999999999"],
        ["frames", "-n", "-1"],
        ["tail", "--interval", "nan"],
        ["tail", "--interval", "0"],
        ["tail", "--count", "0"],
        ["tail", "--timeout", "inf"],
        ["show", "--turn", "0"],
        ["show", "--turn", "99999999999"],
        ["replay", "1", "--timing", "0.0000001x"],
        ["replay", "1", "--timing", "9" * 400 + "x"],
        ["replay", "1", "--timeout", "nan"],
    ],
)
def test_query_options_out_of_bounds_are_one_line(sdk_recording: tuple[Path, str], args: list[str]) -> None:
    refused(*args, "--db", str(sdk_recording[0]))


# -- any recorded text renders -----------------------------------------------------------------

_ODD_TEXT = r"ESC \\u001b[31mred\\u001b[0m, bidi \\u202e, nul \\u0000, wide 漢字"
_SURROGATE = r"lone \\ud800 surrogate"

_ODD_AGENT = """
import sys
def send(text):
    sys.stdout.buffer.write(text.encode() + b"\\n"); sys.stdout.flush()
def chunk(text):
    send('{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":'
         '{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"' + text + '"}}}}')
for line in sys.stdin:
    if '"initialize"' in line:
        send('{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":1}}')
    elif "session/new" in line:
        send('{"jsonrpc":"2.0","id":1,"result":{"sessionId":"s1"}}')
        chunk("ODD")
        chunk("SURROGATE")
        sys.stdout.buffer.write(b"\\xff\\xfe not utf-8 \\x1b[2J\\n"); sys.stdout.flush()
        sys.stderr.buffer.write(b"stderr \\x1b]0;title\\x07 \\xed\\xa0\\x80\\n"); sys.stderr.flush()
"""


@pytest.mark.spawns
def test_show_and_frames_render_any_recorded_text(tmp_path: Path) -> None:
    db = tmp_path / "odd.db"
    script = tmp_path / "odd_agent.py"
    script.write_text(_ODD_AGENT.replace("ODD", _ODD_TEXT).replace("SURROGATE", _SURROGATE))
    agent = [sys.executable, str(script)]
    client = (
        b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}}\n'
        b'{"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"/w","mcpServers":[]}}\n'
    )
    done = run_proxy(["run", "--db", str(db), "--", *agent], input=client)
    assert done.returncode == 0, done.stderr
    assert frames_count(db) == 8
    for args in (["show"], ["show", "--raw"], ["frames"], ["frames", "-v"], ["show", "--json"], ["frames", "--jsonl"]):
        result = CliRunner().invoke(cli, [*args, "--db", str(db)])
        assert result.exit_code == 0, (args, result.output, result.exception)
        assert "\x1b" not in result.stdout, args  # recorded escape sequences never reach the terminal raw
        assert "\u202e" not in result.stdout and "\x00" not in result.stdout, args
    line = CliRunner().invoke(cli, ["frames", "update:agent_message_chunk", "--db", str(db)]).stdout
    assert "agent: ESC ␛[31mred␛[0m, bidi �, nul ␀, wide 漢字" in line
    # The wire calls a lone surrogate invalid JSON; show still folds the text, and prints it escaped.
    shown = CliRunner().invoke(cli, ["show", "--db", str(db)]).stdout
    assert "lone \\ud800 surrogate" in shown
    assert "stderr ␛]0;title␇" in CliRunner().invoke(cli, ["frames", "dir:stderr", "--db", str(db)]).stdout
    # In a real process, writing to a pipe, too.
    real = subprocess.run([*PROXY, "show", "--db", str(db)], capture_output=True, timeout=30, env=proxy_env())
    assert real.returncode == 0 and real.stderr == b"", real.stderr
    assert b"lone \\ud800 surrogate" in real.stdout


@pytest.mark.spawns
def test_frames_stops_quietly_when_its_reader_goes_away(tmp_path: Path) -> None:
    """`acp-proxy frames | head -3`: no traceback, no broken-pipe noise, exit 0, and it stops
    at once instead of writing every frame."""
    db = tmp_path / "big.db"
    make_frames_db(db, 200_000)
    proc = subprocess.Popen(
        [*PROXY, "frames", "--db", str(db)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=proxy_env()
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        first = [proc.stdout.readline() for _ in range(3)]
        proc.stdout.close()
        assert proc.wait(timeout=60) == 0
        assert proc.stderr.read() == b""
    finally:
        proc.kill()
        proc.wait(timeout=10)
    assert [line.split()[0] for line in first] == [b"1:1", b"1:2", b"1:3"]


def make_frames_db(path: Path, n: int, runs: int = 4) -> None:
    """A database of ``n`` small frames over ``runs`` runs, written directly (fast)."""
    db = store.open_for_writing(path)
    conn = db.conn
    per_run = n // runs
    with conn:
        conn.execute("BEGIN")
        for run in range(1, runs + 1):
            conn.execute(
                "insert into runs (id, started_ns, status, argv, frames) values (?, ?, 'ended', '[\"cat\"]', ?)",
                [run, run * 10**9, per_run],
            )
            conn.executemany(
                "insert into frames (run_id, seq, ts_ns, dir, raw, size, terminated, kind, method) "
                "values (?, ?, ?, ?, ?, 40, 1, 'notification', 'ping')",
                [
                    (run, seq, run * 10**9 + seq, "c2a" if seq % 2 else "a2c", '{"jsonrpc":"2.0","method":"ping"}')
                    for seq in range(1, per_run + 1)
                ],
            )
    conn.close()


if sys.platform == "win32":  # pragma: no cover
    pytest.skip("POSIX paths, FIFOs and devices", allow_module_level=True)


def test_export_and_stderr_file_refuse_what_is_not_a_file(victim: Path, tmp_path: Path) -> None:
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    said = refused("export", "last", "-o", str(fifo), "--db", str(victim))
    assert "is a FIFO, not a file to export to" in said
    assert "no such file or directory" in refused(
        "export", "last", "-o", str(tmp_path / "no" / "x"), "--db", str(victim)
    )
    said = refused_in_a_process("run", "--no-record", "--stderr-file", str(fifo), "--", "true")
    assert "is a FIFO, not a file for --stderr-file" in said


# -- outputs never destroy data (issue 31, item 3) ----------------------------------------------


def test_export_never_writes_over_the_database_in_use(victim: Path) -> None:
    before = victim.read_bytes()
    said = refused("export", "last", "--db", str(victim), "-o", str(victim))
    assert "is the database in use" in said
    said = refused("export", "last", "--db", str(victim), "-o", str(victim), "--force")
    assert "is the database in use" in said
    assert victim.read_bytes() == before and frames_count(victim) > 0


def test_export_never_writes_over_any_sqlite_file(victim: Path, tmp_path: Path) -> None:
    other = tmp_path / "other.sqlite"
    shutil.copy(victim, other)
    before = other.read_bytes()
    said = refused("export", "last", "--db", str(victim), "-o", str(other), "--force")
    assert "is a SQLite database" in said
    assert other.read_bytes() == before
    said = refused_in_a_process("run", "--db", str(victim), "--stderr-file", str(other), "--", "true")
    assert "is a SQLite database" in said
    assert other.read_bytes() == before


def test_export_replaces_only_its_own_files_without_force(victim: Path, tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    said = refused("export", "last", "--db", str(victim), "-o", str(notes))
    assert "not an acp-proxy export: --force replaces it" in said
    assert notes.read_text() == "my notes\n"
    for fmt in ("jsonl", "jsons", "inspector"):  # an export of ours is replaced, any format
        target = tmp_path / f"out.{fmt}"
        for _ in range(2):
            done = CliRunner().invoke(cli, ["export", "last", "--db", str(victim), "-f", fmt, "-o", str(target)])
            assert done.exit_code == 0, done.output
        assert target.stat().st_mode & 0o777 == 0o600
    done = CliRunner().invoke(cli, ["export", "last", "--db", str(victim), "-o", str(notes), "--force"])
    assert done.exit_code == 0, done.output
    assert notes.read_text().startswith('{"acp_proxy_export"')
    assert "--force goes with -o" in refused("export", "last", "--db", str(victim), "--force")
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_a_failed_export_leaves_the_target_as_it_was_and_nothing_else(
    victim: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    target = tmp_path / "out.jsonl"
    assert CliRunner().invoke(cli, ["export", "last", "--db", str(victim), "-o", str(target)]).exit_code == 0
    before = target.read_bytes()
    real_fdopen = os.fdopen

    class FullDisk:
        """The file object, until the disk is full: its third write fails with ENOSPC."""

        def __init__(self, inner: Any) -> None:
            self.inner, self.calls = inner, 0

        def __enter__(self) -> FullDisk:
            return self

        def __exit__(self, *exc: object) -> None:
            self.inner.close()

        def __getattr__(self, name: str) -> Any:
            return getattr(self.inner, name)

        def write(self, data: bytes) -> int:
            self.calls += 1
            if self.calls > 2:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return int(self.inner.write(data))

    monkeypatch.setattr(os, "fdopen", lambda *a, **k: FullDisk(real_fdopen(*a, **k)))
    said = refused("export", "last", "--db", str(victim), "-o", str(target))
    assert f"cannot write {target}: no space left on device" in said
    assert target.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir() if not p.name.startswith("victim")] == ["out.jsonl"]
    fresh = tmp_path / "fresh.jsonl"
    refused("export", "last", "--db", str(victim), "-o", str(fresh))
    assert not fresh.exists()  # no 0-byte (or partial) file left behind


# -- every accepted input means something (issue 31, item 7) -----------------------------------


@pytest.mark.spawns
@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        (["--fault", "inject="], {}, "inject needs a payload"),
        (["--fault", "inject=''"], {}, "inject needs a payload"),
        (["--fault", "drop if finding:schema/*"], {}, "a fault rule cannot select on finding"),
        (["--fault", "drop if method:x or -finding"], {}, "a fault rule cannot select on finding"),
        (["--fault", "drop if fault:dorp"], {}, "not 'dorp'; did you mean drop?"),
        (["--fault", "drop if seq:20..10"], {}, "the range '20..10' is reversed; did you mean seq:10..20?"),
        ([], {"ACP_PROXY_FAULTS": "seed=1; drop if seq:1; seed=2"}, "seed= is given twice"),
        (["--seed", "1", "--seed", "2"], {}, "--seed is given twice"),
    ],
)
def test_fault_rules_that_could_never_mean_anything_are_refused(
    args: list[str], env: dict[str, str], expected: str
) -> None:
    said = refused_in_a_process("run", "--no-record", *args, "--", "true", env=proxy_env(**env))
    assert expected in said


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["frames", "latency:5s..1s"], "reversed; did you mean latency:1s..5s?"),
        (["frames", "fault:nosuch"], "fault takes an action"),
        (["replay", "1", "--timing", "0x"], "did you mean fast?"),
        (["replay", "1", "--timing", "0"], "did you mean fast?"),
    ],
)
def test_query_inputs_that_select_nothing_in_silence_are_refused(victim: Path, args: list[str], expected: str) -> None:
    said = refused(args[0], "--db", str(victim), *args[1:])
    assert expected in said


def test_show_turn_past_the_last_turn_is_an_error(victim: Path) -> None:
    said = refused("show", "1", "--turn", "5", "--db", str(victim))
    assert "--turn 5: run 1 has 1 prompt turn (--turn 1..1)" in said
    shown = CliRunner().invoke(cli, ["show", "1", "--turn", "1", "--db", str(victim)])
    assert shown.exit_code == 0 and "hello world" in shown.stdout, shown.output
