"""The framer never alters a byte, whatever the read boundaries."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from acp_proxy.protocol.framing import Line, LineFramer


def frame_all(chunks: list[bytes], max_keep: int | None = None) -> list[Line]:
    framer = LineFramer(max_keep)
    lines: list[Line] = []
    for chunk in chunks:
        lines.extend(framer.feed(chunk))
    last = framer.finish()
    if last is not None:
        lines.append(last)
    return lines


def split_at(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    bounds = [0, *points, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


stream = st.lists(
    st.one_of(st.binary(max_size=40), st.sampled_from([b"\n", b"\r\n", b"{}", b"\xff", b"\n\n"])), max_size=30
).map(b"".join)


@given(data=stream, cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=20))
def test_rejoined_lines_equal_the_input_for_any_split(data: bytes, cuts: list[int]) -> None:
    lines = frame_all(split_at(data, cuts))
    assert b"".join(line.wire_bytes() for line in lines) == data
    assert all(not line.cut for line in lines)
    assert all(line.terminated for line in lines[:-1])


@given(data=stream, cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=20))
def test_same_lines_whatever_the_split(data: bytes, cuts: list[int]) -> None:
    assert frame_all(split_at(data, cuts)) == frame_all([data])


@given(data=stream, cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=20), keep=st.integers(0, 8))
def test_bounded_lines_keep_a_prefix_and_the_true_size(data: bytes, cuts: list[int], keep: int) -> None:
    whole = frame_all([data])
    bounded = frame_all(split_at(data, cuts), max_keep=keep)
    assert [line.size for line in bounded] == [line.size for line in whole]
    for full, part in zip(whole, bounded, strict=True):
        assert part.data == full.data[:keep]
        assert part.cut == (full.size > keep)
        assert part.terminated == full.terminated


def test_crlf_is_preserved_in_the_line() -> None:
    assert frame_all([b'{"a":1}\r\n']) == [Line(b'{"a":1}\r', 8, True, False)]


def test_unterminated_last_line_is_reported_at_eof() -> None:
    framer = LineFramer()
    assert framer.feed(b"one\ntw") == [Line(b"one", 3, True, False)]
    assert framer.pending == 2
    assert framer.finish() == Line(b"tw", 2, False, False)
    assert framer.finish() is None


def test_empty_lines_are_lines() -> None:
    assert [line.data for line in frame_all([b"\n\na\n"])] == [b"", b"", b"a"]


def test_coalesced_read_gives_every_line() -> None:
    assert [line.data for line in frame_all([b"a\nb\nc\n"])] == [b"a", b"b", b"c"]


def test_huge_line_in_small_reads_holds_only_the_kept_prefix() -> None:
    framer = LineFramer(max_keep=10)
    for _ in range(1000):
        assert framer.feed(b"x" * 1024) == []
    (line,) = framer.feed(b"\n")
    assert line == Line(b"x" * 10, 1024 * 1000, True, True)


# A big chunk is cut with ``find`` while it holds few lines: the same lines as ``split`` gives,
# whether it holds none, a few or many (then the rest is split after all).
big_chunks = st.builds(
    lambda parts, filler: b"\n".join(parts).replace(b"_", b"_" * filler),
    st.lists(st.binary(max_size=40), min_size=1, max_size=60),
    st.integers(min_value=0, max_value=3000),
)


@given(big_chunks)
def test_a_big_chunk_is_cut_into_the_lines_split_gives(chunk: bytes) -> None:
    from acp_proxy.protocol.framing import BIG_CHUNK, _split_lines

    padded = chunk + b"_" * BIG_CHUNK  # over the size where find takes over
    assert _split_lines(padded) == padded.split(b"\n")
    assert _split_lines(chunk) == chunk.split(b"\n")
    assert frame_all([padded]) == frame_all([bytes([b]) for b in padded[:200]] + [padded[200:]])
