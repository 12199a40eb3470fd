"""JSON Schema compiled to Python: one plain function per schema that says valid or not.

Owns: turning a (refs-inlined) draft 2020-12 schema into the source of a Python function
``valid(instance) -> bool`` and compiling it once. It answers exactly what
``jsonschema.Draft202012Validator(schema).is_valid(instance)`` answers (without a format
checker, as the checks run it) for instances that are JSON values as ``msgspec`` decodes them:
dict, list, str, int, float, bool, None. Why: jsonschema walks the schema for every instance,
building a validator object per subschema (``evolve``); that was 85% of `acp-proxy check`.
Here the walk happens once, at compile time, and a chunk's check is a few dozen Python
operations.

Only what the ACP schemas use is compiled; a schema with any other validating keyword raises
``Unsupported`` and its caller keeps jsonschema for it. Only the verdict comes from here: the
message of a finding still comes from jsonschema (``SchemaSet.first_error``).

Must not know: the ACP schema's types, frames, findings.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

DISPATCH = "x-acp-proxy-dispatch"
"""The keyword of a tagged union rewritten to its one branch (``schema._dispatch``)."""

# Keywords that validate in draft 2020-12 (jsonschema's Draft202012Validator.VALIDATORS, and
# $ref / $dynamicRef). Any keyword not listed is an annotation jsonschema ignores.
_VALIDATING = frozenset(
    {
        "$ref",
        "$dynamicRef",
        "additionalProperties",
        "allOf",
        "anyOf",
        "const",
        "contains",
        "dependentRequired",
        "dependentSchemas",
        "enum",
        "exclusiveMaximum",
        "exclusiveMinimum",
        "format",
        "if",
        "items",
        "maxItems",
        "maxLength",
        "maxProperties",
        "maximum",
        "minItems",
        "minLength",
        "minProperties",
        "minimum",
        "multipleOf",
        "not",
        "oneOf",
        "pattern",
        "patternProperties",
        "prefixItems",
        "properties",
        "propertyNames",
        "required",
        "type",
        "unevaluatedItems",
        "unevaluatedProperties",
        "uniqueItems",
        DISPATCH,
    }
)
_COMPILED = frozenset(
    {
        "$ref",
        "additionalProperties",
        "allOf",
        "anyOf",
        "const",
        "enum",
        "format",  # an annotation: the checks validate without a format checker
        "items",
        "maximum",
        "minItems",
        "minLength",
        "minimum",
        "not",
        "oneOf",
        "properties",
        "required",
        "type",
        DISPATCH,
    }
)

# One test per JSON type, as jsonschema's type checker defines them (bool is not a number;
# a float with an integral value is an integer).
_TYPE_TESTS = {
    "object": "isinstance({v}, dict)",
    "array": "isinstance({v}, list)",
    "string": "isinstance({v}, str)",
    "null": "{v} is None",
    "boolean": "isinstance({v}, bool)",
    "number": "(isinstance({v}, (int, float)) and not isinstance({v}, bool))",
    "integer": (
        "((isinstance({v}, int) and not isinstance({v}, bool)) or (isinstance({v}, float) and {v}.is_integer()))"
    ),
}


_MAX_DEPTH = 12


class Unsupported(Exception):
    """The schema uses a keyword (or a reference) this compiler does not handle."""


class _Compiler:
    def __init__(self, resolve: Callable[[str], Any]) -> None:
        self._resolve = resolve
        self._constants: dict[str, Any] = {"_equal": _equal}
        self._functions: list[str] = []
        self._refs: dict[str, str] = {}
        """Absolute $ref -> the name of its function (compiled once, may recurse)."""
        self._names = 0

    def _name(self, prefix: str) -> str:
        self._names += 1
        return f"{prefix}{self._names}"

    def _constant(self, value: Any) -> str:
        name = self._name("_c")
        self._constants[name] = value
        return name

    def function(self, schema: Any) -> str:
        """Compile ``schema`` into a new function; its name."""
        name = self._name("_f")
        body = self._emit(schema, "x", 1)
        self._functions.append("\n".join([f"def {name}(x):", *body, "    return True"]))
        return name

    def _ref(self, ref: str) -> str:
        name = self._refs.get(ref)
        if name is None:
            name = self._refs[ref] = self._name("_r")
            body = self._emit(self._resolve(ref), "x", 1)
            self._functions.append("\n".join([f"def {name}(x):", *body, "    return True"]))
        return name

    def _emit(self, schema: Any, v: str, depth: int) -> list[str]:
        """Lines (at ``depth``) that ``return False`` when the value named ``v`` is invalid."""
        pad = "    " * depth
        if schema is True:
            return []
        if depth > _MAX_DEPTH and schema is not False:
            # Python limits how deep blocks nest: deeper parts become functions of their own.
            return [f"{pad}if not {self.function(schema)}({v}):", f"{pad}    return False"]
        if schema is False:
            return [f"{pad}return False"]
        if not isinstance(schema, Mapping):
            raise Unsupported(f"schema {schema!r}")
        unknown = (schema.keys() & _VALIDATING) - _COMPILED
        if schema.get("unevaluatedProperties") is True:
            unknown.discard("unevaluatedProperties")  # every property valid against `true`: a no-op
        if unknown:
            raise Unsupported(f"keywords {sorted(unknown)}")
        out: list[str] = []
        types = schema.get("type")
        if types is not None:
            names = [types] if isinstance(types, str) else types
            if not isinstance(names, list) or not names or any(t not in _TYPE_TESTS for t in names):
                raise Unsupported(f"type {types!r}")
            test = " or ".join(_TYPE_TESTS[t].format(v=v) for t in names)
            out.append(f"{pad}if not ({test}):")
            out.append(f"{pad}    return False")
        if "const" in schema:
            const = schema["const"]
            if isinstance(const, str):
                out.append(f"{pad}if {v} != {const!r}:")
            else:
                out.append(f"{pad}if not _equal({v}, {self._constant(const)}):")
            out.append(f"{pad}    return False")
        if "enum" in schema:
            values = schema["enum"]
            if not isinstance(values, list):
                raise Unsupported("enum")
            if all(isinstance(e, str) for e in values):
                out.append(f"{pad}if not (isinstance({v}, str) and {v} in {self._constant(frozenset(values))}):")
            else:
                out.append(f"{pad}if not any(_equal({v}, e) for e in {self._constant(values)}):")
            out.append(f"{pad}    return False")
        for keyword, op in (("minimum", "<"), ("maximum", ">")):
            if keyword in schema:
                bound = schema[keyword]
                if not isinstance(bound, (int, float)) or isinstance(bound, bool):
                    raise Unsupported(keyword)
                number = _TYPE_TESTS["number"].format(v=v)
                out.append(f"{pad}if {number} and {v} {op} {bound!r}:")
                out.append(f"{pad}    return False")
        if "minLength" in schema:
            out.append(f"{pad}if isinstance({v}, str) and len({v}) < {int(schema['minLength'])}:")
            out.append(f"{pad}    return False")
        out += self._object(schema, v, depth)
        out += self._array(schema, v, depth)
        for sub in schema.get("allOf", ()):
            out += self._emit(sub, v, depth)
        for keyword in ("anyOf", "oneOf"):
            consts = _string_consts(schema.get(keyword))
            if consts is not None:  # an enum written as a union of consts: one set lookup
                out.append(f"{pad}if not (isinstance({v}, str) and {v} in {self._constant(consts)}):")
                out.append(f"{pad}    return False")
        if "anyOf" in schema and _string_consts(schema["anyOf"]) is None:
            # Plain tests first (`null`, a const), calls after: the verdict is the same in any
            # order, and the common "X or null" often ends at the first test.
            plain = [e for e in (self._expression(sub, v) for sub in schema["anyOf"]) if e is not None]
            calls = [self._test(sub, v) for sub in schema["anyOf"] if self._expression(sub, v) is None]
            tests = [f"({e})" for e in plain] + calls
            out.append(f"{pad}if not ({' or '.join(tests)}):")
            out.append(f"{pad}    return False")
        if "oneOf" in schema and _string_consts(schema["oneOf"]) is None:
            tests = [self._test(sub, v) for sub in schema["oneOf"]]
            out.append(f"{pad}if ({' + '.join(tests)}) != 1:")
            out.append(f"{pad}    return False")
        if "not" in schema:
            out.append(f"{pad}if {self.function(schema['not'])}({v}):")
            out.append(f"{pad}    return False")
        if "$ref" in schema:
            out.append(f"{pad}if not {self._ref(schema['$ref'])}({v}):")
            out.append(f"{pad}    return False")
        if DISPATCH in schema:
            out += self._dispatch(schema[DISPATCH], v, depth)
        return out

    def _test(self, schema: Any, v: str) -> str:
        """A Python expression, true when ``v`` is valid: inline for a schema of plain tests
        (types, consts, enums: an enum written as a oneOf of consts), else a function call."""
        expr = self._expression(schema, v)
        return f"({expr})" if expr is not None else f"{self.function(schema)}({v})"

    def _expression(self, schema: Any, v: str) -> str | None:
        if schema is True or schema is False:
            return str(schema)
        if not isinstance(schema, Mapping):
            raise Unsupported(f"schema {schema!r}")
        if (schema.keys() & _VALIDATING) - {"type", "const", "enum", "format"}:
            return None
        parts: list[str] = []
        types = schema.get("type")
        if types is not None:
            names = [types] if isinstance(types, str) else types
            if not isinstance(names, list) or not names or any(t not in _TYPE_TESTS for t in names):
                raise Unsupported(f"type {types!r}")
            parts.append(" or ".join(_TYPE_TESTS[t].format(v=v) for t in names))
        if "const" in schema:
            const = schema["const"]
            parts.append(f"{v} == {const!r}" if isinstance(const, str) else f"_equal({v}, {self._constant(const)})")
        if "enum" in schema:
            values = schema["enum"]
            if not isinstance(values, list):
                raise Unsupported("enum")
            if all(isinstance(e, str) for e in values):
                parts.append(f"isinstance({v}, str) and {v} in {self._constant(frozenset(values))}")
            else:
                parts.append(f"any(_equal({v}, e) for e in {self._constant(values)})")
        # Each part's verdict as a bool (True + True == 2 counts the members of a oneOf).
        return " and ".join(f"({p})" for p in parts) if parts else "True"

    def _object(self, schema: Mapping[str, Any], v: str, depth: int) -> list[str]:
        props = schema.get("properties")
        required = schema.get("required")
        extra = schema.get("additionalProperties", True)
        if props is None and not required and extra is True:
            return []
        pad = "    " * depth
        inner: list[str] = []
        if required:
            test = " and ".join(f"{name!r} in {v}" for name in required)
            inner += [f"{pad}    if not ({test}):", f"{pad}        return False"]
        for name, sub in (props or {}).items():
            if sub is True:
                continue
            w = f"v{depth}_{self._names}"
            self._names += 1
            body = self._emit(sub, w, depth + 2)
            if body:
                inner.append(f"{pad}    {w} = {v}.get({name!r}, _MISSING)")
                inner.append(f"{pad}    if {w} is not _MISSING:")
                inner += body
        if extra is not True:
            known = self._constant(frozenset(props or {}))
            if extra is False:
                inner += [f"{pad}    if not {known}.issuperset({v}):", f"{pad}        return False"]
            else:
                check = self.function(extra)
                inner += [
                    f"{pad}    for k, w in {v}.items():",
                    f"{pad}        if k not in {known} and not {check}(w):",
                    f"{pad}            return False",
                ]
        if not inner:
            return []
        # Under `type: object` the value is a dict already (a constant test compiles to nothing).
        guard = "True" if schema.get("type") == "object" else f"isinstance({v}, dict)"
        return [f"{pad}if {guard}:", *inner]

    def _array(self, schema: Mapping[str, Any], v: str, depth: int) -> list[str]:
        pad = "    " * depth
        out: list[str] = []
        if "minItems" in schema:
            out += [
                f"{pad}if isinstance({v}, list) and len({v}) < {int(schema['minItems'])}:",
                f"{pad}    return False",
            ]
        if "items" in schema and schema["items"] is not True:
            check = self.function(schema["items"])
            out += [
                f"{pad}if isinstance({v}, list):",
                f"{pad}    for w in {v}:",
                f"{pad}        if not {check}(w):",
                f"{pad}            return False",
            ]
        return out

    def _dispatch(self, spec: Mapping[str, Any], v: str, depth: int) -> list[str]:
        pad = "    " * depth
        t = f"t{depth}_{self._names}"
        self._names += 1
        out = [
            f"{pad}if not isinstance({v}, dict):",
            f"{pad}    return False",
            f"{pad}{t} = {v}.get({spec['tag']!r})",
        ]
        first = True
        for const, branch in spec["branches"].items():
            out.append(f"{pad}{'if' if first else 'elif'} {t} == {const!r}:")
            out += self._emit(branch, v, depth + 1) or [f"{pad}    pass"]
            first = False
        out += [f"{pad}else:", f"{pad}    return False"]
        return out

    def build(self, entry: str) -> Callable[[Any], bool]:
        source = "\n\n".join(self._functions)
        namespace: dict[str, Any] = {"_MISSING": _MISSING, **self._constants}
        exec(compile(source, "<acp-proxy compiled schema>", "exec"), namespace)
        fn: Callable[[Any], bool] = namespace[entry]
        return fn


def _string_consts(members: Any) -> frozenset[str] | None:
    """The consts of a union whose every member is exactly "this string" (``const``, with at
    most ``type: string`` and annotations), all distinct: exactly one member matches a string in
    the set, none anything else. None for any other union."""
    if not isinstance(members, list) or not members:
        return None
    consts = []
    for member in members:
        if (
            not isinstance(member, Mapping)
            or (member.keys() & _VALIDATING) - {"const", "type", "format"}
            or not isinstance(member.get("const"), str)
            or member.get("type", "string") != "string"
        ):
            return None
        consts.append(member["const"])
    return frozenset(consts) if len(set(consts)) == len(consts) else None


def _equal(one: Any, two: Any) -> bool:
    """jsonschema's equality, for consts and enums that are not strings (1 == 1.0, True != 1);
    imported on first use: the ACP schemas' consts are strings, and jsonschema is slow to import."""
    from jsonschema._utils import equal

    return bool(equal(one, two))


class _Missing:
    __slots__ = ()


_MISSING = _Missing()


def compile_schema(schema: Any, resolve: Callable[[str], Any]) -> Callable[[Any], bool]:
    """``valid(instance) -> bool`` for ``schema``; ``resolve`` gives the schema an absolute
    ``$ref`` names (raising ``Unsupported`` if it cannot). Raises ``Unsupported``."""
    compiler = _Compiler(resolve)
    try:
        entry = compiler.function(schema)
        return compiler.build(entry)
    except (RecursionError, SyntaxError, MemoryError) as exc:
        raise Unsupported(f"too big to compile ({type(exc).__name__})") from exc
