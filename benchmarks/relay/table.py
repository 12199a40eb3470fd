"""The table: figures per relay column, the targets they are judged against, and printing."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass

from bench_agent import CHUNK_LINE_BYTES

from relay.common import RELAYS, Config, MiB, Relay
from relay.plans import best


@dataclass
class Mark:
    text: str
    ok: bool | None = None  # None: not judged
    failed: bool = False  # the run failed a check or timed out: no figure


@dataclass
class Row:
    label: str
    cells: dict[str, Mark]
    target: str = ""
    section: bool = False


def fmt_int(value: float) -> str:
    return f"{value:,.0f}"


def fmt_ratio(value: float) -> str:
    return f"{value:.2f}x"


def fmt_signed(value: float) -> str:
    return f"{value:+,.0f}"


def fmt_size(size: int) -> str:
    return f"{size // MiB} MiB" if size % MiB == 0 else f"{size:,} B"


def build_rows(cfg: Config, cells: dict, sdk_note: str | None) -> tuple[list[Row], list[dict]]:
    rows: list[Row] = []
    judged: list[dict] = []

    def judge(key: str, label: str, value: float, ok: bool, target: str, text: str) -> Mark:
        judged.append({"relay": key, "figure": label, "value": value, "target": target, "pass": ok})
        return Mark(text, ok)

    def pick(name: str, key: str, metric: str, how: str) -> float | None:
        cell = cells.get((name, key))
        if cell is None or cell.error is not None:
            return None
        return best(cell, metric, how)

    def failed(name: str, key: str) -> bool:
        cell = cells.get((name, key))
        return cell is not None and cell.error is not None

    def series(name: str, metric: str, how: str) -> dict[str, float]:
        values = {}
        for relay in RELAYS:
            value = pick(name, relay.key, metric, how)
            if value is not None:
                values[relay.key] = value
        return values

    def row(
        label: str,
        name: str,
        values: dict[str, float],
        fmt: Callable[[float], str],
        target: str = "",
        judges: dict[str, Callable[[float], bool]] | None = None,
        suffix: dict[str, str] | None = None,
    ) -> None:
        marks: dict[str, Mark] = {}
        for relay in RELAYS:
            if relay.key in values:
                value = values[relay.key]
                text = fmt(value) + (suffix or {}).get(relay.key, "")
                if judges and relay.key in judges:
                    marks[relay.key] = judge(
                        relay.key, f"{name} {label}", value, judges[relay.key](value), target, text
                    )
                else:
                    marks[relay.key] = Mark(text)
            elif failed(name, relay.key):
                marks[relay.key] = Mark("FAILED", failed=True)
        rows.append(Row(label, marks, target))

    def ratios(values: dict[str, float], base: str) -> dict[str, float]:
        if base not in values or values[base] <= 0:
            return {}
        return {key: value / values[base] for key, value in values.items()}

    proxies = ("proxy", "proxy_rec")

    # (a) chunk storm
    rows.append(Row(f"chunk storm: {cfg.storm_frames:,} x {CHUNK_LINE_BYTES} B frames", {}, section=True))
    fps = series("storm", "frames_per_s", "max")
    commit_note = {"commit": "*"}
    row("frames/s, to exit", "storm", fps, fmt_int, "(recording complete)", suffix=commit_note)
    row("x direct", "storm", ratios(fps, "direct"), fmt_ratio)
    row("x cat hop", "storm", ratios(fps, "cat"), fmt_ratio, "no-rec >= 0.8x", {"proxy": lambda v: v >= 0.8})
    row("x tee relay", "storm", ratios(fps, "tee"), fmt_ratio, "(aim: rec ~1x)")
    delivered = series("storm", "delivered_frames_per_s", "max")
    row(
        "delivered frames/s",
        "storm",
        delivered,
        fmt_int,
        "rec >= 150,000 (client has every byte)",
        {"proxy_rec": lambda v: v >= 150_000},
        commit_note,
    )
    row(
        "delivered x recording",
        "storm",
        ratios(delivered, "proxy_rec"),
        fmt_ratio,
        "check >= 0.9x",
        {"proxy_check": lambda v: v >= 0.9},
    )
    storm_rss = {k: v / MiB for k, v in series("storm", "peak_rss_sum", "max").items()}
    row("peak RSS MiB", "storm", storm_rss, lambda v: f"{v:,.1f}")
    cpu = series("storm", "cpu_us_per_frame", "min")
    row("relay CPU us/frame", "storm", cpu, lambda v: f"{v:,.1f}", "(all its processes, start-up included)")

    # (b) round trips: as the scheduler places the processes (not judged), then on one CPU
    def round_trip_rows(name: str, title: str, judged: bool) -> None:
        rows.append(Row(title, {}, section=True))
        row("p50 us", name, series(name, "p50_us", "min"), fmt_int)
        added50 = series(name, "added_p50_us", "median")
        if added50 and judged:
            row("p50 added us", name, added50, fmt_signed, "rec <= 30", {"proxy_rec": lambda v: v <= 30})
        elif added50:
            row("p50 added us", name, added50, fmt_signed, "(see the cat hop)")
        row("p99 us", name, series(name, "p99_us", "min"), fmt_int)
        added99 = series(name, "added_p99_us", "median")
        if added99 and judged:
            row("p99 added us", name, added99, fmt_signed, "rec <= 250", {"proxy_rec": lambda v: v <= 250})
        elif added99:
            row("p99 added us", name, added99, fmt_signed, "(see the cat hop)")
        row(
            "first response ms",
            name,
            series(name, "first_response_ms", "min"),
            lambda v: f"{v:,.0f}",
            "(start-up, not judged)",
        )

    round_trip_rows("rt", f"round trips: {cfg.trips:,} sequential request -> response, as scheduled", False)
    round_trip_rows("rt:1cpu", f"round trips: {cfg.trips:,} sequential request -> response, on one CPU", True)

    # start-up
    rows.append(
        Row(f"start-up: spawn -> first response to initialize (median of {cfg.startup_trials})", {}, section=True)
    )
    cat_ms = series("startup", "cat_ms", "min")
    row(f"cat as the agent ms (median of {cfg.cat_trials})", "startup", cat_ms, lambda v: f"{v:,.0f}")
    cat_added = {k: v - cat_ms["direct"] for k, v in cat_ms.items() if "direct" in cat_ms}
    row("  added ms", "startup", cat_added, fmt_signed, "<= 30", {k: (lambda v: v <= 30) for k in proxies})
    instant = series("startup", "instant_ms", "min")
    row("instant agent ms", "startup", instant, lambda v: f"{v:,.0f}", "(floor: see below)")
    row(
        "  added ms",
        "startup",
        {k: v - instant["direct"] for k, v in instant.items() if "direct" in instant},
        fmt_signed,
    )
    slow = series("startup", "slow_ms", "min")
    row(f"{cfg.slow_start * 1000:.0f} ms agent ms", "startup", slow, lambda v: f"{v:,.0f}")
    slow_added = {k: v - slow["direct"] for k, v in slow.items() if "direct" in slow}
    row("  added ms", "startup", slow_added, fmt_signed, "<= 30", {k: (lambda v: v <= 30) for k in proxies})
    floor = series("startup", "python_ms", "min")
    if floor:
        rows.append(
            Row("python -c pass ms", {"direct": Mark(f"{floor['direct']:,.0f}")}, "(the interpreter's start-up)")
        )
        for key, words in (("python_S_ms", "python -S -c pass ms"), ("python_IS_ms", "python -I -S -c pass ms")):
            other = series("startup", key, "min")
            if other:
                rows.append(Row(words, {"direct": Mark(f"{other['direct']:,.0f}")}, "(without site's .pth hooks)"))
        # On a busy machine the interpreter's start-up swamps the rest: this is the relay's own part.
        over_floor = {k: v - floor["direct"] for k, v in cat_ms.items() if k in proxies}
        row("  cat agent ms over python -c pass", "startup", over_floor, fmt_signed, "(the relay's own path)")

    # a locked database
    rows.append(
        Row(f"round trips while another process holds the write lock for {cfg.lock_seconds:.0f} s", {}, section=True)
    )
    row("trips during the lock", "lock", series("lock", "locked_trips", "min"), fmt_int)
    row("worst trip ms", "lock", series("lock", "locked_worst_ms", "min"), lambda v: f"{v:,.1f}")
    row(
        "  added ms",
        "lock",
        series("lock", "locked_added_ms", "min"),
        lambda v: f"{v:+,.1f}",
        "rec <= 50 (vs median unlocked)",
        {"proxy_rec": lambda v: v <= 50},
    )

    # (c) big frames
    for count, size in cfg.big:
        name = f"big:{count}x{size}"
        rows.append(Row(f"big frames: {count} x {fmt_size(size)}, agent -> client", {}, section=True))
        mbs = series(name, "mb_per_s", "max")
        row("MB/s", name, mbs, fmt_int, "rec >= 300", {"proxy_rec": lambda v: v >= 300})
        row("x direct", name, ratios(mbs, "direct"), fmt_ratio)
        row("x cat hop", name, ratios(mbs, "cat"), fmt_ratio)
        cpu = series(name, "cpu_ms_per_mb", "min")
        row("relay CPU ms/MB", name, cpu, lambda v: f"{v:,.2f}", "(all its processes, start-up included)")
        rss = {k: v / MiB for k, v in series(name, "peak_rss_sum", "max").items()}
        bound = {k: storm_rss[k] + 4 * size / MiB for k in proxies if k in storm_rss}
        row(
            "peak RSS MiB",
            name,
            rss,
            lambda v: f"{v:,.1f}",
            "<= storm RSS + 4 frames",
            {k: (lambda v, b=b: v <= b) for k, b in bound.items()},
        )

    # (e) live: an open page following a streaming run (live_bench.py)
    for rate, seconds in cfg.live:
        name = f"live:{rate}"
        if (name, "proxy_rec") not in cells:
            continue
        rows.append(Row(f"live: {rate:,} frames/s for {seconds:.0f} s, agent -> open page", {}, section=True))
        last = series(name, "journal_last_ms", "min")
        row("last frame shown, ms", name, last, fmt_int, "rec <= 1000", {"proxy_rec": lambda v: v <= 1000})
        row("  p50 ms (frames sent)", name, series(name, "journal_p50_ms", "min"), fmt_int)
        row("  max ms", name, series(name, "journal_max_ms", "min"), fmt_int)
        row("  database only: last frame, ms", name, series(name, "database_last_ms", "min"), fmt_int)
    # (f) remote: acp-proxy serve (WebSocket)
    if any(name == "remote" for name, _ in cells):
        rows.append(
            Row(
                f"remote: WebSocket, {cfg.remote_chunks:,} chunks; serve in the proxy columns",
                {},
                section=True,
            )
        )
        remote = series("remote", "msgs_per_s", "max")
        row("msgs/s", "remote", remote, fmt_int)
        row("x direct", "remote", ratios(remote, "direct"), fmt_ratio, "rec >= 0.8x", {"proxy_rec": lambda v: v >= 0.8})
        row("round trip p50 us", "remote", series("remote", "p50_us", "min"), fmt_int)
        row(
            "  added p50 us",
            "remote",
            series("remote", "added_p50_us", "median"),
            fmt_signed,
            "rec <= 500",
            {"proxy_rec": lambda v: v <= 500},
        )
        row("serve CPU us/msg", "remote", series("remote", "cpu_us_per_msg", "min"), lambda v: f"{v:,.1f}")

    # (d) the official SDK
    if sdk_note is not None:
        rows.append(Row(f"SDK: skipped — {sdk_note}", {}, section=True))
    else:
        rows.append(
            Row(
                f"SDK: sdk_client <- sdk_agent, {cfg.sdk_chunks:,} x {cfg.sdk_chunk_bytes} B chunks",
                {},
                section=True,
            )
        )
        steady = series("sdk", "chunks_per_s", "max")
        row("chunks/s (prompt turn)", "sdk", steady, fmt_int)
        row("x direct", "sdk", ratios(steady, "direct"), fmt_ratio)
        row(
            "x cat hop (floor)",
            "sdk",
            ratios(steady, "cat"),
            fmt_ratio,
            "no-rec >= 0.9x",
            {"proxy": lambda v: v >= 0.9},
        )
        row(
            "x proxy --no-record",
            "sdk",
            ratios(steady, "proxy"),
            fmt_ratio,
            "rec >= 0.85x",
            {"proxy_rec": lambda v: v >= 0.85},
        )
        to_exit = series("sdk", "to_exit_chunks_per_s", "max")
        row("x direct, to exit", "sdk", ratios(to_exit, "direct"), fmt_ratio, "(incl. shutdown, not judged)")
    return rows, judged


def shown(rows: list[Row]) -> list[Row]:
    """The rows with a figure, and the section titles above them (``--only`` leaves gaps)."""
    kept: list[Row] = []
    for row in rows:
        if row.section or row.cells:
            kept.append(row)
    return [row for i, row in enumerate(kept) if not row.section or (i + 1 < len(kept) and not kept[i + 1].section)]


def mark_text(mark: Mark, rich: bool) -> str:
    if mark.failed and rich:
        return f"[bold red]{mark.text}[/]"
    if mark.ok is None:
        return mark.text
    if rich:
        return f"[green]{mark.text} ok[/]" if mark.ok else f"[bold red]{mark.text} MISS[/]"
    return f"{mark.text} {'ok' if mark.ok else 'MISS'}"


def print_table(rows: list[Row], title: str, footnotes: list[str], relays: list[Relay] | None = None) -> None:
    """The table, one column per relay in ``relays`` (default: all of them)."""
    relays = RELAYS if relays is None else relays
    headers = ["", *(relay.title for relay in relays), "target"]
    if sys.stdout.isatty():
        from rich.console import Console
        from rich.table import Table

        table = Table(title=title, title_justify="left", caption="\n".join(footnotes), caption_justify="left")
        table.add_column("", max_width=26)  # section titles wrap rather than widen the table
        for relay in relays:
            table.add_column(relay.title, justify="right", no_wrap=True, min_width=len(relay.title))
        table.add_column("target", style="dim")
        for row in rows:
            if row.section:
                table.add_section()
                table.add_row(f"[bold]{row.label}[/]", *([""] * (len(relays) + 1)))
                continue
            cells = [mark_text(row.cells[r.key], True) if r.key in row.cells else "" for r in relays]
            table.add_row("  " + row.label, *cells, row.target)
        Console().print(table)
        return
    lines = [
        [
            f"  {row.label}",
            *(mark_text(row.cells[r.key], False) if r.key in row.cells else "" for r in relays),
            row.target,
        ]
        for row in rows
    ]
    widths = [
        max(len(h), *(len(line[i]) for line, row in zip(lines, rows, strict=True) if not row.section))
        for i, h in enumerate(headers)
    ]
    out = [title]

    def fmt_line(values: list[str]) -> str:
        parts = [values[0].ljust(widths[0])]
        parts += [value.rjust(width) for value, width in zip(values[1:-1], widths[1:-1], strict=True)]
        parts.append(values[-1])
        return "  ".join(parts).rstrip()

    out.append(fmt_line(headers))
    out.append("-" * (sum(widths) + 2 * (len(widths) - 1)))
    for line, row in zip(lines, rows, strict=True):
        out.append(row.label if row.section else fmt_line(line))
    out.extend(footnotes)
    print("\n".join(out))
