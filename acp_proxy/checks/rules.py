"""Conformance checks: recorded frames in, findings out (Wireshark's "expert info" for ACP).

Owns: the rules a conversation must keep — JSON Schema validation of each frame's payload
against the official schema of the negotiated version (the ``$defs`` type whose ``x-method``
names the method, on the side it travelled, request or notification; a response against the
result type of the request it answers; a ``session/update`` against its variant) and the
lifecycle rules of the spec that no schema can state (a prompt's ``messageId`` and its
``user_message``, ``running`` ... ``idle`` with a stop reason, cancellation, compaction order,
history replay on restore, notices not replayed, capabilities, custom names, JSON-RPC pairing).
Every rule has an id, a severity (a MUST of the spec is an error, a SHOULD a warning) and the
section of the document of the negotiated version it comes from (``RULES``); each finding points
at the frame that broke it (``run_id``, ``seq``), and one broken fact gives one finding.

Must not know: SQL, pipes, processes, click or rich. A ``Checker`` is fed frames in relay order —
``FrameRecord`` objects (live) or ``frames`` rows as dicts (recorded) — and runs the connection's
protocol state machine (``protocol.state``) over them: pairing, versions, sessions, replay
windows and turns come from its events, never from annotations. What the checker keeps itself is
content: message ids, tool calls, compactions, capabilities.

Rule 1: a check never raises on odd input. A frame that does not decode, a payload of the wrong
shape, a version with no schema: each is a finding or is skipped, never an exception.

Rule 2: the schema is the authority for shapes; the lifecycle rules state order and pairing,
and say nothing the schema already said about the same frame.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from functools import cache
from typing import Any, ClassVar, Literal

import msgspec

from acp_proxy.protocol import events as ev
from acp_proxy.protocol import vocabulary as acp
from acp_proxy.protocol.state import ConnectionState, FrameLike, RecordedFrame
from acp_proxy.protocol.vocabulary import A2C, OTHER, RECEIVER

Severity = Literal["error", "warning", "info"]

_P2 = "v2-draft/prompt-lifecycle.md"
_P1 = "v1/prompt-turn.mdx"
_S1 = "v1/session-setup.mdx"
_S2 = "v2-draft/session-setup.mdx"
_JSONRPC = "https://www.jsonrpc.org/specification"


@dataclass(frozen=True, slots=True)
class Rule:
    id: str
    severity: Severity
    spec: str
    """The section the rule comes from: of the v1 documents, or of the only version it applies to."""
    summary: str
    spec_v2: str | None = None
    """The section of the v2 draft, when the rule applies to both versions and v2 states it apart."""

    def spec_for(self, version: int | None) -> str:
        """The reference to cite for a connection of ``version`` (the v1 one when unknown)."""
        return self.spec_v2 if version == 2 and self.spec_v2 is not None else self.spec


RULES: dict[str, Rule] = {
    r.id: r
    for r in (
        Rule(
            "jsonrpc/not-json",
            "error",
            "v1/transports.mdx#stdio",
            "every line on stdin/stdout is a JSON-RPC message (MUST NOT write anything else)",
            "v2-draft/transports.mdx#stdio",
        ),
        Rule(
            "jsonrpc/unknown-id",
            "error",
            f"{_JSONRPC}#response_object",
            "a response answers a request that is pending",
        ),
        Rule(
            "jsonrpc/duplicate-id",
            "error",
            f"{_JSONRPC}#request_object",
            "a request id is not reused while a request with that id is pending",
        ),
        Rule(
            "jsonrpc/unanswered",
            "warning",
            f"{_JSONRPC}#response_object",
            "every request is answered before the connection ends",
        ),
        Rule(
            "ext/method-name",
            "warning",
            "v1/extensibility.mdx#extension-methods",
            "methods outside the schema start with _",
            "v2-draft/extensibility.mdx#extension-methods",
        ),
        Rule(
            "ext/update-name",
            "warning",
            "v1/extensibility.mdx",
            "session/update variants outside the schema start with _ (others are reserved for ACP)",
            "v2-draft/extensibility.mdx#enum-and-tagged-union-variants",
        ),
        Rule(
            "ext/stop-reason",
            "warning",
            f"{_P1}#stop-reasons",
            "stop reasons outside the schema start with _ (others are reserved for ACP)",
            f"{_P2}#stop-reasons",
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
            "every accepted prompt reaches idle before the connection ends",
        ),
        Rule(
            "cancel/stop-reason",
            "error",
            f"{_P1}#cancellation",
            "after session/cancel the turn ends with stop reason cancelled, not an error",
            f"{_P2}#cancellation",
        ),
        Rule(
            "cancel/stop-reason-race",
            "warning",
            f"{_P1}#cancellation",
            "after session/cancel the turn ends cancelled (it may have finished before the cancel arrived)",
            f"{_P2}#cancellation",
        ),
        Rule(
            "cancel/permission",
            "error",
            f"{_P1}#cancellation",
            "after session/cancel pending permission requests are answered cancelled",
            f"{_P2}#cancellation",
        ),
        Rule(
            "compaction/order",
            "error",
            "rfds/session-compaction.mdx",
            "compaction: first compaction_update before chunks, chunks only while in progress",
            f"{_P2}#session-compaction",
        ),
        Rule(
            "compaction/terminal",
            "error",
            "rfds/session-compaction.mdx",
            "compaction: exactly one terminal status per compactionId",
            f"{_P2}#session-compaction",
        ),
        Rule(
            "replay/notice",
            "warning",
            "rfds/session-notices.mdx#delivery-and-history",
            "live-only notices should not be sent inside a history replay window",
            f"{_P2}#session-notices",
        ),
        Rule(
            "load/replay-after-response",
            "error",
            f"{_S1}#loading-a-session",
            "session/load replays the history before responding",
        ),
        Rule(
            "resume/replay-after-response",
            "error",
            f"{_S2}#resuming-sessions",
            "v2 session/resume replays history (when asked to) before responding, never after",
        ),
        Rule(
            "resume/replayed",
            "error",
            f"{_S1}#resuming-a-session",
            "session/resume without replayFrom does not replay history (v1: session/resume never does)",
            f"{_S2}#resuming-sessions",
        ),
        Rule(
            "tool/unknown-call",
            "warning",
            "v1/tool-calls.mdx#updating",
            "v1 tool_call_update names a tool call announced by tool_call",
        ),
        Rule(
            "capability/missing",
            "error",
            "v1/initialization.mdx#capabilities",
            "capability-gated methods are used only when the other side advertised the capability",
            "v2-draft/initialization.mdx#capabilities",
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


_OUTPUT_PREFIXES = ("agent_message", "agent_thought", "tool_call", "plan")
# What replayed history consists of, per version: messages (and, in v1, announced tool calls).
_MESSAGES = frozenset(
    {
        "user_message_chunk",
        "user_message",
        "agent_message_chunk",
        "agent_message",
        "agent_thought_chunk",
        "agent_thought",
    }
)
_HISTORY = {1: _MESSAGES | {"tool_call"}, 2: _MESSAGES}
_USER_MESSAGES = frozenset({"user_message", "user_message_chunk"})
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
        self._fast: dict[str, Callable[[Any], bool] | None] = {}

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

    def fast_validator(self, name: str) -> Callable[[Any], bool] | None:
        """The compiled verdict of type ``name`` (``compiled``), None where it cannot be compiled."""
        if name in self._fast:
            return self._fast[name]
        from acp_proxy.checks.compiled import Unsupported, compile_schema

        try:
            found: Callable[[Any], bool] | None = compile_schema(
                self._inline(self._defs[name], frozenset({name})), self._resolve
            )
        except Unsupported:
            found = None
        self._fast[name] = found
        return found

    def _resolve(self, ref: str) -> Any:
        from acp_proxy.checks.compiled import Unsupported

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
    if type(rec) is dict:  # recorded rows, the common case: no ABC check
        return rec.get(name)
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


def _json(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return _decoder.decode(text)
    except msgspec.DecodeError:
        return None


# -- per-connection content ------------------------------------------------------------------------


@dataclass(slots=True)
class _Request:
    seq: int
    direction: str
    rpc_id: str | None
    method: str | None
    cancelled: bool = False
    """A permission request pending when its session was cancelled."""


@dataclass(slots=True)
class _Turn:
    """A prompt turn between its TurnStarted and TurnEnded events."""

    seq: int
    version: int | None
    running: bool = False
    cancelled_at: int | None = None
    reported_output: bool = False


@dataclass(slots=True)
class _Session:
    user_ids: set[str] = field(default_factory=set)
    """messageIds of user_message(_chunk) updates seen (either order with the response)."""
    awaiting_user: dict[str, int] = field(default_factory=dict)
    """messageId -> seq of a prompt response whose user_message has not been seen yet."""
    prompt_ids: dict[str, int] = field(default_factory=dict)
    message_ids: set[str] = field(default_factory=set)
    """Ids of every message of the session seen so far (live or replayed)."""
    tools: set[str] = field(default_factory=set)
    compactions: dict[str, str] = field(default_factory=dict)
    turns: list[_Turn] = field(default_factory=list)
    """Open turns, oldest first."""
    restored: tuple[str, int] | None = None
    """(method, seq of its answer): a restore answered, and no prompt since."""
    resuming: int = 0
    """session/resume requests without replay that are still pending."""


class Checker:
    """The rules, over one connection's frames in relay order. ``feed`` each, then ``finish``."""

    def __init__(self, *, version: int | None = None, schema: bool = True, unstable: bool = True) -> None:
        """``version``: the protocol version if known in advance (e.g. from the run row); the
        ``initialize`` exchange overrides it. ``schema``: validate payloads (the slow part).
        ``unstable``: validate against the draft schema (a superset of the stable one)."""
        self.state = ConnectionState(version=version)
        self._schema = schema
        self._unstable = unstable
        self._requests: dict[int, _Request] = {}
        """Pending requests by seq."""
        self._turns: dict[int, _Turn] = {}
        self._sessions: dict[str, _Session] = {}
        self._capabilities: dict[str, Any] = {}
        self._unanswered: set[int] = set()
        self._run_id: int | None = None
        self._ended_at: int | None = None
        """The frame whose TurnEnded events were last seen: one idle may end several turns."""
        self._schema_flagged = False
        """The schema already found the frame's result wrong (one finding per broken fact)."""
        self.turns: dict[int, tuple[str, str | None, int | None]] = {}
        """The checker's view of the prompt turns: prompt seq -> (status, stop reason, end seq)."""
        self.frames = 0
        self._schema_of: tuple[int | None, SchemaSet | None] = (None, None)
        """(version, its schema): the last ``_schema_set`` answer."""

    @property
    def version(self) -> int | None:
        """The version the rules follow (the state machine's: negotiated, else inferred)."""
        return self.state.version

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
        for event in self.state.finish(0):
            if isinstance(event, ev.Unanswered):
                self._unanswered.add(event.request_seq)
                self._requests.pop(event.request_seq, None)
                out.append(
                    self._at(
                        "jsonrpc/unanswered",
                        event.request_seq,
                        f"{event.method} request (id {event.rpc_id}) never answered",
                    )
                )
            elif isinstance(event, ev.TurnEnded):
                self.turns[event.prompt_seq] = (event.status, event.stop_reason, event.seq)
                turn = self._turns.pop(event.prompt_seq, None)
                # A prompt never answered is one fact, reported as unanswered; an accepted v2
                # prompt that never reached idle is another.
                if event.protocol_version == 2 and event.prompt_seq not in self._unanswered:
                    out.append(
                        self._at(
                            "turn/unfinished", event.prompt_seq, "prompt never reached idle before the connection ended"
                        )
                    )
                session = self._session(event.session_id)
                if turn is not None and turn in session.turns:
                    session.turns.remove(turn)
        for sid, session in self._sessions.items():
            for message_id, seq in session.awaiting_user.items():
                out.append(
                    self._at(
                        "prompt/user-message", seq, f"no user_message with messageId {message_id!r} in session {sid}"
                    )
                )
        out.sort(key=lambda f: f.seq or 0)
        return out

    # -- dispatch --------------------------------------------------------------------------------

    def _feed(self, rec: Any, out: list[Finding]) -> None:
        self.frames += 1
        self._run_id = _field(rec, "run_id")
        direction = _field(rec, "dir")
        if direction not in OTHER:
            return
        frame: FrameLike = RecordedFrame(rec) if isinstance(rec, Mapping) else rec
        events = self.state.feed(frame)
        self._schema_flagged = False
        kind = _field(rec, "kind")
        if kind == "invalid":
            if not _field(rec, "cut"):
                sender = "agent's stdout" if direction == A2C else "client's output (agent's stdin)"
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
        message = _payload(rec) if kind in ("request", "notification", "response", "error") else None
        if not isinstance(message, dict):
            message = None
        for event in events:
            handler = self._handlers.get(type(event))
            if handler is not None:
                handler(self, rec, event, message, out)
        if message is not None and kind == "notification":
            self._notification(rec, direction, message, out)

    def _finding(
        self, rule_id: str, rec: Any, message: str, severity: Severity | None = None, spec: str | None = None
    ) -> Finding:
        rule = RULES[rule_id]
        return Finding(
            rule_id,
            severity or rule.severity,
            message,
            spec or rule.spec_for(self.version),
            _field(rec, "run_id"),
            _field(rec, "seq"),
        )

    def _at(self, rule_id: str, seq: int | None, message: str) -> Finding:
        rule = RULES[rule_id]
        return Finding(rule_id, rule.severity, message, rule.spec_for(self.version), self._run_id, seq)

    def _schema_set(self) -> SchemaSet | None:
        version = self.state.version
        if version is not self._schema_of[0]:  # per frame twice: looked up once per version
            found = schemas(version, self._unstable) if self._schema and version in acp.PROTOCOL_VERSIONS else None
            self._schema_of = (version, found)
        return self._schema_of[1]

    def _validate(self, rule_id: str, rec: Any, name: str | None, instance: Any, what: str, out: list[Finding]) -> bool:
        """Validate; True when a finding was added."""
        checker = self._schema_set()
        if checker is None or name is None:
            return False
        error = checker.first_error(name, instance)
        if error is None:
            return False
        shown = name.removeprefix("_acp_proxy_")
        out.append(
            self._finding(
                rule_id,
                rec,
                f"{what} (v{checker.version} {shown}): {error}",
                spec=f"schema/{checker.file}#/$defs/{checker.source_def(name)}",
            )
        )
        return True

    def _session(self, sid: str) -> _Session:
        session = self._sessions.get(sid)
        if session is None:
            session = self._sessions[sid] = _Session()
        return session

    # -- events ----------------------------------------------------------------------------------

    def _on_peer(self, rec: Any, e: ev.PeerAnnounced, message: Any, out: list[Finding]) -> None:
        self._capabilities[e.side] = _json(e.capabilities)

    def _on_request(self, rec: Any, e: ev.RequestSent, message: Any, out: list[Finding]) -> None:
        method = e.method
        if e.reused_id_of is not None:
            first = self._requests.get(e.reused_id_of)
            out.append(
                self._finding(
                    "jsonrpc/duplicate-id",
                    rec,
                    f"id {e.rpc_id} reused while request seq {e.reused_id_of}"
                    f" ({first.method if first else '?'}) is pending",
                )
            )
        self._requests[_field(rec, "seq")] = _Request(_field(rec, "seq"), e.direction, e.rpc_id, method)
        self._gate(rec, method, out)
        schema = self._schema_set()
        if schema is not None and isinstance(method, str) and message is not None:
            self._validate(
                "schema/params",
                rec,
                schema.params.get((method, RECEIVER[e.direction])),
                message.get("params"),
                f"{method} params",
                out,
            )

    def _on_unknown(self, rec: Any, e: ev.NameUnknown, message: Any, out: list[Finding]) -> None:
        if e.unknown != "future":
            return
        if e.what == "method":
            out.append(
                self._finding(
                    "ext/method-name",
                    rec,
                    f"method {e.name!r} is not in the {self._schema_name()} schema and does not start with _",
                )
            )
        else:
            out.append(
                self._finding(
                    "ext/update-name",
                    rec,
                    f"update {e.name!r} is not in the {self._schema_name()} schema and does not start with _",
                )
            )

    def _on_unpaired(self, rec: Any, e: ev.ResponseUnpaired, message: Any, out: list[Finding]) -> None:
        if e.rpc_id is not None and e.rpc_id != "null":
            out.append(
                self._finding("jsonrpc/unknown-id", rec, f"response to id {e.rpc_id}, which no pending request has")
            )

    def _on_paired(self, rec: Any, e: ev.ResponsePaired, message: Any, out: list[Finding]) -> None:
        if e.withheld:
            return  # the requester never saw it: its request is still pending
        request = self._requests.pop(e.request_seq, None)
        if e.cut or message is None:
            return
        method = e.method
        result = message.get("result")
        schema = self._schema_set()
        if not e.error and schema is not None and isinstance(method, str):
            # The result type belongs to the side that received the request, i.e. the response's sender.
            side = RECEIVER[OTHER[e.direction]]
            self._schema_flagged = self._validate(
                "schema/result", rec, schema.results.get((method, side)), result, f"{method} result", out
            )
        if method == "session/request_permission" and request is not None and request.cancelled:
            outcome = _get(result, "outcome", "outcome") if not e.error else None
            if outcome != "cancelled":
                what = "an error" if e.error else f"outcome {outcome!r}"
                out.append(
                    self._finding(
                        "cancel/permission",
                        rec,
                        f"permission request seq {request.seq} answered with {what} after session/cancel",
                    )
                )

    def _on_restoring(self, rec: Any, e: ev.SessionRestoring, message: Any, out: list[Finding]) -> None:
        if e.method == "session/resume" and not e.replays:
            self._session(e.session_id).resuming += 1

    def _on_restored(self, rec: Any, e: ev.SessionRestored, message: Any, out: list[Finding]) -> None:
        session = self._session(e.session_id)
        if e.method == "session/resume" and not e.replays:
            session.resuming = max(0, session.resuming - 1)
        if e.ok:
            session.restored = (e.method, _field(rec, "seq"))

    def _on_turn_started(self, rec: Any, e: ev.TurnStarted, message: Any, out: list[Finding]) -> None:
        session = self._session(e.session_id)
        session.restored = None
        self.turns[e.prompt_seq] = ("running", None, None)
        turn = self._turns[e.prompt_seq] = _Turn(e.prompt_seq, e.protocol_version)
        session.turns.append(turn)

    def _on_accepted(self, rec: Any, e: ev.TurnAccepted, message: Any, out: list[Finding]) -> None:
        session = self._session(e.session_id)
        raw = _get(message, "result", "messageId")
        message_id = e.message_id
        if not message_id:
            # The schema says what a missing or non-string id is; the empty string is this rule's.
            if raw == "" or not self._schema_flagged:
                out.append(
                    self._finding(
                        "prompt/message-id",
                        rec,
                        f"prompt response carries messageId {raw!r}, not a non-empty string",
                    )
                )
            return
        earlier = session.prompt_ids.get(message_id)
        if earlier is not None:
            out.append(
                self._finding(
                    "prompt/distinct-message-id",
                    rec,
                    f"messageId {message_id!r} already given to the prompt of seq {earlier}",
                )
            )
        session.prompt_ids.setdefault(message_id, e.prompt_seq)
        if message_id not in session.user_ids:
            session.awaiting_user[message_id] = _field(rec, "seq")

    def _on_state(self, rec: Any, e: ev.StateReported, message: Any, out: list[Finding]) -> None:
        if e.state in ("running", "requires_action"):
            for turn in self._session(e.session_id).turns:
                turn.running = True

    def _on_cancelled(self, rec: Any, e: ev.SessionCancelled, message: Any, out: list[Finding]) -> None:
        seq = _field(rec, "seq")
        for prompt_seq in e.prompt_seqs:
            turn = self._turns.get(prompt_seq)
            if turn is not None and turn.cancelled_at is None:
                turn.cancelled_at = seq
        for request_seq in e.request_seqs:
            request = self._requests.get(request_seq)
            if request is not None and request.method == "session/request_permission":
                request.cancelled = True

    def _on_turn_ended(self, rec: Any, e: ev.TurnEnded, message: Any, out: list[Finding]) -> None:
        self.turns[e.prompt_seq] = (e.status, e.stop_reason, e.seq)
        turn = self._turns.pop(e.prompt_seq, None)
        session = self._session(e.session_id)
        if turn is not None and turn in session.turns:
            session.turns.remove(turn)
        seq = _field(rec, "seq")
        first_of_frame = self._ended_at != seq
        self._ended_at = seq
        if e.by == "idle" and e.stop_reason is None:
            if first_of_frame:
                out.append(
                    self._finding("turn/idle-stop-reason", rec, "idle ends foreground work without a stopReason")
                )
        elif e.stop_reason is not None and first_of_frame:
            self._stop_reason(rec, e.stop_reason, out)
        if turn is None or turn.cancelled_at is None or e.by == "finish" or e.stop_reason == "cancelled":
            return
        if e.by == "error":
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
                    f"prompt cancelled at seq {turn.cancelled_at} ended with stopReason {e.stop_reason!r}",
                )
            )

    def _on_replayed(self, rec: Any, e: ev.UpdateReplayed, message: Any, out: list[Finding]) -> None:
        if e.live_only:
            out.append(
                self._finding(
                    "replay/notice",
                    rec,
                    f"live-only {e.variant} sent inside a history replay window"
                    + ("" if _field(rec, "forwarded") != 0 else " (withheld by the proxy)"),
                )
            )

    _handlers: ClassVar[dict[type[ev.Event], Any]] = {
        ev.PeerAnnounced: _on_peer,
        ev.RequestSent: _on_request,
        ev.NameUnknown: _on_unknown,
        ev.ResponseUnpaired: _on_unpaired,
        ev.ResponsePaired: _on_paired,
        ev.SessionRestoring: _on_restoring,
        ev.SessionRestored: _on_restored,
        ev.TurnStarted: _on_turn_started,
        ev.TurnAccepted: _on_accepted,
        ev.StateReported: _on_state,
        ev.SessionCancelled: _on_cancelled,
        ev.TurnEnded: _on_turn_ended,
        ev.UpdateReplayed: _on_replayed,
    }

    def _gate(self, rec: Any, method: Any, out: list[Finding]) -> None:
        gate = _GATES.get((self.version, method)) if self.version is not None else None
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

    # -- notifications: content ------------------------------------------------------------------

    def _notification(self, rec: Any, direction: str, message: dict[str, Any], out: list[Finding]) -> None:
        method = _field(rec, "method")
        params = message.get("params")
        schema = self._schema_set()
        if schema is not None and isinstance(method, str):
            self._validate(
                "schema/params",
                rec,
                schema.notifications.get((method, RECEIVER[direction])),
                params,
                f"{method} params",
                out,
            )
        if method == "session/update" and isinstance(params, dict):
            self._update(rec, params, out)

    def _update(self, rec: Any, params: dict[str, Any], out: list[Finding]) -> None:
        update = params.get("update")
        if not isinstance(update, dict):
            return
        variant = _field(rec, "update_kind")
        schema = self._schema_set()
        if schema is not None and isinstance(variant, str):
            self._validate("schema/update", rec, schema.variants.get(variant), update, f"{variant} update", out)
        sid = _field(rec, "session_id")
        if sid is None or not isinstance(variant, str):
            return
        session = self._session(sid)
        item = _field(rec, "item_id")
        message_id = update.get("messageId")
        if self.state.replaying(sid):
            if variant in _MESSAGES and isinstance(message_id, str):
                session.message_ids.add(message_id)
            if variant == "tool_call" and isinstance(item, str):
                session.tools.add(item)
            return
        version = self.version
        history = _HISTORY.get(version or 1, _MESSAGES)
        if session.resuming and variant in history:
            out.append(
                self._finding("resume/replayed", rec, f"{variant} sent while session/resume (no replay) was pending")
            )
        elif session.restored is not None and variant in history:
            method, answered = session.restored
            if version == 1 and method == "session/load":
                out.append(
                    self._finding(
                        "load/replay-after-response",
                        rec,
                        f"{variant} after the session/load response (seq {answered}) and before any prompt",
                    )
                )
            elif (
                version == 2
                and method == "session/resume"
                and (variant in _USER_MESSAGES or (isinstance(message_id, str) and message_id in session.message_ids))
            ):
                # A user message before any prompt, or a message already replayed: history, late.
                out.append(
                    self._finding(
                        "resume/replay-after-response",
                        rec,
                        f"{variant} after the session/resume response (seq {answered}) and before any prompt",
                    )
                )
        if variant in _MESSAGES and isinstance(message_id, str):
            session.message_ids.add(message_id)
        if variant in _USER_MESSAGES:
            if isinstance(message_id, str):
                session.user_ids.add(message_id)
                session.awaiting_user.pop(message_id, None)
        elif variant.startswith(_OUTPUT_PREFIXES) and version == 2:
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
        elif variant == "tool_call_update" and version == 1 and isinstance(item, str) and item not in session.tools:
            out.append(self._finding("tool/unknown-call", rec, f"tool_call_update for unannounced toolCallId {item!r}"))
        elif variant in ("compaction_update", "compaction_summary_chunk"):
            self._compaction(rec, session, variant, update, out)

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
