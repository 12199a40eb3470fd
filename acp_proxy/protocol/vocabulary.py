"""The ACP vocabulary: which methods and ``session/update`` variants each protocol version has.

Owns: reading the official JSON Schemas shipped in ``acp_proxy/schema/`` (their provenance is in
``schema/PROVENANCE.md``) and deriving from them, once per process, the tables the rest of the
proxy asks about per frame: methods by direction (client->agent and agent->client requests and
notifications, the protocol-level ``$/`` methods that travel either way, the proxy-chain methods),
the set of ``sessionUpdate`` variants, which of them are live-only, and how an unknown name is
classed (``_``-prefixed = extension, anything else = a future ACP name).

Must not know: frames, pairing, sessions, SQL or pipes. Nothing here is typed by hand from the
spec except what the schema cannot say in machine-readable form (``LIVE_ONLY``, below); a new
schema file changes the tables without touching this code: the versions are the
``v<N>.schema.json`` files present (``scripts/refresh_schemas.py`` fetches them), and a
``v<N>.supplement.json`` beside them adds the variants newer than any published schema file
(``replay_complete`` ...; its provenance is in ``PROVENANCE.md``) to the draft schema of that
version.

Rule: every lookup the hot path makes is a set membership test on a frozenset built at import.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from typing import Any, Literal

import msgspec


def versions_in(names: Iterable[str]) -> tuple[int, ...]:
    """The protocol versions a schema directory holding files ``names`` has (``v<N>.schema.json``)."""
    return tuple(sorted(int(m.group(1)) for n in names if (m := re.fullmatch(r"v(\d+)\.schema\.json", n))))


PROTOCOL_VERSIONS: tuple[int, ...] = versions_in(e.name for e in files("acp_proxy").joinpath("schema").iterdir())
"""The major protocol versions whose schemas ship with the package (the files present)."""
NEWEST: int = PROTOCOL_VERSIONS[-1]
"""The newest version we have a schema for: a peer speaking a newer one is checked against it."""

# The two directions a frame travels, as the recording names them. Every module that needs "the
# other direction" or "who sent it" asks these maps (one definition, not one per module).
C2A = "c2a"
"""Client -> agent (the agent's stdin)."""
A2C = "a2c"
"""Agent -> client (the agent's stdout)."""
DIRECTIONS: tuple[str, str] = (C2A, A2C)
OTHER: dict[str, str] = {C2A: A2C, A2C: C2A}
"""The direction a response travels, given its request's (and the reverse)."""
# The names a frame's ``fault`` column can hold (``faults.rules.ACTIONS``, kept equal by a test):
# what the filter's ``fault:NAME`` may name.
FAULT_ACTIONS: tuple[str, ...] = (
    "drop",
    "delay",
    "duplicate",
    "reorder",
    "corrupt",
    "truncate",
    "split",
    "error",
    "inject",
    "kill",
    "close",
    "stall",
)

SENDER: dict[str, str] = {C2A: "client", A2C: "agent"}
RECEIVER: dict[str, str] = {C2A: "agent", A2C: "client"}
"""The schema's ``x-side`` names the receiver: an ``agent`` type travels client -> agent."""

Unknown = Literal["extension", "future"]

# The schema marks a variant's payload only in prose ("Notices are live events rather than
# session history"); the rule that such variants are never replayed comes from the session
# notices RFD. So this one fact is declared here, and tests check the schema's prose still says
# it. Intersected with each version's variants, so a version without `notice` has none.
LIVE_ONLY: frozenset[str] = frozenset({"notice"})

# The unions of the schema that list, by construction, who sends what. Their members' params
# types carry `x-method` (and `x-side`, which agrees: side `agent` = sent client->agent).
_UNIONS = {
    "ClientRequest": "c2a_requests",
    "ClientNotification": "c2a_notifications",
    "AgentRequest": "a2c_requests",
    "AgentNotification": "a2c_notifications",
    "ProxyRequest": "proxy_requests",
    "ProxyNotification": "proxy_notifications",
}


@dataclass(frozen=True, slots=True)
class Vocabulary:
    """What one protocol version (or, with ``version`` None, any known version) defines.

    Every table is the union of the stable and the unstable (draft) schema of the version: the
    proxy must not call a draft method "unknown" just because it is not stable yet.
    """

    version: int | None
    c2a_requests: frozenset[str]
    c2a_notifications: frozenset[str]
    a2c_requests: frozenset[str]
    a2c_notifications: frozenset[str]
    protocol: frozenset[str]
    """Protocol-level notifications (``$/cancel_request``), sent by either side."""
    proxy_requests: frozenset[str]
    """Proxy-chain requests (``proxy/initialize``, ``proxy/successor``), either direction."""
    proxy_notifications: frozenset[str]
    methods: frozenset[str]
    """Every method name above, whatever its direction."""
    updates: frozenset[str]
    """``sessionUpdate`` variants, stable and draft."""
    stable_updates: frozenset[str]
    """``sessionUpdate`` variants of the stable schema only."""
    live_only: frozenset[str]
    """Variants that are live events, never history: they must not be replayed."""

    def requests(self, direction: str) -> frozenset[str]:
        """Requests a sender in ``direction`` ("c2a" or "a2c") may make, protocol-level included."""
        own = self.c2a_requests if direction == "c2a" else self.a2c_requests
        return own | self.proxy_requests

    def notifications(self, direction: str) -> frozenset[str]:
        own = self.c2a_notifications if direction == "c2a" else self.a2c_notifications
        return own | self.protocol | self.proxy_notifications

    def classify_method(self, name: str) -> Unknown | None:
        return classify_unknown(name, self.methods)

    def classify_update(self, name: str) -> Unknown | None:
        return classify_unknown(name, self.updates)


def classify_unknown(name: str, known: Collection[str] | None = None) -> Unknown | None:
    """None for a known name; "extension" for a ``_``-prefixed one; "future" otherwise.

    ``known`` defaults to every method and update variant of every shipped version. Methods and
    variants live in different namespaces: pass ``Vocabulary.methods`` or ``.updates`` (or use
    ``Vocabulary.classify_method`` / ``classify_update``) to ask about one of them.
    """
    if known is None:
        known = _every_name()
    if name in known:
        return None
    return unknown_kind(name)


def unknown_kind(name: str) -> Unknown:
    """How a name known to be outside the vocabulary is classed (ACP's extensibility rule)."""
    return "extension" if name.startswith("_") else "future"


@cache
def _every_name() -> frozenset[str]:
    union = vocabulary()
    return union.methods | union.updates


def vocabulary(version: int | None = None) -> Vocabulary:
    """The vocabulary of ``version``; None (or a version with no schema) gives the union."""
    return _vocabulary(version if version in PROTOCOL_VERSIONS else None)


@cache
def _vocabulary(version: int | None) -> Vocabulary:
    if version is not None:
        parts = [_derive(load_schema(version)), _derive(load_schema(version, unstable=True))]
        stable = parts[0]["updates"]
    else:
        parts = [_as_sets(vocabulary(v)) for v in PROTOCOL_VERSIONS]
        stable = frozenset().union(*(vocabulary(v).stable_updates for v in PROTOCOL_VERSIONS))
    merged = {name: frozenset().union(*(p[name] for p in parts)) for name in parts[0]}
    methods = frozenset().union(*(merged[f] for f in (*_UNIONS.values(), "protocol")))
    return Vocabulary(
        version=version,
        methods=methods,
        stable_updates=frozenset(stable),
        live_only=LIVE_ONLY & merged["updates"],
        **merged,
    )


def _as_sets(vocab: Vocabulary) -> dict[str, frozenset[str]]:
    return {name: getattr(vocab, name) for name in (*_UNIONS.values(), "protocol", "updates")}


def load_schema(version: int, *, unstable: bool = False) -> dict[str, Any]:
    """The decoded official schema of ``version`` (stable, or the draft with ``unstable``; the
    draft with the version's supplement merged in, when one is present)."""
    name = f"v{version}.schema{'.unstable' if unstable else ''}.json"
    schema: dict[str, Any] = msgspec.json.decode(files("acp_proxy").joinpath("schema", name).read_bytes())
    if unstable:
        _merge_supplement(schema, load_supplement(version))
    return schema


def load_supplement(version: int) -> dict[str, Any]:
    """``v<version>.supplement.json``: variants newer than the published schema file ({} if none)."""
    path = files("acp_proxy").joinpath("schema", f"v{version}.supplement.json")
    if not path.is_file():
        return {}
    found: dict[str, Any] = msgspec.json.decode(path.read_bytes())
    return found


def _merge_supplement(schema: dict[str, Any], supplement: dict[str, Any]) -> None:
    """Add the supplement's variants to ``SessionUpdate`` (and the types they refer to), each a
    member like the official ones (a ``sessionUpdate`` const and its type), before the open
    "other" branch, which is told to exclude them. A variant the schema already defines is left as the schema has it."""
    defs: dict[str, Any] = schema.get("$defs", {})
    update = defs.get("SessionUpdate")
    if not supplement or not isinstance(update, dict):
        return
    members: list[Any] = update.get("oneOf") or update.get("anyOf") or []
    known = {m.get("properties", {}).get("sessionUpdate", {}).get("const") for m in members}
    other = next(
        (m for m in members if "not" in m and "const" not in m.get("properties", {}).get("sessionUpdate", {})), None
    )
    for const, type_name in supplement.get("updates", {}).items():
        if const in known or type_name not in supplement.get("$defs", {}):
            continue
        defs.setdefault(type_name, supplement["$defs"][type_name])
        # The types a variant refers to (an anchor, a suggestion): where the schema has one of
        # that name already, the schema's stands.
        for name, definition in supplement["$defs"].items():
            defs.setdefault(name, definition)
        tag = {
            "type": "object",
            "properties": {"sessionUpdate": {"type": "string", "const": const}},
            "required": ["sessionUpdate"],
        }
        member = {**tag, "description": f"{const} (from the supplement)", "allOf": [{"$ref": f"#/$defs/{type_name}"}]}
        members.insert(members.index(other) if other is not None else len(members), member)
        if other is not None:
            excluded = other["not"].get("anyOf")
            if isinstance(excluded, list):
                excluded.append(tag)


def _derive(schema: dict[str, Any]) -> dict[str, frozenset[str]]:
    defs: dict[str, Any] = schema["$defs"]
    out: dict[str, frozenset[str]] = {}
    for union, field in _UNIONS.items():
        params = defs.get(union, {}).get("properties", {}).get("params", {})
        out[field] = frozenset(defs[ref]["x-method"] for ref in _refs(params) if "x-method" in defs.get(ref, {}))
    out["protocol"] = frozenset(
        d["x-method"] for d in defs.values() if d.get("x-side") == "protocol" and "x-method" in d
    )
    update = defs["SessionUpdate"]
    variants = update.get("oneOf") or update.get("anyOf") or []
    # The catch-all "other" member of the v2 union has no const: it is the unknown fallback.
    out["updates"] = frozenset(
        const
        for member in variants
        if isinstance(const := member.get("properties", {}).get("sessionUpdate", {}).get("const"), str)
    )
    return out


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str):
            yield ref.rsplit("/", 1)[-1]
        for value in node.values():
            yield from _refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _refs(value)
