"""Chunk groups within a page (``read.chunk_groups``): consecutive chunks of one message share
the id of the page's first of them; a message, a thought, another session or any other frame
between them starts a new group; a page whose first frame continues the message of the frame
before it says so (a one-row look-behind), whatever page of a recorded run is asked for."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from acp_proxy.protocol import filters
from acp_proxy.read import chunk_groups
from acp_proxy.read import frames as selections
from acp_proxy.read.queries import Ref
from acp_proxy.record.importers import Record, write_run


def _line(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def _update(kind: str, text: str, session: str = "s1") -> bytes:
    update = {"sessionUpdate": kind, "content": {"type": "text", "text": text}}
    return _line({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": session, "update": update}})


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Seq 1-2: a prompt and its acceptance; 3-7: five message chunks; 8-9: two thought chunks;
    10: a message chunk of another session; 11-12: message chunks; 13: the prompt's answer."""
    path = tmp_path_factory.mktemp("groups") / "groups.db"
    prompt = {"jsonrpc": "2.0", "id": 1, "method": "session/prompt", "params": {"sessionId": "s1", "prompt": []}}
    records = [
        Record("c2a", 1, _line(prompt)),
        Record("a2c", 2, _line({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s1"}})),
    ]
    records += [Record("a2c", 3 + i, _update("agent_message_chunk", f"m{i}")) for i in range(5)]
    records += [Record("a2c", 8 + i, _update("agent_thought_chunk", f"t{i}")) for i in range(2)]
    records.append(Record("a2c", 10, _update("agent_message_chunk", "other", session="s2")))
    records += [Record("a2c", 11 + i, _update("agent_message_chunk", f"n{i}")) for i in range(2)]
    records.append(Record("a2c", 13, _line({"jsonrpc": "2.0", "id": 1, "result": {"stopReason": "end_turn"}})))
    write_run(path, records, {"argv": ["groups"]})
    return path


def _page(path: Path, offset: int, limit: int) -> list[dict[str, Any]]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        selection = selections.Selection(conn, filters.Const(True), None, Ref("1", run_id=1))
        rows = selection.window(None, limit, offset).frames
        keys = [chunk_groups.key(r) for r in rows]
        chunk_groups.mark_page(conn, rows, keys)
        return rows
    finally:
        conn.close()


def test_a_whole_run_in_one_page_has_one_group_per_message(db: Path) -> None:
    rows = _page(db, 0, 50)
    assert [r["group"] for r in rows] == [
        None,
        None,
        *["1:3"] * 5,
        *["1:8"] * 2,
        "1:10",
        *["1:11"] * 2,
        None,
    ]
    assert rows[0]["group_cont"] is False


@pytest.mark.parametrize(
    ("offset", "first", "cont"),
    [
        (4, "1:5", True),
        (7, "1:8", False),
        (8, "1:9", True),
        (9, "1:10", False),
        (10, "1:11", False),
        (11, "1:12", True),
    ],
)
def test_a_page_starting_inside_a_message_says_it_continues(db: Path, offset: int, first: str, cont: bool) -> None:
    rows = _page(db, offset, 3)
    assert rows[0]["group"] == first, "groups are ids of the page's own frames"
    assert rows[0]["group_cont"] is cont


def test_the_key_is_none_for_anything_but_a_chunk_notification() -> None:
    chunk = {"run_id": 1, "dir": "a2c", "kind": "notification", "session_id": "s", "update_kind": "agent_message_chunk"}
    assert chunk_groups.key(chunk) is not None
    assert chunk_groups.key({**chunk, "update_kind": "tool_call"}) is None
    assert chunk_groups.key({**chunk, "kind": "request"}) is None
    assert chunk_groups.key({**chunk, "update_kind": None}) is None
    assert chunk_groups.key(chunk) != chunk_groups.key({**chunk, "replay": 1}), "history replayed is apart"
    rows = [{"run_id": 1, "seq": 5}, {"run_id": 1, "seq": 6}]
    chunk_groups.mark(rows, [chunk_groups.key(chunk)] * 2, None)
    assert [r["group"] for r in rows] == ["1:5", "1:5"] and rows[0]["group_cont"] is False
