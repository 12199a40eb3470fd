"""A proxy chain's inner turns are turns in ``stats`` (and every view built on the turns table
and the latency table): recorded through the recorder as the conductor's link to a proxy
(frames built from the proxy-chains RFD's "Message reference"), the hop's turn rows and
latency rows are exactly what recording the inner conversation directly gives, with ``hop``."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from acp_proxy.read import hops, latency, listing
from acp_proxy.read.stats import stats
from acp_proxy.record.importers import Record, write_run
from acp_proxy.store import database as store
from tests.checks.test_checks import S, a2c, chained, res, upd, v2_turn

TOOL = upd({"sessionUpdate": "tool_call", "toolCallId": "t1", "title": "Read", "status": "pending"})
CHUNK = upd({"sessionUpdate": "agent_message_chunk", "messageId": "msg_a1", "content": {"type": "text", "text": "."}})


def _times(n: int) -> list[int]:
    # Uneven gaps, so every metric (acceptance, first output, duration) is a distinct number.
    out, ts = [], 1_000_000
    for i in range(n):
        ts += (i % 5 + 1) * 1_300_000
        out.append(ts)
    return out


def _record(db_path: Path, messages: list[tuple[str, Any]], times: list[int]) -> int:
    records = [Record(d, ts, json.dumps(m).encode()) for (d, m), ts in zip(messages, times, strict=True)]
    return write_run(db_path, records, {"argv": ["hops"], "ended_ns": times[-1] + 1, "status": "exited"})


def _direct_and_chained(db_path: Path, inner: list[tuple[str, Any]], *, depth: int = 1) -> tuple[int, int]:
    times = _times(len(inner))
    direct = _record(db_path, inner, times)
    outer = inner
    for _ in range(depth):
        outer = chained(outer)
    # The envelope of each inner frame carries its time; the proxy/initialize pairs sit around them.
    pad = depth
    outer_times = [*range(1, pad + 1), *times, *(times[-1] + k for k in range(1, pad + 1))]
    return direct, _record(db_path, outer, outer_times)


def _without(rows: list[dict[str, Any]], *names: str) -> list[dict[str, Any]]:
    return [{k: v for k, v in row.items() if k not in names} for row in rows]


def test_a_hops_turns_are_the_turns_of_the_same_conversation_recorded_directly(tmp_path: Path) -> None:
    db_path = tmp_path / "rec.db"
    inner = v2_turn(TOOL, CHUNK, CHUNK)
    direct, link = _direct_and_chained(db_path, inner)
    db = store.open_for_reading(db_path)
    own = stats(db, str(direct))["turns"]
    assert [(t["hop"], t["chunks"], t["tool_calls"], t["status"]) for t in own] == [(0, 2, 1, "ended")]
    through = stats(db, str(link))["turns"]
    assert [t["hop"] for t in through] == [1], "the link itself has no turn; its hop has one"
    assert _without(through, "run_id", "hop") == _without(own, "run_id", "hop")
    assert through[0]["duration_ms"] > 0 and through[0]["to_first_output_ms"] is not None
    # Every run: both, the link's own first in each run.
    assert [(t["run_id"], t["hop"]) for t in stats(db, "all")["turns"]] == [(direct, 0), (link, 1)]


def test_a_hops_latency_rows_are_its_requests_by_their_own_method_and_direction(tmp_path: Path) -> None:
    db_path = tmp_path / "rec.db"
    direct, link = _direct_and_chained(db_path, v2_turn())
    db = store.open_for_reading(db_path)
    own = latency.latency_table(db, [direct])
    assert {(r["method"], r["dir"], r["hop"]) for r in own} == {
        ("initialize", "c2a", 0),
        ("session/new", "c2a", 0),
        ("session/prompt", "c2a", 0),
    }
    table = latency.latency_table(db, [link])
    outer = [r for r in table if r["hop"] == 0]
    assert {(r["method"], r["dir"]) for r in outer} == {("proxy/initialize", "c2a"), ("proxy/successor", "a2c")}
    # The inner client's requests travel a2c outside, in envelopes; inside they are c2a again.
    assert _without([r for r in table if r["hop"] == 1], "hop") == _without(own, "hop")


def test_a_hops_requests_are_latency_samples_right_after_their_envelopes(tmp_path: Path) -> None:
    db_path = tmp_path / "rec.db"
    direct, link = _direct_and_chained(db_path, v2_turn(TOOL, CHUNK))
    db = store.open_for_reading(db_path)
    own = latency.samples(db, [direct])
    assert {s["hop"] for s in own} == {0} and len(own) == 3
    found = latency.samples(db, [link])
    inner = [s for s in found if s["hop"] == 1]
    assert _without(inner, "hop") == _without(own, "hop"), "a hop's samples are the direct recording's"
    for n, sample in enumerate(found):
        if sample["hop"] == 1:  # the envelope's own answer, then what it carried
            envelope = found[n - 1]
            assert (envelope["method"], envelope["hop"]) == ("proxy/successor", 0)
            assert envelope["latency_ms"] == sample["latency_ms"] and envelope["dir"] != sample["dir"]
    assert [s["method"] for s in found if s["hop"] == 0] == ["proxy/successor"] * 3 + ["proxy/initialize"]
    assert latency.samples(db, [link], limit=3) == found[-3:], "the latest, hops included"
    assert latency.samples(db, None) == own + found
    # Two proxies: the inner requests are hop 2, each after both envelopes' answers.
    _direct, twice = _direct_and_chained(db_path, v2_turn(CHUNK), depth=2)
    deep = latency.samples(db, [twice])
    assert _without([s for s in deep if s["hop"] == 2], "hop") == _without(own, "hop")
    assert [s["hop"] for s in deep[:3]] == [0, 1, 2]


def test_nested_envelopes_are_deeper_hops(tmp_path: Path) -> None:
    db_path = tmp_path / "rec.db"
    direct, link = _direct_and_chained(db_path, v2_turn(CHUNK), depth=2)
    db = store.open_for_reading(db_path)
    turns = stats(db, str(link))["turns"]
    assert [t["hop"] for t in turns] == [2]
    assert _without(turns, "run_id", "hop") == _without(stats(db, str(direct))["turns"], "run_id", "hop")
    table = latency.latency_table(db, [link])
    # Hop 1 is the first proxy's own link to the conductor, as the outer link is ours.
    assert {(r["method"], r["dir"]) for r in table if r["hop"] == 1} == {
        ("proxy/initialize", "c2a"),
        ("proxy/successor", "a2c"),
    }
    assert {(r["method"], r["dir"]) for r in table if r["hop"] == 2} == {
        ("initialize", "c2a"),
        ("session/new", "c2a"),
        ("session/prompt", "c2a"),
    }


def test_a_hops_open_turn_ends_with_its_run_as_the_links_do_and_a_session_scope_filters(tmp_path: Path) -> None:
    db_path = tmp_path / "rec.db"
    inner = v2_turn()[:-1]  # no idle: the turn has not ended
    outer = chained(inner)[:-1]  # the link's own proxy/initialize is still pending too
    lines = [Record(d, ts, json.dumps(m).encode()) for (d, m), ts in zip(outer, [0, *_times(len(inner))], strict=True)]
    run = write_run(db_path, lines, {"ended_ns": 10**9, "status": "exited"})
    db = store.open_for_reading(db_path)
    found = hops.turn_stats(db, [run], S)
    assert [(t["hop"], t["session_id"], t["status"], t["duration_ms"]) for t in found] == [(1, S, "unfinished", None)]
    assert hops.turn_stats(db, [run], "another") == []
    with sqlite3.connect(db_path) as conn:  # as if the run were still recording
        conn.execute("update runs set ended_ns = null, status = 'running'")
    assert [t["status"] for t in hops.turn_stats(store.open_for_reading(db_path), [run], None)] == ["running"]


def test_envelopes_that_are_not_json_or_carry_nothing_give_no_hop(tmp_path: Path) -> None:
    db_path = tmp_path / "rec.db"
    bad = [
        ("a2c", {"jsonrpc": "2.0", "id": 5, "method": "proxy/successor", "params": "not an object"}),
        ("c2a", res(5, {})),
        ("a2c", {"jsonrpc": "2.0", "id": 6, "method": "proxy/successor", "params": {"params": {}}}),
        a2c(res(6, {})),
    ]
    run = _record(db_path, bad, [1, 2, 3, 4])
    db = store.open_for_reading(db_path)
    assert hops.turn_stats(db, [run], None) == []
    assert [r["hop"] for r in latency.latency_table(db, [run])] == [0]


def _spans(db: Any, run: int) -> tuple[list[Any], list[Any]]:
    from acp_proxy.otel import spans
    from acp_proxy.read import queries

    rows = queries.rows(db, "select * from frames where run_id = ? order by seq", [run])
    return spans.build(rows, run_id=run, ids=spans.recording_ids(f"test-{run}"))


def test_otlp_spans_carry_the_hop_and_the_hops_spans_are_the_direct_recordings(tmp_path: Path) -> None:
    db_path = tmp_path / "rec.db"
    direct, link = _direct_and_chained(db_path, v2_turn(TOOL, CHUNK))
    db = store.open_for_reading(db_path)
    own, own_points = _spans(db, direct)
    chain, chain_points = _spans(db, link)
    assert not any("acp.hop" in s.attributes for s in own)

    def shape(spans: list[Any]) -> list[tuple[Any, ...]]:
        # The link's own frames shift the inner seqs by one, an inner request keeps its
        # envelope's id (protocol.chains), and the hop's connection span ends with the link's.
        drop = {"acp.hop", "acp.run.id", "jsonrpc.request.id"}
        return sorted(
            (
                s.name,
                s.kind,
                s.start_ns,
                None if s.name == "acp.connection" else s.end_ns,
                s.error,
                sorted((k, repr(v)) for k, v in s.attributes.items() if k not in drop and not k.endswith(".seq")),
            )
            for s in spans
        )

    inner = [s for s in chain if s.attributes.get("acp.hop") == 1]
    assert shape(inner) == shape(own)
    assert "invoke_agent" in {s.name.split(" ")[0] for s in inner}
    outer = {s.attributes.get("rpc.method") for s in chain if "acp.hop" not in s.attributes}
    assert outer >= {"proxy/successor", "proxy/initialize"} and "session/prompt" not in outer
    assert sorted((p.metric, p.value) for p in chain_points if p.attributes.get("acp.hop") == 1) == sorted(
        (p.metric, p.value) for p in own_points
    )


def test_the_doors_show_the_hop_mcp_stats_and_the_cli_table(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from acp_proxy.cli.commands import cli
    from acp_proxy.mcp.tools import Tools
    from acp_proxy.protocol.redact import Redactor

    db_path = tmp_path / "rec.db"
    _direct, link = _direct_and_chained(db_path, v2_turn(CHUNK))
    answer = Tools(db_path, Redactor()).stats(str(link)).model_dump()
    assert [(t["hop"], t["session_id"]) for t in answer["turns"]["items"]] == [(1, S)]
    assert ("session/prompt", 1) in {(r["method"], r["hop"]) for r in answer["latency"]}
    shown = CliRunner().invoke(cli, ["stats", str(link), "--db", str(db_path)], env={"COLUMNS": "100"})
    assert shown.exit_code == 0, shown.output
    lines = shown.output.splitlines()
    assert all(len(line) <= 100 for line in lines)
    header = next(line for line in lines if "method" in line and "p50" in line)
    prompt = next(line for line in lines if "session/prompt" in line)
    assert header.split()[0] == "hop" and prompt.split()[0] == "1"
    turns = next(line for line in lines if "session" in line and "took" in line)
    assert turns.split()[:2] == ["run", "hop"]


def test_the_summary_counts_a_hops_turns(tmp_path: Path) -> None:
    from acp_proxy.read.insights import summary

    db_path = tmp_path / "rec.db"
    direct, link = _direct_and_chained(db_path, v2_turn(CHUNK))
    db = store.open_for_reading(db_path)
    assert summary(db, str(link))["turns"] == 1 == summary(db, str(direct))["turns"]
    found = summary(db, "all")
    assert found["turns"] == 2 and found["stop_reasons"] == {"end_turn": 2}


def _own_and_chained(db_path: Path) -> int:
    """A link with a conversation of its own (session S, one turn) that then forwards another
    conversation in session S to its successor (one turn more, hop 1): a proxy's link to the
    conductor, as the proxy-chains RFD has it."""
    messages = [*v2_turn(CHUNK), *chained(v2_turn(TOOL))]
    return _record(db_path, messages, _times(len(messages)))


def test_the_lists_of_runs_and_sessions_count_a_hops_turns_as_stats_does(tmp_path: Path) -> None:
    from acp_proxy.read import listing, run_search

    db_path = tmp_path / "rec.db"
    direct, link = _direct_and_chained(db_path, v2_turn(CHUNK))
    both = _own_and_chained(db_path)
    db = store.open_for_reading(db_path)
    expected = {run: len(stats(db, str(run))["turns"]) for run in (direct, link, both)}
    assert expected == {direct: 1, link: 1, both: 2}
    assert {r["id"]: r["turns"] for r in listing.runs(db, None)} == expected
    assert {r["id"]: r["turns"] for r in listing.runs(db, 2, 1)} == {link: 1, direct: 1}
    page, more = listing.runs_before(db, None, 2)
    assert [(r["id"], r["turns"]) for r in page] == [(both, 2), (link, 1)] and more
    found, _more, total = run_search.runs_matching(db, run_search.RunQuery())
    assert {r["id"]: r["turns"] for r in found} == expected and total == 3
    # Session S, created in `direct` and again in `both` (two instances): in `both` its own turn
    # and the one its hop carries. The link `link` has no session of its own: its hop's session
    # is listed with its hop (seen last as `direct`'s, ranked after it: it has no row). `stats S`
    # is the newest instance's.
    listed = [(s["session_id"], s["runs"], s["turns"], s["hop"]) for s in listing.sessions(db, None)]
    assert listed == [(S, str(both), 2, 0), (S, str(direct), 1, 0), (S, str(link), 1, 1)]
    assert len(stats(db, S)["turns"]) == 2
    assert [s["turns"] for s in listing.sessions_before(db, None, 10)[0]] == [2, 1, 1]
    assert [s["turns"] for s in listing.sessions(db, 1, 1)] == [1]
    # A long list looks in every run and keeps its own.
    assert hops.turn_counts(db, list(range(1, 1000))) == hops.turn_counts(db, None) == {(link, S): 1, (both, S): 1}
    assert hops.turn_counts(db, [direct, link, *range(10, 1000)]) == {(link, S): 1}


def test_the_doors_lists_count_a_hops_turns(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from acp_proxy.cli.commands import cli
    from acp_proxy.mcp.tools import Tools
    from acp_proxy.protocol.redact import Redactor
    from acp_proxy.web import model

    db_path = tmp_path / "rec.db"
    _direct, link = _direct_and_chained(db_path, v2_turn(CHUNK))
    both = _own_and_chained(db_path)
    tools = Tools(db_path, Redactor())
    assert {r["id"]: r["turns"] for r in tools.list_runs().model_dump()["items"]} == {1: 1, link: 1, both: 2}
    assert [s["turns"] for s in tools.list_sessions().model_dump()["items"]] == [2, 1, 1]
    index = model.index(store.open_for_reading(db_path), Redactor())
    assert [(r["id"], r["turns"]) for r in index["runs"]] == [(both, 2), (link, 1), (1, 1)]
    assert [(s["turns"], s["hop"]) for s in index["sessions"]] == [(2, 0), (1, 0), (1, 1)]
    lists = (("runs", "id", {1: 1, link: 1, both: 2}), ("sessions", "runs", {str(both): 2, "1": 1, str(link): 1}))
    for command, key, expected in lists:
        shown = CliRunner().invoke(cli, [command, "--json", "--db", str(db_path)])
        assert shown.exit_code == 0, shown.output
        assert {row[key]: row["turns"] for row in json.loads(shown.output)} == expected
    table = CliRunner().invoke(cli, ["runs", "--db", str(db_path)], env={"COLUMNS": "160"})
    assert table.exit_code == 0, table.output
    header = next(line for line in table.output.splitlines() if "frames" in line)
    assert "turns" in header.split()


def _renamed(messages: list[tuple[str, Any]], session_id: str) -> list[tuple[str, Any]]:
    return [(d, json.loads(json.dumps(m).replace(S, session_id))) for d, m in messages]


def _chain_sessions(db_path: Path) -> dict[str, int]:
    """Runs whose sessions exist only inside proxy chains, beside ones that are rows: `direct`
    (S, a sessions row), `link` (only envelopes: `sess_in` at hop 1), `deep` (`sess_deep`, only
    at hop 2), `mixed` (its own S, and `sess_mix` in its hop), `both` (S at hop 0 and hop 1)."""
    times = _times(len(v2_turn(CHUNK)))
    direct = _record(db_path, v2_turn(CHUNK), times)
    inner = chained(_renamed(v2_turn(CHUNK), "sess_in"))
    link = _record(db_path, inner, [1, *(t + 10**9 for t in times), times[-1] + 2 * 10**9])
    deep = chained(chained(_renamed(v2_turn(TOOL, CHUNK), "sess_deep")))
    deep_run = _record(db_path, deep, _times(len(deep)))
    mixed = [*v2_turn(CHUNK), *chained(_renamed(v2_turn(TOOL), "sess_mix"))]
    mixed_run = _record(db_path, mixed, _times(len(mixed)))
    return {"direct": direct, "link": link, "deep": deep_run, "mixed": mixed_run, "both": _own_and_chained(db_path)}


def test_a_session_only_a_proxy_chain_carries_is_listed_with_its_hop(tmp_path: Path) -> None:
    from acp_proxy.read import listing

    db_path = tmp_path / "rec.db"
    runs = _chain_sessions(db_path)
    db = store.open_for_reading(db_path)
    listed = listing.sessions(db, None)
    found = {(s["session_id"], s["runs"]): (s["hop"], s["turns"]) for s in listed}
    assert found == {
        (S, str(runs["direct"])): (0, 1),
        ("sess_in", str(runs["link"])): (1, 1),
        ("sess_deep", str(runs["deep"])): (2, 1),
        (S, str(runs["mixed"])): (0, 1),
        ("sess_mix", str(runs["mixed"])): (1, 1),
        (S, str(runs["both"])): (0, 2),  # its hop passes S on: one session, the link's row
    }
    # Every turn `stats` lists is counted once, in one session of the list.
    assert sum(s["turns"] for s in listed) == len(stats(db, "all")["turns"]) == 7
    inner = next(s for s in listed if s["session_id"] == "sess_in")
    assert (inner["cwd"], inner["created_by"]) == ("/w", "session/new") and inner["row_id"] < 0
    assert inner["last_seen_ns"] > inner["first_seen_ns"] > 10**9, "the times of the frames that carried it"
    # The latest seen first; a chain's session among the rows by when it was last seen.
    assert [s["last_seen_ns"] for s in listed] == sorted((s["last_seen_ns"] for s in listed), reverse=True)
    assert listed[0]["session_id"] == "sess_in"
    # Pages: by offset, and by key (as the inspector hands the last one's back), with the total.
    assert [listing.sessions(db, 2, n) for n in (0, 2, 4)] == [listed[0:2], listed[2:4], listed[4:6]]
    assert listing.sessions_page(db, 2, 4) == (listed[4:6], 6) and listing.session_count(db) == 6
    walked, key = [], None
    for _ in listed:  # a page a session: a key that named no place would start over, for ever
        page, more = listing.sessions_before(db, key, 1)
        walked += page
        if not more:
            break
        key = listing.session_key(f"{page[-1]['last_seen_ns'] or 0}:{page[-1]['row_id']}")
    assert walked == listed
    assert listing.session_key("5:-7") == (5, -7) and listing.session_key("5:--7") is None
    # The inspector's connections give sqlite3.Row rows: the same list.
    rows_db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    rows_db.row_factory = sqlite3.Row
    assert listing.sessions(rows_db, None) == listed


def test_the_cli_and_mcp_list_a_chains_session_and_count_a_clients_hop_turns(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from acp_proxy.cli.commands import cli
    from acp_proxy.mcp.tools import Tools
    from acp_proxy.protocol.redact import Redactor
    from acp_proxy.read import listing
    from acp_proxy.web import model

    db_path = tmp_path / "rec.db"
    runs = _chain_sessions(db_path)
    expected = listing.sessions(store.open_for_reading(db_path), None)
    shown = CliRunner().invoke(cli, ["sessions", "--json", "--db", str(db_path)])
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.output) == expected
    for width in (80, 100):
        table = CliRunner().invoke(cli, ["sessions", "--db", str(db_path)], env={"COLUMNS": str(width)})
        assert table.exit_code == 0, table.output
        lines = table.output.splitlines()
        assert all(len(line) <= width for line in lines) and len(lines) == 7
        inner = next(line for line in lines if line.startswith("sess_in "))
        assert f"{runs['link']} (hop 1)" in inner, inner
    # The inspector's index, a page at a time after the last one's key (a chain's is negative).
    keys, after = [], None
    for _ in expected:  # bounded: a key the index could not read would start over, for ever
        index = model.index(store.open_for_reading(db_path), Redactor(), limit=2, sessions_before=after)
        keys += [(s["session_id"], s["hop"], s["runs"]) for s in index["sessions"]]
        if not index["more_sessions"]:
            break
        after = index["sessions"][-1]["key"]
    assert keys == [(s["session_id"], s["hop"], [int(s["runs"])]) for s in expected]
    tools = Tools(db_path, Redactor())
    page = tools.list_sessions(limit=4).model_dump()
    assert page["items"] == expected[:4] and (page["total"], page["next"]) == (6, 4)
    assert tools.list_sessions(limit=0).model_dump()["total"] == 6
    # A client's turns are the sum of its runs' turns as `runs` lists them (hops included); its
    # sessions, those `sessions` lists in its runs. (The links name no client: `?`.)
    listed_runs = json.loads(CliRunner().invoke(cli, ["runs", "-n", "0", "--json", "--db", str(db_path)]).output)
    clients = {c["client"]: c for c in tools.sessions_by_client().model_dump()["items"]}
    assert set(clients) == {"c", "?"}
    for name, client in clients.items():
        mine = [r for r in listed_runs if (r["client_name"] or "?") == name]
        assert client["turns"] == sum(r["turns"] for r in mine) and client["runs"] == len(mine)
    assert clients["?"]["turns"] == 2 and clients["c"]["turns"] == 5
    assert (clients["?"]["sessions"], set(clients["?"]["session_ids"])) == (2, {"sess_in", "sess_deep"})
    assert (clients["c"]["sessions"], set(clients["c"]["session_ids"])) == (4, {S, "sess_mix"})


def _tracking(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The runs ``hops`` tracks from now on, in order, as it tracks them."""
    tracked: list[int] = []
    real = hops._tracked

    def counting(frames: Any, ended: Any) -> Any:
        for run_id, hop, changes in real(frames, ended):
            tracked.append(run_id)
            yield run_id, hop, changes

    monkeypatch.setattr(hops, "_tracked", counting)
    return tracked


def test_a_chains_sessions_are_tracked_again_only_for_a_run_that_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db_path = tmp_path / "rec.db"
    runs = _chain_sessions(db_path)
    tracked = _tracking(monkeypatch)
    first = hops.chain_sessions(store.open_for_reading(db_path))
    assert set(tracked) == {runs["link"], runs["deep"], runs["mixed"], runs["both"]}
    first[0][0]["turns"] = 99  # a caller's change stays its own
    tracked.clear()
    assert hops.chain_sessions(store.open_for_reading(db_path)) == hops.chain_sessions(store.open_for_reading(db_path))
    assert (
        tracked == []
        and first[0][0]["turns"] == 99 != hops.chain_sessions(store.open_for_reading(db_path))[0][0]["turns"]
    )
    # A new chain run is tracked, alone; the answer is what tracking everything gives.
    newest = chained(_renamed(v2_turn(CHUNK), "sess_new"))
    added = _record(db_path, newest, [10**10 + n for n in range(len(newest))])
    again = hops.chain_sessions(store.open_for_reading(db_path))
    assert set(tracked) == {added} and again[0][0]["session_id"] == "sess_new"
    hops._KEPT.clear()
    assert hops.chain_sessions(store.open_for_reading(db_path)) == again


def test_a_chains_turns_are_counted_again_only_for_a_run_that_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lists of runs the inspector polls count each chain's turns once while it is unchanged."""
    db_path = tmp_path / "rec.db"
    runs = _chain_sessions(db_path)
    tracked = _tracking(monkeypatch)
    first = hops.turn_counts(store.open_for_reading(db_path), None)
    assert set(tracked) == {runs["link"], runs["deep"], runs["mixed"], runs["both"]} and first
    tracked.clear()
    listed = listing.runs(store.open_for_reading(db_path), None)
    assert tracked == [] and hops.turn_counts(store.open_for_reading(db_path), None) == first
    assert sum(row["turns"] for row in listed if row["id"] == runs["link"]) >= 1
    # A new chain run is counted, alone; the answer is what counting everything gives.
    newest = chained(_renamed(v2_turn(CHUNK), "sess_new"))
    added = _record(db_path, newest, [10**10 + n for n in range(len(newest))])
    again = hops.turn_counts(store.open_for_reading(db_path), None)
    assert set(tracked) == {added} and again[(added, "sess_new")] == 1
    hops._KEPT.clear()
    assert hops.turn_counts(store.open_for_reading(db_path), None) == again
    assert hops.turn_counts(store.open_for_reading(db_path), [added]) == {(added, "sess_new"): 1}


def test_a_chains_session_is_masked_at_the_doors_that_mask(tmp_path: Path) -> None:
    """Private by default: a secret in a chain-only session's cwd is masked in MCP's list and the
    inspector's index, as a sessions row's is (the CLI, the owner's own terminal, shows it)."""
    from acp_proxy.mcp.tools import Tools
    from acp_proxy.protocol.redact import Redactor
    from acp_proxy.web import model

    token = "ghp_" + "R7kQ2mZx9WpL4vNc8TbY3hJd6FsG1aUe5oXi"  # GitHub's shape: masked by pattern
    db_path = tmp_path / "rec.db"
    inner = json.loads(json.dumps(_renamed(v2_turn(CHUNK), "sess_in")).replace('"/w"', f'"/w/{token}"'))
    link = _record(db_path, chained([(d, m) for d, m in inner]), _times(len(v2_turn(CHUNK)) + 2))
    listed = listing.sessions(store.open_for_reading(db_path), None)
    assert [(s["session_id"], s["hop"], s["cwd"]) for s in listed] == [("sess_in", 1, f"/w/{token}")]
    mcp = json.dumps(Tools(db_path, Redactor()).list_sessions().model_dump())
    index = json.dumps(model.index(store.open_for_reading(db_path), Redactor()))
    for shown in (mcp, index):
        assert token not in shown and "[redacted]" in shown and "sess_in" in shown
    assert str(link) in index
