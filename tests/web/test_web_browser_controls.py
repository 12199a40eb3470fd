"""The inspector shows what ``acp-proxy ctl`` did, in a real browser (Chromium via Playwright):
the official SDK client talks to the SDK echo agent through ``acp-proxy run --control`` while
the page follows the run; a person adds a fault whose rule holds a secret and releases a held
frame from the command line; the page's log of control actions gains each one (the secret
masked) and the held frame's row gains a badge with its fate.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.mcp.test_mcp import SECRET
from tests.relay.test_control_e2e import client_behind_control, ctl_ok, held_when
from tests.web.test_web_browser import Server, open_page
from tests.web.test_web_browser_features import browser  # noqa: F401  (the module's Chromium)

pytestmark = pytest.mark.spawns  # a browser, the proxy, the web inspector


def test_the_page_logs_each_ctl_action_and_badges_the_held_frame(browser: Any, tmp_path: Path) -> None:  # noqa: F811
    with client_behind_control(tmp_path, "--break", "method:session/new kind:response") as (client, db):
        held = held_when(db, "session/new")
        ui = Server(db)
        try:
            page = open_page(browser, ui, "/runs/1")
            log = page.locator("#control-log")
            log.locator('tr[data-action="break"]').wait_for()
            ctl_ok(db, "fault", "add", f'delay=1ms if text:"{SECRET}"')
            fault = log.locator('tr[data-action="fault-add"]')
            fault.wait_for()
            assert "fault added #1 delay=1ms if text:" in fault.inner_text()
            ctl_ok(db, "release", str(held["seq"]))
            release = log.locator('tr[data-action="release"]')
            release.wait_for()
            assert f"#{held['seq']}" in release.inner_text()
            badge = page.locator(f'#timeline tr[data-frame="1:{held["seq"]}"] .badge', has_text="released as #")
            badge.wait_for()
            assert badge.first.inner_text().startswith("held ")
            returncode, err = client.finish()
            assert SECRET not in page.content()
            assert page.js_errors == []
            page.close()
        finally:
            ui.stop()
    assert returncode == 0, err
