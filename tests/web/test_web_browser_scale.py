"""The inspector in a real browser on long runs: a million frames open reading only what is shown, and the page
stays small; the detail of a frame deep in a run opens beside it; keys move through frames; a
session page follows live with only what is new; the index is updated in place and pages its
runs; a page whose server stopped says so.

Playwright driving the system Chromium against `acp-proxy ui` subprocesses (as
``test_web_browser``); the recordings are written by the recorder path (``write_run``). The
million-frame test is marked ``slow`` (``-m "not slow"`` leaves it out).
"""

from __future__ import annotations

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
from tests.web.test_web_pages import _chunk, _f, long_run

pytestmark = pytest.mark.spawns  # a browser and the web inspector

MILLION = 1_000_000


@pytest.fixture(scope="session")
def million_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run of a million frames (a prompt answered by 999,994 chunks), written once per session."""
    db = tmp_path_factory.mktemp("million") / "million.db"
    long_run(db, MILLION - 6)
    return db


@pytest.fixture(scope="module")
def long_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Path]]:
    db = tmp_path_factory.mktemp("long") / "long.db"
    long_run(db, 3000)
    server = Server(db)
    yield server, db
    server.stop()


def rss_mb(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split("VmRSS:")[1].split()[0]) / 1024


FIRST_ROW = """
    new MutationObserver((_, observer) => {
        if (document.querySelector('#timeline tbody tr[data-frame]')) {
            window.__first_row_ms = performance.now();
            observer.disconnect();
        }
    }).observe(document, { childList: true, subtree: true });
"""


@pytest.mark.slow
def test_a_million_frame_run_opens_reading_only_what_it_shows_and_stays_small(
    browser: Any,  # noqa: F811
    million_db: Path,
) -> None:
    server = Server(million_db)
    try:
        page = browser.new_page()
        page.goto(server.login)
        page.add_init_script(FIRST_ROW)
        pages: list[str] = []  # the frame pages the list asked for: what it read of the run
        page.on("request", lambda request: pages.append(request.url) if "/frames.json" in request.url else None)
        page.goto(server.base + "/runs/1")
        page.locator('#timeline tbody tr[data-frame="1:1"]').wait_for()
        # How soon is the benchmark's to judge (benchmarks/inspector_bench.py: <= 1 s); the test
        # asserts what makes it possible: the page reads what it shows, not the run.
        opened_ms = page.evaluate("window.__first_row_ms")
        print(f"first frames {opened_ms:.0f} ms after the page was opened")
        assert page.is_checked("#follow")
        assert "1,000,000" in page.locator("#frame-count").inner_text()
        # Down the list: the rows in view are fetched as they come, the others are not in the page
        # (the chunks collapsed, as a page opens: a row per page's run of them).
        page.locator("#timeline-scroll").evaluate("s => s.scrollTop = s.scrollHeight / 2")
        page.wait_for_function(
            "[...document.querySelectorAll('#timeline tbody tr.chunks')]"
            ".some(r => +r.dataset.frame.split(':')[1] > 5000)"
        )
        page.wait_for_timeout(10_000)  # open and following live for 10 s: what it then holds
        nodes = page.evaluate("document.getElementsByTagName('*').length")
        cdp = browser.new_cdp_session(page)
        cdp.send("HeapProfiler.collectGarbage")
        heap_mb = cdp.send("Runtime.getHeapUsage")["usedSize"] / 1e6
        server_mb = rss_mb(server.proc.pid)
        print(f"{nodes} DOM nodes, {heap_mb:.1f} MB of JS heap, the server {server_mb:.0f} MB")
        assert nodes <= 20_000 and heap_mb <= 150 and server_mb <= 300
        assert page.locator("#timeline tbody tr[data-frame]").count() < 200
        assert len(pages) * 200 <= MILLION // 20, f"{len(pages)} pages of frames read: a run's worth"
        # Not folded: said so; the latency table and its chart come from SQL.
        assert "too many to fold" in page.locator("#conversation").inner_text()
        methods = page.locator("#latency-table tbody tr").evaluate_all("rows => rows.map(r => r.dataset.method)")
        assert methods == ["initialize", "session/new", "session/prompt"]
        page.locator("#latency svg").first.wait_for()
        # The turn waterfall too, from the recorder's tables (no fold), and it says what it leaves out.
        page.locator("#waterfall svg").first.wait_for()
        assert "from the recorder's tables" in page.locator("#waterfall-note").inner_text()
        page.close()
    finally:
        server.stop()


@pytest.mark.slow
def test_the_playhead_jumps_to_the_end_of_a_million_frame_run_and_steps_back(
    browser: Any,  # noqa: F811
    million_db: Path,
) -> None:
    server = Server(million_db, timeout=900)  # the first fold of a million frames: minutes on a busy machine
    try:
        page = open_page(browser, server, "/runs/1")
        page.locator('#timeline tbody tr[data-frame="1:1"]').wait_for()
        page.uncheck("#follow")  # nothing new comes: no polls beside the playhead's
        page.click("#ph-enter")
        page.wait_for_function("document.body.dataset.playhead === 'start'")
        # The first visit to the end folds the whole run, a slice a request, saying how far it got.
        started = time.perf_counter()
        page.click("#ph-last")
        page.wait_for_function("document.getElementById('ph-where').textContent.startsWith('folding')")
        page.wait_for_function(f"document.body.dataset.playhead === '{MILLION}'", timeout=800_000)
        first_s = time.perf_counter() - started
        where = page.inner_text("#ph-where")
        assert f"frame {MILLION} of {MILLION}" in where, where
        conversation = page.locator("#conversation")
        assert "w999993" in conversation.inner_text(), "the message's last chunk"
        hidden = conversation.locator(".hidden-chunks").inner_text()
        assert "999,794 earlier chunks not shown" in hidden, hidden
        # The frame's detail beside the list (its masking reads the run once) before steps are timed.
        page.wait_for_function(
            f"document.getElementById('detail-title').textContent.startsWith('Frame 1:{MILLION} ')", timeout=120_000
        )
        # Steps back: each from the checkpoint before it, a few thousand frames at most.
        steps = []
        for n in range(1, 6):
            started = time.perf_counter()
            page.keyboard.press("[")
            page.wait_for_function(f"document.body.dataset.playhead === '{MILLION - n}'")
            steps.append((time.perf_counter() - started) * 1000)
        assert "w999993" not in conversation.inner_text() and "w999989 " in conversation.inner_text()
        # And forward again: from where the last step left the fold.
        started = time.perf_counter()
        page.keyboard.press("]")
        page.wait_for_function(f"document.body.dataset.playhead === '{MILLION - 4}'")
        forward_ms = (time.perf_counter() - started) * 1000
        nodes = page.evaluate("document.getElementsByTagName('*').length")
        server_mb = rss_mb(server.proc.pid)
        steps.sort()
        print(
            f"playhead: the end first reached in {first_s:.1f} s; steps back {steps[len(steps) // 2]:.0f} ms "
            f"(median of {len(steps)}; max {steps[-1]:.0f}), forward {forward_ms:.0f} ms; "
            f"{nodes} DOM nodes, the server {server_mb:.0f} MB"
        )
        assert nodes <= 20_000 and server_mb <= 300
        assert page.js_errors == []
        page.close()
    finally:
        server.stop()


def test_a_frame_deep_in_a_long_run_opens_beside_it_and_keys_move(
    browser: Any,  # noqa: F811
    long_server: tuple[Server, Path],
) -> None:
    server, _ = long_server
    page = open_page(browser, server, "/runs/1")
    page.locator('#timeline tbody tr[data-frame="1:1"]').wait_for()
    assert page.locator("#timeline tbody tr[data-frame]").count() < 200, "only the rows in view"
    page.uncheck("#collapse-chunks")  # one row a frame: a frame's place is its index
    page.locator("#timeline-scroll").evaluate("s => s.scrollTop = 2500 * 26")
    row = page.locator('#timeline tbody tr[data-frame="1:2510"]')
    row.click()
    page.wait_for_function("document.getElementById('detail-title').textContent.startsWith('Frame 1:2510 ')")
    box = page.locator("#detail").bounding_box()
    viewport = page.viewport_size
    assert box is not None and viewport is not None
    assert 0 <= box["y"] < viewport["height"] and box["x"] > row.bounding_box()["x"], "beside the row, in view"
    assert "w2504" in page.locator("#detail-raw").inner_text()
    prompt = page.locator('#latency-table tr[data-method="session/prompt"]')
    assert prompt.locator("td").nth(2).inner_text() == "1", "answered once"
    # Keys: / is the filter; j/k move the cursor row, Enter opens it.
    page.keyboard.press("/")
    assert page.evaluate("document.activeElement.id") == "filter"
    page.keyboard.press("Escape")
    page.keyboard.press("j")
    page.keyboard.press("j")
    page.keyboard.press("k")
    current = page.locator("#timeline tbody tr.current")
    current.wait_for()
    target = current.get_attribute("data-frame")
    page.keyboard.press("Enter")
    page.wait_for_function(
        "id => document.getElementById('detail-title').textContent.startsWith('Frame ' + id + ' ')", arg=target
    )
    assert page.js_errors == []
    page.close()


def test_a_long_session_followed_live_gets_only_what_is_new(
    browser: Any,  # noqa: F811
    long_server: tuple[Server, Path],
) -> None:
    server, db = long_server
    page = open_page(browser, server, "/sessions/s1")  # its frames: from session/new's answer (1:4)
    asked: list[str] = []
    page.on("request", lambda r: asked.append(r.url) if "/frames.json" in r.url else None)
    page.locator('#timeline tbody tr[data-frame="1:4"]').wait_for()
    page.locator("#timeline-scroll").evaluate("s => s.scrollTop = s.scrollHeight")
    page.locator('#timeline tbody tr[data-frame="1:3006"]').wait_for()
    write_run(
        db,
        [
            Record("c2a", 1, _f({"jsonrpc": "2.0", "id": 0, "method": "session/load", "params": {"sessionId": "s1"}})),
            Record("a2c", 2, _f({"jsonrpc": "2.0", "id": 0, "result": {}})),
            Record("a2c", 3, _chunk("fresh news")),
        ],
        {"argv": ["long-agent"]},
    )
    page.locator("#timeline tbody tr[data-frame]").get_by_text("fresh news").wait_for()
    polls = [url for url in asked if "after=" in url]
    assert polls and all("limit=" in url for url in polls), "a live page asks after its cursor"
    assert page.js_errors == []
    page.close()


def test_the_index_is_updated_in_place_and_every_run_is_reachable(
    browser: Any,  # noqa: F811
    tmp_path: Path,
) -> None:
    db = tmp_path / "many.db"
    for _ in range(103):
        long_run(db, 1)
    server = Server(db)
    try:
        page = open_page(browser, server, "/")
        row = page.locator('#runs tr[data-run="103"]')
        row.wait_for()
        assert page.locator("#runs tbody tr").count() == 100
        assert page.locator("#sessions tbody tr").count() == 100
        checkbox = row.locator("input[type=checkbox]")
        checkbox.focus()
        row.evaluate("tr => { tr.__kept = true; }")
        long_run(db, 1)
        page.locator('#runs tr[data-run="104"]').wait_for()
        assert row.evaluate("tr => tr.__kept === true"), "the row was not rebuilt"
        assert page.evaluate("document.activeElement.closest('tr').dataset.run") == "103", "focus stayed"
        order = page.locator("#runs tbody tr").evaluate_all("rows => rows.slice(0, 3).map(r => r.dataset.run)")
        assert order == ["104", "103", "102"]
        page.click("#runs-older")
        page.locator('#runs tr[data-run="1"]').wait_for()
        assert page.locator("#runs-older").is_hidden()
        assert page.locator("#runs tbody tr").count() == 104
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
            sessions = conn.execute("select count(*) from sessions").fetchone()[0]
        assert sessions > 100
        page.click("#sessions-older")
        page.wait_for_function(f"document.querySelectorAll('#sessions tbody tr').length === {sessions}")
        assert page.locator("#sessions-older").is_hidden()
        assert page.js_errors == []
        page.close()
    finally:
        server.stop()


def test_a_page_whose_server_stopped_says_so(
    browser: Any,  # noqa: F811
    long_server: tuple[Server, Path],
) -> None:
    _, db = long_server
    server = Server(db)
    page = open_page(browser, server, "/")
    page.locator("#runs tbody tr").first.wait_for()
    assert page.locator("#connection").is_hidden()
    server.stop()
    badge = page.locator("#connection")
    badge.wait_for(state="visible")
    assert "server unreachable" in badge.inner_text()
    page.close()


def test_long_text_is_collapsed_with_a_reveal(browser: Any, tmp_path: Path) -> None:  # noqa: F811
    db = tmp_path / "long-text.db"
    said = "x" * 5000 + " the end"
    write_run(db, [Record("a2c", 1, _chunk(said))], {"argv": ["long-text"]})
    server = Server(db)
    try:
        page = open_page(browser, server, "/runs/1")
        page.locator('#timeline tr[data-frame="1:1"]').first.click()
        raw = page.locator("#detail-raw")
        page.locator("#detail-reveal").wait_for()
        assert "the end" not in raw.inner_text() and len(raw.inner_text()) < 2100
        page.click("#detail-reveal")
        page.wait_for_function("document.getElementById('detail-raw').textContent.includes('the end')")
        page.close()
    finally:
        server.stop()


STREAMING_AGENT = """
import sys, time
def chunk(text):
    return ('{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":'
            '{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"%s"}}}}\\n' % text).encode()
rate, seconds = int(sys.argv[1]), float(sys.argv[2])
start, sent = time.monotonic(), 0
while sent < rate * seconds:
    due = int((time.monotonic() - start) * rate) + 1  # paced: `rate` frames a second, in small batches
    sys.stdout.buffer.write(b"".join(chunk(f"w{n}") for n in range(sent, min(due, int(rate * seconds)))))
    sys.stdout.buffer.flush()
    sent = max(sent, min(due, int(rate * seconds)))
    time.sleep(0.005)  # pacing the stream, not waiting for anything
sys.stdout.buffer.write(chunk("the last word"))
sys.stdout.buffer.flush()
sys.stdin.buffer.read()  # then quiet, alive, until the client hangs up
"""


def test_a_run_streaming_2000_frames_a_second_shows_its_last_frame_soon_after(
    browser: Any,  # noqa: F811
    tmp_path: Path,
) -> None:
    db = tmp_path / "live.db"
    agent = tmp_path / "stream.py"
    agent.write_text(STREAMING_AGENT)
    long_run(db, 1)  # the database exists before the ui opens it
    server = Server(db)
    proxy = start_proxy(["run", "--db", str(db), "--", sys.executable, str(agent), "2000", "4"])
    timer = watchdog(proxy, 120)
    seen: dict[bytes, float] = {}
    done = threading.Event()

    def drain() -> None:
        # The client's side of the pipe, read as fast as it comes (a full pipe would slow the
        # agent): when each awaited line came through the proxy.
        assert proxy.stdout is not None
        tail = b""
        while chunk := proxy.stdout.read1(1 << 16):
            tail = (tail + chunk)[-200:]
            for needle in (b'"text":"w1"', b"the last word"):
                if needle in tail and needle not in seen:
                    seen[needle] = time.monotonic()
            if b"the last word" in seen:
                done.set()

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        assert proxy.stdin is not None
        page = open_page(browser, server, "/")
        page.locator('#runs tr[data-run="2"]').wait_for()  # streaming: run 2 is being recorded
        page.goto(server.base + "/runs/2")
        page.locator("#live").wait_for(state="visible")
        assert done.wait(60), "the agent wrote its last frame"
        written = seen[b"the last word"]
        page.locator("#timeline tbody tr[data-frame]").get_by_text("the last word").wait_for(timeout=30_000)
        shown_after = time.monotonic() - written
        print(f"the last frame showed {shown_after:.2f} s after the agent wrote it")
        assert page.locator("#timeline tbody tr[data-frame]").count() < 300, "a virtual list by then"
        assert page.js_errors == []
        page.close()
        proxy.stdin.close()
        assert proxy.wait(timeout=60) == 0
    finally:
        timer.cancel()
        proxy.kill()
        server.stop()


def test_a_link_to_a_frame_deep_in_a_long_run_shows_it_in_the_list_and_beside_it(
    browser: Any,  # noqa: F811
    long_server: tuple[Server, Path],
) -> None:
    server, _ = long_server
    page = open_page(browser, server, "/runs/1/frames/2700")  # redirects to /runs/1#frame=1:2700
    row = page.locator('#timeline tbody tr[data-frame="1:2700"]')
    row.wait_for()
    page.wait_for_function("document.getElementById('detail-title').textContent.startsWith('Frame 1:2700 ')")
    assert "selected" in (row.get_attribute("class") or "")
    listed = page.locator("#timeline-scroll").bounding_box()
    shown = row.bounding_box()
    assert listed is not None and shown is not None
    assert listed["y"] <= shown["y"] <= listed["y"] + listed["height"], "scrolled into the list's view"
    assert page.js_errors == []
    page.close()
