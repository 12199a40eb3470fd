"""The one filter language: parse it once, then ask a live frame or the database.

Owns: the syntax below, its error messages (they point at the column of the mistake, for a
person typing), and its two backends: ``Expr.matches(record)``, a predicate over a live
``record.FrameRecord`` (or any object with the attributes named by ``frames.FRAME_COLUMNS``), and
``Expr.to_sql()``, a parameterised SQL ``WHERE`` fragment over the ``frames`` table. ``frames``,
``tail``, ``export`` and fault selectors (``faults``) all use it; there is no second matcher.
Here: the lexer, the parser and each field's values; the node classes, with both backends, are
in ``filter_tree.py`` (re-exported: ``filters.Expr`` is the public name).

Must not know: pipes, processes, SQL connections, the clock (a relative time such as
``since:10m`` is measured from the ``now_ns`` the caller passes; only when it passes none is the
clock read, once, while parsing).

Rule 1: both backends agree on every frame. Each term compiles to one small node class; every
node says how to match in Python and how to write itself in SQL. Negation is pushed down to the
terms (De Morgan) before SQL is written, and each term knows its own negation, so SQL's NULL
(three-valued logic) can never make ``-method:x`` skip the frames that have no method: a
missing value does not match a term, and does match its negation, in both backends. A
hypothesis test checks the agreement on random frames and random filters.

Rule 2: user text reaches SQL only as a bound parameter. The only values spelled into the SQL
text are constants of this module and ``filter_tree`` (column names, operators, and values taken from its own
closed lists: kinds, directions, flags), so that SQLite can use the partial indexes on them.

FILTER LANGUAGE
===============

A filter is a list of terms; a frame is selected when it matches all of them.

    dir:a2c update:agent_message_chunk session:3f2a
    method:session/prompt kind:response latency>2s
    kind:error OR unanswered
    -(method:session/update OR dir:stderr) text:"permission denied"
    run:last since:10m

An empty filter selects every frame.

Terms
    FIELD:VALUE        the field has this value (FIELD=VALUE is the same)
    FIELD              the field has a value at all: method, id, session, update, item,
                       error, fault, finding, unknown, latency, note, comment
    FIELD>N  FIELD>=N  FIELD<N  FIELD<=N
                       compare a number: seq, run, size, latency, error
    FIELD:A..B         a range, both ends included; leave one out for an open range:
                       seq:100.., latency:..5ms
    FLAG               replay, live, unanswered, dropped, cut, unterminated, marked, control
    "some text"        a quoted string alone: the same as text:"some text"

Combining, strongest first
    -TERM, NOT TERM    not; also of a group: -(kind:request OR kind:response)
    A B, A AND B       both
    A OR B             either
    ( ... )            grouping
The words OR, AND and NOT are recognised in any case.

Values
    Quote a value that holds spaces, parentheses or quotes: text:"permission denied". Inside
    "..." a backslash makes the next character plain (\\" and \\\\); inside '...' nothing is
    special, which suits JSON: text:'"stopReason":"cancelled"'. In a shell, put the whole
    filter in single quotes when it has quotes or parentheses of its own.
    In an unquoted value of dir, kind, method, update, item, session, unknown or finding, a *
    stands for any run of characters: method:session/* is every session/... method. Quoted, *
    is a star.
    Field names are case-insensitive; values are case-sensitive (text, note and error
    messages: see text).

Fields
    dir:D          which way the line went: c2a (client to agent), a2c (agent to client),
                   stderr (the agent's stderr); client means c2a, agent means a2c. dir:proxy:
                   lines acp-proxy wrote itself (injected frames, error replies), either way
    kind:K         request, notification, response, error, batch, invalid, stderr
    method:M       the JSON-RPC method; a response carries the method of its request
    id:ID          the JSON-RPC id, compared as JSON: id:7 is the number 7, id:"7" the string
                   "7", id:abc the string "abc" (unquoted and not a number: a string),
                   id:null the null id; no * here
    session:S      the sessionId starts with S: session:3f2a (with a *, the whole id must
                   match the pattern)
    update:U       the session/update variant (sessionUpdate): update:agent_message_chunk
    item:I         the id of the item an update is about: messageId, toolCallId, planId,
                   terminalId, compactionId, ...
    error          an error response: the same as kind:error
    error:CODE     the error code, a number or a range: error:-32601, error:-32099..-32000
    error:TEXT     the error message contains TEXT (not a number, or quoted: error:"-1")
    text:T         the line contains T, byte for byte (lines that are not valid UTF-8
                   included). When T has no capital letter A-Z, ASCII case is ignored:
                   text:denied finds "Denied"; one capital makes the match exact
    note:T         the proxy's note on the frame (why it was flagged, dropped or withheld)
                   contains T, case as for text
    comment:T      the comment of a person's mark on the frame (acp-proxy mark --note)
                   contains T, case as for text; comment alone is the same as marked
    fault          a fault was applied to the frame
    fault:ACTION   that fault was applied: fault:drop, fault:delay, fault:corrupt, ...
    finding        a conformance check found something on the frame (acp-proxy check --save,
                   or acp-proxy run --check)
    finding:RULE   a finding of that rule: finding:jsonrpc/not-json, finding:schema/*
    finding:SEV    a finding of that severity: error, warning or info (rule ids always hold
                   a /, severities never do). Fault selectors see no findings: a frame is
                   checked after the relay has passed it on
    unknown        the method or update variant is not in the ACP schema
    unknown:U      extension (a name starting with _) or future (not in the schema)
    latency        on a response, the time since its request: latency>500ms,
                   latency:1s..5s. Units ns, us (or µs), ms, s, m, h, d, combined as in
                   1m30s; a number alone is milliseconds
    size           the line's length in bytes: size>=1KiB. Units B, KB, MB, GB (powers of
                   1000), KiB, MiB, GiB (powers of 1024), in any case; a number alone is bytes
    seq:N          the frame's number within its run: seq:10..20, seq>100
    run:N          the run: run:3, run:2..4, run>2, run:last (the newest run)
    since:T        recorded at or after T
    until:T        recorded at or before T; a date alone runs to the end of that day
                   T is an ISO-8601 date or date-time (2025-05-01, 2025-05-01T14:30,
                   2025-05-01T14:30:00.250Z, 2025-05-01T14:30+02:00), a time of day today
                   (14:30, 14:30:05), or a duration ago (30s, 10m, 2h, 1d, 1h30m). Without
                   an offset, times are the local time of this machine

Flags
    replay         sent inside a session/load or session/resume history replay window
    live           not replay
    unanswered     a request that no response answered before the run ended
    dropped        not forwarded by the proxy (a fault, or a withheld notice)
    cut            recorded only in part (--max-record-bytes)
    unterminated   a last line that ended without a newline
    marked         a person marked the frame (acp-proxy mark REF:SEQ)
    control        an acp-proxy ctl action, or a frame one held, released, edited or sent

A frame that lacks a field (a notification has no id, a request no latency) does not match
FIELD:VALUE, and does match -FIELD:VALUE: -method:initialize also selects stderr lines.
"""

from __future__ import annotations

import datetime as dt
import difflib
import math
import re
import time
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any

import msgspec

from acp_proxy.errors import UsageError
from acp_proxy.protocol.controls import CTL
from acp_proxy.protocol.filter_tree import (
    DIRECTIONS,
    SEVERITIES,
    And,
    Compare,
    Const,
    Contains,
    Equals,
    Expr,
    Glob,
    HasFinding,
    HasMark,
    LastRun,
    Listed,
    Not,
    Or,
    Prefix,
    Present,
    Text,
)
from acp_proxy.protocol.vocabulary import FAULT_ACTIONS

__all__ = [
    "DIRECTIONS",
    "FIELDS",
    "FLAGS",
    "HELP",
    "KINDS",
    "SEVERITIES",
    "UNKNOWN_VALUES",
    "Expr",
    "FilterError",
    "compile_filter",
    "parse",
]

HELP = __doc__[__doc__.index("FILTER LANGUAGE") :] if __doc__ else ""
"""The language's documentation, for ``acp-proxy frames --help``."""

TRAVEL_DIRECTIONS = (*DIRECTIONS, "proxy")
"""What ``dir:`` accepts: ``proxy`` selects by the ``origin`` column, whichever way a line went."""
DIRECTION_ALIASES = {"client": "c2a", "agent": "a2c"}
KINDS = ("request", "notification", "response", "error", "batch", "invalid", "stderr")
UNKNOWN_VALUES = ("extension", "future")

MAX_TERMS = 256
"""Terms one filter may hold: more is surely generated by mistake, and SQLite's expression
depth (1,000) must hold the compiled ``WHERE``."""
MAX_DEPTH = 16
"""How deeply parentheses and negations may nest (SQLite's parser gives out past about 20 levels
of alternating AND and OR)."""
MAX_LENGTH = 64 * 1024
"""Characters one filter may have."""

# SQLite integers are 64-bit: bounds outside are folded into "always" / "never" before binding.
_INT_MIN = -(2**63)
_INT_MAX = 2**63 - 1


class FilterError(UsageError, ValueError):
    """A filter that cannot be parsed. ``column`` is the 0-based offset of the mistake.

    ``str()`` gives the message on its first line, then (when the text is known) the filter
    with a caret under the column.
    """

    def __init__(self, message: str, column: int, text: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.column = column
        self.text = text

    def one_line(self) -> str:
        """``bad filter: MESSAGE at column N in 'FILTER'`` (a long filter shown around N)."""
        if self.text is None:
            return f"bad filter: {self.message}"
        return f"bad filter: {self.message} at column {self.column + 1} in {_excerpt(self.text, self.column)!r}"

    def __str__(self) -> str:
        if self.text is None:
            return self.message
        start = self.text.rfind("\n", 0, self.column) + 1
        end = self.text.find("\n", self.column)
        line = self.text[start : end if end >= 0 else len(self.text)]
        pad = "".join("\t" if c == "\t" else " " for c in line[: self.column - start])
        return f"{self.message}\n  {line}\n  {pad}^"


def _excerpt(text: str, column: int, room: int = 60) -> str:
    if len(text) <= room:
        return text
    start = max(0, min(column - room // 2, len(text) - room))
    return ("..." if start else "") + text[start : start + room] + ("..." if start + room < len(text) else "")


# -- lexer -----------------------------------------------------------------------------------


class _Token:
    __slots__ = ("end", "key", "kind", "op", "quoted", "start", "value", "value_pos")

    def __init__(self, kind: str, start: int, end: int) -> None:
        self.kind = kind  # ( ) - OR AND NOT TERM (FIELD[OP VALUE]) TEXT ("quoted") WORD (bad) EOF
        self.start = start
        self.end = end
        self.key = ""
        self.op: str | None = None
        self.value: str | None = None
        self.value_pos = start
        self.quoted = False


_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_OPS = (">=", "<=", ">", "<", ":", "=")
_KEYWORDS = ("OR", "AND", "NOT")


def _stop(text: str, i: int) -> bool:
    return i >= len(text) or text[i].isspace() or text[i] in "()"


def _quoted(text: str, i: int) -> tuple[str, int]:
    """The string starting at the quote ``text[i]``, and the offset after its closing quote."""
    quote = text[i]
    out: list[str] = []
    j = i + 1
    while j < len(text):
        c = text[j]
        if c == quote:
            if not _stop(text, j + 1):
                raise FilterError(f"put a space after the closing {quote} quote", j + 1)
            return "".join(out), j + 1
        if c == "\\" and quote == '"' and j + 1 < len(text):
            j += 1
            c = text[j]
        out.append(c)
        j += 1
    raise FilterError(f"unterminated {quote} quote", i)


def _lex(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    i = 0
    n = len(text)
    while True:
        while i < n and text[i].isspace():
            i += 1
        if i >= n:
            tokens.append(_Token("EOF", n, n))
            return tokens
        c = text[i]
        if c in "()-":
            tokens.append(_Token(c, i, i + 1))
            i += 1
            continue
        if c in "\"'":
            value, end = _quoted(text, i)
            tok = _Token("TEXT", i, end)
            tok.value, tok.value_pos, tok.quoted = value, i, True
            tokens.append(tok)
            i = end
            continue
        m = _KEY.match(text, i)
        end = m.end() if m else i
        op = next((o for o in _OPS if text.startswith(o, end)), None) if m else None
        if m is None or (op is None and not _stop(text, end)):
            # Not a word this language has: read it whole to say what it was.
            while not _stop(text, end):
                end += 1
            tok = _Token("WORD", i, end)
            tok.value = text[i:end]
            tokens.append(tok)
            i = end
            continue
        key = m.group(0)
        if op is None:
            kind = key.upper() if key.upper() in _KEYWORDS else "TERM"
            tok = _Token(kind, i, end)
            tok.key = key.lower()
            tokens.append(tok)
            i = end
            continue
        tok = _Token("TERM", i, end)
        tok.key, tok.op = key.lower(), op
        j = end + len(op)
        tok.value_pos = j
        if j < n and text[j] in "\"'":
            tok.value, j = _quoted(text, j)
            tok.quoted = True
        else:
            while not _stop(text, j):
                j += 1
            tok.value = text[tok.value_pos : j]
            if not tok.value:
                raise FilterError(f"{key}{op} needs a value{_example(tok.key)}", tok.value_pos)
        tok.end = j
        tokens.append(tok)
        i = j


# -- parser ----------------------------------------------------------------------------------


class _Context:
    def __init__(self, text: str, now_ns: int | None, last_run: int | None) -> None:
        self.text = text
        self._now_ns = now_ns
        self.last_run = last_run

    @property
    def now_ns(self) -> int:
        if self._now_ns is None:
            self._now_ns = time.time_ns()
        return self._now_ns


class _Parser:
    """or := and (OR and)* ; and := unary ([AND] unary)* ; unary := (- | NOT) unary | primary ;
    primary := ( or ) | term"""

    def __init__(self, tokens: list[_Token], ctx: _Context) -> None:
        self.tokens = tokens
        self.i = 0
        self.ctx = ctx
        self.terms = 0
        self.depth = 0

    def _deeper(self, tok: _Token) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise FilterError(f"parentheses and negations nest more than {MAX_DEPTH} deep here", tok.start)

    @property
    def tok(self) -> _Token:
        return self.tokens[self.i]

    def take(self) -> _Token:
        tok = self.tokens[self.i]
        self.i += 1
        return tok

    def parse(self) -> Expr:
        if self.tok.kind == "EOF":
            return Const(True)
        expr = self.or_()
        if self.tok.kind == ")":
            raise FilterError("unmatched )", self.tok.start)
        assert self.tok.kind == "EOF"
        return expr

    def or_(self) -> Expr:
        items = [self.and_()]
        while self.tok.kind == "OR":
            self.take()
            items.append(self.and_())
        return items[0] if len(items) == 1 else Or(items)

    def and_(self) -> Expr:
        items = [self.unary()]
        while self.tok.kind not in ("OR", ")", "EOF"):
            if self.tok.kind == "AND":
                self.take()
            items.append(self.unary())
        return items[0] if len(items) == 1 else And(items)

    def unary(self) -> Expr:
        tok = self.tok
        if tok.kind in ("-", "NOT"):
            self.take()
            if self.tok.kind in ("OR", "AND", ")", "EOF"):
                raise FilterError(f"nothing to negate after {tok.key.upper() or '-'}", self.tok.start)
            self._deeper(tok)
            inner = self.unary()
            self.depth -= 1
            return Not(inner)
        return self.primary()

    def primary(self) -> Expr:
        tok = self.take()
        if tok.kind == "(":
            if self.tok.kind == ")":
                raise FilterError("empty parentheses", self.tok.start)
            self._deeper(tok)
            inner = self.or_()
            self.depth -= 1
            if self.tok.kind != ")":
                raise FilterError("unclosed ( here", tok.start)
            self.take()
            return inner
        if tok.kind in ("TEXT", "TERM"):
            self.terms += 1
            if self.terms > MAX_TERMS:
                raise FilterError(f"a filter holds at most {MAX_TERMS} terms; this is term {self.terms}", tok.start)
        if tok.kind == "TEXT":
            assert tok.value is not None
            expr: Expr = Text(tok.value)
        elif tok.kind == "TERM":
            self._check_split_text(tok)
            expr = _term(tok, self.ctx)
        elif tok.kind == "WORD":
            raise FilterError(_unknown_word(tok.value or ""), tok.start)
        elif tok.kind in ("OR", "AND"):
            raise FilterError(f"{tok.kind} needs a term before it", tok.start)
        elif tok.kind == ")":
            raise FilterError("unmatched )", tok.start)
        elif tok.kind == "EOF":
            raise FilterError("the filter ends too soon: a term is missing here", tok.start)
        else:
            raise FilterError("expected a term", tok.start)
        expr.source = self.ctx.text[tok.start : tok.end]
        return expr

    def _check_split_text(self, tok: _Token) -> None:
        """``text:permission denied``: a shell ate the quotes, or they were never typed."""
        before = self.tokens[self.i - 2] if self.i >= 2 else None
        if (
            tok.op is None
            and tok.key not in FLAGS
            and tok.key not in FIELDS
            and before is not None
            and before.kind == "TERM"
            and before.key in ("text", "note", "error")
            and before.op in (":", "=")
            and not before.quoted
        ):
            words = self.ctx.text[before.value_pos : tok.end]
            raise FilterError(
                f"unknown word {self.ctx.text[tok.start : tok.end]!r}; to search for words with spaces, "
                f'quote them: {before.key}:"{words}" (in a shell, put the whole filter in single quotes)',
                tok.start,
            )


def parse(text: str, *, now_ns: int | None = None, last_run: int | None = None) -> Expr:
    """Parse a filter; raise ``FilterError`` pointing at the mistake.

    ``now_ns``: the instant relative times (``since:10m``, ``until:14:30``) are measured from;
    the clock when not given. ``last_run``: the id ``run:last`` stands for; when not given, the
    SQL asks the ``runs`` table and the predicate takes every frame as the last run's.
    """
    try:
        _check_text(text)
        return _Parser(_lex(text), _Context(text, now_ns, last_run)).parse()
    except FilterError as exc:
        exc.text = text
        raise


def _check_text(text: str) -> None:
    if len(text) > MAX_LENGTH:
        raise FilterError(f"a filter has at most {MAX_LENGTH:,} characters, not {len(text):,}", MAX_LENGTH)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        # A byte that is not UTF-8 (from a shell or an environment variable) cannot be searched
        # for, nor bound as SQL text.
        raise FilterError("the filter is not valid UTF-8 text", exc.start) from None


def compile_filter(
    text: str, *, now_ns: int | None = None, last_run: int | None = None
) -> tuple[Callable[[Any], bool], str, list[Any]]:
    """``parse`` and both backends at once: (predicate, SQL ``WHERE`` fragment, parameters)."""
    expr = parse(text, now_ns=now_ns, last_run=last_run)
    sql, params = expr.to_sql()
    return expr.matches, sql, params


# -- terms -----------------------------------------------------------------------------------


_EXAMPLES = {
    "dir": "dir:a2c",
    "kind": "kind:request",
    "method": "method:session/prompt",
    "id": "id:1",
    "session": "session:3f2a",
    "update": "update:agent_message_chunk",
    "item": "item:call_1",
    "error": "error:-32603",
    "text": 'text:"permission denied"',
    "note": "note:stripped",
    "comment": 'comment:"look here"',
    "fault": "fault:drop",
    "finding": "finding:schema/*",
    "unknown": "unknown:extension",
    "latency": "latency>500ms",
    "size": "size>=1KiB",
    "seq": "seq:10..20",
    "run": "run:last",
    "since": "since:10m",
    "until": "until:2025-05-01T14:30",
}


def _example(key: str) -> str:
    return f", e.g. {_EXAMPLES[key]}" if key in _EXAMPLES else ""


def _suggest(word: str, choices: Sequence[str]) -> str:
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return f"; did you mean {close[0]}?" if close else ""


def _term(tok: _Token, ctx: _Context) -> Expr:
    key = tok.key
    if key in FLAGS:
        if tok.op is not None:
            raise FilterError(f"{key} is a flag and takes no value: write {key} or -{key}", tok.start)
        return FLAGS[key]()
    handler = FIELDS.get(key)
    if handler is None:
        if tok.op is None:
            raise FilterError(_unknown_word(ctx.text[tok.start : tok.end]), tok.start)
        raise FilterError(f"unknown field {key!r}{_suggest(key, [*FIELDS, *FLAGS])}", tok.start)
    return handler(tok, ctx)


def _unknown_word(word: str) -> str:
    if word.startswith("!"):
        return f"unknown word {word!r}; negate with -, as in -{word[1:]}"
    if "/" in word:
        return f"unknown word {word!r}; did you mean method:{word}?"
    hint = _suggest(word.lower(), [*FLAGS, *FIELDS, "OR", "AND", "NOT"])
    if not hint:
        hint = f'; to search the frames\' text, write text:"{word}"'
    return f"unknown word {word!r}{hint}"


def _no_compare(tok: _Token) -> None:
    if tok.op not in (None, ":", "="):
        raise FilterError(f"{tok.key} is not a number: write {tok.key}:VALUE", tok.start + len(tok.key))


def _needs_value(tok: _Token) -> str:
    if tok.op is None or tok.value is None:
        raise FilterError(f"{tok.key} needs a value{_example(tok.key)}", tok.end)
    return tok.value


def _string_field(
    column: str,
    *,
    choices: Sequence[str] | None = None,
    aliases: dict[str, str] | None = None,
    prefix: bool = False,
    present: bool = True,
) -> Callable[[_Token, _Context], Expr]:
    def build(tok: _Token, ctx: _Context) -> Expr:
        _no_compare(tok)
        if tok.op is None and present:
            return Present(column)
        value = _needs_value(tok)
        if not tok.quoted and "*" in value:
            return Glob(column, value)
        if aliases and value in aliases:
            value = aliases[value]
        if choices is not None:
            if value not in choices:
                named = [*choices, *(aliases or ())]
                raise FilterError(
                    f"{tok.key} is one of {', '.join(named)}, not {value!r}{_suggest(value, named)}",
                    tok.value_pos,
                )
            return Equals(column, value, literal=True)
        return Prefix(column, value) if prefix else Equals(column, value)

    return build


_dir_travelled = _string_field("dir", choices=TRAVEL_DIRECTIONS, aliases=DIRECTION_ALIASES, present=False)


def _dir_field(tok: _Token, ctx: _Context) -> Expr:
    # Lines the proxy writes travel one way or the other like any line (pairing and folding
    # need that); who wrote them is a column of its own.
    if tok.op is not None and tok.value == "proxy":
        return Equals("origin", "proxy", literal=True)
    return _dir_travelled(tok, ctx)


def _id_field(tok: _Token, ctx: _Context) -> Expr:
    _no_compare(tok)
    if tok.op is None:
        return Present("rpc_id")
    value = _needs_value(tok)
    if tok.quoted:
        json_text = msgspec.json.encode(value).decode()
    elif re.fullmatch(r"-?\d+", value):
        json_text = str(int(value))  # as the recorder canonicalises it: 007 -> 7
    elif value == "null" or re.fullmatch(r"-?\d+(\.\d+)?([eE][+-]?\d+)?", value):
        json_text = value  # null, and non-integer numbers kept as written on the wire
    else:
        json_text = msgspec.json.encode(value).decode()
    return Equals("rpc_id", json_text)


def _text_field(tok: _Token, ctx: _Context) -> Expr:
    _no_compare(tok)
    return Text(_needs_value(tok))


def _note_field(tok: _Token, ctx: _Context) -> Expr:
    _no_compare(tok)
    if tok.op is None:
        return Present("note")
    return Contains("note", _needs_value(tok))


def _comment_field(tok: _Token, ctx: _Context) -> Expr:
    # Not note: that is the proxy's own note on a frame; a comment is a person's, on a mark.
    _no_compare(tok)
    if tok.op is None:
        return HasMark()
    return HasMark(_needs_value(tok))


def _fault_field(tok: _Token, ctx: _Context) -> Expr:
    _no_compare(tok)
    if tok.op is None:
        return Present("fault")
    value = _needs_value(tok)
    if not tok.quoted and value not in FAULT_ACTIONS:  # a name no fault has: nothing, in silence
        raise FilterError(
            f"fault takes an action ({', '.join(FAULT_ACTIONS)}), not {value!r}{_suggest(value, FAULT_ACTIONS)}",
            tok.value_pos,
        )
    return Listed("fault", value)


def _finding_field(tok: _Token, ctx: _Context) -> Expr:
    _no_compare(tok)
    if tok.op is None:
        return HasFinding("any")
    value = _needs_value(tok)
    if not tok.quoted and "*" in value:
        return HasFinding("glob", value)
    if value in SEVERITIES:  # quoted or not: a severity is no pattern that quotes could change
        return HasFinding("severity", value)
    if "/" not in value:
        # Neither a rule id (they all hold a /) nor a severity: say so rather than select nothing.
        raise FilterError(
            f"finding takes a rule id (finding:jsonrpc/not-json), a pattern (finding:schema/*) or a "
            f"severity ({', '.join(SEVERITIES)}), not {value!r}{_suggest(value, SEVERITIES)}",
            tok.value_pos,
        )
    return HasFinding("rule", value)


def _error_field(tok: _Token, ctx: _Context) -> Expr:
    if tok.op is None:
        return Equals("kind", "error", literal=True)  # only error responses carry a code
    value = _needs_value(tok)
    if tok.op in (":", "=") and (tok.quoted or not re.fullmatch(r"-?\d*(\.\.-?\d*)?", value)):
        return Contains("error_message", value)
    return _numeric(tok, "error_code", _integer)


# Numbers: each parser turns the text of one value into an exact Fraction in the column's unit.

_NUMBER = r"(?:\d+(?:\.\d*)?|\.\d+)"
_DURATION_UNITS = {
    "ns": 1,
    "us": 10**3,
    "µs": 10**3,
    "μs": 10**3,
    "ms": 10**6,
    "s": 10**9,
    "m": 60 * 10**9,
    "h": 3600 * 10**9,
    "d": 86400 * 10**9,
}
_DURATION_PART = re.compile(rf"({_NUMBER})(ns|us|µs|μs|ms|s|m|h|d)")
_DURATION = re.compile(rf"(?:{_NUMBER}(?:ns|us|µs|μs|ms|s|m|h|d))+")
_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
}
_SIZE = re.compile(rf"({_NUMBER})([A-Za-z]*)")


class _BadValue(Exception):
    pass


def _integer(text: str) -> Fraction:
    if not re.fullmatch(r"-?\d+", text):
        raise _BadValue("a whole number")
    return Fraction(int(text))


def duration_ns(text: str) -> Fraction | None:
    """``300ms``, ``1.5s``, ``1m30s`` -> nanoseconds; None when the text is not a duration.

    Public: fault rules (``faults/rules.py``) spell durations the same way.
    """
    return _duration_ns(text)


NUMBER = _NUMBER


def _duration_ns(text: str) -> Fraction | None:
    if not _DURATION.fullmatch(text):
        return None
    return sum(
        (Fraction(m.group(1)) * _DURATION_UNITS[m.group(2)] for m in _DURATION_PART.finditer(text)),
        Fraction(0),
    )


def _latency(text: str) -> Fraction:
    if re.fullmatch(_NUMBER, text):
        return Fraction(text) * 10**6  # a number alone: milliseconds
    value = _duration_ns(text)
    if value is None:
        raise _BadValue("a duration such as 500ms, 1.5s or 2m (units ns, us, ms, s, m, h, d)")
    return value


def _size(text: str) -> Fraction:
    m = _SIZE.fullmatch(text)
    unit = _SIZE_UNITS.get(m.group(2).lower()) if m else None
    if m is None or unit is None:
        raise _BadValue("a size such as 300, 4KB or 1.5MiB (units B, KB, MB, GB, KiB, MiB, GiB)")
    return Fraction(m.group(1)) * unit


def _numeric(tok: _Token, column: str, number: Callable[[str], Fraction]) -> Expr:
    value = _needs_value(tok)

    def read(text: str, offset: int) -> Fraction:
        try:
            return number(text)
        except _BadValue as exc:
            raise FilterError(f"{tok.key} needs {exc}, not {text!r}", tok.value_pos + offset) from None

    if tok.op in (":", "="):
        if ".." in value:
            lo_text, _, hi_text = value.partition("..")
            if not lo_text and not hi_text:
                raise FilterError(f"a range needs at least one end{_example(tok.key)}", tok.value_pos)
            items = []
            lo = read(lo_text, 0) if lo_text else None
            hi = read(hi_text, len(lo_text) + 2) if hi_text else None
            if lo is not None and hi is not None and lo > hi:  # it would select nothing, in silence
                raise FilterError(
                    f"the range {value!r} is reversed; did you mean {tok.key}:{hi_text}..{lo_text}?", tok.value_pos
                )
            if lo is not None:
                items.append(_bound(column, ">=", lo))
            if hi is not None:
                items.append(_bound(column, "<=", hi))
            return items[0] if len(items) == 1 else And(items)
        return _bound(column, "=", read(value, 0))
    assert tok.op is not None
    if ".." in value:
        raise FilterError(f"a range goes with ':': {tok.key}:A..B", tok.value_pos)
    return _bound(column, tok.op, read(value, 0))


def _bound(column: str, op: str, value: Fraction) -> Expr:
    """``column OP value`` over whole 64-bit numbers. ``value`` is made a whole number first
    (``x > 2.5`` is ``x > 2``, ``x < 2.5`` is ``x < 3``) so that both backends compare the same
    integers, and bounds beyond SQLite's integers become "never" or "whenever the column has
    a value"."""
    if op == "=":
        if value.denominator != 1 or not _INT_MIN <= value <= _INT_MAX:
            return Const(False)
        return Equals(column, int(value))
    n = math.floor(value) if op in (">", "<=") else math.ceil(value)
    # The smallest and largest whole numbers the comparison lets through.
    low, high = {">": (n + 1, None), ">=": (n, None), "<": (None, n - 1), "<=": (None, n)}[op]
    if (low is not None and low > _INT_MAX) or (high is not None and high < _INT_MIN):
        return Const(False)
    if (low is not None and low <= _INT_MIN) or (high is not None and high >= _INT_MAX):
        return Present(column)
    return Compare(column, op, n)


def _numeric_field(
    column: str, number: Callable[[str], Fraction], *, present: bool
) -> Callable[[_Token, _Context], Expr]:
    def build(tok: _Token, ctx: _Context) -> Expr:
        if tok.op is None and present:
            return Present(column)
        return _numeric(tok, column, number)

    return build


def _run_field(tok: _Token, ctx: _Context) -> Expr:
    if tok.op in (":", "=") and tok.value == "last":
        return LastRun() if ctx.last_run is None else Equals("run_id", ctx.last_run)
    return _numeric(tok, "run_id", _integer)


# Times.

_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_TIME_OF_DAY = re.compile(r"(\d{1,2}):(\d{2})(?::(\d{2})(?:\.(\d+))?)?")
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_TIME_HELP = (
    "a date (2025-05-01), a date-time (2025-05-01T14:30:00Z), a time of day (14:30) or a duration ago (10m, 2h, 1d)"
)


def _ns(moment: dt.datetime) -> int:
    if moment.tzinfo is None:
        moment = moment.astimezone()  # naive: the local time of this machine
    delta = moment - _EPOCH
    return (delta.days * 86400 + delta.seconds) * 10**9 + delta.microseconds * 1000


def _time_field(until: bool) -> Callable[[_Token, _Context], Expr]:
    def build(tok: _Token, ctx: _Context) -> Expr:
        if tok.op not in (":", "="):
            if tok.op is None:
                raise FilterError(f"{tok.key} needs a time{_example(tok.key)}", tok.end)
            raise FilterError(f"write {tok.key}:TIME ({_TIME_HELP})", tok.start + len(tok.key))
        value = _needs_value(tok)
        ago = _duration_ns(value)
        if ago is not None:
            return _bound("ts_ns", "<=" if until else ">=", ctx.now_ns - ago)
        try:
            if _DATE.fullmatch(value):
                day = dt.date.fromisoformat(value)
                if until:  # a date alone runs to the end of that day
                    day += dt.timedelta(days=1)
                    return _bound("ts_ns", "<", Fraction(_ns(dt.datetime.combine(day, dt.time()))))
                return _bound("ts_ns", ">=", Fraction(_ns(dt.datetime.combine(day, dt.time()))))
            clock = _TIME_OF_DAY.fullmatch(value)
            if clock:
                hour, minute, second, fraction = clock.groups()
                today = dt.datetime.fromtimestamp(ctx.now_ns // 10**9).date()
                micro = int((fraction or "").ljust(6, "0")[:6])
                moment = dt.datetime.combine(today, dt.time(int(hour), int(minute), int(second or 0), micro))
            else:
                moment = dt.datetime.fromisoformat(value)
        except (ValueError, OverflowError, OSError):  # OverflowError, OSError: years out of range
            raise FilterError(f"{tok.key} needs {_TIME_HELP}, not {value!r}", tok.value_pos) from None
        return _bound("ts_ns", "<=" if until else ">=", Fraction(_ns(moment)))

    return build


def _flag(column: str, value: int) -> Callable[[], Expr]:
    return lambda: Equals(column, value, literal=True)


FLAGS: dict[str, Callable[[], Expr]] = {
    "replay": _flag("replay", 1),
    "live": lambda: Not(Equals("replay", 1, literal=True)),
    "unanswered": _flag("unanswered", 1),
    "dropped": _flag("forwarded", 0),
    "cut": _flag("cut", 1),
    "unterminated": _flag("terminated", 0),
    "marked": HasMark,
    "control": lambda: Contains("note", CTL),
}
"""Words that stand alone."""

FIELDS: dict[str, Callable[[_Token, _Context], Expr]] = {
    "dir": _dir_field,
    "kind": _string_field("kind", choices=KINDS, present=False),
    "method": _string_field("method"),
    "id": _id_field,
    "session": _string_field("session_id", prefix=True),
    "update": _string_field("update_kind"),
    "item": _string_field("item_id"),
    "error": _error_field,
    "text": _text_field,
    "note": _note_field,
    "comment": _comment_field,
    "fault": _fault_field,
    "finding": _finding_field,
    "unknown": _string_field("unknown", choices=UNKNOWN_VALUES),
    "latency": _numeric_field("latency_ns", _latency, present=True),
    "size": _numeric_field("size", _size, present=False),
    "seq": _numeric_field("seq", _integer, present=False),
    "run": _run_field,
    "since": _time_field(until=False),
    "until": _time_field(until=True),
}
"""Words that take a value: FIELD:VALUE (and FIELD alone where the docs say so)."""
