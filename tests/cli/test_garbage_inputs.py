"""Generated garbage at every option of every command, and at the filter and fault parsers:
never a traceback, never a hang — a result, or one line on stderr and exit 2.

Query commands run in-process with click's CliRunner (each call under an alarm, so a hang fails
the test instead of stalling it); `run` spawns, so it runs as a bounded subprocess.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import sqlite3
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from acp_proxy.cli.commands import cli
from acp_proxy.faults import rules as faults
from acp_proxy.protocol import filters
from acp_proxy.store import database as store
from tests.conftest import PROXY, proxy_env

HANG_S = 20  # one in-process command that takes this long is a hang

# -- garbage ---------------------------------------------------------------------------------

# Any character, lone surrogates included (what a non-UTF-8 byte in argv becomes).
_ANY_TEXT = st.text(st.characters() | st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), max_size=40)
_NUMBERS = st.sampled_from(
    [
        "0",
        "-1",
        "1",
        "2",
        "0.5",
        "nan",
        "-nan",
        "inf",
        "-inf",
        "1e400",
        "1e-400",
        "9" * 30,
        "-" + "9" * 30,
        "0x10",
        "1_000",
        "",
        " ",
        "3.",
        ".5",
        "1e308",
        "2**63",
        "9223372036854775808",
        "-9223372036854775809",
    ]
)
_WORDS = st.sampled_from(
    [
        "last",
        "all",
        "1",
        "2",
        "run:1",
        "run:last",
        "session:",
        "session:0",
        "-",
        "--",
        "-x",
        "-n",
        "-update:agent_message_chunk",
        "-(",
        "(",
        ")",
        "OR",
        "NOT",
        "kind:error",
        "latency>1e999d",
        "seq:..",
        "text:'",
        '"',
        "\x00",
        "\x1b[2J",
        "\udcff",
        "漢字",
        "select 1",
        "select * from frames",
        "vacuum into 'x'",
        "attach 'x' as y",
        "pragma user_version=1",
        "fast",
        "0x",
        "1000000x",
    ]
)
_VALUE = _NUMBERS | _WORDS | _ANY_TEXT
_SAFE_NAME = st.text("abcxyz0129._-# %?", min_size=1, max_size=12).filter(
    lambda s: s not in (".", "..") and not s.startswith("-")
)


def _options_of(command: click.Command) -> list[click.Option]:
    return [p for p in command.params if isinstance(p, click.Option) and "--help" not in p.opts]


# Options whose garbage would reach outside the test: another database (--db is given last,
# pointing at the copy), an agent to spawn (--client), a file to write anywhere (-o: a name
# inside the test's directory instead).
_HELD_BACK = {"db_path", "as_client"}


@st.composite
def command_lines(draw: st.DrawFn, name: str, positional: bool = True) -> list[str]:
    command = cli.commands[name]
    args: list[str] = []
    for option in draw(st.lists(st.sampled_from(_options_of(command)), max_size=4)) if _options_of(command) else []:
        if option.name in _HELD_BACK:
            continue
        flag = draw(st.sampled_from(option.opts))
        if option.is_flag:
            args.append(flag)
        elif option.name == "output":
            args += [flag, draw(_SAFE_NAME)]
        else:
            args += [flag, draw(_VALUE)]
    if positional:
        args += draw(st.lists(_VALUE, max_size=3))
    return args


@contextlib.contextmanager
def alarm(seconds: int) -> Iterator[None]:
    def hang(signum: int, frame: object) -> None:
        raise TimeoutError(f"no answer within {seconds}s: a hang")

    previous = signal.signal(signal.SIGALRM, hang)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def check_result(args: list[str], result: click.testing.Result) -> None:
    assert not isinstance(result.exception, TimeoutError), (args, "hang")
    assert result.exception is None or isinstance(result.exception, SystemExit), (args, repr(result.exception))
    assert result.exit_code in (0, 1, 2), (args, result.exit_code, result.output)
    assert "Traceback" not in result.output, (args, result.output)
    if result.exit_code == 2:
        assert result.stderr.startswith("acp-proxy: ") and result.stderr.count("\n") == 1, (args, result.stderr)


@pytest.fixture(scope="module")
def garbage_db(sdk_recording: tuple[Path, str], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the SDK recording (check --save may write findings into it)."""
    path = tmp_path_factory.mktemp("garbage") / "rec.db"
    shutil.copy(sdk_recording[0], path)
    return path


QUERY_COMMANDS = sorted(name for name in cli.commands if name != "run")


SERVERS = {"ui": "acp_proxy.web.command"}
"""Commands that serve until stopped, and the module whose ``serve`` they end in: in-process,
everything up to serving runs for real (every option's check); serving itself is replaced, since
it is tested on its own as a real process."""


@pytest.mark.parametrize("name", QUERY_COMMANDS)
def test_garbage_at_every_option_of_a_query_command(
    name: str, garbage_db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    suffix = ["--timeout", "0.3", "--interval", "0.05"] if name == "tail" else []
    if name in SERVERS:
        monkeypatch.setattr(f"{SERVERS[name]}.serve", lambda *args, **kwargs: None)

    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
    @given(args=command_lines(name))
    def one(args: list[str]) -> None:
        line = [name, *args, *suffix, "--db", str(garbage_db)]
        with contextlib.chdir(tempfile.mkdtemp(dir=tmp_path)), alarm(HANG_S):  # -o NAME lands here
            result = CliRunner().invoke(cli, line, input=b"")
        check_result(line, result)

    one()


@pytest.mark.spawns
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
# `--` ends run's options: what follows it is the agent, which this test fixes as `true`.
@given(args=command_lines("run", positional=False).filter(lambda args: "--" not in args))
def test_garbage_at_every_option_of_run(args: list[str]) -> None:
    """A real process: garbage options end in one line and exit 2, or a run of `true`."""
    with tempfile.TemporaryDirectory() as where:
        line = ["run", *args, "--db", str(Path(where) / "rec.db"), "--", "true"]
        try:
            done = subprocess.run(
                [*PROXY, *line], capture_output=True, timeout=60, env=proxy_env(), cwd=where, stdin=subprocess.DEVNULL
            )
        except (UnicodeEncodeError, ValueError):
            return  # a lone surrogate or a NUL cannot be put in a real argv at all
        stderr = done.stderr.decode("utf-8", "replace")
        assert "Traceback" not in stderr, (line, stderr)
        assert done.returncode in (0, 2) or done.returncode < 0, (line, done.returncode, stderr)
        if done.returncode == 2:
            assert stderr.startswith("acp-proxy: ") and stderr.count("\n") == 1, (line, stderr)
        assert done.stdout == b""  # `true` says nothing, and nothing else may reach stdout


# -- the parsers -----------------------------------------------------------------------------

_FILTER_TOKENS = st.sampled_from(
    [
        *filters.FIELDS,
        *filters.FLAGS,
        "OR",
        "AND",
        "NOT",
        "or",
        "(",
        ")",
        "-",
        ":",
        "=",
        ">",
        "<=",
        "..",
        "*",
        '"',
        "'",
        "\\",
        "1",
        "-32601",
        "1e9",
        "9" * 25,
        "500ms",
        "1d",
        "99999999999999999999d",
        "2025-13-45",
        "14:99",
        "last",
        "a2c",
        "request",
        "session/*",
        "\x00",
        "\udcff",
        "\u202e",
    ]
)
_FILTERS = st.lists(_FILTER_TOKENS | _ANY_TEXT, max_size=12).flatmap(
    lambda tokens: st.sampled_from(["", " "]).map(lambda glue: glue.join(tokens))
) | st.builds(lambda n, t: "(" * n + t + ")" * n, st.integers(0, 40), _FILTER_TOKENS)


def _frames_table() -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:")
    conn.execute(f"create table frames ({', '.join(store.FRAME_COLUMNS)})")
    conn.execute("create table runs (id)")
    conn.execute("create table findings (run_id, seq, rule, severity)")
    conn.execute("create table marks (run_id, seq, note, marked_ns)")  # `marked`, `comment:`
    conn.execute("insert into frames (run_id, seq, ts_ns, dir, kind, method) values (1, 1, 5, 'c2a', 'request', 'x')")
    return conn


@settings(max_examples=800, deadline=None)
@given(text=_FILTERS)
def test_any_filter_text_parses_or_says_why_and_its_sql_runs(text: str) -> None:
    try:
        expr = filters.parse(text, now_ns=10**18)
    except filters.FilterError as exc:
        assert exc.one_line().startswith("bad filter: ") and "\n" not in exc.one_line()
        return
    sql, params = expr.to_sql()
    _frames_table().execute(f"select count(*) from frames where {sql}", params).fetchone()


_RULE_TOKENS = st.sampled_from(
    [
        *faults.ACTIONS,
        *(f"{a}=" for a in faults.ACTIONS),
        "if",
        "before",
        "after",
        *(f"{o}=" for o in faults.OPTIONS),
        "nth=0",
        "p=nan",
        "p=1e999",
        "times=" + "9" * 30,
        "after=5",
        "after=10 frames",
        "delay=" + "9" * 25 + "d",
        "split=999999999999@1ms",
        "duplicate=999999999999",
        "error=-1:'x",
        "kill=SIGNOPE",
        "kill=99999",
        "close=nowhere",
        "inject='{}'",
        "${sessionId}",
        ";",
        "\n",
        "seed=" + "9" * 30,
        "seed=-1",
    ]
)
_RULES = st.lists(_RULE_TOKENS | _FILTER_TOKENS | _ANY_TEXT, max_size=10).map(" ".join)


@settings(max_examples=800, deadline=None)
@given(text=_RULES)
def test_any_fault_rule_parses_or_says_why(text: str) -> None:
    for parse in (faults.parse_rule, faults.from_env):
        try:
            parse(text)
        except faults.RuleError as exc:
            assert exc.one_line().startswith("bad fault rule: ")
            assert "\n" not in exc.one_line().replace(repr("\n")[1:-1], "")


_TOML = st.lists(
    st.sampled_from(
        [
            "[[fault]]",
            "[fault]",
            "seed = 1",
            "seed = " + "9" * 30,
            "seed = 1.5",
            'rule = "drop"',
            'rule = "dorp"',
            "rule = 1",
            'action = "delay"',
            'arg = "99999999999999999999d"',
            "arg = 1e999",
            'if = "kind:request"',
            'if = "((("',
            "p = 2",
            "nth = 0",
            "times = " + "9" * 30,
            'after = "5s"',
            "after = 5",
            "x = " + "[" * 300,
            "x = " + "[" * 2000 + "]" * 2000,
            "x = " + "{a=" * 2000 + "1" + "}" * 2000,
            '"',
            "=",
            "\x00",
        ]
    )
    | _ANY_TEXT,
    max_size=8,
).map("\n".join)


@settings(max_examples=400, deadline=None)
@given(text=_TOML)
def test_any_rules_file_parses_or_says_why(text: str) -> None:
    try:
        faults.parse_toml(text, "rules.toml")
    except faults.RuleError as exc:
        assert exc.one_line().startswith("bad fault rule: ")


@pytest.mark.spawns
def test_the_run_options_named_in_the_issue_each_give_one_line(tmp_path: Path) -> None:
    """The inputs measured as a traceback or a hang before, through a real process."""
    cases = [
        ["--seed", "99999999999999999999999999"],
        ["--grace", "nan"],
        ["--fault", "split=999999999999@1ms"],
        ["--fault", "delay=99999999999999999999d"],
        ["--fault", "duplicate=999999999999"],
        ["--fault", "delay=1e308s"],
    ]
    for option in cases:
        done = subprocess.run(
            [*PROXY, "run", "--db", str(tmp_path / "rec.db"), *option, "--", "cat"],
            capture_output=True,
            timeout=60,
            env=proxy_env(),
            stdin=subprocess.DEVNULL,
        )
        assert done.returncode == 2, (option, done.stderr)
        assert done.stderr.startswith(b"acp-proxy: ") and done.stderr.count(b"\n") == 1, (option, done.stderr)
