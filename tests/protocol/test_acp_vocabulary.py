"""The ACP vocabulary is derived from the shipped schemas: directions, variants, unknown names."""

from __future__ import annotations

from typing import Any

import pytest

from acp_proxy.protocol import vocabulary as acp

_SIDE_OF_FIELD = {
    "c2a_requests": "agent",
    "c2a_notifications": "agent",
    "a2c_requests": "client",
    "a2c_notifications": "client",
    "protocol": "protocol",
    "proxy_requests": "proxy",
    "proxy_notifications": "proxy",
}


def _x_methods(schema: dict[str, Any]) -> dict[str, set[str]]:
    """Every x-method of a schema with the x-side(s) it is declared with."""
    out: dict[str, set[str]] = {}
    for definition in schema["$defs"].values():
        if "x-method" in definition:
            out.setdefault(definition["x-method"], set()).add(definition["x-side"])
    return out


def test_v1_methods_by_direction() -> None:
    v1 = acp.vocabulary(1)
    assert v1.version == 1
    assert {"initialize", "authenticate", "session/new", "session/load", "session/prompt"} <= v1.c2a_requests
    assert "session/cancel" in v1.c2a_notifications
    assert {"session/request_permission", "fs/read_text_file", "terminal/create"} <= v1.a2c_requests
    assert "session/update" in v1.a2c_notifications
    assert v1.protocol == frozenset({"$/cancel_request"})
    # Draft (unstable) methods count as known: session/fork is only in the unstable v1 schema.
    assert "session/fork" in v1.c2a_requests
    assert "session/update" not in v1.c2a_requests | v1.c2a_notifications


def test_v2_methods_differ_from_v1() -> None:
    v1, v2 = acp.vocabulary(1), acp.vocabulary(2)
    assert "session/load" in v1.methods and "session/load" not in v2.methods
    assert {"session/resume", "session/prompt", "auth/login"} <= v2.c2a_requests
    assert "fs/read_text_file" not in v2.methods
    assert v2.a2c_requests >= {"session/request_permission", "elicitation/create"}
    assert v2.protocol == frozenset({"$/cancel_request"})


def test_union_before_negotiation() -> None:
    union = acp.vocabulary()
    assert union.version is None
    assert union.methods == acp.vocabulary(1).methods | acp.vocabulary(2).methods
    assert union.updates == acp.vocabulary(1).updates | acp.vocabulary(2).updates
    # A version without a shipped schema falls back to the union too.
    assert acp.vocabulary(3).methods == union.methods


def test_vocabulary_is_cached() -> None:
    assert acp.vocabulary(2) is acp.vocabulary(2)
    assert acp.vocabulary() is acp.vocabulary(None)


@pytest.mark.parametrize("version", acp.PROTOCOL_VERSIONS)
def test_every_schema_method_is_in_the_vocabulary_on_its_side(version: int) -> None:
    vocab = acp.vocabulary(version)
    for unstable in (False, True):
        declared = _x_methods(acp.load_schema(version, unstable=unstable))
        assert set(declared) <= vocab.methods
        for field, side in _SIDE_OF_FIELD.items():
            for method in getattr(vocab, field):
                if method in declared:  # a stable-only file may lack a draft method
                    assert side in declared[method], (method, field)


def test_update_variants_union_stable_and_unstable() -> None:
    v1, v2 = acp.vocabulary(1), acp.vocabulary(2)
    assert {
        "agent_message_chunk",
        "tool_call",
        "tool_call_update",
        "plan",
        "session_info_update",
    } <= v1.updates
    assert {"user_message", "agent_message", "state_update", "tool_call_content_chunk"} <= v2.updates
    assert "state_update" not in v1.updates and "tool_call" not in v2.updates
    # Draft-only variants are known, and listed apart from the stable ones.
    assert "subagent_update" in v2.updates and "subagent_update" not in v2.stable_updates
    assert v2.stable_updates < v2.updates
    # The catch-all "other" member of the v2 union is not a variant name.
    assert None not in v2.updates and "other" not in v2.updates


@pytest.mark.parametrize("version", acp.PROTOCOL_VERSIONS)
def test_live_only_is_notice_and_the_schema_says_so(version: int) -> None:
    vocab = acp.vocabulary(version)
    assert vocab.live_only == frozenset({"notice"})
    assert "notice" in vocab.stable_updates
    notice = acp.load_schema(version)["$defs"]["Notice"]["description"]
    assert "live events rather than session history" in notice


def test_classify_unknown() -> None:
    assert acp.classify_unknown("session/prompt") is None
    assert acp.classify_unknown("agent_message_chunk") is None
    assert acp.classify_unknown("_zed.dev/workspace") == "extension"
    assert acp.classify_unknown("_vendor_update") == "extension"
    assert acp.classify_unknown("future_thing") == "future"
    v1, v2 = acp.vocabulary(1), acp.vocabulary(2)
    assert v2.classify_method("session/load") == "future"
    assert v1.classify_method("session/load") is None
    assert v1.classify_update("state_update") == "future"
    assert v2.classify_update("state_update") is None
    assert acp.classify_unknown("x", {"x"}) is None


def test_direction_helpers() -> None:
    v2 = acp.vocabulary(2)
    assert "session/prompt" in v2.requests("c2a") and "session/prompt" not in v2.requests("a2c")
    assert "$/cancel_request" in v2.notifications("c2a") and "$/cancel_request" in v2.notifications("a2c")
    assert "proxy/successor" in v2.requests("a2c") and "proxy/successor" in v2.notifications("c2a")


def test_the_supplement_adds_the_variants_newer_than_the_published_schemas() -> None:
    from acp_proxy.checks.schema import schemas
    from acp_proxy.protocol import vocabulary as voc

    v1, v2 = voc.vocabulary(1), voc.vocabulary(2)
    assert {"replay_complete", "cursor_update", "prompt_suggestions_update"} <= v2.updates - v2.stable_updates
    assert "replay_complete" not in v1.updates and "prompt_suggestions_update" in v1.updates
    assert v2.classify_update("replay_complete") is None and voc.classify_unknown("cursor_update") is None
    draft = schemas(2, True)
    assert draft.first_error(draft.variants["replay_complete"], {"sessionUpdate": "replay_complete"}) is None
    assert draft.first_error(draft.variants["cursor_update"], {"sessionUpdate": "cursor_update"}) is not None
    # The open "other" branch of the union no longer takes them.
    other = voc.load_schema(2, unstable=True)["$defs"]["SessionUpdate"]["anyOf"][-1]
    excluded = {m["properties"]["sessionUpdate"]["const"] for m in other["not"]["anyOf"]}
    assert "replay_complete" in excluded
    # The stable files stay as published.
    assert "replay_complete" not in str(voc.load_schema(2)["$defs"]["SessionUpdate"])
