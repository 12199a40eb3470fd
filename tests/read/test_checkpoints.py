"""The playhead's checkpointed fold (``read.checkpoints``, ``read.playhead``): at any frame, in
any order of visits, the conversation is the one ``fold_rows`` rebuilds from that run's frames
up to it (masked as a page masks them, a proxy chain's hops included); a long message is sent as
its tail with how much came before; a first visit that runs out of its budget says how far it
got and the next ask goes on from there; snapshots are bounded; frames a live run records later
invalidate nothing; a fold state too large is refused in one line.

Recordings are made by the recorder path (``synthetic_db``: every entity kind, secrets, stderr
lines; ``long_run``; a two-deep proxy chain from ``test_hops``).
"""

from __future__ import annotations

import json
import random
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from acp_proxy.protocol.redact import Redactor
from acp_proxy.read import checkpoints as cp
from acp_proxy.read import conversation as folding
from acp_proxy.read import playhead as ph
from acp_proxy.read import queries
from tests.read.test_hops import CHUNK, _direct_and_chained, v2_turn
from tests.web.test_web_pages import PASSWORD, long_run
from tests.web_support import SECRETS, synthetic_db


def connect(db: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{db}?mode=ro", uri=True)


def reference(db: Any, run_id: int, seq: int | None, rules: list[str] | None) -> list[dict[str, Any]]:
    """The run folded from scratch up to ``seq``, the way ``show`` folds (its rows masked in
    relay order by a redactor of its own, none when ``rules`` is None; the run taken as still
    going)."""
    rows = queries.rows(
        db, "select * from frames where run_id = ? and dir != 'stderr' and seq <= ? order by seq", [run_id, seq or 0]
    )
    redactor = Redactor(rules or [], enabled=rules is not None)
    rows = [redactor.frame_row(r) for r in rows]
    folded = folding.fold_rows(rows, ended={run_id: False})
    kept = sorted(
        (c for k, c in folded.items() if k is not None or not c.empty),
        key=lambda c: c.timeline[0].seq if c.timeline else 0,
    )
    return [redactor.value(folding.conversation_json(c)) for c in kept]


def plain(conversations: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = json.loads(json.dumps(conversations))
    for conv in out:
        assert conv.pop("hidden_entries") == 0 and conv.pop("hidden_turns") == 0
    return out  # type: ignore[no-any-return]


def relayed(db: Any, run_id: int) -> list[int]:
    return [
        r[0] for r in db.execute("select seq from frames where run_id = ? and dir != 'stderr' order by seq", [run_id])
    ]


def visit(db: Any, run_id: int, seqs: list[int], rules: list[str], cache: cp.Cache) -> None:
    for seq in seqs:
        got = ph.at(db, run_id, seq, Redactor(rules), cache=cache)
        assert isinstance(got, ph.Playhead) and got.seq == seq
        assert plain(got.conversations) == reference(db, run_id, seq, rules), f"at frame {seq}"


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return synthetic_db(tmp_path_factory.mktemp("checkpoints") / "synthetic.db")


@pytest.mark.parametrize("rules", [[], [f"re:{SECRETS['key'][:6]}\\w*"]])
def test_every_frame_in_any_order_is_the_fold_from_scratch(
    synthetic: Path, rules: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A snapshot every 3 frames, at most 4 kept, near ones every 2 (3 kept): restoring from
    # either, folding on and thinning all happen.
    monkeypatch.setattr(cp, "EVERY", 3)
    monkeypatch.setattr(cp, "MAX_SNAPSHOTS", 4)
    monkeypatch.setattr(cp, "NEAR", 2)
    monkeypatch.setattr(cp, "NEAR_KEPT", 3)
    db = connect(synthetic)
    seqs = relayed(db, 1)
    assert len(seqs) > 15
    cache = cp.Cache()
    order = seqs + seqs[::-1]
    random.Random(7).shuffle(shuffled := list(seqs))
    visit(db, 1, order + shuffled, rules, cache)
    (points,) = cache._held.values()
    assert len(points.snapshots) <= 4 + 1 and points.every > 3, "thinned"
    assert 0 < len(points.near) <= 3
    # Masked as a page masks: the secret the run names is nowhere in what the playhead sends.
    end = ph.at(db, 1, seqs[-1], Redactor(rules), cache=cache)
    assert isinstance(end, ph.Playhead) and SECRETS["key"] not in json.dumps(end.conversations)


def test_snapshots_of_a_state_of_many_entries_are_fewer_not_bigger(
    synthetic: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cp, "EVERY", 2)
    monkeypatch.setattr(cp, "SNAPSHOT_ENTRIES", 20)
    db = connect(synthetic)
    seqs = relayed(db, 1)
    cache = cp.Cache()
    visit(db, 1, seqs[::-1][:1] + seqs[::3], [], cache)
    (points,) = cache._held.values()
    assert sum(s.entries for s in points.snapshots) <= 20 or len(points.snapshots) <= 2
    assert points.every > 2, "thinned"


def test_a_proxy_chains_hops_are_folded_as_show_folds_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cp, "EVERY", 2)
    db_path = tmp_path / "hops.db"
    _, link = _direct_and_chained(db_path, v2_turn(CHUNK), depth=2)
    db = connect(db_path)
    seqs = relayed(db, link)
    visit(db, link, seqs[::-1] + seqs, [], cp.Cache())
    end = ph.at(db, link, seqs[-1], None)
    assert isinstance(end, ph.Playhead)
    assert {c["hop"] for c in end.conversations} == {0, 1, 2}


def test_a_long_message_is_sent_as_its_tail_with_what_came_before_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cp, "EVERY", 50)
    monkeypatch.setattr(cp, "TAIL", 10)
    db_path = tmp_path / "long.db"
    long_run(db_path, 1000)
    db = connect(db_path)
    got = ph.at(db, 1, 1005, Redactor([]), cache=cp.Cache())
    assert isinstance(got, ph.Playhead) and got.position == 1005 and got.total == 1006
    (agent,) = [e for c in got.conversations for e in c["timeline"] if e.get("role") == "agent"]
    assert [b["text"] for b in agent["content"]] == [f"w{i} " for i in range(990, 1000)]
    assert agent["hidden_chunks"] == 990 and agent["chunks"] == 1000
    # The fold state itself holds the tail only, not a thousand chunks.
    (points,) = [p for p in [cp.Checkpoints(1, None)]]
    assert points.reach(db, 1005) is not None
    held = [e for c in points.work.conversations().values() for e in c.timeline if getattr(e, "role", "") == "agent"]
    assert len(held[0].content) <= 2 * 10


def test_a_first_visit_past_its_budget_says_how_far_it_got_and_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cp, "EVERY", 100)
    monkeypatch.setattr(cp, "_BATCH", 500)  # frames read at a time: the budget is looked at between
    db_path = tmp_path / "long.db"
    long_run(db_path, 3000, quote_every=500)
    db = connect(db_path)
    cache = cp.Cache()
    asks, got = 0, ph.at(db, 1, 3006, Redactor([]), cache=cache, budget=0)
    seen = []
    while isinstance(got, ph.Folding):
        asks += 1
        assert got.seq == 3006 and got.total == 3006
        seen.append(got.position)
        got = ph.at(db, 1, 3006, Redactor([]), cache=cache, budget=0)
    assert asks >= 2 and seen == sorted(seen) and len(set(seen)) == len(seen), "each ask goes on from the last"
    assert isinstance(got, ph.Playhead) and got.position == 3006
    assert PASSWORD not in json.dumps(got.conversations), "learnt in initialize, masked where a chunk quotes it"
    assert plain(got.conversations) != []  # the long message is windowed; agreement is the test above
    # Back one step: from the snapshot before it, at most EVERY frames folded.
    back = ph.at(db, 1, 3005, Redactor([]), cache=cache, budget=0)
    assert isinstance(back, ph.Playhead) and back.position == 3005


def test_frames_recorded_later_invalidate_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cp, "EVERY", 4)
    db_path = tmp_path / "live.db"
    long_run(db_path, 20)
    cache = cp.Cache()
    db = connect(db_path)
    end = ph.at(db, 1, 26, None, cache=cache)
    assert isinstance(end, ph.Playhead) and end.total == 26
    # The run goes on: more frames are recorded after the ones already folded.
    with sqlite3.connect(db_path) as rw:
        row = rw.execute("select * from frames where run_id = 1 and seq = 10").fetchone()
        for seq in (27, 28):
            rw.execute(f"insert into frames values ({', '.join('?' * len(row))})", (1, seq, *row[2:]))
    db = connect(db_path)
    later = ph.at(db, 1, 28, None, cache=cache)
    assert isinstance(later, ph.Playhead) and later.total == later.position == 28
    assert plain(later.conversations) == reference(db, 1, 28, None)
    assert plain(ph.at(db, 1, 13, None, cache=cache).conversations) == reference(db, 1, 13, None)  # type: ignore[union-attr]


def test_a_fold_state_too_large_is_refused_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cp, "EVERY", 2)
    monkeypatch.setattr(cp, "MAX_ENTRIES", 1)
    db = connect(synthetic_db(tmp_path / "s.db"))
    with pytest.raises(ph.TooLong) as refused:
        ph.at(db, 1, 999, None, cache=cp.Cache())
    assert "\n" not in str(refused.value) and "entries" in str(refused.value)


def test_the_cache_keeps_a_few_runs(tmp_path: Path) -> None:
    db_path = tmp_path / "runs.db"
    for _ in range(3):
        long_run(db_path, 2)
    db = connect(db_path)
    cache = cp.Cache(runs=2)
    for run in (1, 2, 3, 1):
        assert isinstance(ph.at(db, run, 3, None, cache=cache), ph.Playhead)
    assert [k[0] for k in cache._held] == [3, 1]
    with pytest.raises(LookupError):
        ph.at(db, 9, 1, None, cache=cache)
