"""``acp-proxy mcp`` over the SDK's stdio client on a recording of proxy chains: the sessions only
a chain carries are listed with their hop, and each client's turns are its runs' turns as the
CLI's ``runs`` counts them (a chain's inner turns included), from the same read model; such a
session's id is a REF for every tool that takes one (it names the run whose chain carries it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.mcp.test_mcp import cli_stdout, session
from tests.read.test_hops import _chain_sessions


@pytest.mark.spawns
def test_the_mcp_client_sees_a_chains_sessions_and_the_clis_turn_counts(tmp_path: Path) -> None:
    db = tmp_path / "rec.db"
    runs = _chain_sessions(db)
    calls = [("list_sessions", {}), ("sessions_by_client", {}), ("list_runs", {"limit": 0}), ("list_runs", {})]
    _tools, answers = session(db, calls, errlog=tmp_path / "err.txt")
    sessions, clients, no_runs, listed_runs = (answer.json() for answer in answers)
    shown = json.loads(cli_stdout("sessions", "--json", "--db", str(db)))
    assert sessions["items"] == shown and sessions["total"] == len(shown) == 6
    inner = {(s["session_id"], s["runs"]): s["hop"] for s in sessions["items"] if s["hop"]}
    assert inner == {
        ("sess_in", str(runs["link"])): 1,
        ("sess_deep", str(runs["deep"])): 2,
        ("sess_mix", str(runs["mixed"])): 1,
    }
    cli_runs = json.loads(cli_stdout("runs", "-n", "0", "--json", "--db", str(db)))
    assert {r["id"]: r["turns"] for r in listed_runs["items"]} == {r["id"]: r["turns"] for r in cli_runs}
    assert no_runs["total"] == len(cli_runs) == 5
    for client in clients["items"]:
        mine = [r for r in cli_runs if (r["client_name"] or "?") == client["client"]]
        assert client["turns"] == sum(r["turns"] for r in mine) > 0, client
    assert sum(c["turns"] for c in clients["items"]) == 7


def test_mcp_tools_take_a_chains_session_as_a_ref(tmp_path: Path) -> None:
    from acp_proxy.mcp.tools import Tools
    from acp_proxy.protocol.redact import Redactor

    db_path = tmp_path / "rec.db"
    runs = _chain_sessions(db_path)
    link = runs["link"]
    tools = Tools(db_path, Redactor())
    described = f"session sess_in (inside run {link}'s proxy chain, hop 1)"
    shown = tools.show("sess_in").model_dump()
    assert shown["ref"] == described
    assert shown["text"] == tools.show(str(link)).model_dump()["text"]
    assert "Session sess_in  hop 1" in shown["text"]
    stats = tools.stats("sess_i").model_dump()
    assert stats["ref"] == described
    assert [(t["hop"], t["session_id"]) for t in stats["turns"]["items"]] == [(1, "sess_in")]
    assert tools.check("sess_in").model_dump()["checked"] == described
    assert tools.summary("sess_in").model_dump()["runs"] == [link]


@pytest.mark.spawns
def test_the_mcp_client_gives_a_chains_session_id_as_a_ref(tmp_path: Path) -> None:
    db = tmp_path / "rec.db"
    link = _chain_sessions(db)["link"]
    calls = [("show", {"ref": "sess_in"}), ("stats", {"ref": "sess_i"}), ("check", {"ref": "sess_in"})]
    _tools, answers = session(db, calls, errlog=tmp_path / "err.txt")
    shown, stats, checked = (answer.json() for answer in answers)
    described = f"session sess_in (inside run {link}'s proxy chain, hop 1)"
    assert (shown["ref"], stats["ref"], checked["checked"]) == (described,) * 3
    assert shown["text"] == cli_stdout("show", str(link), "--db", str(db))
    assert [(t["hop"], t["session_id"]) for t in stats["turns"]["items"]] == [(1, "sess_in")]
