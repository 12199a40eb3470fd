"""A parsed filter: the expression tree, each node evaluating itself two ways.

Owns: one small class per operator and term (``Expr`` and its kinds), each of which both
matches an in-memory frame (``matches``: live filtering, fault rules) and renders itself as a
parameterised SQL condition on the ``frames`` table (``to_sql``: the query commands), so that the
two can never disagree about what a filter selects.

Must not know: the filter language's syntax, its lexer and parser, its error messages
(``filters`` builds these trees), connections or I/O.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Sequence
from typing import Any

DIRECTIONS = ("c2a", "a2c", "stderr")
"""The ``dir`` column's values."""
SEVERITIES = ("error", "warning", "info")  # as checks.Severity; rule ids always hold a /

# -- the expression tree: one small class per operator -------------------------------------


class Expr:
    """A parsed filter. ``matches`` and ``to_sql`` select the same frames."""

    __slots__ = ("source",)

    def __init__(self) -> None:
        self.source: str | None = None
        """The spelling this node was parsed from, when it was one term."""

    def matches(self, record: Any) -> bool:
        """Whether a frame (a ``FrameRecord``, or any object with its attributes) matches."""
        raise NotImplementedError

    def to_sql(self) -> tuple[str, list[Any]]:
        """A ``WHERE`` fragment over the ``frames`` table (no alias) and its parameters."""
        return self._sql(False)

    def directions(self) -> frozenset[str]:
        """The ``dir`` values a matching frame can have (a superset: exact for dir terms)."""
        return self._dirs(False)

    def _sql(self, negate: bool) -> tuple[str, list[Any]]:
        raise NotImplementedError

    def _dirs(self, negate: bool) -> frozenset[str]:
        return frozenset(DIRECTIONS)

    def _text(self) -> str:
        raise NotImplementedError

    def __str__(self) -> str:
        return self.source if self.source is not None else self._text()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self)!r})"


class Const(Expr):
    """Every frame (the empty filter) or none (e.g. ``seq:1.5``)."""

    __slots__ = ("value",)

    def __init__(self, value: bool) -> None:
        super().__init__()
        self.value = value

    def matches(self, record: Any) -> bool:
        return self.value

    def _sql(self, negate: bool) -> tuple[str, list[Any]]:
        return ("1" if self.value != negate else "0"), []

    def _dirs(self, negate: bool) -> frozenset[str]:
        return frozenset(DIRECTIONS) if self.value != negate else frozenset()

    def _text(self) -> str:
        return "" if self.value else "run<0 run>0"  # never: run_id is never NULL


class And(Expr):
    __slots__ = ("items",)

    def __init__(self, items: Sequence[Expr]) -> None:
        super().__init__()
        self.items = tuple(items)

    def matches(self, record: Any) -> bool:
        return all(item.matches(record) for item in self.items)

    def _sql(self, negate: bool) -> tuple[str, list[Any]]:
        return _join(" OR " if negate else " AND ", self.items, negate)

    def _dirs(self, negate: bool) -> frozenset[str]:
        sets = [item._dirs(negate) for item in self.items]
        return frozenset.union(*sets) if negate else frozenset.intersection(*sets)

    def _text(self) -> str:
        return " ".join(_group(item) for item in self.items)


class Or(Expr):
    __slots__ = ("items",)

    def __init__(self, items: Sequence[Expr]) -> None:
        super().__init__()
        self.items = tuple(items)

    def matches(self, record: Any) -> bool:
        return any(item.matches(record) for item in self.items)

    def _sql(self, negate: bool) -> tuple[str, list[Any]]:
        return _join(" AND " if negate else " OR ", self.items, negate)

    def _dirs(self, negate: bool) -> frozenset[str]:
        sets = [item._dirs(negate) for item in self.items]
        return frozenset.intersection(*sets) if negate else frozenset.union(*sets)

    def _text(self) -> str:
        return " OR ".join(_group(item) for item in self.items)


class Not(Expr):
    __slots__ = ("item",)

    def __init__(self, item: Expr) -> None:
        super().__init__()
        self.item = item

    def matches(self, record: Any) -> bool:
        return not self.item.matches(record)

    def _sql(self, negate: bool) -> tuple[str, list[Any]]:
        return self.item._sql(not negate)

    def _dirs(self, negate: bool) -> frozenset[str]:
        return self.item._dirs(not negate)

    def _text(self) -> str:
        return "-" + _group(self.item)


def _group(item: Expr) -> str:
    return f"({item})" if isinstance(item, (And, Or)) and item.source is None else str(item)


def _join(glue: str, items: Sequence[Expr], negate: bool) -> tuple[str, list[Any]]:
    parts: list[str] = []
    params: list[Any] = []
    for item in items:
        sql, more = item._sql(negate)
        parts.append(sql)
        params.extend(more)
    return "(" + glue.join(parts) + ")", params


class Term(Expr):
    """A test of one column. Subclasses give ``_cond``: SQL that is true exactly when
    ``matches`` is (false *or NULL* otherwise); ``_neg`` is its exact negation, true for NULL."""

    __slots__ = ("column", "get")

    def __init__(self, column: str) -> None:
        super().__init__()
        self.column = column
        self.get = operator.attrgetter(column)

    def _sql(self, negate: bool) -> tuple[str, list[Any]]:
        return self._neg() if negate else self._cond()

    def _cond(self) -> tuple[str, list[Any]]:
        raise NotImplementedError

    def _neg(self) -> tuple[str, list[Any]]:
        sql, params = self._cond()
        return f"NOT coalesce({sql}, 0)", params

    def _text(self) -> str:
        return f"<{type(self).__name__} {self.column}>"


class Present(Term):
    """The column is not NULL: ``method``, ``fault``, ``latency`` alone."""

    __slots__ = ()

    def matches(self, record: Any) -> bool:
        return self.get(record) is not None

    def _cond(self) -> tuple[str, list[Any]]:
        return f"{self.column} IS NOT NULL", []

    def _neg(self) -> tuple[str, list[Any]]:
        return f"{self.column} IS NULL", []


class Equals(Term):
    """The column equals a value. ``literal``: the value is one of this module's constants
    and is spelled into the SQL (so partial indexes apply); user values are always bound."""

    __slots__ = ("literal", "value")

    def __init__(self, column: str, value: str | int, *, literal: bool = False) -> None:
        super().__init__(column)
        self.value = value
        self.literal = literal
        if literal:
            assert isinstance(value, int) or re.fullmatch(r"[a-z0-9_]+", value), value

    def matches(self, record: Any) -> bool:
        return self.get(record) == self.value

    def _rhs(self) -> tuple[str, list[Any]]:
        if not self.literal:
            return "?", [self.value]
        return (str(self.value) if isinstance(self.value, int) else f"'{self.value}'"), []

    def _cond(self) -> tuple[str, list[Any]]:
        rhs, params = self._rhs()
        return f"{self.column} = {rhs}", params

    def _neg(self) -> tuple[str, list[Any]]:
        rhs, params = self._rhs()
        return f"{self.column} IS NOT {rhs}", params  # IS NOT: true when the column is NULL

    def _dirs(self, negate: bool) -> frozenset[str]:
        if self.column != "dir":
            return frozenset(DIRECTIONS)
        hit = frozenset(d for d in DIRECTIONS if d == self.value)
        return frozenset(DIRECTIONS) - hit if negate else hit


_COMPARE = {">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le}


class Compare(Term):
    """A numeric column compared with a whole number: ``latency>500ms``, ``seq>=10``."""

    __slots__ = ("bound", "op", "test")

    def __init__(self, column: str, op: str, bound: int) -> None:
        super().__init__(column)
        self.op = op
        self.bound = bound
        self.test = _COMPARE[op]

    def matches(self, record: Any) -> bool:
        value = self.get(record)
        return value is not None and self.test(value, self.bound)

    def _cond(self) -> tuple[str, list[Any]]:
        return f"{self.column} {self.op} ?", [self.bound]

    def _neg(self) -> tuple[str, list[Any]]:
        return f"({self.column} IS NULL OR NOT {self.column} {self.op} ?)", [self.bound]


class Glob(Term):
    """The whole value matches a pattern in which ``*`` is any run of characters.

    SQL's GLOB reads strings only up to a NUL character; the Python side does the same, so
    the two agree even on such (pathological) values.
    """

    __slots__ = ("parts",)

    def __init__(self, column: str, pattern: str) -> None:
        super().__init__(column)
        self.parts = pattern.split("\0", 1)[0].split("*")

    def matches(self, record: Any) -> bool:
        value = self.get(record)
        return isinstance(value, str) and glob_match(self.parts, value.split("\0", 1)[0])

    def _cond(self) -> tuple[str, list[Any]]:
        return f"{self.column} GLOB ?", ["*".join(map(_glob_escape, self.parts))]

    def _dirs(self, negate: bool) -> frozenset[str]:
        if self.column != "dir":
            return frozenset(DIRECTIONS)
        hit = frozenset(d for d in DIRECTIONS if glob_match(self.parts, d))
        return frozenset(DIRECTIONS) - hit if negate else hit


def glob_match(parts: list[str], value: str) -> bool:
    """Whether ``value`` is ``parts`` joined by runs of any characters (a glob split at its
    ``*``). Leftmost-first search, no backtracking: time linear in the value times the parts,
    where a regular expression of ``.*`` backtracks (``*a*a*a*a*a*a*a*a*b`` against 60 ``a``
    took a minute)."""
    if len(parts) == 1:
        return value == parts[0]
    first, last = parts[0], parts[-1]
    end = len(value) - len(last)
    if end < len(first) or not value.startswith(first) or not value.endswith(last):
        return False
    pos = len(first)
    for part in parts[1:-1]:
        found = value.find(part, pos, end)
        if found < 0:
            return False
        pos = found + len(part)
    return True


def _glob_escape(literal: str) -> str:
    return re.sub(r"[*?\[]", lambda m: f"[{m.group(0)}]", literal)


class Prefix(Term):
    """The value starts with a prefix: ``session:3f2a``."""

    __slots__ = ("prefix",)

    def __init__(self, column: str, prefix: str) -> None:
        super().__init__(column)
        self.prefix = prefix

    def matches(self, record: Any) -> bool:
        value = self.get(record)
        return isinstance(value, str) and value.startswith(self.prefix)

    def _cond(self) -> tuple[str, list[Any]]:
        return f"instr({self.column}, ?) = 1", [self.prefix]  # the first occurrence is at 1


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def _smart_case(needle: str) -> bool:
    """Fold ASCII case when the needle has no capital A-Z in it."""
    return needle.translate(_ASCII_LOWER) == needle


class Contains(Term):
    """A text column contains a substring (``note:``, ``error:TEXT``); ASCII case folded when
    ``fold`` (SQLite's ``lower()`` folds ASCII only, and so does this side)."""

    __slots__ = ("fold", "needle")

    def __init__(self, column: str, needle: str) -> None:
        super().__init__(column)
        self.needle = needle
        self.fold = _smart_case(needle)

    def matches(self, record: Any) -> bool:
        value = self.get(record)
        if not isinstance(value, str):
            return False
        return self.needle in (value.translate(_ASCII_LOWER) if self.fold else value)

    def _cond(self) -> tuple[str, list[Any]]:
        column = f"lower({self.column})" if self.fold else self.column
        return f"instr({column}, ?) > 0", [self.needle]


class Text(Term):
    """The frame's line contains a substring: ``raw`` (TEXT) when it is valid UTF-8, else
    ``raw_bytes`` (BLOB), searched byte for byte. A live record that has neither yet is
    searched in its ``line`` bytes."""

    __slots__ = ("fold", "needle", "needle_bytes")

    def __init__(self, needle: str) -> None:
        super().__init__("raw")
        self.needle = needle
        self.needle_bytes = needle.encode()
        self.fold = _smart_case(needle)

    def matches(self, record: Any) -> bool:
        raw = record.raw
        if raw is not None and self.needle in (raw.translate(_ASCII_LOWER) if self.fold else raw):
            return True
        data = record.raw_bytes
        if data is None and raw is None:
            data = getattr(record, "line", None)
        if data is None:
            return False
        return self.needle_bytes in (data.lower() if self.fold else data)

    def _cond(self) -> tuple[str, list[Any]]:
        if self.fold:
            sql = "(instr(lower(raw), ?) > 0 OR instr(CAST(lower(raw_bytes) AS BLOB), ?) > 0)"
        else:
            sql = "(instr(raw, ?) > 0 OR instr(raw_bytes, ?) > 0)"
        return sql, [self.needle, self.needle_bytes]  # bytes bind as a BLOB: a byte search


class Listed(Term):
    """One of the comma-separated names in the column: ``fault:drop`` on ``delay,drop``."""

    __slots__ = ("value",)

    def __init__(self, column: str, value: str) -> None:
        super().__init__(column)
        self.value = value

    def matches(self, record: Any) -> bool:
        names = self.get(record)
        return isinstance(names, str) and f",{self.value}," in f",{names},"

    def _cond(self) -> tuple[str, list[Any]]:
        # The IS NOT NULL adds nothing to the result; it lets SQLite see that a partial index
        # on "column IS NOT NULL" rows (store's idx_frames_rare, for fault) holds every match.
        return f"({self.column} IS NOT NULL AND instr(',' || {self.column} || ',', ?) > 0)", [f",{self.value},"]


class LastRun(Term):
    """``run:last`` without a known run id: in SQL the newest row of ``runs``; a live frame
    always belongs to the run being recorded, which is the last one, so it matches."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__("run_id")

    def matches(self, record: Any) -> bool:
        return True

    def _cond(self) -> tuple[str, list[Any]]:
        return "run_id = (SELECT max(id) FROM runs)", []


class HasFinding(Expr):
    """The frame has a conformance finding (``finding``), of a rule (``finding:RULE``, a pattern
    with ``*``) or of a severity (``finding:error``).

    Findings live in their own table, so in SQL this is an ``EXISTS`` over ``findings`` on the
    frame's (run_id, seq), which its index serves; negated, ``NOT EXISTS``, which SQL's NULLs
    cannot disturb. A live record carries them, when it has any, as ``findings``: a list of
    (rule_id, severity) pairs; a record without it has none, so both backends agree.
    """

    __slots__ = ("mode", "parts", "value")

    def __init__(self, mode: str, value: str | None = None) -> None:
        super().__init__()
        self.mode = mode  # any | rule | glob | severity
        self.value = value
        self.parts: list[str] | None = None
        if mode == "glob":
            assert value is not None
            # As Glob: SQLite's GLOB stops reading at a NUL, so the pattern and values do too.
            self.parts = value.split("\0", 1)[0].split("*")
        elif mode == "severity":
            # Spelled into the SQL (Rule 2): only this module's closed list may get here.
            assert value in SEVERITIES, value

    def _hit(self, rule: Any, severity: Any) -> bool:
        if self.mode == "any":
            return True
        if self.mode == "severity":
            return severity == self.value
        if not isinstance(rule, str):
            return False
        if self.parts is not None:
            return glob_match(self.parts, rule.split("\0", 1)[0])
        return rule == self.value

    def matches(self, record: Any) -> bool:
        found = record.get("findings") if isinstance(record, dict) else getattr(record, "findings", None)
        return any(self._hit(rule, severity) for rule, severity in found or ())

    def _sql(self, negate: bool) -> tuple[str, list[Any]]:
        # frames is named in full: unqualified, run_id and seq would be the findings' own.
        where = "findings.run_id = frames.run_id AND findings.seq = frames.seq"
        params: list[Any] = []
        if self.mode == "rule":
            where += " AND findings.rule = ?"
            params.append(self.value)
        elif self.mode == "glob":
            assert self.value is not None
            where += " AND findings.rule GLOB ?"
            params.append("*".join(map(_glob_escape, self.value.split("\0", 1)[0].split("*"))))
        elif self.mode == "severity":
            where += f" AND findings.severity = '{self.value}'"
        return f"{'NOT ' if negate else ''}EXISTS (SELECT 1 FROM findings WHERE {where})", params

    def _text(self) -> str:
        if self.mode == "any":
            return "finding"
        if self.mode == "glob":
            return f"finding:{self.value}"
        return f"finding:{_quote_if_needed(str(self.value))}"


class HasMark(Expr):
    """A person marked the frame (``marked``: ``acp-proxy mark``), or its mark's comment
    contains a text (``comment:TEXT``, case as for ``text``).

    Marks live in their own table: in SQL an ``EXISTS`` over ``marks`` on the frame's (run_id,
    seq), its primary key. A live record carries its mark, when it has one, as ``mark`` (the
    comment, "" for none); a record without it is unmarked, so both backends agree.
    """

    __slots__ = ("fold", "needle")

    def __init__(self, needle: str | None = None) -> None:
        super().__init__()
        self.needle = needle
        self.fold = needle is not None and _smart_case(needle)

    def matches(self, record: Any) -> bool:
        mark = record.get("mark") if isinstance(record, dict) else getattr(record, "mark", None)
        if not isinstance(mark, str):
            return False
        if self.needle is None:
            return True
        return self.needle in (mark.translate(_ASCII_LOWER) if self.fold else mark)

    def _sql(self, negate: bool) -> tuple[str, list[Any]]:
        # frames is named in full: unqualified, run_id and seq would be the marks' own.
        where = "marks.run_id = frames.run_id AND marks.seq = frames.seq"
        params: list[Any] = []
        if self.needle is not None:
            column = "lower(marks.note)" if self.fold else "marks.note"
            where += f" AND instr({column}, ?) > 0"
            params.append(self.needle)
        return f"{'NOT ' if negate else ''}EXISTS (SELECT 1 FROM marks WHERE {where})", params

    def _text(self) -> str:
        return "marked" if self.needle is None else f"comment:{_quote_if_needed(self.needle)}"


def _quote_if_needed(value: str) -> str:
    if value and not re.search(r"[\s()\"'*]", value):
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
