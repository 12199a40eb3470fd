"""One line per row at any width >= 80, ids never split; the pager on a terminal.

In a pipe the commands cut lines to ``$COLUMNS`` when it is set, so the width cases run
in-process with click's CliRunner; the terminal cases run a real process on a pseudo-terminal.
"""

from __future__ import annotations

import io
import json
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from acp_proxy.cli import views
from acp_proxy.cli.commands import cli
from tests.conftest import PROXY, proxy_env

WIDTHS = (80, 100, 200)


def lines_at(width: int, *args: str) -> list[str]:
    result = CliRunner(env={"COLUMNS": str(width)}).invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.stdout.splitlines()


def assert_fits(lines: list[str], width: int) -> None:
    assert lines
    for line in lines:
        assert views.cells(line) <= width, (width, line)


@pytest.mark.parametrize("width", WIDTHS)
def test_frames_and_tail_are_one_line_each_with_whole_ids(sdk_recording: tuple[Path, str], width: int) -> None:
    db, session = sdk_recording
    rows = [json.loads(line) for line in lines_at(1000, "frames", "--jsonl", "--db", str(db))]
    for command in (["frames"], ["tail", "--from-start", "--count", str(len(rows))]):
        lines = lines_at(width, *command, "--db", str(db))
        assert_fits(lines, width)
        assert len(lines) == len(rows)  # one line per frame, nothing wrapped
        for line, row in zip(lines, rows, strict=True):
            assert line.split()[0] == f"{row['run_id']}:{row['seq']}"
            if row.get("rpc_id"):
                assert f" {row['rpc_id']} " in line
            if row.get("session_id"):
                prefix = next(word for word in line.split() if session.startswith(word) and len(word) >= 6)
                # The prefix shown names the session in every command.
                shown = CliRunner().invoke(cli, ["show", prefix, "--db", str(db)]).stdout
                assert shown.startswith(f"Session {session}")
                # Anywhere else on the line (a summary cut to the width) the id is at least that
                # prefix, never a piece of it.
                for word in (w.rstrip("…") for w in line.split() if w.startswith(prefix[:3])):
                    assert session.startswith(word) and len(word) >= len(prefix), line


@pytest.mark.parametrize("width", WIDTHS)
def test_sessions_runs_stats_and_check_fit_without_splitting_ids(sdk_recording: tuple[Path, str], width: int) -> None:
    db, session = sdk_recording
    sessions = lines_at(width, "sessions", "--db", str(db))
    assert_fits(sessions, width)
    assert len(sessions) == 2 and sessions[1].split()[0] == session
    runs = lines_at(width, "runs", "--db", str(db))
    assert_fits(runs, width)
    assert [line.split()[0] for line in runs] == ["run", "2", "1"]
    # The turns column is the one that gives way when even the others' floors barely fit.
    assert ("turns" in runs[0].split()) == (width >= 100), (width, runs[0])
    stats = lines_at(width, "stats", "1", "--db", str(db))
    assert_fits(stats, width)
    turn_rows = [line for line in stats if line.split()[:1] == ["1"]]
    assert turn_rows and turn_rows[0].split()[1] == session[: len(turn_rows[0].split()[1])]
    assert len(turn_rows[0].split()[1]) >= 6
    assert_fits(lines_at(width, "check", "all", "--db", str(db)), width)


def test_without_columns_a_pipe_gets_whole_lines(sdk_recording: tuple[Path, str]) -> None:
    db, _ = sdk_recording
    result = CliRunner().invoke(cli, ["frames", "--db", str(db)], env={"COLUMNS": ""})
    longest = max(views.cells(line) for line in result.stdout.splitlines())
    assert longest > 80  # the summary is not cut to an imaginary screen


# -- the layout itself, on generated frames --------------------------------------------------

_TEXT = st.text(st.characters(codec="utf-8"), max_size=60) | st.sampled_from(["漢字" * 20, "e\u0301" * 30, ""])
_ID = (
    st.none()
    | st.integers(-(10**12), 10**12).map(str)
    | st.text("abc-_0123456789", min_size=1, max_size=20).map(json.dumps)
)
_FRAME = st.fixed_dictionaries(
    {
        "run_id": st.integers(1, 10**6),
        "seq": st.integers(1, 10**9),
        "ts_ns": st.integers(0, 2**62),
        "dir": st.sampled_from(["c2a", "a2c", "stderr"]),
        "kind": st.sampled_from(["request", "response", "notification", "error", "batch", "invalid", "stderr"]),
        "method": st.none() | st.sampled_from(["session/update", "session/request_permission"]) | _TEXT,
        "rpc_id": _ID,
        "session_id": st.none() | st.uuids().map(str),
        "latency_ns": st.none() | st.integers(0, 10**15),
        "raw": _TEXT,
        "replay": st.sampled_from([0, 1]),
        "fault": st.none() | st.sampled_from(["drop", "delay,duplicate"]),
        "error_code": st.none() | st.integers(-(2**31), 2**31),
        "error_message": st.none() | _TEXT,
    }
)


@settings(max_examples=300, deadline=None)
@given(frame=_FRAME, width=st.integers(80, 300), color=st.booleans())
def test_a_frame_line_fits_any_width_and_keeps_its_ids(frame: dict, width: int, color: bool) -> None:
    out = views.Out(io.BytesIO(), terminal=True, width=width, color=color)
    lines = views.FrameLines(out, session_len=8, seq_width=7)
    line = lines.line(frame)
    plain = _strip_sgr(line) + " "  # (a line ends without its trailing blanks)
    assert "\n" not in plain
    assert views.cells(plain) <= width + 1, plain
    assert plain.split()[0] == f"{frame['run_id']}:{frame['seq']}"
    if frame["rpc_id"] and len(frame["rpc_id"]) <= 24:
        assert f" {frame['rpc_id']} " in plain
    if frame["session_id"]:
        assert f" {views.session_label(frame['session_id'], 8)} " in plain


@settings(max_examples=200, deadline=None)
@given(
    rows=st.lists(st.lists(_TEXT, min_size=4, max_size=4), min_size=1, max_size=8),
    width=st.integers(80, 200),
)
def test_a_table_fits_and_never_cuts_a_kept_column(rows: list[list[str]], width: int) -> None:
    ids = [f"{n:032x}" for n in range(len(rows))]
    columns = [views.Column("id", "id", keep=True), *(views.Column(f"c{i}", f"col {i}") for i in range(4))]
    data = [{"id": ids[n], **{f"c{i}": text for i, text in enumerate(row)}} for n, row in enumerate(rows)]
    stream = io.BytesIO()
    views.table(views.Out(stream, terminal=False, width=width, color=False), columns, data)
    lines = stream.getvalue().decode().splitlines()
    assert len(lines) == len(rows) + 1
    for line, row_id in zip(lines[1:], ids, strict=True):
        assert views.cells(line) <= width, line
        assert (line + "  ").startswith(row_id + "  ")


def _strip_sgr(text: str) -> str:
    import re

    return re.sub(r"\x1b\[[0-9;]*m", "", text)


# -- on a terminal: colours, the pager, --no-pager --------------------------------------------


def run_on_a_terminal(args: list[str], env: dict[str, str], timeout: float = 30) -> bytes:
    """Run acp-proxy with stdout (and stdin) on a pseudo-terminal; what the terminal showed."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [*PROXY, *args], stdin=follower, stdout=follower, stderr=subprocess.PIPE, env=env, close_fds=True
    )
    os.close(follower)
    shown = b""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([leader], [], [], 0.1)
            if ready:
                try:
                    chunk = os.read(leader, 65536)
                except OSError:  # EIO: the other side is closed
                    break
                if not chunk:
                    break
                shown += chunk
            elif proc.poll() is not None:
                break
        assert proc.wait(timeout=max(1, deadline - time.monotonic())) == 0, proc.stderr.read() if proc.stderr else ""
    finally:
        proc.kill()
        proc.wait(timeout=10)
        os.close(leader)
    return shown


def terminal_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = proxy_env(COLUMNS="100", LINES="40", TERM="xterm-256color")
    env.pop("NO_COLOR", None)
    env.update(extra)
    return env


def test_on_a_terminal_output_goes_through_the_pager(sdk_recording: tuple[Path, str], tmp_path: Path) -> None:
    db, _ = sdk_recording
    paged = tmp_path / "paged.txt"
    shown = run_on_a_terminal(["frames", "--db", str(db)], terminal_env(tmp_path, PAGER=f"cat > {paged}"))
    text = paged.read_bytes()
    assert b"RUN:SEQ" in text and b"1:1 " in text  # the header, then the frames
    assert b"\x1b[" in text  # coloured: the pager is less -R, or whatever the user set
    assert b"1:1 " not in shown  # nothing went around the pager
    lines = [line for line in text.decode().splitlines() if line.strip()]
    assert all(views.cells(_strip_sgr(line)) <= 100 for line in lines)


def test_no_pager_and_no_color(sdk_recording: tuple[Path, str], tmp_path: Path) -> None:
    db, _ = sdk_recording
    paged = tmp_path / "paged.txt"
    env = terminal_env(tmp_path, PAGER=f"cat > {paged}", NO_COLOR="1")
    shown = run_on_a_terminal(["frames", "--no-pager", "--db", str(db)], env)
    assert not paged.exists()
    assert b"1:1 " in shown and b"\x1b[" not in shown


def test_less_is_the_default_pager_and_quits_on_one_screen(sdk_recording: tuple[Path, str], tmp_path: Path) -> None:
    from shutil import which

    if which("less") is None:
        pytest.skip("less is not installed here")
    db, _ = sdk_recording
    env = terminal_env(tmp_path)
    env.pop("PAGER", None)
    env.pop("ACP_PROXY_PAGER", None)
    env.pop("LESS", None)
    shown = run_on_a_terminal(["runs", "--db", str(db)], env)  # three lines: less -F shows them and quits
    assert b"client" in shown


@pytest.mark.spawns
def test_show_on_a_terminal_keeps_only_its_own_escapes(tmp_path: Path) -> None:
    from tests.cli.test_cli_inputs import test_show_and_frames_render_any_recorded_text

    test_show_and_frames_render_any_recorded_text(tmp_path)
    shown = run_on_a_terminal(["show", "--no-pager", "--db", str(tmp_path / "odd.db")], terminal_env(tmp_path))
    assert b"\x1b[1m" in shown or b"\x1b[" in shown  # rich's own styling is there
    assert b"\x1b]0;" not in shown and b"\x1b[2J" not in shown and b"\x1b[31mred" not in shown
    assert "␛[31mred".encode() in shown


if sys.platform == "win32":  # pragma: no cover
    pytest.skip("pseudo-terminals", allow_module_level=True)


@pytest.mark.spawns
def test_quitting_the_pager_early_ends_the_command_quietly(tmp_path: Path) -> None:
    from tests.cli.test_cli_inputs import make_frames_db

    db = tmp_path / "big.db"
    make_frames_db(db, 100_000)
    shown = run_on_a_terminal(["frames", "--db", str(db)], terminal_env(tmp_path, PAGER="head -n 2"))
    lines = shown.decode().splitlines()
    assert len(lines) == 2 and "RUN:SEQ" in lines[0] and "1:1 " in lines[1]  # the pager's, and nothing after


def test_a_session_label_is_never_only_digits_and_always_names_its_session() -> None:
    # A reference made only of digits names a run, so a label that people copy must not be one.
    assert views.session_label("3f2a9c1b7d", 6) == "3f2a9c"
    assert views.session_label("013926d438b2", 6) == "013926d"
    assert views.session_label("93854335-2d63-2d65", 8) == "93854335-"
    assert views.session_label("12345", 6) == "session:12345"
    assert views.session_label("1234567890", 6) == "session:1234567890"
    assert views.session_label("ab", 6) == "ab"
    assert views.session_label("", 6) == ""


@pytest.mark.parametrize("room", range(1, 40))
def test_a_summary_is_never_cut_through_a_session_id_short_of_its_label(room: int) -> None:
    # An id that begins with eight digits: its label runs to the first letter, and a piece of it
    # shorter than that would be all digits, which names a run.
    session_id = "42503778c1f24e0c"
    label = views.session_label(session_id, 6)
    tail = f"session {session_id} and more words after it"
    text = views.FrameLines._cut_summary(tail, room, label, session_id)
    assert views.cells(text) <= room
    pieces = [word.rstrip("…") for word in text.split() if word.startswith("425")]
    assert all(session_id.startswith(piece) and len(piece) >= len(label) for piece in pieces), text
