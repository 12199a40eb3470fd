"""`acp-proxy setup` and `doctor`: an editor's agent entry through acp-proxy, written into its
settings with the file's comments kept, naming absolute paths that an editor's bare PATH finds."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from acp_proxy.cli import editors
from acp_proxy.cli.commands import cli
from tests.peers import SDK_AGENT, client_argv, expected_echo, transcript

ZED_SETTINGS = """// Zed settings
//
// For information on how to configure Zed, see the Zed
// documentation: https://zed.dev/docs/configuring-zed
{
  "theme": "One Dark", // keep this comment
  /* and this block */
  "agent_servers": {
    "Mine": { "command": "/opt/mine", "args": [] }, // a comment after an entry
  },
  "vim_mode": true,
}
"""


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.delenv("ACP_PROXY_DB", raising=False)
    return tmp_path


def invoke(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_zed_write_adds_the_entry_and_keeps_every_other_byte(home: Path) -> None:
    settings = home / ".config" / "zed" / "settings.json"
    settings.parent.mkdir(parents=True)
    settings.write_text(ZED_SETTINGS)
    result = invoke("setup", "zed", "--write", "--", sys.executable, str(SDK_AGENT), "--permission")
    assert result.exit_code == 0, result.output
    text = settings.read_text()
    entries = editors.read_entries(text)
    added = entries[f"{Path(sys.executable).name} (acp-proxy)"]
    assert added["type"] == "custom" and os.path.isabs(added["command"]) and os.access(added["command"], os.X_OK)
    assert added["args"][-4:] == ["--", sys.executable, str(SDK_AGENT), "--permission"]
    assert entries["Mine"] == {"command": "/opt/mine", "args": []}
    # The added lines are the only difference: comments, order and trailing commas stay.
    original = ZED_SETTINGS.splitlines()
    kept = [line for line in text.splitlines() if line in original]
    assert kept == original


def test_writing_again_replaces_the_entry_of_that_name(home: Path) -> None:
    settings = home / "settings.json"
    settings.write_text(ZED_SETTINGS)
    for agent in ("/bin/cat", "/bin/echo"):
        result = invoke("setup", "zed", "--settings", str(settings), "--name", "X", "--write", "--", agent)
        assert result.exit_code == 0, result.output
    text = settings.read_text()
    assert text.count('"X"') == 1 and editors.read_entries(text)["X"]["args"][-1] == "/bin/echo"


def test_jetbrains_write_creates_a_private_acp_json(home: Path) -> None:
    result = invoke("setup", "jetbrains", "--name", "Cat", "--write", "--", "cat")
    assert result.exit_code == 0, result.output
    path = home / ".jetbrains" / "acp.json"
    entry = json.loads(path.read_text())["agent_servers"]["Cat"]
    assert set(entry) == {"command", "args", "env"} and entry["args"][-1].endswith("/cat")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_without_write_the_entry_is_printed_and_nothing_written(home: Path) -> None:
    result = invoke("setup", "zed", "--name", "Cat", "--", "cat")
    assert result.exit_code == 0
    assert json.loads(result.stdout)["agent_servers"]["Cat"]["type"] == "custom"
    assert "--write" in result.stderr and not (home / ".config").exists()


def test_neovim_prints_lua_and_refuses_write_in_one_line(home: Path) -> None:
    printed = invoke("setup", "neovim", "--name", "Cat", "--", "cat")
    assert printed.exit_code == 0 and 'commands = { default = { "/' in printed.stdout
    assert 'adapter = "Cat"' in printed.stdout
    refused = CliRunner().invoke(cli, ["setup", "neovim", "--write", "--", "cat"])
    assert refused.exit_code == 2 and len(refused.stderr.strip().splitlines()) == 1
    assert "Lua" in refused.stderr and "Traceback" not in refused.output


@pytest.mark.parametrize("content", ['{"agent_servers": [1]}', '{"a": /* open', "[1, 2]", '{"a": 1} {"b": 2}'])
def test_a_settings_file_it_cannot_edit_is_left_alone(home: Path, content: str) -> None:
    settings = home / "settings.json"
    settings.write_text(content)
    result = CliRunner().invoke(cli, ["setup", "zed", "--settings", str(settings), "--write", "--", "cat"])
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1, result.output
    assert "nothing written" in result.stderr and settings.read_text() == content


def test_the_written_entry_starts_with_an_editors_bare_path(home: Path, tmp_path: Path) -> None:
    settings = home / "settings.json"
    db = tmp_path / "rec.db"
    args = ["setup", "zed", "--settings", str(settings), "--name", "A", "--db", str(db), "--write"]
    assert invoke(*args, "--", sys.executable, str(SDK_AGENT)).exit_code == 0
    entry = editors.read_entries(settings.read_text())["A"]
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    done = subprocess.run(
        client_argv([entry["command"], *entry["args"]]), capture_output=True, text=True, timeout=90, env=env
    )
    assert transcript(done)[:-1] == expected_echo()
    assert db.exists()  # recorded through the proxy the entry starts


def test_doctor_reports_a_healthy_database_and_exits_0(home: Path, sdk_recording: tuple[Path, str]) -> None:
    db, _ = sdk_recording
    result = invoke("doctor", "--db", str(db))
    assert result.exit_code == 0, result.output
    assert f"recordings go to {db} (--db)" in result.stdout
    assert "database intact (schema" in result.stdout and "2 run(s), 0 running" in result.stdout
    assert "extra [ui]" in result.stdout
    assert all(len(line) <= 100 for line in result.stdout.splitlines())


def test_doctor_names_what_needs_fixing_and_exits_1(home: Path) -> None:
    bad = home / "bad.db"
    bad.write_bytes(b"not a database at all" * 100)
    settings = home / ".config" / "zed" / "settings.json"
    settings.parent.mkdir(parents=True)
    settings.write_text('{"agent_servers": {"Old": {"command": "acp-proxy", "args": ["run", "--", "x"]}}}')
    result = invoke("doctor", "--db", str(bad))
    assert result.exit_code == 1
    fixes = [line for line in result.stdout.splitlines() if line.startswith("FIX")]
    assert any("cannot be read" in line for line in fixes)
    assert any("'Old' starts acp-proxy" in line and "setup" in line for line in fixes)
