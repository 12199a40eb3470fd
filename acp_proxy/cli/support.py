"""The click plumbing under ``cli.py``: how a mistake becomes one line, how options are bounded.

Owns: the command group that catches ``AcpProxyError`` (and click's own usage errors, a broken
pipe, a stdout that cannot be written, Ctrl-C) once for every command and turns it into one
line on stderr, prefixed ``acp-proxy:``, with exit status 2 for bad input (a reader that went
away: quietly, 0; Ctrl-C, a query it stopped included: 130); option types that refuse out-of-range, NaN and
infinite numbers the same way everywhere; the ``output_options`` bundle (``--json``,
``--jsonl``, ``--no-pager``); and the argument handling that lets a filter word start with
``-`` (``-update:agent_message_chunk`` is a negated term, not an option).

Must not know: what any command does, SQL, the relay.
"""

from __future__ import annotations

import errno
import functools
import math
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

import click

from acp_proxy.errors import AcpProxyError
from acp_proxy.limits import MAX_COUNT

# -- one line per mistake --------------------------------------------------------------------

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def say(message: str) -> None:
    """One line on stderr, prefixed, written so that no character can fail (a lone surrogate
    from a non-UTF-8 argument) or act on the terminal (an escape sequence)."""
    text = "acp-proxy: " + _CONTROL.sub("?", message).replace("\n", " ").rstrip() + "\n"
    data = text.encode("utf-8", "backslashreplace")
    stream = getattr(sys.stderr, "buffer", None)
    try:
        if stream is not None:
            sys.stderr.flush()
            stream.write(data)
            stream.flush()
        else:
            sys.stderr.write(data.decode("utf-8"))
            sys.stderr.flush()
    except (OSError, ValueError):
        pass


def one_line(exc: BaseException) -> str:
    """The exception's message as one line (a caret diagram becomes "at column N in ...")."""
    shorter = getattr(exc, "one_line", None)
    if callable(shorter):
        return str(shorter())
    return " ".join(part.strip() for part in str(exc).splitlines() if part.strip())


def _usage_line(exc: click.ClickException) -> str:
    message = exc.format_message().rstrip().rstrip(".")
    ctx = getattr(exc, "ctx", None)
    if isinstance(exc, click.UsageError) and ctx is not None:
        return f"{message} (see: {ctx.command_path} --help)"
    return message


class Group(click.Group):
    """The ``acp-proxy`` group: every command's mistakes end here, as one line.

    ``AcpProxyError`` (a bad filter, rule, reference, database ...) prints ``str`` on one line
    and exits with its ``exit_code`` (2); click's usage errors the same, with a pointer to
    ``--help``; a reader that went away ends the output quietly (exit 0, like ``git log | head``
    with SIGPIPE ignored); a stdout that is closed, full or failing is one line, exit 2; any
    other OSError one line, exit 2; Ctrl-C exits 130, also when it stopped an SQLite query
    (the read connections give signal handlers a chance while they run: ``store.dbfile``).
    """

    def main(
        self,
        args: Any = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        guard_std_fds()
        try:
            result = super().main(args, prog_name, complete_var, False, **extra)
            code = result if isinstance(result, int) else 0
            _flush_stdout()  # what Python would flush at exit, where a failure is still one line
        except AcpProxyError as exc:
            if _interrupted(exc):
                code = 130
            else:
                say(one_line(exc))
                code = exc.exit_code
        except click.ClickException as exc:
            no_args = getattr(click.exceptions, "NoArgsIsHelpError", None)
            if no_args is not None and isinstance(exc, no_args):
                click.echo(exc.format_message())  # `acp-proxy` alone: the help, as asked
                code = 0
            else:
                say(_usage_line(exc))
                code = 2 if isinstance(exc, click.UsageError) else exc.exit_code
        except click.Abort:
            code = 130
        except BrokenPipeError:
            from acp_proxy.cli.views import _silence_stdout

            _silence_stdout()
            code = 0
        except OSError as exc:
            say(_os_error_line(exc))
            code = 2
        except SystemExit:
            if not _click_saw_a_broken_pipe():
                raise
            code = 0
        except Exception as exc:
            if not _interrupted(exc):
                raise
            code = 130
        if standalone_mode:
            sys.exit(code)
        return code


def guard_std_fds() -> None:
    """A closed fd 0, 1 or 2 is given /dev/null before anything opens a file, so that no
    database takes its number (output would be written into it). fd 1 gets it read-only: a
    write there still fails (EBADF), and the command says so in one line, as for a full disk."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDONLY if fd in (0, 1) else os.O_WRONLY)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
            if fd == 1 and sys.stdout is None:
                sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115 - it is stdout


_STDOUT_ERRNOS = frozenset({errno.EBADF, errno.ENOSPC, errno.EIO, errno.EFBIG, errno.EDQUOT, errno.EINVAL})


def _flush_stdout() -> None:
    from acp_proxy.cli.views import is_fd1

    stream = sys.stdout
    if stream is None or not is_fd1(stream):
        return
    try:
        stream.flush()
    except BrokenPipeError:
        from acp_proxy.cli.views import _silence_stdout

        _silence_stdout()
    except OSError as exc:
        from acp_proxy.cli.views import _silence_stdout, cannot_write

        _silence_stdout()
        raise cannot_write(exc) from None


def _click_saw_a_broken_pipe() -> bool:
    """click answers a broken pipe it catches itself (``--help | true``) with exit status 1 and
    wraps the standard streams; the reader gone is ours to answer, with 0 as everywhere."""
    if type(sys.stdout).__name__ != "PacifyFlushWrapper":
        return False
    from acp_proxy.cli.views import _silence_stdout

    sys.stdout = getattr(sys.stdout, "wrapped", sys.stdout)
    sys.stderr = getattr(sys.stderr, "wrapped", sys.stderr)
    _silence_stdout()
    return True


def _os_error_line(exc: OSError) -> str:
    """An OSError nobody caught closer to its cause, as one line. Without a file name, one that
    a write to stdout gives (click.echo, help text) is named as that."""
    reason = exc.strerror or str(exc)
    if exc.filename is not None:
        return f"{reason}: {os.fsdecode(exc.filename)}"
    from acp_proxy.cli.views import _silence_stdout, is_fd1

    if exc.errno in _STDOUT_ERRNOS and is_fd1(sys.stdout):
        _silence_stdout()
        return f"cannot write to standard output: {reason}"
    return reason


def _interrupted(exc: BaseException) -> bool:
    """Whether ``exc`` is (or was caused by) an SQLite query stopped by Ctrl-C: SQLite's
    "interrupted", which only a progress handler that raised (KeyboardInterrupt) gives here."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, KeyboardInterrupt):
            return True
        if type(current).__name__ == "OperationalError" and str(current) == "interrupted":
            return True
        current = current.__cause__ or current.__context__
    return False


# -- numbers, bounded the same way everywhere ------------------------------------------------


class Number(click.ParamType):
    """An int or a float within [low, high] (``low_open``: above ``low``); NaN, infinities and
    numbers too long to be meant are refused in one message that names the range."""

    def __init__(
        self,
        kind: type[int] | type[float],
        low: float,
        high: float,
        *,
        low_open: bool = False,
        unit: str = "",
    ) -> None:
        self.kind = kind
        self.low = low
        self.high = high
        self.low_open = low_open
        self.unit = unit
        self.name = "INTEGER" if kind is int else "SECONDS" if unit == "seconds" else "NUMBER"

    def _range(self) -> str:
        low = f"{self.low:g}" if self.kind is float else f"{int(self.low)}"
        high = f"{self.high:g}" if self.kind is float else f"{int(self.high)}"
        above = "above" if self.low_open else "from"
        unit = f" {self.unit}" if self.unit else ""
        return f"{above} {low} to {high}{unit}"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, self.kind) and not isinstance(value, bool) and self._inside(value):
            return value
        text = str(value).strip()
        shown = text if len(text) <= 30 else text[:27] + "..."
        what = "a whole number" if self.kind is int else "a number"
        number: float | int
        try:
            if len(text) > 40:
                raise ValueError
            number = int(text) if self.kind is int else float(text)
        except (ValueError, OverflowError):
            self.fail(f"{shown!r} is not {what} {self._range()}", param, ctx)
        if (isinstance(number, float) and not math.isfinite(number)) or not self._inside(number):
            self.fail(f"{shown} is out of range: {what} {self._range()}", param, ctx)
        return number

    def _inside(self, number: float) -> bool:
        if isinstance(number, float) and not math.isfinite(number):
            return False
        above = number > self.low if self.low_open else number >= self.low
        return above and number <= self.high


class Jobs(click.ParamType):
    """``auto`` (None: the command decides from the work and the CPUs) or a number of processes,
    1 to ``high``."""

    name = "N|auto"

    def __init__(self, high: int) -> None:
        self.number = Number(int, 1, high)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if value is None or (isinstance(value, str) and value.strip().lower() == "auto"):
            return None
        try:
            return self.number.convert(value, param, ctx)
        except click.BadParameter:
            shown = str(value).strip()
            shown = shown if len(shown) <= 30 else shown[:27] + "..."
            self.fail(f"{shown!r} is not auto or a whole number {self.number._range()}", param, ctx)


def count(low: int = 0) -> Number:
    return Number(int, low, MAX_COUNT)


def seconds(low: float, high: float, *, low_open: bool = False) -> Number:
    return Number(float, low, high, low_open=low_open, unit="seconds")


_SIZE = re.compile(r"^\s*(\d{1,20}(?:\.\d{1,20})?)\s*([kmgt]?i?b?)?\s*$", re.IGNORECASE)
_SIZE_FACTORS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "ki": 1024,
    "kib": 1024,
    "m": 1000**2,
    "mb": 1000**2,
    "mi": 1024**2,
    "mib": 1024**2,
    "g": 1000**3,
    "gb": 1000**3,
    "gi": 1024**3,
    "gib": 1024**3,
    "t": 1000**4,
    "tb": 1000**4,
    "ti": 1024**4,
    "tib": 1024**4,
}


class ByteSize(click.ParamType):
    """A size such as 16MiB, 300kB or 1048576, at most ``high`` bytes."""

    name = "SIZE"

    def __init__(self, high: int, low: int = 0) -> None:
        self.high = high
        self.low = low

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int) and not isinstance(value, bool) and self.low <= value <= self.high:
            return value
        text = str(value)
        match = _SIZE.match(text)
        unit = (match.group(2) or "").lower() if match else None
        shown = text if len(text) <= 30 else text[:27] + "..."
        if match is None or unit not in _SIZE_FACTORS:
            self.fail(f"{shown!r} is not a size (examples: 1048576, 300kB, 16MiB)", param, ctx)
        try:
            size = int(Decimal(match.group(1)) * _SIZE_FACTORS[unit])
        except (InvalidOperation, ValueError):
            self.fail(f"{shown!r} is not a size (examples: 1048576, 300kB, 16MiB)", param, ctx)
        if not self.low <= size <= self.high:
            self.fail(f"{shown} is out of range: from {self.low} to {self.high:,} bytes", param, ctx)
        return size


class Text(click.ParamType):
    """A string that must be UTF-8 text (a filter, a rule, a query: not a file name)."""

    name = "TEXT"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = str(value)
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            self.fail(f"not valid UTF-8 text (byte {exc.start + 1})", param, ctx)
        return text


TEXT = Text()


# -- --json / --jsonl / --no-pager -----------------------------------------------------------


@dataclass(frozen=True)
class Output:
    """How a command that prints data was asked to print it."""

    json: bool = False
    jsonl: bool = False
    page: bool = True

    @property
    def table(self) -> bool:
        return not (self.json or self.jsonl)


def output_options(func: Callable[..., Any] | None = None, *, pager: bool = True) -> Any:
    """``--json`` (one JSON document), ``--jsonl`` (one JSON object per line) and, for commands
    whose output can be long, ``--no-pager``; the command receives ``output: Output``."""

    def decorate(f: Callable[..., Any]) -> Any:
        @functools.wraps(f)
        def wrapper(*args: Any, as_json: bool, as_jsonl: bool, no_pager: bool = False, **kwargs: Any) -> Any:
            if as_json and as_jsonl:
                raise click.UsageError("choose one of --json and --jsonl")
            return f(*args, output=Output(as_json, as_jsonl, not no_pager), **kwargs)

        command: Any = wrapper
        if pager:
            command = click.option(
                "--no-pager", is_flag=True, help="On a terminal, print straight out instead of through $PAGER."
            )(command)
        command = click.option("--jsonl", "as_jsonl", is_flag=True, help="One JSON object per line.")(command)
        return click.option("--json", "as_json", is_flag=True, help="One JSON document, for scripts.")(command)

    return decorate(func) if func is not None else decorate


# -- filter words that start with "-" --------------------------------------------------------

_TERM_START = re.compile(r"-(?:[(\"']|NOT\b|[A-Za-z_][A-Za-z0-9_]*(?:[:=<>]|$))")


class FilterCommand(click.Command):
    """A command whose trailing arguments are filter words. A word that begins with ``-`` is
    a negated filter term — ``-update:agent_message_chunk``, ``-(kind:request OR ...)``,
    ``-replay`` — unless it is one of the command's own options; everything from the first
    such word on is handed to the FILTER argument, as if after ``--``.

    The epilog (the filter language) is printed as written, and read only when help is asked
    for, so that commands start without building it.
    """

    def __init__(self, *args: Any, epilog_source: Callable[[], str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.epilog_source = epilog_source

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        epilog = self.epilog_source() if self.epilog_source else self.epilog
        if epilog:
            formatter.write("\n" + epilog.rstrip() + "\n")

    def _options(self, ctx: click.Context) -> tuple[set[str], set[str]]:
        """The command's option words: those that take a value, and flags."""
        valued: set[str] = set()
        flags: set[str] = set()
        for param in self.get_params(ctx):
            if isinstance(param, click.Option):
                names = {*param.opts, *param.secondary_opts}
                (flags if param.is_flag or param.count else valued).update(names)
        return valued, flags

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, self.sort_words(ctx, args))

    def sort_words(self, ctx: click.Context, args: list[str]) -> list[str]:
        valued, flags = self._options(ctx)
        short = {name[1] for name in valued | flags if len(name) == 2}
        options: list[str] = []
        words: list[str] = []
        i = 0
        while i < len(args):
            arg = args[i]
            if arg == "--":
                words.extend(args[i + 1 :])
                break
            name = arg.split("=", 1)[0]
            if arg in valued or (name in valued and arg.startswith("--")):
                options.append(arg)
                if arg in valued and i + 1 < len(args):
                    options.append(args[i + 1])
                    i += 1
            elif arg in flags or (arg.startswith("--") and len(arg) > 2):
                options.append(arg)
            elif arg.startswith("-") and len(arg) > 1 and not self._is_term(arg, short):
                options.append(arg)  # -n5, -vn5, or a mistake click will name
            else:
                words.append(arg)
            i += 1
        return [*options, "--", *words] if words else options

    @staticmethod
    def _is_term(arg: str, short: set[str]) -> bool:
        from acp_proxy.protocol.filters import FIELDS, FLAGS

        if _TERM_START.match(arg) is None:
            return False
        key = re.match(r"-([A-Za-z_][A-Za-z0-9_]*)", arg)
        if key is None or len(arg) > len(key.group(0)):
            return True  # -( , -"text", -field:value
        word = key.group(1)
        # A bare -word: a term when the language knows it, an option cluster (-n5) otherwise.
        return word.lower() in FIELDS or word.lower() in FLAGS or word[0] not in short
