"""Fold: plans (v1 single plan, v2 by ``planId``), compactions and terminals, rule by rule as
the protocol documents state them.
"""

from __future__ import annotations

from typing import Any

import pytest

from acp_proxy.read.fold import (
    Call,
    Compaction,
    Plan,
    Terminal,
    text_of,
)
from tests.read.fold_support import (
    SID,
    Replay,
    ac,
    b64,
    describe,
    only,
    response,
    run,
    tcu,
    texts,
    txt,
    upd,
)

# ---------------------------------------------------------------------------------------------
# Plans (v1 agent-plan.mdx: replace the single plan; v2 agent-plan.mdx: by planId)


def entries(*names: str) -> list[dict[str, str]]:
    return [{"content": n, "priority": "high", "status": "pending"} for n in names]


def plan_update(plan_id: str, *names: str, **extra: Any) -> dict[str, Any]:
    content = {"type": "items", "planId": plan_id, "entries": entries(*names), **extra}
    return upd({"sessionUpdate": "plan_update", "plan": content})


def test_v1_plan_replaces_the_single_plan() -> None:
    conv = run(
        upd({"sessionUpdate": "plan", "entries": entries("a", "b")}),
        ac(None, "working"),
        upd({"sessionUpdate": "plan", "entries": entries("b")}),
        version=1,
    )
    plan = only(conv, Plan)
    assert (plan.plan_id, plan.plan_type, plan.entries, plan.seq, plan.updated_seq, plan.updates) == (
        None,
        "items",
        entries("b"),
        1,
        3,
        2,
    )
    assert conv.plan is plan


def test_v2_plans_by_id_replace_and_remove() -> None:
    conv = run(
        plan_update("plan-1", "a", "b"),
        plan_update("plan-2", "x"),
        plan_update("plan-1", "c"),
        upd({"sessionUpdate": "plan_removed", "planId": "plan-2"}),
    )
    one, two = conv.plans
    assert (one.plan_id, one.entries, one.removed) == ("plan-1", entries("c"), False)
    assert (two.plan_id, two.entries, two.removed, two.removed_seq) == ("plan-2", entries("x"), True, 4)
    assert conv.plan is one
    # A later update for a removed plan brings it back, in its original place.
    conv = run(plan_update("p", "a"), upd({"sessionUpdate": "plan_removed", "planId": "p"}), plan_update("p", "b"))
    plan = only(conv, Plan)
    assert (plan.removed, plan.entries, plan.seq) == (False, entries("b"), 1)


def test_v2_markdown_file_and_custom_plans() -> None:
    conv = run(
        upd(
            {
                "sessionUpdate": "plan_update",
                "plan": {"type": "markdown", "planId": "m", "content": "## Steps"},
            }
        ),
        upd(
            {
                "sessionUpdate": "plan_update",
                "plan": {"type": "file", "planId": "f", "uri": "file:///tmp/plan.md"},
            }
        ),
        upd({"sessionUpdate": "plan_update", "plan": {"type": "_mine", "planId": "c", "x": 1}}),
        upd({"sessionUpdate": "plan_removed", "planId": "never-seen"}),
    )
    markdown, file, custom, removed = conv.plans
    assert (markdown.plan_type, markdown.markdown) == ("markdown", "## Steps")
    assert (file.plan_type, file.uri) == ("file", "file:///tmp/plan.md")
    assert (custom.plan_type, custom.raw) == ("_mine", {"type": "_mine", "planId": "c", "x": 1})
    assert (removed.plan_id, removed.removed) == ("never-seen", True)
    assert conv.plan is custom


# ---------------------------------------------------------------------------------------------
# Compaction (prompt-lifecycle.md "Session Compaction"; session-compaction RFD)


def cu(status: str, cid: str = "cmp_1", **fields: Any) -> dict[str, Any]:
    return upd({"sessionUpdate": "compaction_update", "compactionId": cid, "status": status, **fields})


def cc(text: str, cid: str = "cmp_1") -> dict[str, Any]:
    return upd({"sessionUpdate": "compaction_summary_chunk", "compactionId": cid, "content": txt(text)})


COMPACTION_RULES = [
    (
        "a completed update omitting summary keeps the streamed chunks",
        [cu("in_progress"), cc("A"), cc("B"), cu("completed")],
        "completed",
        ["A", "B"],
        None,
    ),
    (
        "a concrete summary replaces accumulated chunks",
        [cu("in_progress"), cc("A"), cu("completed", summary=[txt("S")])],
        "completed",
        ["S"],
        None,
    ),
    (
        "chunks after a replacement append to it",
        [cu("in_progress", summary=[txt("S")]), cc("T")],
        "in_progress",
        ["S", "T"],
        None,
    ),
    (
        "summary null clears",
        [cu("in_progress"), cc("A"), cu("cancelled", summary=None)],
        "cancelled",
        [],
        None,
    ),
    (
        "summary [] clears",
        [cu("in_progress"), cc("A"), cu("failed", summary=[], error="boom")],
        "failed",
        [],
        "boom",
    ),
    (
        "error omitted unchanged, null clears",
        [cu("failed", error="boom"), cu("failed"), cu("failed", error=None)],
        "failed",
        [],
        None,
    ),
    ("a terminal status may come first", [cu("completed", summary=[txt("S")])], "completed", ["S"], None),
    ("a first-seen chunk starts in progress", [cc("A")], "in_progress", ["A"], None),
    ("a custom status is kept", [cu("_paused")], "_paused", [], None),
]


@pytest.mark.parametrize(
    ("name", "steps", "status", "summary", "error"), COMPACTION_RULES, ids=[r[0] for r in COMPACTION_RULES]
)
def test_compaction_rules(name: str, steps: list, status: str, summary: list[str], error: str | None) -> None:
    comp = only(run(*steps), Compaction)
    assert (comp.compaction_id, comp.status, texts(comp.summary), comp.error) == (
        "cmp_1",
        status,
        summary,
        error,
    )


def test_compaction_meta_patch_and_chunk_meta() -> None:
    chunk = upd(
        {
            "sessionUpdate": "compaction_summary_chunk",
            "compactionId": "cmp_1",
            "content": txt("A"),
            "_meta": {"c": 1},
        }
    )
    assert only(run(cu("in_progress", _meta={"a": 1}), chunk), Compaction).meta == {"a": 1}
    assert only(run(cu("in_progress", _meta={"a": 1}), cu("completed", _meta=None)), Compaction).meta is None


def test_compaction_is_one_entity_fixed_where_first_seen() -> None:
    conv = run(ac("m1", "before"), cu("in_progress"), ac("m2", "during"), cc("A"), cu("completed"), ac("m3", "after"))
    assert describe(conv) == ["agent:before", "compaction", "agent:during", "agent:after"]
    comp = only(conv, Compaction)
    assert (comp.seq, comp.updated_seq, comp.chunks, comp.updates, comp.text) == (2, 5, 1, 2, "A")


def test_materialised_compaction_replay_replaces_rather_than_duplicates() -> None:
    full = [txt("## Retained context\n\nThe user is updating the ACP schema.")]
    conv = run(
        cu("in_progress"),
        cc("## Retained "),
        cc("context"),
        cu("completed"),
        ac("m1", "later"),
        Replay(cu("completed", summary=full)),
    )
    comp = only(conv, Compaction)
    assert (comp.summary, comp.replay, comp.replayed_seq, comp.seq) == (full, False, 6, 1)
    assert describe(conv)[0] == "compaction"
    # Replay does not reset omitted fields: a materialised entry without summary keeps it.
    conv = run(cu("in_progress"), cc("A"), cu("completed"), Replay(cu("completed")))
    assert texts(only(conv, Compaction).summary) == ["A"]
    # ... and clears only when it says so.
    conv = run(cu("in_progress"), cc("A"), cu("completed"), Replay(cu("completed", summary=None)))
    assert only(conv, Compaction).summary == []


def test_compaction_first_seen_in_replay_is_history() -> None:
    comp = only(run(Replay(cu("completed", summary=[txt("S")]))), Compaction)
    assert (comp.replay, comp.text) == (True, "S")


# ---------------------------------------------------------------------------------------------
# Terminals (v2 tool-calls.mdx "Display-only Terminals"; v1 terminals.mdx)


def tu(tid: str = "term_1", **fields: Any) -> dict[str, Any]:
    return upd({"sessionUpdate": "terminal_update", "terminalId": tid, **fields})


def to(data: str, tid: str = "term_1") -> dict[str, Any]:
    return upd({"sessionUpdate": "terminal_output_chunk", "terminalId": tid, "data": data})


TERMINAL_RULES = [
    (
        "a snapshot then chunks",
        [tu(command="cargo test", output={"data": "cnVubmluZyB0ZXN0cw0K"}), to("cGFzc2VkDQo=")],
        b"running tests\r\npassed\r\n",
    ),
    ("each chunk is decoded on its own (padding)", [to("YQ=="), to("Yg==")], b"ab"),
    ("a chunk may split a UTF-8 sequence", [to(b64(b"caf\xc3")), to(b64(b"\xa9!"))], "café!".encode()),
    ("a snapshot replaces every byte", [to(b64(b"old")), tu(output={"data": b64(b"new")})], b"new"),
    ("chunks append to the snapshot", [tu(output={"data": b64(b"new")}), to(b64(b" more"))], b"new more"),
    ("output omitted leaves the bytes", [to(b64(b"x")), tu(command="ls")], b"x"),
    ("output null clears", [to(b64(b"x")), tu(output=None)], b""),
    ("invalid base64 is counted, not appended", [to(b64(b"ok")), to("not base64!")], b"ok"),
]


@pytest.mark.parametrize(("name", "steps", "expected"), TERMINAL_RULES, ids=[r[0] for r in TERMINAL_RULES])
def test_terminal_output_rules(name: str, steps: list, expected: bytes) -> None:
    term = only(run(*steps), Terminal)
    assert (term.terminal_id, bytes(term.output)) == ("term_1", expected)


def test_terminal_fields_patch() -> None:
    conv = run(
        tu(command="cargo test", cwd="/p", _meta={"a": 1}),
        tu(exitStatus={"exitCode": None, "signal": "SIGTERM"}),
        to("%%%"),
    )
    term = only(conv, Terminal)
    assert (
        term.command,
        term.cwd,
        term.meta,
        term.exited,
        term.exit_status["signal"],
        term.decode_errors,
        term.chunks,
    ) == (
        "cargo test",
        "/p",
        {"a": 1},
        True,
        "SIGTERM",
        1,
        1,
    )
    term = only(run(tu(command="x", exitStatus={"exitCode": 0}), tu(command=None, exitStatus=None)), Terminal)
    assert (term.command, term.exited) == (None, False)
    # The tool call refers to the terminal by id; the terminal's state is looked up on its own.
    conv = run(tcu(content=[{"type": "terminal", "terminalId": "term_1"}]), to(b64(b"hi")))
    assert conv.terminal("term_1").text == "hi"  # type: ignore[union-attr]
    assert text_of(conv.tool_call("call_1").content) == "<terminal term_1>"  # type: ignore[union-attr]


def test_v1_client_terminal_calls() -> None:
    def req(rid: int, method: str, **params: Any) -> tuple[str, dict]:
        return (
            "a2c",
            {"jsonrpc": "2.0", "id": rid, "method": method, "params": {"sessionId": SID, **params}},
        )

    conv = run(
        req(5, "terminal/create", command="npm", args=["test"], cwd="/p"),
        response(5, {"terminalId": "term_xyz"}, direction="c2a"),
        req(6, "terminal/output", terminalId="term_xyz"),
        response(6, {"output": "Running tests...\n✓ All passed\n", "truncated": False}, direction="c2a"),
        req(7, "terminal/wait_for_exit", terminalId="term_xyz"),
        response(7, {"exitCode": 0, "signal": None}, direction="c2a"),
        req(8, "terminal/release", terminalId="term_xyz"),
        response(8, {}, direction="c2a"),
        version=1,
    )
    term = only(conv, Terminal)
    assert (term.terminal_id, term.command, term.args, term.cwd, term.client_side, term.seq) == (
        "term_xyz",
        "npm",
        ["test"],
        "/p",
        True,
        1,
    )
    assert (term.text, term.exit_status, term.released) == (
        "Running tests...\n✓ All passed\n",
        {"exitCode": 0, "signal": None},
        True,
    )
    assert not conv.of(Call)
