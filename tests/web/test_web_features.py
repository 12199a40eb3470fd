"""The inspector's feature routes through Datasette's own test client, on a recording made by
the real recorder (the synthetic conversation of every entity kind): the playhead (the fold up
to a frame), the session panel, search over runs and frames, marks (token and CSRF) and the
live-control door's refusals. The browser tests (``test_web_browser_features``) drive the same
routes from the page."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("datasette", reason="the [ui] extra (Datasette) is not installed")

from tests.web_support import AUTH, HOST, SECRETS, SESSION, TOKEN, app, get, get_json, synthetic_db


@pytest.fixture(scope="module")
def ds(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return app(synthetic_db(tmp_path_factory.mktemp("features") / "synthetic.db"))


def post(ds: Any, path: str, body: Any, headers: dict[str, str]) -> Any:
    async def go() -> Any:
        return await ds.client.post(path, headers=headers, content=json.dumps(body).encode())

    return asyncio.run(go())


def csrf(ds: Any) -> str:
    token: str = get_json(ds, "/actions/csrf.json")["csrf"]
    return token


def entities(data: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for c in data["conversations"] for e in c["timeline"]]


# -- the playhead -------------------------------------------------------------------------------


def test_the_playhead_rebuilds_the_conversation_up_to_its_frame(ds: Any) -> None:
    before = get_json(ds, "/runs/1/playhead.json")
    assert before["seq"] is None and before["position"] == 0 and before["next"] == before["first"] == 1
    assert entities(before) == []
    prompt = get_json(ds, "/runs/1/playhead.json?seq=5")
    assert prompt["frame"]["method"] == "session/prompt" and (prompt["previous"], prompt["next"]) == (4, 6)
    said = [e for e in entities(prompt) if e["entity"] == "message"]
    assert [m["role"] for m in said] == ["user"], "nothing the agent said yet"
    assert SECRETS["key"] not in json.dumps(prompt), "the playhead masks as every page does"
    chunks = get_json(ds, "/runs/1/playhead.json?seq=7")
    (agent,) = [e for e in entities(chunks) if e["entity"] == "message" and e["role"] == "agent"]
    assert agent["text"] == "Hello, I will "
    pending = get_json(ds, "/runs/1/playhead.json?seq=9")
    (tool,) = [e for e in entities(pending) if e["entity"] == "tool_call"]
    assert tool["status"] == "pending"
    done = get_json(ds, "/runs/1/playhead.json?seq=12")
    (tool,) = [e for e in entities(done) if e["entity"] == "tool_call"]
    assert tool["status"] == "completed"
    assert not [e for e in entities(done) if e["entity"] == "plan"]
    assert [e for e in entities(get_json(ds, "/runs/1/playhead.json?seq=15")) if e["entity"] == "plan"]
    # Stepping skips stderr lines: they are not frames of the conversation.
    assert get_json(ds, "/runs/1/playhead.json?seq=16")["next"] == 18
    end = get_json(ds, "/runs/1/playhead.json?seq=999")
    assert end["seq"] == end["last"] and end["next"] is None and end["position"] == end["total"]


def test_a_first_visit_folds_a_slice_at_a_time_and_a_state_too_large_is_a_413(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from acp_proxy.read import checkpoints as cp

    monkeypatch.setattr(cp, "BUDGET", 0.0)
    monkeypatch.setattr(cp, "_BATCH", 4)
    monkeypatch.setattr(cp, "EVERY", 2)
    ds = app(synthetic_db(tmp_path / "s.db"))
    first = get_json(ds, "/runs/1/playhead.json?seq=12")
    assert first["folding"] is True and first["seq"] == 12 and 0 < first["position"] < first["total"]
    for _ in range(10):
        answer = get_json(ds, "/runs/1/playhead.json?seq=12")
        if not answer.get("folding"):
            break
        assert answer["position"] > first["position"], "each ask goes on from the last"
    assert answer["seq"] == 12 and answer["position"] == 12 and answer["conversations"]
    monkeypatch.setattr(cp, "MAX_ENTRIES", 1)
    refused = get(app(synthetic_db(tmp_path / "t.db")), "/runs/1/playhead.json?seq=999")
    assert refused.status_code == 413 and refused.json()["ok"] is False
    assert "\n" not in refused.json()["error"] and "entries" in refused.json()["error"]


@pytest.mark.parametrize(("path", "status"), [("/runs/1/playhead.json?seq=x1", 400), ("/runs/9/playhead.json", 404)])
def test_a_bad_playhead_request_is_one_line_and_4xx(ds: Any, path: str, status: int) -> None:
    response = get(ds, path)
    assert response.status_code == status
    assert response.json()["ok"] is False and "\n" not in response.json()["error"]


# -- the session panel --------------------------------------------------------------------------


def test_the_session_panel_says_who_spoke_with_what_capabilities(ds: Any) -> None:
    assert get_json(ds, "/runs/1/sessions.json")["sessions"] == [SESSION]
    panel = get_json(ds, f"/runs/1/sessions/{SESSION}.json")
    assert panel["protocol_version"] == 1
    assert panel["client_info"]["name"] == "web-test-client" and panel["agent_info"]["name"] == "web-test-agent"
    assert panel["client_capabilities"]["fs"] == {"readTextFile": True}
    assert panel["turns"] == 1 and panel["state"] in ("idle", None)
    assert set(panel) >= {"mode", "model", "usage", "agent_capabilities"}
    missing = get(ds, "/runs/1/sessions/nope.json")
    assert missing.status_code == 404 and "nope" in missing.json()["error"]


# -- search -------------------------------------------------------------------------------------


def test_runs_are_found_by_agent_client_status_and_date(ds: Any) -> None:
    assert [r["id"] for r in get_json(ds, "/search/runs.json?agent=TEST-AGENT")["runs"]] == [1]
    assert get_json(ds, "/search/runs.json?client=nobody")["runs"] == []
    assert get_json(ds, "/search/runs.json?status=ended")["total"] in (0, 1)
    assert get_json(ds, "/search/runs.json?since=2000-01-01")["total"] == 1
    assert get_json(ds, "/search/runs.json?until=2000-01-01")["total"] == 0
    assert get_json(ds, "/search/runs.json?since=0001-01-01&until=9999-12-31")["total"] == 1
    for bad in ("status=weird", "since=yesterday"):
        response = get(ds, f"/search/runs.json?{bad}")
        assert response.status_code == 400 and "\n" not in response.json()["error"]


def test_a_frame_filter_over_every_run_links_each_result_to_its_run_and_frame(ds: Any) -> None:
    data = get_json(ds, "/search/frames.json?filter=method:session/prompt")
    assert data["total"] >= 1 and all(r["method"] == "session/prompt" for r in data["rows"])
    assert data["rows"][0]["id"] == "1:5"
    masked = get_json(ds, f"/search/frames.json?filter=text:{SECRETS['key'][:8]}")
    assert masked["total"] == 0, "a filter cannot find a secret the page would mask"
    bad = get_json(ds, "/search/frames.json?filter=kind:nonsense")
    assert bad["filter_error"] and bad["rows"] == []


# -- marks --------------------------------------------------------------------------------------


def test_marking_needs_the_csrf_token_and_writes_what_acp_proxy_mark_writes(ds: Any) -> None:
    path = "/runs/1/frames/5/mark"
    assert post(ds, path, {"marked": True}, AUTH).status_code == 403
    bearer_only = {**AUTH, "x-acp-proxy-csrf": "wrong"}
    assert post(ds, path, {"marked": True}, bearer_only).status_code == 403
    headers = {**AUTH, "x-acp-proxy-csrf": csrf(ds)}
    foreign = post(ds, path, {"marked": True}, {**headers, "origin": "http://evil.example"})
    assert foreign.status_code == 403
    assert post(ds, path, {"marked": True}, {"host": HOST, "x-acp-proxy-csrf": csrf(ds)}).status_code == 401
    done = post(ds, path, {"marked": True, "note": "look here"}, headers)
    assert done.status_code == 200, done.text
    marked = get_json(ds, "/runs/1/frames.json?filter=marked")
    assert [r["id"] for r in marked["rows"]] == ["1:5"] and marked["rows"][0]["mark"] == "look here"
    assert get_json(ds, '/runs/1/frames.json?filter=comment:"look"')["total"] == 1
    assert post(ds, path, {"marked": False}, headers).json()["changed"] is True
    assert get_json(ds, "/runs/1/frames.json?filter=marked")["total"] == 0
    assert post(ds, "/runs/1/frames/999/mark", {"marked": True}, headers).status_code == 404
    assert post(ds, path, {"marked": "yes"}, headers).status_code == 400
    deep = asyncio.run(ds.client.post(path, headers=headers, content=b"[" * 100_000))
    assert deep.status_code == 400 and "JSON object" in deep.json()["error"]
    assert get(ds, path).status_code == 405


def test_the_control_door_refuses_a_run_without_a_control_socket_in_one_line(ds: Any) -> None:
    headers = {**AUTH, "x-acp-proxy-csrf": csrf(ds)}
    response = post(ds, "/runs/1/control", {"op": "held"}, headers)
    assert response.status_code == 409 and "--control" in response.json()["error"]
    assert post(ds, "/runs/1/control", {"op": "shutdown"}, headers).status_code == 400
    for bad in ({"op": "release"}, {"op": "release", "seq": "3"}, {"op": "drop", "seq": True}, {"op": "break"}):
        refused = post(ds, "/runs/1/control", bad, headers)
        assert refused.status_code == 400 and "needs" in refused.json()["error"], bad
    assert post(ds, "/runs/1/control", {"op": "held"}, AUTH).status_code == 403


def test_the_search_page_is_the_inspectors(ds: Any) -> None:
    response = get(ds, "/search")
    assert response.status_code == 200 and 'data-page="search"' in response.text
    assert TOKEN not in response.text


# -- schema and lifecycle marks on demand -------------------------------------------------------


def test_marks_on_frames_are_computed_for_a_run_recorded_without_check(ds: Any) -> None:
    from click.testing import CliRunner

    from acp_proxy.cli.commands import cli

    data = get_json(ds, "/runs/1/checks.json?from=1&to=999")
    assert data["done"] is True and data["checked"] == 20
    found = {(f["seq"], f["rule"]) for f in data["findings"]}
    # The same findings `acp-proxy check` reports for this run.
    db = ds.databases[next(n for n in ds.databases if not n.startswith("_"))].path
    checked = json.loads(CliRunner().invoke(cli, ["check", "--db", db, "--json", "1"]).stdout)
    expected = {(f["seq"], f.get("rule") or f["rule_id"]) for f in checked if f["seq"] is not None}
    assert found == expected and found, found
    some_seq = sorted(found)[0][0]
    window = get_json(ds, f"/runs/1/checks.json?from={some_seq}&to={some_seq}")
    assert {f["seq"] for f in window["findings"]} == {some_seq}
    assert get(ds, "/runs/1/checks.json?from=5").status_code == 400
    assert get(ds, "/runs/9/checks.json?from=1&to=2").status_code == 404


# -- the frame-level diff -----------------------------------------------------------------------


def test_two_runs_compared_frame_by_frame_say_which_fields_changed(tmp_path: Path) -> None:
    from tests.web_support import conversation_traffic, record

    db = tmp_path / "two.db"
    traffic = conversation_traffic()
    record(db, traffic)
    dropped = (b"_vendor/ping", b"Method not found")  # the extension request and its error answer
    changed = [(d, line.replace(b"I will ", b"I shall ")) for d, line in traffic if not any(x in line for x in dropped)]
    record(db, changed)
    data = get_json(app(db), "/diff/1/2/frames.json")
    by_op: dict[str, list[dict[str, Any]]] = {}
    for row in data["rows"]:
        by_op.setdefault(row["op"], []).append(row)
    (chunk,) = by_op["changed"]
    assert (chunk["left"]["seq"], chunk["right"]["seq"]) == (7, 7)
    assert chunk["changes"] == [
        {"path": ["params", "update", "content", "text"], "left": '"I will "', "right": '"I shall "'}
    ]
    assert [(r["left"]["method"], r["left"]["kind"]) for r in by_op["only_left"]] == [
        ("_vendor/ping", "request"),
        ("_vendor/ping", "error"),
    ]
    assert "only_right" not in by_op
    assert data["counts"]["same"] == len(by_op["same"]) > 10
    assert SECRETS["key"] not in json.dumps(data)
    assert get(app(db), "/diff/1/9/frames.json").status_code == 404


def test_the_session_panel_follows_mode_model_and_usage_through_the_session(tmp_path: Path) -> None:
    from acp_proxy.record import journal
    from tests.web_support import _f, _update, record

    c2a, a2c = journal.C2A, journal.A2C
    modes = {"currentModeId": "ask", "availableModes": [{"id": "ask", "name": "Ask"}, {"id": "code", "name": "Code"}]}
    models = {"currentModelId": "small", "availableModels": [{"modelId": "small"}, {"modelId": "large"}]}
    answer = {"protocolVersion": 1, "agentCapabilities": {"loadSession": True}}

    def set_model(rpc_id: int, model: str) -> bytes:
        params = {"sessionId": SESSION, "modelId": model}
        return _f({"jsonrpc": "2.0", "id": rpc_id, "method": "session/set_model", "params": params})

    traffic = [
        (c2a, _f({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}})),
        (a2c, _f({"jsonrpc": "2.0", "id": 0, "result": answer})),
        (c2a, _f({"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": "/w", "mcpServers": []}})),
        (a2c, _f({"jsonrpc": "2.0", "id": 1, "result": {"sessionId": SESSION, "modes": modes, "models": models}})),
        (c2a, set_model(2, "large")),
        (a2c, _f({"jsonrpc": "2.0", "id": 2, "result": {}})),
        (c2a, set_model(3, "nope")),
        (a2c, _f({"jsonrpc": "2.0", "id": 3, "error": {"code": -32602, "message": "no such model"}})),
        (a2c, _update({"sessionUpdate": "current_mode_update", "currentModeId": "code"})),
        (a2c, _update({"sessionUpdate": "usage_update", "used": 1200, "size": 200000})),
    ]
    db = tmp_path / "panel.db"
    record(db, traffic)
    panel = get_json(app(db), f"/runs/1/sessions/{SESSION}.json")
    assert panel["model"] == "large", "an answered set_model changes it, a refused one does not"
    assert panel["mode"] == "code" and panel["modes"] == ["ask", "code"]
    assert panel["agent_capabilities"] == {"loadSession": True}
    assert panel["usage"]["used"] == 1200 and panel["usage"]["size"] == 200000
