"""Batches from the recorder to its writer: long lines beside their batch, read ahead in order.

A line of LINE_BESIDE_BYTES or more travels after its batch's encoding as its own bytes (no
copy into the batch and out of it); the writer reads the next batch while it commits the one
before. What must hold: every row gets exactly its own line back, stored as text; a redacted
run keeps its masked text in the row; the writer's read-ahead keeps the order, holds at most
two batches, and a batch cut short by a dead recorder is never applied.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
import threading
import time
from pathlib import Path

import msgspec
import pytest

from acp_proxy.protocol.frames import FrameRecord
from acp_proxy.protocol.framing import Line
from acp_proxy.record import indexer, writer
from acp_proxy.record.indexer import LINE_BESIDE_BYTES
from tests.conftest import run_proxy
from tests.relay.test_hostile_input import relay_through_cat

LONG = LINE_BESIDE_BYTES


def _line(method: str, size: int, fill: str = "a") -> bytes:
    head = f'{{"jsonrpc":"2.0","method":"{method}","params":{{"t":"'.encode()
    tail = b'"}}'
    body = (fill * size)[: max(0, size - len(head) - len(tail))].encode()
    return head + body + tail  # ``size`` bytes when ``fill`` is ASCII, more when it is not


def _requests_and_notices() -> list[bytes]:
    """Lines of several shapes (request, notification, invalid), long and short, interleaved."""
    return [
        _line("a/one", 100),
        _line("b/two", LONG),  # exactly the threshold
        b'{"jsonrpc":"2.0","id":7,"method":"c/three","params":{"t":"' + b"x" * (3 * LONG) + b'"}}',
        b"not json at all " + b"y" * LONG,
        _line("d/four", LONG - 1),
        _line("e/five", 2 * LONG, fill="\u00e9\U0001f600"),
        _line("a/one", 10),
        b'{"jsonrpc":"2.0","id":8,"result":{"t":"' + b"z" * LONG + b'"}}',
    ]


def _records(lines: list[bytes]) -> list[FrameRecord]:
    return [indexer.make_record(1, seq, seq, 0, Line(line, len(line), True, False)) for seq, line in enumerate(lines)]


def _taken(lines_beside: bool) -> tuple[list, list, list]:
    inserts = indexer._SparseInserts(lines_beside=lines_beside)
    for rec in _records(_requests_and_notices()):
        inserts.add(rec)
    return inserts.take()


def test_every_long_line_goes_beside_its_batch_and_comes_back_to_its_own_row() -> None:
    inline, no_places, no_lines = _taken(lines_beside=False)
    assert no_places == [] and no_lines == []
    batches, places, lines = _taken(lines_beside=True)
    assert len(places) == 5  # the lines of LONG bytes or more
    assert len(batches) >= 3  # several shapes: the places name batches, rows and columns
    assert [len(line) for line in lines] == [place[3] for place in places]
    for index, row, column, _ in places:
        assert batches[index][1][row][column] == b""
    message = {"batches": batches, "beside": places, "lines": lines}
    indexer.place_beside(message)
    assert "beside" not in message and "lines" not in message
    assert [sql for sql, _ in batches] == [sql for sql, _ in inline]
    for (_, rows), (_, expected) in zip(batches, inline, strict=True):
        as_text = [[v.decode() if isinstance(v, bytes) else v for v in row] for row in rows]
        assert as_text == [list(row) for row in expected]


def test_a_long_line_that_is_not_utf8_stays_in_its_row_as_bytes() -> None:
    bad = b'{"jsonrpc":"2.0","method":"x","params":{"t":"\xff' + b"a" * LONG + b'"}}'
    inserts = indexer._SparseInserts()
    rec = _records([bad])[0]
    inserts.add(rec)
    batches, places, lines = inserts.take()
    assert places == [] and lines == []
    assert bad in batches[0][1][0]  # raw_bytes, in the row


def test_raw_given_as_bytes_is_stored_as_text(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "t.db")
    inserts = indexer._SparseInserts()
    inserts.add(_records([_line("m", LONG)])[0])
    batches, places, lines = inserts.take()
    (sql, rows) = batches[0]
    columns = sql.split("(", 1)[1].split(")", 1)[0]
    conn.execute(f"CREATE TABLE frames ({columns})")
    message = {"batches": batches, "beside": places, "lines": lines}
    indexer.place_beside(message)
    conn.executemany(sql, rows)
    assert conn.execute("SELECT typeof(raw), raw FROM frames").fetchone() == ("text", _line("m", LONG).decode())


@pytest.mark.spawns
@pytest.mark.parametrize("gate", [False, True], ids=["recorder", "gate"])
def test_long_lines_are_relayed_and_recorded_exactly(tmp_path: Path, gate: bool) -> None:
    lines = _requests_and_notices()
    db = tmp_path / "rec.db"
    relay_through_cat(db, lines, gate=gate)
    conn = sqlite3.connect(db)
    rows = conn.execute("SELECT dir, typeof(raw), raw, raw_bytes FROM frames WHERE batch_seq IS NULL ORDER BY seq")
    got = [(d, kind, raw.encode() if raw is not None else raw_bytes) for d, kind, raw, raw_bytes in rows]
    want = [(d, "text", line) for d in ("c2a", "a2c") for line in lines]
    assert sorted(got) == sorted(want)
    assert conn.execute("SELECT status, not_recorded FROM runs").fetchone() == ("ended", 0)


@pytest.mark.spawns
def test_a_redacted_long_line_is_stored_masked(tmp_path: Path) -> None:
    secret = _line("s/secret", 3 * LONG).replace(b'"t":"', b'"t":"hunter2 ', 1)
    data = secret + b"\n"
    db = tmp_path / "rec.db"
    result = run_proxy(["run", "--db", str(db), "--redact", "re:hunter2", "--", "cat"], input=data, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout == data
    raws = [raw for (raw,) in sqlite3.connect(db).execute("SELECT raw FROM frames")]
    assert len(raws) == 2
    assert all("hunter2" not in raw and len(raw) > 3 * LONG - 100 for raw in raws)


# -- the writer's end of the link -----------------------------------------------------------


def _send_all(fd: int, messages: list[dict], close: bool = True) -> None:
    encoder = msgspec.msgpack.Encoder()
    for message in messages:
        lines = message.pop("lines", [])
        payload = encoder.encode(message)
        writer._write_all_v(fd, [writer._LENGTH.pack(len(payload)), payload, *lines])
    if close:
        os.close(fd)


def test_the_writer_reads_batches_in_order_with_their_lines() -> None:
    read_fd, write_fd = os.pipe()
    messages = [
        {"n": n, "beside": [[0, 0, 0, 3 * n + 1]], "lines": [bytes([65 + n]) * (3 * n + 1)]} if n % 2 else {"n": n}
        for n in range(7)
    ]
    sender = threading.Thread(target=_send_all, args=(write_fd, [dict(m) for m in messages]), daemon=True)
    sender.start()
    got = list(writer._Inbox(read_fd))
    sender.join(30)
    assert got == messages


def test_the_writer_holds_at_most_two_batches_ahead_of_its_commits() -> None:
    read_fd, write_fd = os.pipe()
    messages = [{"n": n, "pad": "p" * 1000} for n in range(5)]
    _send_all(write_fd, messages, close=False)
    inbox = writer._Inbox(read_fd)
    deadline = time.monotonic() + 30
    while inbox.queue.qsize() < writer._Inbox.AHEAD and time.monotonic() < deadline:
        time.sleep(0.005)  # polling a count, with a deadline
    assert inbox.queue.qsize() == writer._Inbox.AHEAD
    # Decoding a batch takes a permit first; none is left until a batch is committed.
    assert not inbox.room.acquire(blocking=False)
    os.close(write_fd)
    batches = iter(inbox)
    assert next(batches)["n"] == 0
    assert [m["n"] for m in batches] == [1, 2, 3, 4]


def test_a_batch_cut_short_by_a_dead_recorder_is_never_applied() -> None:
    read_fd, write_fd = os.pipe()
    whole = {"n": 1}
    cut = {"n": 2, "beside": [[0, 0, 0, 100]]}
    encoder = msgspec.msgpack.Encoder()
    payload = encoder.encode(cut)
    _send_all(write_fd, [whole], close=False)
    os.write(write_fd, writer._LENGTH.pack(len(payload)) + payload + b"x" * 40)  # 40 of 100 bytes
    os.close(write_fd)
    assert list(writer._Inbox(read_fd)) == [whole]


def test_a_batch_that_cannot_be_decoded_is_the_writers_failure() -> None:
    read_fd, write_fd = os.pipe()
    os.write(write_fd, writer._LENGTH.pack(3) + b"\xc1\xc1\xc1")  # 0xc1: never valid msgpack
    os.close(write_fd)
    with pytest.raises(msgspec.DecodeError):
        list(writer._Inbox(read_fd))


def test_many_buffers_are_written_whole_and_in_order_through_short_writes() -> None:
    read_fd, write_fd = os.pipe()
    fcntl.fcntl(write_fd, fcntl.F_SETPIPE_SZ, 4096)  # every writev is cut short
    buffers = [bytes([n % 251]) * (1 + n * 7 % 3000) for n in range(writer._IOV_MAX * 2 + 17)]
    received = bytearray()

    def read_all() -> None:
        while chunk := os.read(read_fd, 65536):
            received.extend(chunk)

    reader = threading.Thread(target=read_all, daemon=True)
    reader.start()
    writer._write_all_v(write_fd, [*buffers[:5], b"", *buffers[5:]])
    os.close(write_fd)
    reader.join(30)
    os.close(read_fd)
    assert bytes(received) == b"".join(buffers)
