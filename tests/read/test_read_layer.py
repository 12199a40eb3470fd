"""The read layer: every door renders one answer, computed once, masked before any filter.

A planted ``ghp_`` token must not be recoverable by prefix probing through a filter in any door
that masks (the MCP ``frames`` tool, ``frames --redact``, the inspector's timeline)."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from acp_proxy.cli.commands import cli
from acp_proxy.protocol.redact import MASK, Redactor
from acp_proxy.read import frames as selections
from acp_proxy.read import queries
from acp_proxy.record.importers import Record, write_run
from acp_proxy.store import database as store

TOKEN = "ghp_" + "R7kQ2mZx9WpL4vNc8TbY3hJd6FsG1aUe5oXi"  # 40 characters, GitHub's shape
PREFIXES = [TOKEN[:n] for n in (4, 5, 8, 20, 39, 40)]
PASSWORD = "correct-Horse-battery-9"  # no shape of its own: masked where it is named, then learnt


def _f(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def probe_recording(db: Path) -> Path:
    """One run: initialize, a session, a prompt whose answer quotes the token, a stderr line with it."""
    text = f"use {TOKEN} now, and {PASSWORD}"
    update = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}
    init = {"protocolVersion": 1, "_meta": {"proxy": {"password": PASSWORD}}}
    write_run(
        db,
        [
            Record("c2a", 1_000, _f({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": init})),
            Record("a2c", 2_000, _f({"jsonrpc": "2.0", "id": 0, "result": {"protocolVersion": 1}})),
            Record(
                "c2a",
                3_000,
                _f({"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": "/", "mcpServers": []}}),
            ),
            Record("a2c", 4_000, _f({"jsonrpc": "2.0", "id": 1, "result": {"sessionId": "s1"}})),
            Record(
                "c2a",
                5_000,
                _f(
                    {"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": {"sessionId": "s1", "prompt": []}}
                ),
            ),
            Record(
                "a2c",
                6_000,
                _f({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s1", "update": update}}),
            ),
            Record("stderr", 6_500, f"token {TOKEN}".encode()),
            Record("a2c", 7_000, _f({"jsonrpc": "2.0", "id": 2, "result": {"stopReason": "end_turn"}})),
        ],
        {},
    )
    return db


@pytest.fixture
def probe_db(tmp_path: Path) -> Path:
    return probe_recording(tmp_path / "probe.db")


def select(db_path: Path, text: str, enabled: bool) -> list[dict[str, Any]]:
    db = store.open_for_reading(db_path)
    try:
        return list(selections.Selection(db, selections.parse(db, text), Redactor(enabled=enabled)).rows())
    finally:
        db.conn.close()


def test_a_filter_reads_the_masked_frame(probe_db: Path) -> None:
    everything = select(probe_db, "", True)
    for prefix in PREFIXES:
        assert len(select(probe_db, f'text:"{prefix}"', False)) == 2  # as recorded: both frames hold it
        assert select(probe_db, f'text:"{prefix}"', True) == []
        # Negated, the complement: every frame, none singled out.
        assert len(select(probe_db, f'-text:"{prefix}"', True)) == len(everything)
        assert len(select(probe_db, f'dir:stderr OR text:"{prefix}"', True)) == 1
    # A secret masked where a frame names it is masked where a later frame repeats it, even when
    # the filter leaves the naming frame out: every frame is masked, in order, before matching.
    assert len(select(probe_db, f'text:"{PASSWORD[:8]}"', False)) == 2
    assert select(probe_db, f'dir:a2c text:"{PASSWORD[:8]}"', True) == []
    shown = select(probe_db, f"text:{MASK.strip('[]')}", True)
    assert [f["dir"] for f in shown] == ["c2a", "a2c", "stderr"]
    assert all(TOKEN not in (f["raw"] or "") and PASSWORD not in (f["raw"] or "") for f in shown)


_TERMS = [
    f'text:"{TOKEN[:6]}"',
    "text:redacted",
    "text:use",
    "dir:stderr",
    "kind:request",
    "method:session/*",
    "seq>4",
    "note",
    "error:denied",
    "run:last",
]


@st.composite
def filter_texts(draw: st.DrawFn, depth: int = 2) -> str:
    if depth == 0 or draw(st.booleans()):
        return draw(st.sampled_from(_TERMS))
    glue = draw(st.sampled_from([" ", " OR "]))
    parts = draw(st.lists(filter_texts(depth - 1), min_size=1, max_size=3))
    text = "(" + glue.join(parts) + ")"
    return "-" + text if draw(st.booleans()) else text


@pytest.fixture(scope="module")
def shared_probe_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return probe_recording(tmp_path_factory.mktemp("probe") / "probe.db")


@given(text=filter_texts())
@settings(max_examples=60, deadline=None)
def test_the_masked_selection_is_the_filter_over_the_masked_frames(shared_probe_db: Path, text: str) -> None:
    """Relaxed SQL, then the filter over masked frames, selects exactly what matching every
    masked frame in Python selects."""
    db = store.open_for_reading(shared_probe_db)
    try:
        expr = selections.parse(db, text)
        redactor = Redactor()
        every = [redactor.frame_row(row) for row in queries.rows(db, "select * from frames order by run_id, seq")]
        expected = [row["seq"] for row in every if expr.matches(SimpleNamespace(**row, findings=[]))]
        selection = selections.Selection(db, expr, Redactor())
        assert [row["seq"] for row in selection.rows()] == expected
        assert selection.total() == len(expected)
    finally:
        db.conn.close()


def test_one_frame_is_masked_with_what_earlier_frames_named(probe_db: Path) -> None:
    db = store.open_for_reading(probe_db)
    try:
        chunk = selections.frame(db, 1, 6, Redactor())
        plain = selections.frame(db, 1, 6, Redactor(enabled=False))
    finally:
        db.conn.close()
    assert chunk is not None and plain is not None
    assert PASSWORD in plain["raw"] and PASSWORD not in chunk["raw"] and MASK in chunk["raw"]


def test_a_page_has_a_total_and_a_keyset_cursor(probe_db: Path) -> None:
    db = store.open_for_reading(probe_db)
    try:
        selection = selections.Selection(db, selections.parse(db, "-dir:stderr"), Redactor())
        first = selection.page(limit=3)
        second = selection.page(first.cursor, limit=3)
        rest = selection.page(second.cursor, limit=3)
    finally:
        db.conn.close()
    assert first.total == second.total == rest.total == 7
    assert [f["seq"] for f in first.frames + second.frames + rest.frames] == [1, 2, 3, 4, 5, 6, 8]
    assert first.more and second.more and not rest.more


def test_cli_frames_redact_cannot_be_probed(probe_db: Path) -> None:
    def frames(*args: str) -> list[dict[str, Any]]:
        result = CliRunner().invoke(cli, ["frames", "--db", str(probe_db), "--json", *args], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)

    for prefix in PREFIXES:
        assert len(frames(f"text:{prefix}")) == 2
        assert frames("--redact", f"text:{prefix}") == []
    assert all(TOKEN not in json.dumps(f) for f in frames("--redact"))


def test_mcp_frames_filter_cannot_be_probed(probe_db: Path, tmp_path: Path) -> None:
    pytest.importorskip("mcp")
    from tests.mcp.test_mcp import session

    calls = [("frames", {"filter": f'text:"{prefix}"'}) for prefix in PREFIXES]
    calls.append(("frames", {"filter": f'text:"{PASSWORD[:8]}"', "after": "1:1"}))
    pages = [("frames", {"filter": "-dir:stderr", "limit": 3}), ("frames", {"filter": "-dir:stderr", "after": "1:5"})]
    _, [*masked, first, rest] = session(probe_db, [*calls, *pages], errlog=tmp_path / "err.txt")
    _, plain = session(probe_db, calls, "--no-redact", errlog=tmp_path / "err2.txt")
    assert [len(a.json()["items"]) for a in plain] == [2] * len(PREFIXES) + [1]
    assert all(a.json()["items"] == [] and a.json()["total"] == 0 for a in masked)
    # Keyset pages: after the place of a frame come the frames after it.
    assert [f["seq"] for f in first.json()["items"]] == [1, 2, 3] and [f["seq"] for f in rest.json()["items"]] == [6, 8]


# -- every door renders the read layer's answer -------------------------------------------------

SCRIPTED_AGENT = Path(__file__).parents[1] / "scripted_agent.py"


def _cli(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code in (0, 1), result.output
    return result.stdout


def _turns(conversations: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [(t["index"], t["status"], t["stop_reason"]) for c in conversations for t in c["turns"]]


def _doors(db: Path, tmp_path: Path) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]], str, str]:
    """The turns as `show --json` and the inspector's run JSON give them; `show` and MCP `show`."""
    from tests.mcp.test_mcp import session
    from tests.web_support import app, get_json

    cli_turns = _turns(json.loads(_cli("show", "--db", str(db), "--json", "1")))
    web_turns = _turns(get_json(app(db), "/runs/1.json")["conversations"])
    (mcp_show,) = session(db, [("show", {"ref": "1"})], errlog=tmp_path / "mcp-err.txt")[1]
    return cli_turns, web_turns, _cli("show", "--db", str(db), "1"), mcp_show.text


def _wait_committed(db: Path, method: str, timeout: float) -> None:
    """Until a ``method`` frame is a committed row (polled: the recorder's commit is in another
    process, with no event a test can wait on)."""
    import sqlite3
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
            if conn.execute("select 1 from frames where method = ? limit 1", (method,)).fetchone():
                return
        time.sleep(0.02)
    raise AssertionError(f"no {method} frame committed to {db} within {timeout}s")


@pytest.mark.spawns
def test_show_mcp_and_the_inspector_agree_on_a_running_and_an_ended_run(tmp_path: Path) -> None:
    pytest.importorskip("mcp")
    from tests.conftest import PROXY, proxy_env, run_proxy, start_proxy, wait_for_output, watchdog

    db = tmp_path / "live.db"
    script = tmp_path / "script.json"
    chunk = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "working on it"}}
    update = {"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "$session", "update": chunk}}
    script.write_text(
        json.dumps(
            {
                "on": {
                    "initialize": [{"jsonrpc": "2.0", "id": "$id", "result": {"protocolVersion": 1}}],
                    "session/new": [{"jsonrpc": "2.0", "id": "$id", "result": {"sessionId": "s-live"}}],
                    "session/prompt": [update],  # and no answer: the turn stays open
                }
            }
        )
    )
    proxy = start_proxy(["run", "--db", str(db), "--", PROXY[0], str(SCRIPTED_AGENT), str(script)], env=proxy_env())
    guard = watchdog(proxy, 120)
    try:
        assert proxy.stdin is not None and proxy.stdout is not None
        prompt = {"sessionId": "s-live", "prompt": [{"type": "text", "text": "go"}]}
        for frame in (
            {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}},
            {"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": "/", "mcpServers": []}},
            {"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": prompt},
        ):
            proxy.stdin.write(_f(frame) + b"\n")
        proxy.stdin.flush()
        wait_for_output(proxy.stdout, b"working on it", 30)
        # Recorded (not only relayed): tail returns once the chunk is journaled, and the doors
        # below read committed rows, which the recorder writes within its flush interval.
        tailed = run_proxy(["tail", "--db", str(db), "--from-start", "-c", "1", "--timeout", "30", "update"])
        assert tailed.returncode == 0, tailed.stderr
        _wait_committed(db, "session/update", 30)
        running = _doors(db, tmp_path)
        proxy.stdin.close()
        proxy.wait(timeout=60)
    finally:
        guard.cancel()
        proxy.kill()
    ended = _doors(db, tmp_path)
    for cli_turns, web_turns, show_text, mcp_text in (running, ended):
        assert cli_turns == web_turns
        assert show_text == mcp_text
    assert [status for _, status, _ in running[0]] == ["running"]
    assert [status for _, status, _ in ended[0]] != ["running"] and ended[0][0][2] is None


def _initialize_then_one_turn(db: Path, agent_version: str) -> None:
    update = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "hi"}}
    info = {"name": "agent", "version": agent_version}
    write_run(
        db,
        [
            Record(
                "c2a", 1_000, _f({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}})
            ),
            Record("a2c", 2_000, _f({"jsonrpc": "2.0", "id": 0, "result": {"protocolVersion": 1, "agentInfo": info}})),
            Record(
                "c2a",
                3_000,
                _f({"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": "/", "mcpServers": []}}),
            ),
            Record("a2c", 4_000, _f({"jsonrpc": "2.0", "id": 1, "result": {"sessionId": "s1"}})),
            Record(
                "c2a",
                5_000,
                _f(
                    {"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": {"sessionId": "s1", "prompt": []}}
                ),
            ),
            Record(
                "a2c",
                6_000,
                _f({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s1", "update": update}}),
            ),
            Record("a2c", 7_000, _f({"jsonrpc": "2.0", "id": 2, "result": {"stopReason": "end_turn"}})),
        ],
        {},
    )


def test_the_inspector_diff_reports_what_differs_outside_the_turns(tmp_path: Path) -> None:
    from tests.web_support import app, get_json

    db = tmp_path / "two.db"
    _initialize_then_one_turn(db, "1.0")
    _initialize_then_one_turn(db, "2.0")
    result = CliRunner().invoke(cli, ["diff", "--db", str(db), "--json", "1", "2"], catch_exceptions=False)
    assert result.exit_code == 1
    expected = json.loads(result.stdout)
    page = get_json(app(db), "/diff/1/2.json")
    assert expected["connection"]["differs"] == ["initialize"] and not any(t["differs"] for t in expected["turns"])
    assert page["differ"] is True
    assert page["connection"] == expected["connection"] and page["turns"] == expected["turns"]


def test_the_inspector_timeline_filter_cannot_be_probed(probe_db: Path) -> None:
    from tests.web_support import app, get_json

    for prefix in PREFIXES:
        path = f"/runs/1.json?parts=timeline&filter=text:{prefix}"
        assert get_json(app(probe_db, no_redact=True), path)["shown"] == 2
        assert get_json(app(probe_db), path)["shown"] == 0
