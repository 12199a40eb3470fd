"""Redaction: secrets masked in what acp-proxy shows, exports or (with ``run --redact``) stores.

Owns: deciding what in a frame (or a line of text) is a secret, and masking it with
``[redacted]``. It never touches what is forwarded: relaying stays byte for byte.

Must not know: SQL, files, click, trio, HTTP. Pure functions over decoded JSON, ``str`` and
``bytes``; no I/O.

Built-in rules (``Redactor(enabled=True)``, the default everywhere):

- **credential names**: the value of a key named like a credential header or field, anywhere in a
  frame, at any depth (editors put proxy headers in ``initialize``'s ``_meta``): ``Authorization``,
  ``Proxy-Authorization``, ``Cookie``, ``Set-Cookie``, ``X-Api-Key``, ``Api-Key``, ``apiKey``,
  ``X-Auth-Token``, ``password``, ``secret``, ``client_secret``, ``access_token``,
  ``refresh_token``, ``id_token``, ``private_key``, and any ``X-...-Key`` / ``X-...-Token`` /
  ``X-...-Secret``. Names compare case-insensitively, with ``-``, ``_`` and camelCase alike
  (``x_api_key``, ``xApiKey`` and ``X-API-KEY`` are one name). A ``{"name": N, "value": V}``
  object (ACP's ``HttpHeader``) with such a name has ``V`` masked.
- **environment values**: every ``value`` of the ``{"name", "value"}`` items of an ``env`` list,
  and every value of an ``env`` object: ``terminal/create`` and MCP server settings carry API keys
  there, and which variable holds one cannot be told from its name.
- **bearer credentials**: ``Bearer X`` and ``Basic X`` in any string, when ``X`` looks like a
  credential (8 or more token characters, at least one of them a digit or one of ``._~+/=-``, so
  that the words "Bearer authentication" stay as they are). The scheme word is kept.
- **API-key-shaped strings**, standing alone (not glued to a letter, digit, ``_`` or ``-``):
  ``sk-...`` (OpenAI, Anthropic), ``sk_live_`` / ``rk_test_`` ... (Stripe), ``ghp_`` / ``gho_`` /
  ``ghu_`` / ``ghs_`` / ``ghr_`` / ``github_pat_`` (GitHub), ``glpat-`` (GitLab), ``xoxb-`` ...
  (Slack), ``AKIA`` / ``ASIA`` (AWS access key ids), ``AIza`` (Google), ``hf_`` (Hugging Face),
  ``npm_`` (npm), each followed by enough key characters to be a key, not a word.
- **JWT-shaped strings**: three base64url parts separated by dots, the first two starting ``eyJ``
  (the encoding of ``{"``).

User rules (``--redact RULE``, repeatable), one of:

- a **JSON path**: ``params._meta.proxy.headers``, ``$.params.env``, ``result.*.token`` — names
  separated by dots, from the frame's top level; ``*`` stands for any one key or array index, and
  a name meets an array by applying to each of its items. Whatever the path reaches is masked
  whole: a string or number becomes ``[redacted]``, an object or array keeps its shape with every
  leaf masked. A rule is read as a path when it starts with ``$.`` or ``path:``, or when it has a
  dot and nothing but name characters (letters, digits, ``_``, ``-``, ``$``), dots and ``*``.
- a **regular expression** (Python syntax), applied to every string in a frame, to object keys,
  and to lines that are not JSON (the agent's stderr, argv words): ``re:hunter2``,
  ``'token=(\\w+)'``. Anything that is not a path is a regular expression; ``re:`` forces it.
  With capturing groups, only the groups are masked (``token=(\\w+)`` keeps ``token=``); without,
  the whole match. A pattern that matches the empty string is refused. Patterns run on RE2, a
  linear-time engine, so no pattern (``(a+)+$``) can keep the recorder busy: the few constructs
  it lacks (backreferences, lookaround) are refused with one line saying so.

``--no-redact`` (``Redactor(enabled=False)``) shows everything as recorded.

Rule 1: nothing that holds no secret changes, byte for byte: ``line`` returns its very input
when no rule matched, so a stored or exported copy of a secret-free line is the recorded line.
Rule 2: a secret, once found, is masked in everything the same redactor sees afterwards (a value
masked by a path rule is also masked in free text shown later), so a secret cannot leak through
a second copy of itself in a message, a finding or a title.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

import re2

from acp_proxy.errors import UsageError
from acp_proxy.protocol import wire

MASK = "[redacted]"

__all__ = ["MASK", "RedactError", "Redactor", "parse_rule"]


class RedactError(UsageError):
    """A ``--redact`` rule that cannot be used; the message is one line for a person."""


# -- names --------------------------------------------------------------------------------------

_SECRET_NAMES = frozenset(
    {
        "authorization",
        "proxy-authorization",
        "cookie",
        "set-cookie",
        "api-key",
        "apikey",
        "x-api-key",
        "x-apikey",
        "x-auth-token",
        "x-access-token",
        "auth-token",
        "access-token",
        "refresh-token",
        "id-token",
        "session-token",
        "password",
        "passwd",
        "secret",
        "client-secret",
        "private-key",
    }
)
_X_SECRET_NAME = re.compile(r"^x-(?:[a-z0-9]+-)*(?:key|token|secret)$")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def _normal_name(name: str) -> str:
    return _CAMEL.sub("-", name).lower().replace("_", "-")


@lru_cache(maxsize=4096)
def secret_name(name: str) -> bool:
    """Whether a key (or an ``HttpHeader`` name) names a credential."""
    if not name or len(name) > 100:
        return False
    normal = _normal_name(name)
    return normal in _SECRET_NAMES or _X_SECRET_NAME.match(normal) is not None


# -- shapes in text -----------------------------------------------------------------------------

_ALONE_BEFORE = r"(?<![A-Za-z0-9_-])"
_ALONE_AFTER = r"(?![A-Za-z0-9_-])"
_KEY_SHAPES = [
    r"sk-[A-Za-z0-9_-]{20,}",
    r"(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}",
    r"gh[pousr]_[A-Za-z0-9]{30,}",
    r"github_pat_[A-Za-z0-9_]{30,}",
    r"glpat-[A-Za-z0-9_-]{20,}",
    r"xox[abposr]-[A-Za-z0-9-]{10,}",
    r"(?:AKIA|ASIA)[0-9A-Z]{16}",
    r"AIza[0-9A-Za-z_-]{35}",
    r"hf_[A-Za-z0-9]{30,}",
    r"npm_[A-Za-z0-9]{36}",
    r"eyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{10,}",
]
_SHAPES = re.compile(_ALONE_BEFORE + "(?:" + "|".join(_KEY_SHAPES) + ")" + _ALONE_AFTER)
# The scheme word stays; the credential goes. One digit or punctuation mark is required so that
# prose ("uses Bearer authentication") is left alone.
_BEARER = re.compile(
    r"(?<![A-Za-z0-9])(?i:bearer|basic)\s+((?=[A-Za-z0-9._~+/=-]*[0-9._~+/=-])[A-Za-z0-9._~+/-]{8,}=*)"
    r"(?![A-Za-z0-9._~+/=-])"
)
# What every match of the two patterns above contains: a few substring tests (C speed) tell most
# strings apart; the patterns' look-behinds and alternations are slow to try at every position.
_SHAPE_HINTS = ("sk-", "sk_", "rk_", "gh", "glpat-", "xox", "AKIA", "ASIA", "AIza", "hf_", "npm_", "eyJ")
_SCHEME_HINTS = ("bearer", "basic")


def _hinted(text: str) -> bool:
    """Whether a built-in text pattern could match ``text`` (False: it surely cannot)."""
    if any(h in text for h in _SHAPE_HINTS):
        return True
    low = text.lower()
    return any(h in low for h in _SCHEME_HINTS)


# Every credential name and "env" holds one of these (in lower case): a line without them has none.
_NAME_HINTS = ("authoriz", "cookie", "key", "token", "passw", "secret", '"env"')


# -- user rules ---------------------------------------------------------------------------------

_PATH_RULE = re.compile(r"^[A-Za-z0-9_$*-]+(?:\.[A-Za-z0-9_$*-]+)+$")
_MAX_RULE = 1000


class PathRule:
    """``a.b.*.c``: what the path reaches from a frame's top level is masked whole."""

    def __init__(self, text: str, parts: list[str]) -> None:
        self.text = text
        self.parts = parts

    def __repr__(self) -> str:
        return f"PathRule({self.text!r})"


class RegexRule:
    """A pattern masked wherever it matches a string (only its groups, when it has some)."""

    def __init__(self, text: str, pattern: Any) -> None:
        self.text = text
        self.pattern = pattern

    def __repr__(self) -> str:
        return f"RegexRule({self.text!r})"


Rule = PathRule | RegexRule


def parse_rule(text: str) -> Rule:
    """Read one ``--redact`` rule (syntax in the module docstring); ``RedactError`` when unusable."""
    if not isinstance(text, str) or not text.strip():
        raise RedactError("empty --redact rule: give a JSON path (params._meta.token) or a regular expression")
    if len(text) > _MAX_RULE:
        raise RedactError(f"--redact rule too long ({len(text)} characters, at most {_MAX_RULE})")
    if text.startswith("re:"):
        return _regex_rule(text, text[3:])
    body = text[5:] if text.startswith("path:") else text
    if body.startswith("$."):
        body = body[2:]
    if text.startswith(("path:", "$.")) or _PATH_RULE.match(body):
        parts = body.split(".")
        if not body or any(not p for p in parts) or not _PATH_RULE.match(body + ".x"):
            raise RedactError(
                f"--redact {text!r}: a JSON path is names separated by dots, e.g. params._meta.proxy.headers"
            )
        return PathRule(text, parts)
    return _regex_rule(text, text)


def _regex_rule(text: str, pattern: str) -> RegexRule:
    if not pattern:
        raise RedactError(f"--redact {text!r}: empty regular expression")
    try:
        re.compile(pattern)
    except (re.error, RecursionError, OverflowError) as exc:
        raise RedactError(f"--redact {text!r} is not a regular expression: {exc}") from None
    compiled = linear_regex(pattern)
    if compiled is None:
        raise RedactError(
            f"--redact {text!r}: rules run on RE2, a linear-time engine, which has no backreferences,"
            " lookaround or possessive quantifiers"
        )
    if compiled.search("") is not None:
        raise RedactError(f"--redact {text!r} matches the empty string, so it would mask nothing useful")
    return RegexRule(text, compiled)


_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # RE2 would log a refused pattern to stderr; the caller says why
_RE2_OPTIONS.max_mem = 64 << 20  # a pattern whose automaton needs more is refused, not built


def linear_regex(pattern: str) -> Any:
    """``pattern`` compiled by RE2 (the ``re`` API, matching in time linear in the text); None
    for what RE2 cannot run. Why RE2: Python's ``re`` backtracks, and a user's ``(a+)+$`` on a
    line of thirty ``a`` and a ``b`` costs minutes of the recorder's time."""
    try:
        return re2.compile(pattern, _RE2_OPTIONS)
    except (re2.error, ValueError, TypeError, OverflowError):
        return None


# -- the redactor -------------------------------------------------------------------------------

_MEMO_CHARS = 64  # strings up to this long are memoised (see Redactor._key)
_MAX_REMEMBERED = 1000
_MIN_REMEMBERED = 8  # shorter masked values (an env "1", "true") are not searched for in free text


FRAME_FIELDS = ("raw", "raw_bytes", "error_message", "note", "decode_error")
"""The ``frames`` columns that can hold a secret: the line itself, and the text columns that
copy something out of it (or say something about it)."""


class Redactor:
    """Masks secrets by the built-in rules and ``rules`` (``--redact`` texts); a no-op when not
    ``enabled``.

    ``frame_json`` and ``value`` return their very argument when nothing matched, a masked copy
    otherwise; ``line`` and ``text`` likewise for bytes and strings.
    """

    def __init__(self, rules: Iterable[str] = (), enabled: bool = True) -> None:
        self.enabled = enabled
        self.rules: list[Rule] = [parse_rule(r) for r in rules]
        self._paths = [r for r in self.rules if isinstance(r, PathRule)]
        self._regexes: list[Any] = [r.pattern for r in self.rules if isinstance(r, RegexRule)]
        self._seen: dict[str, None] = {}  # insertion-ordered set of masked values (Rule 2)
        self._seen_re: re.Pattern[str] | None = None
        self._generation = 0  # counts values remembered
        self._keys: dict[str, str] = {}
        self._keys_generation = 0
        self._teaching: tuple[int, Any] | None = None  # (generation, teaching_pattern's pattern)

    # public API

    def frame_json(self, obj: Any) -> Any:
        """A decoded frame with its secrets masked (path rules apply from its top level)."""
        if not self.enabled:
            return obj
        generation = self._generation
        if self._paths:
            for rule in self._paths:
                obj = self._apply_path(obj, rule.parts, 0)
        return self._again_if_learnt(self._walk(obj, None), generation)

    def value(self, obj: Any) -> Any:
        """Any JSON-able value (a folded conversation, a run row) by the rules that need no frame
        context: names, env, shapes, regexes and what was already masked. Path rules are for
        frames; apply ``frame_json`` to the frames a value was built from first."""
        if not self.enabled:
            return obj
        generation = self._generation
        return self._again_if_learnt(self._walk(obj, None), generation)

    def _again_if_learnt(self, obj: Any, generation: int) -> Any:
        # A secret found late in a value may also sit, as plain text, earlier in it (Rule 2).
        return obj if generation == self._generation else self._walk(obj, None)

    def text(self, text: str) -> str:
        """Free text (a stderr line, an argv word, a message): shapes, regexes, masked values."""
        if not self.enabled or not isinstance(text, str):
            return text
        return self._string(text)

    def line(self, data: bytes) -> bytes:
        """A recorded line (without its newline): unchanged, the very object, unless it holds a
        secret. A JSON line is masked in place when each masked string can be found in it (so
        the rest keeps its spelling), else re-serialised; other lines are masked as text."""
        if not self.enabled:
            return data
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            text = data.decode("utf-8", errors="surrogateescape")
            masked = self._string(text)
            return data if masked is text else masked.encode("utf-8", errors="surrogateescape")
        out = self.raw(text)
        return data if out is text else out.encode("utf-8")

    def frame_row(self, row: dict[str, Any]) -> dict[str, Any]:
        """A ``frames`` row (as a dict) with its secrets masked: the line (``raw``, or
        ``raw_bytes`` when it is not UTF-8) and the free-text columns. A copy when anything was
        masked, else the very row."""
        if not self.enabled:
            return row
        out = row
        for name in FRAME_FIELDS:
            value = row.get(name)
            masked = self.frame_field(name, value)
            if masked is not value:
                if out is row:
                    out = dict(row)
                out[name] = masked
        return out

    def frame_field(self, name: str, value: Any) -> Any:
        """One of ``FRAME_FIELDS`` masked: the very value when it holds no secret."""
        if not value or not self.enabled:
            return value
        if name == "raw":
            return self.raw(value)
        if name == "raw_bytes":
            masked = self.line(bytes(value))
            return value if masked == value else masked
        return self.text(value)

    def run_row(self, row: dict[str, Any]) -> dict[str, Any]:
        """A ``runs`` row (as a dict) with its secrets masked: JSON text columns (argv, the
        client's and agent's info, options) as values, other text (cwd, fault rules) as text."""
        if not self.enabled:
            return row
        out = dict(row)
        for name, value in row.items():
            if not isinstance(value, str):
                continue
            decoded = _loads(value) if value[:1] in ("[", "{") else None
            if isinstance(decoded, (dict, list)):
                masked = self.value(decoded)
                out[name] = value if masked is decoded else json.dumps(masked, ensure_ascii=False)
            else:
                out[name] = self.text(value)
        return out

    def raw(self, text: str) -> str:
        """``line`` for a line already decoded to ``str`` (the ``frames.raw`` column)."""
        if not self.enabled or not isinstance(text, str):
            return text
        if self.plainly_clean(text):
            return text
        body = text.rstrip("\r")
        try:
            obj = wire.loads(body)
        except ValueError:
            return self._string(text)
        if not isinstance(obj, (dict, list)):
            return self._string(text)
        masked = self.frame_json(obj)
        if masked is obj:
            return text
        return self._respell(text, obj, masked)

    def plainly_clean(self, text: str) -> bool:
        """True when no rule can match anywhere in the line, told from its text alone (most
        frames: decoding and walking them is most of redaction's cost). Unsure means False."""
        if self.rules or "\\u" in text or _hinted(text):
            return False
        low = text.lower()
        if any(h in low for h in _NAME_HINTS):
            return False
        seen = self._seen_pattern()
        return seen is None or seen.search(text) is None

    @property
    def generation(self) -> int:
        """Counts the values remembered so far: it changes when a line taught this redactor."""
        return self._generation

    def teaching_pattern(self) -> Any:
        """For a reader that must read a recording's lines in order only to learn from them (and
        to tell which ones masking changes): an RE2 pattern over a line's UTF-8 bytes lowered by
        ``bytes.lower`` that finds something in every line ``plainly_clean`` would not call clean.
        Lines it finds nothing in teach nothing and are shown as they are; a hit is only a line
        worth reading (lowering makes it find more, never less). None when every line must be
        read: user rules, or a pattern RE2 will not build. A new one after each value learnt."""
        if self.rules or not self.enabled:
            return None
        if self._teaching is not None and self._teaching[0] == self._generation:
            return self._teaching[1]
        words = [w.lower().encode() for w in (*_SHAPE_HINTS, *_SCHEME_HINTS, *_NAME_HINTS, "\\u")]
        # str.lower() makes the KELVIN SIGN a "k" (of "key", "token", "cookie"); no other character
        # lowers to a letter that completes a hint, and bytes.lower() lowers only ASCII.
        words.append("\u212a".encode())
        # A value lowered as its line is: bytes.lower() maps byte for byte, so a line holding the
        # value holds it lowered once both are.
        words += [value.encode("utf-8", errors="surrogatepass").lower() for value in self._seen]
        try:
            pattern = re2.compile(b"|".join(re.escape(w) for w in words), _RE2_OPTIONS)
        except (re2.error, ValueError, TypeError, OverflowError):
            pattern = None
        self._teaching = (self._generation, pattern)
        return pattern

    # Rule 2: masked values are remembered and masked in free text too.

    def _remember(self, value: str) -> None:
        if len(value) >= _MIN_REMEMBERED and value != MASK and value not in self._seen:
            if len(self._seen) >= _MAX_REMEMBERED:
                self._seen.pop(next(iter(self._seen)))
            self._seen[value] = None
            self._seen_re = None
            self._generation += 1

    def _seen_pattern(self) -> re.Pattern[str] | None:
        if self._seen and self._seen_re is None:
            ordered = sorted(self._seen, key=len, reverse=True)  # the longest first: no partial leftovers
            self._seen_re = re.compile("|".join(map(re.escape, ordered)))
        return self._seen_re

    # walking JSON

    def _walk(self, obj: Any, key: str | None) -> Any:
        if isinstance(obj, str):
            # Short values repeat from frame to frame as keys do ("2.0", methods, session ids),
            # and each RE2 call has a fixed cost: they share the keys' memo.
            return self._key(obj) if len(obj) <= _MEMO_CHARS else self._string(obj)
        if isinstance(obj, dict):
            return self._dict(obj)
        if isinstance(obj, list):
            return self._list(obj, key)
        return obj

    def _dict(self, obj: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] | None = None
        header = isinstance(obj.get("name"), str) and secret_name(obj["name"]) and "value" in obj
        for k, v in obj.items():
            if (isinstance(k, str) and secret_name(k)) or (header and k == "value"):
                new = self._mask_all(v)
            elif k == "env" and isinstance(v, dict):
                new = {ek: self._mask_all(ev) for ek, ev in v.items()}
                if all(new[ek] is ev for ek, ev in v.items()):
                    new = v
            else:
                new = self._walk(v, k)
            new_key = self._key(k) if isinstance(k, str) else k
            if out is None and (new is not v or new_key is not k):
                out = {}
                for k2, v2 in obj.items():
                    if k2 == k:
                        break
                    out[k2] = v2
            if out is not None:
                out[new_key] = new
        return obj if out is None else out

    def _list(self, obj: list[Any], key: str | None) -> list[Any]:
        out: list[Any] | None = None
        for i, v in enumerate(obj):
            if key == "env" and isinstance(v, dict) and "value" in v:
                walked, value = self._walk(v, None), self._mask_all(v["value"])
                new = v if walked is v and value is v["value"] else {**walked, "value": value}
            else:
                new = self._walk(v, None)
            if out is None and new is not v:
                out = list(obj[:i])
            if out is not None:
                out.append(new)
        return obj if out is None else out

    def _mask_all(self, value: Any) -> Any:
        """A credential's value: every leaf masked, the shape kept; empty and null values stay."""
        if value is None or isinstance(value, bool) or value == "":
            return value
        if isinstance(value, (str, int, float)):
            self._remember(str(value))
            return MASK
        if isinstance(value, dict):
            return {k: self._mask_all(v) for k, v in value.items()} if value else value
        if isinstance(value, list):
            return [self._mask_all(v) for v in value] if value else value
        return value

    def _apply_path(self, obj: Any, parts: list[str], i: int) -> Any:
        if i == len(parts):
            return self._mask_all(obj)
        if isinstance(obj, list):
            if parts[i] == "*":
                items = [self._apply_path(v, parts, i + 1) for v in obj]
            else:  # a name meets an array: it applies to each item
                items = [self._apply_path(v, parts, i) for v in obj]
            return obj if all(a is b for a, b in zip(items, obj, strict=True)) else items
        if isinstance(obj, dict):
            names = list(obj) if parts[i] == "*" else [parts[i]] if parts[i] in obj else []
            changed = {}
            for name in names:
                new = self._apply_path(obj[name], parts, i + 1)
                if new is not obj[name]:
                    changed[name] = new
            return {**obj, **changed} if changed else obj
        return obj

    # strings

    def _key(self, key: str) -> str:
        # Frames repeat the same few keys: remember what each became, until a new secret is learnt.
        if self._keys_generation != self._generation:
            self._keys.clear()
            self._keys_generation = self._generation
        out = self._keys.get(key)
        if out is None:
            out = self._string(key)
            if len(self._keys) < 4096:
                self._keys[key] = out
        # An equal key remembered from another frame is another object: a key that stays as
        # it is must come back as the very object given (Rule 1: "is", not "==").
        return key if out == key else out

    def _string(self, text: str) -> str:
        out = text
        if _hinted(out):
            out = _SHAPES.sub(self._whole, out)
            out = _BEARER.sub(self._groups, out)
        for pattern in self._regexes:
            out = pattern.sub(self._groups, out)
        seen = self._seen_pattern()
        if seen is not None:
            out = seen.sub(MASK, out)
        return text if out == text else out

    def _whole(self, match: re.Match[str]) -> str:
        self._remember(match.group(0))
        return MASK

    def _groups(self, match: Any) -> str:  # an re.Match or an RE2 match, same API
        if match.re.groups == 0:
            return self._whole(match)
        whole = match.group(0)
        start = match.start(0)
        pieces = []
        pos = 0
        for g in range(1, match.re.groups + 1):
            s, e = match.span(g)
            if s < 0 or s - start < pos:  # an unmatched or nested group
                continue
            pieces.append(whole[pos : s - start])
            self._remember(whole[s - start : e - start])
            pieces.append(MASK if e > s else "")
            pos = e - start
        pieces.append(whole[pos:])
        return "".join(pieces)

    # re-spelling a masked JSON line

    def _respell(self, text: str, before: Any, after: Any) -> str:
        """The masked frame in the line's own spelling where possible: each changed string
        (key or value) replaced where it appears as a JSON string literal; when one cannot be
        found (an escape spelled differently, a masked number), the frame is re-serialised."""
        pairs: list[tuple[str, str]] = []
        if _changes(before, after, pairs):
            out = text
            for old, new in sorted(set(pairs), key=lambda p: len(p[0]), reverse=True):
                spellings = {json.dumps(old, ensure_ascii=False), json.dumps(old)}
                found = [s for s in spellings if s in out]
                if not found:
                    break
                for s in found:
                    out = out.replace(s, json.dumps(new, ensure_ascii=False))
            else:
                if _loads(out) == after:  # the in-place spelling decodes to exactly the masked frame
                    return out
        return json.dumps(after, ensure_ascii=False, separators=(",", ":")) + ("\r" if text.endswith("\r") else "")


def _loads(text: str) -> Any:
    try:
        return wire.loads(text.rstrip("\r"))
    except ValueError:
        return None


def _changes(before: Any, after: Any, pairs: list[tuple[str, str]]) -> bool:
    """Collect (old, new) for every changed string; False when a change is not string for string
    (a masked number, a re-shaped value), which only re-serialising can spell."""
    if before is after:
        return True
    if isinstance(before, str) and isinstance(after, str):
        pairs.append((before, after))
        return True
    if isinstance(before, dict) and isinstance(after, dict) and len(before) == len(after):
        for (k1, v1), (k2, v2) in zip(before.items(), after.items(), strict=True):
            if k1 != k2:
                pairs.append((k1, k2))
            if not _changes(v1, v2, pairs):
                return False
        return True
    if isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        return all(_changes(a, b, pairs) for a, b in zip(before, after, strict=True))
    return False
