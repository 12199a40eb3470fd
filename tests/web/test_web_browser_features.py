"""The inspector's features in a real browser (Playwright, the system Chromium) against
`acp-proxy ui` as a subprocess: the playhead, the session panel, marks computed from the
recording and marks a person sets with a key, search across runs, the run picker of the diff,
and the live control panel of a run started with `run --control` by the official SDK pair.

Recordings are the real recorder's (the synthetic conversation of every entity kind, the SDK
pair through the proxy); what a page did is checked in the database afterwards.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.web.test_web_browser import CHROMIUM, WAIT_MS, Server, open_page, screenshot, sync_api
from tests.web_support import SECRETS, SESSION, conversation_traffic, record

pytestmark = pytest.mark.spawns  # a browser, the proxy, the web inspector


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One headless Chromium for the module, as ``test_web_browser`` starts it."""
    profile = tmp_path_factory.mktemp("chromium-profile")
    with sync_api.sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(profile),
            executable_path=str(CHROMIUM),
            headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"],
            viewport={"width": 1500, "height": 1000},
        )
        context.set_default_timeout(WAIT_MS)
        yield context
        context.close()


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two runs of the synthetic conversation, the second with its last chunk changed."""
    db = tmp_path_factory.mktemp("features") / "rec.db"
    traffic = conversation_traffic()
    record(db, traffic)
    changed = [(d, line.replace(b"Hello, ", b"Howdy, ")) for d, line in traffic]
    record(db, changed)
    return db


@pytest.fixture(scope="module")
def server(two_runs: Path) -> Iterator[Server]:
    s = Server(two_runs)
    yield s
    s.stop()


def marks_in(db: Path) -> list[tuple[int, int, str | None]]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return [tuple(r) for r in conn.execute("select run_id, seq, note from marks order by run_id, seq")]


# -- the playhead -------------------------------------------------------------------------------


def test_the_playhead_steps_through_the_conversation_frame_by_frame(browser: Any, server: Server) -> None:
    page = open_page(browser, server, "/runs/1")
    conversation = page.locator("#conversation")
    conversation.get_by_text("edit a file.").first.wait_for()
    page.click("#ph-enter")
    page.wait_for_function("document.body.dataset.playhead === 'start'")
    assert "Nothing said yet" in conversation.inner_text()
    for _ in range(5):
        page.keyboard.press("]")
    page.wait_for_function("document.body.dataset.playhead === '5'")
    assert "frame 5 of 19" in page.inner_text("#ph-where") and "session/prompt" in page.inner_text("#ph-where")
    text = conversation.inner_text()
    assert "use [redacted]" in text or "use " in text
    assert "Hello" not in text, "the agent has said nothing at the prompt"
    page.locator('#timeline tr.selected[data-frame="1:5"]').wait_for()  # selected in the list once the steps pause
    page.click("#ph-next")
    page.click("#ph-next")
    page.wait_for_function("document.body.dataset.playhead === '7'")
    assert "Hello, I will" in conversation.inner_text() and "edit a file." not in conversation.inner_text()
    page.keyboard.press("[")
    page.wait_for_function("document.body.dataset.playhead === '6'")
    assert "I will" not in conversation.inner_text()
    page.click("#ph-last")
    page.wait_for_function("document.body.dataset.playhead === '20'")
    assert page.locator("#ph-next").is_disabled()
    screenshot(page, "playhead.png")
    page.click("#ph-leave")
    conversation.get_by_text("edit a file.").first.wait_for()
    assert SECRETS["key"] not in page.content()
    assert page.js_errors == []
    page.close()


# -- the session panel --------------------------------------------------------------------------


def test_the_session_panel_shows_both_sides_and_their_capabilities(browser: Any, server: Server) -> None:
    page = open_page(browser, server, "/runs/2")
    facts = page.locator("#session-facts")
    facts.locator('dd[data-fact="client"]').wait_for()
    assert facts.locator('dd[data-fact="client"]').inner_text() == "web-test-client 1"
    assert facts.locator('dd[data-fact="agent"]').inner_text() == "web-test-agent 2"
    assert facts.locator('dd[data-fact="protocol version"]').inner_text() == "1"
    assert f"{SESSION} (run 2" in facts.locator('dd[data-fact="session"]').inner_text()
    assert "readTextFile" in facts.locator('dd[data-fact="client capabilities"]').inner_text()
    assert "1 turn(s)" in facts.locator('dd[data-fact="state"]').inner_text()
    # Addressed by run and id: the same session id in the other run is that run's.
    other = open_page(browser, server, "/runs/1")
    other.locator('#session-facts dd[data-fact="session"]', has_text="(run 1").wait_for()
    assert other.locator("#session-pick option").all_inner_texts() == [f"run 1 · session {SESSION}"]
    assert page.js_errors == [] and other.js_errors == []
    page.close()
    other.close()


def test_playhead_steps_do_not_ask_again_for_a_turns_checks(browser: Any, server: Server) -> None:
    """The conversation is drawn again at each step, its turn heads with it: a turn's findings,
    once the check is past it, come from the page's memory, not from checks.json again."""
    page = open_page(browser, server, "/runs/1")
    page.locator("#conversation .turn-head .badge.checked").wait_for()
    asked: list[str] = []
    page.on("request", lambda request: asked.append(request.url) if "/checks.json" in request.url else None)
    page.click("#ph-enter")
    page.wait_for_function("document.body.dataset.playhead === 'start'")
    for step in range(1, 13):
        page.keyboard.press("]")
        page.wait_for_function(f"document.body.dataset.playhead === '{step}'")
    page.click("#ph-leave")
    page.locator("#conversation .turn-head .badge.checked").wait_for()
    turn_asks = [url for url in asked if "to=999999999999999" in url or "from=5&" in url]
    # Each distinct turn window (the open turn at its prompt, the turn once ended) is asked at
    # most once; before, steps that drew a turn head again asked again.
    assert len(turn_asks) == len(set(turn_asks)), turn_asks
    assert page.js_errors == []
    page.close()


# -- marks --------------------------------------------------------------------------------------


def test_schema_and_lifecycle_marks_are_computed_for_a_run_recorded_without_check(browser: Any, server: Server) -> None:
    page = open_page(browser, server, "/runs/1")
    badge = page.locator('#timeline tr[data-frame="1:13"] .badge.checked')
    badge.wait_for()
    assert badge.inner_text() == "capability/missing" and "terminal" in (badge.get_attribute("title") or "")
    assert page.locator("#timeline .badge.checked").count() == 1
    # The turn the frame belongs to carries it as well.
    turn = page.locator("#conversation .turn-head", has_text="Turn 1")
    turn.locator(".badge.checked").wait_for()
    assert "1 finding: capability/missing" in turn.inner_text()
    assert page.locator("#conversation .turn-head .badge.checked").count() == 1
    page.close()


def test_m_marks_and_unmarks_the_frame_and_the_recording_keeps_it(browser: Any, server: Server, two_runs: Path) -> None:
    page = open_page(browser, server, "/runs/1")
    page.locator('#timeline tr[data-frame="1:3"]').click()
    page.locator("#detail-raw").wait_for()
    page.keyboard.press("m")
    page.locator('#timeline tr[data-frame="1:3"] .badge.marked').wait_for()
    assert marks_in(two_runs) == [(1, 3, None)]
    page.once("dialog", lambda dialog: dialog.accept("the session starts here"))
    page.keyboard.press("M")
    page.locator('#timeline tr[data-frame="1:3"] .badge.marked', has_text="the session starts").wait_for()
    assert marks_in(two_runs) == [(1, 3, "the session starts here")]
    # What `frames marked` finds, the page's filter finds.
    page.fill("#filter", "marked")
    page.click("#filter-form button")
    page.wait_for_function("document.querySelectorAll('#timeline tbody tr[data-frame]').length === 1")
    page.locator('#timeline tr[data-frame="1:3"]').click()
    page.keyboard.press("m")
    page.locator('#timeline tr[data-frame="1:3"] .badge.marked').wait_for(state="detached")
    assert marks_in(two_runs) == []
    # A change without the CSRF token is refused, even from the page with its cookie.
    status = page.evaluate(
        """async () => (await fetch('/runs/1/frames/3/mark', {method: 'POST',
            headers: {'content-type': 'application/json'}, body: '{"marked": true}'})).status"""
    )
    assert status == 403 and marks_in(two_runs) == []
    assert page.js_errors == []
    page.close()


# -- search ---------------------------------------------------------------------------------------


def test_search_finds_runs_by_agent_and_frames_across_runs_linking_to_them(browser: Any, server: Server) -> None:
    page = open_page(browser, server, "/search")
    page.locator("#search-runs tbody tr").first.wait_for()
    assert page.locator("#search-runs tbody tr").count() == 2
    page.fill("#search-agent", "nobody")
    page.click("#runs-form button[type=submit]")
    page.wait_for_function("document.querySelectorAll('#search-runs tbody tr').length === 0")
    page.fill("#search-agent", "web-test-agent")
    page.select_option("#search-status", "ended")
    page.click("#runs-form button[type=submit]")
    page.wait_for_function("document.querySelectorAll('#search-runs tbody tr').length === 2")
    page.fill("#search-filter", 'text:"Howdy"')
    page.click("#frames-form button")
    link = page.locator("#search-frames tbody tr a")
    link.first.wait_for()
    assert link.all_inner_texts() == ["2:6"]
    assert "agent=web-test-agent" in page.url and "filter=" in page.url
    screenshot(page, "search.png")
    link.first.click()
    page.wait_for_url("**/runs/2#frame=2:6")
    page.locator("#detail-title", has_text="Frame 2:6").wait_for()
    assert page.js_errors == []
    page.close()


# -- the diff -------------------------------------------------------------------------------------


def test_both_sides_of_a_diff_are_picked_on_the_page_and_frames_show_their_field_changes(
    browser: Any, server: Server
) -> None:
    page = open_page(browser, server, "/diff/1/1")
    page.locator("#pick-left option").nth(1).wait_for(state="attached")
    assert page.locator("#pick-right option").count() == 2
    page.wait_for_function("document.getElementById('frame-diff-counts').textContent.includes('0 changed')")
    page.select_option("#pick-right", "2")
    page.click("#diff-pick button")
    page.wait_for_url("**/diff/1/2")
    changed = page.locator("#frame-diff tr.changed")
    changed.first.wait_for()
    assert changed.count() == 1
    cells = changed.first.locator("td").all_inner_texts()
    assert cells[:2] == ["6", "6"] and cells[5] == "params.update.content.text"
    assert cells[6:] == ['"Hello, "', '"Howdy, "']
    assert page.locator("#frame-diff tr.same").count() == 0
    page.check("#frame-diff-same")
    page.locator("#frame-diff tr.same").first.wait_for()
    changed.first.locator("a").first.click()
    page.wait_for_url("**/runs/1#frame=1:6")
    assert page.js_errors == []
    page.close()


# -- live control ---------------------------------------------------------------------------------


def test_the_control_panel_of_a_live_run_releases_held_frames_and_edits_faults(browser: Any, tmp_path: Path) -> None:
    from tests.relay.test_control_e2e import client_behind_control, held_when

    with client_behind_control(tmp_path, "--break", "method:session/new kind:response") as (client, db):
        held = held_when(db, "session/new")  # the client waits for its session
        ui = Server(db)
        try:
            page = open_page(browser, ui, "/runs/1")
            row = page.locator(f'#held tr[data-held="{held["seq"]}"]')
            row.wait_for()
            assert "session/new" in row.inner_text()
            # A fault rule added and removed from the page, as `ctl fault add/remove` would.
            page.fill("#fault-rule", "delay=1ms if method:nothing/here")
            page.click("#fault-form button")
            page.locator("#faults tbody tr", has_text="nothing/here").wait_for()
            page.locator("#faults tbody tr button").click()
            page.wait_for_function("document.querySelectorAll('#faults tbody tr').length === 0")
            page.fill("#fault-rule", "explode if dir:c2a")
            page.click("#fault-form button")
            page.locator("#control-error", has_text="explode").wait_for()
            # Hold the agent's first chunk, then release everything from the page.
            page.fill("#break-filter", "method:session/update")
            page.click("#break-form button")
            page.locator("#breaks", has_text="method:session/update").wait_for()
            row.locator("button.release").click()
            chunk = page.locator("#held tbody tr", has_text="session/update").first
            chunk.wait_for()
            assert client.until("prompt: hello world")[-1] == "prompt: hello world"
            assert not any(line.startswith("agent:") for line in client.seen_now()), "the chunk is held"
            assert SECRETS["key"] not in page.content()
            screenshot(page, "control.png")
            page.check("#follow")  # the screenshot paused live updates
            page.click("#breaks-clear")
            page.locator("#breaks", has_text="no breakpoint").wait_for()
            while page.locator("#held tbody tr").count() > 0:
                seq = page.locator("#held tbody tr").first.get_attribute("data-held")
                page.locator(f'#held tr[data-held="{seq}"] button.release').click()
                page.locator(f'#held tr[data-held="{seq}"]').wait_for(state="detached")
            returncode, err = client.finish()
            assert page.js_errors == []
            page.close()
        finally:
            ui.stop()
    assert returncode == 0, err
    assert "agent: hello world" in client.seen
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        notes = [r[0] for r in conn.execute("select note from frames where note like '%released%'")]
    assert len(notes) >= 2, notes
