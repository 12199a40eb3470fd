"""The supplement schemas of ``cursor_update`` and ``prompt_suggestions_update`` (variants newer
than the published schema files; ``acp_proxy/schema/v<N>.supplement.json`` records where each
definition comes from): update bodies shaped as the definitions give them validate, malformed
ones are ``schema/update`` findings, with the compiled validator and jsonschema agreeing."""

from __future__ import annotations

import json
from importlib.resources import files
from typing import Any

import jsonschema
import pytest

from acp_proxy.checks.schema import schemas
from tests.checks.test_checks import findings, upd, v1_turn, v2_turn

TEXT = {"type": "text", "text": "Run the test suite and fix what breaks"}

# The RFD's example (prompt-suggestions, "Elevator pitch") and the shapes the Rust types give.
SUGGESTIONS_OK: list[dict[str, Any]] = [
    {"sessionUpdate": "prompt_suggestions_update", "suggestions": [{"prompt": [TEXT]}]},
    {"sessionUpdate": "prompt_suggestions_update", "suggestions": []},  # withdraws them
    {
        "sessionUpdate": "prompt_suggestions_update",
        "suggestions": [
            {"prompt": [TEXT, {"type": "resource_link", "uri": "file:///w/a.py", "name": "a.py"}], "_meta": None},
            {"prompt": [{"type": "text", "text": "Explain the failure"}], "_meta": {"x": 1}},
        ],
        "_meta": {"rank": "model"},
    },
]
SUGGESTIONS_BAD: list[dict[str, Any]] = [
    {"sessionUpdate": "prompt_suggestions_update"},  # suggestions is required
    {"sessionUpdate": "prompt_suggestions_update", "suggestions": None},  # "Required and non-null"
    {"sessionUpdate": "prompt_suggestions_update", "suggestions": [{"prompt": []}]},  # at least one block
    {"sessionUpdate": "prompt_suggestions_update", "suggestions": [{}]},
    {"sessionUpdate": "prompt_suggestions_update", "suggestions": ["Run the tests"]},
    {"sessionUpdate": "prompt_suggestions_update", "suggestions": [{"prompt": [{"type": "text"}]}]},
]


def anchor(kind: str, **fields: Any) -> dict[str, Any]:
    return {"type": kind, "position": "after", **fields}


def cursor(**fields: Any) -> dict[str, Any]:
    return {"sessionUpdate": "cursor_update", "cursorId": "c1", **fields}


CURSORS_OK: dict[int, list[dict[str, Any]]] = {
    1: [
        cursor(anchor=anchor("user_message", messageId="m1"), capabilities={"fork": {}}),
        cursor(anchor=anchor("tool_call", toolCallId="t1", position="before")),
        cursor(capabilities=None),  # a later update: capabilities cleared, the anchor kept
        cursor(anchor=anchor("compaction", compactionId="k1")),  # a v2 type: unknown in v1, kept
        cursor(anchor={"type": "_vendor/bookmark", "line": 3}),  # custom: the rest verbatim
    ],
    2: [
        cursor(anchor=anchor("user_message", messageId="m1"), capabilities={"fork": {}}),
        cursor(anchor=anchor("agent_thought", messageId="t9", _meta={"k": "v"}), capabilities={"fork": None}),
        cursor(anchor=anchor("session_message", messageId="s1", position="_between")),  # a custom position
        cursor(anchor=anchor("tool_call", toolCallId="t1", position="before")),
        cursor(anchor=anchor("compaction", compactionId="k1"), _meta={"x": 1}),
        cursor(capabilities={"_meta": None}),
        cursor(anchor={"type": "_vendor/bookmark", "line": 3}),
        cursor(anchor=None),
    ],
}
CURSORS_BAD: dict[int, list[dict[str, Any]]] = {
    1: [
        {"sessionUpdate": "cursor_update"},  # cursorId is required
        cursor(cursorId=7),
        cursor(anchor=anchor("user_message")),  # a known type with a malformed payload
        cursor(anchor=anchor("tool_call", messageId="m1")),
        cursor(anchor={"messageId": "m1", "position": "after"}),  # no type
        cursor(capabilities={"fork": True}),
    ],
    2: [
        {"sessionUpdate": "cursor_update"},
        cursor(cursorId=None),
        cursor(anchor=anchor("agent_message", messageId=5)),
        cursor(anchor={"type": "user_message", "messageId": "m1"}),  # no position
        cursor(anchor=anchor("compaction", messageId="m1")),  # "does not fall back" to other
        cursor(anchor=anchor("tool_call", toolCallId="t1", position=1)),
        cursor(anchor="m1"),
        cursor(capabilities=["fork"]),
        cursor(capabilities={"fork": "yes"}),
        cursor(_meta="x"),
    ],
}


def _cases(good: bool) -> list[tuple[int, dict[str, Any]]]:
    cursors = CURSORS_OK if good else CURSORS_BAD
    suggestions = SUGGESTIONS_OK if good else SUGGESTIONS_BAD
    return [(v, body) for v in (1, 2) for body in [*cursors[v], *suggestions]]


def _verdicts(version: int, body: dict[str, Any]) -> tuple[bool, bool]:
    """(compiled, jsonschema) verdicts of ``body`` against its variant in the draft schema."""
    draft = schemas(version, True)
    name = draft.variants[body["sessionUpdate"]]
    fast = draft.fast_validator(name)
    assert fast is not None, f"{name} must compile (the check's speed depends on it)"
    return fast(body), draft.validator(name).is_valid(body)


@pytest.mark.parametrize(("version", "body"), _cases(True), ids=lambda x: x if isinstance(x, int) else None)
def test_real_shaped_updates_validate(version: int, body: dict[str, Any]) -> None:
    assert _verdicts(version, body) == (True, True)


@pytest.mark.parametrize(("version", "body"), _cases(False), ids=lambda x: x if isinstance(x, int) else None)
def test_malformed_updates_are_rejected(version: int, body: dict[str, Any]) -> None:
    assert _verdicts(version, body) == (False, False)


def test_a_malformed_update_in_a_turn_is_a_schema_finding_and_a_good_one_is_none() -> None:
    for version, turn in ((1, v1_turn), (2, v2_turn)):
        assert findings(turn(upd(CURSORS_OK[version][0]), upd(SUGGESTIONS_OK[0]))) == [], version
        found = findings(turn(upd(CURSORS_BAD[version][2])))
        assert [f.rule_id for f in found] == ["schema/update"], (version, [f.message for f in found])


@pytest.mark.parametrize("version", [1, 2])
def test_every_supplement_definition_names_its_source_and_is_a_valid_schema(version: int) -> None:
    supplement = json.loads(files("acp_proxy").joinpath("schema", f"v{version}.supplement.json").read_text())
    assert set(supplement["$defs"]) <= set(supplement["sources"]), "a definition without its source"
    for name, definition in supplement["$defs"].items():
        jsonschema.Draft202012Validator.check_schema(definition)
        assert definition.get("description"), name
