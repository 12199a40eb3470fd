"""``drop=after`` on a stdio run, end to end: the one action of the remote vocabulary that means
the same on stdio (the request is delivered, its response is lost). The official SDK client and
agent, through ``acp-proxy run``; what the client saw and what the database holds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.faults.test_faults_e2e import assert_ended_cleanly, faults, query, sdk_run
from tests.peers import AGENT_INIT_LINE

pytestmark = pytest.mark.spawns


def test_drop_after_delivers_the_prompt_and_loses_its_response(tmp_path: Path) -> None:
    db = tmp_path / "rec.db"
    result = sdk_run(db, ["drop=after if method:session/prompt kind:request"], "--timeout", "5")
    assert result.returncode == 1
    assert result.stderr == "sdk_client: timed out after 5 s waiting for session/prompt\n"
    # The agent got the prompt and did the work: its updates came, its answer never did.
    assert result.stdout.splitlines() == [
        AGENT_INIT_LINE,
        "prompt: hello world",
        "agent: Client sent:",
        "agent: hello world",
    ]
    assert_ended_cleanly(db)
    (prompt,) = query(db, "select * from frames where method = 'session/prompt' and kind = 'request'")
    (answer,) = query(db, "select * from frames where method = 'session/prompt' and kind = 'response'")
    assert (prompt["forwarded"], prompt["fault"], prompt["note"]) == (1, "drop", "delivered; its answer lost")
    assert answer["forwarded"] == 0 and answer["note"].startswith("its answer lost: drop=after")
    assert json.loads(answer["raw"])["result"] == {"stopReason": "end_turn"}
    assert [(f["action"], f["seq"], f["detail"]) for f in faults(db)] == [
        ("drop", prompt["seq"], "after: delivered, its answer lost")
    ]
