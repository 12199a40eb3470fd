"""Conformance checks: one crafted trace per rule that breaks exactly that rule, and the same trace
mended that passes; the recorded fixtures pass; schema validation follows the version and side.

Frames are built as the recorder builds them (``wire.decode``) and annotated by a real tracker
before the checker sees them, exactly as in a recording. Nothing here spawns.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from acp_proxy.checks.rules import RULES, Checker, Finding, check
from acp_proxy.protocol import wire
from acp_proxy.protocol.frames import FrameRecord
from acp_proxy.protocol.tracker import Tracker
from tests.conftest import TRAFFIC

S = "sess_1"
Msg = tuple[str, Any]  # (direction, message dict or raw bytes)


def records(trace: list[Msg]) -> list[FrameRecord]:
    tracker = Tracker(1)
    out = []
    for seq, (direction, message) in enumerate(trace, start=1):
        line = message if isinstance(message, bytes) else json.dumps(message).encode()
        rec = FrameRecord(1, seq, seq * 1_000_000, direction, line, wire.decode(line))
        tracker.observe(rec)
        out.append(rec)
    return out


def trace_version(trace: list[Msg]) -> int | None:
    for _direction, message in trace:
        if isinstance(message, dict) and message.get("method") == "initialize":
            return message["params"]["protocolVersion"]
    return None


def findings(trace: list[Msg], **kw: Any) -> list[Finding]:
    return list(check(records(trace), **kw))


def req(i: Any, method: str, params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": i, "method": method, "params": params}


def res(i: Any, result: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": i, "result": result}


def err(i: Any, code: int = -32603, message: str = "failed") -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": i, "error": {"code": code, "message": message}}


def note(method: str, params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": method, "params": params}


def upd(body: dict[str, Any]) -> Msg:
    return ("a2c", note("session/update", {"sessionId": S, "update": body}))


def text(value: str) -> dict[str, str]:
    return {"type": "text", "text": value}


def c2a(message: Any) -> Msg:
    return ("c2a", message)


def a2c(message: Any) -> Msg:
    return ("a2c", message)


# -- v1 --------------------------------------------------------------------------------------------


def v1_start(agent_caps: dict[str, Any] | None = None, client_caps: dict[str, Any] | None = None) -> list[Msg]:
    return [
        c2a(req(0, "initialize", {"protocolVersion": 1, "clientCapabilities": client_caps or {}})),
        a2c(res(0, {"protocolVersion": 1, "agentCapabilities": agent_caps or {}})),
        c2a(req(1, "session/new", {"cwd": "/w", "mcpServers": []})),
        a2c(res(1, {"sessionId": S})),
    ]


PROMPT_V1 = req(2, "session/prompt", {"sessionId": S, "prompt": [text("hi")]})
CHUNK_V1 = upd({"sessionUpdate": "agent_message_chunk", "content": text("hello")})
TOOL_V1 = upd({"sessionUpdate": "tool_call", "toolCallId": "t1", "title": "Read", "kind": "read", "status": "pending"})
TOOL_UPDATE_V1 = upd({"sessionUpdate": "tool_call_update", "toolCallId": "t1", "status": "completed"})
CANCEL_V1 = c2a(note("session/cancel", {"sessionId": S}))
PERMISSION_V1 = a2c(
    req(
        0,
        "session/request_permission",
        {
            "sessionId": S,
            "toolCall": {"toolCallId": "t1"},
            "options": [{"optionId": "allow", "name": "Allow", "kind": "allow_once"}],
        },
    )
)


def v1_turn(*middle: Msg, stop: str = "end_turn") -> list[Msg]:
    return [*v1_start(), c2a(PROMPT_V1), *middle, a2c(res(2, {"stopReason": stop}))]


LOAD = req(3, "session/load", {"sessionId": S, "cwd": "/w", "mcpServers": []})
RESUME = req(3, "session/resume", {"sessionId": S, "cwd": "/w"})
HISTORY_V1 = upd({"sessionUpdate": "user_message_chunk", "content": text("hi")})
READ = a2c(req(7, "fs/read_text_file", {"sessionId": S, "path": "/w/a.py"}))
READ_ANSWER = c2a(res(7, {"content": "x = 1"}))

# -- v2 (the seed document's examples, prompt-lifecycle.md) ---------------------------------------


def v2_start() -> list[Msg]:
    return [
        c2a(
            req(
                0,
                "initialize",
                {"protocolVersion": 2, "info": {"name": "c", "version": "1"}, "capabilities": {}},
            )
        ),
        a2c(res(0, {"protocolVersion": 2, "info": {"name": "a", "version": "1"}, "capabilities": {}})),
        c2a(req(1, "session/new", {"cwd": "/w"})),
        a2c(res(1, {"sessionId": S})),
    ]


def prompt2(i: int = 2, words: str = "hi") -> Msg:
    return c2a(req(i, "session/prompt", {"sessionId": S, "prompt": [text(words)]}))


def accepted(i: int = 2, message_id: Any = "msg_u1") -> Msg:
    return a2c(res(i, {"messageId": message_id}))


def user_message(message_id: str = "msg_u1") -> Msg:
    return upd({"sessionUpdate": "user_message", "messageId": message_id, "content": [text("hi")]})


RUNNING = upd({"sessionUpdate": "state_update", "state": "running"})
AGENT_MESSAGE = upd({"sessionUpdate": "agent_message", "messageId": "msg_a1", "content": [text("ok")]})


def idle(stop: str | None = "end_turn") -> Msg:
    body: dict[str, Any] = {"sessionUpdate": "state_update", "state": "idle"}
    if stop is not None:
        body["stopReason"] = stop
    return upd(body)


def v2_turn(*middle: Msg, stop: str | None = "end_turn", message_id: Any = "msg_u1") -> list[Msg]:
    return [
        *v2_start(),
        prompt2(),
        accepted(message_id=message_id),
        user_message(),
        RUNNING,
        *middle,
        AGENT_MESSAGE,
        idle(stop),
    ]


def compaction(cid: str = "cmp_1", status: str = "in_progress") -> Msg:
    return upd({"sessionUpdate": "compaction_update", "compactionId": cid, "status": status})


def summary_chunk(cid: str = "cmp_1") -> Msg:
    return upd({"sessionUpdate": "compaction_summary_chunk", "compactionId": cid, "content": text("## kept")})


NOTICE = upd({"sessionUpdate": "notice", "severity": "info", "title": "Rate limit at 80%"})
RESUME_V2 = req(5, "session/resume", {"sessionId": S, "cwd": "/w", "replayFrom": {"type": "start"}})
RESUME_V2_NO_REPLAY = req(5, "session/resume", {"sessionId": S, "cwd": "/w"})
PERMISSION_V2 = a2c(
    req(
        0,
        "session/request_permission",
        {
            "sessionId": S,
            "toolCall": {"toolCallId": "call_1"},
            "title": "Read main.py",
            "options": [{"optionId": "allow", "name": "Allow", "kind": "allow_once"}],
        },
    )
)
CANCELLED_OUTCOME = c2a(res(0, {"outcome": {"outcome": "cancelled"}}))
ALLOWED_OUTCOME = c2a(res(0, {"outcome": {"outcome": "selected", "optionId": "allow"}}))
CANCEL_V2 = c2a(note("session/cancel", {"sessionId": S}))
# The v2 marker that ends a replay (RFD v2/session-replay-complete; ReplayComplete in the schema).
REPLAY_DONE = upd({"sessionUpdate": "replay_complete"})


# -- one row per rule: (rule id, trace that breaks exactly it, the same trace mended) -------------

CASES: list[tuple[str, list[Msg], list[Msg]]] = [
    ("jsonrpc/not-json", [*v1_turn(), a2c(b"Loading model...")], v1_turn()),
    ("jsonrpc/unknown-id", [*v1_turn(), a2c(res(99, {}))], v1_turn()),
    (
        "jsonrpc/duplicate-id",
        [
            *v1_start(),
            c2a(PROMPT_V1),
            c2a(req(2, "session/set_mode", {"sessionId": S, "modeId": "a"})),
            a2c(res(2, {"stopReason": "end_turn"})),
            a2c(res(2, {})),
        ],
        [
            *v1_start(),
            c2a(PROMPT_V1),
            c2a(req(3, "session/set_mode", {"sessionId": S, "modeId": "a"})),
            a2c(res(2, {"stopReason": "end_turn"})),
            a2c(res(3, {})),
        ],
    ),
    ("jsonrpc/unanswered", [*v1_start(), c2a(PROMPT_V1)], v1_turn()),
    (
        "ext/method-name",
        [*v1_turn(), c2a(note("vendor/ping", {}))],
        [*v1_turn(), c2a(note("_vendor/ping", {}))],
    ),
    (
        "ext/update-name",
        v1_turn(upd({"sessionUpdate": "progress", "percent": 5})),
        v1_turn(upd({"sessionUpdate": "_progress", "percent": 5})),
    ),
    # v2: the stop reason is an open string (v1's schema enum rejects any other value itself).
    ("ext/stop-reason", v2_turn(stop="too_tired"), v2_turn(stop="_too_tired")),
    ("prompt/message-id", v2_turn(message_id=""), v2_turn()),
    (
        "prompt/user-message",
        [*v2_start(), prompt2(), accepted(), RUNNING, AGENT_MESSAGE, idle()],
        # Either order is allowed: here the update comes before the response.
        [*v2_start(), prompt2(), user_message(), accepted(), RUNNING, AGENT_MESSAGE, idle()],
    ),
    (
        "prompt/distinct-message-id",
        [*v2_turn(), prompt2(3, "again"), accepted(3, "msg_u1"), user_message("msg_u1"), RUNNING, idle()],
        [*v2_turn(), prompt2(3, "again"), accepted(3, "msg_u2"), user_message("msg_u2"), RUNNING, idle()],
    ),
    (
        "turn/running-before-output",
        [*v2_start(), prompt2(), accepted(), user_message(), AGENT_MESSAGE, RUNNING, idle()],
        [*v2_start(), prompt2(), accepted(), user_message(), RUNNING, AGENT_MESSAGE, idle()],
    ),
    ("turn/idle-stop-reason", v2_turn(stop=None), v2_turn()),
    ("turn/unfinished", v2_turn()[:-1], v2_turn()),
    (
        "cancel/stop-reason",
        [*v1_start(), c2a(PROMPT_V1), CHUNK_V1, CANCEL_V1, a2c(err(2, -32603, "aborted"))],
        [*v1_start(), c2a(PROMPT_V1), CHUNK_V1, CANCEL_V1, a2c(res(2, {"stopReason": "cancelled"}))],
    ),
    (
        "cancel/stop-reason-race",
        v2_turn(CANCEL_V2, stop="end_turn"),
        v2_turn(CANCEL_V2, stop="cancelled"),
    ),
    (
        "cancel/permission",
        v2_turn(PERMISSION_V2, CANCEL_V2, ALLOWED_OUTCOME, stop="cancelled"),
        v2_turn(PERMISSION_V2, CANCEL_V2, CANCELLED_OUTCOME, stop="cancelled"),
    ),
    (
        "compaction/order",
        v2_turn(summary_chunk(), compaction(), compaction(status="completed")),
        v2_turn(compaction(), summary_chunk(), compaction(status="completed")),
    ),
    (
        "compaction/terminal",
        v2_turn(compaction(), compaction(status="completed"), compaction(status="failed")),
        v2_turn(compaction(), compaction(status="completed")),
    ),
    (
        "replay/notice",
        [*v2_turn(), c2a(RESUME_V2), user_message(), NOTICE, REPLAY_DONE, a2c(res(5, {}))],
        [*v2_turn(), c2a(RESUME_V2), user_message(), REPLAY_DONE, a2c(res(5, {})), NOTICE],
    ),
    (
        # The marker states the replay's end: a resume answered without it is the older shape.
        "replay/complete-missing",
        [*v2_turn(), c2a(RESUME_V2), user_message(), a2c(res(5, {}))],
        [*v2_turn(), c2a(RESUME_V2), user_message(), REPLAY_DONE, a2c(res(5, {}))],
    ),
    (
        "replay/complete-missing",
        # Even an empty replay ends with the marker.
        [*v2_turn(), c2a(RESUME_V2), a2c(res(5, {}))],
        [*v2_turn(), c2a(RESUME_V2), REPLAY_DONE, a2c(res(5, {}))],
    ),
    (
        "replay/complete-unexpected",
        [*v2_turn(), c2a(RESUME_V2), user_message(), REPLAY_DONE, REPLAY_DONE, a2c(res(5, {}))],
        [*v2_turn(), c2a(RESUME_V2), user_message(), REPLAY_DONE, a2c(res(5, {}))],
    ),
    (
        "replay/complete-unexpected",
        [*v2_turn(), c2a(RESUME_V2_NO_REPLAY), REPLAY_DONE, a2c(res(5, {}))],
        [*v2_turn(), c2a(RESUME_V2_NO_REPLAY), a2c(res(5, {}))],
    ),
    (
        "replay/complete-unexpected",
        [*v2_turn(), c2a(RESUME_V2), user_message(), REPLAY_DONE, a2c(res(5, {})), REPLAY_DONE],
        [*v2_turn(), c2a(RESUME_V2), user_message(), REPLAY_DONE, a2c(res(5, {}))],
    ),
    (
        "replay/truncated",
        [*v2_turn(), c2a(RESUME_V2), user_message(), a2c(err(5))],
        [*v2_turn(), c2a(RESUME_V2), user_message(), REPLAY_DONE, a2c(err(5))],
    ),
    (
        "replay/live-update",
        [*v2_turn(), c2a(RESUME_V2), user_message(), RUNNING, REPLAY_DONE, a2c(res(5, {})), idle()],
        [*v2_turn(), c2a(RESUME_V2), user_message(), REPLAY_DONE, RUNNING, a2c(res(5, {})), idle()],
    ),
    (
        "resume/replay-after-response",
        # v2: the history must come before the answer; a user message after it, before any
        # prompt, is history sent late. (A message id already replayed is history too.)
        [*v2_turn(), c2a(RESUME_V2), REPLAY_DONE, a2c(res(5, {})), user_message()],
        [*v2_turn(), c2a(RESUME_V2), user_message(), REPLAY_DONE, a2c(res(5, {}))],
    ),
    (
        "resume/replay-after-response",
        [*v2_turn(), c2a(RESUME_V2), user_message(), AGENT_MESSAGE, REPLAY_DONE, a2c(res(5, {})), AGENT_MESSAGE],
        [*v2_turn(), c2a(RESUME_V2), user_message(), AGENT_MESSAGE, REPLAY_DONE, a2c(res(5, {}))],
    ),
    (
        "resume/replayed",
        # v2: without replayFrom the agent must not replay the history.
        [*v2_turn(), c2a(RESUME_V2_NO_REPLAY), user_message(), a2c(res(5, {}))],
        [*v2_turn(), c2a(RESUME_V2_NO_REPLAY), a2c(res(5, {}))],
    ),
    (
        "schema/params",
        # The proxy-chain methods are validated against their own schema types.
        [*v1_start(), c2a(req(9, "proxy/initialize", 42)), a2c(res(9, {"protocolVersion": 1}))],
        [
            *v1_start(),
            c2a(req(9, "proxy/initialize", {"protocolVersion": 1, "clientCapabilities": {}})),
            a2c(res(9, {"protocolVersion": 1})),
        ],
    ),
    (
        "schema/params",
        [*v1_start(), a2c(note("proxy/successor", 42))],
        [*v1_start(), a2c(note("proxy/successor", {"method": "_vendor/hello", "params": {}}))],
    ),
    (
        "load/replay-after-response",
        [*v1_start({"loadSession": True}), c2a(LOAD), a2c(res(3, {})), HISTORY_V1],
        [*v1_start({"loadSession": True}), c2a(LOAD), HISTORY_V1, a2c(res(3, {}))],
    ),
    (
        "resume/replayed",
        [*v1_start({"sessionCapabilities": {"resume": {}}}), c2a(RESUME), HISTORY_V1, a2c(res(3, {}))],
        [*v1_start({"sessionCapabilities": {"resume": {}}}), c2a(RESUME), a2c(res(3, {}))],
    ),
    ("tool/unknown-call", v1_turn(TOOL_UPDATE_V1), v1_turn(TOOL_V1, TOOL_UPDATE_V1)),
    (
        "capability/missing",
        [*v1_start(), c2a(LOAD), a2c(res(3, {}))],
        [*v1_start({"loadSession": True}), c2a(LOAD), a2c(res(3, {}))],
    ),
    (
        "capability/missing",
        [*v1_start(client_caps={"fs": {"readTextFile": False}}), READ, READ_ANSWER],
        [*v1_start(client_caps={"fs": {"readTextFile": True}}), READ, READ_ANSWER],
    ),
    (
        "capability/missing",
        [
            *v1_start(),
            a2c(req(8, "terminal/create", {"sessionId": S, "command": "ls"})),
            c2a(res(8, {"terminalId": "term_1"})),
        ],
        [
            *v1_start(client_caps={"terminal": True}),
            a2c(req(8, "terminal/create", {"sessionId": S, "command": "ls"})),
            c2a(res(8, {"terminalId": "term_1"})),
        ],
    ),
    (
        "schema/params",
        [
            *v1_start(),
            c2a(req(2, "session/prompt", {"sessionId": S, "prompt": "hi"})),
            a2c(res(2, {"stopReason": "end_turn"})),
        ],
        v1_turn(),
    ),
    (
        "schema/result",
        [*v1_start()[:3], a2c(res(1, {"sessionId": 7}))],
        [*v1_start()[:3], a2c(res(1, {"sessionId": "7"}))],
    ),
    (
        "schema/update",
        v1_turn(upd({"sessionUpdate": "agent_message_chunk", "content": {"type": "text"}})),
        v1_turn(CHUNK_V1),
    ),
]


@pytest.mark.parametrize(("rule_id", "broken", "mended"), CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_rule_broken_and_mended(rule_id: str, broken: list[Msg], mended: list[Msg]) -> None:
    found = findings(broken)
    assert {f.rule_id for f in found} == {rule_id}, [f.message for f in found]
    finding = found[0]
    rule = RULES[rule_id]
    assert finding.severity == rule.severity
    # The reference is the negotiated version's document (schema findings name the $defs type).
    assert finding.spec.startswith(rule.spec_for(trace_version(broken)))
    assert finding.run_id == 1 and isinstance(finding.seq, int) and 1 <= finding.seq <= len(broken)
    assert "\n" not in finding.message
    assert findings(mended) == []


# Rules whose case is a test of its own (the finding's version is not the trace's; batches are
# recorded as batch lines then elements; a batch over HTTP is in test_batch_http.py).
OWN_TESTS = {"version/newer", "batch/rejected", "batch/ignored", "batch/http-501"}


def test_every_rule_has_a_case() -> None:
    assert {c[0] for c in CASES} | OWN_TESTS == set(RULES)


def test_schema_finding_names_the_json_path() -> None:
    [finding] = findings(v1_turn(upd({"sessionUpdate": "agent_message_chunk", "content": {"type": "text"}})))
    assert "$" in finding.message and "text" in finding.message
    [finding] = findings([*v1_start()[:3], a2c(res(1, {"sessionId": 7}))])
    assert "$.sessionId" in finding.message


def test_schema_version_comes_from_initialize() -> None:
    # `info`/`capabilities` in initialize are v2 names; v1 calls them clientInfo/clientCapabilities
    # and its initialize result requires none of v2's shape. The same v2 turn is clean as v2 and,
    # announced as v1, its v2-only prompt response fails v1's PromptResponse (stopReason required).
    assert findings(v2_turn()) == []
    as_v1 = [
        (d, json.loads(json.dumps(m).replace('"protocolVersion": 2', '"protocolVersion": 1'))) for d, m in v2_turn()
    ]
    rules = {f.rule_id for f in findings(as_v1)}
    assert "schema/result" in rules


def test_schema_branch_follows_direction() -> None:
    # A request the client may not send: fs/read_text_file travels agent->client only.
    trace = [
        *v1_start(client_caps={"fs": {"readTextFile": True}}),
        c2a(req(7, "fs/read_text_file", {"sessionId": S, "path": "/w/a.py"})),
        a2c(res(7, {"content": ""})),
    ]
    messages = [f.message for f in findings(trace)]
    # Sent the wrong way, it has no params type on that side: nothing claims to validate it, and
    # its result is not checked against the client's ReadTextFileResponse.
    assert not any("ReadTextFile" in m for m in messages)
    right_way = [*v1_start(client_caps={"fs": {"readTextFile": True}}), READ, c2a(res(7, {"content": 5}))]
    [finding] = findings(right_way)
    assert finding.rule_id == "schema/result" and "ReadTextFileResponse" in finding.message


def test_rows_as_dicts_give_the_same_findings() -> None:
    broken = v2_turn(compaction(), compaction(status="completed"), compaction(status="failed"))
    recs = records(broken)
    rows = []
    for rec in recs:
        row = rec.as_dict()
        row["raw"] = rec.line.decode()
        rows.append(row)
    assert list(check(rows)) == list(check(recs))


def test_proxy_injected_garbage_is_info() -> None:
    recs = records([*v1_turn(), a2c(b"{not json")])
    recs[-1].fault = "corrupt"
    [finding] = check(recs)
    assert finding.rule_id == "jsonrpc/not-json" and finding.severity == "info"


def test_a_run_still_going_has_no_unanswered_requests() -> None:
    recs = records([*v1_start(), c2a(PROMPT_V1)])
    assert list(check(recs, ended={1: False})) == []


def test_checker_never_raises_on_odd_frames() -> None:
    checker = Checker()
    odd = [
        a2c(b"[]"),
        a2c(b"{}"),
        a2c(note("session/update", {"update": 5})),
        a2c(res(None, None)),
        c2a(req(1, "session/prompt", None)),
        a2c(b"\xff\xfe"),
    ]
    for rec in records(odd):
        checker.feed(rec)
    checker.finish()


@pytest.mark.parametrize("path", sorted(TRAFFIC.glob("*.jsonl")), ids=lambda p: p.name)
def test_recorded_fixtures_have_no_findings(path: Path) -> None:
    trace = []
    for line in path.read_text().splitlines():
        item = json.loads(line)
        trace.append((item["dir"], item["frame"].encode()))
    # The traffic is real SDK-to-SDK conversations (protocol version 1): clean, warnings included.
    assert findings(trace) == []


def test_seed_document_v2_traffic_has_only_its_deliberate_findings() -> None:
    from tests import v2_traffic as v2

    trace = [
        c2a(v2.INITIALIZE),
        a2c(v2.AGENT_SCRIPT["on"]["initialize"][0] | {"id": 0}),
        c2a(v2.NEW_SESSION),
        a2c(res(1, {"sessionId": v2.SESSION})),
        c2a(v2.PROMPT),
    ]
    first_turn = v2.AGENT_SCRIPT["on"]["session/prompt"][0]
    trace += [a2c(m | {"id": 2} if m.get("id") == "$id" else m) for m in first_turn]
    trace += [c2a(v2.PERMISSION_ANSWER)] + [a2c(m) for m in v2.AFTER_PERMISSION]
    found = {f.rule_id for f in findings(trace)}
    # The script plants one non-underscore future variant ("future_thing"): a warning, by design.
    assert found == {"ext/update-name"}


# -- discriminated unions: validated by dispatch on their tag, with the same verdicts ---------------

_CONTENTS: list[Any] = [
    {"type": "text", "text": "hi"},
    {"type": "text"},  # no text
    {"type": "text", "text": 3},
    {"type": "image", "data": "AA==", "mimeType": "image/png"},
    {"type": "image", "text": "hi"},
    {"type": "resource_link", "name": "a", "uri": "file:///a"},
    {"type": "resource", "resource": {"uri": "file:///a", "text": "x"}},
    {"type": "resource", "resource": {"uri": "file:///a"}},
    {"type": "video"},
    {"type": 1, "text": "hi"},
    {"type": ["text"], "text": "hi"},
    {"text": "hi"},
    {},
    "text",
    None,
    [{"type": "text", "text": "hi"}],
]


@pytest.mark.parametrize("version", [1, 2])
def test_dispatch_on_the_tag_gives_the_verdicts_of_the_plain_union(version: int) -> None:
    from acp_proxy.checks import schema as checks

    fast = checks.SchemaSet(version, unstable=True)
    plain = checks.SchemaSet(version, unstable=True)
    plain._dispatch_ok = False  # unions validated as written: every member
    # The content block union really is dispatched (else this test would prove nothing).
    assert checks._DISPATCH in json.dumps(fast.validator(fast.variants["agent_message_chunk"]).schema)
    assert checks._DISPATCH not in json.dumps(plain.validator(plain.variants["agent_message_chunk"]).schema)
    updates: list[tuple[str, Any]] = [
        (variant, {"sessionUpdate": variant, "content": content, "messageId": "m1"})
        for variant in ("agent_message_chunk", "user_message_chunk")
        for content in _CONTENTS
    ]
    updates += [
        (
            "tool_call",
            {"sessionUpdate": "tool_call", "toolCallId": "c", "title": "t", "content": [{"type": kind, **extra}]},
        )
        for kind, extra in (
            ("content", {"content": {"type": "text", "text": "x"}}),
            ("content", {"content": {"type": "text"}}),
            ("diff", {"path": "/a", "newText": "x"}),
            ("diff", {"path": "/a"}),
            ("terminal", {"terminalId": "t"}),
            ("nope", {}),
        )
    ]
    assert len(updates) > 30
    for variant, update in updates:
        name = fast.variants.get(variant)
        if name is None:
            continue
        verdict = fast.first_error(name, update) is None
        assert verdict == (plain.first_error(name, update) is None), (variant, update)
    # The verdicts are not all the same, and a bad block names where it went wrong.
    error = fast.first_error(
        fast.variants["agent_message_chunk"],
        {"sessionUpdate": "agent_message_chunk", "content": {"type": "text"}, "messageId": "m"},
    )
    assert error is not None and error.startswith("$.content") and "text" in error
    assert fast.first_error(fast.variants["agent_message_chunk"], updates[0][1]) is None


# -- one finding per fact, the right document, the right severity -----------------------------------


def test_one_broken_message_id_is_one_finding() -> None:
    for answer in ({}, {"messageId": 5}):
        broken = [*v2_start(), prompt2(), a2c(res(2, answer)), user_message(), RUNNING, AGENT_MESSAGE, idle()]
        # The schema says what is wrong with the answer; the lifecycle rule does not say it again.
        assert [f.rule_id for f in findings(broken)] == ["schema/result"]
        # Without the schema, the lifecycle rule is the one that says it.
        assert [f.rule_id for f in findings(broken, schema=False)] == ["prompt/message-id"]
    # The empty string passes the schema: only the lifecycle rule can see it.
    assert [f.rule_id for f in findings(v2_turn(message_id=""))] == ["prompt/message-id"]


def test_each_rule_cites_the_document_of_the_negotiated_version() -> None:
    for rule_id, broken, _mended in CASES:
        version = trace_version(broken)
        for f in findings(broken):
            if f.spec.startswith(("schema/", "http")):
                continue
            if version == 1:
                assert not f.spec.startswith("v2-draft/"), (rule_id, f.spec)
            elif version == 2:
                assert not f.spec.startswith("v1/"), (rule_id, f.spec)
    # v1 cancellation is the v1 prompt turn's section; a v2 update variant the v2 variants' section.
    [cancel] = findings([*v1_start(), c2a(PROMPT_V1), CHUNK_V1, CANCEL_V1, a2c(err(2, -32603, "aborted"))])
    assert cancel.spec == "v1/prompt-turn.mdx#cancellation"
    [variant] = findings(v2_turn(upd({"sessionUpdate": "progress", "percent": 5})))
    assert variant.spec == "v2-draft/extensibility.mdx#enum-and-tagged-union-variants"
    [method] = findings([*v2_turn(), c2a(note("vendor/ping", {}))])
    assert method.spec == "v2-draft/extensibility.mdx#extension-methods"


def test_severities_follow_must_and_should() -> None:
    # SHOULD (NOT) in the documents is a warning; MUST (NOT) is an error.
    shoulds = {r.id for r in RULES.values() if r.severity == "warning"}
    assert shoulds == {
        "jsonrpc/unanswered",
        "ext/method-name",
        "ext/update-name",
        "ext/stop-reason",
        "turn/unfinished",
        "cancel/stop-reason-race",
        "replay/notice",  # "Live-only notice updates ... SHOULD NOT be replayed"
        "replay/truncated",  # a state the RFD names ("is truncated"), not a MUST of its own
        "batch/ignored",  # "The receiver SHOULD respond with an array ..."
        "tool/unknown-call",
    }
    [notice] = findings([*v2_turn(), c2a(RESUME_V2), user_message(), NOTICE, REPLAY_DONE, a2c(res(5, {}))])
    assert (notice.rule_id, notice.severity) == ("replay/notice", "warning")


def test_a_v2_prompt_never_answered_is_one_finding_not_two() -> None:
    found = findings([*v2_start(), prompt2()])
    assert [f.rule_id for f in found] == ["jsonrpc/unanswered"]


# -- many runs: each checked on its own, in processes of their own ---------------------------------


def _frames_with_pid(run_id: int) -> list[dict[str, Any]]:
    """A run's rows (the rule case of that index), and this process's pid in each row's note."""
    import os

    _rule, broken, _mended = CASES[run_id]
    rows = []
    for rec in records(broken):
        rows.append(
            {
                "run_id": run_id,
                "seq": rec.seq,
                "ts_ns": rec.ts_ns,
                "dir": rec.dir,
                "raw": rec.line.decode(),
                "kind": rec.kind,
                "method": rec.method,
                "rpc_id": rec.rpc_id,
                "session_id": rec.session_id,
                "update_kind": rec.update_kind,
                "item_id": rec.item_id,
                "note": os.getpid(),
            }
        )
    return rows


def test_check_runs_in_processes_matches_check_in_order() -> None:
    import os

    from acp_proxy.checks.rules import check_runs

    run_ids = list(range(6))
    expected = list(check(row for r in run_ids for row in _frames_with_pid(r)))
    parallel = list(check_runs(run_ids, _frames_with_pid, jobs=3))
    assert [run.run_id for run in parallel] == run_ids
    assert [f for run in parallel for f in run.findings] == expected
    assert all(run.findings for run in parallel) and sum(run.frames for run in parallel) > 20
    # The runs were read and checked in other processes: each says which.
    readers = {run.findings[0].message.split(": ")[-1].rstrip(")") for run in check_runs([0, 1], _pid_run, jobs=2)}
    assert readers and str(os.getpid()) not in readers
    alone = {run.findings[0].message.split(": ")[-1].rstrip(")") for run in check_runs([0, 1], _pid_run, jobs=1)}
    assert alone == {str(os.getpid())}


def _pid_run(run_id: int) -> list[dict[str, Any]]:
    """One frame that is not JSON-RPC, said to be injected by the process that read it."""
    import os

    return [{"run_id": run_id, "seq": 1, "dir": "a2c", "raw": "x", "kind": "invalid", "fault": str(os.getpid())}]


def test_a_replay_cut_by_the_end_of_the_connection_is_truncated() -> None:
    found = findings([*v2_turn(), c2a(RESUME_V2), user_message()])
    assert [(f.rule_id, f.seq) for f in found] == [("jsonrpc/unanswered", 11), ("replay/truncated", 11)]
    # The marker came: the replay was whole, only the answer is missing.
    found = findings([*v2_turn(), c2a(RESUME_V2), user_message(), REPLAY_DONE])
    assert [f.rule_id for f in found] == ["jsonrpc/unanswered"]


def test_a_v2_resume_ended_by_replay_complete_passes_and_updates_after_it_are_live() -> None:
    trace = [*v2_turn(), c2a(RESUME_V2), user_message(), REPLAY_DONE, RUNNING, a2c(res(5, {})), idle()]
    assert findings(trace) == []
    checker = Checker()
    for rec in records(trace):
        checker.feed(rec)
    assert not checker.state.replaying(S)


def test_agent_initiated_work_passes_and_is_a_turn() -> None:
    # v2 prompt lifecycle: foreground work may be agent-initiated; it needs no prompt request
    # and no user message, and ends with idle like any other.
    trace = [*v2_start(), RUNNING, AGENT_MESSAGE, upd({"sessionUpdate": "state_update", "state": "unknown"}), idle()]
    checker = Checker()
    found = [f for rec in records(trace) for f in checker.feed(rec)] + checker.finish()
    assert found == []
    assert checker.turns == {5: ("ended", "end_turn", 8)}
    # Still foreground work: it must reach idle.
    [unfinished] = findings([*v2_start(), RUNNING, AGENT_MESSAGE])
    assert unfinished.rule_id == "turn/unfinished" and unfinished.message.startswith("agent-initiated work")


def test_without_the_marker_a_state_snapshot_before_the_answer_is_not_a_live_update() -> None:
    # The window is only inferred then: the snapshot that follows a replay falls inside it.
    found = findings([*v2_turn(), c2a(RESUME_V2), user_message(), idle(), a2c(res(5, {}))])
    assert [f.rule_id for f in found] == ["replay/complete-missing"]


def _as_version(trace: list[Msg], version: int) -> list[Msg]:
    out = []
    for direction, message in trace:
        if isinstance(message, dict) and message.get("id") == 0 and "protocolVersion" in str(message):
            message = json.loads(json.dumps(message))
            (message.get("params") or message.get("result"))["protocolVersion"] = version
        out.append((direction, message))
    return out


def test_a_peer_newer_than_our_schemas_is_told_so_once_and_checked_against_the_newest() -> None:
    trace = _as_version(
        [*v2_turn(), c2a(RESUME_V2), user_message(), REPLAY_DONE, a2c(res(5, {})), CANCEL_V2],
        3,
    )
    found = findings(trace)
    assert [(f.rule_id, f.severity, f.seq) for f in found] == [("version/newer", "info", 2)]
    assert "version 3" in found[0].message and "v2" in found[0].message
    assert found[0].spec == RULES["version/newer"].spec_for(2)
    # Checked, not waved through: a broken v2 payload is still found.
    broken = findings(_as_version(v2_turn(upd({"sessionUpdate": "plan_update"})), 3))
    assert {f.rule_id for f in broken} == {"version/newer", "schema/update"}


def test_the_prompt_responses_message_id_rule_follows_the_negotiated_schema(monkeypatch: pytest.MonkeyPatch) -> None:
    trace = v2_turn(message_id=None)
    trace[5] = a2c(res(2, {}))  # an earlier v2 draft's acceptance
    trace.remove(user_message())
    required = findings(trace, schema=False)
    assert [f.rule_id for f in required] == ["prompt/message-id"]
    # A schema whose PromptResponse does not require the id: {} is that draft's answer.
    from acp_proxy.checks import schema as schema_module

    monkeypatch.setattr(schema_module.SchemaSet, "prompt_message_id", False, raising=False)
    for cached in (schema_module.schemas(2, True), schema_module.schemas(2, False)):
        monkeypatch.setattr(cached, "prompt_message_id", False)
    assert findings(trace, schema=False) == []


def _recorded_findings(trace: list[Msg]) -> list[Finding]:
    # Batch lines then their elements, as the recorder stores them (batch_seq on each element).
    from tests.read.test_agreement import record, rows_of

    records, _ = record([(d, m, True) for d, m in trace], ended=True)
    return list(check(rows_of(records)))


BATCH = c2a(
    [
        req(7, "session/list", {}),
        note("session/cancel", {"sessionId": S}),
        req(8, "session/list", {}),
    ]
)
REFUSED = a2c({"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": "Invalid Request"}})


def test_a_batch_refused_with_one_invalid_request_says_why_the_peers_cannot_talk() -> None:
    # The Rust SDK 5.x answers any array with a single -32600 (id null).
    found = _recorded_findings([*v2_start(), BATCH, REFUSED])
    rejected = [f for f in found if f.rule_id == "batch/rejected"]
    assert [(f.severity, f.seq) for f in rejected] == [("error", 9)]
    assert "agent" in rejected[0].message and rejected[0].spec == "v2-draft/transports.mdx#json-rpc-batch-messages"
    assert {f.rule_id for f in found} == {"batch/rejected", "jsonrpc/unanswered"}
    # Answered entry by entry (an array of responses): nothing to say.
    answers = a2c([res(7, {"sessions": []}), res(8, {"sessions": []})])
    assert _recorded_findings([*v2_start(), BATCH, answers]) == []
    # An invalid entry's own -32600 inside the response array is not a refusal of the batch.
    invalid = {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": "x"}}
    partial = a2c([res(7, {"sessions": []}), res(8, {"sessions": []}), invalid])
    assert [f.rule_id for f in _recorded_findings([*v2_start(), BATCH, partial])] == []


def test_a_batch_nobody_answers_is_ignored() -> None:
    found = _recorded_findings([*v2_start(), BATCH])
    ignored = [f for f in found if f.rule_id == "batch/ignored"]
    assert [(f.severity, f.seq) for f in ignored] == [("warning", 5)]
    assert "answered none of the 2 request(s)" in ignored[0].message


# -- proxy chains: the recording is the conductor's link to a proxy component ----------------------


def successor(message: dict[str, Any], outer_id: int | None = None) -> dict[str, Any]:
    """``message`` wrapped in a proxy/successor envelope (RFD proxy-chains, "Message reference")."""
    params = {"method": message["method"], **({"params": message["params"]} if "params" in message else {})}
    envelope: dict[str, Any] = {"jsonrpc": "2.0", "method": "proxy/successor", "params": params}
    if outer_id is not None:
        envelope["id"] = outer_id
    return envelope


def chained(inner: list[Msg]) -> list[Msg]:
    """The conductor's link to a proxy that forwards ``inner`` (a client<->agent conversation)
    to its successor: what the proxy sends (inner c2a) goes out a2c in an envelope, what the
    successor sends (inner a2c) comes in c2a; an inner answer is the envelope's answer."""
    out: list[Msg] = [
        c2a(req(0, "proxy/initialize", {"protocolVersion": 2, "info": {"name": "conductor", "version": "1"}})),
    ]
    ids: dict[tuple[str, Any], int] = {}
    for n, (direction, message) in enumerate(inner, start=100):
        outer = "a2c" if direction == "c2a" else "c2a"
        if "method" in message:
            if "id" in message:
                ids[(direction, message["id"])] = n
            out.append((outer, successor(message, n if "id" in message else None)))
        else:
            answered = ids.pop(("a2c" if direction == "c2a" else "c2a", message["id"]))
            out.append((outer, {**message, "id": answered}))
    out.append(a2c(res(0, {"protocolVersion": 2, "info": {"name": "proxy", "version": "1"}})))
    return out


def test_a_proxy_chains_inner_conversation_is_checked_as_its_own_with_the_hop_shown() -> None:
    assert findings(chained(v2_turn())) == []
    # The inner agent breaks a rule: the outer link is clean, the finding names the hop.
    broken = [*v2_start(), prompt2(), accepted(), user_message(), AGENT_MESSAGE, RUNNING, idle()]
    found = findings(chained(broken))
    assert [f.rule_id for f in found] == ["turn/running-before-output"]
    assert found[0].message.startswith("hop 1: ") and found[0].seq == 1 + broken.index(AGENT_MESSAGE) + 1
    # Envelopes nest: a chain of two proxies.
    twice = findings(chained(chained(broken)))
    assert [f.message.split(":")[0] for f in twice] == ["hop 2"]
    # The inner payloads are validated too.
    bad = findings(chained([*v2_start(), c2a(req(7, "session/list", {"cursor": 5})), a2c(res(7, {"sessions": []}))]))
    assert [(f.rule_id, f.message[:6]) for f in bad] == [("schema/params", "hop 1:")]


def test_running_before_the_user_message_is_the_prompts_work() -> None:
    # StateUpdate: "running may precede user-message insertion, for example during a foreground
    # hook. It is not acknowledgment of insertion."
    trace = [*v2_start(), prompt2(), RUNNING, accepted(), user_message(), AGENT_MESSAGE, idle()]
    checker = Checker()
    found = [f for rec in records(trace) for f in checker.feed(rec)] + checker.finish()
    assert found == []
    assert checker.turns == {5: ("ended", "end_turn", 10)}
