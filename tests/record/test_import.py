"""Importers: logs of other tools (and acp-proxy's own exports) become runs that every command reads.

Round trips use a real recording of the official SDK pair (``sdk_recording``): export -> import ->
export gives the same file for acp-proxy's own formats, and an imported run answers ``show``,
``check``, ``stats``, ``diff`` and ``replay`` like the original.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from acp_proxy.cli import import_command
from acp_proxy.cli.commands import cli
from acp_proxy.record import importers
from acp_proxy.record.importers import ImportFormatError, Record, parser_for, write_run
from tests.peers import client_argv, peer_env, transcript

FRAME_FIELDS_NOT_COPIED = ("run_id",)


def invoke(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def export(db: Path, ref: str, fmt: str, out: Path) -> bytes:
    result = invoke("export", "--db", str(db), ref, "--format", fmt, "-o", str(out))
    assert result.exit_code == 0, result.output
    return out.read_bytes()


def import_log(db: Path, path: Path, *extra: str) -> int:
    result = invoke("import", "--db", str(db), *extra, str(path))
    assert result.exit_code == 0, result.output
    return int(result.stdout.split()[-1])


def frame_lines(data: bytes) -> list[dict[str, Any]]:
    """The frame objects of a jsonl export, without the columns that name the run."""
    out = []
    for line in data.splitlines()[1:]:
        obj = json.loads(line)
        for name in FRAME_FIELDS_NOT_COPIED:
            obj.pop(name, None)
        out.append(obj)
    return out


def rows(db: Path, sql: str, *params: Any) -> list[dict[str, Any]]:
    conn = sqlite3.connect(db)
    conn.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in conn.execute(sql, params)]
    finally:
        conn.close()


def turns_of(db: Path, run_id: int) -> list[tuple[Any, ...]]:
    return [
        (t["session_id"], t["turn_index"], t["prompt_seq"], t["start_ns"], t["first_output_ns"], t["end_ns"],
         t["stop_reason"], t["status"], t["chunks"], t["tool_calls"], t["permission_requests"])
        for t in rows(db, "select * from turns where run_id = ? order by id", run_id)
    ]  # fmt: skip


@pytest.mark.parametrize("run", ["1", "2"])
def test_jsonl_export_import_export_is_the_same_recording(
    sdk_recording: tuple[Path, str], tmp_path: Path, run: str
) -> None:
    db, _ = sdk_recording
    first = export(db, run, "jsonl", tmp_path / "a.jsonl")
    target = tmp_path / "imported.db"
    run_id = import_log(target, tmp_path / "a.jsonl")
    again = export(target, str(run_id), "jsonl", tmp_path / "b.jsonl")
    assert frame_lines(again) == frame_lines(first)
    # Every line, every column, byte for byte once the run id is set aside.
    assert again.splitlines()[1:] == [
        line.replace(f'"run_id":{run},'.encode(), f'"run_id":{run_id},'.encode()) for line in first.splitlines()[1:]
    ]
    (original,) = rows(db, "select * from runs where id = ?", int(run))
    (imported,) = rows(target, "select * from runs where id = ?", run_id)
    for column in ("argv", "cwd", "started_ns", "ended_ns", "status", "exit_code", "protocol_version", "frames"):
        assert imported[column] == original[column], column
    assert imported["source"] == str((tmp_path / "a.jsonl").resolve())
    assert (imported["source_format"], json.loads(imported["source_unknown"])) == ("jsonl", [])
    assert turns_of(target, run_id) == turns_of(db, int(run))


@pytest.mark.parametrize("fmt", ["jsons", "inspector"])
@pytest.mark.parametrize("run", ["1", "2"])
def test_other_formats_export_import_export_identically(
    sdk_recording: tuple[Path, str], tmp_path: Path, fmt: str, run: str
) -> None:
    db, _ = sdk_recording
    first = export(db, run, fmt, tmp_path / f"a.{fmt}")
    target = tmp_path / "imported.db"
    run_id = import_log(target, tmp_path / f"a.{fmt}")  # --format auto finds it
    assert export(target, str(run_id), fmt, tmp_path / f"b.{fmt}") == first
    (imported,) = rows(target, "select * from runs where id = ?", run_id)
    unknown = json.loads(imported["source_unknown"])
    assert imported["source_format"] == fmt and "stderr" in unknown
    assert ("exact bytes" in " ".join(unknown)) == (fmt == "jsons")
    # Pairing, turns and their counters come out of the recorder as for the live run.
    original_turns = turns_of(db, int(run))
    assert [t[1:3] + t[6:] for t in turns_of(target, run_id)] == [t[1:3] + t[6:] for t in original_turns]


def test_an_imported_run_answers_show_check_stats_and_diff_like_the_original(
    sdk_recording: tuple[Path, str], tmp_path: Path
) -> None:
    db, _ = sdk_recording
    target = tmp_path / "both.db"
    for run in ("1", "2"):
        export(db, run, "jsonl", tmp_path / f"{run}.jsonl")
        import_log(target, tmp_path / f"{run}.jsonl")
    inspector = export(db, "2", "inspector", tmp_path / "2.inspector")
    assert inspector
    third = import_log(target, tmp_path / "2.inspector")

    def body(ref: str, database: Path) -> list[str]:
        lines = invoke("show", "--db", str(database), ref).stdout.splitlines()
        return lines[1:]  # the first line names the run

    assert body("1", target) == body("1", db) and body("2", target) == body("2", db)
    for ref in ("1", "2"):
        checked = invoke("check", "--db", str(target), "--json", ref)
        assert checked.exit_code == 0 and json.loads(checked.stdout) == json.loads(
            invoke("check", "--db", str(db), "--json", ref).stdout
        )
    stats = json.loads(invoke("stats", "--db", str(target), "--json", "2").stdout)
    original = json.loads(invoke("stats", "--db", str(db), "--json", "2").stdout)
    assert [(r["method"], r["count"]) for r in stats["latency"]] == [
        (r["method"], r["count"]) for r in original["latency"]
    ]
    # The same conversation from another format: diff finds nothing to tell apart.
    same = invoke("diff", "--db", str(target), "2", str(third))
    assert same.exit_code == 0, same.output


def test_the_inspector_reads_an_imported_run(sdk_recording: tuple[Path, str], tmp_path: Path) -> None:
    pytest.importorskip("datasette", reason="the [ui] extra (Datasette) is not installed")
    from tests.web_support import app, get_json

    db, _ = sdk_recording
    export(db, "1", "jsons", tmp_path / "1.jsons")
    target = tmp_path / "ui.db"
    run_id = import_log(target, tmp_path / "1.jsons")

    def timeline(page: dict[str, Any]) -> list[tuple[str, Any]]:
        return [(e["entity"], e.get("seq")) for c in page["conversations"] for e in c["timeline"]]

    imported, original = get_json(app(target), f"/runs/{run_id}.json"), get_json(app(db), "/runs/1.json")
    assert timeline(imported) == timeline(original) and len(timeline(original)) > 3


def test_replay_serves_an_imported_run(sdk_recording: tuple[Path, str], tmp_path: Path) -> None:
    import subprocess
    import sys

    db, _ = sdk_recording
    export(db, "1", "inspector", tmp_path / "1.inspector")
    target = tmp_path / "replay.db"
    run_id = import_log(target, tmp_path / "1.inspector")
    replayed = subprocess.run(
        client_argv(
            [sys.executable, "-m", "acp_proxy", "replay", "--db", str(target), str(run_id), "--timing", "fast"],
            "--prompt",
            "hello world",
            timeout=60,
        ),
        capture_output=True,
        text=True,
        timeout=75,
        env=peer_env(),
    )
    lines = transcript(replayed)
    assert "prompt: hello world" in lines and "stop: end_turn" in lines


# -- JetBrains' acp-transport.log ---------------------------------------------------------------


def jetbrains_log(frames: list[dict[str, Any]]) -> str:
    """A log in the documented layout of acp-transport.log: local time with milliseconds, the
    IDE's uptime in brackets, level, category, then ``OUT:`` (IDE -> agent) or ``IN:``."""
    first = frames[0]["ts_ns"]
    lines = ["2025-12-17 11:26:20,001 [    100]   INFO - #c.i.m.l.a.AcpProcess - starting agent"]
    for f in frames:
        # Whole seconds, then milliseconds, in integers: a float timestamp rounds to the nearest
        # microsecond, which moves a frame within 0.5 us of a millisecond into the next one.
        when = dt.datetime.fromtimestamp(f["ts_ns"] // 1_000_000_000)
        stamp = when.strftime("%Y-%m-%d %H:%M:%S,") + f"{f['ts_ns'] // 1_000_000 % 1000:03d}"
        uptime = 12_000 + (f["ts_ns"] - first) // 1_000_000
        marker = "OUT" if f["dir"] == "c2a" else "IN"
        lines.append(f"{stamp} [{uptime:>7}]   FINE - AcpTransport - {marker}: {f['raw']}")
    lines.append("2025-12-17 11:27:00,000 [  52000]   INFO - #c.i.m.l.a.AcpProcess - agent exited")
    return "\n".join(lines) + "\n"


def test_a_jetbrains_log_imports_with_every_frame_paired(sdk_recording: tuple[Path, str], tmp_path: Path) -> None:
    db, session = sdk_recording
    for run in (1, 2):
        frames = rows(db, "select * from frames where run_id = ? and dir != 'stderr' order by seq", run)
        log = tmp_path / f"acp-transport-{run}.log"
        log.write_text(jetbrains_log(frames))
        target = tmp_path / "jb.db"
        result = invoke("import", "--db", str(target), str(log))
        assert result.exit_code == 0, result.output
        assert "skipped 2 line(s)" in result.stderr
        run_id = int(result.stdout.split()[-1])
        pairs = rows(target, "select * from rpc_pairs where run_id = ?", run_id)
        assert pairs and all(p["response_seq"] is not None for p in pairs)
        assert len(pairs) == len(rows(db, "select * from rpc_pairs where run_id = ?", run))
        imported = rows(target, "select * from frames where run_id = ? order by seq", run_id)
        assert [(f["dir"], f["raw"]) for f in imported] == [(f["dir"], f["raw"]) for f in frames]
        # Milliseconds, as the log has them.
        assert [f["ts_ns"] for f in imported] == [f["ts_ns"] // 1_000_000 * 1_000_000 for f in frames]
        (row,) = rows(target, "select * from runs where id = ?", run_id)
        assert row["source_format"] == "jetbrains" and any("time zone" in u for u in json.loads(row["source_unknown"]))
        assert [t[0] for t in turns_of(target, run_id)] == [session]
        assert [t[6] for t in turns_of(target, run_id)] == ["end_turn"]


# -- bad input: one line, no run added --------------------------------------------------------


def run_count(db: Path) -> int:
    return len(rows(db, "select id from runs")) if db.exists() else 0


@pytest.mark.parametrize(
    ("content", "fmt", "expected"),
    [
        (b"", "auto", "cannot tell the format"),
        (b"\x00\xff\xfe garbage \x89PNG\r\n\x1a\n" * 20, "auto", "cannot tell the format"),
        (b"\x00\xff\xfe garbage", "jsonl", "line 1: not JSON"),
        (b'{"acp_proxy_export":1}\n{"dir":"c2a","seq":1,"ra\n{"dir":"a2c","seq":2,"raw":"{}"}', "auto", "line 2"),
        (b'{"ts":1,"direction":"fromClient"', "inspector", "is this an ACP Inspector trace?"),
        (b'{"ts":1,"from":"client","to":"agent"}\n', "jsons", "an event has no `type`"),
        (b'{"ts":1,"type":null,"from":"client"}\n', "jsons", "has `type` null"),
        (b"[1]\n", "jsonl", "an array, not a JSON object; is this an acp-proxy export?"),
        (b'{"ts":1,"direction":"sideways","json":"{}"}\n', "auto", "fromClient or fromAgent"),
        (b'{"ts":1,"type":"request","from":"client","to":"agent"}\n', "auto", "needs `id`"),
        (b'{"ts":-5,"type":"trace","component":"agent","level":"info","message":"x"}\n', "jsons", "out of range"),
        (b"2025-12-17 11:26:25,895 [ 1]   INFO - X - nothing here\n", "jetbrains", "holds no ACP messages (read as a"),
        (
            b'{"acp_proxy_export":2,"runs":[]}\n{"dir":"c2a","seq":1,"raw":"{}"}\n',
            "auto",
            "line 1: a newer acp-proxy wrote this export (format 2; this one reads up to 1)",
        ),
        (b'{"acp_proxy_export":"x"}\n{"dir":"c2a","seq":1,"raw":"{}"}\n', "jsonl", "the export format, a number"),
    ],
)
def test_bad_logs_are_one_line_and_add_no_run(tmp_path: Path, content: bytes, fmt: str, expected: str) -> None:
    log = tmp_path / "bad.log"
    log.write_bytes(content)
    db = tmp_path / "rec.db"
    result = CliRunner().invoke(cli, ["import", "--db", str(db), "--format", fmt, str(log)])
    assert result.exit_code == 2, result.output
    assert expected in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "None" not in result.stderr and " a inspector" not in result.stderr
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert run_count(db) == 0


def test_a_missing_file_is_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["import", "--db", str(tmp_path / "rec.db"), str(tmp_path / "nope.log")])
    assert result.exit_code == 2 and "cannot read" in result.stderr and "Traceback" not in result.output


def test_a_two_gigabyte_line_stops_after_the_line_limit(tmp_path: Path) -> None:
    huge = tmp_path / "huge.log"
    with open(huge, "wb") as out:
        out.write(b'{"ts":1,"direction":"fromClient","json":"')
        out.truncate(2 * 1024**3)  # sparse: two gigabytes of NUL without a newline, no disk used
    for fmt in ("auto", "inspector", "jetbrains"):
        result = CliRunner().invoke(cli, ["import", "--db", str(tmp_path / "rec.db"), "--format", fmt, str(huge)])
        assert result.exit_code == 2, result.output
        assert "longer than" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_the_command_lists_every_importer_format() -> None:
    assert import_command.FORMATS == importers.FORMATS


# -- write_run, through the run it produces ----------------------------------------------------


def test_write_run_records_like_the_recorder_does(tmp_path: Path) -> None:
    db = tmp_path / "rec.db"
    records = [
        Record("c2a", 5_000, b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}'),
        Record("stderr", None, b"agent starting"),
        Record("a2c", 9_000, b'{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":1,"agentInfo":{"name":"a"}}}'),
        Record("c2a", None, b'{"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd":"/w"}}'),
        Record("a2c", 20_000, b"not json at all"),
    ]
    run_id = write_run(db, records, {"source": "x.log", "source_format": "inspector", "source_unknown": ["stderr"]})
    frames = rows(db, "select seq, ts_ns, dir, kind, latency_ns, unanswered, method from frames order by seq")
    assert [(f["seq"], f["ts_ns"], f["dir"], f["kind"]) for f in frames] == [
        (1, 5_000, "c2a", "request"),
        (2, 5_000, "stderr", "stderr"),  # no time of its own: the record before it's
        (3, 9_000, "a2c", "response"),
        (4, 9_000, "c2a", "request"),
        (5, 20_000, "a2c", "invalid"),
    ]
    assert frames[2]["latency_ns"] == 4_000 and frames[2]["method"] == "initialize"
    assert frames[3]["unanswered"] == 1  # the run is over: session/new never got its answer
    (run,) = rows(db, "select * from runs where id = ?", run_id)
    assert (run["started_ns"], run["ended_ns"], run["status"], run["agent_name"]) == (5_000, 20_000, "ended", "a")
    assert (run["frames"], run["stderr_lines"], run["unanswered_requests"]) == (5, 1, 1)
    assert (run["source"], run["source_format"], json.loads(run["source_unknown"])) == (
        "x.log",
        "inspector",
        ["stderr"],
    )


def test_write_run_keeps_a_line_with_a_newline_inside_whole(tmp_path: Path) -> None:
    db = tmp_path / "rec.db"
    write_run(db, [Record("a2c", 1, b'{"a":\n1}'), Record("c2a", 2, b"x")], {})
    assert [(r["seq"], r["raw"]) for r in rows(db, "select seq, raw from frames order by seq")] == [
        (1, '{"a":\n1}'),
        (2, "x"),
    ]


def test_frames_without_a_time_are_said_to_be_so(tmp_path: Path) -> None:
    log = tmp_path / "untimed.jsonl"
    log.write_text(
        '{"direction":"fromClient","json":"{\\"jsonrpc\\":\\"2.0\\",\\"id\\":1,\\"method\\":\\"x\\"}"}\n'
        '{"ts":5,"direction":"fromAgent","json":"{\\"jsonrpc\\":\\"2.0\\",\\"id\\":1,\\"result\\":1}"}\n'
    )
    run_id = import_log(tmp_path / "rec.db", log)
    (run,) = rows(tmp_path / "rec.db", "select * from runs where id = ?", run_id)
    assert "the time of 1 frame(s) (given the time before them)" in json.loads(run["source_unknown"])
    assert [f["ts_ns"] for f in rows(tmp_path / "rec.db", "select ts_ns from frames order by seq")] == [0, 5_000_000]


def test_a_run_of_several_runs_becomes_several_runs(sdk_recording: tuple[Path, str], tmp_path: Path) -> None:
    db, session = sdk_recording
    export(db, session, "jsonl", tmp_path / "session.jsonl")  # the session spans runs 1 and 2
    result = invoke("import", "--db", str(tmp_path / "two.db"), str(tmp_path / "session.jsonl"))
    assert result.exit_code == 0 and result.stdout.split() == ["1", "2"]
    assert invoke("sessions", "--db", str(tmp_path / "two.db"), "--json").stdout.count(session) == 1


# -- totality of every parser ------------------------------------------------------------------

_LINE = st.one_of(
    st.binary(max_size=60),
    st.sampled_from(
        [
            b'{"acp_proxy_export":1,"runs":[{"id":1,"argv":"[\\"a\\"]","started_ns":-1,"seed":1e99}]}',
            b'{"acp_proxy_export":1,"runs":"x"}',
            b'{"dir":"c2a","raw":"{}","ts_ns":99999999999999999999}',
            b'{"dir":"stderr","raw_base64":"!!"}',
            b'{"dir":"a2c","raw":"x","size":-3,"cut":1,"forwarded":"no"}',
            b'{"ts":1e300,"type":"request","from":"client","to":"agent","id":1,"method":"m"}',
            b'{"ts":0.5,"type":"response","from":"agent","to":"client","id":[1],"is_error":false,"payload":1}',
            b'{"ts":2,"type":"notification","from":"proxy:0","to":"agent","method":"x","params":null}',
            b'{"ts":3,"type":"trace","component":"agent","level":"warn","message":"not JSON-RPC: a: b: c"}',
            b'{"ts":"2025-13-45T99:00:00Z","direction":"fromAgent","json":"{}"}',
            b'{"ts":"0001-01-01T00:00:00+14:00","direction":"FROMCLIENT","json":"{}"}',
            b'{"ts":true,"direction":"fromClient","json":5}',
            b'2025-12-17 11:26:25,895 [  12469]   FINE - AcpTransport - OUT: {"jsonrpc":"2.0"}',
            b"9999-99-99 99:99:99,999 [1] FINE - AcpTransport - IN: x",
            b"[]",
            b"null",
        ]
    ),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(importers.FORMATS), st.lists(_LINE, max_size=12))
def test_every_parser_gives_records_or_one_line(fmt: str, lines: list[bytes]) -> None:
    parser = parser_for(fmt)
    try:
        records = list(importers.parse(parser, enumerate(lines, start=1)))
    except ImportFormatError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("line ")
        return
    for record in records:
        assert record.direction in ("c2a", "a2c", "stderr") and isinstance(record.line, bytes)
        assert record.ts_ns is None or 0 <= record.ts_ns < 2**63


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=300))
def test_detection_and_reading_are_total(tmp_path_factory: pytest.TempPathFactory, data: bytes) -> None:
    path = tmp_path_factory.mktemp("bytes") / "log"
    path.write_bytes(data)
    lines = list(importers.read_lines(path))
    assert b"\n".join(line for _, line in lines) == data.removesuffix(b"\n")
    assert importers.detect(iter(lines)) in (None, *importers.FORMATS)


# -- the ACP conductor's namings, and torn last lines ------------------------------------------


def current_conductor_naming(data: bytes, proxies: int = 0) -> bytes:
    """A jsons trace as conductors since January 2026 write it: components by their debug names
    (``Client``, ``Proxy(0)``, ``Agent``); with ``proxies``, each message also crosses that many
    proxies (the hops a chain adds, which the import leaves out)."""
    out = []
    for line in data.splitlines():
        event = json.loads(line)
        if event["type"] == "trace":
            event["component"] = event["component"].capitalize()
            out.append(event)
            continue
        names = ["Client", *[f"Proxy({n})" for n in range(proxies)], "Agent"]
        hops = list(itertools.pairwise(names))
        if event["from"] == "agent":
            hops = [(b, a) for a, b in reversed(hops)]
        for sender, receiver in hops:
            out.append({**event, "from": sender, "to": receiver})
    return b"".join(json.dumps(e, separators=(",", ":")).encode() + b"\n" for e in out)


@pytest.mark.parametrize("proxies", [0, 2])
def test_a_current_conductor_trace_imports_like_the_older_naming(
    sdk_recording: tuple[Path, str], tmp_path: Path, proxies: int
) -> None:
    db, _ = sdk_recording
    older = export(db, "1", "jsons", tmp_path / "older.jsons")
    (tmp_path / "current.jsons").write_bytes(current_conductor_naming(older, proxies))
    target = tmp_path / "imported.db"
    run_id = import_log(target, tmp_path / "current.jsons")
    # Round trip: the run exports to the very trace the older naming gave.
    assert export(target, str(run_id), "jsons", tmp_path / "again.jsons") == older
    assert turns_of(target, run_id) and [t[6] for t in turns_of(target, run_id)] == [t[6] for t in turns_of(db, 1)]


def torn(data: bytes, keep: int = -10) -> bytes:
    """The log as a writer killed in the middle of its last line leaves it (``keep`` bytes of it)."""
    head, _, last = data.rstrip(b"\n").rpartition(b"\n")
    return head + b"\n" + last[:keep]


@pytest.mark.parametrize("fmt", ["jsonl", "jsons", "conductor-log", "inspector", "jetbrains", "jetbrains-head"])
def test_a_torn_last_line_is_left_out_with_one_warning(
    sdk_recording: tuple[Path, str], tmp_path: Path, fmt: str
) -> None:
    db, _ = sdk_recording
    if fmt.startswith("jetbrains"):
        frames = rows(db, "select * from frames where run_id = 1 and dir != 'stderr' order by seq")
        whole = jetbrains_log(frames).encode()
        whole = whole[: whole.rstrip(b"\n").rfind(b"\n") + 1]  # the last frame ends the log
    elif fmt == "conductor-log":
        frames = rows(db, "select * from frames where run_id = 1 order by seq")
        whole = conductor_debug_log(frames, "2026-01-10T12:00:00+00:00")
    else:
        whole = export(db, "1", fmt, tmp_path / f"whole.{fmt}")
    # jetbrains-head: cut in the line's head, before its "IN:" marker
    (tmp_path / "torn.log").write_bytes(torn(whole, 58 if fmt == "jetbrains-head" else -10))
    target = tmp_path / "imported.db"
    result = invoke("import", "--db", str(target), str(tmp_path / "torn.log"))
    assert result.exit_code == 0, result.output
    lines = whole.rstrip(b"\n").split(b"\n")
    warnings = [line for line in result.stderr.splitlines() if "cut short" in line]
    assert warnings == [f"acp-proxy: line {len(lines)} of {tmp_path / 'torn.log'} is cut short "
                        "(the log ends mid-line): left out"]  # fmt: skip
    run_id = int(result.stdout.split()[-1])
    imported = rows(target, "select raw from frames where run_id = ? and dir != 'stderr' order by seq", run_id)
    original = rows(db, "select raw from frames where run_id = 1 and dir != 'stderr' order by seq")
    if fmt != "jsons":
        assert [f["raw"] for f in imported] == [f["raw"] for f in original][:-1]
    else:
        assert len(imported) == len(original) - 1


def test_a_torn_line_that_is_not_the_last_refuses_the_log(sdk_recording: tuple[Path, str], tmp_path: Path) -> None:
    db, _ = sdk_recording
    whole = export(db, "1", "inspector", tmp_path / "whole.inspector")
    (tmp_path / "torn.log").write_bytes(torn(whole) + b"\n" + whole.split(b"\n")[0] + b"\n")
    result = CliRunner().invoke(cli, ["import", "--db", str(tmp_path / "rec.db"), str(tmp_path / "torn.log")])
    assert result.exit_code == 2 and "not JSON" in result.stderr


# -- the ACP conductor's debug log -------------------------------------------------------------


def conductor_debug_log(frames: list[dict[str, Any]], started: str) -> bytes:
    """A run as `sacp-conductor --debug` logs it with one proxy in front of the agent: the
    header, then every line at each hop (C: the editor's; 0: the proxy; 1: the agent), the
    conductor's tracing and the agent's stderr."""
    out = [
        "=== Conductor Debug Log ===",
        f"Started: {started}",
        "Components:",
        "  0: sacp-tee --log tee.log",
        "  1: python sdk_agent.py --permission",
        "========================",
        "C ! 2026-01-10T12:00:00.000Z  INFO sacp_conductor: conductor starting",
    ]
    for f in frames:
        if f["dir"] == "stderr":
            out.append(f"1 ! {f['raw']}")
        elif f["dir"] == "c2a":
            out += [f"C → {f['raw']}", f"0 → {f['raw']}", f"0 ← {f['raw']}", f"1 → {f['raw']}"]
        else:
            out += [f"1 ← {f['raw']}", f"0 → {f['raw']}", f"0 ← {f['raw']}", f"C ← {f['raw']}"]
    return ("\n".join(out) + "\n").encode()


def test_a_conductor_debug_log_imports_the_editors_hop_byte_for_byte(
    sdk_recording: tuple[Path, str], tmp_path: Path
) -> None:
    db, _ = sdk_recording
    frames = rows(db, "select * from frames where run_id = 1 order by seq")
    log = tmp_path / "20260110-120000.log"
    log.write_bytes(conductor_debug_log(frames, "2026-01-10T12:00:00.250+01:00"))
    target = tmp_path / "imported.db"
    result = invoke("import", "--db", str(target), str(log))  # --format auto knows it
    assert result.exit_code == 0, result.output
    run_id = int(result.stdout.split()[-1])
    imported = rows(target, "select * from frames where run_id = ? order by seq", run_id)
    assert [(f["dir"], f["raw"]) for f in imported] == [(f["dir"], f["raw"]) for f in frames]
    (run,) = rows(target, "select * from runs where id = ?", run_id)
    started = dt.datetime(2026, 1, 10, 11, 0, 0, tzinfo=dt.UTC).timestamp()
    assert run["started_ns"] == int(started) * 10**9 + 250_000_000 and run["source_format"] == "conductor-log"
    assert json.loads(run["argv"]) == ["python", "sdk_agent.py", "--permission"]
    assert [t[6] for t in turns_of(target, run_id)] == [t[6] for t in turns_of(db, 1)]
    # Round trip: its export is the original run's, but for what the log cannot say (times).
    again = export(target, str(run_id), "jsonl", tmp_path / "again.jsonl")
    first = export(db, "1", "jsonl", tmp_path / "first.jsonl")
    keep = ("seq", "dir", "raw", "kind", "method", "rpc_id", "session_id", "request_seq")
    assert [{k: f.get(k) for k in keep} for f in frame_lines(again)] == [
        {k: f.get(k) for k in keep} for f in frame_lines(first)
    ]
