"""``read.live``: a live run's frames read from its journal before the recorder commits them.

Real processes: ``acp-proxy run`` relays to ``cat``; the recorder is stopped (SIGSTOP) so that
what follows stays in the journal only; what the live reader gives then is compared, field by
field, with what the recorder commits once it runs again — seq numbering and masking included.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from acp_proxy.protocol.redact import Redactor
from acp_proxy.read import frames as selections
from acp_proxy.read import live
from acp_proxy.record import journal as jr
from acp_proxy.web import model
from tests.conftest import start_proxy, wait_for_output, watchdog

pytestmark = pytest.mark.spawns

TOKEN = "ghp_" + "R7kQ2mZx9WpL4vNc8TbY3hJd6FsG1aUe5oXi"
PASSWORD = "correct-Horse-battery-9"  # no shape of its own: masked where it is named, then learnt
SECOND = "staple-Orbit-lantern-4"  # named in a frame only the journal holds yet
SAME = ("run_id", "seq", "ts_ns", "dir", "raw", "raw_bytes", "size", "terminated", "cut", "kind", "rpc_id")
SAME_TOO = ("session_id", "update_kind", "forwarded", "batch_seq", "batch_index")


def line(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode() + b"\n"


def chunk(n: int, text: str, **more: Any) -> bytes:
    update = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}
    params = {"sessionId": "s1", "update": update, "n": n, **more}
    return line({"jsonrpc": "2.0", "method": "session/update", "params": params})


def children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        found += [int(t) for t in text]
    return found


def recorder_of(proxy: int) -> int:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for child in children(proxy):
            try:
                argv = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"acp_proxy.record.recorder" in argv:
                return child
        time.sleep(0.05)  # the recorder starts just after the agent: polled with a deadline
    raise AssertionError("no recorder")


def committed(db: Path) -> int:
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    except sqlite3.OperationalError:
        return 0  # not created yet
    try:
        return int(conn.execute("select coalesce(max(seq), 0) from frames").fetchone()[0])
    except sqlite3.OperationalError:
        return 0
    finally:
        conn.close()


def wait_committed(db: Path, seq: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while committed(db) < seq:
        assert time.monotonic() < deadline, f"frame {seq} not committed within {timeout}s"
        time.sleep(0.02)  # the recorder commits on its own schedule: polled with a deadline


def rows_of(db: Path, after: int) -> list[dict[str, Any]]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    conn.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in conn.execute("select * from frames where seq > ? order by seq", [after])]
    finally:
        conn.close()


@pytest.fixture(params=[False, True], ids=["plain", "run-redact"])
def paused(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Path, Any, int, int]]:
    """A live run whose first frames are committed and whose next ones are journaled only:
    (database, proxy, recorder pid, the last committed seq)."""
    db = tmp_path / "live.db"
    args = ["run", "--db", str(db), *(["--redact"] if request.param else []), "--", "cat"]
    proxy = start_proxy(args)
    guard = watchdog(proxy, 120)
    recorder = 0
    try:
        assert proxy.stdin is not None and proxy.stdout is not None
        init = {"protocolVersion": 1, "_meta": {"proxy": {"password": PASSWORD}}}
        proxy.stdin.write(line({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": init}))
        proxy.stdin.write(chunk(1, "first"))
        proxy.stdin.flush()
        wait_for_output(proxy.stdout, b'"n":1', 30)
        wait_committed(db, 4)
        recorder = recorder_of(proxy.pid)
        os.kill(recorder, signal.SIGSTOP)
        # Journaled only now: a batch, a line that is no JSON, secrets named and repeated.
        proxy.stdin.write(chunk(2, f"use {TOKEN} now, and {PASSWORD}"))
        proxy.stdin.write(b'[{"jsonrpc":"2.0","id":5,"method":"ping"},{"jsonrpc":"2.0","method":"x"}]\n')
        proxy.stdin.write(b"not json \xff at all\n")
        for n in range(3, 50):
            # Chunk 3 names a second password (journaled only); the last chunk repeats it.
            text = {3: "x", 49: f"again {SECOND}"}.get(n, f"chunk {n}")
            meta = {"_meta": {"proxy": {"password": SECOND}}} if n == 3 else {}
            proxy.stdin.write(chunk(n, text, **meta))
        proxy.stdin.flush()
        wait_for_output(proxy.stdout, b'"n":49', 30)
        yield db, proxy, recorder, 4
    finally:
        if recorder:
            os.kill(recorder, signal.SIGCONT)
        if proxy.stdin is not None:
            proxy.stdin.close()
        proxy.wait(timeout=60)
        guard.cancel()


def test_journal_frames_are_the_rows_the_recorder_then_commits(paused: tuple[Path, Any, int, int]) -> None:
    db, _proxy, recorder, before = paused
    assert committed(db) == before  # the recorder is stopped: nothing more is in the database
    journals = live.Journals(db)
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        tail = journals.tail(conn, 1)
        again = journals.tail(conn, 1)  # read again: the same frames, nothing twice
    finally:
        conn.close()
    assert tail.live and tail.committed == before
    # 49 chunks' echoes, the batch (1 + 2 elements) and the odd line, each both ways, but the two
    # committed already: (47 + 3 + 1 + 1) * 2.
    assert [r["seq"] for r in tail.rows] == list(range(before + 1, before + 1 + 104))
    assert [r["seq"] for r in again.rows] == [r["seq"] for r in tail.rows]
    os.kill(recorder, signal.SIGCONT)
    wait_committed(db, before + 104)
    stored = rows_of(db, before)[:104]
    for got, want in zip(tail.rows, stored, strict=True):
        assert {k: got[k] for k in SAME + SAME_TOO} == {k: want[k] for k in SAME + SAME_TOO}
    journals.close()


def test_a_live_page_shows_journal_frames_masked_as_committed_ones(paused: tuple[Path, Any, int, int]) -> None:
    db, _proxy, _recorder, before = paused
    journals = live.Journals(db)
    redactor = Redactor()
    primed = selections.Primed(Redactor())
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        first = model.frames_page(conn, "run", "1", redactor, primed, offset=0, journals=journals)
        assert first["total"] == before + 104 and first["last"] == f"1:{before + 104}"
        news = model.frames_page(conn, "run", "1", redactor, primed, after=f"1:{before}", journals=journals)
        assert news["total"] == 104 and [r["seq"] for r in news["rows"]][:3] == [5, 6, 7]
        text = json.dumps(news)
        assert TOKEN not in text and PASSWORD not in text and "[redacted]" in text
        # The filter reads the masked frame: probing for a secret's prefix finds nothing.
        for probe in (TOKEN[:8], PASSWORD[:8]):
            found = model.frames_page(
                conn, "run", "1", Redactor(), primed, filter_text=f'text:"{probe}"', journals=journals
            )
            assert found["total"] == 0, probe
        plain = model.frames_page(conn, "run", "1", Redactor(), primed, filter_text='text:"chunk 1"', journals=journals)
        assert plain["total"] == 10 * 2  # chunks 10-19, both ways
        # A jump to the last frame, past the journal frame that names a secret it repeats: a
        # fresh server's masking reads the frames before the page first.
        end = model.frames_page(
            conn, "run", "1", Redactor(), selections.Primed(Redactor()), offset=before + 103, journals=journals
        )
        assert [r["seq"] for r in end["rows"]] == [before + 104]
        assert "again" in json.dumps(end) and SECOND not in json.dumps(end)
        # The page before it outgrows a whole table: the conversation's timeline, live too.
        whole = model.conversation(
            conn, "run", "1", Redactor(), parts=("summary", "timeline"), after=f"1:{before}", journals=journals
        )
        assert whole["frames_total"] == before + 104 and whole["cursor"] == f"1:{before + 104}"
        assert whole["shown"] == 104 and TOKEN not in json.dumps(whole) and PASSWORD not in json.dumps(whole)
        probed = model.conversation(
            conn, "run", "1", Redactor(), parts=("timeline",), filter_text=f'text:"{PASSWORD[:8]}"', journals=journals
        )
        assert probed["shown"] == 0
        # Unmasked (ui --no-redact), the same page holds the secret: the masking above is real.
        bare = model.frames_page(
            conn, "run", "1", Redactor(enabled=False), selections.Primed(Redactor(enabled=False)), journals=journals
        )
        held = json.dumps(bare)
        run_redacted = PASSWORD not in conn.execute("select raw from frames where seq = 1").fetchone()[0]
        assert (TOKEN in held) == (SECOND in held) == (not run_redacted)
    finally:
        conn.close()
    journals.close()


def test_a_torn_last_record_is_left_for_the_next_read(paused: tuple[Path, Any, int, int], tmp_path: Path) -> None:
    db, _proxy, _recorder, before = paused
    copy = tmp_path / "copy" / "live.db"
    copy.parent.mkdir()
    source = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    target = sqlite3.connect(copy)
    source.backup(target)
    source.close()
    target.close()
    shutil.copytree(jr.journal_dir(db), jr.journal_dir(copy))
    journal = next(jr.journal_dir(copy).iterdir())
    payload = line({"jsonrpc": "2.0", "method": "late"})
    record = jr.HEADER.pack(jr.MARK, jr.DATA, jr.A2C, len(payload), time.time_ns()) + payload
    with journal.open("ab") as f:
        f.write(record[:20])  # torn: the header and part of the payload
    journals = live.Journals(copy)
    conn = sqlite3.connect(f"file:{copy}?mode=ro", uri=True)
    try:
        assert len(journals.tail(conn, 1).rows) == 104
        with journal.open("ab") as f:
            f.write(record[20:])
        rows = journals.tail(conn, 1).rows
        assert len(rows) == 105 and rows[-1]["method"] == "late" and rows[-1]["seq"] == before + 105
        # Zeros where a record should be (space punched out under a reader that fell behind, or a
        # damaged file): no frame from them and no exception; the database still answers.
        with journal.open("r+b") as f:
            f.seek(0, os.SEEK_END)
            f.write(struct.pack("<16x"))
        assert journals.tail(conn, 1).rows == []
    finally:
        conn.close()
        journals.close()
