"""The fault plan: seeded, reproducible decisions of which faults each frame gets.

Owns: ``FaultPlan`` (the rules of a run with their counters and random streams; ``decide`` is
called for each frame in order, and the same rules, seed and frames give the same faults), the
order actions apply in, and the bytes they make (``corrupt_line``, ``error_line``, ``_cut``).

Must not know: the rule language's syntax (``rules`` parses it), trio, pipes, processes, SQL.
The relay hands ``FaultPlan.decide`` each frame in relay order and carries out the actions it
returns.

Rule: a decision depends only on the rules, the seed and the frames seen so far (their order,
their fields, and the ``ts_ns`` the caller stamped on them) — never on the clock or on global
random state.
"""

from __future__ import annotations

import json
import random
import secrets
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from acp_proxy.faults.actions import (
    DIRECTIONS,
    SUB,
    Abort,
    Action,
    Close,
    Corrupt,
    Delay,
    Drop,
    Duplicate,
    ErrorReply,
    HalfClose,
    Hold,
    Inject,
    Kill,
    Release,
    Reorder,
    Restart,
    Rule,
    RuleSet,
    Split,
    Stall,
    Status,
    Truncate,
)
from acp_proxy.faults.remote import refuse_on_stdio
from acp_proxy.faults.rules import (
    MAX_RULES,
    SESSION_PLACEHOLDER,
    RuleError,
    check_seed,
    from_env,
    load_toml,
    parse_rules,
)
from acp_proxy.protocol import wire

if TYPE_CHECKING:
    from acp_proxy.protocol.frames import FrameRecord


# -- the plan ------------------------------------------------------------------------------


class _State:
    """A rule's counters and random streams, inside one plan."""

    __slots__ = ("fired", "jitter", "matches", "rng")

    def __init__(self, seed: int, index: int) -> None:
        self.matches = 0
        self.fired = 0
        # String seeds go through SHA-512 in random.Random: stable across runs, processes and
        # PYTHONHASHSEED. Two streams, so a rule's jitter draws never shift its p= draws.
        self.rng = random.Random(f"acp-proxy:{seed}:{index}")
        self.jitter = random.Random(f"acp-proxy:{seed}:{index}:jitter")


_REPLACING = ("drop", "error", "corrupt", "truncate", "status", "abort")
_PHASE = {
    "delay": 1,
    "hold": 1,
    "inject-before": 2,
    "kill": 3,
    "close": 3,
    "stall": 3,
    "half-close": 3,
    "restart": 3,
    "drop": 4,
    "error": 4,
    "corrupt": 4,
    "truncate": 4,
    "status": 4,
    "abort": 4,
    "split": 5,
    "duplicate": 6,
    "reorder": 7,
    "inject-after": 8,
    "release": 9,
}
_ERRORABLE = ("request", "response", "error")


class FaultPlan:
    """The rules of a run with their counters; ``decide`` is called for each frame in order."""

    def __init__(self, rules: Sequence[Rule] = (), seed: int | None = None, start_ns: int | None = None) -> None:
        self.rules: tuple[Rule, ...] = tuple(rules)
        self.seed: int = seed if seed is not None else secrets.randbelow(2**31)
        """The seed in use (chosen at random when none was given): record it on the run."""
        self.start_ns = start_ns
        """What after=DURATION counts from; the first frame's ts_ns when not given."""
        self.frames_seen = 0
        self._states = [_State(self.seed, i) for i in range(len(self.rules))]
        self._last_session: str | None = None
        self._all_frames = any(rule.after_frames is not None for rule in self.rules)

    @classmethod
    def build(
        cls,
        cli_rules: Sequence[str] = (),
        toml_path: str | Path | None = None,
        env_value: str | None = None,
        seed: int | None = None,
        start_ns: int | None = None,
        *,
        remote: bool = False,
    ) -> FaultPlan:
        """All sources together: ``--fault`` rules, then ``ACP_PROXY_FAULTS``, then the file.
        ``remote``: for ``serve``; otherwise a remote-only rule is refused (``faults.remote``).

        The seed: ``seed`` (``--seed``), else the environment's, else the file's, else random.
        """
        cli = parse_rules(cli_rules)
        env = from_env(env_value)
        file = load_toml(toml_path) if toml_path is not None else RuleSet(())
        if not remote:
            refused = refuse_on_stdio([*cli, *env.rules, *file.rules])
            if refused is not None:
                raise RuleError(refused.removeprefix("bad fault rule: "))
        for candidate in (env.seed, file.seed):
            if seed is None:
                seed = candidate
        if seed is not None:
            check_seed(seed)
        rules = [*cli, *env.rules, *file.rules]
        if len(rules) > MAX_RULES:
            raise RuleError(f"a run takes at most {MAX_RULES} fault rules, not {len(rules)}")
        return cls(rules, seed, start_ns)

    def __bool__(self) -> bool:
        return bool(self.rules)

    def needs_verdict(self, direction: str) -> bool:
        """Whether frames of this direction must be framed and passed to ``decide``.

        False lets the relay forward that direction's chunks without waiting for newlines.
        """
        if direction not in DIRECTIONS:
            return False
        if self._all_frames:
            # after=N frames counts frames of both directions, so every frame must be seen.
            return True
        return any(direction in rule.directions for rule in self.rules)

    def describe(self) -> dict[str, Any]:
        """The plan as JSON-able data (the run's fault_spec)."""
        return {"seed": self.seed, "rules": [dict(index=i, **r.describe()) for i, r in enumerate(self.rules)]}

    def decide(self, rec: FrameRecord) -> list[Action]:
        """The faults for this frame, in the order the relay applies them (see HELP)."""
        direction = rec.dir
        if direction not in DIRECTIONS:
            return []
        if self.start_ns is None:
            self.start_ns = rec.ts_ns
        self.frames_seen += 1
        if rec.session_id is not None:
            self._last_session = rec.session_id
        if not self.rules:
            return []
        elapsed = rec.ts_ns - self.start_ns
        chosen: dict[Any, tuple[int, Rule, _State]] = {}
        for index, (rule, state) in enumerate(zip(self.rules, self._states, strict=True)):
            if direction not in rule.directions:
                continue
            if rule.after_frames is not None and self.frames_seen <= rule.after_frames:
                continue
            if rule.after_ns is not None and elapsed < rule.after_ns:
                continue
            if rule.action == "error" and rec.kind not in _ERRORABLE:
                continue
            if rule.action == "status" and direction != "c2a":
                continue  # an HTTP status answers a client's message
            if rule.expr is not None and not rule.expr.matches(rec):
                continue
            state.matches += 1
            if not rule._selects(state.matches):
                continue
            if rule.times is not None and state.fired >= rule.times:
                continue
            if rule.p is not None and state.rng.random() >= rule.p:
                continue
            key = self._conflict_key(rule, index, direction)
            if key not in chosen:  # the rule listed first wins its slot
                chosen[key] = (index, rule, state)
        if not chosen:
            return []
        return self._actions(rec, list(chosen.values()))

    @staticmethod
    def _conflict_key(rule: Rule, index: int, direction: str) -> Any:
        if rule.action in _REPLACING:
            return "replace"
        if rule.action in ("inject", "release"):
            return (rule.action, index)
        if rule.action == "half-close":
            return ("half-close", rule.params["direction"] or direction)
        if rule.action == "close":
            return ("close", rule.params["pipe"] or _own_pipe(direction))
        return rule.action

    def _actions(self, rec: FrameRecord, chosen: list[tuple[int, Rule, _State]]) -> list[Action]:
        direction = rec.dir
        own_pipe = _own_pipe(direction)
        by_action = {rule.action: rule for _, rule, _ in chosen}
        path_cut = "stall" in by_action or any(
            (rule.action == "close" and (rule.params["pipe"] or own_pipe) in (own_pipe, "stream"))
            or (rule.action == "half-close" and (rule.params["direction"] or direction) == direction)
            for _, rule, _ in chosen
        )
        replacing = next((rule for _, rule, _ in chosen if rule.action in _REPLACING), None)
        nothing_in_place = path_cut or (
            replacing is not None
            and (
                (replacing.action == "drop" and not replacing.params.get("after"))
                or replacing.action in ("status", "abort")
                or (replacing.action == "error" and rec.kind == "request")
            )
        )
        wire = rec.line + (b"\n" if rec.terminated else b"")
        out: list[tuple[int, int, Action]] = []
        written = wire
        for index, rule, state in chosen:
            action = rule.action
            if action in ("split", "duplicate", "reorder") and nothing_in_place:
                continue  # cannot take effect: does not count as fired
            if action == "inject" and rule.params["position"] == "after" and path_cut:
                continue
            built = self._build(index, rule, state, rec, wire)
            if built is None:
                continue
            if isinstance(built, Corrupt | Truncate) or (isinstance(built, ErrorReply) and not built.to_sender):
                written = built.data
            state.fired += 1
            phase = action if action != "inject" else f"inject-{rule.params['position']}"
            out.append((_PHASE[phase], index, built))
        out.sort(key=lambda item: (item[0], item[1]))
        actions = [item[2] for item in out]
        # Split cuts what is actually written, which is known only once the replacement is.
        for k, made in enumerate(actions):
            if isinstance(made, Split):
                actions[k] = Split(made.rule_index, made.rule_text, _cut(written, len(made.parts)), made.pause)
        return actions

    def _build(self, index: int, rule: Rule, state: _State, rec: FrameRecord, wire: bytes) -> Action | None:
        p = rule.params
        text = rule.text
        newline = b"\n" if rec.terminated else b""
        match rule.action:
            case "drop":
                return Drop(index, text, bool(p.get("after")))
            case "delay":
                ns = p["ns"]
                if p["jitter_ns"]:
                    ns = max(0, ns + round(state.jitter.uniform(-p["jitter_ns"], p["jitter_ns"])))
                return Delay(index, text, ns / 1e9)
            case "duplicate":
                return Duplicate(index, text, p["copies"])
            case "reorder":
                return Reorder(index, text)
            case "corrupt":
                return Corrupt(index, text, corrupt_line(rec.line) + newline)
            case "truncate":
                keep = len(rec.line) // 2 if p["keep"] is None else p["keep"]
                return Truncate(index, text, rec.line[:keep] + newline)
            case "split":
                # Placeholder parts: the real cut is made once the written bytes are known.
                return Split(index, text, (wire,) * p["parts"], p["pause_ns"] / 1e9)
            case "error":
                line = error_line(rec.rpc_id, p["code"], p["message"])
                return ErrorReply(index, text, line, to_sender=rec.kind == "request")
            case "inject":
                payload = p["payload"]
                if SESSION_PLACEHOLDER in payload:
                    session = rec.session_id or self._last_session
                    if session is not None:
                        payload = payload.replace(SESSION_PLACEHOLDER, json.dumps(session)[1:-1])
                return Inject(index, text, payload.encode() + b"\n", p["position"])
            case "kill":
                return Kill(index, text, p["signum"], p["signame"])
            case "close":
                return Close(index, text, p["pipe"] or _own_pipe(rec.dir))
            case "stall":
                return Stall(index, text, rec.dir)
            case "hold":
                return Hold(index, text, p["barrier"], None if p["ns"] is None else p["ns"] / 1e9)
            case "release":
                return Release(index, text, p["barrier"])
            case "abort":
                return Abort(index, text, wire[: max(1, len(wire) // 2)])
            case "status":
                return Status(index, text, p["code"], p["retry_after"])
            case "half-close":
                return HalfClose(index, text, p["direction"] or rec.dir)
            case "restart":
                return Restart(index, text)
        return None


def _own_pipe(direction: str) -> str:
    return "agent-stdin" if direction == "c2a" else "client-stdout"


def _cut(data: bytes, parts: int) -> tuple[bytes, ...]:
    """``data`` in ``parts`` pieces of near-equal size (fewer when it is shorter)."""
    parts = max(1, min(parts, len(data)))
    size, extra = divmod(len(data), parts)
    pieces = []
    start = 0
    for k in range(parts):
        end = start + size + (1 if k < extra else 0)
        pieces.append(data[start:end])
        start = end
    return tuple(pieces)


def corrupt_line(line: bytes) -> bytes:
    """``line`` (without its newline) made invalid JSON, same length, always the same way.

    One byte becomes ASCII SUB (0x1A). A control character is invalid anywhere in JSON text,
    and the byte chosen is outside every string — nearest the middle, at or after it first — so
    even parsers that tolerate control characters inside strings reject the line. Bytes outside
    strings are ASCII, so the line's UTF-8 stays as valid as it was.
    """
    if not line:
        return line
    outside = []
    in_string = escaped = False
    for i, byte in enumerate(line):
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:
                in_string = False
            continue
        if byte == 0x22:
            in_string = True
        outside.append(i)
    middle = len(line) // 2
    after = [i for i in outside if i >= middle]
    if after:
        pos = after[0]
    elif outside:
        pos = outside[-1]
    else:
        pos = middle
    return line[:pos] + bytes([SUB]) + line[pos + 1 :]


def error_line(rpc_id: str | None, code: int, message: str) -> bytes:
    """A JSON-RPC error response line (newline included) for the id given as JSON text."""
    id_value = wire.loads(rpc_id) if rpc_id is not None else None
    body = {"jsonrpc": "2.0", "id": id_value, "error": {"code": code, "message": message}}
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
