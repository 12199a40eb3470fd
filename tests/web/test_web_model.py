"""The inspector's pure pieces, without Datasette: timeline rows and chunk collapsing, schema
marks, the request guard's decisions, redaction of Datasette's answers, the model's cursor."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from acp_proxy.protocol.redact import Redactor
from acp_proxy.web import guard, known, model, timeline


def frame_row(seq: int, **extra: Any) -> dict[str, Any]:
    row = {"run_id": 1, "seq": seq, "ts_ns": 1_700_000_000_000_000_000 + seq, "dir": "a2c", "kind": "notification"}
    row.update(extra)
    return row


def chunk(seq: int, text: str, item: str | None = None, update: str = "agent_message_chunk") -> dict[str, Any]:
    raw = json.dumps(
        {
            "jsonrpc": "2.0",
            "method": "session/update",
            "params": {
                "sessionId": "s",
                "update": {"sessionUpdate": update, "content": {"type": "text", "text": text}},
            },
        }
    )
    return timeline.timeline_row(
        frame_row(seq, method="session/update", session_id="s", update_kind=update, item_id=item, raw=raw)
    )


# -- timeline -----------------------------------------------------------------------------------


def test_consecutive_chunks_of_one_message_collapse_into_one_item() -> None:
    rows = [
        chunk(1, "Hel"),
        chunk(2, "lo"),
        chunk(3, "think", update="agent_thought_chunk"),
        chunk(4, "a", item="m1"),
        chunk(5, "b", item="m2"),
        timeline.timeline_row(frame_row(6, kind="response", method="session/prompt", raw="{}")),
        chunk(7, "x"),
        chunk(8, "y"),
    ]
    items = timeline.collapse(rows)
    assert [(i["type"], i.get("count")) for i in items] == [
        ("chunks", 2),
        ("frame", None),
        ("frame", None),
        ("frame", None),
        ("frame", None),
        ("chunks", 2),
    ]
    assert items[0]["text"] == "Hello" and [r["seq"] for r in items[0]["rows"]] == [1, 2]
    assert items[-1]["rows"][-1]["seq"] == 8 and items[-1]["last_seq"] == 8


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["a", "b", None]), max_size=30))
def test_collapse_keeps_every_frame_once_in_order(keys: list[str | None]) -> None:
    rows = []
    for seq, key in enumerate(keys, start=1):
        if key is None:
            rows.append(timeline.timeline_row(frame_row(seq, kind="request", method="x", raw="{}")))
        else:
            rows.append(chunk(seq, key, item=key))
    items = timeline.collapse(rows)
    flat = [r["seq"] for i in items for r in (i["rows"] if i["type"] == "chunks" else [i])]
    assert flat == list(range(1, len(keys) + 1))
    for a, b in itertools.pairwise(items):
        assert not (a.get("chunk_key") and a.get("chunk_key") == b.get("chunk_key")), "neighbours would have merged"


def test_timeline_row_flags_latency_error_and_time() -> None:
    row = timeline.timeline_row(
        frame_row(3, kind="error", dir="c2a", latency_ns=2_500_000, error_code=-32601, error_message="nope",
                  replay=1, forwarded=0, unknown="extension", raw="x" * 500),
        faults=[{"action": "drop", "detail": None, "rule": "drop if x"}],
        findings=[{"severity": "error", "rule": "jsonrpc/x", "message": "m", "spec": "s"}],
    )  # fmt: skip
    assert row["latency_ms"] == 2.5 and row["error"] == "-32601 nope"
    assert row["flags"] == ["history", "not forwarded", "unknown:extension"]
    assert row["faults"][0]["action"] == "drop" and row["findings"][0]["rule"] == "jsonrpc/x"
    assert len(row["preview"]) == timeline.PREVIEW_CHARS
    assert row["ts"] == "2023-11-14T22:13:20.000Z"


# -- schema marks -------------------------------------------------------------------------------


def test_marks_name_meta_and_unknown_fields_only() -> None:
    frame = {
        "jsonrpc": "2.0",
        "method": "session/update",
        "params": {
            "sessionId": "s",
            "_meta": {"anything": 1},
            "update": {
                "sessionUpdate": "tool_call",
                "toolCallId": "c",
                "title": "t",
                "kind": "read",
                "typoField": 1,
                "content": [{"type": "content", "content": {"type": "text", "text": "x", "shiny": True}}],
            },
        },
        "extra": 1,
    }
    got = {tuple(m["path"]): m["mark"] for m in known.marks(frame, "notification", "session/update", 1)}
    assert got == {
        ("params", "_meta"): "meta",
        ("params", "update", "typoField"): "unknown",
        ("params", "update", "content", 0, "content", "shiny"): "unknown",
        ("extra",): "unknown",
    }


def test_marks_follow_a_response_by_its_requests_method_and_stay_quiet_when_unsure() -> None:
    response = {"jsonrpc": "2.0", "id": 1, "result": {"stopReason": "end_turn", "_meta": {}, "later": 1}}
    got = {tuple(m["path"]): m["mark"] for m in known.marks(response, "response", "session/prompt")}
    assert got == {("result", "_meta"): "meta", ("result", "later"): "unknown"}
    extension = {"jsonrpc": "2.0", "id": 1, "method": "_x/y", "params": {"free": {"_meta": 1}}}
    assert known.marks(extension, "request", "_x/y") == [{"path": ["params", "free", "_meta"], "mark": "meta"}]
    future = {
        "jsonrpc": "2.0",
        "method": "session/update",
        "params": {"sessionId": "s", "update": {"sessionUpdate": "z"}},
    }
    assert known.marks(future, "notification", "session/update") == []


def test_marks_use_the_negotiated_versions_schema() -> None:
    # A v1 prompt response ends the turn with a stop reason; a v2 one only accepts the prompt.
    v1_answer = {"jsonrpc": "2.0", "id": 1, "result": {"stopReason": "end_turn"}}
    assert known.marks(v1_answer, "response", "session/prompt", 1) == []
    unknown_stop = [{"path": ["result", "stopReason"], "mark": "unknown"}]
    assert known.marks(v1_answer, "response", "session/prompt", 2) == unknown_stop
    v2_answer = {"jsonrpc": "2.0", "id": 1, "result": {"messageId": "m1"}}
    assert known.marks(v2_answer, "response", "session/prompt", 2) == []


# -- the guard ----------------------------------------------------------------------------------

G = guard.Guard(token="tok-1234567890", host="127.0.0.1", port=4000)


def test_guard_decisions() -> None:
    ok = {"host": "127.0.0.1:4000", "authorization": "Bearer tok-1234567890"}
    assert guard.decide(G, "GET", "/", "", ok) is guard.PASS
    assert guard.decide(G, "GET", "/", "", {"host": "127.0.0.1:4000"}).status == 401
    assert guard.decide(G, "GET", "/", "", {**ok, "host": "attacker.example:4000"}).status == 403
    assert guard.decide(G, "GET", "/", "", {**ok, "host": "127.0.0.1"}).status == 403
    cookie = {"host": "localhost:4000", "cookie": "a=b; acp_proxy_token_4000=tok-1234567890"}
    assert guard.decide(G, "GET", "/x", "", cookie) is guard.PASS
    other_port = {"host": "localhost:4000", "cookie": "acp_proxy_token_4001=tok-1234567890"}
    assert guard.decide(G, "GET", "/x", "", other_port).status == 401
    login = guard.decide(G, "GET", "/runs/1", "a=1&token=tok-1234567890", {"host": "[::1]:4000"})
    assert login.status == 303
    assert dict(login.headers)["location"] == "/runs/1?a=1"
    assert guard.decide(G, "GET", "/", "token=wrong", {"host": "[::1]:4000"}).status == 401


def test_an_explicit_host_is_accepted_beside_the_loopback_names() -> None:
    g = guard.Guard(token="tok-1234567890", host="192.0.2.7", port=80)
    assert g.allowed_hosts() == {"localhost:80", "127.0.0.1:80", "[::1]:80", "192.0.2.7:80"}
    assert guard.Guard(token="t" * 10, host="::1", port=5).allowed_hosts() == {"localhost:5", "127.0.0.1:5", "[::1]:5"}


def test_datasette_answers_are_redacted_string_by_string() -> None:
    r = Redactor()
    frame = json.dumps({"params": {"Authorization": "Bearer abcdef123456"}})
    body = json.dumps({"rows": [[1, frame, "sk-proj-" + "x1" * 12]], "ok": True}).encode()
    out = json.loads(guard.redact_body(body, "json", r))
    assert json.loads(out["rows"][0][1]) == {"params": {"Authorization": "[redacted]"}}
    assert out["rows"][0][2] == "[redacted]"
    plain = json.dumps({"rows": [[1, "nothing"]]}).encode()
    assert guard.redact_body(plain, "json", r) is plain
    csv_body = b'seq,raw\r\n1,"{""Cookie"":""sid=1""}"\r\n'
    assert guard.redact_body(csv_body, "csv", r) == b'seq,raw\r\n1,"{""Cookie"":""[redacted]""}"\r\n'


# -- the model ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "cursor"),
    [("3:17", (3, 17)), ("", None), (None, None), ("3", None), ("a:b", None), ("1:" + "9" * 30, None)],
)
def test_cursor(text: str | None, cursor: tuple[int, int] | None) -> None:
    assert model.parse_cursor(text) == cursor
