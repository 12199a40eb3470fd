"""Every ``acp-proxy ctl`` action recorded and shown, end to end: the official SDK client talks
to the SDK echo agent through ``acp-proxy run --control``; a person (this test) sets and removes
breakpoints and faults, releases one held frame, drops another and sends a frame; afterwards
the database holds one ``controls`` row per action, linked to the frames it held and wrote,
and ``frames`` and ``show`` list them among the frames, each held frame with its fate.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import PROXY
from tests.peers import AGENT_INIT_LINE, peer_env
from tests.relay.test_control_e2e import CTL_TIMEOUT_S, client_behind_control, ctl_ok, frames, held_when

pytestmark = pytest.mark.spawns


def proxy(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*PROXY, *args, "--db", str(db)],
        capture_output=True,
        text=True,
        timeout=CTL_TIMEOUT_S,
        env=peer_env(COLUMNS="100"),
    )


def controls(db: Path) -> list[dict[str, Any]]:
    with sqlite3.connect(db) as conn:
        conn.row_factory = sqlite3.Row
        return [dict(r) for r in conn.execute("select * from controls order by number")]


def test_each_ctl_action_is_a_row_that_frames_and_show_display(tmp_path: Path) -> None:
    with client_behind_control(tmp_path, "--break", "method:session/new kind:response") as (client, db):
        new = held_when(db, "session/new")
        ctl_ok(db, "break", 'dir:a2c text:"second prompt"')
        ctl_ok(db, "unbreak", "1")  # the start-up breakpoint
        ctl_ok(db, "fault", "add", "delay=1ms if method:session/prompt")
        ctl_ok(db, "fault", "remove", "1")
        ctl_ok(db, "release", str(new["seq"]))
        session_id = json.loads(new["frame"])["result"]["sessionId"]
        assert client.until("prompt: hello world")
        chunk = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "from ctl"}}
        note = {"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": session_id, "update": chunk}}
        ctl_ok(db, "send", "--to", "client", json.dumps(note))
        echo = held_when(db, "session/update")  # the agent's echo of the second prompt
        ctl_ok(db, "clear")  # releases nothing held
        ctl_ok(db, "drop", str(echo["seq"]))
        returncode, err = client.finish()
    assert returncode == 0, err
    assert client.seen[0] == AGENT_INIT_LINE and "agent: from ctl" in client.seen
    assert "agent: second prompt" not in client.seen and client.seen.count("stop: end_turn") == 2

    rows = controls(db)
    assert [r["action"] for r in rows] == [
        "break",  # --break, on the command line
        "break",
        "unbreak",
        "fault-add",
        "fault-remove",
        "release",
        "send",
        "clear",
        "drop",
    ]
    assert [r["ts_ns"] for r in rows] == sorted(r["ts_ns"] for r in rows)
    by_seq = {f["seq"]: f for f in frames(db)}
    assert [r["number"] for r in rows] == list(range(1, 10))
    assert rows[0]["argument"] == rows[2]["argument"] == "#1 method:session/new kind:response"
    release, send, drop = rows[5], rows[6], rows[8]
    copy = by_seq[release["result_seq"]]
    assert release["seq"] == new["seq"] and by_seq[new["seq"]]["forwarded"] == 0
    assert copy["method"] == "session/new" and copy["forwarded"] == 1 and copy["seq"] > new["seq"]
    assert release["held_ns"] > 0 and drop["held_ns"] > 0
    assert "from ctl" in by_seq[send["result_seq"]]["raw"] and by_seq[send["result_seq"]]["origin"] == "proxy"
    assert drop["seq"] == echo["seq"] and drop["result_seq"] is None
    assert "second prompt" in by_seq[echo["seq"]]["raw"] and by_seq[echo["seq"]]["forwarded"] == 0

    listed = proxy(db, "frames", "--no-pager")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert all(len(line) <= 100 for line in lines)
    ctl_lines = [line for line in lines if " * ctl " in line]
    assert [line.split()[0] for line in ctl_lines] == [f"1:c{r['number']}" for r in rows]
    assert "release: released hold 1" in ctl_lines[5] and f"-> #{copy['seq']}" in ctl_lines[5]
    assert "drop: dropped" in ctl_lines[8]
    # In time order among the frames: the release between the held response and its copy.
    at = {line.split()[0]: i for i, line in enumerate(lines)}
    release_at = at[f"1:c{release['number']}"]
    assert at[f"1:{new['seq']}"] < release_at < at[f"1:{copy['seq']}"]
    held_line = lines[at[f"1:{new['seq']}"]]
    assert "held" in held_line and f"released as #{copy['seq']}" in held_line
    assert "dropped" in lines[at[f"1:{echo['seq']}"]]

    only = proxy(db, "frames", "--jsonl", "control")
    objects = [json.loads(line) for line in only.stdout.splitlines()]
    assert [o["action"] for o in objects if o["kind"] == "control"] == [r["action"] for r in rows]
    touched = {o["seq"] for o in objects if o["kind"] != "control"}
    assert {new["seq"], copy["seq"], echo["seq"], send["result_seq"]} <= touched
    assert all("acp-proxy ctl" in (o.get("note") or o.get("text") or "") for o in objects)

    shown = proxy(db, "show", "--no-pager")
    assert shown.returncode == 0, shown.stderr
    assert "Controls (acp-proxy ctl)" in shown.stdout
    assert shown.stdout.count("  1:c") == len(rows)
    assert "second prompt" not in [line.split("agent", 1)[-1].strip() for line in shown.stdout.splitlines()]

    # export keeps them, import brings them back linked to the same frames of the new run.
    exported = tmp_path / "run.jsonl"
    assert proxy(db, "export", "last", "-o", str(exported)).returncode == 0
    again = tmp_path / "again.db"
    imported = proxy(again, "import", str(exported))
    assert imported.returncode == 0, imported.stderr
    kept = ("number", "ts_ns", "action", "argument", "hold", "seq", "result_seq", "held_ns")
    assert [{k: r[k] for k in kept} for r in controls(again)] == [{k: r[k] for k in kept} for r in rows]
    relisted = proxy(again, "frames", "--no-pager", "control")
    assert relisted.stdout.count(" * ctl ") == len(rows) and f"released as #{copy['seq']}" in relisted.stdout
