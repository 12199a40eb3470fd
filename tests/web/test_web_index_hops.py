"""The inspector's index in a real browser lists a session only a proxy chain carries: its row
says the hop and leads to the run whose hop holds it (it has no session page of its own)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.read.test_hops import _chain_sessions
from tests.web.test_web_browser import Server, browser, open_page  # noqa: F401 (browser: a fixture)

pytestmark = pytest.mark.spawns  # a browser and the web inspector


def test_the_index_lists_a_chains_session_with_its_hop_and_its_run(browser: Any, tmp_path: Path) -> None:  # noqa: F811
    db = tmp_path / "rec.db"
    runs = _chain_sessions(db)
    server = Server(db)
    try:
        page = open_page(browser, server, "/")
        row = page.locator('#sessions tr[data-session="sess_deep"]')
        row.wait_for()
        assert page.locator("#sessions tbody tr").count() == 6
        cells = row.locator("td")
        assert cells.nth(3).inner_text().strip() == f"{runs['deep']} (hop 2)"
        assert cells.nth(0).locator("a").get_attribute("href") == f"/runs/{runs['deep']}"
        own = page.locator(f'#sessions tr[data-session="sess_1"] a[href="/runs/{runs["direct"]}"]')
        assert own.count() == 1 and "hop" not in own.locator("xpath=ancestor::td").inner_text()
        assert page.locator('#sessions tr[data-session="sess_1"] a[href="/sessions/sess_1"]').count() == 3
        page.click(f'#sessions tr[data-session="sess_deep"] a[href="/runs/{runs["deep"]}"] >> nth=0')
        page.wait_for_url(f"**/runs/{runs['deep']}")
        assert page.js_errors == []
        page.close()
    finally:
        server.stop()
