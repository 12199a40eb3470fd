"""Lines a hostile peer may send: every one is relayed untouched and becomes a frame row, through
the real recorder process and through the gate; none stops the recording or the relay."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from acp_proxy.protocol import wire
from tests.conftest import proxy_env, run_proxy

DEEP = 100_000
HOSTILE = {
    "deep array": b"[" * DEEP + b"]" * DEEP,
    "deep params": b'{"jsonrpc":"2.0","method":"x","params":' + b"[" * DEEP + b"]" * DEEP + b"}",
    "deep result": b'{"jsonrpc":"2.0","id":1,"result":' + b'{"a":' * DEEP + b"1" + b"}" * DEEP + b"}",
    "deep id": b'{"jsonrpc":"2.0","id":' + b"[" * DEEP + b"]" * DEEP + b',"result":1}',
    "deep batch": b"[" + b"[" * DEEP + b"]" * DEEP + b"]",
    "unbalanced": b'{"jsonrpc":"2.0","id":1,"result":' + b"[" * DEEP,
    "code 2^63": b'{"jsonrpc":"2.0","id":2,"error":{"code":9223372036854775808,"message":"x"}}',
    "code 2^64": b'{"jsonrpc":"2.0","id":3,"error":{"code":18446744073709551616,"message":"x"}}',
    "code -2^64": b'{"jsonrpc":"2.0","id":4,"error":{"code":-18446744073709551616,"message":"x"}}',
    "id 2^64": b'{"jsonrpc":"2.0","id":18446744073709551616,"method":"m"}',
    "100k-digit id": b'{"jsonrpc":"2.0","id":' + b"9" * 100_000 + b',"result":1}',
    "100k-digit code": b'{"jsonrpc":"2.0","id":5,"error":{"code":' + b"9" * 100_000 + b',"message":"x"}}',
    "100k-digit version": b'{"jsonrpc":"2.0","id":6,"method":"initialize","params":{"protocolVersion":'
    + b"7" * 100_000
    + b"}}",
    "huge version": b'{"jsonrpc":"2.0","id":7,"result":{"protocolVersion":18446744073709551616}}',
    "lone surrogate": b'{"jsonrpc":"2.0","id":8,"method":"\\ud800","params":{"sessionId":"\\udfff"}}',
    "surrogate in result": b'{"jsonrpc":"2.0","id":9,"result":{"t":"\\ud800"}}',
    "escaped NUL": b'{"jsonrpc":"2.0","id":10,"method":"a\\u0000b"}',
    "raw NUL": b'{"jsonrpc":"2.0","id":11,"method":"a\x00b"}',
    "invalid UTF-8": b'{"jsonrpc":"2.0","id":12,"method":"\xff\xfe"}',
    "overlong UTF-8": b'{"jsonrpc":"2.0","id":13,"method":"\xc0\xaf"}',
    "float id": b'{"jsonrpc":"2.0","id":1e400,"result":1}',
    "not JSON": b"\x00\x01\x02 hello",
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_decoding_is_total(name: str) -> None:
    frame = wire.decode(HOSTILE[name])
    assert frame.kind in wire.KINDS
    if frame.error_code is not None:
        assert wire.INT64_MIN <= frame.error_code <= wire.INT64_MAX


def test_a_deep_response_is_still_a_response() -> None:
    frame = wire.decode(HOSTILE["deep result"])
    assert (frame.kind, frame.rpc_id) == ("response", "1")
    assert "nested deeper than" in (frame.decode_error or "")


def test_an_error_code_sqlite_cannot_hold_is_reported_not_kept() -> None:
    frame = wire.decode(HOSTILE["code 2^64"])
    assert (frame.kind, frame.error_code) == ("error", None)
    assert "not a 64-bit integer" in (frame.decode_error or "")


def recorded(db: Path) -> tuple[dict, list[tuple]]:
    conn = sqlite3.connect(db)
    conn.row_factory = sqlite3.Row
    try:
        (run,) = [dict(row) for row in conn.execute("select * from runs")]
        frames = conn.execute("select dir, size, kind, cut from frames where batch_seq is null order by seq").fetchall()
    finally:
        conn.close()
    return run, [tuple(row) for row in frames]


def assert_recorded_whole(db: Path, lines: list[bytes]) -> None:
    run, frames = recorded(db)
    assert run["status"] == "ended"
    assert (run["not_recorded"] or 0) == 0
    for direction in ("c2a", "a2c"):
        sizes = [size for d, size, _, _ in frames if d == direction]
        assert sizes == [len(line) for line in lines]
    assert run["frames_c2a"] == run["frames_a2c"] == len(lines)


def relay_through_cat(db: Path, lines: list[bytes], *, gate: bool) -> None:
    """``lines`` through a recording proxy to ``cat`` and back, every byte relayed as it was."""
    data = b"".join(line + b"\n" for line in lines)
    # A rule that matches nothing makes both directions go through the gate line by line.
    faults = ["--fault", "drop if method:_never/this"] if gate else []
    result = run_proxy(["run", "--db", str(db), *faults, "--", "cat"], input=data, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout == data
    assert b"Traceback" not in result.stderr


@pytest.mark.spawns
@pytest.mark.parametrize("gate", [False, True], ids=["recorder", "gate"])
def test_every_hostile_line_is_relayed_and_recorded(tmp_path: Path, gate: bool) -> None:
    lines = list(HOSTILE.values())
    db = tmp_path / "rec.db"
    relay_through_cat(db, lines, gate=gate)
    assert_recorded_whole(db, lines)


@pytest.mark.spawns
def test_a_line_over_sqlites_length_limit_is_recorded_cut_and_flagged(tmp_path: Path) -> None:
    # SQLite's default limit is 1e9 bytes; the test lowers it to 1 MiB in the recorder's
    # connections (store.LENGTH_LIMIT_VAR) rather than push a gigabyte through a pipe.
    limit = 1024 * 1024
    big = b'{"jsonrpc":"2.0","id":1,"result":{"blob":"' + b"z" * (3 * limit) + b'"}}'
    small = b'{"jsonrpc":"2.0","method":"after"}'
    data = big + b"\n" + small + b"\n"
    db = tmp_path / "rec.db"
    env = proxy_env(ACP_PROXY_SQLITE_MAX_LENGTH=str(limit))
    result = run_proxy(["run", "--db", str(db), "--max-record-bytes", "1GB", "--", "cat"], input=data, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout == data
    run, frames = recorded(db)
    assert run["status"] == "ended" and not run["not_recorded"]
    assert [(d, size, cut) for d, size, _, cut in frames] == [
        ("c2a", len(big), 1),
        ("c2a", len(small), 0),
        ("a2c", len(big), 1),
        ("a2c", len(small), 0),
    ]
    conn = sqlite3.connect(db)
    try:
        stored = conn.execute("select max(length(raw)) from frames").fetchone()[0]
    finally:
        conn.close()
    assert stored < limit


def test_one_row_sqlite_refuses_costs_one_row_not_its_batch(tmp_path: Path) -> None:
    """The writer's last line of defence: a row that fails is retried alone and counted."""
    from acp_proxy.record.writer import RunWriter
    from acp_proxy.store import database as store

    db = store.open_for_writing(tmp_path / "rec.db")
    db.conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, 10_000)
    run_id = db["runs"].insert({"started_ns": 1, "status": "running"}).last_pk
    writer = RunWriter(db, run_id, tmp_path / "none.journal", None)
    sql = "INSERT INTO frames (run_id, seq, ts_ns, dir, raw) VALUES (?, ?, ?, ?, ?)"
    rows = [(run_id, seq, 0, "a2c", "x" * (50_000 if seq == 3 else 10)) for seq in range(1, 101)]
    writer.apply({"count": 100, "batches": [(sql, rows)], "changes": [], "nbytes": 0, "run": {}, "state": "{}"})
    seqs = [row[0] for row in db.execute("select seq from frames order by seq")]
    assert seqs == [seq for seq in range(1, 101) if seq != 3]
    run = db.execute("select not_recorded, not_recorded_reason from runs").fetchone()
    assert run[0] == 1 and "too big" in run[1]


hostile_lines = st.lists(
    st.one_of(
        st.sampled_from(list(HOSTILE.values())),
        st.binary(max_size=200).map(lambda b: b.replace(b"\n", b"")),
        st.builds(
            lambda depth, tail: b'{"jsonrpc":"2.0","id":1,"result":' + b"[" * depth + tail + b"]" * depth + b"}",
            st.integers(min_value=0, max_value=5000),
            st.sampled_from([b"", b"1", b'"\\ud800"', b"18446744073709551616"]),
        ),
        st.builds(
            lambda code: b'{"jsonrpc":"2.0","id":1,"error":{"code":%d,"message":"m"}}' % code,
            st.integers(min_value=-(2**70), max_value=2**70),
        ),
    ),
    min_size=1,
    max_size=12,
)


@pytest.mark.spawns
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=hostile_lines, gate=st.booleans())
def test_generated_hostile_lines_through_the_real_recorder(tmp_path: Path, lines: list[bytes], gate: bool) -> None:
    data = b"".join(line + b"\n" for line in lines)
    db = tmp_path / f"h-{os.urandom(8).hex()}.db"  # hypothesis may draw the same lines twice
    faults = ["--fault", "drop if method:_never/this"] if gate else []
    result = run_proxy(["run", "--db", str(db), *faults, "--", "cat"], input=data, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout == data  # untouched, through the gate too
    assert_recorded_whole(db, lines)
