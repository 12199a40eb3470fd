"""Conformance checks: recorded frames in, findings out (Wireshark's "expert info" for ACP).

Owns: the rules a conversation must keep — JSON Schema validation of each frame's payload
against the official schema of the negotiated version (the ``$defs`` type whose ``x-method``
names the method, on the side it travelled; a response against the result type of the request
it answers; a ``session/update`` against its variant) and the lifecycle rules of the spec that no
schema can state (a prompt's ``messageId`` and its ``user_message``, ``running`` ... ``idle`` with
a stop reason, cancellation, compaction order, notices never replayed, capabilities, custom
names, JSON-RPC pairing). Every rule has an id, a severity and the spec section it comes from
(``RULES``); each finding points at the frame that broke it (``run_id``, ``seq``).

Must not know: SQL, pipes, processes, click or rich. A ``Checker`` is fed frames in relay order —
``FrameRecord`` objects (live) or ``frames`` rows as dicts (recorded) — that the tracker has
already annotated (``method`` and ``request_seq`` on responses, ``replay``, ``unknown``); it
returns findings and keeps only the per-connection state the rules need.

Rule 1: a check never raises on odd input. A frame that does not decode, a payload of the wrong
shape, a version with no schema: each is a finding or is skipped, never an exception.

Rule 2: the schema is the authority for shapes; the rules below only state order and pairing.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass
from functools import cache
from typing import Any, Literal

import msgspec

from .protocol import vocabulary as acp

Severity = Literal["error", "warning", "info"]

_P2 = "v2-draft/prompt-lifecycle.md"
_P1 = "v1/prompt-turn.mdx"


@dataclass(frozen=True, slots=True)
class Rule:
    id: str
    severity: Severity
    spec: str
    summary: str


RULES: dict[str, Rule] = {
    r.id: r
    for r in (
        Rule(
            "jsonrpc/not-json",
            "error",
            "v1/transports.mdx#stdio",
            "every line on stdin/stdout is a JSON-RPC message",
        ),
        Rule(
            "jsonrpc/unknown-id",
            "error",
            "https://www.jsonrpc.org/specification#response_object",
            "a response answers a request that is pending",
        ),
        Rule(
            "jsonrpc/duplicate-id",
            "error",
            "https://www.jsonrpc.org/specification#request_object",
            "a request id is not reused while a request with that id is pending",
        ),
        Rule(
            "jsonrpc/unanswered",
            "warning",
            "https://www.jsonrpc.org/specification#response_object",
            "every request is answered before the connection ends",
        ),
        Rule(
            "ext/method-name",
            "warning",
            "v1/extensibility.mdx#extension-methods",
            "methods outside the schema start with _",
        ),
        Rule(
            "ext/update-name",
            "warning",
            "v1/extensibility.mdx#extension-methods",
            "session/update variants outside the schema start with _",
        ),
        Rule(
            "ext/stop-reason",
            "warning",
            f"{_P2}#stop-reasons",
            "stop reasons outside the schema start with _",
        ),
        Rule(
            "prompt/message-id",
            "error",
            f"{_P2}#2-prompt-accepted",
            "a v2 prompt response carries a non-empty messageId",
        ),
        Rule(
            "prompt/user-message",
            "error",
            f"{_P2}#2-prompt-accepted",
            "an accepted prompt is reported by a user_message(_chunk) with the same messageId",
        ),
        Rule(
            "prompt/distinct-message-id",
            "error",
            f"{_P2}#2-prompt-accepted",
            "distinct prompts get distinct message ids",
        ),
        Rule(
            "turn/running-before-output",
            "error",
            f"{_P2}#3-agent-reports-output",
            "state_update running comes before the agent's output for a prompt",
        ),
        Rule(
            "turn/idle-stop-reason",
            "error",
            f"{_P2}#4-report-completion",
            "an idle state_update that ends foreground work carries a stop reason",
        ),
        Rule(
            "turn/unfinished",
            "warning",
            f"{_P2}#4-report-completion",
            "every turn ends (v2: idle with a stop reason) before the connection ends",
        ),
        Rule(
            "cancel/stop-reason",
            "error",
            f"{_P2}#cancellation",
            "after session/cancel the turn ends with stop reason cancelled, not an error",
        ),
        Rule(
            "cancel/stop-reason-race",
            "warning",
            f"{_P2}#cancellation",
            "after session/cancel the turn ends cancelled (it may have finished before the cancel arrived)",
        ),
        Rule(
            "cancel/permission",
            "error",
            f"{_P2}#cancellation",
            "after session/cancel pending permission requests are answered cancelled",
        ),
        Rule(
            "compaction/order",
            "error",
            f"{_P2}#session-compaction",
            "compaction: first compaction_update before chunks, chunks only while in progress",
        ),
        Rule(
            "compaction/terminal",
            "error",
            f"{_P2}#session-compaction",
            "compaction: exactly one terminal status per compactionId",
        ),
        Rule(
            "replay/notice",
            "error",
            "rfds/session-notices.mdx#delivery-and-history",
            "live-only notices are never sent inside a history replay window",
        ),
        Rule(
            "load/replay-after-response",
            "error",
            "v1/session-setup.mdx#loading-a-session",
            "session/load replays the history before responding",
        ),
        Rule(
            "resume/replayed",
            "error",
            "v1/session-setup.mdx#resuming-a-session",
            "v1 session/resume does not replay history",
        ),
        Rule(
            "tool/unknown-call",
            "error",
            "v1/tool-calls.mdx#updating",
            "v1 tool_call_update names a tool call announced by tool_call",
        ),
        Rule(
            "capability/missing",
            "error",
            "v1/initialization.mdx#capabilities",
            "capability-gated methods are used only when the other side advertised the capability",
        ),
        Rule("schema/params", "error", "schema", "request and notification params match the schema"),
        Rule("schema/result", "error", "schema", "a response's result matches its request's result type"),
        Rule("schema/update", "error", "schema", "a session/update variant matches the schema"),
    )
}


@dataclass(frozen=True, slots=True)
class Finding:
    rule_id: str
    severity: Severity
    message: str
    spec: str
    run_id: int | None
    seq: int | None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


_OTHER = {"c2a": "a2c", "a2c": "c2a"}
# The schema's x-side names the receiver: "agent" types travel client->agent.
_SIDE = {"c2a": "agent", "a2c": "client"}
_OUTPUT_PREFIXES = ("agent_message", "agent_thought", "tool_call", "plan")
_HISTORY_CONTENT = frozenset(
    {
        "user_message_chunk",
        "user_message",
        "agent_message_chunk",
        "agent_message",
        "agent_thought_chunk",
        "tool_call",
    }
)
_COMPACTION_TERMINAL = frozenset({"completed", "failed", "cancelled"})

# Capability-gated methods: (version, method) -> (who advertises it, path into their capabilities).
# v1 names from initialization.mdx / session-setup.mdx; a session capability is an object whose
# presence (non-null) means support. Only what the other side must advertise first is listed.
_GATES: dict[tuple[int, str], tuple[str, tuple[str, ...]]] = {
    (1, "session/load"): ("agent", ("loadSession",)),
    (1, "session/resume"): ("agent", ("sessionCapabilities", "resume")),
    (1, "session/list"): ("agent", ("sessionCapabilities", "list")),
    (1, "session/close"): ("agent", ("sessionCapabilities", "close")),
    (1, "session/fork"): ("agent", ("sessionCapabilities", "fork")),
    (1, "session/delete"): ("agent", ("sessionCapabilities", "delete")),
    (1, "fs/read_text_file"): ("client", ("fs", "readTextFile")),
    (1, "fs/write_text_file"): ("client", ("fs", "writeTextFile")),
    (1, "terminal/create"): ("client", ("terminal",)),
    (1, "terminal/output"): ("client", ("terminal",)),
    (1, "terminal/kill"): ("client", ("terminal",)),
    (1, "terminal/release"): ("client", ("terminal",)),
    (1, "terminal/wait_for_exit"): ("client", ("terminal",)),
    (2, "session/fork"): ("agent", ("session", "fork")),
    (2, "session/delete"): ("agent", ("session", "delete")),
    (2, "session/archive"): ("agent", ("session", "archive")),
    (2, "session/unarchive"): ("agent", ("session", "archive")),
}


# -- schema validation ---------------------------------------------------------------------------


class SchemaSet:
    """Validators for one schema file, compiled lazily once per type and shared (``schemas``)."""

    def __init__(self, version: int, unstable: bool) -> None:
        from referencing import Registry, Resource
        from referencing.jsonschema import DRAFT202012

        root = copy.deepcopy(acp.load_schema(version, unstable=unstable))
        defs: dict[str, Any] = root["$defs"]
        self.version = version
        self.file = f"v{version}.schema{'.unstable' if unstable else ''}.json"
        self._sources: dict[str, str] = {}
        """Synthetic def name -> the official def it was cut from (for spec references)."""
        self.params: dict[tuple[str, str], str] = {}
        self.results: dict[tuple[str, str], str] = {}
        for name, node in defs.items():
            method, side = node.get("x-method"), node.get("x-side")
            if not isinstance(method, str):
                continue
            sides = ("agent", "client") if side == "protocol" else (side,)
            table = self.results if name.endswith("Response") else self.params
            for s in sides:
                table[(method, s)] = name
        # session/update's params are checked without their `update`, which is checked against
        # its own variant: a failed oneOf over every variant says nothing useful.
        note = self.params.get(("session/update", "client"))
        if note is not None:
            shell = copy.deepcopy(defs[note])
            shell.get("properties", {})["update"] = True
            defs["_acp_proxy_SessionNotificationShell"] = shell
            self.params[("session/update", "client")] = "_acp_proxy_SessionNotificationShell"
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
        uri = f"urn:acp-proxy:schema:v{version}{':unstable' if unstable else ''}"
        root["$id"] = uri
        resource = Resource.from_contents(root, default_specification=DRAFT202012)
        self._registry = Registry().with_resource(uri, resource)
        self._uri = uri
        self._defs = defs
        self._validator_class = _dispatching_validator()
        # The dispatch rewrite (``_dispatch``) drops the failed branches' annotations, which only
        # unevaluatedProperties/Items would read; a file that uses them for real keeps its unions.
        self._dispatch_ok = not any(value is not True for value in _unevaluated(root))
        self._compiled: dict[str, Any] = {}

    def source_def(self, name: str) -> str:
        return self._sources.get(name, name)

    def validator(self, name: str) -> Any:
        found = self._compiled.get(name)
        if found is None:
            # Refs inlined up front: resolving a $ref through the registry on every frame costs
            # about half of a chunk's validation (measured). Recursive refs stay refs, absolute.
            schema = self._inline(self._defs[name], frozenset({name}))
            found = self._compiled[name] = self._validator_class(schema, registry=self._registry)
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

    def first_error(self, name: str, instance: Any) -> str | None:
        """None when ``instance`` is valid; else "<json path>: <message>" of the most relevant error."""
        from jsonschema.exceptions import best_match

        validator = self.validator(name)
        if validator.is_valid(instance):  # the common case, and cheaper than collecting errors
            return None
        error = best_match(validator.iter_errors(instance))
        if error is None:
            return None
        return f"{error.json_path}: {_short(error.message)}"


# -- discriminated unions: one branch validated, not all of them ----------------------------------

_DISPATCH = "x-acp-proxy-dispatch"


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


# -- reading a frame, whichever shape it came in -------------------------------------------------

_decoder = msgspec.json.Decoder()


def _field(rec: Any, name: str) -> Any:
    if isinstance(rec, Mapping):
        return rec.get(name)
    return getattr(rec, name, None)


def _payload(rec: Any) -> Any:
    """The frame's JSON value, or None when it has none (stderr, cut, not JSON)."""
    if _field(rec, "cut"):
        return None
    line = rec.get("raw") if isinstance(rec, Mapping) else getattr(rec, "line", None)
    if line is None:
        return None
    try:
        return _decoder.decode(line)
    except (msgspec.DecodeError, UnicodeError):
        return None


def _get(value: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


# -- per-connection state ------------------------------------------------------------------------


@dataclass(slots=True)
class _Request:
    seq: int
    direction: str
    rpc_id: str | None
    method: str | None
    session_id: str | None
    cancelled: bool = False
    """A permission request pending when its session was cancelled."""


@dataclass(slots=True)
class _Turn:
    """A prompt from its request to its end (v1: the response; v2: idle)."""

    seq: int
    session_id: str
    version: int | None
    accepted: bool = False
    message_id: str | None = None
    response_seq: int | None = None
    running: bool = False
    cancelled_at: int | None = None
    reported_output: bool = False


@dataclass(slots=True)
class _Session:
    user_ids: set[str]
    """messageIds of user_message(_chunk) updates seen (either order with the response)."""
    awaiting_user: dict[str, int]
    """messageId -> seq of a prompt response whose user_message has not been seen yet."""
    prompt_ids: dict[str, int]
    tools: set[str]
    compactions: dict[str, str]
    turns: list[_Turn]
    loaded_at: int | None = None
    """v1: seq of a session/load response; history after it (before a prompt) is late replay."""
    resuming: int = 0


def _new_session() -> _Session:
    return _Session(set(), {}, {}, set(), {}, [])


class Checker:
    """The rules, over one connection's frames in relay order. ``feed`` each, then ``finish``."""

    def __init__(self, *, version: int | None = None, schema: bool = True, unstable: bool = True) -> None:
        """``version``: the protocol version if known in advance (e.g. from the run row); the
        ``initialize`` exchange overrides it. ``schema``: validate payloads (the slow part).
        ``unstable``: validate against the draft schema (a superset of the stable one)."""
        self.version = version
        self._schema = schema
        self._unstable = unstable
        self._pending: dict[tuple[str, str | None], _Request] = {}
        self._by_seq: dict[int, _Request] = {}
        self._sessions: dict[str, _Session] = {}
        self._capabilities: dict[str, Any] = {}
        self._run_id: int | None = None
        self.frames = 0

    # -- interface -------------------------------------------------------------------------------

    def _schema_name(self) -> str:
        return f"v{self.version}" if self.version is not None else "v1 or v2"

    def feed(self, rec: Any) -> list[Finding]:
        out: list[Finding] = []
        try:
            self._feed(rec, out)
        except Exception as exc:  # Rule 1: a checker bug must not stop a check or a recording.
            out.append(
                self._finding("jsonrpc/not-json", rec, f"checker could not read this frame: {exc!r}", severity="info")
            )
        return out

    def finish(self, *, ended: bool = True) -> list[Finding]:
        """The connection ended (``ended``) or the recording stops here (a run still going):
        only an ended connection has unanswered requests and unfinished turns."""
        out: list[Finding] = []
        if not ended:
            return out
        for request in sorted(self._by_seq.values(), key=lambda r: r.seq):
            out.append(
                Finding(
                    "jsonrpc/unanswered",
                    "warning",
                    f"{request.method} request (id {request.rpc_id}) never answered",
                    RULES["jsonrpc/unanswered"].spec,
                    self._run_id,
                    request.seq,
                )
            )
        for sid, session in self._sessions.items():
            for message_id, seq in session.awaiting_user.items():
                out.append(
                    Finding(
                        "prompt/user-message",
                        "error",
                        f"no user_message with messageId {message_id!r} in session {sid}",
                        RULES["prompt/user-message"].spec,
                        self._run_id,
                        seq,
                    )
                )
            for turn in session.turns:
                if turn.version == 2:
                    out.append(
                        Finding(
                            "turn/unfinished",
                            "warning",
                            "prompt never reached idle before the connection ended",
                            RULES["turn/unfinished"].spec,
                            self._run_id,
                            turn.seq,
                        )
                    )
        self._by_seq.clear()
        self._pending.clear()
        return out

    # -- dispatch --------------------------------------------------------------------------------

    def _feed(self, rec: Any, out: list[Finding]) -> None:
        self.frames += 1
        self._run_id = _field(rec, "run_id")
        direction = _field(rec, "dir")
        if direction not in _OTHER:
            return
        kind = _field(rec, "kind")
        if kind == "invalid":
            if not _field(rec, "cut"):
                sender = "agent's stdout" if direction == "a2c" else "client's output (agent's stdin)"
                faulted = _field(rec, "fault")
                out.append(
                    self._finding(
                        "jsonrpc/not-json",
                        rec,
                        f"a line on the {sender} is not JSON-RPC"
                        + (f" (injected by the proxy: {faulted})" if faulted else ""),
                        severity="info" if faulted else None,
                    )
                )
            return
        if kind not in ("request", "notification", "response", "error"):
            return
        message = _payload(rec)
        if not isinstance(message, dict):
            return
        if kind == "request":
            self._request(rec, direction, message, out)
        elif kind == "notification":
            self._notification(rec, direction, message, out)
        else:
            self._response(rec, direction, message, out)

    def _finding(
        self, rule_id: str, rec: Any, message: str, severity: Severity | None = None, spec: str | None = None
    ) -> Finding:
        rule = RULES[rule_id]
        return Finding(
            rule_id,
            severity or rule.severity,
            message,
            spec or rule.spec,
            _field(rec, "run_id"),
            _field(rec, "seq"),
        )

    def _schema_set(self) -> SchemaSet | None:
        if not self._schema or self.version not in acp.PROTOCOL_VERSIONS:
            return None
        return schemas(self.version, self._unstable)

    def _validate(self, rule_id: str, rec: Any, name: str | None, instance: Any, what: str, out: list[Finding]) -> None:
        checker = self._schema_set()
        if checker is None or name is None:
            return
        error = checker.first_error(name, instance)
        if error is not None:
            shown = name.removeprefix("_acp_proxy_")
            out.append(
                self._finding(
                    rule_id,
                    rec,
                    f"{what} (v{checker.version} {shown}): {error}",
                    spec=f"schema/{checker.file}#/$defs/{checker.source_def(name)}",
                )
            )

    # -- requests --------------------------------------------------------------------------------

    def _request(self, rec: Any, direction: str, message: dict[str, Any], out: list[Finding]) -> None:
        method = _field(rec, "method")
        params = message.get("params")
        seq = _field(rec, "seq")
        if method == "initialize" and isinstance(params, dict) and self.version is None:
            # Until the agent answers, the client's proposal is the best guess for validating.
            proposed = params.get("protocolVersion")
            if isinstance(proposed, int) and proposed in acp.PROTOCOL_VERSIONS:
                self.version = proposed
        self._method_name(rec, method, out)
        self._gate(rec, direction, method, out)
        schema = self._schema_set()
        if schema is not None and isinstance(method, str):
            self._validate(
                "schema/params",
                rec,
                schema.params.get((method, _SIDE[direction])),
                params,
                f"{method} params",
                out,
            )
        rpc_id = _field(rec, "rpc_id")
        key = (direction, rpc_id)
        if key in self._pending:
            first = self._pending[key]
            out.append(
                self._finding(
                    "jsonrpc/duplicate-id",
                    rec,
                    f"id {rpc_id} reused while request seq {first.seq} ({first.method}) is pending",
                )
            )
        request = _Request(seq, direction, rpc_id, method, _field(rec, "session_id"))
        self._pending.setdefault(key, request)
        self._by_seq[seq] = request
        sid = request.session_id
        if method == "session/prompt" and sid is not None:
            session = self._session(sid)
            session.loaded_at = None
            session.turns.append(_Turn(seq, sid, self.version))
        elif method == "session/resume" and sid is not None and self.version == 1:
            self._session(sid).resuming += 1
        elif method == "initialize" and isinstance(params, dict):
            self._capabilities["client"] = params.get("clientCapabilities", params.get("capabilities"))

    def _method_name(self, rec: Any, method: Any, out: list[Finding]) -> None:
        if _field(rec, "unknown") == "future":
            out.append(
                self._finding(
                    "ext/method-name",
                    rec,
                    f"method {method!r} is not in the {self._schema_name()} schema and does not start with _",
                )
            )

    def _gate(self, rec: Any, direction: str, method: Any, out: list[Finding]) -> None:
        gate = _GATES.get((self.version, method)) if self.version is not None else None  # type: ignore[arg-type]
        if gate is None:
            return
        side, path = gate
        if side not in self._capabilities:
            return  # the initialize exchange was not seen: nothing to hold against
        value = _get(self._capabilities[side], *path)
        if value is None or value is False:
            out.append(
                self._finding(
                    "capability/missing",
                    rec,
                    f"{method} used but the {side} did not advertise {side}Capabilities." + ".".join(path),
                )
            )

    # -- notifications ---------------------------------------------------------------------------

    def _notification(self, rec: Any, direction: str, message: dict[str, Any], out: list[Finding]) -> None:
        method = _field(rec, "method")
        params = message.get("params")
        if method != "session/update":  # its `unknown` annotation is about the variant
            self._method_name(rec, method, out)
        schema = self._schema_set()
        if schema is not None and isinstance(method, str):
            self._validate(
                "schema/params",
                rec,
                schema.params.get((method, _SIDE[direction])),
                params,
                f"{method} params",
                out,
            )
        if method == "session/update" and isinstance(params, dict):
            self._update(rec, params, out)
        elif method == "session/cancel":
            sid = _field(rec, "session_id")
            if sid is None:
                return
            session = self._session(sid)
            for turn in session.turns:
                if turn.cancelled_at is None:
                    turn.cancelled_at = _field(rec, "seq")
            for request in self._by_seq.values():
                if request.method == "session/request_permission" and request.session_id == sid:
                    request.cancelled = True

    def _update(self, rec: Any, params: dict[str, Any], out: list[Finding]) -> None:
        update = params.get("update")
        if not isinstance(update, dict):
            return
        variant = _field(rec, "update_kind")
        schema = self._schema_set()
        if schema is not None and isinstance(variant, str):
            self._validate("schema/update", rec, schema.variants.get(variant), update, f"{variant} update", out)
        if _field(rec, "unknown") == "future":
            out.append(
                self._finding(
                    "ext/update-name",
                    rec,
                    f"update {variant!r} is not in the {self._schema_name()} schema and does not start with _",
                )
            )
        sid = _field(rec, "session_id")
        if sid is None or not isinstance(variant, str):
            return
        session = self._session(sid)
        replay = bool(_field(rec, "replay"))
        item = _field(rec, "item_id")
        if replay:
            if variant in acp.vocabulary(self.version).live_only:
                out.append(
                    self._finding(
                        "replay/notice",
                        rec,
                        f"live-only {variant} sent inside a history replay window"
                        + ("" if _field(rec, "forwarded") != 0 else " (withheld by the proxy)"),
                    )
                )
            if variant == "tool_call" and isinstance(item, str):
                session.tools.add(item)
            return
        if self.version == 1 and session.resuming and variant in _HISTORY_CONTENT:
            out.append(self._finding("resume/replayed", rec, f"{variant} sent while session/resume was pending"))
        if self.version == 1 and session.loaded_at is not None and variant in _HISTORY_CONTENT:
            out.append(
                self._finding(
                    "load/replay-after-response",
                    rec,
                    f"{variant} after the session/load response (seq {session.loaded_at}) and before any prompt",
                )
            )
        if variant in ("user_message", "user_message_chunk"):
            message_id = update.get("messageId")
            if isinstance(message_id, str):
                session.user_ids.add(message_id)
                session.awaiting_user.pop(message_id, None)
        elif variant.startswith(_OUTPUT_PREFIXES) and self.version == 2:
            for turn in session.turns:
                if not turn.running and not turn.reported_output:
                    turn.reported_output = True
                    out.append(
                        self._finding(
                            "turn/running-before-output",
                            rec,
                            f"{variant} for the prompt of seq {turn.seq} before state_update running",
                        )
                    )
        if variant == "tool_call" and isinstance(item, str):
            session.tools.add(item)
        elif (
            variant == "tool_call_update" and self.version == 1 and isinstance(item, str) and item not in session.tools
        ):
            out.append(self._finding("tool/unknown-call", rec, f"tool_call_update for unannounced toolCallId {item!r}"))
        elif variant == "state_update":
            self._state(rec, session, update, out)
        elif variant in ("compaction_update", "compaction_summary_chunk"):
            self._compaction(rec, session, variant, update, out)

    def _state(self, rec: Any, session: _Session, update: dict[str, Any], out: list[Finding]) -> None:
        state = update.get("state")
        if state in ("running", "requires_action"):
            for turn in session.turns:
                turn.running = True
            return
        if state != "idle":
            return
        # As the tracker does: idle ends the work an accepted (or worked-on) prompt joined; a
        # prompt neither accepted nor started may be queued behind it and stays open.
        ending = [t for t in session.turns if t.version != 1 and (t.accepted or t.running)]
        if not ending:
            return
        stop = update.get("stopReason")
        if not isinstance(stop, str) or not stop:
            out.append(self._finding("turn/idle-stop-reason", rec, "idle ends foreground work without a stopReason"))
        else:
            self._stop_reason(rec, stop, out)
            for turn in ending:
                self._cancel_outcome(rec, turn, stop, False, out)
        for turn in ending:
            session.turns.remove(turn)

    def _stop_reason(self, rec: Any, stop: str, out: list[Finding]) -> None:
        schema = schemas(self.version, self._unstable) if self.version in acp.PROTOCOL_VERSIONS else None
        if schema is not None and stop not in schema.stop_reasons and not stop.startswith("_"):
            out.append(
                self._finding(
                    "ext/stop-reason",
                    rec,
                    f"stop reason {stop!r} is not in the {self._schema_name()} schema and does not start with _",
                )
            )

    def _cancel_outcome(self, rec: Any, turn: _Turn, stop: str | None, error: bool, out: list[Finding]) -> None:
        if turn.cancelled_at is None or stop == "cancelled":
            return
        if error:
            out.append(
                self._finding(
                    "cancel/stop-reason",
                    rec,
                    f"prompt cancelled at seq {turn.cancelled_at} ended with an error, not stopReason cancelled",
                )
            )
        else:
            out.append(
                self._finding(
                    "cancel/stop-reason-race",
                    rec,
                    f"prompt cancelled at seq {turn.cancelled_at} ended with stopReason {stop!r}",
                )
            )

    def _compaction(
        self, rec: Any, session: _Session, variant: str, update: dict[str, Any], out: list[Finding]
    ) -> None:
        cid = update.get("compactionId")
        if not isinstance(cid, str):
            return  # the schema check reports the missing id
        state = session.compactions.get(cid)
        if variant == "compaction_summary_chunk":
            if state is None:
                out.append(
                    self._finding("compaction/order", rec, f"summary chunk before any compaction_update for {cid!r}")
                )
            elif state != "in_progress":
                out.append(
                    self._finding("compaction/order", rec, f"summary chunk for {cid!r} after its {state} status")
                )
            return
        status = update.get("status")
        if not isinstance(status, str):
            return
        if state is not None and state != "in_progress":
            out.append(
                self._finding(
                    "compaction/terminal",
                    rec,
                    f"compaction {cid!r} updated ({status}) after its terminal status {state}",
                )
            )
            return
        session.compactions[cid] = (
            status if (status in _COMPACTION_TERMINAL or status == "in_progress") else (state or status)
        )

    # -- responses -------------------------------------------------------------------------------

    def _response(self, rec: Any, direction: str, message: dict[str, Any], out: list[Finding]) -> None:
        request_seq = _field(rec, "request_seq")
        request = self._by_seq.pop(request_seq, None) if request_seq is not None else None
        if request_seq is None:
            rpc_id = _field(rec, "rpc_id")
            if rpc_id is not None and rpc_id != "null":
                out.append(
                    self._finding("jsonrpc/unknown-id", rec, f"response to id {rpc_id}, which no pending request has")
                )
            return
        if request is not None:
            key = (request.direction, request.rpc_id)
            if self._pending.get(key) is request:
                del self._pending[key]
        method = _field(rec, "method")
        kind = _field(rec, "kind")
        result = message.get("result")
        schema = self._schema_set()
        if kind == "response" and schema is not None and isinstance(method, str):
            # The result type belongs to the side that received the request, i.e. the response's sender.
            side = _SIDE[_OTHER[direction]]
            self._validate("schema/result", rec, schema.results.get((method, side)), result, f"{method} result", out)
        if method == "initialize" and kind == "response" and isinstance(result, dict):
            negotiated = result.get("protocolVersion")
            if isinstance(negotiated, int):
                self.version = negotiated if negotiated in acp.PROTOCOL_VERSIONS else None
            self._capabilities["agent"] = result.get("agentCapabilities", result.get("capabilities"))
        elif method == "session/prompt" and request is not None:
            self._prompt_response(rec, request, kind, result, out)
        elif method == "session/load" and request is not None and request.session_id and self.version == 1:
            if kind == "response":
                self._session(request.session_id).loaded_at = _field(rec, "seq")
        elif method == "session/resume" and request is not None and request.session_id and self.version == 1:
            session = self._session(request.session_id)
            session.resuming = max(0, session.resuming - 1)
        elif method == "session/request_permission" and request is not None and request.cancelled:
            outcome = _get(result, "outcome", "outcome") if kind == "response" else None
            if outcome != "cancelled":
                what = "an error" if kind == "error" else f"outcome {outcome!r}"
                out.append(
                    self._finding(
                        "cancel/permission",
                        rec,
                        f"permission request seq {request.seq} answered with {what} after session/cancel",
                    )
                )

    def _prompt_response(self, rec: Any, request: _Request, kind: Any, result: Any, out: list[Finding]) -> None:
        sid = request.session_id
        session = self._sessions.get(sid) if sid is not None else None
        turn = next((t for t in session.turns if t.seq == request.seq), None) if session is not None else None
        if session is None or turn is None:
            return
        v1 = self.version == 1 or (self.version is None and isinstance(result, dict) and "stopReason" in result)
        if kind == "error":
            self._cancel_outcome(rec, turn, None, True, out)
            session.turns.remove(turn)
            return
        if v1:
            stop = _get(result, "stopReason")
            if isinstance(stop, str):
                self._stop_reason(rec, stop, out)
            self._cancel_outcome(rec, turn, stop if isinstance(stop, str) else None, False, out)
            session.turns.remove(turn)
            return
        turn.accepted = True
        turn.response_seq = _field(rec, "seq")
        message_id = _get(result, "messageId")
        if not isinstance(message_id, str) or not message_id:
            out.append(
                self._finding(
                    "prompt/message-id",
                    rec,
                    f"prompt response carries messageId {message_id!r}, not a non-empty string",
                )
            )
            return
        turn.message_id = message_id
        earlier = session.prompt_ids.get(message_id)
        if earlier is not None:
            out.append(
                self._finding(
                    "prompt/distinct-message-id",
                    rec,
                    f"messageId {message_id!r} already given to the prompt of seq {earlier}",
                )
            )
        session.prompt_ids.setdefault(message_id, request.seq)
        if message_id not in session.user_ids:
            session.awaiting_user[message_id] = _field(rec, "seq")

    def _session(self, sid: str) -> _Session:
        session = self._sessions.get(sid)
        if session is None:
            session = self._sessions[sid] = _new_session()
        return session


def check(
    frames: Iterable[Any],
    *,
    versions: Mapping[int, int | None] | None = None,
    schema: bool = True,
    unstable: bool = True,
    ended: Mapping[int, bool] | None = None,
) -> Iterator[Finding]:
    """Findings for frames of one or more runs in (run, relay) order: one ``Checker`` per run.

    ``versions``: run id -> protocol version known from the run row; ``ended``: run id -> whether
    that run is over (default: yes), which decides whether pending requests count as unanswered.
    """
    checker: Checker | None = None
    current: Any = object()
    for rec in frames:
        run_id = _field(rec, "run_id")
        if run_id != current:
            if checker is not None:
                yield from checker.finish(ended=(ended or {}).get(current, True))
            current = run_id
            checker = Checker(version=(versions or {}).get(run_id), schema=schema, unstable=unstable)
        assert checker is not None
        yield from checker.feed(rec)
    if checker is not None:
        yield from checker.finish(ended=(ended or {}).get(current, True))
