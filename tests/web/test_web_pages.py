"""The inspector's pages cost what is on screen: a page of frames by offset or after a cursor,
each frame masked as in relay order whatever page it is on; runs listed a page at a time; a
long run not folded on each view; a preview that says what a frame says. In-process, through
Datasette's own test client, on recordings made by the real recorder."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("datasette", reason="the [ui] extra (Datasette) is not installed")

from acp_proxy.read import waterfall
from acp_proxy.record.importers import Record, write_run
from acp_proxy.web import model
from tests.web_support import app, get_json, synthetic_db

SID = "s1"
PASSWORD = "correct-Horse-battery-9"  # no shape of its own: masked where it is named, then learnt


def _f(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def _chunk(text: str) -> bytes:
    update = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}
    return _f({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s1", "update": update}})


def long_run(db: Path, chunks: int, quote_every: int = 0) -> int:
    """A run: initialize naming a password in ``_meta``, a session, a prompt answered by
    ``chunks`` chunks (every ``quote_every``-th quotes the password), the end of the turn."""
    init = {"protocolVersion": 1, "_meta": {"proxy": {"password": PASSWORD}}}
    records = [
        Record("c2a", 1_000, _f({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": init})),
        Record("a2c", 2_000, _f({"jsonrpc": "2.0", "id": 0, "result": {"protocolVersion": 1}})),
        Record("c2a", 3_000, _f({"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": "/"}})),
        Record("a2c", 4_000, _f({"jsonrpc": "2.0", "id": 1, "result": {"sessionId": "s1"}})),
        Record("c2a", 5_000, _f({"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": {"sessionId": SID}})),
    ]
    for i in range(chunks):
        said = f"the password is {PASSWORD} " if quote_every and i % quote_every == quote_every - 1 else f"w{i} "
        records.append(Record("a2c", 6_000 + i, _chunk(said)))
    records.append(Record("a2c", 10**7, _f({"jsonrpc": "2.0", "id": 2, "result": {"stopReason": "end_turn"}})))
    return write_run(db, records, {"argv": ["long-agent"]})


@pytest.fixture(scope="module")
def long_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("pages") / "long.db"
    long_run(db, 1200, quote_every=100)
    return db


def test_pages_by_offset_hold_every_frame_once_in_relay_order(long_db: Path) -> None:
    ds = app(long_db)
    first = get_json(ds, "/runs/1/frames.json?limit=250")
    total = first["total"]
    assert total == 1206 and first["more"] is True and first["last"] == f"1:{total}"
    seen = []
    for offset in range(0, total + 250, 250):
        page = get_json(ds, f"/runs/1/frames.json?offset={offset}&limit=250")
        assert page["total"] == total and page["offset"] == offset
        seen += [r["seq"] for r in page["rows"]]
    assert seen == list(range(1, total + 1))
    # A page is bounded whatever is asked for.
    assert len(get_json(ds, "/runs/1/frames.json?limit=999999")["rows"]) <= model.MAX_PAGE


def test_after_a_cursor_a_live_page_gets_only_what_is_new(long_db: Path) -> None:
    ds = app(long_db)
    news = get_json(ds, "/runs/1/frames.json?after=1:1200&limit=3")
    assert news["total"] == 6, "the count is of the frames after the cursor"
    assert [r["seq"] for r in news["rows"]] == [1201, 1202, 1203] and news["cursor"] == "1:1203"
    again = get_json(ds, "/runs/1/frames.json?after=1:1206")
    assert again["total"] == 0 and again["rows"] == []


def test_a_page_deep_in_a_run_masks_what_an_earlier_frame_taught(long_db: Path) -> None:
    """The password is named only in initialize (frame 1); a chunk a thousand frames later quotes
    it. Asked for first, before any other page, that chunk's page and its frame are masked."""
    for path in ("/runs/1/frames.json?offset=1000&limit=200", "/runs/1/frames/1105.json"):
        ds = app(long_db)  # a fresh server: nothing read before
        text = json.dumps(get_json(ds, path))
        assert PASSWORD not in text, path
        assert "the password is [redacted]" in text, path


def test_a_text_filter_pages_the_masked_frames(long_db: Path) -> None:
    ds = app(long_db)
    # initialize names the password (frame 1); every hundredth chunk says "password" (6 + i).
    naming = [1] + [6 + i for i in range(1200) if i % 100 == 99]
    page = get_json(ds, "/runs/1/frames.json?filter=text:password&limit=5&offset=2")
    assert page["total"] == len(naming) and [r["seq"] for r in page["rows"]] == naming[2:7]
    assert get_json(ds, "/runs/1/frames.json?filter=text:correct-Horse")["total"] == 0, "no oracle"
    bad = get_json(ds, "/runs/1/frames.json?filter=kind:nonsense")
    assert bad["rows"] == [] and "nonsense" in bad["filter_error"]


def test_the_preview_says_what_a_frame_says_not_its_envelope(long_db: Path) -> None:
    rows = get_json(app(long_db), "/runs/1/frames.json?limit=8")["rows"]
    by_seq = {r["seq"]: r for r in rows}
    assert by_seq[1]["snippet"] == '{"protocolVersion":1}', "the envelope and _meta are left out"
    assert by_seq[3]["snippet"] == '{"cwd":"/"}'
    assert by_seq[6]["snippet"] == "w0"
    assert not any(r["snippet"].startswith('{"jsonrpc"') for r in rows)


def test_a_long_run_is_not_folded_on_each_view(long_db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ds = app(long_db)
    small = get_json(ds, "/runs/1.json?parts=summary,conversation,charts")
    assert small["folded"] is True and small["conversations"]
    monkeypatch.setattr(model, "FOLD_LIMIT", 1000)
    big = get_json(ds, "/runs/1.json")
    assert big["folded"] is False and big["frames_total"] == 1206
    assert "conversations" not in big and big["waterfall_left_out"] == waterfall.LANES_LEFT_OUT
    assert [w["kind"] for w in big["waterfall"]] == ["turn", "first output", "end"]  # from the tables
    assert [(r["method"], r["count"]) for r in big["latency_table"]] == [
        ("initialize", 1),
        ("session/new", 1),
        ("session/prompt", 1),
    ]


def test_every_run_is_reachable_a_page_at_a_time(tmp_path: Path) -> None:
    db = tmp_path / "many.db"
    synthetic_db(db)
    for _ in range(6):
        long_run(db, 1)
    ds = app(db)
    newest = get_json(ds, "/.json?limit=3")
    assert [r["id"] for r in newest["runs"]] == [7, 6, 5] and newest["more_runs"] is True
    assert newest["runs_total"] == 7
    ids, before = [], None
    while True:
        page = get_json(ds, "/.json?limit=3" + (f"&before={before}" if before else ""))
        ids += [r["id"] for r in page["runs"]]
        if not page["more_runs"]:
            break
        before = page["runs"][-1]["id"]
    assert ids == [7, 6, 5, 4, 3, 2, 1]
    # Sessions too: the latest seen first, a page at a time after the last one listed.
    every = get_json(ds, "/.json?limit=100")["sessions"]
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        assert len(every) == conn.execute("select count(*) from sessions").fetchone()[0] > 3
    names, after = [], None
    while True:
        page = get_json(ds, "/.json?limit=3" + (f"&sessions_before={after}" if after else ""))
        names += [s["key"] for s in page["sessions"]]
        if not page["more_sessions"]:
            break
        after = page["sessions"][-1]["key"]
    assert names == [s["key"] for s in every]


def test_a_frame_s_position_in_the_selection_is_told(long_db: Path) -> None:
    ds = app(long_db)
    assert get_json(ds, "/runs/1/frames.json?limit=0&at=1:700")["position"] == 699
    assert get_json(ds, "/runs/1/frames.json?limit=0&at=1:99999")["position"] is None
    # In a selection: its index among the frames the filter keeps.
    naming = [1] + [6 + i for i in range(1200) if i % 100 == 99]
    at = f"1:{naming[4]}"
    assert get_json(ds, f"/runs/1/frames.json?limit=0&filter=text:password&at={at}")["position"] == 4
    assert get_json(ds, "/runs/1/frames.json?limit=0&filter=kind:request&at=1:700")["position"] is None
