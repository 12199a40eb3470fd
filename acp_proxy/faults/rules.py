"""Fault rules: the rule language, parsed into ``actions.Rule``s.

Owns: the rule language (below) and its error messages (``RuleError``), reading rules from the
command line, a TOML file and the ``ACP_PROXY_FAULTS`` environment variable, and the bounds a
rule must stay within. What the rules then decide, frame by frame, is ``plan.FaultPlan``'s (the
per-rule counters and seeded random numbers that make "same rules + same seed + same traffic =
same faults" true); what a rule and an action are, ``actions``.

Must not know: trio, pipes, processes, SQL, the plan's counters. The only I/O here is
``load_toml`` reading the file it is given. Which frames a rule selects is said in the one
filter language (``filters``); this module never matches frames by itself.

FAULT RULES
===========

One rule per --fault, per entry of ACP_PROXY_FAULTS, or per [[fault]] table:

    ACTION[=ARG] [before|after] [OPTION...] [if FILTER] [OPTION...]

    drop if method:session/prompt kind:response
    delay=300ms if dir:a2c update:agent_message_chunk p=0.1
    kill=SIGKILL if update:tool_call_update nth=2
    error=-32603:"Internal error" if method:session/prompt kind:request
    inject='{"jsonrpc":"2.0","method":"session/update","params":{}}' after if kind:response first=1

Words are separated by spaces. A quoted string, '...' or "...", is part of the word it is in and
may hold spaces; inside "..." a backslash escapes the next character, inside '...' nothing is
special (so JSON is easiest to write in single quotes). An apostrophe therefore needs double
quotes around it, in the filter too: text:"don't".

Everything after if is the filter (the language of acp-proxy frames), except OPTION
words at its end: a trailing word nth=, first=, every=, p=, times= or
after= is an option, not part of the filter. Options may also come before if. Without
if a rule matches every frame in both directions (stderr lines are never matched).

Actions (ARG in brackets is optional):

    drop                 the frame is not forwarded
    delay=D[~J]          wait D before forwarding it, J = uniform jitter (±J, never below 0);
                         frames behind it in the same direction wait too (the stream pauses
                         here; nothing is reordered). D, J: durations as in the filter
                         language (300ms, 1.5s, 1m30s; units ns us ms s m h d), a bare
                         number is milliseconds
    duplicate[=N]        forward the frame, then N more copies of it (default 1)
    reorder              hold the frame and forward it right after the next frame in the same
                         direction (or when that direction ends)
    corrupt              forward invalid JSON of the same length instead: one byte outside any
                         string, nearest the middle, becomes ASCII SUB (0x1A), which no JSON
                         parser accepts anywhere
    truncate[=N]         forward only the first N bytes of the line, then its newline
                         (default: half the line)
    split[=N[@D]]        write the line in N pieces (default 2) with a pause D between
                         writes (default 10ms)
    error[=CODE[:MSG]]   a request is answered with a JSON-RPC error sent back to its sender
                         and not forwarded; a response (result or error) is replaced by an
                         error with the same id. Default -32603 and the standard message for
                         the code. Frames that are neither are not matched by this rule
    inject=PAYLOAD [before|after]
                         write PAYLOAD as a line of its own before (default) or after the
                         matched frame, in its direction. Any text (JSON or not), one line.
                         ${sessionId} in it is replaced by the matched frame's sessionId, or
                         the last one seen
    kill[=SIGNAL]        signal the agent (default SIGKILL; a name such as SIGTERM or TERM, or
                         a number). The frame itself is still handled as usual
    close[=PIPE]         close agent-stdin (the agent reads EOF) or client-stdout (the client
                         reads EOF); default: the pipe the matched frame was going to, which
                         it then never reaches
    stall                stop the matched frame's direction for good: that frame and all later
                         ones in that direction are not forwarded (delay= pauses for a while)

Options, each at most once:

    nth=N                only the Nth match of this rule
    first=N              matches 1..N
    every=K              matches K, 2K, 3K ...        (nth, first and every exclude each other)
    p=P                  probability 0 <= P <= 1 that a selected match fires, drawn from a
                         random.Random seeded with (seed, rule index)
    times=M              fire at most M times
    after=D              only frames with ts_ns at least D after the plan's start (a unit
                         is required here: after=5s)
    after=N frames       only after N frames (both directions) have been seen; also "Nframes"

Evaluation, per rule and frame: the frame must be c2a or a2c, pass after=, match the filter
(and, for error, be a request or a response); it is then the rule's next match. The count
selector (nth/first/every) looks at that match number, then times=, then p= draws.

Several rules may fire on one frame. The frame gets at most one of drop / error / corrupt /
truncate, and at most one of each of delay, split, duplicate, reorder, kill, stall and close of
a given pipe: the rule listed first wins, a rule overridden this way does not count as fired
(its times= budget is kept). All injects apply. Actions that cannot take effect are left out
(split, duplicate and reorder when nothing is written in the frame's place; actions after a
stall or a close of the frame's own path). decide returns them in the order the relay
applies them:

    1. delay                   wait
    2. inject before           in rule order
    3. kill, close, stall      in rule order
    4. the frame: its replacement (drop | error | corrupt | truncate) written split, then
       duplicated, and held if reorder
    5. inject after            in rule order

Sources, listed in rule order (the order that decides who wins, and each rule's index):
repeated --fault RULE, then ACP_PROXY_FAULTS, then the --faults FILE.

ACP_PROXY_FAULTS holds rules separated by ; or newlines (outside quotes); an entry
seed=N sets the seed. The TOML file:

    seed = 7                       # optional

    [[fault]]                      # one table per rule: a rule string ...
    rule = "drop if method:session/prompt kind:response"

    [[fault]]                      # ... or its parts (arg, position: as in a rule, unquoted)
    action = "delay"
    arg = "300ms~50ms"
    if = "dir:a2c update:agent_message_chunk"
    p = 0.1                        # nth, first, every, times: integers; after: "5s", "10 frames"

The seed is --seed, else seed= from ACP_PROXY_FAULTS, else the file's, else a random
one; it is recorded on the run so the run can be repeated.
"""

from __future__ import annotations

import difflib
import math
import re
import signal
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any

from acp_proxy.errors import UsageError
from acp_proxy.faults import remote
from acp_proxy.faults.actions import DIRECTIONS, Rule, RuleSet
from acp_proxy.limits import MAX_COUNT, SEED_RANGE
from acp_proxy.protocol import filters
from acp_proxy.protocol.filter_tree import And, HasFinding, Not, Or
from acp_proxy.protocol.vocabulary import A2C, C2A, FAULT_ACTIONS

if TYPE_CHECKING:
    pass

HELP = (__doc__[__doc__.index("FAULT RULES") :] if __doc__ else "") + "\n" + remote.HELP
"""The rule language, for ``acp-proxy faults-help`` and the README (the remote actions last)."""

ENV_VAR = "ACP_PROXY_FAULTS"
PIPES = {"agent-stdin": C2A, "client-stdout": A2C}
"""The pipes ``close`` can close, and the direction each one carries."""

ACTIONS = FAULT_ACTIONS
OPTIONS = ("nth", "first", "every", "p", "times", "after")
_COUNT_OPTIONS = ("nth", "first", "every")

# Standard JSON-RPC messages, so `error=-32601` reads like a real peer's error.
_ERROR_MESSAGES = {
    -32700: "Parse error",
    -32600: "Invalid Request",
    -32601: "Method not found",
    -32602: "Invalid params",
    -32603: "Internal error",
}
_DEFAULT_ERROR_CODE = -32603
_DEFAULT_SPLIT_PAUSE_NS = 10_000_000
# Durations are spelt as in the filter language (latency>1.5s): the same units, combinable.
_FRAMES = re.compile(r"(\d+) ?frames?")
_OPTION_WORD = re.compile(r"([a-z_]+)=")
SESSION_PLACEHOLDER = "${sessionId}"

# Bounds: a rule asks for something a run can carry out, or it is refused before the agent starts
# (a trillion duplicates or a delay of ages would hang the run; a huge split would exhaust memory).
MAX_DURATION_NS = 24 * 3600 * 10**9
"""The longest delay, jitter, split pause or after= a rule may name: one day."""
MAX_COPIES = 1000
"""duplicate=N: at most this many extra copies."""
MAX_PIECES = 1000
"""split=N: at most this many pieces."""
MAX_RULES = 1000
"""Rules one run may have, from all sources together."""
MAX_TOML_BYTES = 1024 * 1024
"""The largest --faults file read."""
ERROR_CODE_RANGE = (-(2**31), 2**31 - 1)
"""error=CODE: a 32-bit integer, as JSON-RPC implementations read codes."""


# -- errors --------------------------------------------------------------------------------


class RuleError(UsageError, ValueError):
    """A rule (or a rules file) that cannot be used; ``str()`` is meant for a person.

    ``message`` says what is wrong, ``where`` names the source (``--fault``,
    ``ACP_PROXY_FAULTS rule #2``, ``FILE: fault #2``), ``rule`` is the rule's text and ``column``
    the 0-based offset of the mistake in it, when known. Like ``filters.FilterError``, ``str()``
    is one line saying where and what, then the rule with a caret under the mistake.
    """

    def __init__(self, message: str, rule: str | None = None, column: int | None = None, where: str = "") -> None:
        self.message = message
        self.rule = rule
        self.column = column
        self.where = where
        super().__init__(message)

    def one_line(self) -> str:
        """``bad fault rule: WHERE: MESSAGE at column N in 'RULE'``: what ``acp-proxy run`` says."""
        where = f"{self.where}: " if self.where else ""
        at = f" at column {self.column + 1}" if self.column is not None else ""
        rule = ""
        if self.rule is not None:
            shown = self.rule if len(self.rule) <= 200 else self.rule[:197] + "..."
            rule = f" in {shown!r}"
        return f"bad fault rule: {where}{self.message}{at}{rule}"

    def __str__(self) -> str:
        head = f"{self.where}: {self.message}" if self.where else self.message
        if self.rule is None:
            return head
        if self.column is None:
            return f"{head}\n  {self.rule}"
        column = max(0, min(self.column, len(self.rule)))
        # A TOML rule string may span lines: show the line that holds the mistake.
        start = self.rule.rfind("\n", 0, column) + 1
        end = self.rule.find("\n", column)
        line = self.rule[start : end if end >= 0 else len(self.rule)]
        pad = "".join("\t" if c == "\t" else " " for c in line[: column - start])
        return f"{head}\n  {line}\n  {pad}^"


class _Bad(Exception):
    """A mistake inside one part of a rule; ``pos`` is relative to that part, when known."""

    def __init__(self, reason: str, pos: int | None = 0) -> None:
        super().__init__(reason)
        self.reason = reason
        self.pos = pos


# -- tokenizing ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Word:
    text: str
    """As written, quotes included."""
    start: int

    @property
    def end(self) -> int:
        return self.start + len(self.text)


def _skip_quoted(text: str, i: int) -> int:
    """Index just past the quoted string that starts at ``text[i]``."""
    quote = text[i]
    j = i + 1
    while j < len(text):
        c = text[j]
        if c == "\\" and quote == '"':
            j += 2
            continue
        if c == quote:
            return j + 1
        j += 1
    raise _Bad(f"unterminated {quote} quote", i)


def _words(text: str) -> list[_Word]:
    words = []
    i, n = 0, len(text)
    while i < n:
        if text[i].isspace():
            i += 1
            continue
        start = i
        while i < n and not text[i].isspace():
            i = _skip_quoted(text, i) if text[i] in "\"'" else i + 1
        words.append(_Word(text[start:i], start))
    return words


def _split_entries(value: str) -> list[str]:
    """Split on ; and newlines outside quotes; entries stripped, blank ones skipped."""
    entries = []
    start = i = 0
    while i <= len(value):
        if i == len(value) or value[i] in ";\n":
            if value[start:i].strip():
                entries.append(value[start:i].strip())
            start = i = i + 1
            continue
        i = _skip_quoted(value, i) if value[i] in "\"'" else i + 1
    return entries


def _unquote(text: str) -> str:
    """The text inside one quoted string that is the whole of ``text``; else ``text`` as is."""
    if len(text) < 2 or text[0] not in "\"'":
        return text
    try:
        end = _skip_quoted(text, 0)
    except _Bad:
        return text
    if end != len(text):
        return text
    inner = text[1:-1]
    if text[0] == "'":
        return inner
    return re.sub(r'\\(["\\])', r"\1", inner)


def _quote(text: str) -> str:
    """A word that ``_unquote`` turns back into ``text`` (for rendering TOML entries)."""
    if text and not any(c.isspace() or c in "\"'" for c in text):
        return text
    if "'" not in text:
        return f"'{text}'"
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _is_option(word: _Word) -> bool:
    m = _OPTION_WORD.match(word.text)
    return m is not None and m.group(1) in OPTIONS


def _looks_like_option(word: _Word) -> str | None:
    """A misspelt option at the end of a rule (``nht=2``): the option it was probably meant as."""
    m = _OPTION_WORD.match(word.text)
    if m is None or m.group(1) in OPTIONS or m.group(1) in filters.FIELDS:
        return None  # FIELD=VALUE is a filter term
    close = difflib.get_close_matches(m.group(1), OPTIONS, n=1, cutoff=0.6)
    return close[0] if close else None


# -- parsing values --------------------------------------------------------------------------


def parse_duration(text: str, *, bare_ms: bool = False) -> int:
    """``300ms``, ``1.5s``, ``1m30s`` -> nanoseconds; a bare number is ms when ``bare_ms``.

    Raises ValueError.
    """
    text = text.strip()
    if bare_ms and re.fullmatch(filters.NUMBER, text):
        return round(Fraction(text) * 10**6)
    value = filters.duration_ns(text)  # the filter language's durations: one spelling everywhere
    if value is None:
        raise ValueError(f"bad duration {text!r} (examples: 300ms, 1.5s, 1m30s; units ns us ms s m h d)")
    return round(value)


def _duration(text: str, pos: int = 0, *, bare_ms: bool = True) -> int:
    try:
        ns = parse_duration(text, bare_ms=bare_ms)
    except ValueError as exc:
        raise _Bad(str(exc), pos) from None
    if ns > MAX_DURATION_NS:
        raise _Bad(f"{text.strip()!r} is too long: a fault's durations are at most 24h", pos)
    return ns


def _positive_int(name: str, text: str, pos: int = 0, maximum: int = MAX_COUNT) -> int:
    if not re.fullmatch(r"\d+", text):
        raise _Bad(f"{name} needs a whole number, got {text!r}", pos)
    if len(text) > 20 or int(text) > maximum:
        raise _Bad(f"{name} is at most {maximum:,}, got {_shorten(text)}", pos)
    value = int(text)
    if value < 1:
        raise _Bad(f"{name} must be at least 1", pos)
    return value


def _shorten(text: str, limit: int = 30) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def check_seed(value: int, where: str = "--seed") -> int:
    """A seed within ``SEED_RANGE``; RuleError otherwise."""
    low, high = SEED_RANGE
    if not low <= value <= high:
        raise RuleError(f"{where} is a 64-bit integer ({low}..{high}), got {_shorten(str(value))}")
    return value


def _signal(text: str) -> tuple[int, str]:
    name = text.strip().upper()
    if re.fullmatch(r"\d+", name):
        try:
            sig = signal.Signals(int(name))
        except ValueError:
            raise _Bad(f"unknown signal number {text}") from None
        return int(sig), sig.name
    if not name.startswith("SIG"):
        name = "SIG" + name
    try:
        sig = signal.Signals[name]
    except KeyError:
        raise _Bad(f"unknown signal {text!r} (examples: SIGKILL, TERM, 9)") from None
    return int(sig), sig.name


def _action_params(action: str, arg: str | None, position: str | None) -> dict[str, Any]:
    """Check an action's argument and parse it into what its faults need."""
    try:
        if action == "drop":
            return remote.drop_params(arg)
        if action in remote.REMOTE_ONLY:
            return remote.params(action, arg, _duration)
    except remote.BadArgument as exc:
        raise _Bad(str(exc)) from None
    if action in ("reorder", "corrupt", "stall"):
        if arg is not None:
            raise _Bad(f"{action} takes no argument")
        return {}
    if action == "delay":
        if not arg:
            raise _Bad("delay needs a duration, e.g. delay=300ms or delay=300ms~50ms")
        base, _, jitter = arg.partition("~")
        params = {"ns": _duration(base), "jitter_ns": 0}
        if jitter:
            params["jitter_ns"] = _duration(jitter, len(base) + 1)
        return params
    if action == "duplicate":
        return {"copies": 1 if arg is None else _positive_int("duplicate", arg, maximum=MAX_COPIES)}
    if action == "truncate":
        if arg is None:
            return {"keep": None}
        if not re.fullmatch(r"\d+", arg):
            raise _Bad(f"truncate needs a number of bytes to keep, got {arg!r}")
        if len(arg) > 20 or int(arg) > MAX_COUNT:
            raise _Bad(f"truncate is at most {MAX_COUNT:,} bytes, got {_shorten(arg)}")
        return {"keep": int(arg)}
    if action == "split":
        if arg is None:
            return {"parts": 2, "pause_ns": _DEFAULT_SPLIT_PAUSE_NS}
        count, at, pause = arg.partition("@")
        parts = _positive_int("split", count, maximum=MAX_PIECES)
        if parts < 2:
            raise _Bad("split needs at least 2 pieces")
        pause_ns = _duration(pause, len(count) + 1) if at else _DEFAULT_SPLIT_PAUSE_NS
        return {"parts": parts, "pause_ns": pause_ns}
    if action == "error":
        if arg is None:
            return {"code": _DEFAULT_ERROR_CODE, "message": _ERROR_MESSAGES[_DEFAULT_ERROR_CODE]}
        code_text, colon, message = arg.partition(":")
        if not re.fullmatch(r"-?\d+", code_text.strip()):
            raise _Bad(f'error needs a JSON-RPC code, e.g. error=-32603 or error=-32000:"busy", got {arg!r}')
        code_text = code_text.strip()
        low, high = ERROR_CODE_RANGE
        if len(code_text) > 12 or not low <= int(code_text) <= high:
            raise _Bad(f"error codes are 32-bit integers ({low}..{high}), got {_shorten(code_text)}")
        code = int(code_text)
        message = _unquote(message) if colon else _ERROR_MESSAGES.get(code, "Error injected by acp-proxy")
        return {"code": code, "message": message}
    if action == "inject":
        if arg is None or not arg.strip():  # an empty payload would write a bare newline
            raise _Bad('inject needs a payload, e.g. inject=\'{"jsonrpc":"2.0",...}\'')
        if "\n" in arg:
            raise _Bad("an inject payload is one line: it may not contain a newline")
        return {"payload": arg, "position": position or "before"}
    if action == "kill":
        signum, signame = _signal(arg) if arg is not None else (int(signal.SIGKILL), "SIGKILL")
        return {"signum": signum, "signame": signame}
    if action == "close":
        if arg is not None and arg not in PIPES and arg != "stream":
            raise _Bad(f"close takes agent-stdin or client-stdout (or stream, on serve), got {arg!r}")
        return {"pipe": arg}
    raise _Bad(_unknown_action(action))


def _unknown_action(action: str) -> str:
    close = difflib.get_close_matches(action, ACTIONS, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else f" (actions: {', '.join(ACTIONS)})"
    return f"unknown action {action!r}{hint}"


def _option_value(name: str, value: str, pos: int = 0) -> dict[str, Any]:
    """One option, as the Rule fields it sets."""
    if name in ("nth", "first", "every", "times"):
        return {name: _positive_int(f"{name}=", value, pos)}
    if name == "p":
        try:
            p = float(value)
        except ValueError:
            p = math.nan
        if not (math.isfinite(p) and 0.0 <= p <= 1.0) or not re.fullmatch(r"[\d.eE+-]+", value):
            raise _Bad(f"p= is a probability between 0 and 1, got {value!r}", pos)
        return {"p": p}
    if name == "after":
        m = _FRAMES.fullmatch(value.strip())
        if m is not None:
            count = m.group(1)
            if len(count) > 20 or int(count) > MAX_COUNT:
                raise _Bad(f"after= is at most {MAX_COUNT:,} frames, got {_shorten(count)}", pos)
            return {"after_frames": int(count)}
        if re.fullmatch(r"\d+", value.strip()):
            raise _Bad(f"after= needs a unit: a duration (5s, 300ms) or frames (10 frames), got {value!r}", pos)
        return {"after_ns": _duration(value, pos, bare_ms=False)}
    raise _Bad(f"unknown option {name!r} (options: {', '.join(OPTIONS)})", pos)


def _check_options(found: list[tuple[str, int | None]]) -> None:
    """Each option once; nth, first and every exclude each other. ``found``: (name, pos)."""
    seen: dict[str, int | None] = {}
    for name, pos in found:
        if name in seen:
            raise _Bad(f"{name}= given twice", pos)
        counts = [other for other in _COUNT_OPTIONS if other in seen]
        if name in _COUNT_OPTIONS and counts:
            raise _Bad(f"{counts[0]}= and {name}= cannot be used together (pick one)", pos)
        seen[name] = pos


def _compile_filter(text: str) -> filters.Expr:
    """``filters.parse``, its error turned into a _Bad pointing into the filter text."""
    try:
        expr = filters.parse(text)
    except filters.FilterError as exc:
        raise _Bad(f"bad filter: {exc.message}", exc.column) from None
    if _selects_findings(expr):
        at = text.find("finding")
        raise _Bad(
            "a fault rule cannot select on finding: frames are checked after the relay passed them on",
            max(at, 0),
        )
    return expr


def _selects_findings(expr: filters.Expr) -> bool:
    """Whether ``expr`` names findings anywhere (a fault's frame has none yet: such a term is
    always false, or, negated, always true)."""
    if isinstance(expr, HasFinding):
        return True
    if isinstance(expr, And | Or):
        return any(_selects_findings(item) for item in expr.items)
    if isinstance(expr, Not):
        return _selects_findings(expr.item)
    return False


def _directions(expr: filters.Expr | None) -> frozenset[str]:
    """The relay directions a rule can match: what the filter allows (both without one).

    The filter answers from its own tree (``dir:`` terms, OR, NOT and aliases included) with a
    superset, so a direction left out here can never match — the relay may keep its fast path
    there.
    """
    if expr is None:
        return frozenset(DIRECTIONS)
    return expr.directions() & frozenset(DIRECTIONS)


def _build_rule(
    *,
    text: str,
    source: str,
    action: str,
    arg: str | None,
    params: dict[str, Any],
    filter_text: str | None,
    expr: filters.Expr | None,
    options: dict[str, Any],
) -> Rule:
    return Rule(
        text=text,
        source=source,
        action=action,
        arg=arg,
        params=params,
        filter_text=filter_text,
        expr=expr,
        directions=_directions(expr),
        **options,
    )


# -- sources -------------------------------------------------------------------------------


def parse_rule(text: str, source: str = "--fault") -> Rule:
    """Parse one rule string; RuleError (with the column of the mistake) when it is wrong."""
    try:
        _check_text(text)
        return _parse_rule(text, source)
    except _Bad as exc:
        raise RuleError(exc.reason, text, exc.pos, source) from None


def _parse_rule(text: str, source: str) -> Rule:
    words = _words(text)
    if not words:
        raise _Bad("empty rule", 0)
    head = words[0]
    name, eq, raw_arg = head.text.partition("=")
    if name not in ACTIONS:
        raise _Bad(_unknown_action(name), head.start)
    arg = _unquote(raw_arg) if eq else None
    arg_pos = head.start + len(name) + 1
    i = 1
    position = None
    if name == "inject" and i < len(words) and words[i].text in ("before", "after"):
        position = words[i].text
        i += 1
    try:
        params = _action_params(name, arg, position)
    except _Bad as exc:
        if not eq:
            raise _Bad(exc.reason, head.start) from None
        # Point inside the argument when the action said where (past a quote that was removed).
        shift = 1 if arg != raw_arg and raw_arg[:1] in "\"'" else 0
        raise _Bad(exc.reason, arg_pos + shift + (exc.pos or 0)) from None

    option_words: list[tuple[_Word, _Word | None]] = []  # (option word, its "frames" word)

    def take_option(k: int) -> int:
        """Record the option at words[k]; the index after it."""
        word = words[k]
        follower = None
        if word.text.startswith("after=") and k + 1 < len(words) and words[k + 1].text in ("frame", "frames"):
            follower = words[k + 1]
        option_words.append((word, follower))
        return k + (2 if follower else 1)

    filter_text = None
    filter_start = 0
    while i < len(words):
        word = words[i]
        if _is_option(word):
            i = take_option(i)
            continue
        if word.text == "if":
            body = words[i + 1 :]
            # Options are recognised from the end backwards, so the filter may hold anything.
            end = len(body)
            while end > 0:
                last = body[end - 1]
                if last.text in ("frame", "frames") and end >= 2 and body[end - 2].text.startswith("after="):
                    end -= 2
                elif _is_option(last):
                    end -= 1
                else:
                    meant = _looks_like_option(last)
                    if meant is not None:
                        raise _Bad(f"unknown option {last.text.split('=')[0]!r}; did you mean {meant}=?", last.start)
                    break
            if end == 0:
                raise _Bad("'if' needs a filter after it", word.end)
            filter_start = body[0].start
            filter_text = text[filter_start : body[end - 1].end]
            k = i + 1 + end
            while k < len(words):
                k = take_option(k)
            break
        if word.text in ("before", "after"):
            raise _Bad(f"{word.text!r} only follows an inject payload (inject=PAYLOAD {word.text})", word.start)
        meant = _looks_like_option(word)
        if meant is not None:
            raise _Bad(f"unknown option {word.text.split('=')[0]!r}; did you mean {meant}=?", word.start)
        hint = " (quote an argument that contains spaces)" if i == 1 and eq else ""
        raise _Bad(f"expected 'if FILTER' or an option ({'=, '.join(OPTIONS)}=), got {word.text!r}{hint}", word.start)

    options: dict[str, Any] = {}
    found: list[tuple[str, int | None]] = []
    for word, follower in option_words:
        key, _, value = word.text.partition("=")
        found.append((key, word.start))
        _check_options(found)
        value_text = _unquote(value) + (" " + follower.text if follower else "")
        options.update(_option_value(key, value_text, word.start + len(key) + 1))

    expr = None
    if filter_text is not None:
        try:
            expr = _compile_filter(filter_text)
        except _Bad as exc:
            raise _Bad(exc.reason, filter_start + (exc.pos or 0)) from None
    return _build_rule(
        text=text,
        source=source,
        action=name,
        arg=arg,
        params=params,
        filter_text=filter_text,
        expr=expr,
        options=options,
    )


def _check_text(text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        # Bytes that are not UTF-8 (from argv or the environment) can be neither matched nor
        # recorded as text.
        raise _Bad("not valid UTF-8 text", exc.start) from None


def parse_rules(rules: Sequence[str], source: str = "--fault") -> list[Rule]:
    """Parse rule strings (e.g. the repeated ``--fault`` values), in order."""
    return [parse_rule(text, source) for text in rules]


def from_env(value: str | None) -> RuleSet:
    """Rules from the value of ``ACP_PROXY_FAULTS`` (the caller reads the environment).

    Entries are separated by ``;`` or newlines outside quotes; blank entries are skipped; an
    entry ``seed=N`` sets the seed.
    """
    if not value:
        return RuleSet(())
    try:
        _check_text(value)
        entries = _split_entries(value)
    except _Bad as exc:
        raise RuleError(exc.reason, value, exc.pos, ENV_VAR) from None
    rules = []
    seed = None
    for number, entry in enumerate(entries, 1):
        where = f"{ENV_VAR} rule #{number}"
        m = re.fullmatch(r"seed\s*=\s*(\S*)", entry)
        if m is not None:
            if not re.fullmatch(r"-?\d+", m.group(1)) or len(m.group(1)) > 21:
                raise RuleError("seed= needs a whole number (64-bit)", entry, m.start(1), ENV_VAR)
            if seed is not None:  # the last would win in silence
                raise RuleError("seed= is given twice; keep one", entry, 0, ENV_VAR)
            seed = check_seed(int(m.group(1)), f"{ENV_VAR}: seed=")
            continue
        rules.append(parse_rule(entry, where))
    return RuleSet(tuple(rules), seed)


_TOML_PART_KEYS = ("action", "arg", "position", "if", *OPTIONS)


def parse_toml(text: str, name: str) -> RuleSet:
    """Rules from the text of a TOML rules file; ``name`` is how errors call the file."""
    if len(text) > MAX_TOML_BYTES:
        raise RuleError(f"a rules file is at most {MAX_TOML_BYTES:,} bytes, this one has {len(text):,}", where=name)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise RuleError(f"not valid TOML: {exc}", where=name) from None
    except RecursionError:
        raise RuleError("not valid TOML for acp-proxy: arrays or tables nest too deeply", where=name) from None
    unknown = [key for key in data if key not in ("seed", "fault")]
    if unknown:
        raise RuleError(f"unknown key {unknown[0]!r} (expected seed = N and [[fault]] tables)", where=name)
    seed = data.get("seed")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
        raise RuleError("seed must be a whole number", where=name)
    if seed is not None:
        check_seed(seed, f"{name}: seed")
    entries = data.get("fault", [])
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise RuleError("fault must be an array of tables: write each rule as a [[fault]] table", where=name)
    rules = tuple(_toml_rule(entry, f"{name}: fault #{n}") for n, entry in enumerate(entries, 1))
    return RuleSet(rules, seed)


def _toml_rule(entry: dict[str, Any], where: str) -> Rule:
    if "rule" in entry:
        extra = [key for key in entry if key != "rule"]
        if extra:
            raise RuleError(f'give either rule = "..." or its parts, not both (found {extra[0]!r})', where=where)
        if not isinstance(entry["rule"], str):
            raise RuleError("rule must be a string", where=where)
        return parse_rule(entry["rule"], where)
    for key in entry:
        if key not in _TOML_PART_KEYS:
            close = difflib.get_close_matches(key, [*_TOML_PART_KEYS, "rule"], n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise RuleError(f"unknown key {key!r}{hint}", where=where)
    if "action" not in entry:
        raise RuleError('needs rule = "..." or action = "..."', where=where)

    def string(key: str) -> str | None:
        value = entry.get(key)
        if value is None:
            return None
        if key == "arg" and isinstance(value, int | float) and not isinstance(value, bool):
            return str(value)
        if not isinstance(value, str):
            raise RuleError(f"{key} must be a string, got {value!r}", where=where)
        return value

    action, arg, position, filter_text = string("action"), string("arg"), string("position"), string("if")
    assert action is not None
    if position is not None and (action != "inject" or position not in ("before", "after")):
        raise RuleError("position is before or after, and only for inject", where=where)
    try:
        if action not in ACTIONS:
            raise _Bad(_unknown_action(action))
        params = _action_params(action, arg, position)
    except _Bad as exc:
        key = "action" if action not in ACTIONS else "arg"
        raise RuleError(f"{key}: {exc.reason}", where=where) from None
    options: dict[str, Any] = {}
    found: list[tuple[str, int | None]] = []
    for key in OPTIONS:
        if key not in entry:
            continue
        value = entry[key]
        found.append((key, None))
        try:
            _check_options(found)
            if key == "after":
                if not isinstance(value, str):
                    raise _Bad(f'after must be a string such as "5s" or "10 frames", got {value!r}')
            elif key == "p":
                if not isinstance(value, int | float) or isinstance(value, bool):
                    raise _Bad(f"p must be a number between 0 and 1, got {value!r}")
                value = repr(float(value))
            elif not isinstance(value, int) or isinstance(value, bool):
                raise _Bad(f"{key} must be a whole number, got {value!r}")
            else:
                value = str(value)
            options.update(_option_value(key, value))
        except _Bad as exc:
            raise RuleError(f"{key}: {exc.reason}", where=where) from None
    expr = None
    if filter_text is not None:
        try:
            expr = _compile_filter(filter_text)
        except _Bad as exc:
            raise RuleError(exc.reason, filter_text, exc.pos, f"{where}: if") from None
    # The rule as one string, so it reads the same as a --fault rule in messages and records.
    words = [action + ("" if arg is None else "=" + _quote(arg))]
    if position is not None:
        words.append(position)
    if filter_text is not None:
        words += ["if", filter_text]
    for key in OPTIONS:
        if key in entry:
            words.append(f"{key}={entry[key]}")
    return _build_rule(
        text=" ".join(words),
        source=where,
        action=action,
        arg=arg,
        params=params,
        filter_text=filter_text,
        expr=expr,
        options=options,
    )


def load_toml(path: str | Path) -> RuleSet:
    """Rules from a TOML file (the shape is in the module docstring)."""
    file = Path(path)
    try:
        if file.exists() and not file.is_file():  # a FIFO would block the read, a directory fail it
            raise RuleError(f"cannot read {path}: not a regular file")
        with file.open("rb") as handle:
            data = handle.read(MAX_TOML_BYTES + 1)
        if len(data) > MAX_TOML_BYTES:
            raise RuleError(f"{path}: a rules file is at most {MAX_TOML_BYTES:,} bytes")
        text = data.decode("utf-8")
    except OSError as exc:
        raise RuleError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise RuleError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    return parse_toml(text, str(path))
