"""The README and the `--help` texts tell the truth: their generated parts are current, every
example command they show runs, and every editor snippet's agent answers through the proxy.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from acp_proxy.cli.commands import cli
from acp_proxy.cli.views import session_label
from acp_proxy.faults.plan import FaultPlan
from tests.conftest import PROXY, proxy_env
from tests.record.test_import import jetbrains_log

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"


@pytest.mark.spawns
def test_the_generated_parts_of_the_readme_are_current() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "cogapp", "--check", str(README)], capture_output=True, text=True, timeout=120, cwd=REPO
    )
    assert done.returncode == 0, f"README.md is stale; run: cog -r README.md\n{done.stdout}{done.stderr}"


# -- every example runs ----------------------------------------------------------------------

_PLACEHOLDER = re.compile(r"\b(?:[A-Z]{2,}|PREFIX|N)\b|\.\.\.")


def readme_examples() -> list[str]:
    text = README.read_text()
    found: list[str] = []
    for block in re.findall(r"```[a-z]*\n(.*?)```", text, re.DOTALL):
        for line in block.splitlines():
            line = line.strip().removeprefix("$ ")
            if line.startswith("acp-proxy ") and "[OPTIONS]" not in line:  # not a usage line
                found.append(line)
    for span in re.findall(r"`(acp-proxy [^`]+)`", text):
        # A span with arguments is an example; `acp-proxy diff` alone only names the command.
        if len(span.split()) > 2 and not _PLACEHOLDER.search(span.removeprefix("acp-proxy ")):
            found.append(span)
    return found


def help_examples() -> list[str]:
    found = []
    for command in cli.commands.values():
        for line in (command.help or "").splitlines():
            line = line.strip()
            if line.startswith("acp-proxy "):
                found.append(line)
    return found


EXAMPLES = sorted(set(readme_examples()) | set(help_examples()))


def test_the_examples_were_found() -> None:
    assert len(readme_examples()) > 15 and len(help_examples()) > 25
    assert "acp-proxy frames -update:agent_message_chunk" in EXAMPLES  # once failed as "No such option"
    assert "acp-proxy tail dir:a2c -update:agent_message_chunk" in EXAMPLES
    assert any(e.startswith("acp-proxy frames '-(") for e in EXAMPLES)


def as_argv(example: str, session: str) -> list[str]:
    """The example's arguments, without the shell's pipe and comment; the placeholder session
    prefixes of the docs (3f2a, 9c1b) stand for the recording's session."""
    line = re.split(r"\s+#\s", example, maxsplit=1)[0]
    words = shlex.split(line)
    if "|" in words:
        words = words[: words.index("|")]
    return [session_label(session, 6) if word in ("3f2a", "9c1b") else word for word in words[1:]]


@pytest.fixture
def docs_db(sdk_recording: tuple[Path, str], tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    # A fresh copy per example: one that imports a run adds a session under the same id, and
    # `show 3f2a --turn 2` would then name that one-turn session instead.
    path = tmp_path_factory.mktemp("docs") / "rec.db"
    shutil.copy(sdk_recording[0], path)
    return path, sdk_recording[1]


SERVERS = {"ui", "serve"}
"""Commands that serve until they are stopped."""


@pytest.mark.parametrize("example", EXAMPLES)
def test_every_example_command_runs(example: str, docs_db: tuple[Path, str], tmp_path: Path) -> None:
    db, session = docs_db
    # `A && B`: both run, in order, in one directory (B may read what A wrote).
    for part in example.split(" && "):
        run_example(part if part.startswith("acp-proxy ") else f"acp-proxy {part}", db, session, tmp_path)


def run_example(example: str, db: Path, session: str, where: Path) -> None:
    argv = as_argv(example, session)
    name, args = argv[0], argv[1:]
    command = cli.commands[name]
    if name in SERVERS or name in ("run", "ctl") or (name == "replay" and "--client" in args):
        # These start an agent the docs only name, serve until stopped, or talk to a live run
        # (ctl): they have tests of their own as real processes; check that the line parses.
        ctx = command.make_context(name, list(args), parent=click.Context(cli, info_name="acp-proxy"))
        if name == "run":
            FaultPlan.build(ctx.params["fault_rules"], None, None, (ctx.params["seeds"] or (None,))[-1])
        elif name == "serve":
            FaultPlan.build(ctx.params["fault_rules"], None, None, ctx.params["seed"], remote=True)
        return
    if name == "tail":
        args += ["--timeout", "1", "--interval", "0.05"]
    if name == "import":
        # The shell would expand ~; the log the example names is made from the recording.
        args = [str(where / "home" / a[2:]) if a.startswith("~/") else a for a in args]
        positional = [
            a for i, a in enumerate(args) if not a.startswith("-") and (i == 0 or not args[i - 1].startswith("--"))
        ]
        log = where / positional[0]
        if not log.exists():
            write_log_to_import(log, db)
    if any(p.name == "db_path" for p in command.params) and "--db" not in args:
        args += ["--db", str(db)]
    with contextlib.chdir(where):
        result = CliRunner().invoke(cli, [name, *args], input=b"")
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    # 1 is an answer (findings, a difference, a deviation, a count not reached); 2 is a bad input.
    assert result.exit_code in (0, 1), f"{example}\n{result.output}"


def write_log_to_import(log: Path, db: Path) -> None:
    """The log an ``import`` example names, in the format its name says, made from ``db``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    if log.name.endswith(".log"):
        frames = [json.loads(line) for line in invoke_ok("frames", "--jsonl", "--db", str(db)).splitlines()]
        log.write_text(jetbrains_log([f for f in frames if f["run_id"] == 1]))
        return
    fmt = "jsons" if log.suffix == ".jsons" else "jsonl"
    invoke_ok("export", "1", "--format", fmt, "-o", str(log), "--db", str(db))


def invoke_ok(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == 0, (args, result.output)
    return result.stdout


# -- the editor snippets' agents, for real -----------------------------------------------------

AGENT_PACKAGES = {
    "claude-agent-acp": "@zed-industries/claude-agent-acp@0.23.1",
    "gemini": "@google/gemini-cli@0.61.0",
    "codex-acp": "@zed-industries/codex-acp@0.16.0",
}
"""The npm package each snippet's agent command comes from, at a version seen working."""


def snippet_agents() -> list[list[str]]:
    """The agent command line (what follows `--`) of every editor snippet in the README."""
    text = README.read_text()
    agents = []
    for block in re.findall(r"```json\n(.*?)```", text, re.DOTALL):
        # Editor settings for agents; other JSON blocks (an MCP server's config) are not snippets of this kind.
        for server in json.loads(block).get("agent_servers", {}).values():
            assert server["command"] == "acp-proxy" and server["args"][:2] == ["run", "--"]
            agents.append(server["args"][2:])
    for block in re.findall(r"```lua\n(.*?)```", text, re.DOTALL):
        for words in re.findall(r"\{\s*(\"acp-proxy\".*?)\}", block):
            argv = json.loads(f"[{words}]")
            assert argv[:3] == ["acp-proxy", "run", "--"]
            agents.append(argv[3:])
    return agents


def test_every_snippet_names_a_known_package() -> None:
    agents = snippet_agents()
    assert [a[0] for a in agents] == ["claude-agent-acp", "gemini", "codex-acp"]
    assert ["gemini", "--acp"] in agents
    assert all(a[0] in AGENT_PACKAGES for a in agents)


def npm_cache() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "acp-proxy-tests" / "npm-agents"


def installed(command: str) -> Path:
    """The command's executable, installed once into this test's own npm cache directory."""
    if shutil.which("npm") is None:
        pytest.skip("npm is not installed: the editor snippets' agents cannot be tried")
    package = AGENT_PACKAGES[command]
    prefix = npm_cache() / package.replace("/", "+")
    binary = prefix / "node_modules" / ".bin" / command
    if not binary.exists():
        prefix.mkdir(parents=True, exist_ok=True)
        try:
            done = subprocess.run(
                ["npm", "install", "--prefix", str(prefix), "--no-audit", "--no-fund", "--loglevel=error", package],
                capture_output=True,
                text=True,
                timeout=600,
                env={**os.environ, "HOME": str(prefix / "home")},
            )
        except subprocess.TimeoutExpired:
            pytest.skip(f"npm install {package} took more than 600 s (is the registry reachable?)")
        if done.returncode != 0 or not binary.exists():
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            pytest.skip(f"cannot install {package} from the npm registry: {last}")
    return binary


INITIALIZE = b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{}}}\n'


def answer_through_the_proxy(argv: list[str], env: dict[str, str], db: Path, timeout: float = 120) -> dict:
    """Start ``acp-proxy run -- ARGV`` as an editor would, send initialize, read the answer."""
    proc = subprocess.Popen(
        [*PROXY, "run", "--db", str(db), "--grace", "2", "--", *argv],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(INITIALIZE)
        proc.stdin.flush()
        line = b""
        deadline = time.monotonic() + timeout
        while not line.endswith(b"\n") and time.monotonic() < deadline:
            ready, _, _ = select.select([proc.stdout], [], [], 0.5)
            if ready:
                chunk = os.read(proc.stdout.fileno(), 1 << 20)
                if not chunk:
                    break
                line += chunk
        proc.stdin.close()
        proc.wait(timeout=30)  # the proxy's grace ends an agent that ignores EOF
    finally:
        proc.kill()
        proc.wait(timeout=10)
    assert line, f"{argv[0]} never answered initialize; stderr: {proc.stderr.read() if proc.stderr else b''!r}"
    return json.loads(line.split(b"\n", 1)[0])


@pytest.mark.spawns
@pytest.mark.parametrize("agent", snippet_agents(), ids=lambda a: a[0])
def test_each_snippets_agent_answers_through_the_proxy(agent: list[str], tmp_path: Path) -> None:
    binary = installed(agent[0])
    home = tmp_path / "home"  # an empty HOME: nothing of this machine's is read
    home.mkdir()
    env = proxy_env(HOME=str(home), IS_SANDBOX="1", PATH=f"{binary.parent}{os.pathsep}{os.environ['PATH']}")
    if agent[0] != "claude-agent-acp":  # it has no --help: it speaks ACP whatever its arguments
        helped = subprocess.run([agent[0], "--help"], capture_output=True, text=True, timeout=120, env=env)
        assert helped.returncode == 0, helped.stderr
        for flag in agent[1:]:
            assert flag in helped.stdout, f"{agent[0]} --help does not list {flag}"
    answer = answer_through_the_proxy(agent, env, tmp_path / "rec.db")
    assert answer["id"] == 0 and answer["result"]["protocolVersion"] == 1, answer
    runs = CliRunner().invoke(cli, ["runs", "--json", "--db", str(tmp_path / "rec.db")])
    assert json.loads(runs.stdout)[0]["protocol_version"] == 1
