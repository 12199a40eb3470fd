"""Every route of the inspector, through Datasette's own test client, on recordings made by the
real recorder (a synthetic conversation with planted secrets) and by the official SDK pair; the
lock (token, Host header, read-only); redaction of Datasette's own pages; the metadata."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("datasette", reason="the [ui] extra (Datasette) is not installed")

from acp_proxy.cli.views import session_label
from tests.web_support import AUTH, HOST, SECRETS, SESSION, TOKEN, app, get, get_json, holds_secret, synthetic_db


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return synthetic_db(tmp_path_factory.mktemp("web") / "synthetic.db")


@pytest.fixture(scope="module")
def ds(synthetic: Path) -> Any:
    return app(synthetic)


def entities(page: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for c in page["conversations"] for e in c["timeline"]]


# -- pages and their JSON twins -----------------------------------------------------------------


def test_index_json_lists_runs_and_sessions_newest_first(sdk_recording: tuple[Path, str]) -> None:
    db, session = sdk_recording
    data = get_json(app(db), "/.json")
    assert data["ok"] is True
    assert [r["id"] for r in data["runs"]] == [2, 1]
    assert data["runs"][0]["agent"] == "acp-proxy-sdk-agent 0.1.0"
    assert data["runs"][0]["started"].endswith("Z") and "T" in data["runs"][0]["started"]
    assert [s["session_id"] for s in data["sessions"]] == [session]
    assert data["sessions"][0]["runs"] == [1, 2]
    assert data["running"] == 0 and data["redacted"] is True


def test_a_database_whose_name_holds_uri_characters_is_the_file_it_names(tmp_path: Path) -> None:
    # Datasette puts a path into an SQLite URI as it is; "q#x.db" would open (and create) "q".
    for name in ("q#x.db", "q?mode=rwc.db", "q%41.db"):
        where = tmp_path / name.replace("#", "_h").replace("?", "_q").replace("%", "_p")
        where.mkdir()
        db = synthetic_db(where / name)
        data = get_json(app(db), "/.json")
        assert data["ok"] is True and data["runs"], name
        assert sorted(p.name for p in where.iterdir() if not p.name.startswith(name)) == [], name


def test_index_html_is_the_inspector_page(ds: Any) -> None:
    response = get(ds, "/")
    assert response.status_code == 200
    assert 'data-page="index"' in response.text
    assert "default-src 'self'" in response.headers["content-security-policy"]


def test_run_json_holds_the_conversation_the_timeline_and_the_charts(ds: Any) -> None:
    data = get_json(ds, "/runs/1.json")
    assert data["ref"] == {"kind": "run", "id": 1, "describe": "run 1"}
    kinds = [e["entity"] for e in entities(data)]
    assert {"message", "tool_call", "permission", "plan", "terminal", "call"} <= set(kinds), kinds
    # Set-up requests (initialize, session/new) are calls too; the extension request is the one that failed.
    (call,) = [e for e in entities(data) if e["entity"] == "call" and e["method"] == "_vendor/ping"]
    assert call["error"]["code"] == -32601
    (terminal,) = [e for e in entities(data) if e["entity"] == "terminal"]
    assert terminal["command"] == "make" and terminal["terminal_id"] == "term_1"
    agent = [e for e in entities(data) if e["entity"] == "message" and e["role"] == "agent"]
    assert agent[0]["text"] == "Hello, I will edit a file."
    (tool,) = [e for e in entities(data) if e["entity"] == "tool_call"]
    assert tool["status"] == "completed" and "-print(1)" in tool["text"] and "+print(2)" in tool["text"]
    (permission,) = [e for e in entities(data) if e["entity"] == "permission"]
    assert permission["option_id"] == "allow"
    # The timeline: one item per frame, the three chunks of one message collapsed into one.
    items = data["timeline"]
    chunks = [i for i in items if i["type"] == "chunks"]
    assert len(chunks) == 1 and chunks[0]["count"] == 3 and chunks[0]["text"] == "Hello, I will edit a file."
    assert [r["seq"] for r in chunks[0]["rows"]] == [6, 7, 8]
    assert sum(i.get("count", 1) for i in items) == data["frames_total"] == data["shown"]
    dirs = {i["dir"] for i in items}
    assert dirs == {"c2a", "a2c", "stderr"}
    prompt_response = next(i for i in items if i["method"] == "session/prompt" and i["kind"] == "response")
    assert prompt_response["latency_ms"] > 0
    error = next(i for i in items if i["kind"] == "error")
    assert error["error"] == "-32601 Method not found"
    # Pictures: the turn, its tool call and permission wait; latencies per method.
    lanes = {(w["kind"], w["lane"]) for w in data["waterfall"]}
    assert {("turn", "turn"), ("tool call", "tool Edit main.py"), ("first output", "first output")} <= lanes
    assert any(k == "permission wait" for k, _ in lanes)
    assert {s["method"] for s in data["latency"]} >= {"initialize", "session/prompt", "session/request_permission"}
    assert data["live"] is False and data["runs"][0]["status"] == "ended"


def test_no_planted_secret_reaches_any_json_twin(ds: Any) -> None:
    for path in ("/.json", "/runs/1.json", "/sessions/" + SESSION + ".json", "/diff/1/1.json"):
        text = get(ds, path).text
        assert holds_secret(text) == [], path
    for seq in range(1, 25):
        response = get(ds, f"/runs/1/frames/{seq}.json")
        if response.status_code == 404:
            break
        assert holds_secret(response.text) == [], seq
    frame = get_json(ds, "/runs/1/frames/1.json")
    assert frame["json"]["params"]["_meta"]["proxy"]["headers"] == {"Authorization": "[redacted]", "Accept": "x"}


def test_no_redact_shows_what_was_recorded(synthetic: Path) -> None:
    ds = app(synthetic, no_redact=True)
    text = "".join(get(ds, path).text for path in ("/runs/1.json", "/runs/1/frames/1.json", "/runs/1/frames/13.json"))
    assert set(holds_secret(text)) == set(SECRETS)
    assert get_json(ds, "/.json")["redacted"] is False


def test_user_rules_mask_more(synthetic: Path) -> None:
    frame = get_json(app(synthetic, rules=["params.clientInfo.name"]), "/runs/1/frames/1.json")
    assert frame["json"]["params"]["clientInfo"] == {"name": "[redacted]", "version": "1"}


def test_session_json_spans_its_runs(sdk_recording: tuple[Path, str]) -> None:
    db, session = sdk_recording
    data = get_json(app(db), f"/sessions/{session}.json")
    assert data["ref"]["kind"] == "session" and data["run_ids"] == [1, 2]
    (conv,) = data["conversations"]
    assert conv["session_id"] == session
    texts = [e.get("text") for e in conv["timeline"] if e["entity"] == "message" and e["role"] == "agent"]
    assert "Client sent:hello world" in texts
    replayed = [e for e in conv["timeline"] if e["replay"]]
    assert replayed, "the load's history is marked"
    assert all(item["run_id"] in (1, 2) for item in data["timeline"])
    prefix = get_json(app(db), f"/sessions/{session_label(session, 8)}.json")
    assert prefix["ref"]["id"] == session
    requests = get_json(app(db), f"/sessions/{session}.json?parts=timeline&filter=kind:request%20dir:c2a")
    # session/new names no session yet: a session's frames start with what carries its id.
    assert [(i["run_id"], i["method"]) for i in requests["timeline"]] == [
        (1, "session/prompt"),
        (2, "session/load"),
        (2, "session/prompt"),
    ]


def test_the_filter_narrows_the_timeline_server_side(ds: Any) -> None:
    data = get_json(ds, "/runs/1.json?parts=timeline&filter=dir:c2a%20kind:request")
    assert [i["method"] for i in data["timeline"]] == ["initialize", "session/new", "session/prompt", "_vendor/ping"]
    assert data["filter_error"] is None
    bad = get_json(ds, "/runs/1.json?parts=timeline&filter=kind:nonsense")
    assert bad["timeline"] == [] and bad["filter_error"] and "\n" not in bad["filter_error"]
    assert "nonsense" in bad["filter_error"]


def test_after_a_cursor_only_later_frames_come(ds: Any) -> None:
    data = get_json(ds, "/runs/1.json?parts=timeline&after=1:17")
    assert [i["seq"] for i in data["timeline"]] == [18, 19, 20]
    assert data["cursor"] == "1:20"
    assert get_json(ds, "/runs/1.json?parts=timeline&after=1:20")["timeline"] == []
    assert "conversations" not in data and "waterfall" not in data


def test_frame_json_marks_meta_and_fields_the_schema_does_not_know(ds: Any) -> None:
    frame = get_json(ds, "/runs/1/frames/1.json")
    assert frame["raw"].startswith('{"jsonrpc":"2.0","id":0,"method":"initialize"')
    marks = {tuple(m["path"]): m["mark"] for m in frame["marks"]}
    assert marks == {("params", "_meta"): "meta", ("params", "clientCapabilities", "bogusCapability"): "unknown"}
    stderr = get_json(ds, "/runs/1/frames/17.json")
    assert stderr["row"]["dir"] == "stderr" and stderr["json"] is None and "[redacted]" in stderr["raw"]


def test_diff_json_is_diffs_answer(sdk_recording: tuple[Path, str]) -> None:
    db, _ = sdk_recording
    data = get_json(app(db), "/diff/1/2.json")
    assert data["left"]["describe"] == "run 1" and data["right"]["describe"] == "run 2"
    assert data["differ"] is True
    assert data["turns"][0]["differs"] == ["prompt", "agent"]
    assert data["turns"][0]["left"]["prompt"] == "hello world" and data["turns"][0]["right"]["prompt"] == "again"
    same = get_json(app(db), "/diff/1/1.json")
    assert same["differ"] is False


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/runs/99.json", "no run 99"),
        ("/sessions/nope.json", "no session matches 'nope'"),
        ("/runs/1/frames/999.json", "no frame 1:999"),
        ("/diff/1/77.json", "no run 77"),
    ],
)
def test_what_is_not_there_is_a_404_with_one_line(ds: Any, path: str, message: str) -> None:
    response = get(ds, path)
    assert response.status_code == 404
    assert response.json() == {"ok": False, "error": response.json()["error"]}
    assert message in response.json()["error"]


@pytest.mark.parametrize("path", ["/runs/1", f"/sessions/{SESSION}", "/diff/1/1"])
def test_html_pages_render(ds: Any, path: str) -> None:
    response = get(ds, path)
    assert response.status_code == 200 and "<main>" in response.text


# -- the lock -----------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/", "/.json", "/runs/1.json", "/synthetic/frames.json", "/-/acp-proxy/app.js"])
def test_no_token_is_refused(ds: Any, path: str) -> None:
    response = get(ds, path, headers={"host": HOST})
    assert response.status_code == 401
    assert "token" in response.text


def test_a_wrong_token_is_refused(ds: Any) -> None:
    assert get(ds, "/.json", headers={"host": HOST, "authorization": "Bearer nope-nope-nope"}).status_code == 401
    assert get(ds, "/?token=nope-nope-nope", headers={"host": HOST}).status_code == 401
    cookie = {"host": HOST, "cookie": "acp_proxy_token_8799=nope-nope"}
    assert get(ds, "/.json", headers=cookie).status_code == 401


@pytest.mark.parametrize("host", ["evil.example:8799", "127.0.0.1:9999", "localhost", "", "127.0.0.1.nip.io:8799"])
def test_a_foreign_host_header_is_refused_even_with_the_token(ds: Any, host: str) -> None:
    response = get(ds, "/.json", headers={**AUTH, "host": host})
    assert response.status_code == 403
    assert "DNS rebinding" in response.text


@pytest.mark.parametrize("host", ["127.0.0.1:8799", "localhost:8799", "[::1]:8799", "LOCALHOST:8799"])
def test_loopback_names_are_accepted(ds: Any, host: str) -> None:
    assert get(ds, "/.json", headers={**AUTH, "host": host}).status_code == 200


def test_the_token_is_taken_once_then_a_strict_http_only_cookie(ds: Any) -> None:
    response = get(ds, f"/runs/1?token={TOKEN}&filter=dir:a2c", headers={"host": HOST})
    assert response.status_code == 303
    assert response.headers["location"] == "/runs/1?filter=dir%3Aa2c"
    cookie = response.headers["set-cookie"]
    assert cookie.startswith(f"acp_proxy_token_8799={TOKEN};")
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    with_cookie = get(ds, "/runs/1.json", headers={"host": HOST, "cookie": f"acp_proxy_token_8799={TOKEN}"})
    assert with_cookie.status_code == 200


def test_responses_are_not_cached_or_framed(ds: Any) -> None:
    for path in ("/.json", "/synthetic/runs.json", "/-/acp-proxy/app.css"):
        headers = get(ds, path).headers
        assert headers["cache-control"] == "no-store"
        assert headers["x-frame-options"] == "DENY"


def test_a_write_through_datasette_sql_is_refused(ds: Any, synthetic: Path) -> None:
    for sql in ("delete from runs", "update runs set status = 'x'", "drop table frames", "pragma user_version = 1"):
        response = get(ds, "/synthetic.json", params={"sql": sql})
        assert response.status_code in (400, 403), (sql, response.status_code)
    # PRAGMA query_only closes the door even for code that does not check the statement first.
    name = next(iter(n for n in ds.databases if not n.startswith("_")))

    async def write(how: str) -> None:
        db = ds.get_database(name)
        sql = "insert into runs (started_ns, status) values (1, 'x')"
        await (db.execute(sql) if how == "read" else db.execute_write(sql))

    import asyncio

    for how in ("read", "write"):
        # The unqualified name is the masking view (a view cannot be written); main's table is
        # behind query_only.
        with pytest.raises(sqlite3.OperationalError, match=r"readonly|read-only|query_only|it is a view"):
            asyncio.run(write(how))
    with pytest.raises(sqlite3.OperationalError, match=r"readonly|read-only|query_only"):
        asyncio.run(ds.get_database(name).execute("insert into main.runs (started_ns, status) values (1, 'x')"))
    assert sqlite3.connect(synthetic).execute("select count(*) from runs").fetchone()[0] == 1


# -- Datasette's own pages ----------------------------------------------------------------------


def test_datasette_tables_and_sql_results_are_redacted(ds: Any) -> None:
    for path in (
        "/synthetic/frames.json?_shape=array&_size=max",
        "/synthetic/frames.csv?_size=max",
        "/synthetic/frames?_size=max",
        "/synthetic/frame_timeline.json?_size=max",
        "/synthetic.json?sql=select+raw+from+frames",
        "/synthetic.csv?sql=select+raw+from+frames",
    ):
        response = get(ds, path)
        assert response.status_code == 200, path
        assert holds_secret(response.text) == [], path
        assert "[redacted]" in response.text, path


def test_metadata_describes_tables_and_columns(ds: Any) -> None:
    meta = get_json(ds, "/-/metadata.json")
    tables = meta["databases"]["synthetic"]["tables"]
    assert "verbatim" in tables["frames"]["description"]
    assert tables["frames"]["columns"]["rpc_id"].startswith("the JSON-RPC id")
    page = get(ds, "/synthetic/frames")
    assert "One row per line seen" in page.text
    # Every column of every table says what it means.
    conn = sqlite3.connect(f"file:{ds.databases['synthetic'].path}?mode=ro", uri=True)
    try:
        for table in ("runs", "frames", "sessions", "session_runs", "turns", "faults", "findings"):
            columns = [row[1] for row in conn.execute(f"pragma table_info({table})")]
            described = tables[table].get("columns", {})
            assert [c for c in columns if c not in described] == [], table
    finally:
        conn.close()


def test_the_readable_views_are_ordered_with_iso_times(synthetic: Path) -> None:
    conn = sqlite3.connect(synthetic)
    conn.row_factory = sqlite3.Row
    rows = [dict(r) for r in conn.execute("select * from conversation")]
    assert [r["seq"] for r in rows] == sorted(r["seq"] for r in rows)
    assert rows[0]["ts"].endswith("Z") and rows[0]["ts"][:4].isdigit()
    run = dict(conn.execute("select * from run_overview").fetchone())
    assert run["started"] and run["duration_s"] > 0
    for table in ("frames", "faults", "findings", "turns"):
        fks = conn.execute(f"pragma foreign_key_list({table})").fetchall()
        assert [(fk[2], fk[3], fk[4]) for fk in fks] == [("runs", "run_id", "id")], table


def test_datasette_links_frames_to_their_run(ds: Any) -> None:
    data = get_json(ds, "/synthetic/frames.json?_size=1&_labels=on")
    assert json.dumps(data["rows"][0]).count('"run_id"') >= 1
    page = get(ds, "/synthetic/frames?_size=1").text
    assert 'href="/synthetic/runs/1"' in page


def test_faults_and_findings_are_marked_on_their_frames(tmp_path: Path) -> None:
    from acp_proxy.store import database as store

    db = synthetic_db(tmp_path / "marked.db")
    finding = {"run_id": 1, "seq": 19, "rule_id": "jsonrpc/x", "severity": "error", "message": "m", "spec": "s"}
    store.replace_findings(db, [1], [finding])
    with sqlite3.connect(db) as conn:  # as the recorder stores an applied fault
        conn.execute(
            "insert into faults (run_id, seq, ts_ns, rule, action, detail) values (1, 5, 1, 'drop if x', 'drop', '')"
        )
    items = {i["id"]: i for i in get_json(app(db), "/runs/1.json?parts=timeline")["timeline"]}
    assert items["1:19"]["findings"] == [{"severity": "error", "rule": "jsonrpc/x", "message": "m", "spec": "s"}]
    assert items["1:5"]["faults"] == [{"action": "drop", "detail": "", "rule": "drop if x"}]
    assert get_json(app(db), "/runs/1.json?parts=timeline&filter=finding:error")["shown"] == 1


def test_plain_datasette_serves_the_same_pages_through_the_entry_point(synthetic: Path) -> None:
    import asyncio

    from datasette.app import Datasette
    from datasette.plugins import get_plugins

    assert any(p["name"] == "acp-proxy" for p in get_plugins())
    plain = Datasette(files=[str(synthetic)])  # no token: that is `acp-proxy ui`'s own lock

    async def go() -> Any:
        return await plain.client.get("/runs/1.json")

    data = asyncio.run(go()).json()
    assert data["ok"] is True and data["redacted"] is True
    assert holds_secret(json.dumps(data)) == []


# -- a v2 turn: acceptance, thoughts, usage, a notice and a compaction on the page ---------------


def v2_traffic() -> list[tuple[int, bytes]]:
    from acp_proxy.record import journal

    def f(obj: dict[str, Any]) -> bytes:
        return json.dumps(obj, separators=(",", ":")).encode() + b"\n"

    def update(body: dict[str, Any]) -> bytes:
        return f({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s2", "update": body}})

    c2a, a2c = journal.C2A, journal.A2C
    text = {"type": "text"}
    return [
        (c2a, f({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 2}})),
        (a2c, f({"jsonrpc": "2.0", "id": 0, "result": {"protocolVersion": 2, "info": {"name": "a", "version": "2"}}})),
        (c2a, f({"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": "/w"}})),
        (a2c, f({"jsonrpc": "2.0", "id": 1, "result": {"sessionId": "s2"}})),
        (c2a, f({"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": {"sessionId": "s2", "prompt": []}})),
        (a2c, f({"jsonrpc": "2.0", "id": 2, "result": {"messageId": "u1"}})),
        (a2c, update({"sessionUpdate": "state_update", "state": "running"})),
        (
            a2c,
            update({"sessionUpdate": "agent_thought_chunk", "messageId": "t1", "content": {**text, "text": "Ponder"}}),
        ),
        (
            a2c,
            update({"sessionUpdate": "agent_message_chunk", "messageId": "a1", "content": {**text, "text": "Done."}}),
        ),
        (a2c, update({"sessionUpdate": "usage_update", "used": 1200, "size": 200000})),
        (a2c, update({"sessionUpdate": "notice", "severity": "warning", "title": "Rate limit at 80%"})),
        (a2c, update({"sessionUpdate": "compaction_update", "compactionId": "c1", "status": "completed"})),
        (a2c, update({"sessionUpdate": "state_update", "state": "idle", "stopReason": "end_turn"})),
    ]


def test_a_v2_turn_shows_thoughts_usage_notices_compaction_and_its_acceptance(tmp_path: Path) -> None:
    from tests.web_support import record

    db = tmp_path / "v2.db"
    record(db, v2_traffic())
    data = get_json(app(db), "/runs/1.json")
    timeline = entities(data)
    by_kind = {(e["entity"], e.get("role") or e.get("variant")): e for e in timeline}
    assert by_kind["message", "thought"]["text"] == "Ponder"
    assert by_kind["message", "agent"]["text"] == "Done."
    notice = by_kind["notice", None]
    assert (notice["severity"], notice["title"], notice["live"]) == ("warning", "Rate limit at 80%", True)
    assert by_kind["compaction", None]["status"] == "completed"
    assert by_kind["session_state", "usage_update"]["fields"]["used"] == 1200
    (turn_row,) = [t for c in data["conversations"] for t in c["turns"]]
    assert turn_row["accepted_seq"] == 6  # the prompt's answer (its messageId) accepted the turn
    marks = {w["kind"]: w for w in data["waterfall"]}
    assert marks["acceptance"]["start_ms"] == 2.0  # one frame (2 ms apart) after the prompt
    assert marks["turn"]["detail"] == "end_turn" and marks["turn"]["end_ms"] == 16.0
    assert marks["first output"]["start_ms"] == 6.0  # the thought, two frames after the acceptance
