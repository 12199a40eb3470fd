"""Rendering for the query commands: one line per row at the terminal's width, JSON for scripts.

Owns: where output goes (the terminal, through the user's pager when it is one, or a pipe)
and what happens when it cannot go there, as git does: a reader that went away (``| head``,
quitting the pager) ends the output quietly with exit status 0; a full, closed or failing
stdout is one line (``acp-proxy: cannot write to standard output: No space left on device``,
``OutputError``, exit 2); a pager that cannot be found is a one-line note, and the output comes
out plain. How values look (times, durations, sizes, exit statuses), the one-line layout of a frame, plain
tables that fit the width without ever cutting a column marked ``keep`` (the ids people copy),
and the JSON/JSONL encodings of query results.

Must not know: SQL or click. Colour only on a terminal, never with ``NO_COLOR`` or
``TERM=dumb``. Every string from a recording goes out through ``summary.printable`` or a
``backslashreplace`` encoder, so no recorded byte (an escape sequence, a lone surrogate) can
crash the writer or drive the terminal.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

import msgspec

from acp_proxy.errors import AcpProxyError
from acp_proxy.protocol.controls import summary as summary_of_control
from acp_proxy.read.summary import printable, summarize

if TYPE_CHECKING:
    from rich.console import Console

_json = msgspec.json.Encoder()

_FLUSH_EVERY_S = 0.1  # a slow query still shows its first lines at once: flush at least this often

# -- where output goes -----------------------------------------------------------------------

_SGR = {"bold": "1", "dim": "2", "red": "31", "green": "32", "yellow": "33", "cyan": "36", "magenta": "35"}


class OutputError(AcpProxyError):
    """Standard output (or the pager) cannot take what is written: full, closed, failing."""


def cannot_write(exc: OSError, where: str = "standard output") -> OutputError:
    reason = exc.strerror or os.strerror(exc.errno or 0) or str(exc)
    return OutputError(f"cannot write to {where}: {reason}")


class Out:
    """A command's output: bytes to a pipe, the terminal or a pager, written UTF-8 with any
    unencodable character (a lone surrogate from a recorded frame) escaped, never raised on.

    ``width``: the columns to fit, None for no limit (a pipe). ``color``: ANSI styling allowed.
    """

    def __init__(
        self, stream: IO[bytes], *, terminal: bool, width: int | None, color: bool, where: str = "standard output"
    ) -> None:
        self.stream = stream
        self.where = where
        self.terminal = terminal
        self.width = width
        self.color = color
        self._flushed = time.monotonic()
        self._console: Console | None = None

    def paint(self, text: str, style: str) -> str:
        if not self.color or not style or not text:
            return text
        codes = ";".join(_SGR[s] for s in style.split() if s in _SGR)
        return f"\x1b[{codes}m{text}\x1b[0m" if codes else text

    def line(self, text: str = "") -> None:
        self.data(text.encode("utf-8", "backslashreplace") + b"\n")

    def text(self, text: str) -> None:
        self.data(text.encode("utf-8", "backslashreplace"))

    def data(self, data: bytes) -> None:
        """Write ``data``: a reader gone is ``BrokenPipeError``, any other failure ``OutputError``."""
        try:
            self.stream.write(data)
            now = time.monotonic()
            if now - self._flushed >= _FLUSH_EVERY_S:
                self._flushed = now
                self.stream.flush()
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise cannot_write(exc, self.where) from None

    def flush(self) -> None:
        self._flushed = time.monotonic()
        try:
            self.stream.flush()
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise cannot_write(exc, self.where) from None

    def console(self) -> Console:
        """A rich Console writing here (for the conversation and diff renderers). Whatever text
        it is given, recorded escape sequences come out as symbols: only rich's own styling
        reaches the terminal."""
        if self._console is None:
            self._console = _safe_console_class()(
                file=_TextSink(self),  # type: ignore[arg-type]
                force_terminal=self.terminal,
                color_system="auto" if self.color else None,
                no_color=not self.color,
                width=self.width or 100_000,
                highlight=False,
                soft_wrap=False,
                emoji=False,
            )
        return self._console


def _safe_console_class() -> type[Console]:
    from rich.console import Console
    from rich.segment import Segment

    class SafeConsole(Console):
        def on_broken_pipe(self) -> None:
            # rich's own answer is SystemExit(1); a reader that went away is output()'s to end.
            self.quiet = True
            raise BrokenPipeError

        def _render_buffer(self, buffer: Iterable[Segment]) -> str:
            # Segments rich marks as control codes are its own (cursor moves); every other
            # segment's text is content and loses its control characters before styling.
            return super()._render_buffer(
                segment if segment.control else Segment(printable(segment.text, keep_newlines=True), segment.style)
                for segment in buffer
            )

    return SafeConsole


class _TextSink(io.TextIOBase):
    """The text file rich writes to: encodes into an ``Out``, safely. Without colour rich
    writes no escape sequence of its own, so any control character left is content's."""

    def __init__(self, out: Out) -> None:
        self._out = out

    def write(self, text: str) -> int:
        self._out.text(text if self._out.color else printable(text, keep_newlines=True))
        return len(text)

    def flush(self) -> None:
        self._out.flush()

    def isatty(self) -> bool:
        return self._out.terminal


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def _pipe_width() -> int | None:
    """In a pipe, lines are cut only when ``COLUMNS`` asks for it."""
    value = os.environ.get("COLUMNS", "")
    return max(20, min(int(value), 10_000)) if value.isdigit() and int(value) > 0 else None


def _color_allowed() -> bool:
    return "NO_COLOR" not in os.environ and os.environ.get("TERM") != "dumb"


def _note(message: str) -> None:
    """One line on stderr, the way ``cli.support.say`` writes (this module must not know click)."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        sys.stderr.write(f"acp-proxy: {message}\n")
        sys.stderr.flush()


def missing_pager(command: str) -> str | None:
    """The program ``command`` starts, when it cannot be found or run (the shell would only
    say "not found" and exit 127, and the output would be lost); None when it can, or when the
    command is more than words for the shell to run (then the shell is left to judge it)."""
    import shlex

    try:
        words = shlex.split(command)
    except ValueError:
        return None
    while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]):
        words = words[1:]  # LESS=R less
    while len(words) > 1 and words[0] in ("exec", "command"):  # shell builtins that run the next word
        words = words[1:]
    if not words:
        return command  # only assignments: the shell would run nothing, and read nothing
    if any(ch in command for ch in "|&;<>()$`\\*?[]{}~\n"):
        return None  # a pipeline, an expansion ...: the shell's to judge
    program = words[0]
    if os.sep in program:
        usable = os.path.isfile(program) and os.access(program, os.X_OK)
    else:
        usable = shutil.which(program) is not None
    return None if usable else program


def pager_command() -> str | None:
    """The pager to use on a terminal: ``$ACP_PROXY_PAGER``, ``$PAGER``, else ``less`` when it
    is installed; None for none (an empty value or ``cat`` turns paging off, as in git)."""
    for name in ("ACP_PROXY_PAGER", "PAGER"):
        value = os.environ.get(name)
        if value is not None:
            value = value.strip()
            return value if value and value != "cat" else None
    return "less" if shutil.which("less") else None


def _binary_stdout() -> IO[bytes]:
    stream: Any = sys.stdout  # a test's stand-in may have no binary buffer
    return stream.buffer if hasattr(stream, "buffer") else stream


def is_fd1(stream: Any) -> bool:
    """Whether ``stream`` writes to fd 1 (not a test's stand-in)."""
    try:
        return bool(stream.fileno() == 1)
    except (AttributeError, ValueError, OSError, io.UnsupportedOperation):
        return False


def stdout_usable() -> OSError | None:
    """Why fd 1 cannot be written to (closed, or opened only for reading), else None."""
    import fcntl

    try:
        flags = fcntl.fcntl(1, fcntl.F_GETFL)
    except OSError as exc:
        return exc
    if flags & os.O_ACCMODE == os.O_RDONLY:
        import errno

        return OSError(errno.EBADF, os.strerror(errno.EBADF))
    return None


def _silence_stdout() -> None:
    """After the reader went away: point fd 1 at /dev/null, so Python's own flush at exit
    cannot complain about the broken pipe."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        pass


@contextlib.contextmanager
def output(*, page: bool = True) -> Iterator[Out]:
    """Where a command writes. On a terminal, through the pager (``less -FRX`` unless the user
    set ``LESS``: it quits when everything fits on one screen) unless ``page`` is False; in a
    pipe, straight out. A reader that goes away (``| head``, quitting the pager) ends the
    output quietly: no traceback, no broken-pipe noise, exit status 0. A stdout that cannot be
    written (closed, full, failing) raises ``OutputError`` (one line, exit 2). A pager that
    cannot be found is named in a one-line note, and the output comes out without it."""
    stdout = sys.stdout
    unusable = stdout_usable() if stdout is None or is_fd1(stdout) else None
    if stdout is None or unusable is not None:
        raise cannot_write(unusable or OSError(9, os.strerror(9)))
    terminal = _is_terminal(stdout)
    color = terminal and _color_allowed()
    width = shutil.get_terminal_size((100, 24)).columns if terminal else _pipe_width()
    pager = pager_command() if terminal and page else None
    if pager is not None and (missing := missing_pager(pager)) is not None:
        source = "ACP_PROXY_PAGER" if "ACP_PROXY_PAGER" in os.environ else "PAGER"
        _note(f"pager not found: {printable(missing)!r} (${source}); showing the output without it")
        pager = None
    proc: subprocess.Popen[bytes] | None = None
    if pager is not None:
        env = dict(os.environ)
        env.setdefault("LESS", "FRX")
        env.setdefault("LV", "-c")
        try:
            stdout.flush()
            proc = subprocess.Popen(pager, shell=True, stdin=subprocess.PIPE, env=env)
        except OSError as exc:
            _note(f"cannot start the pager: {exc.strerror or exc}; showing the output without it")
            proc = None
    stream: IO[bytes] = proc.stdin if proc is not None and proc.stdin is not None else _binary_stdout()
    out = Out(stream, terminal=terminal, width=width, color=color, where="the pager" if proc else "standard output")
    try:
        yield out
        out.flush()
    except BrokenPipeError:
        if proc is None:
            _silence_stdout()
    except OutputError:
        if proc is None:
            _silence_stdout()  # what stays in Python's buffer must not fail again at exit
        raise
    except KeyboardInterrupt:
        if proc is None:
            raise
        # The key went to the pager too; it decides when the output ends, as with git.
    finally:
        if proc is not None:
            _close_pager(proc)


def _close_pager(proc: subprocess.Popen[bytes]) -> None:
    previous = signal.getsignal(signal.SIGINT)
    with contextlib.suppress(ValueError):  # not the main thread: leave SIGINT alone
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        if proc.stdin is not None:
            with contextlib.suppress(BrokenPipeError, OSError):
                proc.stdin.close()
        code = proc.wait()
    finally:
        with contextlib.suppress(ValueError, TypeError):
            signal.signal(signal.SIGINT, previous)
    if code in (126, 127):  # the shell could not run it: what was written went nowhere
        _note(f"the pager could not run (exit status {code}); try again with --no-pager")


# -- JSON ------------------------------------------------------------------------------------


def encode_json(value: Any) -> bytes:
    """Compact JSON. A string that holds a lone surrogate (a recorded ``"\\ud800"``, decoded)
    is written as that escape again, instead of failing the whole output. Characters that can
    act on a terminal without being control characters (C1 controls, bidi overrides and
    isolates) are written as ``\\uXXXX`` escapes: the same JSON value, and a recorded frame cannot
    reorder what a person reads when the JSON lands on a terminal."""
    try:
        data = _json.encode(value)
    except UnicodeEncodeError:
        import json

        data = json.dumps(value, ensure_ascii=True, separators=(",", ":"), default=str).encode()
    if _TERMINAL_ACTIVE.search(data) is None:
        return data
    return _TERMINAL_ACTIVE.sub(lambda m: b"\\u%04x" % ord(m.group().decode()), data)


# UTF-8 of U+0080..U+009F, U+061C, U+200E/F, U+202A..U+202E, U+2066..U+2069. Outside strings JSON
# holds only ASCII, so each match is inside a string, where its escape means the same character.
_TERMINAL_ACTIVE = re.compile(
    b"|".join(
        re.escape(chr(c).encode())
        for c in (*range(0x80, 0xA0), 0x61C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))
    )
)


def write_json(out: Out, value: Any) -> None:
    out.data(encode_json(value) + b"\n")


def write_jsonl(out: Out, values: Iterable[Any]) -> None:
    for value in values:
        out.data(encode_json(value) + b"\n")


# -- widths ----------------------------------------------------------------------------------


def cells(text: str) -> int:
    """The columns ``text`` takes on a terminal (wide characters count two)."""
    if text.isascii():
        return len(text)
    from rich.cells import cell_len

    return cell_len(text)


def cut(text: str, width: int) -> str:
    """``text`` in at most ``width`` columns, ending in … when something was cut."""
    if width <= 0:
        return ""
    if cells(text) <= width:
        return text
    if text.isascii():
        return text[: width - 1] + "…"
    from rich.cells import set_cell_size

    return set_cell_size(text, width - 1).rstrip() + "…"


def pad(text: str, width: int, right: bool = False) -> str:
    gap = width - cells(text)
    if gap <= 0:
        return text
    return " " * gap + text if right else text + " " * gap


# -- tables ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Column:
    """One column of a plain table. ``keep``: never cut (an id a person copies); ``right``:
    right-aligned (numbers); ``first``: gives way before the other cuttable columns do."""

    key: str
    heading: str
    keep: bool = False
    right: bool = False
    first: bool = False
    optional: bool = False
    """Left out (the rightmost such first) when the other columns would not fit at their floors."""


_WIDTH_SAMPLE = 1000  # rows read before the column widths are fixed; later rows are cut to them


def table(
    out: Out,
    columns: Sequence[Column],
    rows: Iterable[Mapping[str, Any]],
    title: str = "",
    empty: str = "nothing recorded",
) -> None:
    """One line per row, columns aligned and fitted to ``out.width``: cells of columns that are
    not ``keep`` are cut (…) widest first; a ``keep`` column is always shown whole."""
    iterator = iter(rows)
    sample: list[list[str]] = []
    for row in iterator:
        sample.append([cell(row.get(c.key)) for c in columns])
        if len(sample) >= _WIDTH_SAMPLE:
            break
    if not sample:
        out.line(out.paint(f"{title + ': ' if title else ''}{empty}", "dim"))
        return
    natural = [max(cells(c.heading), *(cells(r[i]) for r in sample)) for i, c in enumerate(columns)]
    shown = _fitting_columns(columns, natural, out.width)
    if len(shown) < len(columns):
        columns = [columns[i] for i in shown]
        natural = [natural[i] for i in shown]
        sample = [[r[i] for i in shown] for r in sample]
    widths = fit_widths(
        natural, [c.keep for c in columns], [cells(c.heading) for c in columns], out.width, [c.first for c in columns]
    )
    if title:
        out.line(out.paint(title, "bold"))
    out.line(out.paint(_join_cells([c.heading for c in columns], columns, widths), "bold"))
    for cells_ in sample:
        out.line(_join_cells(cells_, columns, widths))
    for row in iterator:
        out.line(_join_cells([cell(row.get(c.key)) for c in columns], columns, widths))


def _floor(natural: int, keep: bool, heading: int) -> int:
    """The narrowest a column is cut to: whole if ``keep``, else its heading up to 8 cells (3 at least)."""
    return natural if keep else min(natural, max(3, min(heading, 8)))


def _fitting_columns(columns: Sequence[Column], natural: list[int], width: int | None) -> list[int]:
    """The indexes of the columns shown: all, unless even their floors would not fit ``width``;
    then ``optional`` ones are left out, rightmost first, until the rest fit."""
    shown = list(range(len(columns)))
    if width is None:
        return shown

    def need() -> int:
        return sum(_floor(natural[i], columns[i].keep, cells(columns[i].heading)) for i in shown) + 2 * (len(shown) - 1)

    for i in reversed(range(len(columns))):
        if need() <= width:
            break
        if columns[i].optional:
            shown.remove(i)
    return shown


def fit_widths(
    natural: list[int], keep: list[bool], headings: list[int], width: int | None, first: list[bool] | None = None
) -> list[int]:
    """Column widths that fit ``width`` (two spaces between columns): the widest cuttable
    columns give way first (those marked ``first`` before any other), down to a floor (their
    heading, at most 8 columns, at least 3)."""
    widths = list(natural)
    if width is None:
        return widths
    gaps = 2 * (len(widths) - 1)
    floors = [_floor(n, k, h) for n, k, h in zip(natural, keep, headings, strict=True)]
    if sum(widths) + gaps <= width:
        return widths
    first = first or [False] * len(widths)
    early = [i for i, (k, f) in enumerate(zip(keep, first, strict=True)) if f and not k]
    if early:
        rest = [i for i, k in enumerate(keep) if not k and i not in early]
        room = width - gaps - sum(widths[i] for i in range(len(widths)) if i not in early)
        _level(widths, natural, floors, early, room)
        if sum(widths) + gaps <= width or not rest:
            return widths
        keep = [k or i in early for i, k in enumerate(keep)]
    budget = width - gaps - sum(w for w, k in zip(widths, keep, strict=True) if k)
    cuttable = [i for i, k in enumerate(keep) if not k]
    _level(widths, natural, floors, cuttable, budget)
    return widths


def _level(widths: list[int], natural: list[int], floors: list[int], cuttable: list[int], budget: int) -> None:
    """Cut the ``cuttable`` columns to one level (never below their floors) that fits ``budget``,
    then hand what is left back to them, left to right."""
    # The highest level L such that every cuttable column at min(natural, max(floor, L)) fits.
    low, high = 0, max((natural[i] for i in cuttable), default=0)
    while low < high:
        mid = (low + high + 1) // 2
        if sum(min(natural[i], max(floors[i], mid)) for i in cuttable) <= budget:
            low = mid
        else:
            high = mid - 1
    for i in cuttable:
        widths[i] = min(natural[i], max(floors[i], low))
    spare = budget - sum(widths[i] for i in cuttable)
    for i in cuttable:
        if spare <= 0:
            break
        grow = min(spare, natural[i] - widths[i])
        widths[i] += grow
        spare -= grow


def _join_cells(values: Sequence[str], columns: Sequence[Column], widths: Sequence[int]) -> str:
    parts = []
    last = len(values) - 1
    for i, (value, column, width) in enumerate(zip(values, columns, widths, strict=True)):
        text = value if column.keep else cut(value, width)
        parts.append(text if i == last and not column.right else pad(text, width, column.right))
    return "  ".join(parts).rstrip()


def cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.3f}".rstrip("0").rstrip(".") if value else "0"
    if isinstance(value, bytes):
        return printable(value.decode("utf-8", "backslashreplace"))
    return printable(str(value))


# -- one line per frame ----------------------------------------------------------------------

ARROWS = {"c2a": "→", "a2c": "←", "stderr": "!"}
KINDS = {
    "request": "req",
    "response": "resp",
    "notification": "notif",
    "error": "error",
    "batch": "batch",
    "invalid": "bad",
    "stderr": "log",
}
FRAME_LEGEND = """\
One line per frame:  RUN:SEQ  TIME  DIR  KIND  METHOD  ID  SESSION  LATENCY  [FLAGS] SUMMARY
    DIR      → client to agent, ← agent to client, ! the agent's stderr
    KIND     req, resp, notif, error, batch, bad (not JSON-RPC), log (stderr)
    SESSION  the shortest prefix of the session id that names it (any command takes it:
             acp-proxy show PREFIX, session:PREFIX)
    SUMMARY  the chunk's text, the tool's title and status, the prompt, the stop reason, the
             error's message ..., cut to the terminal's width (in a pipe, to $COLUMNS if set)
A line RUN:cN * ctl is an acp-proxy ctl action (N counts the run's actions; filter: control);
a held frame's flags say how long it was held and what became of it.
-v adds each frame's raw JSON on the line below it."""

_METHOD_MAX = 26  # "session/request_permission"; longer (extension) names are cut
_METHOD_NARROW = 14  # below _WIDE columns: "session/update" lines up, longer names push the line
_WIDE = 120
_ID_MIN = 3
_ID_MAX = 24  # longer ids are cut: they are shown whole in -v and --jsonl
_LATENCY = 6


def frame_flags(f: Mapping[str, Any]) -> list[str]:
    flags = []
    if f.get("replay"):
        flags.append("replay")
    if f.get("unanswered"):
        flags.append("unanswered")
    if f.get("held"):
        flags.append(str(f["held"]))  # a breakpoint's hold (not forwarded): how long, what became of it
    elif f.get("forwarded") == 0:
        flags.append("not-forwarded")
    if f.get("origin") == "proxy":
        flags.append("proxy")
    if f.get("fault"):
        flags.append(f"fault:{f['fault']}")
    if f.get("unknown"):
        flags.append(f"unknown:{f['unknown']}")
    if f.get("cut"):
        flags.append("cut")
    if f.get("decode_error") and f.get("kind") != "invalid":
        flags.append("decode-error")
    if f.get("note") and f.get("forwarded") != 0:
        flags.append("note")
    if isinstance(f.get("mark"), str):
        comment = f["mark"]
        flags.append(
            f'marked:"{comment[:27]}..."' if len(comment) > 30 else f'marked:"{comment}"' if comment else "marked"
        )
    return flags


def latency(ns: int | None) -> str:
    """A response's latency in at most six columns: 0.42ms, 8.42ms, 679ms, 1.23s, 12.3s, 123s."""
    if ns is None:
        return ""
    ms_ = ns / 1e6
    if ms_ < 10:
        return f"{ms_:.2f}ms"
    if ms_ < 1000:
        return f"{ms_:.0f}ms"
    s = ms_ / 1000
    if s < 10:
        return f"{s:.2f}s"
    if s < 100:
        return f"{s:.1f}s"
    return f"{s:.0f}s" if s < 100_000 else f"{s / 86400:.0f}d"


def session_label(session_id: str, length: int) -> str:
    """The start of ``session_id`` to show: ``length`` characters, or more until one is not a
    digit, since a reference made only of digits names a run (``session:`` then says it, for
    an id with no other character)."""
    leading_digits = len(session_id) - len(session_id.lstrip("0123456789"))
    label = session_id[: max(length, leading_digits + 1)]
    return f"session:{label}" if session_id and leading_digits == len(session_id) else label


class FrameLines:
    """Formats frames one per line (``FRAME_LEGEND``) for ``out``: the fixed columns, then the
    summary cut to what is left of the width. ``session_len``: how many characters of a session
    id to show (a prefix unique in the database); ``seq_width``: room for ``RUN:SEQ``."""

    def __init__(self, out: Out, *, session_len: int = 8, seq_width: int = 7, verbose: bool = False) -> None:
        self.out = out
        self.session_len = session_len
        self.seq_width = max(7, seq_width)
        self.verbose = verbose
        wide = out.width is None or out.width >= _WIDE
        self.method_width = _METHOD_MAX if wide else _METHOD_NARROW

    def header(self) -> str:
        parts = [
            pad("RUN:SEQ", self.seq_width),
            pad("TIME", 12),
            "⇄",
            pad("KIND", 5),
            pad("METHOD", self.method_width),
            pad("ID", _ID_MIN),
            pad("SESSION", self.session_len),
            pad("LATENCY", _LATENCY),
            "SUMMARY",
        ]
        return self._fit(" ".join(parts))

    def short_session(self, session_id: str | None) -> str:
        if not session_id:
            return ""
        return session_label(session_id, self.session_len)

    def line(self, f: Mapping[str, Any]) -> str:
        paint = self.out.paint
        kind = f.get("kind") or ""
        if kind == "control":
            return self.control_line(f)
        where = f"{f.get('run_id')}:{f.get('seq')}"
        self.seq_width = max(self.seq_width, len(where))
        method = printable(f.get("method") or "")
        rpc_id = printable(f.get("rpc_id") or "")
        session = printable(self.short_session(f.get("session_id")))
        fixed: list[str | None] = [
            pad(where, self.seq_width),
            pad(clock(f.get("ts_ns")), 12),
            ARROWS.get(f.get("dir") or "", "?"),
            pad(KINDS.get(kind, kind[:5]), 5),
            pad(cut(method, _METHOD_MAX), self.method_width),
            pad(cut(rpc_id, _ID_MAX), _ID_MIN),
            pad(session, self.session_len),
            pad(latency(f.get("latency_ns")) if kind in ("response", "error") else "", _LATENCY, right=True),
        ]
        flags = frame_flags(f)
        tail = (f"[{' '.join(flags)}] " if flags else "") + summarize(f)
        width = self.out.width
        # The arrow is one column; every other part is ASCII unless a peer sent otherwise, so
        # widths are counted part by part, the slow way only for the parts that need it.
        sizes = [1 if i == 2 else cells(part or "") for i, part in enumerate(fixed)]
        head_width = sum(sizes) + len(fixed)
        if width is not None and head_width > width:
            fixed, sizes = self._give_way(fixed, sizes, method, width)
            head_width = sum(size for part, size in zip(fixed, sizes, strict=True) if part is not None)
            head_width += sum(1 for part in fixed if part is not None)
        head = " ".join(part for part in fixed if part is not None) + " "
        room = None if width is None else width - head_width
        if room is not None and room < 0:  # only pathological ids get here (a 1,000-digit seq)
            text = cut(head, width or 0)
        else:
            tail = tail if room is None else self._cut_summary(tail, room, session, f.get("session_id"))
            text = self._paint(fixed, flags, tail, kind) if self.out.color else (head + tail).rstrip()
        if self.verbose:
            raw = f.get("raw")
            if raw is None and f.get("raw_bytes") is not None:
                raw = bytes(f["raw_bytes"]).decode("utf-8", "backslashreplace")
            text += "\n    " + paint(printable(raw or ""), "dim")
        return text

    def control_line(self, c: Mapping[str, Any]) -> str:
        """A control action (``read.controls``) among the frames: ``RUN:cN``, its time, ``*``,
        ``ctl``, then what it did where a frame has its method and summary."""
        where = f"{c.get('run_id')}:c{c.get('number')}"
        self.seq_width = max(self.seq_width, len(where))
        head = f"{pad(where, self.seq_width)} {pad(clock(c.get('ts_ns')), 12)} * {pad('ctl', 5)} "
        text = head + printable(summary_of_control(c))
        text = self._fit(text)
        return self.out.paint(text, "yellow") if self.out.color else text

    @staticmethod
    def _cut_summary(tail: str, room: int, label: str, session_id: Any) -> str:
        """``tail`` cut to ``room``, never through the session id short of its label: a piece
        of an id that begins with digits could be all digits, which names a run."""
        text = cut(tail, room)
        if text == tail or not isinstance(session_id, str) or not session_id:
            return text
        kept = len(text) - 1  # cut keeps a prefix and adds "…"
        at = tail.find(session_id)
        if at != -1 and at < kept < at + len(session_id) and kept - at < len(label):
            return tail[:at].rstrip() + " …" if tail[:at].strip() else "…"
        return text

    @staticmethod
    def _give_way(
        fixed: list[str | None], sizes: list[int], method: str, width: int
    ) -> tuple[list[str | None], list[int]]:
        """The fixed columns of a line that does not fit: the method is cut first (to four
        columns), then the latency and the time are left out. Ids never give way."""
        fixed, sizes = list(fixed), list(sizes)

        def over() -> int:
            return (
                sum(size for part, size in zip(fixed, sizes, strict=True) if part is not None)
                + sum(1 for part in fixed if part is not None)
                - width
            )

        if over() > 0:
            fixed[4] = pad(cut(method, max(4, min(_METHOD_MAX, cells(method)) - over())), 4)
            sizes[4] = cells(fixed[4] or "")
        for index in (7, 1):  # latency, then time
            if over() > 0:
                fixed[index] = None
        return fixed, sizes

    def _paint(self, fixed: list[str | None], flags: list[str], tail: str, kind: str) -> str:
        paint = self.out.paint
        styles = {1: "dim", 2: {"→": "cyan", "←": "green"}.get(fixed[2] or "", "yellow"), 6: "magenta", 7: "dim"}
        if kind in ("error", "invalid"):
            styles[3] = "red"
        styled = [paint(part, styles.get(i, "")) for i, part in enumerate(fixed) if part is not None]
        if flags and tail.startswith("["):
            end = tail.find("] ") + 1 or len(tail)
            tail = paint(tail[:end], "yellow") + tail[end:]
        elif kind in ("error", "invalid"):
            tail = paint(tail, "red")
        return (" ".join(styled) + " " + tail).rstrip()

    def _fit(self, text: str) -> str:
        return text if self.out.width is None else cut(text, self.out.width)


# -- values ----------------------------------------------------------------------------------


def _local(ns: int) -> dt.datetime | None:
    try:
        return dt.datetime.fromtimestamp(ns / 1e9)
    except (OverflowError, OSError, ValueError):
        return None


def when(ns: int | None) -> str:
    moment = _local(ns) if isinstance(ns, int) else None
    return moment.strftime("%Y-%m-%d %H:%M:%S") if moment else ""


_last_second: list[Any] = [None, ""]  # frames come in time order: one strftime per second


def clock(ns: int | None) -> str:
    """``HH:MM:SS.mmm`` in local time."""
    if not isinstance(ns, int):
        return ""
    second, rest = divmod(ns, 10**9)
    if _last_second[0] != second:
        moment = _local(second * 10**9)
        if moment is None:
            return ""
        _last_second[:] = [second, moment.strftime("%H:%M:%S")]
    return f"{_last_second[1]}.{rest // 10**6:03d}"


def duration(ns: int | None) -> str:
    if ns is None:
        return ""
    seconds = ns / 1e9
    if seconds < 1:
        return f"{seconds * 1000:.1f}ms"
    if seconds < 120:
        return f"{seconds:.2f}s"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def ms(value: float | None) -> str:
    if value is None:
        return ""
    return f"{value:.3f}" if value < 10 else f"{value:.1f}"


def size(n: int | None) -> str:
    if n is None:
        return ""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n}{unit}" if unit == "B" else f"{n:.1f}{unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


def exit_status(code: int | None, sig: int | None, status: str | None) -> str:
    if sig is not None:
        try:
            return signal.Signals(sig).name
        except ValueError:
            return f"signal {sig}"
    if code is not None:
        return str(code)
    return status or ""
