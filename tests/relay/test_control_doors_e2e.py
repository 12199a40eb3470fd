"""``acp-proxy ctl`` actions at every door, end to end: the official SDK client talks to the SDK
echo agent through ``acp-proxy run --control``; ``tail`` follows the run while a person (this
test) adds a fault whose rule holds a secret and releases a held frame; ``tail`` shows each
action as a control line, and afterwards the MCP ``frames`` tool (the SDK's own MCP client)
lists the same actions among the frames, each once across pages, with the secret masked, as
``frames --redact`` does.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import PROXY
from tests.mcp.test_mcp import SECRET, session
from tests.peers import peer_env
from tests.relay.test_control_e2e import CTL_TIMEOUT_S, client_behind_control, ctl_ok, held_when

pytestmark = pytest.mark.spawns

RULE = f'delay=1ms if text:"{SECRET}"'


def test_tail_and_mcp_show_each_ctl_action_masked(tmp_path: Path) -> None:
    with client_behind_control(tmp_path, "--break", "method:session/new kind:response") as (client, db):
        held = held_when(db, "session/new")
        # Followed from the start: the start-up breakpoint, then each action as it is recorded.
        following = ["--from-start", "--jsonl", "--interval", "0.05", "--count", "5"]
        tail = subprocess.Popen(
            [*PROXY, "tail", "--db", str(db), *following, "--timeout", str(CTL_TIMEOUT_S), "control"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=peer_env(),
        )
        try:
            ctl_ok(db, "fault", "add", RULE)
            ctl_ok(db, "release", str(held["seq"]))
            out, err = tail.communicate(timeout=CTL_TIMEOUT_S + 10)
        finally:
            if tail.poll() is None:
                tail.kill()
                tail.wait(timeout=10)
        returncode, client_err = client.finish()
    assert returncode == 0, client_err
    assert tail.returncode == 0, err
    shown = [json.loads(line) for line in out.splitlines()]
    followed = [c for c in shown if c["kind"] == "control"]
    assert [(c["kind"], c["action"]) for c in followed] == [
        ("control", "break"),
        ("control", "fault-add"),
        ("control", "release"),
    ]
    assert followed[2]["seq"] == held["seq"]
    # The frames it touched, as tail saw them: the held original, then its released copy.
    assert [f["seq"] for f in shown if f["kind"] != "control"] == [held["seq"], held["seq"] + 1]

    _, answers = session(
        db,
        [
            ("frames", {"filter": "control", "limit": 50}),
            *[("frames", {"limit": 3, "offset": at}) for at in range(0, 60, 3)],
            ("frames", {"filter": "control -dir:c2a -dir:a2c", "limit": 50}),
        ],
        errlog=tmp_path / "err.txt",
    )
    selected, *paged, only = (a.json() for a in answers)
    actions = [i for i in selected["items"] if i["kind"] == "control"]
    assert [a["action"] for a in actions] == ["break", "fault-add", "release"]
    assert SECRET not in json.dumps(selected) and "delay=1ms if text:" in actions[1]["argument"]
    assert actions[1]["text"].startswith("acp-proxy ctl fault-add: fault added #1 delay=1ms if text:")
    # The frames the controller touched: the held original (with its fate) and its copy.
    touched = {i["seq"]: i for i in selected["items"] if i["kind"] != "control"}
    assert touched[held["seq"]]["held"].endswith(f"released as #{actions[2]['result_seq']}")
    assert actions[2]["result_seq"] in touched
    assert [a["action"] for a in only["items"]] == ["break", "fault-add", "release"] and only["total"] == 0
    # Paged by frames: each action once, in time order among the frames it came between.
    items: list[dict[str, Any]] = [i for page in paged for i in page["items"]]
    frames = [i for i in items if i["kind"] != "control"]
    assert len(frames) == paged[0]["total"] and len({(f["run_id"], f["seq"]) for f in frames}) == len(frames)
    assert [i["action"] for i in items if i["kind"] == "control"] == ["break", "fault-add", "release"]
    times = [i["ts_ns"] for i in items]
    assert times == sorted(times)

    masked = subprocess.run(
        [*PROXY, "frames", "--db", str(db), "--redact", "--jsonl", "control"],
        capture_output=True,
        text=True,
        timeout=CTL_TIMEOUT_S,
        env=peer_env(),
    )
    assert masked.returncode == 0, masked.stderr
    assert SECRET not in masked.stdout and "fault-add" in masked.stdout
    plain = subprocess.run(
        [*PROXY, "frames", "--db", str(db), "--jsonl", "control"],
        capture_output=True,
        text=True,
        timeout=CTL_TIMEOUT_S,
        env=peer_env(),
    )
    assert SECRET in plain.stdout  # stored as typed; masked when asked


def test_run_redact_masks_an_actions_argument_as_it_is_recorded(tmp_path: Path) -> None:
    with client_behind_control(tmp_path, "--redact", "--break", "method:session/new kind:response") as (client, db):
        held = held_when(db, "session/new")
        ctl_ok(db, "fault", "add", RULE)
        ctl_ok(db, "release", str(held["seq"]))
        returncode, err = client.finish()
    assert returncode == 0, err
    plain = subprocess.run(
        [*PROXY, "frames", "--db", str(db), "--jsonl", "control"],
        capture_output=True,
        text=True,
        timeout=CTL_TIMEOUT_S,
        env=peer_env(),
    )
    assert plain.returncode == 0, plain.stderr
    added = [json.loads(line) for line in plain.stdout.splitlines() if '"fault-add"' in line]
    assert len(added) == 1 and added[0]["argument"].startswith("#1 delay=1ms if text:")
    assert SECRET not in plain.stdout
