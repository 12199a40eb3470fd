"""What the official schema knows of a frame: the marks the inspector's JSON tree shows.

Owns: walking a decoded JSON-RPC frame beside the shipped ACP JSON Schema of its protocol version
(the draft superset, so a draft field is not called unknown) and saying which paths are ``_meta``
(extension data, reserved by ACP for implementations) and which object keys the schema does not
define for that place ("unknown": a typo, a future field or a private one).

Must not know: SQL, HTTP, Datasette, how the tree is drawn. Pure: frames in, marks out.

Rule: say "unknown" only when sure. Where the schema cannot be followed (an unknown method, a
union none of whose branches fits the value, a free-form object), nothing below is marked.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from acp_proxy.protocol import vocabulary as acp

__all__ = ["marks"]

Mark = dict[str, Any]  # {"path": [key or index, ...], "mark": "meta" | "unknown"}

_ENVELOPE = {
    "request": {"jsonrpc", "id", "method", "params"},
    "notification": {"jsonrpc", "method", "params"},
    "response": {"jsonrpc", "id", "result"},
    "error": {"jsonrpc", "id", "error"},
}
_ERROR_FIELDS = {"code", "message", "data"}
_MAX_DEPTH = 64


def marks(frame: Any, kind: str | None, method: str | None, version: int | None = None) -> list[Mark]:
    """Marks for one decoded frame. ``kind`` and ``method`` are the recorded ones (a response
    carries its request's method); ``version`` the negotiated protocol version (1 if unknown)."""
    out: list[Mark] = []
    if not isinstance(frame, dict) or kind not in _ENVELOPE:
        _metas(frame, [], out, 0)
        return out
    version = version if version in acp.PROTOCOL_VERSIONS else 1
    defs = _defs(version)
    for key, value in frame.items():
        path = [key]
        if key == "_meta":
            out.append({"path": path, "mark": "meta"})
        elif key not in _ENVELOPE[kind]:
            out.append({"path": path, "mark": "unknown"})
        elif key in ("params", "result"):
            schema = _method_schema(version, method, "params" if key == "params" else "result")
            if schema is None:
                _metas(value, path, out, 0)
            else:
                _walk(defs, [schema], value, path, out, 0)
        elif key == "error" and isinstance(value, dict):
            for k in value:
                if k == "_meta":
                    out.append({"path": [key, k], "mark": "meta"})
                elif k not in _ERROR_FIELDS:
                    out.append({"path": [key, k], "mark": "unknown"})
    return out


@cache
def _defs(version: int) -> dict[str, Any]:
    return acp.load_schema(version, unstable=True).get("$defs", {})


@cache
def _method_schema(version: int, method: str | None, part: str) -> dict[str, Any] | None:
    """The schema of a method's params (``Request``/``Notification`` types) or result
    (``Response`` types), from the ``x-method`` the schema puts on each of them."""
    if not method:
        return None
    defs = _defs(version)
    names = [
        name
        for name, node in defs.items()
        if isinstance(node, dict)
        and node.get("x-method") == method
        and (name.endswith("Response") if part == "result" else not name.endswith("Response"))
    ]
    if not names:
        return None
    return {"anyOf": [{"$ref": f"#/$defs/{name}"} for name in names]}


def _metas(value: Any, path: list[Any], out: list[Mark], depth: int) -> None:
    """Only ``_meta`` keys: for places the schema cannot follow."""
    if depth > _MAX_DEPTH:
        return
    if isinstance(value, dict):
        for k, v in value.items():
            if k == "_meta":
                out.append({"path": [*path, k], "mark": "meta"})
            else:
                _metas(v, [*path, k], out, depth + 1)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _metas(v, [*path, i], out, depth + 1)


def _walk(defs: dict[str, Any], nodes: list[Any], value: Any, path: list[Any], out: list[Mark], depth: int) -> None:
    if depth > _MAX_DEPTH:
        return
    parts = _expand_all(defs, nodes, value, depth)
    if parts is None:
        _metas(value, path, out, depth)
        return
    if isinstance(value, dict):
        props: dict[str, list[Any]] = {}
        extra: list[Any] = []
        free = False
        for part in parts:
            for k, sub in (part.get("properties") or {}).items():
                props.setdefault(k, []).append(sub)
            more = part.get("additionalProperties")
            if more is True or (isinstance(more, dict) and not more):
                free = True
            elif isinstance(more, dict):
                extra.append(more)
        if not props and not extra:
            free = True  # a free-form object: the schema says nothing of its keys
        for k, v in value.items():
            here = [*path, k]
            if k == "_meta":
                out.append({"path": here, "mark": "meta"})
            elif k in props:
                _walk(defs, props[k], v, here, out, depth + 1)
            elif extra:
                _walk(defs, extra, v, here, out, depth + 1)
            elif free:
                _metas(v, here, out, depth + 1)
            else:
                out.append({"path": here, "mark": "unknown"})
    elif isinstance(value, list):
        items = [p["items"] for p in parts if isinstance(p.get("items"), (dict, bool))]
        for i, v in enumerate(value):
            if items:
                _walk(defs, items, v, [*path, i], out, depth + 1)
            else:
                _metas(v, [*path, i], out, depth + 1)


def _expand_all(defs: dict[str, Any], nodes: list[Any], value: Any, depth: int) -> list[dict[str, Any]] | None:
    parts: list[dict[str, Any]] = []
    for node in nodes:
        got = _expand(defs, node, value, depth)
        if got is None:
            return None
        parts.extend(got)
    return parts


def _expand(defs: dict[str, Any], node: Any, value: Any, depth: int) -> list[dict[str, Any]] | None:
    """``node`` as a flat list of plain schema parts that apply to ``value`` (references and
    ``allOf`` followed, ``anyOf``/``oneOf`` narrowed to the branches the value fits); None when
    the schema cannot be followed here."""
    if depth > _MAX_DEPTH:
        return None
    if node is True or node == {}:
        return [{}]
    if not isinstance(node, dict):
        return None
    parts: list[dict[str, Any]] = []
    ref = node.get("$ref")
    if isinstance(ref, str):
        target = defs.get(ref.rsplit("/", 1)[-1]) if ref.startswith("#/$defs/") else None
        if target is None:
            return None
        got = _expand(defs, target, value, depth + 1)
        if got is None:
            return None
        parts.extend(got)
    plain = {k: v for k, v in node.items() if k not in ("$ref", "allOf", "anyOf", "oneOf")}
    parts.append(plain)
    for sub in node.get("allOf") or []:
        got = _expand(defs, sub, value, depth + 1)
        if got is None:
            return None
        parts.extend(got)
    for key in ("anyOf", "oneOf"):
        if key not in node:
            continue
        fitting = []
        for branch in node[key]:
            got = _expand(defs, branch, value, depth + 1)
            if got is not None and _fits(got, value):
                fitting.extend(got)
        if not fitting:
            return None
        parts.extend(fitting)
    return parts


_TYPES = {
    "object": dict,
    "array": list,
    "string": str,
    "boolean": bool,
    "null": type(None),
}


def _type_ok(wanted: Any, value: Any) -> bool:
    names = wanted if isinstance(wanted, list) else [wanted]
    for name in names:
        if name in ("integer", "number"):
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return True
        elif name in _TYPES and isinstance(value, _TYPES[name]):
            return True
    return False


def _fits(parts: list[dict[str, Any]], value: Any) -> bool:
    """Whether a branch can describe ``value``: its types, and the constants that tell a union's
    variants apart (``sessionUpdate``, ``type``, ...)."""
    for part in parts:
        if "type" in part and not _type_ok(part["type"], value):
            return False
        if "const" in part and part["const"] != value:
            return False
        if "enum" in part and value not in part["enum"]:
            return False
        if isinstance(value, dict):
            for k, sub in (part.get("properties") or {}).items():
                if isinstance(sub, dict) and "const" in sub:
                    if k in value and value[k] != sub["const"]:
                        return False
                    if k not in value and k in (part.get("required") or []):
                        return False
    return True
