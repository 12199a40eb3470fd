"""The primed masking's scan (``Primed._scan``) learns what reading every line in relay order
learns: it reads only the lines ``Redactor.teaching_pattern`` finds something in, and the pages
it masks, and the frames it says masking changed, are the slow path's.

The run is made of the lines that could slip past a scan: a value learnt in the middle of a
batch and repeated after it (and before it, where it must stay as it is), a credential named
with a KELVIN SIGN (lowered by ``str.lower`` to a "k"), a name spelled with a JSON escape, a
line holding a NUL (the joined batch cannot be split by it), a value quoted in another case.
"""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from acp_proxy.protocol.redact import MASK, Redactor
from acp_proxy.read import frames as selections
from acp_proxy.record.importers import Record, write_run

TAUGHT = ["Sekret-Value-1", "Later-Secret-99", "Kelvin-Value-77", "Escaped-Secret-55", "sk-" + "A1" * 12]


def said(text: str) -> bytes:
    update = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}
    message = {"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s", "update": update}}
    return json.dumps(message, ensure_ascii=False).encode()


def lines() -> list[bytes]:
    out = [json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"password": TAUGHT[0]}}).encode()]
    for i in range(60):
        out.append(said(f"w{i}"))
        if i == 5:
            out.append(said(f"quoted early {TAUGHT[1]}"))  # before it is named: stays
            out.append(said(f"remember {TAUGHT[0]} and {TAUGHT[0].lower()}"))
            out.append(json.dumps({"jsonrpc": "2.0", "method": "x", "params": {"env": {"K": TAUGHT[1]}}}).encode())
            out.append(said(f"then {TAUGHT[1]}"))  # in the batch that named it
        if i == 20:
            out.append(json.dumps({"params": {"api\u212aey": TAUGHT[2]}}, ensure_ascii=False).encode())
            out.append(b'{"params": {"pass\\u0077ord": "' + TAUGHT[3].encode() + b'"}}')
            out.append(b"not json \x00 key " + TAUGHT[4].encode())  # a key's shape, learnt
        if i == 40:
            out.append(said(" ".join(TAUGHT)))
            out.append(said(TAUGHT[2].upper()))
            out.append(said("glued" + TAUGHT[4]))  # no longer a key's shape: masked as a value learnt
    return out


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("primed") / "run.db"
    write_run(path, [Record("a2c", 1_000 + i, line) for i, line in enumerate(lines())], {"argv": ["agent"]})
    return path


def rows(path: Path) -> list[dict[str, Any]]:
    conn = sqlite3.connect(path)
    conn.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in conn.execute("select * from frames where run_id = 1 order by seq")]
    finally:
        conn.close()


def slow_path(rules: list[str], frames: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], set[int]]:
    """Every frame masked after reading every one before it, line by line; the frames it changed."""
    reader = Redactor(rules)
    masked, dirty = [], set()
    for row in frames:
        out = reader.frame_row(row)
        masked.append(out)
        if out.get("raw") != row.get("raw"):
            dirty.add(row["seq"])
    return masked, dirty


@pytest.mark.parametrize("rules", [[], ["re:w5\\d"]], ids=["built-in", "user rules: every line read"])
@pytest.mark.parametrize("rows_per_scan", [7, 5000])
def test_a_jump_anywhere_masks_as_reading_every_line_does(
    db: Path, rules: list[str], rows_per_scan: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(selections, "_SCAN_ROWS", rows_per_scan)
    frames = rows(db)
    masked, dirty = slow_path(rules, frames)

    def at(text: str) -> int:
        return next(i for i, row in enumerate(frames) if text in (row["raw"] or ""))

    early, named, nul, everything = at("quoted early"), at('"env"'), at("\x00"), at(" ".join(TAUGHT))
    # The run holds each case: the slow path masks what the scan must.
    assert frames[early]["raw"] == masked[early]["raw"]  # quoted before it is named: stays
    assert TAUGHT[1] not in masked[named + 1]["raw"]
    assert all(t not in masked[everything]["raw"] for t in TAUGHT)
    assert masked[everything]["raw"].count(MASK) == len(TAUGHT)
    assert TAUGHT[0].lower() in masked[named - 1]["raw"] and TAUGHT[2].upper() in masked[everything + 1]["raw"]
    assert masked[everything + 2]["raw"].endswith('"glued[redacted]"}}}}')
    places = [0, 1, early, early + 1, named, named + 1, named + 2, nul - 1, nul, nul + 1]
    places += [everything, everything + 1, everything + 2]
    conn = sqlite3.connect(db)
    try:
        for index in [*places, len(frames) - 1]:
            primed = selections.Primed(Redactor(rules))
            (page,) = primed.masked(conn, [frames[index]])
            assert page == masked[index], index
            assert set(primed.dirty(1)) == {s for s in dirty if s <= frames[index]["seq"]}, index
    finally:
        conn.close()


def test_the_scan_reads_only_the_lines_worth_reading(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(selections, "_SCAN_ROWS", 7)  # the batch with the NUL is read line by line
    read: list[str] = []
    original = Redactor.raw

    def counted(self: Redactor, text: str) -> str:
        read.append(text)
        return original(self, text)

    monkeypatch.setattr(Redactor, "raw", counted)
    conn = sqlite3.connect(db)
    try:
        selections.Primed(Redactor()).upto(conn, 1, 10_000)
    finally:
        conn.close()
    filler = [line for line in read if re.search(r'"text": "w\d+"', line)]
    # 10 lines can teach or change, 7 share the NUL's batch (of which 6 fillers), of 60 fillers.
    assert 10 <= len(read) <= 18 and len(filler) <= 6, read
