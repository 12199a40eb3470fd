"""The journal in-process: records round-trip, torn tails, gaps, locks, freed space, resumes."""

from __future__ import annotations

import itertools
import json
import os
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from acp_proxy.protocol.framing import LineFramer
from acp_proxy.record import journal as jr
from acp_proxy.record.indexer import Indexer


def new_journal(tmp_path: Path, **kwargs: object) -> jr.JournalWriter:
    return jr.JournalWriter.create(tmp_path / "rec.db.journal", **kwargs)  # type: ignore[arg-type]


def read_all(path: Path, offset: int | None = None) -> tuple[list[jr.Record], jr.JournalReader]:
    fd = os.open(path, os.O_RDONLY)
    try:
        reader = jr.JournalReader(fd, offset)
        return list(reader.records()), reader
    finally:
        os.close(fd)


def test_records_come_back_in_order_with_their_offsets(tmp_path: Path) -> None:
    journal = new_journal(tmp_path)
    journal.record(jr.START, 0, 1, b'{"argv":["a"]}')
    journal.data(jr.C2A, 2, b"hello\n")
    journal.data(jr.A2C, 3, b"x" * 3_000_000)  # bigger than one read block
    journal.record(jr.EOF, jr.C2A, 4)
    journal.close()
    records, reader = read_all(journal.path)
    assert [(r.kind, r.direction, r.ts_ns, len(r.payload)) for r in records] == [
        (jr.START, 0, 1, 14),
        (jr.DATA, jr.C2A, 2, 6),
        (jr.DATA, jr.A2C, 3, 3_000_000),
        (jr.EOF, jr.C2A, 4, 0),
    ]
    assert records[0].offset == len(jr.MAGIC)
    assert all(a.end == b.offset for a, b in itertools.pairwise(records))
    assert reader.pending == 0
    later, _ = read_all(journal.path, records[2].offset)
    assert [r.kind for r in later] == [jr.DATA, jr.EOF]


def test_files_and_directory_are_private_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        journal = new_journal(tmp_path)
    finally:
        os.umask(old)
    assert journal.path.stat().st_mode & 0o777 == 0o600
    assert journal.path.parent.stat().st_mode & 0o777 == 0o700
    assert journal.path.suffix == jr.SUFFIX


def test_a_torn_last_record_stays_pending_and_is_never_yielded(tmp_path: Path) -> None:
    journal = new_journal(tmp_path)
    journal.data(jr.A2C, 1, b"whole\n")
    journal.data(jr.A2C, 2, b"torn line\n")
    journal.close()
    size = journal.path.stat().st_size
    os.truncate(journal.path, size - 4)  # kill -9 in the middle of the second append
    records, reader = read_all(journal.path)
    assert [r.payload for r in records] == [b"whole\n"]
    assert reader.pending == jr.HEADER.size + len(b"torn line\n") - 4


def test_bytes_that_are_no_record_are_reported(tmp_path: Path) -> None:
    journal = new_journal(tmp_path)
    journal.data(jr.A2C, 1, b"ok\n")
    journal.close()
    with open(journal.path, "ab") as handle:
        handle.write(b"\x00" * 40)
    fd = os.open(journal.path, os.O_RDONLY)
    try:
        reader = jr.JournalReader(fd)
        with pytest.raises(jr.JournalDamaged):
            list(reader.records())
    finally:
        os.close(fd)


def test_a_live_journal_is_not_dead_and_a_released_one_is(tmp_path: Path) -> None:
    journal = new_journal(tmp_path)
    directory = journal.path.parent
    assert list(jr.dead_journals(directory)) == []
    journal.close()
    found = list(jr.dead_journals(directory))
    assert [path for path, _ in found] == [journal.path]
    for _, fd in found:
        os.close(fd)


def test_an_ended_journal_stays_live_until_its_lock_is_released(tmp_path: Path) -> None:
    # The relay ends the journal, then waits for its recorder before it lets go of the lock.
    journal = new_journal(tmp_path)
    journal.record(jr.META, 0, 1, b"{}")
    journal.end()
    journal.record(jr.META, 0, 2, b"{}")  # after the end: refused, never written
    assert list(jr.dead_journals(journal.path.parent)) == []
    journal.release()
    records, _ = read_all(journal.path)
    assert [r.ts_ns for r in records if r.kind == jr.META] == [1]
    found = list(jr.dead_journals(journal.path.parent))
    assert [path for path, _ in found] == [journal.path]
    for _, fd in found:
        os.close(fd)


def test_a_journal_recorded_and_removed_meanwhile_is_not_the_one_its_name_now_gives(tmp_path: Path) -> None:
    path = tmp_path / "x.journal"
    path.write_bytes(jr.MAGIC)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert jr.names_file(path, fd)
        path.unlink()
        assert not jr.names_file(path, fd)
        path.write_bytes(jr.MAGIC)  # another file under the same name
        assert not jr.names_file(path, fd)
    finally:
        os.close(fd)


def test_a_journal_being_created_is_never_taken_for_a_dead_one(tmp_path: Path) -> None:
    directory = tmp_path / "rec.db.journal"
    jr.make_private_dir(directory)
    (directory / ("123-1-abcd" + jr.PARTIAL_SUFFIX)).write_bytes(jr.MAGIC)
    assert list(jr.dead_journals(directory)) == []


def test_what_cannot_be_appended_is_reported_as_a_gap_once_appends_work_again(tmp_path: Path) -> None:
    journal = new_journal(tmp_path)
    fd = journal.fd
    journal.fd = os.open(os.devnull, os.O_RDONLY)  # every write fails, like a broken disk
    lost_chunks = [b"end of a line\nwhole line\nstart of ", b"the next"]
    for chunk in lost_chunks:
        journal.data(jr.A2C, 1, chunk)
    os.close(journal.fd)
    journal.fd = fd
    journal.data(jr.A2C, 2, b" line\n")
    journal.close()
    records, _ = read_all(journal.path)
    assert [r.kind for r in records] == [jr.GAP, jr.DATA]
    nbytes, newlines, head, tail, reason = jr.GAP_COUNTS.unpack(records[0].payload)
    assert (nbytes, newlines) == (sum(map(len, lost_chunks)), 2)
    assert (head, tail) == (len(b"end of a line"), len(b"start of the next"))
    assert reason == jr.WRITE_FAILED
    assert journal.problem is not None and "cannot write the journal" in journal.problem


def _free_all_but_the_last_64k(journal: jr.JournalWriter) -> jr.SpaceFreer:
    fd = os.open(journal.path, os.O_RDWR)
    try:
        freer = jr.SpaceFreer(fd)
        freer.free_to(journal.size - 65536)
        if not freer.supported:
            pytest.skip("this file system cannot punch holes; journals are freed when removed")
    finally:
        os.close(fd)
    return freer


@pytest.mark.parametrize("start_bytes", [20, 3 * 4096 + 5], ids=["small-start", "start-over-pages"])
def test_committed_space_is_given_back_but_the_head_stays(tmp_path: Path, start_bytes: int) -> None:
    journal = new_journal(tmp_path)
    start = b'{"argv":["' + b"a" * start_bytes + b'"]}'
    journal.record(jr.START, 0, 1, start)
    for i in range(64):
        journal.data(jr.A2C, i, b"z" * 65536)
    os.fsync(journal.fd)
    before = journal.path.stat().st_blocks
    freer = _free_all_but_the_last_64k(journal)
    after = journal.path.stat().st_blocks
    assert after * 512 < before * 512 - 3 * 1024 * 1024
    assert journal.path.stat().st_size == journal.size  # offsets stay valid
    # A recorder that resumes, or a recovery, reads the magic line and START first.
    head_end = len(jr.MAGIC) + jr.HEADER.size + len(start)
    kept = -(-head_end // 4096) * 4096
    with open(journal.path, "rb") as handle:
        handle.seek(kept)
        assert handle.read(4096) == bytes(4096)  # punched from the first page after the head
    assert freer.freed > kept
    fd = os.open(journal.path, os.O_RDONLY)
    try:
        first = next(iter(jr.JournalReader(fd).records()))
    finally:
        os.close(fd)
    assert (first.kind, first.payload) == (jr.START, start)
    journal.close()


def test_a_journal_without_a_start_record_is_not_punched(tmp_path: Path) -> None:
    journal = new_journal(tmp_path)
    for i in range(64):
        journal.data(jr.A2C, i, b"z" * 65536)
    fd = os.open(journal.path, os.O_RDWR)
    try:
        freer = jr.SpaceFreer(fd)
        freer.free_to(journal.size)
    finally:
        os.close(fd)
    assert not freer.supported
    assert len(read_all(journal.path)[0]) == 64
    journal.close()


# -- resuming: the state committed with a batch brings back exactly the missing frames --------


def _index(path: Path, state: dict | None, stop_after: int | None = None) -> tuple[list, dict | None, int]:
    """Index ``path`` (from ``state`` if given); with ``stop_after``, flush after that many
    records and return the state a commit would have stored."""
    message, state, count = _index_message(path, state, stop_after)
    return _frames_from_message(message), state, count


def _index_message(path: Path, state: dict | None, stop_after: int | None = None) -> tuple[dict, dict | None, int]:
    """``_index``, giving the writer's message itself (rows, changes, run counters)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        reader = jr.JournalReader(fd)
        indexer = Indexer(1, None, state)
        if state is not None:
            reader.offset = state["offset"]
        records = list(reader.records())
        if state is None:
            records = records[1:]  # START
            indexer.idx[3] = 1
        count = 0
        for record in records:
            indexer.feed(record)
            count += 1
            if stop_after is not None and count == stop_after:
                message = indexer.message(record.end)
                return message, json.loads(message["state"]), count
        return indexer.finish(records[-1].end if records else reader.offset, 0), None, count
    finally:
        os.close(fd)


def _frames_from_message(message: dict) -> list[tuple[int, str, bytes]]:
    rows = []
    for sql, values in message["batches"]:
        if not sql.startswith("INSERT INTO frames"):
            continue
        columns = sql.split("(", 1)[1].split(")", 1)[0].split(", ")
        for row in values:
            record = dict(zip(columns, row, strict=True))
            raw = record.get("raw")
            data = raw.encode() if raw is not None else record["raw_bytes"]
            rows.append((record["seq"], record["dir"], data))
    return sorted(rows)


pieces = st.lists(st.sampled_from([b"a", b"bc", b"\n", b"{}\n", b"xyz\n\n"]), min_size=1, max_size=6).map(b"".join)
chunks = st.lists(
    st.tuples(st.sampled_from([jr.C2A, jr.A2C, jr.STDERR]), st.one_of(pieces, st.just(None))),
    min_size=1,
    max_size=25,
)


def write_chunks(journal: jr.JournalWriter, chunks: list[tuple[int, bytes | None]]) -> None:
    """Append the chunks; None stands for one the journal could not take (a GAP follows)."""
    fd = journal.fd
    for i, (direction, data) in enumerate(chunks):
        if data is None:
            journal.fd = os.open(os.devnull, os.O_RDONLY)  # this append fails
            journal.data(direction, i, b"lost\nhead and tail")
            os.close(journal.fd)
            journal.fd = fd
        else:
            journal.data(direction, i, data)


@settings(max_examples=60, deadline=None)
@given(chunks=chunks, cut=st.integers(min_value=1, max_value=25))
def test_a_resume_from_any_commit_records_each_line_exactly_once(tmp_path_factory, chunks, cut) -> None:
    tmp = tmp_path_factory.mktemp("resume")
    journal = new_journal(tmp)
    journal.record(jr.START, 0, 0, b"{}")
    write_chunks(journal, chunks)
    for direction in (jr.C2A, jr.A2C, jr.STDERR):
        journal.record(jr.EOF, direction, 99)
    journal.close()
    whole, _, _ = _index(journal.path, None)
    cut = min(cut, len(chunks) + 3)
    first, state, _ = _index(journal.path, None, stop_after=cut)
    if state is None:
        assert first == whole
        return
    rest, _, _ = _index(journal.path, state)
    assert [row[1:] for row in first + rest] == [row[1:] for row in whole]
    assert [row[0] for row in first + rest] == list(range(1, len(whole) + 1))
    if any(data is None for _, data in chunks):
        return
    # and the lines are what a framer makes of each direction's bytes
    for direction, name in ((jr.C2A, "c2a"), (jr.A2C, "a2c"), (jr.STDERR, "stderr")):
        framer = LineFramer()
        expected = [line.data for data in (d for dd, d in chunks if dd == direction) for line in framer.feed(data)]
        last = framer.finish()
        if last is not None:
            expected.append(last.data)
        assert [data for _, d, data in whole if d == name] == expected


@settings(max_examples=60, deadline=None)
@given(chunks=chunks)
def test_every_line_is_a_frame_or_counted_as_lost(tmp_path_factory, chunks) -> None:
    journal = new_journal(tmp_path_factory.mktemp("gaps"))
    journal.record(jr.START, 0, 0, b"{}")
    write_chunks(journal, chunks)
    for direction in (jr.C2A, jr.A2C, jr.STDERR):
        journal.record(jr.EOF, direction, 99)
    journal.close()
    fd = os.open(journal.path, os.O_RDONLY)
    try:
        reader = jr.JournalReader(fd)
        indexer = Indexer(1, None)
        for record in reader.records():
            indexer.feed(record)
        message = indexer.finish(reader.offset, 0)
    finally:
        os.close(fd)
    stream = {
        d: b"".join(data if data is not None else b"lost\nhead and tail" for dd, data in chunks if dd == d)
        for d in range(3)
    }
    lines = sum(len(data.split(b"\n")) - (1 if data.endswith(b"\n") or not data else 0) for data in stream.values())
    assert len(_frames_from_message(message)) + indexer.lost_lines == lines
    assert indexer.counters()["bytes_a2c"] == len(stream[jr.A2C])


def test_a_gated_line_whose_write_failed_after_its_record_is_corrected_even_across_a_resume(tmp_path: Path) -> None:
    # The gate records a line (LINE) before writing it; when the write then finds the pipe
    # closed, UNSENT says so, and the line's row is corrected, whichever process indexes it.
    from acp_proxy.protocol.framing import Line

    journal = new_journal(tmp_path)
    journal.record(jr.START, 0, 0, b"{}")
    journal.data(jr.A2C, 1, b'{"jsonrpc":"2.0","method":"first"}\n')
    line = Line(b'{"jsonrpc":"2.0","method":"later"}', 34, True, False)
    journal.record(jr.LINE, jr.A2C, 2, jr.line_payload(line, {"forwarded": 1, "note": "forwarded corrupted"}))
    journal.record(jr.UNSENT, jr.A2C, 3)
    journal.close()
    whole, _, _ = _index_message(journal.path, None)
    _, state, _ = _index_message(journal.path, None, stop_after=2)  # committed after the LINE
    resumed, _, _ = _index_message(journal.path, state)
    for cut, message in (("none", whole), ("after the LINE", resumed)):
        patches = [c for c in message["changes"] if isinstance(c, dict) and c.get("table") == "frames"]
        assert [p["key"]["seq"] for p in patches] == [2], (cut, patches)
        assert patches[0]["values"]["forwarded"] == 0
        assert patches[0]["values"]["note"].startswith("forwarded corrupted; never reached its receiver")
        assert message["run"]["bytes_a2c"] == len(b'{"jsonrpc":"2.0","method":"first"}\n')


def test_a_journal_abandoned_while_being_created_is_removed_once_old(tmp_path: Path) -> None:
    directory = tmp_path / "rec.db.journal"
    jr.make_private_dir(directory)
    old, fresh = directory / f"1-2-aa{jr.PARTIAL_SUFFIX}", directory / f"3-4-bb{jr.PARTIAL_SUFFIX}"
    for path in (old, fresh):
        path.write_bytes(jr.MAGIC)
    long_ago = time.time() - jr.PARTIAL_PATIENCE_S - 5
    os.utime(old, (long_ago, long_ago))
    assert list(jr.dead_journals(directory)) == []  # never taken for a run to recover
    assert not old.exists() and fresh.exists()  # a fresh one may be its creator's, mid-rename


def test_lines_appends_what_record_appends_one_by_one_in_fewer_writes(tmp_path: Path) -> None:
    payloads = [b"line %d " % i + b"x" * (i % 700) for i in range(1_234)]  # more than one writev's worth
    batched = new_journal(tmp_path / "a")
    batched.lines(jr.A2C, 7, payloads)
    single = new_journal(tmp_path / "b")
    for payload in payloads:
        single.record(jr.LINE, jr.A2C, 7, payload)
    assert batched.size == single.size
    assert batched.path.read_bytes() == single.path.read_bytes()
    records, _ = read_all(batched.path)
    assert [(r.kind, r.direction, r.ts_ns, r.payload) for r in records] == [(jr.LINE, jr.A2C, 7, p) for p in payloads]


def test_lines_that_do_not_fit_are_counted_lost_as_record_counts_them(tmp_path: Path) -> None:
    payloads = [b"y" * 100] * 10
    counts = []
    for name, append in (("a", "lines"), ("b", "record")):
        journal = new_journal(tmp_path / name)
        journal.max_size = journal.size + 5 * (jr.HEADER.size + 100)  # room for five of them
        if append == "lines":
            journal.lines(jr.C2A, 1, payloads)
        else:
            for payload in payloads:
                journal.record(jr.LINE, jr.C2A, 1, payload)
        records, _ = read_all(journal.path)
        kinds = [r.kind for r in records]
        counts.append((kinds.count(jr.LINE), kinds, journal.lost[jr.C2A], journal.lost_total))
    assert counts[0] == counts[1]
    assert counts[0][0] == 5 and counts[0][3][1] == 5  # five appended, five lines lost


def _filled_to_the_limit(tmp_path: Path, limit: int) -> tuple[jr.JournalWriter, bytes, int]:
    journal = jr.JournalWriter.create(tmp_path / "journals", limit_bytes=limit, db_path=tmp_path / "rec.db")
    chunk = b"x" * (jr.LIMIT_CHECK_BYTES // 4 - 1) + b"\n"
    appended = 0
    while not journal.over_limit:
        journal.data(jr.A2C, appended, chunk)
        appended += 1
        assert appended < 200, "the limit was never reached"
    return journal, chunk, appended


def test_the_relay_stops_journaling_while_the_recorder_still_has_room_to_record(tmp_path: Path) -> None:
    # --db-limit counts the journal: a journal that filled the limit alone would leave the
    # recorder no room to commit any of it (nothing recorded at all), so the relay stops while
    # what it holds would still fit through the WAL into the database.
    limit = 6 * jr.LIMIT_CHECK_BYTES
    journal, _, _ = _filled_to_the_limit(tmp_path, limit)
    try:
        held = os.fstat(journal.fd).st_blocks * 512
        assert held <= limit // 3 + jr.LIMIT_CHECK_BYTES, f"{held:,} bytes journaled for a {limit:,}-byte limit"
    finally:
        journal.close()


def test_the_relay_journals_again_once_the_recorder_freed_the_journal(tmp_path: Path) -> None:
    journal, chunk, appended = _filled_to_the_limit(tmp_path, 6 * jr.LIMIT_CHECK_BYTES)
    try:
        _free_all_but_the_last_64k(journal)  # the recorder committed it
        for i in range(8):  # refused, then measured again after LIMIT_CHECK_BYTES offered
            journal.data(jr.A2C, appended + i, chunk)
        assert not journal.over_limit
    finally:
        journal.close()
