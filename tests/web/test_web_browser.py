"""The inspector in a real browser: Playwright driving the system Chromium against `acp-proxy ui`
running as a subprocess, on recordings made by the official SDK pair through the proxy.

Skipped, with the reason, only when Chromium (Debian's `chromium`) or Playwright is missing; CI
installs both. One browser for the whole module; each server is a real `acp-proxy ui` process
bounded by a watchdog. The suite writes the README's screenshots to docs/screenshots/.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import PROXY, proxy_env, watchdog
from tests.peers import REPO, agent_argv, client_argv, proxied, run_client, session_of, transcript
from tests.web_support import SECRETS, conversation_traffic, record

pytestmark = pytest.mark.spawns  # a browser, the proxy, the web inspector

CHROMIUM = Path("/usr/bin/chromium")
if not CHROMIUM.exists():
    pytest.skip(f"Chromium is not installed at {CHROMIUM} (apt-get install chromium)", allow_module_level=True)
pytest.importorskip("datasette", reason="the [ui] extra (Datasette) is not installed")
sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright for Python is not installed")

SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
SERVER_TIMEOUT = 300  # the watchdog's bound on each `acp-proxy ui` process
WAIT_MS = 15_000  # the longest a page may take to show something (generous: the machine is shared)
# Planted in a prompt: the SDK agent echoes it back, so it is in frames both ways.
PLANTED = f"my key is {SECRETS['key']} and Bearer {SECRETS['header'].split()[-1]}7"


class Server:
    def __init__(self, db: Path, timeout: float = SERVER_TIMEOUT) -> None:
        self.proc = subprocess.Popen(
            [*PROXY, "ui", "--no-open", "--port", "0", "--db", str(db)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=proxy_env(),
        )
        self.timer = watchdog(self.proc, timeout)
        assert self.proc.stdout is not None
        self.login = self.proc.stdout.readline().decode().strip()
        assert self.login.startswith("http://127.0.0.1:"), self.login
        self.base, _, self.token = self.login.partition("/?token=")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.communicate()
        self.timer.cancel()


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    profile = tmp_path_factory.mktemp("chromium-profile")
    with sync_api.sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(profile),
            executable_path=str(CHROMIUM),
            headless=True,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
            ],
            viewport={"width": 1500, "height": 1000},
        )
        context.set_default_timeout(WAIT_MS)
        yield context
        context.close()


@pytest.fixture(scope="module")
def sdk_server(sdk_recording: tuple[Path, str]) -> Iterator[Server]:
    server = Server(sdk_recording[0])
    yield server
    server.stop()


@pytest.fixture(scope="module")
def own_recording(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, list[str]]:
    """A database of this module's own (the live test records into it): the SDK pair with a
    planted secret in the prompt, then the synthetic conversation of every entity kind."""
    tmp = tmp_path_factory.mktemp("browser-recording")
    db = tmp / "rec.db"
    agent = agent_argv("--permission", "--state-dir", str(tmp / "state"))
    session = session_of(transcript(run_client(proxied(agent, db), "--prompt", PLANTED)))
    record(db, conversation_traffic())
    return db, session, agent


@pytest.fixture(scope="module")
def own_server(own_recording: tuple[Path, str, list[str]]) -> Iterator[Server]:
    server = Server(own_recording[0])
    yield server
    server.stop()


def open_page(browser: Any, server: Server, path: str) -> Any:
    page = browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.js_errors = errors
    page.goto(server.login)  # takes the token, sets the cookie, lands on /
    page.goto(server.base + path)
    return page


def screenshot(page: Any, name: str) -> None:
    """A full-page picture for the README. It goes into the repository, so the paths of the
    machine that took it (the interpreter, the checkout, temporary folders) are shortened in
    the page's text first; nothing else is touched."""
    places = sorted({sys.executable, sys.prefix, str(REPO), tempfile.gettempdir()}, key=len, reverse=True)
    page.uncheck("#follow")  # live updates would redraw the page under the picture
    page.wait_for_function("!document.body.dataset.polling")  # an update under way lands first
    page.evaluate(
        """places => {
            const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
            for (let n = walker.nextNode(); n; n = walker.nextNode()) {
                for (const p of places) {
                    n.textContent = n.textContent.split(p).join(p.endsWith("python") ? "python" : "…");
                }
            }
        }""",
        places,
    )
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / name), full_page=True)


# -- what a person sees -------------------------------------------------------------------------


def test_the_page_of_a_real_sdk_recording_shows_its_conversation(browser: Any, sdk_server: Server) -> None:
    page = open_page(browser, sdk_server, "/runs/1")
    conversation = page.locator("#conversation")
    conversation.get_by_text("Client sent:hello world").wait_for()
    text = conversation.inner_text()
    assert "hello world" in text and "Write notes.txt" in text and "allow-once" in text
    assert "Turn 1" in text and "stop: end_turn" in text
    assert page.locator("#timeline tbody tr[data-frame]").count() >= 10
    assert page.locator("#timeline td.lane.c2a").count() >= 3 and page.locator("#timeline td.lane.a2c").count() >= 3
    page.locator("#waterfall svg").first.wait_for()
    page.locator("#latency svg").first.wait_for()
    assert page.js_errors == []
    page.close()


def test_history_of_a_loaded_session_is_marked(
    browser: Any, sdk_server: Server, sdk_recording: tuple[Path, str]
) -> None:
    page = open_page(browser, sdk_server, f"/sessions/{sdk_recording[1]}")
    page.locator("#conversation .entity.replay").first.wait_for()
    assert page.locator("#conversation .entity.replay .badge.history").count() >= 1
    assert page.locator("#conversation").get_by_text("again").count() >= 1
    page.close()


def test_the_filter_box_narrows_the_timeline_and_a_bad_filter_says_why(browser: Any, sdk_server: Server) -> None:
    page = open_page(browser, sdk_server, "/runs/1")
    rows = page.locator("#timeline tbody tr[data-frame]:not(.chunks)")
    rows.first.wait_for()
    before = rows.count()
    page.fill("#filter", "dir:c2a kind:request")
    page.click("#filter-form button")
    page.wait_for_function(f"document.querySelectorAll('#timeline tbody tr[data-frame]').length < {before}")
    methods = page.locator("#timeline tbody tr td:nth-child(5)").all_inner_texts()
    assert methods == ["initialize", "session/new", "session/prompt"]
    assert "filter=dir" in page.url
    page.fill("#filter", "kind:nonsense")
    page.click("#filter-form button")
    error = page.locator("#filter-error")
    error.wait_for(state="visible")
    assert "nonsense" in error.inner_text() and "\n" not in error.inner_text().strip()
    page.close()


def test_a_collapsed_chunk_row_expands(browser: Any, sdk_server: Server) -> None:
    page = open_page(browser, sdk_server, "/runs/1")
    head = page.locator("#timeline tr.chunks").first
    head.wait_for()
    assert "2 chunks" in head.inner_text() and "Client sent:hello world" in head.inner_text()
    children = page.locator("#timeline tr.child")
    assert children.count() == 2 and not children.first.is_visible()
    head.locator("button.toggle").click()
    children.first.wait_for(state="visible")
    assert children.nth(1).is_visible()
    assert children.nth(1).locator("td.preview").inner_text() == "hello world"
    head.locator("button.toggle").click()
    children.first.wait_for(state="hidden")
    page.close()


def test_selecting_a_row_shows_the_frame_verbatim_and_its_json_tree_opens(browser: Any, own_server: Server) -> None:
    page = open_page(browser, own_server, "/runs/2")
    row = page.locator('#timeline tr[data-frame="2:1"]')
    row.click()
    raw = page.locator("#detail-raw")
    raw.wait_for()
    assert raw.inner_text().startswith('{"jsonrpc":"2.0","id":0,"method":"initialize"')
    tree = page.locator("#detail-tree")
    meta = tree.locator('details[data-mark="meta"]')
    assert meta.count() == 1 and "_meta" in meta.locator("summary").first.inner_text()
    unknown = tree.locator('[data-mark="unknown"]')
    assert unknown.count() == 1 and "bogusCapability" in unknown.inner_text(), "marks are shown opened"
    assert "not in schema" in unknown.inner_text()
    # Deeper nodes start closed and open on a click.
    proxy = tree.locator('details[data-path=\'["params","_meta","proxy"]\']')
    headers = tree.locator('details[data-path=\'["params","_meta","proxy","headers"]\']')
    assert meta.get_attribute("open") is None and not proxy.is_visible()
    meta.locator("summary").first.click()
    proxy.wait_for(state="visible")
    assert not headers.is_visible()
    proxy.locator("summary").first.click()
    headers.wait_for(state="visible")
    headers.locator("summary").first.click()
    headers.get_by_text('"[redacted]"').wait_for()
    assert '"Authorization": "[redacted]"' in headers.inner_text()
    screenshot(page, "run.png")
    page.close()


def test_two_runs_side_by_side_with_the_differences_highlighted(
    browser: Any, sdk_server: Server, sdk_recording: tuple[Path, str]
) -> None:
    from click.testing import CliRunner

    from acp_proxy.cli.commands import cli

    page = open_page(browser, sdk_server, "/diff/1/2")
    page.locator("table.diff").first.wait_for()
    tables = page.locator("table.diff")
    # As `acp-proxy diff`: what differs outside the turns first, then each turn.
    expected = json.loads(CliRunner().invoke(cli, ["diff", "--db", str(sdk_recording[0]), "--json", "1", "2"]).stdout)
    assert tables.nth(0).locator("tr.differs td.key").all_inner_texts() == expected["connection"]["differs"]
    assert tables.nth(1).locator("tr.differs td.key").all_inner_texts() == ["prompt", "agent"]
    assert "turn(s) differ" in page.locator("#diff-verdict").inner_text()
    screenshot(page, "diff.png")
    page.close()


# -- live ---------------------------------------------------------------------------------------


def test_a_run_started_after_the_page_loaded_appears_and_its_frames_stream_in(
    browser: Any, own_server: Server, own_recording: tuple[Path, str, list[str]]
) -> None:
    db, session, agent = own_recording
    index = open_page(browser, own_server, "/")
    index.locator("#runs tbody tr").first.wait_for()
    runs_before = index.locator("#runs tbody tr").count()
    follow = open_page(browser, own_server, f"/sessions/{session}")
    follow.locator("#timeline tbody tr").first.wait_for()
    frames_before = follow.locator("#timeline tbody tr[data-frame]:not(.chunks)").count()
    for page in (index, follow):
        page.evaluate("window.__not_reloaded = true")
    new_run = runs_before + 1
    client = subprocess.Popen(
        client_argv(proxied(agent, db), "--load", session, "--prompt", "streamed live"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=proxy_env(),
    )
    timer = watchdog(client, 120)
    try:
        recorded_at = _wait_for_run(db, new_run)
        index.locator(f'#runs tr[data-run="{new_run}"]').wait_for()
        appeared_after = time.monotonic() - recorded_at
        follow.locator("#conversation").get_by_text("streamed live").first.wait_for()
        follow.wait_for_function(
            f"document.querySelectorAll('#timeline tbody tr[data-frame]:not(.chunks)').length > {frames_before}"
        )
    finally:
        client.communicate(timeout=120)
        timer.cancel()
    assert client.returncode == 0
    print(f"the new run showed {appeared_after:.2f} s after it was recorded")
    # Generous: the pages poll every 0.4 s; a loaded 2-core machine runs the browser, the
    # client, the proxy, the agent and the recorder at once.
    assert appeared_after < 10.0, f"the new run showed {appeared_after:.2f} s after it was recorded"
    new_ids = follow.locator("#timeline tbody tr[data-frame]").evaluate_all("rows => rows.map(r => r.dataset.frame)")
    assert any(i.startswith(f"{new_run}:") for i in new_ids)
    for page in (index, follow):
        assert page.evaluate("window.__not_reloaded") is True, "the page was not reloaded"
        assert page.js_errors == []
    screenshot(index, "index.png")
    index.close()
    follow.close()


def _wait_for_run(db: Path, run_id: int, timeout: float = 60) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
            if conn.execute("select 1 from runs where id = ?", [run_id]).fetchone():
                return time.monotonic()
        time.sleep(0.02)  # polling the database for a condition, with a deadline
    raise AssertionError(f"run {run_id} was never recorded")


# -- secrets and the lock -----------------------------------------------------------------------


def test_a_planted_secret_never_reaches_the_page(browser: Any, own_server: Server) -> None:
    bodies: dict[str, str] = {}
    page = browser.new_page()

    def through(route: Any) -> None:
        # Every answer passes here on its way to the page, so each body is seen whole.
        response = route.fetch(max_redirects=0)
        bodies[f"{len(bodies)} {route.request.url}"] = response.body().decode("utf-8", errors="replace")
        route.fulfill(response=response)

    page.route("**/*", through)
    page.goto(own_server.login)
    ready = {"/": "#runs tbody tr", "/runs/1": "#timeline tbody tr", "/runs/2": "#timeline tbody tr"}
    ready["/diff/1/2"] = "table.diff"
    for path in (*ready, "/rec/frames?_size=max", "/rec.json?sql=select+raw+from+frames"):
        page.goto(own_server.base + path)
        if path in ready:
            page.locator(ready[path]).first.wait_for()
        if path.startswith("/runs/"):
            for head in page.locator("#timeline tr.chunks button.toggle").all():
                head.click()  # every chunk visible, so that each can be selected
            for row in page.locator("#timeline tbody tr[data-frame]:not(.chunks)").all():
                with page.expect_response(lambda r: "/frames/" in r.url):
                    row.click()
                page.wait_for_function(
                    "id => document.getElementById('detail-title').textContent.startsWith('Frame ' + id)",
                    arg=row.get_attribute("data-frame"),
                )
        dom = page.content() + page.inner_text("body")
        leaked = [name for name, value in SECRETS.items() if value.split()[-1] in dom]
        assert leaked == [], (path, leaked)
    page.unroute("**/*")
    frame_answers = [url for url in bodies if "/frames/" in url]
    assert len(frame_answers) >= 30, "every frame of both runs was opened"
    for url, body in bodies.items():
        leaked = [name for name, value in SECRETS.items() if value.split()[-1] in body]
        assert leaked == [], (url, leaked)
    # The secrets were there to be masked: the answers show where.
    assert sum("[redacted]" in body for body in bodies.values()) >= 5
    page.close()


def test_requests_without_the_token_or_with_a_foreign_host_are_refused(browser: Any, sdk_server: Server) -> None:
    page = browser.new_page()
    browser.clear_cookies()
    response = page.goto(sdk_server.base + "/runs/1")
    assert response is not None and response.status == 401
    assert "token" in page.inner_text("body")
    assert "Client sent" not in page.content()
    api = browser.request
    port = sdk_server.base.rsplit(":", 1)[1]
    auth = {"authorization": f"Bearer {sdk_server.token}"}
    assert api.get(sdk_server.base + "/.json", headers=auth).status == 200
    rebinding = api.get(sdk_server.base + "/.json", headers={**auth, "host": f"attacker.example:{port}"})
    assert rebinding.status == 403
    assert api.get(sdk_server.base + "/.json").status == 401
    page.close()


def test_the_readme_shows_the_screenshots_the_tests_above_took() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    for name in ("index.png", "run.png", "diff.png"):
        assert f"docs/screenshots/{name}" in readme
        assert (SCREENSHOTS / name).stat().st_size > 10_000
