"""Rendering for the query commands: rich on a terminal, plain text in a pipe, JSON for scripts.

Owns: how values look (times, durations, sizes, exit statuses), tables, and the JSON/JSONL
encodings of query results. Must not know: SQL or click. Colour follows rich's rules, which
honour ``NO_COLOR`` and switch styling off when stdout is not a terminal.
"""

from __future__ import annotations

import datetime as dt
import signal
import sys
from collections.abc import Iterable, Sequence
from typing import Any

import msgspec
from rich import box
from rich.console import Console
from rich.table import Table

_json = msgspec.json.Encoder()


def console() -> Console:
    con = Console(highlight=False, soft_wrap=False)
    if not con.is_terminal:
        # In a pipe, a row is a line: never wrap cells to an imaginary 80-column screen.
        con = Console(highlight=False, soft_wrap=False, width=100_000)
    return con


def is_terminal(con: Console) -> bool:
    return con.is_terminal


def write_json(value: Any) -> None:
    sys.stdout.buffer.write(_json.encode(value) + b"\n")
    sys.stdout.flush()


def write_jsonl(values: Iterable[Any]) -> None:
    out = sys.stdout.buffer
    for value in values:
        out.write(_json.encode(value) + b"\n")
    out.flush()


def table(con: Console, columns: Sequence[tuple[str, str]], rows: Iterable[dict[str, Any]], title: str = "") -> None:
    """``columns``: (key, heading) pairs. Boxes on a terminal, plain aligned text in a pipe."""
    terminal = is_terminal(con)
    if not terminal:
        _plain_table(columns, rows, title)
        return
    t = Table(
        title=title or None,
        box=box.SIMPLE_HEAD if terminal else None,
        show_edge=False,
        pad_edge=False,
        header_style="bold" if terminal else "",
        title_justify="left",
    )
    for _key, heading in columns:
        t.add_column(heading, overflow="fold")
    count = 0
    for row in rows:
        t.add_row(*[_cell(row.get(key)) for key, _ in columns])
        count += 1
    if count == 0:
        con.print(f"{title + ': ' if title else ''}nothing recorded", style="dim")
        return
    con.print(t, crop=False)


def _plain_table(columns: Sequence[tuple[str, str]], rows: Iterable[dict[str, Any]], title: str) -> None:
    """Aligned columns, no styling: one line per row, fast for tens of thousands of rows
    (rich lays out a table cell by cell, which takes seconds at that size)."""
    cells = [[_cell(row.get(key)).replace("\n", " ") for key, _ in columns] for row in rows]
    if not cells:
        sys.stdout.write(f"{title + ': ' if title else ''}nothing recorded\n")
        return
    headings = [heading for _, heading in columns]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(headings)]
    out = [title] if title else []
    for line in (headings, *cells):
        out.append("  ".join(c.ljust(w) for c, w in zip(line[:-1], widths[:-1], strict=True)) + "  " + line[-1])
    sys.stdout.write("\n".join(s.rstrip() for s in out) + "\n")
    sys.stdout.flush()


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.3f}".rstrip("0").rstrip(".") if value else "0"
    return str(value)


def when(ns: int | None) -> str:
    if ns is None:
        return ""
    return dt.datetime.fromtimestamp(ns / 1e9).strftime("%Y-%m-%d %H:%M:%S")


def clock(ns: int | None) -> str:
    if ns is None:
        return ""
    return dt.datetime.fromtimestamp(ns / 1e9).strftime("%H:%M:%S.%f")[:-3]


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
