"""The filter language: every field and operator, errors that point at the mistake, and the
property that the Python predicate and the SQL backend select exactly the same frames. Pure:
the only database is SQLite in memory."""

from __future__ import annotations

import datetime as dt
import sqlite3
from collections.abc import Iterable
from types import SimpleNamespace
from typing import Any

import pytest
import sqlite_utils
from hypothesis import given, settings
from hypothesis import strategies as st

from acp_proxy.protocol import filters
from acp_proxy.protocol.filters import FilterError, compile_filter, parse
from acp_proxy.protocol.frames import FrameRecord
from acp_proxy.store import database as store

NOW = 1_746_100_000_000_000_000  # 2025-05-01T11:46:40Z, the "now" of relative times here
SEC = 10**9


def frame(seq: int = 1, **fields: Any) -> FrameRecord:
    """A FrameRecord as the recorder leaves it; ``fields`` overrides columns."""
    raw = fields.pop("raw", '{"jsonrpc":"2.0"}')
    rec = FrameRecord(fields.pop("run_id", 1), seq, fields.pop("ts_ns", NOW), fields.pop("dir", "a2c"), b"", None)
    if isinstance(raw, bytes):
        rec.raw, rec.raw_bytes, rec.line = None, raw, raw
    else:
        rec.raw, rec.line = raw, raw.encode()
    rec.size = len(rec.line)
    if "findings" in fields:
        rec.findings = fields.pop("findings")
    if "mark" in fields:
        rec.mark = fields.pop("mark")
    for name, value in fields.items():
        assert name in store.FRAME_COLUMNS, name
        setattr(rec, name, value)
    return rec


def new_db(runs: Iterable[int] = (1, 2, 3)) -> sqlite_utils.Database:
    db = sqlite_utils.Database(sqlite3.connect(":memory:"))
    db["frames"].create(store.FRAME_COLUMNS, pk=("run_id", "seq"), not_null={"run_id", "seq", "ts_ns", "dir"})
    db["runs"].create(store.RUN_COLUMNS, pk="id")
    db["runs"].insert_all([{"id": r, "started_ns": 0, "status": "ended"} for r in runs])
    db.execute("create table findings (id integer primary key, run_id int, seq int, rule text, severity text)")
    db.execute("create index findings_frame on findings (run_id, seq)")
    store._create_marks(db)
    return db


def insert(db: sqlite_utils.Database, frames: Iterable[FrameRecord]) -> None:
    frames = list(frames)
    rows = [f.as_dict() for f in frames]
    if rows:
        cols = list(store.FRAME_COLUMNS)
        db.conn.executemany(
            f"insert into frames ({', '.join(cols)}) values ({', '.join('?' * len(cols))})",
            [[row[c] for c in cols] for row in rows],
        )
    db.conn.executemany(
        "insert into findings (run_id, seq, rule, severity) values (?, ?, ?, ?)",
        [(f.run_id, f.seq, rule, sev) for f in frames for rule, sev in getattr(f, "findings", None) or ()],
    )
    db.conn.executemany(
        "insert into marks (run_id, seq, note, marked_ns) values (?, ?, ?, 0)",
        [(f.run_id, f.seq, f.mark or None) for f in frames if getattr(f, "mark", None) is not None],
    )


def sql_select(db: sqlite_utils.Database, expr: filters.Expr) -> set[tuple[int, int]]:
    where, params = expr.to_sql()
    return set(db.execute(f"select run_id, seq from frames where {where}", params).fetchall())


def py_select(frames: Iterable[FrameRecord], expr: filters.Expr) -> set[tuple[int, int]]:
    return {(f.run_id, f.seq) for f in frames if expr.matches(f)}


def select(text: str, *frames: FrameRecord, **kw: Any) -> set[int]:
    """The seqs a filter selects, asserting that both backends agree."""
    expr = parse(text, now_ns=kw.pop("now_ns", NOW), **kw)
    db = new_db()
    insert(db, frames)
    python, sql = py_select(frames, expr), sql_select(db, expr)
    assert python == sql, (text, expr.to_sql())
    return {seq for _, seq in python}


def error_of(text: str) -> FilterError:
    with pytest.raises(FilterError) as info:
        parse(text, now_ns=NOW)
    return info.value


# -- fields ----------------------------------------------------------------------------------


def test_dir_with_aliases_and_pattern() -> None:
    # Frame 4 is one the proxy wrote itself (an injected frame): it travelled a2c.
    frames = [frame(1, dir="c2a"), frame(2, dir="a2c"), frame(3, dir="stderr"), frame(4, dir="a2c", origin="proxy")]
    assert select("dir:c2a", *frames) == {1}
    assert select("dir:client", *frames) == {1}
    assert select("dir:agent", *frames) == {2, 4}
    assert select("dir:a2c", *frames) == {2, 4}
    assert select("dir:stderr", *frames) == {3}
    assert select("dir:proxy", *frames) == {4}
    assert select("dir:agent -dir:proxy", *frames) == {2}
    assert select("dir:*2*", *frames) == {1, 2, 4}
    assert select("-dir:stderr", *frames) == {1, 2, 4}
    assert select("DIR:c2a", *frames) == {1}  # field names are case-insensitive
    err = error_of("dir:a2b")
    assert err.column == 4 and "did you mean a2c" in err.message
    assert "needs a value" in error_of("dir").message


def test_kind_every_value_and_typos() -> None:
    frames = [frame(i, kind=k) for i, k in enumerate(filters.KINDS, 1)]
    for i, k in enumerate(filters.KINDS, 1):
        assert select(f"kind:{k}", *frames) == {i}
    assert select("kind:re*", *frames) == {1, 3}
    err = error_of("kind:reqest")
    assert "did you mean request" in err.message and err.column == 5


def test_method_exact_glob_presence_and_null_negation() -> None:
    frames = [
        frame(1, method="session/prompt"),
        frame(2, method="session/update"),
        frame(3, method="initialize"),
        frame(4, method=None),
        frame(5, method="session/*"),
    ]
    assert select("method:session/prompt", *frames) == {1}
    assert select("method:session/*", *frames) == {1, 2, 5}
    assert select("method:*update", *frames) == {2}
    assert select('method:"session/*"', *frames) == {5}  # quoted: a plain star
    assert select("method", *frames) == {1, 2, 3, 5}
    assert select("-method", *frames) == {4}
    # A frame without a method does not match method:x and does match -method:x, in both backends.
    assert select("-method:initialize", *frames) == {1, 2, 4, 5}
    assert select("-method:session/*", *frames) == {3, 4}
    assert select("method=initialize", *frames) == {3}


def test_patterns_stop_at_a_nul_as_sqlite_glob_does() -> None:
    frames = [frame(1, method="a\x00x"), frame(2, method="ax")]
    assert select("method:*x", *frames) == {2}
    assert select("method:a*", *frames) == {1, 2}


def test_fractional_bounds_become_whole_numbers() -> None:
    frames = [frame(i, latency_ns=i) for i in (0, 1, 2, 3)]
    assert select("latency>0.5ns", *frames) == {1, 2, 3}
    assert select("latency>=0.5ns", *frames) == {1, 2, 3}
    assert select("latency<1.5ns", *frames) == {0, 1}
    assert select("latency<=1.5ns", *frames) == {0, 1}
    assert select("latency:0.5ns..2.5ns", *frames) == {1, 2}
    assert select("latency:2.5ns", *frames) == set()
    assert select("-latency:2.5ns", *frames) == {0, 1, 2, 3}


def test_id_is_compared_as_json() -> None:
    frames = [
        frame(1, rpc_id="1"),
        frame(2, rpc_id='"1"'),
        frame(3, rpc_id='"abc"'),
        frame(4, rpc_id="null"),
        frame(5, rpc_id=None),
        frame(6, rpc_id='"a b"'),
        frame(7, rpc_id="-3"),
    ]
    assert select("id:1", *frames) == {1}
    assert select("id:001", *frames) == {1}
    assert select('id:"1"', *frames) == {2}
    assert select("id:'1'", *frames) == {2}
    assert select("id:abc", *frames) == {3}
    assert select("id:null", *frames) == {4}
    assert select('id:"a b"', *frames) == {6}
    assert select("id:-3", *frames) == {7}
    assert select("id", *frames) == {1, 2, 3, 4, 6, 7}
    assert select("-id", *frames) == {5}
    assert "not a number" in error_of("id>3").message


def test_session_is_a_prefix() -> None:
    frames = [
        frame(1, session_id="3f2a-77"),
        frame(2, session_id="3f2b"),
        frame(3, session_id="x3f2a"),
        frame(4),
    ]
    assert select("session:3f2a", *frames) == {1}
    assert select("session:3f", *frames) == {1, 2}
    assert select("session:3f2a-77", *frames) == {1}
    assert select("session:*3f2a*", *frames) == {1, 3}
    assert select("session:3f2", *frames) == {1, 2}
    assert select("session", *frames) == {1, 2, 3}
    assert select("-session:3f", *frames) == {3, 4}


def test_update_and_item() -> None:
    frames = [
        frame(1, update_kind="agent_message_chunk", item_id="m1"),
        frame(2, update_kind="tool_call", item_id="call_1"),
        frame(3, update_kind="tool_call_update", item_id="call_1"),
        frame(4),
    ]
    assert select("update:agent_message_chunk", *frames) == {1}
    assert select("update:tool_call", *frames) == {2}
    assert select("update:tool_call*", *frames) == {2, 3}
    assert select("update", *frames) == {1, 2, 3}
    assert select("item:call_1", *frames) == {2, 3}
    assert select("item:call", *frames) == set()  # exact, not a prefix
    assert select("-item:m1", *frames) == {2, 3, 4}


def test_error_alone_code_range_and_message() -> None:
    frames = [
        frame(1, kind="error", error_code=-32603, error_message="Internal error"),
        frame(2, kind="error", error_code=-32601, error_message="Method not found"),
        frame(3, kind="error", error_code=-32000, error_message="auth required: -1"),
        frame(4, kind="response"),
    ]
    assert select("error", *frames) == {1, 2, 3}
    assert select("-error", *frames) == {4}
    assert select("error:-32603", *frames) == {1}
    assert select("error:-32700..-32600", *frames) == {1, 2}
    assert select("error>-32601", *frames) == {3}
    assert select("error<=-32601", *frames) == {1, 2}
    assert select("error:found", *frames) == {2}  # not a number: the message
    assert select("error:NOT", *frames) == set()  # a capital: exact case
    assert select('error:"-1"', *frames) == {3}  # quoted: the message
    assert select('error:"internal error"', *frames) == {1}


def test_text_is_a_substring_of_the_line() -> None:
    frames = [
        frame(1, raw='{"error":"Permission denied"}'),
        frame(2, raw='{"text":"permission DENIED here"}'),
        frame(3, raw=b'{"x":"\xff\xfe Permission denied"}'),  # not UTF-8: raw_bytes
        frame(4, raw='{"text":"ÉTÉ été"}'),
        frame(5, raw="plain stderr line"),
    ]
    assert select("text:denied", *frames) == {1, 2, 3}  # no capital: ASCII case ignored
    assert select("text:Denied", *frames) == set()  # a capital: exact
    assert select("text:Permission", *frames) == {1, 3}
    assert select('text:"permission denied"', *frames) == {1, 2, 3}
    assert select('"permission denied"', *frames) == {1, 2, 3}  # a quoted string alone
    assert select("text:été", *frames) == {4}
    assert select("text:ÉTÉ", *frames) == {4}
    assert select('text:"\\"error\\""', *frames) == {1}  # \" in "..." is a quote
    assert select("text:'\"text\":'", *frames) == {2, 4}  # '...' holds JSON as is
    assert select("-text:denied", *frames) == {4, 5}
    with pytest.raises(FilterError):
        parse("text")


def test_text_searches_invalid_utf8_byte_for_byte() -> None:
    frames = [frame(1, raw=b"caf\xe9 au lait"), frame(2, raw=b"\x00\x01 nul here \x80")]
    assert select("text:'au lait'", *frames) == {1}
    assert select("text:NUL", *frames) == set()
    assert select("text:nul", *frames) == {2}


def test_text_folds_ascii_case_in_invalid_utf8_too() -> None:
    frames = [frame(1, raw=b"\xff PERMISSION DENIED"), frame(2, raw=b"\xff\xc9T\xc9")]
    assert select("text:denied", *frames) == {1}
    assert select("text:Denied", *frames) == set()
    assert select("text:t", *frames) == {2}


def test_text_on_a_live_record_reads_its_line() -> None:
    # A record the relay builds for a fault verdict has its bytes in .line, no raw yet.
    live = FrameRecord(0, 1, NOW, "c2a", b'{"method":"session/prompt"}', None)
    assert parse("text:prompt").matches(live)
    assert not parse("text:cancel").matches(live)


def test_note_and_fault() -> None:
    frames = [
        frame(1, note="stripped: replayed notice", forwarded=0),
        frame(2, fault="drop"),
        frame(3, fault="delay,drop"),
        frame(4, fault="dropx"),
        frame(5),
    ]
    assert select("note", *frames) == {1}
    assert select("note:stripped", *frames) == {1}
    assert select("fault", *frames) == {2, 3, 4}
    assert select("fault:drop", *frames) == {2, 3}
    assert select("fault:delay", *frames) == {3}
    assert select("-fault:drop", *frames) == {1, 4, 5}


def test_marked_and_comment_select_what_people_marked() -> None:
    frames = (
        frame(1, mark=""),  # marked, no comment
        frame(2, mark="Look here: the agent ignores the cancel"),
        frame(3),
        frame(4, note="stripped"),  # the proxy's note is no comment
    )
    assert select("marked", *frames) == {1, 2}
    assert select("-marked", *frames) == {3, 4}
    assert select("comment", *frames) == {1, 2}
    assert select("comment:cancel", *frames) == {2}
    assert select("comment:look", *frames) == {2}  # no capital: ASCII case ignored
    assert select("comment:Look", *frames) == {2} and select("comment:LOOK", *frames) == set()
    assert select("comment:stripped", *frames) == set()
    assert select("-comment:cancel", *frames) == {1, 3, 4}
    assert str(parse('comment:"a b"')) == 'comment:"a b"'


def test_finding_any_rule_pattern_and_severity() -> None:
    frames = [
        frame(1, findings=[("jsonrpc/not-json", "error")]),
        frame(2, findings=[("schema/update", "error"), ("turn/unfinished", "warning")]),
        frame(3, findings=[("jsonrpc/unanswered", "warning")]),
        frame(4, findings=[]),
        frame(5),  # no findings attribute at all: a live record nobody checked
    ]
    assert select("finding", *frames) == {1, 2, 3}
    assert select("-finding", *frames) == {4, 5}
    assert select("finding:jsonrpc/not-json", *frames) == {1}
    assert select("finding:jsonrpc/*", *frames) == {1, 3}
    assert select("finding:*/un*", *frames) == {2, 3}
    assert select('finding:"jsonrpc/*"', *frames) == set()  # quoted: a star is a star
    assert select("finding:error", *frames) == {1, 2}
    assert select('finding:"warning"', *frames) == {2, 3}
    assert select("-finding:error", *frames) == {3, 4, 5}
    assert select("finding:info", *frames) == set()
    # Both on one frame means one finding each, not one finding of both.
    assert select("finding:schema/* finding:warning", *frames) == {2}
    # A plain dict record carries its findings under the same key.
    assert parse("finding:error").matches({"findings": [("a/b", "error")]})
    assert not parse("finding").matches({})


def test_finding_values_that_are_neither_rule_nor_severity() -> None:
    assert "rule id" in error_of("finding:errors").message and error_of("finding:errors").column == 8
    assert "did you mean error" in error_of("finding:eror").message
    assert error_of("finding>1").message.startswith("finding is not a number")


def test_finding_uses_the_findings_index() -> None:
    db = sqlite_utils.Database(memory=True)
    store.migrate(db)
    for text in ("finding", "-finding:schema/*", "finding:error"):
        where, params = parse(text).to_sql()
        plan = " ".join(r[-1] for r in db.execute(f"explain query plan select * from frames where {where}", params))
        assert "SEARCH findings USING" in plan and "(run_id=? AND seq=?)" in plan, (text, plan)


def test_flags() -> None:
    frames = [
        frame(1, replay=1),
        frame(2, replay=0),
        frame(3, replay=None),
        frame(4, kind="request", unanswered=1),
        frame(5, kind="request", unanswered=0),
        frame(6, forwarded=0),
        frame(7, cut=1),
        frame(8, terminated=0),
    ]
    assert select("replay", *frames) == {1}
    assert select("live", *frames) == {2, 3, 4, 5, 6, 7, 8}
    assert select("-live", *frames) == {1}
    assert select("unanswered", *frames) == {4}
    assert select("dropped", *frames) == {6}
    assert select("cut", *frames) == {7}
    assert select("unterminated", *frames) == {8}
    err = error_of("kind:request replay:1")
    assert err.column == 13 and "flag" in err.message


def test_unknown() -> None:
    frames = [frame(1, unknown="extension"), frame(2, unknown="future"), frame(3)]
    assert select("unknown", *frames) == {1, 2}
    assert select("unknown:extension", *frames) == {1}
    assert select("unknown:future", *frames) == {2}
    assert "did you mean extension" in error_of("unknown:extensoin").message


def test_latency_units_comparisons_and_ranges() -> None:
    ms = 10**6
    frames = [
        frame(1, latency_ns=400 * ms),
        frame(2, latency_ns=500 * ms),
        frame(3, latency_ns=2 * SEC),
        frame(4, latency_ns=90 * SEC),
        frame(5, latency_ns=None),
        frame(6, latency_ns=1500),
    ]
    assert select("latency>500ms", *frames) == {3, 4}
    assert select("latency>=500ms", *frames) == {2, 3, 4}
    assert select("latency<500ms", *frames) == {1, 6}
    assert select("latency<=0.5s", *frames) == {1, 2, 6}
    assert select("latency>500", *frames) == {3, 4}  # a number alone: ms
    assert select("latency:500ms", *frames) == {2}
    assert select("latency:1.5us", *frames) == {6}
    assert select("latency:1.5µs", *frames) == {6}
    assert select("latency:1500ns", *frames) == {6}
    assert select("latency>1m", *frames) == {4}
    assert select("latency:1m30s", *frames) == {4}
    assert select("latency<1h", *frames) == {1, 2, 3, 4, 6}
    assert select("latency:450ms..2s", *frames) == {2, 3}
    assert select("latency:1s..", *frames) == {3, 4}
    assert select("latency:..1ms", *frames) == {6}
    assert select("latency:0.4ns", *frames) == set()  # no whole number of ns
    assert select("latency>1.2ns", *frames) == {1, 2, 3, 4, 6}
    assert select("latency", *frames) == {1, 2, 3, 4, 6}
    assert select("-latency>1s", *frames) == {1, 2, 5, 6}  # no latency: matches the negation
    err = error_of("latency>fast")
    assert err.column == 8 and "duration" in err.message
    assert "range goes with ':'" in error_of("latency>1s..2s").message


def test_size_units() -> None:
    frames = [
        frame(1, raw="x" * 999),
        frame(2, raw="x" * 1000),
        frame(3, raw="x" * 1024),
        frame(4, raw="x" * 1536),
    ]
    assert select("size:1000", *frames) == {2}
    assert select("size:1000B", *frames) == {2}
    assert select("size:1KB", *frames) == {2}
    assert select("size:1kib", *frames) == {3}
    assert select("size>=1KiB", *frames) == {3, 4}
    assert select("size:1.5KiB", *frames) == {4}
    assert select("size<1kb", *frames) == {1}
    assert select("size:1000..1024", *frames) == {2, 3}
    assert select("size<1MB size<1MiB size<1GB size<1GiB", *frames) == {1, 2, 3, 4}
    assert "size needs a size" in error_of("size>1KQ").message
    assert "size needs a value" in error_of("size").message


def test_seq_and_run() -> None:
    frames = [frame(s, run_id=r) for r in (1, 2, 3) for s in range(1, 31)]
    assert select("seq:10..20 run:1", *frames) == set(range(10, 21))
    assert select("seq:28.. run:2", *frames) == {28, 29, 30}
    assert select("seq:..2 run:3", *frames) == {1, 2}
    assert select("seq>29", *frames) == {30}
    assert select("seq:7", *frames) == {7}
    assert "reversed; did you mean seq:10..20?" in error_of("seq:20..10").message  # never selects anything
    db = new_db()
    insert(db, frames)
    assert sql_select(db, parse("run:2..3 seq:1")) == {(2, 1), (3, 1)}
    assert sql_select(db, parse("run>2 seq:1")) == {(3, 1)}
    assert sql_select(db, parse("run:last seq:1")) == {(3, 1)}  # the newest row of runs
    assert sql_select(db, parse("run:last seq:1", last_run=2)) == {(2, 1)}
    assert parse("run:last").matches(frames[0])  # a live frame belongs to the last run
    assert not parse("run:last", last_run=2).matches(frames[0])
    assert py_select(frames, parse("run:last seq:1", last_run=2)) == {(2, 1)}
    assert "whole number" in error_of("seq:1.5").message
    assert "at least one end" in error_of("seq:..").message
    # Beyond SQLite's 64-bit integers: no error, no overflow while binding.
    assert select("seq<99999999999999999999 seq>-99999999999999999999", *frames[:3]) == {1, 2, 3}
    assert select("seq>99999999999999999999", *frames[:3]) == set()
    assert select("seq:99999999999999999999", *frames[:3]) == set()


def test_since_and_until() -> None:
    t = dt.datetime(2025, 5, 1, 12, 0, tzinfo=dt.UTC)
    ns = int(t.timestamp()) * SEC
    frames = [
        frame(1, ts_ns=ns - SEC),
        frame(2, ts_ns=ns),
        frame(3, ts_ns=ns + 1),
        frame(4, ts_ns=ns + 3600 * SEC),
    ]
    assert select("since:2025-05-01T12:00:00Z", *frames) == {2, 3, 4}
    assert select("until:2025-05-01T12:00:00Z", *frames) == {1, 2}
    assert select("since:2025-05-01T14:00+02:00 until:2025-05-01T12:30Z", *frames) == {2, 3}
    assert select("since:2025-05-01T12:00Z until:2025-05-01T12:00Z", *frames) == {2}
    assert select('since:"2025-05-01 12:00:00.000000001Z"', *frames) == {2, 3, 4}  # µs precision
    # Relative: a duration before now_ns.
    assert select("since:1h", *frames, now_ns=ns + 3600 * SEC) == {2, 3, 4}
    assert select("since:59m59s", *frames, now_ns=ns + 3600 * SEC) == {4}
    assert select("until:30m", *frames, now_ns=ns + 3600 * SEC) == {1, 2, 3}
    # Dates and times of day are local; a date alone covers its whole day.
    day = dt.date.fromtimestamp(ns / SEC)
    start = int(dt.datetime.combine(day, dt.time()).timestamp()) * SEC
    end = int(dt.datetime.combine(day + dt.timedelta(days=1), dt.time()).timestamp()) * SEC
    edges = [frame(1, ts_ns=start - 1), frame(2, ts_ns=start), frame(3, ts_ns=end - 1), frame(4, ts_ns=end)]
    assert select(f"since:{day.isoformat()}", *edges) == {2, 3, 4}
    assert select(f"until:{day.isoformat()}", *edges) == {1, 2, 3}
    assert select(f"since:{day.isoformat()} until:{day.isoformat()}", *edges) == {2, 3}
    noon = int(dt.datetime.combine(day, dt.time(12, 30)).timestamp()) * SEC
    around = [frame(1, ts_ns=noon - 1), frame(2, ts_ns=noon), frame(3, ts_ns=noon + 5 * SEC)]
    assert select("since:12:30", *around, now_ns=start + 1) == {2, 3}
    assert select("until:12:30:04.5", *around, now_ns=start + 1) == {1, 2}
    err = error_of("kind:request since:yesterday")
    assert err.column == 19 and "a date" in err.message
    assert "needs a time" in error_of("since").message
    assert "write until:TIME" in error_of("until>5m").message


# -- operators -------------------------------------------------------------------------------


OPS = [
    frame(1, dir="c2a", kind="request", method="session/prompt"),
    frame(2, dir="a2c", kind="response", method="session/prompt"),
    frame(3, dir="a2c", kind="notification", method="session/update"),
    frame(4, dir="a2c", kind="error", method="session/prompt"),
    frame(5, dir="stderr", kind="stderr"),
]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", {1, 2, 3, 4, 5}),
        ("   ", {1, 2, 3, 4, 5}),
        ("dir:a2c method:session/prompt", {2, 4}),
        ("dir:a2c AND method:session/prompt", {2, 4}),
        ("dir:a2c and method:session/prompt", {2, 4}),
        ("kind:request OR kind:error", {1, 4}),
        ("kind:request or kind:error", {1, 4}),
        ("kind:request OR dir:a2c method:session/prompt", {1, 2, 4}),  # AND binds tighter
        ("(kind:request OR dir:a2c) method:session/prompt", {1, 2, 4}),
        ("(kind:request OR dir:stderr) -method:session/prompt", {5}),
        ("-dir:a2c", {1, 5}),
        ("NOT dir:a2c", {1, 5}),
        ("not dir:a2c", {1, 5}),
        ("- dir:a2c", {1, 5}),
        ("--dir:a2c", {2, 3, 4}),
        ("-(kind:request OR kind:error)", {2, 3, 5}),
        ("-(dir:a2c -kind:error)", {1, 4, 5}),
        ("NOT (dir:a2c) kind:error", set()),
        ("((kind:error))", {4}),
        ("kind:error OR kind:request OR dir:stderr", {1, 4, 5}),
        ("dir:a2c (kind:response OR kind:notification) -method:session/update", {2}),
    ],
)
def test_operators(text: str, expected: set[int]) -> None:
    assert select(text, *OPS) == expected


def test_empty_filter_is_all_and_compile_filter_is_both_backends() -> None:
    assert parse("").to_sql() == ("1", [])
    predicate, sql, params = compile_filter("dir:a2c kind:error", now_ns=NOW)
    assert predicate(OPS[3]) and not predicate(OPS[2])
    assert (sql, params) == parse("dir:a2c kind:error").to_sql()


def test_works_on_any_object_with_the_columns() -> None:
    row = SimpleNamespace(**{name: None for name in store.FRAME_COLUMNS})
    row.dir, row.kind, row.raw, row.latency_ns = "a2c", "response", "hello", 3 * SEC
    assert parse("dir:agent kind:response text:hello latency>2s -method:x").matches(row)


def test_directions_a_filter_can_match() -> None:
    every = frozenset(filters.DIRECTIONS)
    assert parse("dir:c2a kind:request").directions() == {"c2a"}
    assert parse("-dir:c2a").directions() == every - {"c2a"}
    assert parse("dir:c2a OR dir:a2c").directions() == {"c2a", "a2c"}
    assert parse("dir:c2a OR kind:error").directions() == every
    assert parse("-(dir:c2a OR dir:stderr)").directions() == {"a2c"}
    assert parse("dir:proxy").directions() == every  # who wrote a line says nothing of its way
    assert parse("dir:c2a dir:a2c").directions() == set()
    assert parse("dir:*2*").directions() == {"c2a", "a2c"}
    assert parse("method:x").directions() == every


def test_str_gives_the_filter_back() -> None:
    text = "dir:a2c  (kind:error OR unanswered) -text:'x y' latency>2s"
    assert str(parse(text)) == "dir:a2c (kind:error OR unanswered) -text:'x y' latency>2s"
    assert str(parse("-(dir:c2a OR replay)")) == "-(dir:c2a OR replay)"


def test_rare_kinds_use_the_partial_index() -> None:
    db = sqlite_utils.Database(memory=True)
    store.migrate(db)
    for text in ("kind:error", "kind:invalid", "kind:batch", "unanswered", "fault", "fault:drop", "kind:error run:3"):
        where, params = parse(text).to_sql()
        plan = " ".join(r[-1] for r in db.execute(f"explain query plan select * from frames where {where}", params))
        assert "idx_frames_rare" in plan, (text, plan)


def test_help_documents_every_field_and_flag() -> None:
    assert filters.HELP.startswith("FILTER LANGUAGE")
    for name in [*filters.FIELDS, *filters.FLAGS]:
        assert f"    {name}" in filters.HELP, name
    for op in ("OR", "AND", "NOT", "..", ">=", "*"):
        assert op in filters.HELP


# -- SQL injection ---------------------------------------------------------------------------


EVIL = [
    "'; drop table frames; --",
    '" OR 1=1 --',
    "') OR ('1'='1",
    "x'); delete from frames where ('1'='1",
    "%_%",
    "?",
    "\\",
]


@pytest.mark.parametrize("evil", EVIL)
@pytest.mark.parametrize("field", ["text", "method", "session", "update", "item", "id", "note", "fault", "error"])
def test_values_stay_values(field: str, evil: str) -> None:
    quoted = "'" + evil + "'" if "'" not in evil else '"' + evil.replace("\\", "\\\\").replace('"', '\\"') + '"'
    text = f"{field}:{quoted}"
    expr = parse(text)
    where, _ = expr.to_sql()
    assert len(evil) < 3 or evil not in where  # ("?" is the placeholder itself)
    db = new_db()
    victim = frame(
        1,
        raw=f"before {evil} after",
        method=evil,
        session_id=evil,
        update_kind=evil,
        item_id=evil,
        note=evil,
        fault=evil,
        error_code=-1,
        error_message=evil,
    )
    insert(db, [victim, frame(2)])
    selected = sql_select(db, expr)
    assert db.execute("select count(*) from frames").fetchone()[0] == 2  # still there
    assert selected == py_select([victim, frame(2)], expr)
    if field != "id":
        assert selected == {(1, 1)}
    assert parse(f"-{text}").matches(frame(2))


# -- errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "column", "reason"),
    [
        ("kind:request nosuchfield:1", 13, "unknown field 'nosuchfield'"),
        ("methd:initialize", 0, "did you mean method"),
        ("kind:request unanswerd", 13, "did you mean unanswered"),
        ("dir:a2c denied", 8, 'write text:"denied"'),
        ("text:permission denied", 16, 'quote them: text:"permission denied" (in a shell'),
        ("session/prompt", 0, "did you mean method:session/prompt"),
        ('text:"unclosed', 5, 'unterminated " quote'),
        ("text:'unclosed", 5, "unterminated ' quote"),
        ('text:"a"b', 8, "space after the closing"),
        ("kind:request )", 13, "unmatched )"),
        ("(kind:request", 0, "unclosed ("),
        ("kind:error ()", 12, "empty parentheses"),
        ("method: kind:request", 7, "needs a value"),
        ("kind:error OR", 13, "a term is missing"),
        ("OR kind:error", 0, "OR needs a term before it"),
        ("kind:error AND", 14, "a term is missing"),
        ("kind:error -", 12, "nothing to negate"),
        ("kind:error NOT", 14, "nothing to negate"),
        ("latency>5 parsecs", 10, "unknown word 'parsecs'"),
        ("seq:1..x", 7, "whole number"),
        ("size:10..1XB", 9, "size needs a size"),
        ("!kind:error", 0, "negate with -, as in -kind:error"),
        ("until:9999-12-31", 6, "until needs a date"),
        ("method>3", 6, "not a number"),
        ("text", 4, "text needs a value"),
        ("kind:request text", 17, "text needs a value"),
    ],
)
def test_errors_point_at_the_column(text: str, column: int, reason: str) -> None:
    err = error_of(text)
    assert reason in err.message, err.message
    assert err.column == column, (err.column, err.message)
    first, shown, caret = str(err).splitlines()
    assert first == err.message and shown == "  " + text
    assert caret.index("^") - 2 == column


# -- both backends agree: property -----------------------------------------------------------

T0 = NOW
METHODS = ["session/prompt", "session/update", "session/load", "initialize", "fs/read_text_file", "_x/y"]
UPDATES = ["agent_message_chunk", "tool_call", "tool_call_update", "plan", "_custom"]
IDS = ["1", '"1"', '"abc"', "null", "7", "-3", '"a b"']
SESSIONS = ["3f2a-1", "3f2b", "x3f2a", "", "3f2a"]
ITEMS = ["m1", "call_1", "call_10", "plan*", "m\x001"]  # GLOB stops at a NUL: so must Python
CODES = [-32603, -32601, -32000, 0, 1, 5]
MESSAGES = ["Internal error", "Method not found", "permission DENIED", "été"]
FAULTS = ["drop", "delay,drop", "dropx", "corrupt"]
NOTES = ["stripped: replayed notice", "held", "Withheld"]
WORDS = ["prompt", "Prompt", "denied", "DENIED", '"id":1', "é", "É", "'", '"', "\\", "\x00", " ", "x"]


FINDING_RULES = ["jsonrpc/not-json", "jsonrpc/unknown-id", "schema/update", "schema/params", "x\x00y/z"]


def maybe(values: Iterable[Any]) -> st.SearchStrategy[Any]:
    return st.sampled_from([None, *values])


RAW_TEXT = st.lists(st.sampled_from(WORDS) | st.text(max_size=3), max_size=6).map("".join)
# Strategies built once: drawing a dictionary of them is far cheaper than drawing field by field.
FRAME_FIELDS = st.fixed_dictionaries(
    {
        "raw": RAW_TEXT | st.tuples(RAW_TEXT, st.binary(max_size=4)).map(lambda t: t[0].encode() + b"\xff" + t[1]),
        "run_id": st.sampled_from([1, 2, 3]),
        "ts_ns": st.sampled_from(
            [T0 + s * SEC + d for s in (-7200, -601, -600, -599, -1, 0, 1, 3600) for d in (-1, 0, 1)]
        ),
        "dir": st.sampled_from(filters.DIRECTIONS),
        "kind": maybe(filters.KINDS),
        "method": maybe(METHODS),
        "rpc_id": maybe(IDS),
        "session_id": maybe(SESSIONS),
        "update_kind": maybe(UPDATES),
        "item_id": maybe(ITEMS),
        "latency_ns": maybe([0, 1, 499_999_999, 500_000_000, 500_000_001, 2 * SEC]),
        "error_code": maybe(CODES),
        "error_message": maybe(MESSAGES),
        "replay": maybe([0, 1]),
        "forwarded": st.sampled_from([0, 1]),
        "unanswered": maybe([0, 1]),
        "cut": st.sampled_from([0, 1]),
        "terminated": st.sampled_from([0, 1]),
        "unknown": maybe(filters.UNKNOWN_VALUES),
        "note": maybe(NOTES),
        "fault": maybe(FAULTS),
        "size": maybe([999, 1000, 1024, 1025]),
        "findings": maybe([[], *([(r, v)] for r in FINDING_RULES for v in filters.SEVERITIES)])
        | st.lists(st.tuples(st.sampled_from(FINDING_RULES), st.sampled_from(filters.SEVERITIES)), max_size=3),
    }
)


def build_frames(rows: list[dict[str, Any]]) -> list[FrameRecord]:
    out = []
    for seq, fields in enumerate(rows, 1):
        size = fields.pop("size")
        rec = frame(seq, **fields)  # a binary raw is never valid UTF-8: it holds \xff
        if size is not None:
            rec.size = size
        out.append(rec)
    return out


FRAMES = st.lists(FRAME_FIELDS, min_size=1, max_size=20).map(build_frames)


def quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


# fmt: off
FIXED_TERMS = [
    *(f"dir:{d}" for d in (*filters.DIRECTIONS, "client", "agent", "*2*")),
    *(f"kind:{k}" for k in filters.KINDS),
    *(f"method:{m}" for m in METHODS),
    "method:session/*", "method:*", "method:*update", 'method:"session/*"', "method",
    "id:1", 'id:"1"', "id:abc", "id:null", "id:-3", 'id:"a b"', "id",
    "session:3f2a", "session:3f", "session:*a", 'session:""', "session",
    "update:tool_call", "update:tool_call*", "update:_custom", "update",
    "item:call_1", "item:call_1*", 'item:"plan*"', "item:plan*", "item:*1", "item:m*", "item",
    "error", "error:-32603", "error:-32700..-32600", "error>0", "error<=0", "error:found",
    'error:"Method not found"', "error:denied", "error:DENIED",
    "replay", "live", "unanswered", "dropped", "cut", "unterminated",
    "fault", "fault:drop", "fault:delay", 'fault:"delay,drop"',
    "note", "note:held", "note:withheld", "note:Withheld",
    "unknown", "unknown:extension", "unknown:future",
    "latency", "latency>500ms", "latency>=500ms", "latency<0.5s", "latency:500ms", "latency<=1ns",
    "latency:1ns..2s", "latency:..500000000ns", "latency>0.5ns", "latency:0.5ns", "latency>1.9999999999s",
    "size>=1KiB", "size<1KB", "size:1000", "size:999..1024B", "size>1.0001kb",
    "run:1", "run:2..3", "run>1", "run:last",
    "seq:3", "seq:3..9", "seq:10..", "seq:..4", "seq>20", "seq<=1",
    "since:10m", "until:10m", "since:2h", "until:1h30m", "since:2025-05-01T11:46:40Z",
    "until:2025-05-01T11:46:40Z", "since:2025-05-01T11:46:39.999999Z", "until:2025-05-01", "since:2025-05-02",
    "finding", "finding:error", "finding:warning", "finding:info", "finding:jsonrpc/not-json",
    "finding:schema/*", "finding:*/*date", 'finding:"schema/*"', "finding:x*", "finding:*/z",
    "text:prompt", "text:Prompt", "text:denied", 'text:"\\""', "text:'\\'", 'text:"é"', 'text:"É"',
]
# fmt: on


def terms() -> st.SearchStrategy[str]:
    random_text = st.text(max_size=4).map(lambda s: f"text:{quote(s)}")
    random_bare = st.lists(st.sampled_from(WORDS), min_size=1, max_size=3).map("".join).map(quote)
    random_note = st.text(max_size=3).map(lambda s: f"note:{quote(s)}")
    random_num = st.builds(
        lambda field, op, n, unit: f"{field}{op}{n}{unit}",
        st.sampled_from(["latency", "size"]),
        st.sampled_from([">", ">=", "<", "<=", ":"]),
        st.sampled_from(["0", "1", "0.5", "499.9999999", "500", "1000", "1.024", "2"]),
        st.sampled_from(["", "ms", "s", "ns", "KB", "KiB", "B"]),
    ).filter(lambda t: not (t.startswith("latency") and t[-1] == "B") and not (t.startswith("size") and "s" in t[4:]))
    fixed = st.sampled_from(FIXED_TERMS)
    return st.one_of(fixed, fixed, fixed, fixed, random_text, random_bare, random_note, random_num)


def combine(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    group = children.map(lambda c: f"({c})")
    return (
        st.lists(group | children, min_size=2, max_size=3).map(" ".join)
        | st.lists(group, min_size=2, max_size=3).map(" AND ".join)
        | st.lists(group, min_size=2, max_size=3).map(" OR ".join)
        | group.map(lambda c: f"-{c}")
        | group.map(lambda c: f"NOT {c}")
    )


FILTERS = st.recursive(terms(), combine, max_leaves=8)


SHARED_DB = new_db()  # emptied by each example: creating tables costs more than the test


@settings(max_examples=150, deadline=None)
@given(frames=FRAMES, texts=st.lists(FILTERS, min_size=4, max_size=10), last_run=maybe([2]))
def test_both_backends_select_the_same_frames(
    frames: list[FrameRecord], texts: list[str], last_run: int | None
) -> None:
    db = SHARED_DB
    db.execute("delete from frames")
    db.execute("delete from findings")
    insert(db, frames)
    for text in texts:
        expr = parse(text, now_ns=NOW, last_run=last_run)
        python = py_select(frames, expr)
        if "run:last" in text and last_run is None:
            # Without a run id, run:last is the newest run in SQL and every live frame in Python.
            assert sql_select(db, expr) <= {(f.run_id, f.seq) for f in frames}
            continue
        assert python == sql_select(db, expr), (text, expr.to_sql())
        again = parse(str(expr), now_ns=NOW, last_run=last_run)  # str() gives a filter back
        assert py_select(frames, again) == python
        assert all(f.dir in expr.directions() for f in frames if expr.matches(f))


@settings(max_examples=300, deadline=None)
@given(st.text(st.sampled_from("ab:-() \"'*.<>=OR\\x1\n"), max_size=20) | st.text(max_size=20))
def test_any_text_parses_or_fails_with_a_column(text: str) -> None:
    try:
        expr = parse(text, now_ns=NOW)
    except FilterError as exc:
        assert 0 <= exc.column <= len(text)
        assert exc.message and "\n" not in exc.message
        return
    where, params = expr.to_sql()
    new_db().execute(f"select count(*) from frames where {where}", params).fetchone()
