"""The newcomer demo: a real ACP client and agent talking through `acp-proxy run`, then the recording.

    pip install '.[demo]' && python examples/demo.py [--db PATH]

Both peers are built on the official Python SDK (``agent-client-protocol``): ``sdk_client.py``
launches ``acp-proxy run --db DB -- sdk_agent.py --permission`` exactly as an editor would launch
its agent, creates a session, sends two prompts and allows the tool call the agent asks
permission for. A second run loads that session, so the agent replays its history. Then the
demo shows what the proxy recorded (``acp-proxy runs`` and ``acp-proxy show last``, or the raw
``frames`` table when this version has no ``show``). The database is kept — in a new temporary
directory unless ``--db`` says where — and its path is printed so you can explore it further.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent
REPO = EXAMPLES.parent
CLIENT = EXAMPLES / "sdk_client.py"
AGENT = EXAMPLES / "sdk_agent.py"
PROXY = [sys.executable, "-m", "acp_proxy"]
TIMEOUT_S = 60.0


def heading(text: str) -> None:
    print(f"\n== {text}", flush=True)


def environment() -> dict[str, str]:
    env = dict(os.environ)
    if importlib.util.find_spec("acp_proxy") is None:  # running from a checkout that is not installed
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


def run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S, env=env)


def converse(db: Path, state: Path, env: dict[str, str], *client_args: str) -> list[str]:
    """One client run through the proxy; returns the transcript lines, or exits on failure."""
    agent = [sys.executable, str(AGENT), "--permission", "--state-dir", str(state)]
    proxied = [*PROXY, "run", "--db", str(db), "--", *agent]
    result = run([sys.executable, str(CLIENT), "--timeout", "30", *client_args, "--", *proxied], env)
    sys.stdout.write(result.stdout)
    if result.returncode != 0:
        sys.stderr.write(result.stderr)
        sys.exit(f"demo: the client failed (exit status {result.returncode})")
    return result.stdout.splitlines()


def proxy_command(args: list[str], env: dict[str, str]) -> bool:
    """Run an `acp-proxy` query command and print its output; False when it is missing or fails."""
    try:
        result = run([*PROXY, *args], env)
    except subprocess.TimeoutExpired:
        return False
    if result.returncode != 0:
        return False
    sys.stdout.write(result.stdout)
    return True


def print_frames(db: Path, runs: int) -> None:
    """Fallback: the frames table itself, one row per frame of the last ``runs`` runs."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = conn.execute(
            "select run_id, seq, dir, kind, method, update_kind, rpc_id, raw from frames"
            " where run_id >= (select max(run_id) from frames) - ? order by run_id, seq",
            (runs - 1,),
        ).fetchall()
    finally:
        conn.close()
    print(f"{'run':>3} {'seq':>4} {'dir':<6} {'kind':<12} {'method / update':<36} {'id':<4} raw")
    for run_id, seq, direction, kind, method, update, rpc_id, raw in rows:
        what = " ".join(filter(None, [method, update]))
        text = (raw or "<not UTF-8>")[:80]
        print(f"{run_id:>3} {seq:>4} {direction:<6} {kind or '':<12} {what:<36} {rpc_id or '':<4} {text}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Record an SDK client and agent through acp-proxy.")
    parser.add_argument("--db", type=Path, help="record here (default: in a new temporary directory)")
    options = parser.parse_args(argv)
    if importlib.util.find_spec("acp") is None:
        sys.exit("demo: the official ACP SDK is missing; install it with: pip install '.[demo]'")

    workdir = Path(tempfile.mkdtemp(prefix="acp-proxy-demo-"))
    db = options.db.resolve() if options.db else workdir / "demo.db"
    state = workdir / "agent-state"
    env = environment()

    heading("1. sdk_client.py -> acp-proxy run -> sdk_agent.py: a new session, two prompts")
    lines = converse(db, state, env)
    session = lines[-1].removeprefix("session: ")

    heading("2. a second run loads that session: the agent replays its history first")
    converse(db, state, env, "--load", session, "--prompt", "and one more")

    heading("3. what the proxy recorded: acp-proxy runs")
    if not proxy_command(["runs", "--db", str(db)], env):
        print("(not available in this version)")
    heading("4. the last run: acp-proxy show last")
    if not proxy_command(["show", "last", "--db", str(db)], env):
        print("(not available in this version: the frames table of both runs instead)")
        print_frames(db, runs=2)

    heading("the recording is kept")
    print(f"database: {db}")
    print(f"explore it: {' '.join(['acp-proxy', 'frames', '--db', str(db)])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
