"""``acp-proxy mcp`` over the SDK's stdio client on a recording of proxy chains: the sessions only
a chain carries are listed with their hop, and each client's turns are its runs' turns as the
CLI's ``runs`` counts them (a chain's inner turns included), from the same read model."""

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
