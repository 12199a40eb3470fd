"""Chunk groups in the inspector's virtual list, in a real browser: consecutive chunks of one
message are one row ("N chunks: their text") that expands to its members; a group crossing a
page edge continues there; j/k move across groups; Enter opens the group's first frame; the
"collapse chunks" toggle shows every frame; a live run's new chunks extend its last group in
place.

Playwright driving the system Chromium against `acp-proxy ui` subprocesses (as
``test_web_browser``); the recordings are written by the recorder (``write_run``) or, live, by
``acp-proxy run`` relaying a real streaming agent process.
"""

from __future__ import annotations

import os
import sqlite3
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from acp_proxy.record.importers import Record, write_run
from tests.conftest import start_proxy, watchdog
from tests.web.test_web_browser import Server, browser, open_page  # noqa: F401 (browser: a fixture)
from tests.web.test_web_pages import _f

pytestmark = pytest.mark.spawns  # a browser, the web inspector, the proxy and an agent

MESSAGE = 1195  # chunks of the first message: past the virtual list's threshold, over six pages


def _update(kind: str, text: str) -> bytes:
    update = {"sessionUpdate": kind, "content": {"type": "text", "text": text}}
    return _f({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s1", "update": update}})


def mixed_run(db: Path) -> int:
    """A prompt answered by a long message (``MESSAGE`` chunks), three thought chunks, a tool
    call, four more message chunks and the end of the turn: 1,210 frames."""
    records = [
        Record("c2a", 1_000, _f({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}})),
        Record("a2c", 2_000, _f({"jsonrpc": "2.0", "id": 0, "result": {"protocolVersion": 1}})),
        Record("c2a", 3_000, _f({"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": "/"}})),
        Record("a2c", 4_000, _f({"jsonrpc": "2.0", "id": 1, "result": {"sessionId": "s1"}})),
        Record(
            "c2a", 5_000, _f({"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": {"sessionId": "s1"}})
        ),
    ]
    records += [Record("a2c", 6_000 + i, _update("agent_message_chunk", f"w{i} ")) for i in range(MESSAGE)]
    records += [Record("a2c", 7_000 + i, _update("agent_thought_chunk", f"think{i} ")) for i in range(3)]
    tool = {"sessionUpdate": "tool_call", "toolCallId": "t1", "title": "read a file", "status": "pending"}
    records.append(
        Record(
            "a2c",
            8_000,
            _f({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s1", "update": tool}}),
        )
    )
    records += [Record("a2c", 9_000 + i, _update("agent_message_chunk", f"tail{i} ")) for i in range(4)]
    records.append(Record("a2c", 10**7, _f({"jsonrpc": "2.0", "id": 2, "result": {"stopReason": "end_turn"}})))
    return write_run(db, records, {"argv": ["mixed-agent"]})


@pytest.fixture(scope="module")
def mixed_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    db = tmp_path_factory.mktemp("chunks") / "chunks.db"
    mixed_run(db)
    server = Server(db)
    yield server
    server.stop()


def _heads(page: Any) -> list[tuple[str, str]]:
    """Each group row drawn: (its first frame, its label)."""
    rows = page.locator("#timeline tbody tr.chunks")
    return rows.evaluate_all("rows => rows.map(r => [r.dataset.frame, r.children[3].textContent])")


def test_chunks_of_a_message_are_one_row_that_expands(browser: Any, mixed_server: Server) -> None:  # noqa: F811
    page = open_page(browser, mixed_server, "/runs/1")
    head = page.locator('#timeline tbody tr.chunks[data-frame="1:6"]')
    head.wait_for()
    assert page.is_checked("#collapse-chunks"), "collapsed by default"
    assert head.locator("td").nth(3).inner_text() == "195 chunks", "the page's chunks of the message"
    assert head.locator("td.preview").inner_text().startswith("w0 w1 w2 ")
    # Collapsed: the next row is the same message going on in the next page, not its members.
    following = page.locator('#timeline tbody tr[data-frame="1:201"]')
    following.wait_for()  # its page fetched as it came into view
    assert following.get_attribute("data-index") == "6"
    assert following.locator("td").nth(3).inner_text() == "… 200 chunks more"
    assert page.locator('#timeline tbody tr[data-frame="1:7"]').count() == 0
    # Expanded: its members, each a row of its own; collapsed again: gone.
    head.locator("button.toggle").click()
    member = page.locator('#timeline tbody tr.child[data-frame="1:7"]')
    member.wait_for()
    assert member.get_attribute("data-parent") == "1:6" and "w1" in member.inner_text()
    member.click()
    page.wait_for_function("document.getElementById('detail-title').textContent.startsWith('Frame 1:7 ')")
    head.locator("button.toggle").click()
    member.wait_for(state="detached")
    # The end: the long message's last page, then the thoughts, the tool call, the message's tail.
    page.locator("#timeline-scroll").evaluate("s => s.scrollTop = s.scrollHeight")
    page.locator('#timeline tbody tr[data-frame="1:1204"]').wait_for()
    heads = dict(_heads(page))
    assert heads["1:1201"] == "3 chunks" and heads["1:1205"] == "4 chunks", heads
    thoughts = page.locator('#timeline tbody tr.chunks[data-frame="1:1201"]')
    assert "think0 think1 think2" in thoughts.locator("td.preview").inner_text()
    assert "tool_call" in page.locator('#timeline tbody tr[data-frame="1:1204"]').inner_text()
    # The pages fetched on the way changed the list's height: the end is still in view.
    listed, tail = (
        page.locator("#timeline-scroll").bounding_box(),
        page.locator('tr[data-frame="1:1205"]').bounding_box(),
    )
    assert listed is not None and tail is not None
    assert listed["y"] <= tail["y"] <= listed["y"] + listed["height"], "the end in view"
    assert page.locator("#timeline tbody tr[data-frame]").count() < 100, "still a virtual list"
    assert page.js_errors == []
    page.close()


def test_keys_move_across_groups_and_the_toggle_shows_every_frame(browser: Any, mixed_server: Server) -> None:  # noqa: F811
    page = open_page(browser, mixed_server, "/runs/1")
    page.locator('#timeline tbody tr.chunks[data-frame="1:201"]').wait_for()
    visited = []
    for _ in range(8):
        page.keyboard.press("j")
        visited.append(page.locator("#timeline tbody tr.current").get_attribute("data-frame"))
    assert visited == ["1:1", "1:2", "1:3", "1:4", "1:5", "1:6", "1:201", "1:401"], visited
    page.keyboard.press("k")
    assert page.locator("#timeline tbody tr.current").get_attribute("data-frame") == "1:201"
    page.keyboard.press("Enter")
    page.wait_for_function("document.getElementById('detail-title').textContent.startsWith('Frame 1:201 ')")
    # Every frame: the toggle off, the members are rows again, one row a frame, the selected
    # frame still in view.
    page.uncheck("#collapse-chunks")
    page.locator('#timeline tbody tr.selected[data-frame="1:201"]:not(.chunks)').wait_for()
    page.locator('#timeline tbody tr[data-frame="1:202"]').wait_for()
    assert page.locator("#timeline tbody tr.chunks").count() == 0
    height = page.locator("#timeline-scroll").evaluate("s => s.scrollHeight")
    assert height >= 1210 * 26, "one row a frame"
    page.check("#collapse-chunks")
    page.locator('#timeline tbody tr.chunks[data-frame="1:6"]').wait_for()
    assert page.js_errors == []
    page.close()


def test_a_link_to_a_chunk_inside_a_group_opens_the_group(browser: Any, mixed_server: Server) -> None:  # noqa: F811
    page = open_page(browser, mixed_server, "/runs/1/frames/650")
    row = page.locator('#timeline tbody tr.child[data-frame="1:650"]')
    row.wait_for()
    page.wait_for_function("document.getElementById('detail-title').textContent.startsWith('Frame 1:650 ')")
    assert "selected" in (row.get_attribute("class") or "")
    assert row.get_attribute("data-parent") == "1:601", "a member of the group its page holds"
    listed = page.locator("#timeline-scroll").bounding_box()
    shown = row.bounding_box()
    assert listed is not None and shown is not None
    assert listed["y"] <= shown["y"] <= listed["y"] + listed["height"], "scrolled into the list's view"
    assert page.js_errors == []
    page.close()


STREAMING_AGENT = r"""
import sys
def chunk(text):
    return ('{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":'
            '{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"%s"}}}}\n' % text).encode()
sys.stdout.buffer.write(b"".join(chunk(f"w{n} ") for n in range(1100)))
sys.stdout.buffer.flush()
open(sys.argv[1]).read()  # a FIFO: the test says when (the page is open by then), with no frame
sys.stdout.buffer.write(b"".join(chunk(f"late{n} ") for n in range(3)))
sys.stdout.buffer.flush()
sys.stdin.buffer.read()  # then quiet, alive, until the client hangs up
"""


def _frames_of(db: Path, run_id: int, count: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
            if conn.execute("select count(*) from frames where run_id = ?", [run_id]).fetchone()[0] >= count:
                return
        time.sleep(0.05)  # polling the database for a condition, with a deadline
    raise AssertionError(f"run {run_id} never held {count} frames")


def test_live_chunks_extend_the_last_group_in_place(browser: Any, tmp_path: Path) -> None:  # noqa: F811
    db = tmp_path / "live.db"
    agent = tmp_path / "stream.py"
    agent.write_text(STREAMING_AGENT)
    mixed_run(db)  # run 1; the database exists before the ui opens it
    server = Server(db)
    go = tmp_path / "go"
    os.mkfifo(go)
    proxy = start_proxy(["run", "--db", str(db), "--", sys.executable, str(agent), str(go)])
    timer = watchdog(proxy, 120)
    threading.Thread(target=lambda: proxy.stdout and proxy.stdout.read(), daemon=True).start()  # the client's side
    try:
        assert proxy.stdin is not None
        _frames_of(db, 2, 1100)
        page = open_page(browser, server, "/runs/2")
        last = page.locator('#timeline tbody tr.chunks[data-frame="2:1001"]')
        last.wait_for()
        assert last.locator("td").nth(3).inner_text() == "… 100 chunks more"
        # The agent waits in the FIFO's open (its chunks are recorded): never blocks, here.
        os.close(os.open(go, os.O_WRONLY | os.O_NONBLOCK))  # the agent goes on
        page.wait_for_function(
            "document.querySelector('#timeline tbody tr.chunks[data-frame=\"2:1001\"] td.preview')"
            ".textContent.includes('late2')"
        )
        assert last.locator("td").nth(3).inner_text() == "… 103 chunks more", "the same group, grown"
        assert page.locator("#timeline tbody tr.chunks").count() == len(set(dict(_heads(page)))), "one row a group"
        assert page.locator('#timeline tbody tr[data-frame="2:1103"]').count() == 0, "no row of its own"
        assert "1,103" in page.locator("#frame-count").inner_text()
        assert page.js_errors == []
        page.close()
        proxy.stdin.close()
        assert proxy.wait(timeout=60) == 0
    finally:
        timer.cancel()
        proxy.kill()
        server.stop()
