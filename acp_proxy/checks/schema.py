"""JSON Schema validation of frame payloads against the official ACP schema of a version.

Owns: ``SchemaSet`` (one per schema file, built once: ``schemas``): which ``$defs`` type checks
what — the type whose ``x-method`` names the method, on the side it travelled, request or
notification; a response against the result type of the request it answers; a
``session/update`` against its variant — and the verdict on a payload. The verdict comes from
a compiled validator (``compiled``: plain Python, once per type); the message of a finding from
jsonschema, only for a payload found invalid. Tagged unions are validated on their one branch
(``_dispatch``), refs inlined up front: both as fast for jsonschema as for the compiled code.

Must not know: frames, findings, lifecycle rules, SQL.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from functools import cache
from typing import Any

from acp_proxy.checks.compiled import DISPATCH as _DISPATCH
from acp_proxy.checks.compiled import Unsupported, compile_schema
from acp_proxy.protocol import vocabulary as acp


class SchemaSet:
    """Validators for one schema file, compiled lazily once per type and shared (``schemas``)."""

    def __init__(self, version: int, unstable: bool) -> None:
        root = copy.deepcopy(acp.load_schema(version, unstable=unstable))
        defs: dict[str, Any] = root["$defs"]
        self.version = version
        self.file = f"v{version}.schema{'.unstable' if unstable else ''}.json"
        self._sources: dict[str, str] = {}
        """Synthetic def name -> the official def it was cut from (for spec references)."""
        self.params: dict[tuple[str, str], str] = {}
        """(method, receiving side) -> the params type of a request."""
        self.notifications: dict[tuple[str, str], str] = {}
        """(method, receiving side) -> the params type of a notification."""
        self.results: dict[tuple[str, str], str] = {}
        """(method, side answering) -> the result type."""
        for name, node in defs.items():
            method, side = node.get("x-method"), node.get("x-side")
            if not isinstance(method, str):
                continue
            # Protocol-level ($/...) and proxy-chain methods travel either way.
            sides = ("agent", "client") if side in ("protocol", "proxy") else (side,)
            if name.endswith("Response"):
                table = self.results
            elif name.endswith("Notification"):
                table = self.notifications
            else:
                table = self.params
            for s in sides:
                table[(method, s)] = name
        # session/update's params are checked without their `update`, which is checked against
        # its own variant: a failed oneOf over every variant says nothing useful.
        note = self.notifications.get(("session/update", "client"))
        if note is not None:
            shell = copy.deepcopy(defs[note])
            shell.get("properties", {})["update"] = True
            defs["_acp_proxy_SessionNotificationShell"] = shell
            self.notifications[("session/update", "client")] = "_acp_proxy_SessionNotificationShell"
            self._sources["_acp_proxy_SessionNotificationShell"] = note
        self.variants: dict[str, str] = {}
        update = defs.get("SessionUpdate", {})
        for member in update.get("oneOf") or update.get("anyOf") or []:
            const = member.get("properties", {}).get("sessionUpdate", {}).get("const")
            if isinstance(const, str):
                defs[f"_acp_proxy_update_{const}"] = member
                self.variants[const] = f"_acp_proxy_update_{const}"
                self._sources[f"_acp_proxy_update_{const}"] = "SessionUpdate"
        # v1 lists stop reasons in one enum; v2 spreads them over the idle variants' consts.
        self.stop_reasons = _consts(defs.get("StopReason", {})) | frozenset(_stop_consts(defs))
        prompt_result = self.results.get(("session/prompt", "agent"))
        self.prompt_message_id = "messageId" in defs.get(prompt_result or "", {}).get("required", ())
        """The prompt response must carry ``messageId`` (v2 drafts before it answered ``{}``)."""
        uri = f"urn:acp-proxy:schema:v{version}{':unstable' if unstable else ''}"
        root["$id"] = uri
        self._root = root
        self._registry: Any = None
        """jsonschema's, made on the first payload found invalid (``validator``): a clean
        recording never imports jsonschema (a tenth of a second of a short check)."""
        self._uri = uri
        self._defs = defs
        # The dispatch rewrite (``_dispatch``) drops the failed branches' annotations, which only
        # unevaluatedProperties/Items would read; a file that uses them for real keeps its unions.
        self._dispatch_ok = not any(value is not True for value in _unevaluated(root))
        self._compiled: dict[str, Any] = {}
        self._fast: dict[str, Callable[[Any], bool] | None] = {}
        self.verdicts = self._fast
        """Type name -> its compiled verdict (None: not compilable), for the types asked for
        so far (``fast_validator`` fills it): a caller's one dict lookup per payload."""

    def source_def(self, name: str) -> str:
        return self._sources.get(name, name)

    def validator(self, name: str) -> Any:
        found = self._compiled.get(name)
        if found is None:
            # Refs inlined up front: resolving a $ref through the registry on every frame costs
            # about half of a chunk's validation (measured). Recursive refs stay refs, absolute.
            if self._registry is None:
                from referencing import Registry, Resource
                from referencing.jsonschema import DRAFT202012

                resource = Resource.from_contents(self._root, default_specification=DRAFT202012)
                self._registry = Registry().with_resource(self._uri, resource)
            schema = self._inline(self._defs[name], frozenset({name}))
            found = self._compiled[name] = _dispatching_validator()(schema, registry=self._registry)
        return found

    def _inline(self, node: Any, stack: frozenset[str]) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                target_name = ref.removeprefix("#/$defs/")
                rest = {k: self._inline(v, stack) for k, v in node.items() if k != "$ref"}
                if target_name in stack or target_name not in self._defs:
                    target = {"$ref": self._uri + ref}
                else:
                    target = self._inline(self._defs[target_name], stack | {target_name})
                if not rest:
                    return target
                # A $ref beside other keywords applies as one more subschema (2020-12).
                return {**rest, "allOf": [*rest.get("allOf", []), target]}
            inlined = {k: self._inline(v, stack) for k, v in node.items()}
            return _dispatch(inlined) if self._dispatch_ok else inlined
        if isinstance(node, list):
            return [self._inline(v, stack) for v in node]
        return node

    def fast_validator(self, name: str) -> Callable[[Any], bool] | None:
        """The compiled verdict of type ``name`` (``compiled``), None where it cannot be compiled."""
        if name in self._fast:
            return self._fast[name]

        try:
            found: Callable[[Any], bool] | None = compile_schema(
                self._inline(self._defs[name], frozenset({name})), self._resolve
            )
        except Unsupported:
            found = None
        self._fast[name] = found
        return found

    def _resolve(self, ref: str) -> Any:

        target = ref.removeprefix(self._uri + "#/$defs/")
        if target == ref or target not in self._defs:
            raise Unsupported(f"$ref {ref}")
        return self._inline(self._defs[target], frozenset({target}))

    def first_error(self, name: str, instance: Any) -> str | None:
        """None when ``instance`` is valid; else "<json path>: <message>" of the most relevant error."""
        fast = self._fast[name] if name in self._fast else self.fast_validator(name)
        try:
            if fast is not None and fast(instance):
                return None  # the compiled verdict; jsonschema only says what is wrong
        except Exception:
            pass  # e.g. nesting too deep for the compiled code: jsonschema decides
        from jsonschema.exceptions import best_match

        validator = self.validator(name)
        if validator.is_valid(instance):  # the common case, and cheaper than collecting errors
            return None
        error = best_match(validator.iter_errors(instance))
        if error is None:
            return None
        return f"{error.json_path}: {_short(error.message)}"


# -- discriminated unions: one branch validated, not all of them ----------------------------------


def _dispatch(node: dict[str, Any]) -> dict[str, Any]:
    """A ``oneOf`` / ``anyOf`` of tagged objects turned into a lookup of the one branch to check.

    Content blocks, session updates, tool call content: the schema writes them as unions whose
    members each require a property (``type``, ``sessionUpdate``, ...) fixed to a distinct string
    ``const``, and jsonschema validates an instance against every member (about 3/4 of a chunk's
    check, measured). When every member is such an object, the union is exactly "the member
    whose const equals the instance's tag": any other member fails on its const, an instance
    that is not an object or has no known tag fails them all. Anything else stays as written.
    """
    for keyword in ("oneOf", "anyOf"):
        members = node.get(keyword)
        if isinstance(members, list) and members:
            tag = _tag_of(members)
            if tag is not None:
                rest = {k: v for k, v in node.items() if k != keyword}
                branches = {m["properties"][tag]["const"]: m for m in members}
                return {**rest, _DISPATCH: {"tag": tag, "keyword": keyword, "branches": branches}}
    return node


def _tag_of(members: list[Any]) -> str | None:
    """The property every member requires with a distinct string const, if there is one."""
    first = members[0]
    if not isinstance(first, dict) or not isinstance(first.get("properties"), dict):
        return None
    for tag in first["properties"]:
        consts = []
        for m in members:
            prop = _get(m, "properties", tag)
            # type: object on every member: without it a non-object would pass that member.
            if (
                not isinstance(m, dict)
                or m.get("type") != "object"
                or tag not in (m.get("required") or ())
                or not isinstance(prop, dict)
                or not isinstance(prop.get("const"), str)
            ):
                break
            consts.append(prop["const"])
        else:
            if len(set(consts)) == len(consts):
                return tag
    return None


def _dispatch_keyword(validator: Any, spec: dict[str, Any], instance: Any, schema: Any) -> Iterator[Any]:
    from jsonschema.exceptions import ValidationError

    branches: dict[str, Any] = spec["branches"]
    if not validator.is_type(instance, "object"):
        yield ValidationError(f"{_short(repr(instance))} is not of type 'object'", validator=spec["keyword"])
        return
    tag = spec["tag"]
    value = instance.get(tag)
    branch = branches.get(value) if isinstance(value, str) else None
    if branch is None:
        if tag not in instance:
            yield ValidationError(f"{tag!r} is a required property", validator=spec["keyword"])
        else:
            yield ValidationError(
                f"{_short(repr(value))} is not one of {sorted(branches)}", validator=spec["keyword"], path=[tag]
            )
        return
    yield from validator.descend(instance, branch)


@cache
def _dispatching_validator() -> Any:
    """Draft 2020-12 with the dispatch keyword; created once (a new class per run costs)."""
    from jsonschema import Draft202012Validator, validators

    return validators.extend(Draft202012Validator, {_DISPATCH: _dispatch_keyword})


def _unevaluated(node: Any) -> Iterator[Any]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("unevaluatedProperties", "unevaluatedItems"):
                yield value
            yield from _unevaluated(value)
    elif isinstance(node, list):
        for value in node:
            yield from _unevaluated(value)


def _consts(node: dict[str, Any]) -> frozenset[str]:
    return frozenset(
        m["const"] for m in (node.get("oneOf") or node.get("anyOf") or []) if isinstance(m.get("const"), str)
    )


def _stop_consts(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        const = _get(node, "properties", "stopReason", "const")
        if isinstance(const, str):
            yield const
        for value in node.values():
            yield from _stop_consts(value)
    elif isinstance(node, list):
        for value in node:
            yield from _stop_consts(value)


def _short(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


@cache
def schemas(version: int, unstable: bool = True) -> SchemaSet:
    """The compiled schema of ``version`` (the draft superset with ``unstable``), built once."""
    return SchemaSet(version, unstable)


def _get(value: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value
