"""Start-up at the floor: without a gate, the agent's first answer reaches the client before trio
(~50 ms to import) is loaded. Held without a clock: an import hook keeps ``import trio`` waiting
until the test has the echo, so the echo can only come through threads that need no trio."""

from __future__ import annotations

import os
import sqlite3
import sys
from pathlib import Path

import pytest

from tests.conftest import proxy_env, wait_for_output, wait_recorded, watchdog

pytestmark = pytest.mark.spawns  # every test here starts processes

# The launcher, behind a finder that holds the first ``import MODULE`` of the modules named
# (trio unless told) until a byte arrives on fd GATE, and that says on stderr when it was asked
# (so the test knows the hold is what it waited behind).
HELD_TRIO = """
import os, sys
gate = int(sys.argv[1])
held = set(os.environ.get("HELD_MODULE", "trio").split(","))
class HoldTrio:
    def find_spec(self, name, path=None, target=None):
        if name in held:
            held.clear()
            os.write(2, name.encode() + b" held\\n")
            os.read(gate, 1)
        return None
sys.meta_path.insert(0, HoldTrio())
sys.argv = ["acp-proxy", *sys.argv[2:]]
from acp_proxy.relay.launch import main
main()
"""

LINE = b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}}\n'


def run_held(
    args: list[str], *, end_before_trio: bool = False, held: str = "trio", no_site: bool = False
) -> tuple[bytes, bytes, int]:
    """Run ``acp-proxy ARGS`` with trio's import held; send a line and wait for its echo (with
    ``end_before_trio``: for the end of the proxy's stdout, the agent having closed its own),
    then let trio load and close stdin. Stdout, stderr, and the exit status. ``no_site``: under
    ``python -S`` (site-packages on PYTHONPATH instead), so that no ``.pth`` file has imported
    anything before the launcher does."""
    import subprocess
    import sysconfig

    env = proxy_env(HELD_MODULE=held)
    flags = []
    if no_site:
        flags = ["-S"]
        paths = [path for path in sys.path if path] + [sysconfig.get_paths()["purelib"]]
        env["PYTHONPATH"] = os.pathsep.join(paths)
    gate_r, gate_w = os.pipe()
    proc = subprocess.Popen(
        [sys.executable, *flags, "-c", HELD_TRIO, str(gate_r), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        pass_fds=(gate_r,),
    )
    os.close(gate_r)
    timer = watchdog(proc, 120)
    try:
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        proc.stdin.write(LINE)
        proc.stdin.flush()
        # trio cannot load before these return
        out = wait_for_output(proc.stdout, b"\n", 60)
        if end_before_trio:
            out += proc.stdout.read()
        os.write(gate_w, b"go")
        proc.stdin.close()
        out += proc.stdout.read()
        err = proc.stderr.read()
        proc.wait(timeout=60)
    finally:
        timer.cancel()
        os.close(gate_w)
    return out, err, proc.returncode


def test_the_first_answer_comes_before_trio_is_imported(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    echo, err, code = run_held(["run", "--db", str(db), "--", "cat"])
    assert echo == LINE, err
    assert b"trio held" in err  # the relay did import trio, after the answer
    assert code == 0, err
    conn = sqlite3.connect(db)
    try:
        recorded = conn.execute("select dir, raw from frames order by seq").fetchall()
    finally:
        conn.close()
    assert recorded == [("c2a", LINE.rstrip(b"\n").decode()), ("a2c", LINE.rstrip(b"\n").decode())]


def test_without_recording_too(tmp_path: Path) -> None:
    echo, err, code = run_held(["run", "--no-record", "--", "cat"])
    assert (echo, code) == (LINE, 0), err
    assert b"trio held" in err


def test_an_agent_that_ends_before_trio_is_loaded_leaves_as_it_did(tmp_path: Path) -> None:
    # It answers, closes its output and exits 3, all while trio is held: what the pumps said
    # before trio ran (finished, EOF) waits for it, and the proxy leaves with the agent's status.
    db = tmp_path / "r.db"
    agent = ["sh", "-c", "head -n 1; exit 3"]
    out, err, code = run_held(["run", "--db", str(db), "--", *agent], end_before_trio=True)
    assert (out, code) == (LINE, 3), err
    assert err == b"trio held\n"  # not "the agent's output pipes stayed open": it was heard
    conn = sqlite3.connect(db)
    try:
        (exit_code,) = conn.execute("select exit_code from runs").fetchone()
    finally:
        conn.close()
    assert exit_code == 3


def test_the_first_answer_comes_before_the_relay_module_is_imported(tmp_path: Path) -> None:
    # The journal, its first record, the pumps and the recorder all start before ``stdio`` (and
    # what it imports) loads: an instant agent is heard, and recorded, while the rest loads.
    db = tmp_path / "r.db"
    echo, err, code = run_held(["run", "--db", str(db), "--", "cat"], held="acp_proxy.relay.stdio")
    assert echo == LINE, err
    assert b"acp_proxy.relay.stdio held" in err
    assert code == 0, err
    conn = sqlite3.connect(db)
    try:
        recorded = conn.execute("select dir, raw from frames order by seq").fetchall()
    finally:
        conn.close()
    assert recorded == [("c2a", LINE.rstrip(b"\n").decode()), ("a2c", LINE.rstrip(b"\n").decode())]


# What the launcher's path to an instant agent's first answer does without, each measured at
# 1-7 ms of a bare interpreter's start-up: the recorder's spawn (subprocess), the ctypes and
# json packages (their C halves do), sqlite3's Python half (datetime), pathlib (re, urllib),
# threading (functools, collections: the pumps' threads are ``_thread``'s), and SQLite itself
# (a database recorded into before is known from its header).
HEAVY_FOR_THE_FIRST_ANSWER = (
    "subprocess,ctypes,json,datetime,pathlib,re,enum,trio,threading,functools,collections,_sqlite3,math"
)


def test_the_first_answer_needs_none_of_the_heavier_modules(tmp_path: Path) -> None:
    # The database is there already (an existing one is examined before the agent starts), its
    # WAL emptied by the first run's writer as it left: it is known from its header.
    db = tmp_path / "r.db"
    first, err, code = run_held(["run", "--db", str(db), "--", "cat"], held="trio", no_site=True)
    assert (first, code) == (LINE, 0), err
    wait_recorded(db)
    wait_known_as_ours(db)
    echo, err, code = run_held(["run", "--db", str(db), "--", "cat"], held=HEAVY_FOR_THE_FIRST_ANSWER, no_site=True)
    assert echo == LINE, err
    assert err.endswith(b" held\n") and err.split()[0].decode() in HEAVY_FOR_THE_FIRST_ANSWER.split(","), err
    assert code == 0, err
    wait_recorded(db)
    conn = sqlite3.connect(db)
    try:
        last = "select dir, raw from frames where run_id = (select max(id) from runs) order by seq"
        recorded = conn.execute(last).fetchall()
    finally:
        conn.close()
    assert recorded == [("c2a", LINE.rstrip(b"\n").decode()), ("a2c", LINE.rstrip(b"\n").decode())]


def wait_known_as_ours(db: Path, timeout: float = 60) -> None:
    """Until the last writer has emptied ``db``'s WAL (it does so after its run is recorded and
    its journal let go, which is all ``wait_recorded`` sees)."""
    import time

    from acp_proxy.store.dbfile import known_as_ours

    deadline = time.monotonic() + timeout
    while not known_as_ours(db):
        assert time.monotonic() < deadline, f"{db}'s WAL was not emptied within {timeout}s"
        time.sleep(0.02)


def test_the_recorder_starts_without_site_but_with_every_path_and_hook(tmp_path: Path) -> None:
    # ``python -S``: no .pth file is read, yet the recorder finds what this interpreter finds
    # (the proxy's sys.path as its PYTHONPATH) and runs an installed sitecustomize.
    import subprocess

    from acp_proxy.relay.recording import RECORDER_MODULE, recorder_command

    argv, env = recorder_command(["--journal", "J"])
    assert argv == [sys.executable, "-S", "-m", RECORDER_MODULE, "--journal", "J"]
    assert env["PYTHONPATH"].split(os.pathsep) == [path for path in sys.path if path]
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text("import os\nos.write(2, b'hook ran\\n')\n")
    env["PYTHONPATH"] = os.pathsep.join([str(hook), env["PYTHONPATH"]])
    probe = (
        "import sys\n"
        "from acp_proxy.record.recorder import _site_hooks\n"
        "_site_hooks()\n"
        "import msgspec, sqlite3\n"
        "print(sys.flags.no_site, 'site' in sys.modules)\n"
    )
    result = subprocess.run([sys.executable, "-S", "-c", probe], env=env, capture_output=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [b"1", b"False"]
    assert result.stderr == b"hook ran\n"


def test_the_installed_command_imports_the_launcher_alone() -> None:
    # ``acp-proxy`` is bin/acp-proxy with this interpreter written into its first line, not the
    # wrapper an installer writes for an entry point (which imports ``re`` before the launcher).
    import ast
    import sysconfig

    source = (Path(__file__).parents[2] / "bin" / "acp-proxy").read_text()
    tree = ast.parse(source)
    imports = [node for node in ast.walk(tree) if isinstance(node, ast.Import | ast.ImportFrom)]
    named = [(getattr(node, "module", None), [alias.name for alias in node.names]) for node in imports]
    assert named == [("acp_proxy.relay.launch", ["main"])]
    installed = Path(sysconfig.get_path("scripts")) / "acp-proxy"
    first, _, body = installed.read_text().partition("\n")
    assert first.startswith("#!") and Path(first[2:].strip()).resolve() == Path(sys.executable).resolve(), first
    assert body == source.partition("\n")[2]
