"""The frame selection's quick paths agree with the plain ones: a filter on masked text matched
by SQL where masking changes nothing (``Selection._places``), and a page near the end read
backwards (``Selection._from_end``). Filters still match the masked frame: a secret's prefix
finds nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from acp_proxy.protocol.redact import Redactor
from acp_proxy.read import frames as selections
from acp_proxy.store import database as store
from tests.web.test_web_pages import PASSWORD, long_run

FILTERS = [
    "text:w1",
    'text:"the password is"',
    f'text:"{PASSWORD[:8]}"',
    f'text:"{PASSWORD}"',
    "text:redacted",
    "-text:w1",
    "dir:c2a OR text:w11",
    "text:W1",  # a capital: no case folding
    'text:"w1%"',  # LIKE's wildcards are searched for as they are
    "text:w_1",
]


@pytest.fixture(scope="module")
def quoted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("quick") / "quoted.db"
    long_run(db, 3000, quote_every=100)
    return db


def places(page: selections.FramePage) -> list[tuple[int, int]]:
    return [(f["run_id"], f["seq"]) for f in page.frames]


@pytest.mark.parametrize("text", FILTERS)
def test_a_masked_filter_selects_the_same_frames_on_its_quick_path(quoted: Path, text: str) -> None:
    db = store.open_for_reading(quoted)
    try:
        expr = selections.parse(db, text)
        plain = selections.Selection(db, expr, Redactor()).window(None, 10_000)
        quick_selection = selections.Selection(db, expr, Redactor(), primed=selections.Primed(Redactor()))
        assert quick_selection.primed is not None  # the quick path is taken
        quick = quick_selection.window(None, 10_000)
        assert places(quick) == places(plain) and quick.total == plain.total and quick.last == plain.last
        assert all(PASSWORD not in (f["raw"] or "") for f in quick.frames)
        if PASSWORD[:8] in text:
            assert quick.total == 0  # a secret's prefix: nothing, though 30 frames quote it
        # A page in the middle, and after a cursor, as the plain path has them.
        assert places(quick_selection.window(None, 7, 11)) == places(plain)[11:18]
        if plain.frames:
            after = places(plain)[len(plain.frames) // 2]
            assert places(quick_selection.window(after, 5)) == [p for p in places(plain) if p > after][:5]
    finally:
        db.conn.close()


def test_the_secret_is_there_unmasked_so_the_probe_above_can_fail(quoted: Path) -> None:
    db = store.open_for_reading(quoted)
    try:
        expr = selections.parse(db, f'text:"{PASSWORD[:8]}"')
        assert selections.Selection(db, expr, Redactor(enabled=False)).total() == 31  # init + 30 quotes
    finally:
        db.conn.close()


@pytest.mark.parametrize("offset", [0, 1500, 2800, 2990, 3004, 3005, 4000])
def test_a_page_near_the_end_read_backwards_is_the_page_read_forwards(quoted: Path, offset: int) -> None:
    db = store.open_for_reading(quoted)
    try:
        selection = selections.Selection(db, selections.parse(db, ""), None)
        every = places(selection.window(None, 10_000))
        page = selection.window(None, 10, offset)
        assert places(page) == every[offset : offset + 10]
        assert page.more == (len(every) > offset + 10) and page.total == len(every)
    finally:
        db.conn.close()
