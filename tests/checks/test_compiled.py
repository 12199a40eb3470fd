"""The compiled schema validators give jsonschema's verdicts, and `check` the same findings with
them as without them (the old path: jsonschema alone).

Instances: every payload of the recorded fixtures, the v2 seed traffic and the crafted rule
traces, each also mutated at every place in its tree (a key dropped, a value swapped for an odd
one, a key added); random JSON built from the schema's own names and constants (hypothesis);
a handful of odd values against every type of every schema file. A compiled validator that
says valid where jsonschema does not would hide a violation: that is what this file hunts.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from acp_proxy.checks import compiled
from acp_proxy.checks.rules import check
from acp_proxy.checks.schema import SchemaSet, schemas
from acp_proxy.protocol import vocabulary as acp
from acp_proxy.protocol.vocabulary import RECEIVER
from tests.checks import test_checks as crafted
from tests.conftest import TRAFFIC

SETS = [(version, unstable) for version in (1, 2) for unstable in (True, False)]
ODD: list[Any] = [
    None,
    True,
    False,
    0,
    -1,
    1.5,
    2.0,
    70000,
    2**40,
    "",
    "x",
    "text",
    [],
    {},
    [None],
    [{}],
    {"type": "text"},
]


def traces() -> list[list[crafted.Msg]]:
    """Every conversation the checks' tests know: recorded SDK pairs, the v2 seed, each rule case."""
    from tests import v2_traffic as v2

    out: list[list[crafted.Msg]] = []
    for path in sorted(TRAFFIC.glob("*.jsonl")):
        out.append(
            [(item["dir"], json.loads(item["frame"])) for item in map(json.loads, path.read_text().splitlines())]
        )
    seed = [
        crafted.c2a(v2.INITIALIZE),
        crafted.a2c(v2.AGENT_SCRIPT["on"]["initialize"][0] | {"id": 0}),
        crafted.c2a(v2.NEW_SESSION),
        crafted.a2c(crafted.res(1, {"sessionId": v2.SESSION})),
        crafted.c2a(v2.PROMPT),
    ]
    seed += [
        crafted.a2c(m | {"id": 2} if m.get("id") == "$id" else m) for m in v2.AGENT_SCRIPT["on"]["session/prompt"][0]
    ]
    seed += [crafted.c2a(v2.PERMISSION_ANSWER)] + [crafted.a2c(m) for m in v2.AFTER_PERMISSION]
    out.append(seed)
    for _rule, broken, mended in crafted.CASES:
        out += [broken, mended]
    return out


def typed_payloads(schema: SchemaSet) -> list[tuple[str, Any]]:
    """(type name, payload) for every frame of ``traces()`` that a type of ``schema`` checks, once."""
    found = {json.dumps(pair, sort_keys=True): pair for pair in _typed_payloads(schema)}
    return list(found.values())


def _typed_payloads(schema: SchemaSet) -> Iterator[tuple[str, Any]]:
    for trace in traces():
        methods: dict[tuple[str, Any], str] = {}
        for direction, message in trace:
            if not isinstance(message, dict):
                continue
            method = message.get("method")
            if isinstance(method, str) and "id" in message:
                methods[(direction, json.dumps(message["id"]))] = method
                name = schema.params.get((method, RECEIVER[direction]))
                if name:
                    yield name, message.get("params")
            elif isinstance(method, str):
                name = schema.notifications.get((method, RECEIVER[direction]))
                if name:
                    yield name, message.get("params")
                params = message.get("params")
                update = params.get("update") if isinstance(params, dict) else None
                if method == "session/update" and isinstance(update, dict):
                    variant = schema.variants.get(update.get("sessionUpdate"))
                    if variant:
                        yield variant, update
            elif "result" in message:
                asked = methods.get(("c2a" if direction == "a2c" else "a2c", json.dumps(message.get("id"))))
                side = "agent" if direction == "a2c" else "client"
                name = schema.results.get((asked, side)) if asked else None
                if name:
                    yield name, message["result"]


def mutations(value: Any) -> Iterator[Any]:
    """``value`` itself, then one change at each place of its tree."""
    yield value
    if isinstance(value, dict):
        yield {**value, "zz_extra": 1}
        for key in value:
            yield {k: v for k, v in value.items() if k != key}
            for odd in ODD:
                yield {**value, key: odd}
            for inner in mutations(value[key]):
                yield {**value, key: inner}
    elif isinstance(value, list):
        yield [*value, None]
        for i, item in enumerate(value):
            yield value[:i] + value[i + 1 :]
            for inner in mutations(item):
                yield [*value[:i], inner, *value[i + 1 :]]
    else:
        yield from ODD


def agree(schema: SchemaSet, name: str, instance: Any) -> None:
    fast = schema.fast_validator(name)
    assert fast is not None, f"{name} not compiled"
    expected = schema.validator(name).is_valid(instance)
    assert fast(instance) == expected, (schema.file, name, instance)


@pytest.mark.parametrize(("version", "unstable"), SETS)
def test_mutated_payloads_get_jsonschemas_verdict(version: int, unstable: bool) -> None:
    schema = schemas(version, unstable)
    seen = 0
    verdicts = set()
    for name, payload in typed_payloads(schema):
        for instance in mutations(payload):
            agree(schema, name, instance)
            verdicts.add(schema.validator(name).is_valid(instance))
            seen += 1
    # Not vacuous: many instances, and both verdicts among them.
    assert seen > 2000 and verdicts == {True, False}


@pytest.mark.parametrize(("version", "unstable"), SETS)
def test_every_type_compiles_and_agrees_on_odd_values(version: int, unstable: bool) -> None:
    schema = schemas(version, unstable)
    names = [*schema._defs]
    assert len(names) > 100
    for name in names:
        for instance in ODD:
            agree(schema, name, instance)


def _json_strategy(version: int) -> st.SearchStrategy[Any]:
    """JSON built from the schema's own property names and string constants: near-misses."""
    keys: set[str] = set()
    strings: set[str] = {"", "x"}

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "properties" and isinstance(value, dict):
                    keys.update(value)
                if key in ("const", "enum"):
                    strings.update(v for v in (value if isinstance(value, list) else [value]) if isinstance(v, str))
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(acp.load_schema(version, unstable=True))
    leaves = st.one_of(
        st.none(),
        st.booleans(),
        st.sampled_from([0, -1, 1, 2.0, 1.5, 65535, 65536, 2**40]),
        st.sampled_from(sorted(strings)),
    )
    return st.recursive(
        leaves,
        lambda inner: st.one_of(
            st.lists(inner, max_size=3),
            st.dictionaries(st.sampled_from(sorted(keys)), inner, max_size=6),
        ),
        max_leaves=12,
    )


@pytest.mark.parametrize("version", [1, 2])
def test_random_json_from_the_schemas_words_gets_jsonschemas_verdict(version: int) -> None:
    schema = schemas(version, True)
    names = sorted({*schema.variants.values(), *schema.params.values(), *schema.notifications.values()})
    names += sorted(set(schema.results.values()))

    @settings(max_examples=400, deadline=None)
    @given(st.sampled_from(names), _json_strategy(version))
    def agrees(name: str, instance: Any) -> None:
        agree(schema, name, instance)

    agrees()


def test_an_unsupported_keyword_is_refused_not_ignored() -> None:
    for schema in ({"pattern": "^a"}, {"properties": {"a": {"maxLength": 2}}}, {"unevaluatedProperties": False}):
        with pytest.raises(compiled.Unsupported):
            compiled.compile_schema(schema, lambda ref: None)
    # An annotation is no keyword: compiled, and it changes nothing.
    valid = compiled.compile_schema({"type": "string", "description": "d", "format": "uri"}, lambda ref: None)
    assert valid("not a uri") and not valid(1)


def _mutated_traces() -> Iterator[list[crafted.Msg]]:
    """Each trace with one frame's payload changed: schema findings, and lifecycle ones."""
    for trace in traces():
        for i, (direction, message) in enumerate(trace):
            if not isinstance(message, dict):
                continue
            key = "params" if "params" in message else "result" if "result" in message else None
            if key is None:
                continue
            for n, changed in enumerate(mutations(message[key])):
                if n % 11 == 0:  # a sample: every trace, every frame, one change in eleven
                    yield [*trace[:i], (direction, {**message, key: changed}), *trace[i + 1 :]]


def test_findings_are_those_of_jsonschema_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    unique = {json.dumps(t, default=repr): t for t in [*traces(), *_mutated_traces()]}
    cases = [crafted.records(t) for t in unique.values()]
    assert len(cases) > 500
    new = [[f.as_dict() for f in check(recs)] for recs in cases]
    # The old path: no compiled validators, every verdict from jsonschema (fresh schema sets).
    monkeypatch.setattr(SchemaSet, "fast_validator", lambda self, name: None)
    schemas.cache_clear()
    try:
        old = [[f.as_dict() for f in check(recs)] for recs in cases]
    finally:
        schemas.cache_clear()
    assert new == old
    schema_findings = sum(1 for found in new for f in found if f["rule_id"].startswith("schema/"))
    assert schema_findings > 100 and sum(map(len, new)) > schema_findings
