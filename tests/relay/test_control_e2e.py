"""``run --control`` and ``acp-proxy ctl`` end to end: the official SDK client talking to the SDK
echo agent through ``acp-proxy run``, a person (this test) at the wheel through ``ctl``.

What the client saw is read from its transcript as it prints it (a reader thread), what the
proxy recorded from the database afterwards. Waiting for the run to reach a state polls
``ctl held`` under a deadline: there is no other way for a person to know a frame is held.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import socket as socketlib
import sqlite3
import stat
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import PROXY
from tests.peers import AGENT_INIT_LINE, agent_argv, client_argv, peer_env, proxied

pytestmark = pytest.mark.spawns

DEADLINE_S = 30.0
CTL_TIMEOUT_S = 20.0


def ctl(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*PROXY, "ctl", "--db", str(db), "last", *args],
        capture_output=True,
        text=True,
        timeout=CTL_TIMEOUT_S,
        env=peer_env(),
    )


def ctl_ok(db: Path, *args: str) -> Any:
    result = ctl(db, *args, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def held_when(db: Path, method: str) -> dict[str, Any]:
    """The first held frame of ``method``, once the proxy holds one (polled, bounded)."""
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        result = ctl(db, "held", "--json")
        if result.returncode == 0:
            for frame in json.loads(result.stdout):
                if frame["method"] == method:
                    return dict(frame)
        time.sleep(0.1)  # polling a live run, under a deadline: what a person at ctl does
    raise AssertionError(f"no {method} frame was held within {DEADLINE_S:g}s: {result.stderr}")


class Client:
    """The SDK client running behind the proxy; its transcript lines arrive on ``lines``."""

    def __init__(self, argv: list[str], cwd: Path) -> None:
        self.proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=peer_env(), cwd=cwd
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def until(self, wanted: str) -> list[str]:
        """Transcript lines up to and including ``wanted`` (fails after the deadline or at EOF)."""
        deadline = time.monotonic() + DEADLINE_S
        while True:
            line = self.lines.get(timeout=max(0.01, deadline - time.monotonic()))
            if line is None:
                raise AssertionError(f"the client ended before {wanted!r}: {self.seen}")
            self.seen.append(line)
            if line == wanted:
                return list(self.seen)

    def seen_now(self) -> list[str]:
        while True:
            try:
                line = self.lines.get_nowait()
            except queue.Empty:
                return list(self.seen)
            if line is not None:
                self.seen.append(line)

    def finish(self) -> tuple[int, str]:
        _, err = self.proc.communicate(timeout=DEADLINE_S + 15)
        self.seen_now()
        return self.proc.returncode, err


@contextmanager
def client_behind_control(tmp_path: Path, *proxy_args: str) -> Iterator[tuple[Client, Path]]:
    db = tmp_path / "ctl.db"
    argv = client_argv(proxied(agent_argv(), db, "--control", *proxy_args), timeout=DEADLINE_S)
    client = Client(argv, tmp_path)
    try:
        yield client, db
    finally:
        if client.proc.poll() is None:
            client.proc.kill()
            client.proc.wait(timeout=10)


def run_options(db: Path) -> str:
    with sqlite3.connect(db) as conn:
        return str(conn.execute("select options from runs").fetchone()[0])


def frames(db: Path) -> list[dict[str, Any]]:
    with sqlite3.connect(db) as conn:
        conn.row_factory = sqlite3.Row
        return [dict(r) for r in conn.execute("select * from frames where dir != 'stderr' order by seq")]


def test_hold_edit_release_and_a_fault_added_at_run_time(tmp_path: Path) -> None:
    with client_behind_control(tmp_path, "--break", "method:session/new kind:response") as (client, db):
        held = held_when(db, "session/new")  # the client waits for its session
        socket = Path(json.loads(run_options(db))["control"])
        assert stat.S_IMODE(os.stat(socket).st_mode) == 0o600 and stat.S_ISSOCK(os.stat(socket).st_mode)
        assert ctl_ok(db, "clear") == {"removed": [1], "still_held": [held["seq"]]}
        assert ctl_ok(db, "break", "method:session/update") == {"id": 2, "filter": "method:session/update"}
        assert ctl_ok(db, "release", str(held["seq"]))["released"] == held["seq"]

        chunk = held_when(db, "session/update")  # "Client sent:", the first chunk of prompt 1
        assert client.until("prompt: hello world")[-1] == "prompt: hello world"
        still = ctl_ok(db, "clear")["still_held"]  # the next chunk too, when it came in the same read
        assert still[0] == chunk["seq"] and still == sorted(still)
        rule = ctl_ok(db, "fault", "add", "error if method:session/prompt kind:request")
        assert rule == {"id": 1, "rule": "error if method:session/prompt kind:request"}
        assert not any(line.startswith("agent:") for line in client.seen_now())  # still held
        edited = json.loads(chunk["frame"])
        edited["params"]["update"]["content"]["text"] = "EDITED by ctl"
        ctl_ok(db, "release", str(chunk["seq"]), "--with", json.dumps(edited))
        for seq in still[1:]:
            ctl_ok(db, "release", str(seq))

        returncode, err = client.finish()
    assert not socket.exists()  # removed when the run ended
    assert client.seen[:4] == [AGENT_INIT_LINE, "prompt: hello world", "agent: EDITED by ctl", "agent: hello world"]
    assert "stop: end_turn" in client.seen and "prompt: second prompt" in client.seen
    assert returncode == 1 and "sdk_client:" in err  # the second prompt was answered with an error
    assert "acp-proxy: holding a2c notification session/update (hold " in err  # the proxy says so
    assert "acp-proxy: released edited a2c notification session/update" in err  # and for how long

    rows = frames(db)
    by_seq = {r["seq"]: r for r in rows}
    original = by_seq[chunk["seq"]]  # ctl named the held frame by the seq frames shows
    assert original["method"] == "session/update" and original["forwarded"] == 0
    assert original["note"].startswith("held by breakpoint 2 (acp-proxy ctl)")
    (after,) = [r for r in rows if "EDITED by ctl" in r["raw"]]
    assert after["origin"] == "proxy" and after["forwarded"] == 1 and after["seq"] > original["seq"]
    assert "edited by acp-proxy ctl in place of a frame held" in after["note"]
    news = [r for r in rows if r["method"] == "session/new" and r["kind"] == "response"]
    assert [(r["seq"] == held["seq"], r["forwarded"]) for r in news] == [(True, 0), (False, 1)]
    assert news[1]["note"].startswith("released by acp-proxy ctl after it was held")
    assert not any("id reused" in (r["note"] or "") for r in rows)  # pairing follows what was forwarded
    assert not any(r["unanswered"] for r in rows if r["kind"] == "request" and r["method"] == "session/new")
    prompts = [r for r in rows if r["method"] == "session/prompt" and r["kind"] == "request"]
    assert [p["fault"] for p in prompts] == [None, "error"]
    with sqlite3.connect(db) as conn:
        (spec,) = conn.execute("select fault_spec from runs").fetchone()
    runtime = json.loads(spec)["runtime"]
    assert [(r["id"], r["rule"]) for r in runtime] == [(1, "error if method:session/prompt kind:request")]
    assert runtime[0]["added_ns"] > 0


def test_ctl_mistakes_are_one_line_and_exit_2(tmp_path: Path) -> None:
    held_filter = "method:session/new kind:response"
    with client_behind_control(tmp_path, "--break", held_filter) as (client, db):
        held = held_when(db, "session/new")
        for args, says in [
            (("fault", "add", "explode if dir:c2a"), "explode"),
            (("break", "method:("), "acp-proxy:"),
            (("release", "999"), "frame 999 is not held"),
            (("drop", "1"), "frame 1 is not held"),
            (("send", "--to", "agent", "[1]"), "must be a JSON object"),
            (("send", "--to", "agent", "{nope"), "the frame is not JSON"),
            (("resend", str(held["seq"])), "a response, not a request"),
            (("resend", "99999"), "has no frame 99999"),
            (("release", str(held["seq"]), "--with", "{not json"), "--with is not JSON"),
        ]:
            result = ctl(db, *args)
            assert result.returncode == 2, (args, result.stderr)
            assert result.stderr.startswith("acp-proxy:") and result.stderr.count("\n") == 1, result.stderr
            assert says in result.stderr
        with socketlib.socket(socketlib.AF_UNIX, socketlib.SOCK_STREAM) as other:
            other.settimeout(CTL_TIMEOUT_S)
            other.connect(json.loads(run_options(db))["control"])
            other.sendall(b'{"op": ')  # another controller, mid-request
            deadline = time.monotonic() + DEADLINE_S
            busy = ctl(db, "breaks")
            while busy.returncode == 0 and time.monotonic() < deadline:  # until the proxy took `other`
                busy = ctl(db, "breaks")
            assert busy.stderr == "acp-proxy: another acp-proxy ctl is talking to this run; try again\n"
            other.sendall(b'"breaks"}\n')
            assert json.loads(other.makefile().readline()) == {"ok": [{"id": 1, "filter": held_filter}]}
        assert ctl_ok(db, "breaks") == [{"id": 1, "filter": held_filter}]  # the relay is not stuck
        assert ctl_ok(db, "release", str(held["seq"]))["released"] == held["seq"]
        returncode, err = client.finish()
    assert returncode == 0, err
    ended = ctl(db, "held")
    assert ended.returncode == 2 and "has ended" in ended.stderr and ended.stderr.count("\n") == 1


def test_a_run_without_control_has_no_socket_and_ctl_says_so(tmp_path: Path) -> None:
    db = tmp_path / "plain.db"
    result = subprocess.run(
        client_argv(proxied(agent_argv(), db), timeout=DEADLINE_S),
        capture_output=True,
        text=True,
        timeout=DEADLINE_S + 15,
        env=peer_env(),
    )
    assert result.returncode == 0, result.stderr
    answer = ctl(db, "held")
    assert answer.returncode == 2 and "was not started with --control" in answer.stderr
    assert "control" not in json.loads(run_options(db))


def sent_answered(db: Path, count: int) -> list[dict[str, Any]]:
    """``ctl sent`` once ``count`` requests the proxy sent are answered (polled, bounded)."""
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        sent = ctl_ok(db, "sent")
        if sum(1 for s in sent if s["answered"]) >= count:
            return list(sent)
        time.sleep(0.1)  # polling a live run, under a deadline
    raise AssertionError(f"{count} sent requests were not answered within {DEADLINE_S:g}s: {sent}")


def test_send_and_resend_a_prompt_whose_answers_the_proxy_keeps(tmp_path: Path) -> None:
    with client_behind_control(tmp_path, "--break", "method:session/prompt kind:request") as (client, db):
        first = held_when(db, "session/prompt")  # the client's first prompt, held
        session_id = json.loads(first["frame"])["params"]["sessionId"]
        injected = {
            "jsonrpc": "2.0",
            "id": 1,  # the client's own id for its first prompt: the proxy gives it one of its own
            "method": "session/prompt",
            "params": {"sessionId": session_id, "prompt": [{"type": "text", "text": "from ctl"}]},
        }
        sent = ctl_ok(db, "send", "--to", "agent", json.dumps(injected))
        assert sent == {"sent": "agent", "id": "acp-proxy-ctl-1", "method": "session/prompt"}
        (answered,) = sent_answered(db, 1)
        assert json.loads(answered["answer"])["result"]["stopReason"] == "end_turn"

        ctl_ok(db, "release", str(first["seq"]))
        assert client.until("prompt: hello world")
        second = held_when(db, "session/prompt")  # its second prompt, held in turn
        assert second["seq"] != first["seq"]
        resent = ctl_ok(db, "resend", str(first["seq"]))
        assert resent["id"] == "acp-proxy-ctl-2"
        edited = json.loads(first["frame"])
        edited["params"]["prompt"][0]["text"] = "resent, edited"
        assert ctl_ok(db, "resend", str(first["seq"]), "--with", json.dumps(edited))["id"] == "acp-proxy-ctl-3"
        sent_answered(db, 3)
        ctl_ok(db, "clear")
        ctl_ok(db, "release", str(second["seq"]))
        returncode, err = client.finish()
    assert returncode == 0, err  # no answer meant for the proxy reached the client
    assert "prompt: second prompt" in client.seen and client.seen.count("stop: end_turn") == 2

    rows = frames(db)
    ours = [r for r in rows if r["origin"] == "proxy" and r["kind"] == "request"]
    assert [json.loads(r["rpc_id"]) for r in ours] == ["acp-proxy-ctl-1", "acp-proxy-ctl-2", "acp-proxy-ctl-3"]
    assert [r["note"].split(";")[0] for r in ours] == [
        "sent by acp-proxy ctl",
        f"resent by acp-proxy ctl (frame {first['seq']} again)",
        f"resent by acp-proxy ctl (frame {first['seq']} again)",
    ]
    assert "resent, edited" in ours[2]["raw"] and all(r["forwarded"] == 1 and not r["unanswered"] for r in ours)
    answers = [r for r in rows if r["kind"] == "response" and r["request_seq"] in {o["seq"] for o in ours}]
    assert len(answers) == 3 and all(r["forwarded"] == 0 and "kept by the proxy" in r["note"] for r in answers)
    assert all(r["method"] == "session/prompt" for r in answers)  # paired with the proxy's requests


def test_a_killed_proxys_socket_is_not_live_and_a_new_run_takes_over(tmp_path: Path) -> None:
    with client_behind_control(tmp_path, "--break", "method:session/new kind:response") as (client, db):
        held_when(db, "session/new")
        socket = Path(json.loads(run_options(db))["control"])
        with sqlite3.connect(db) as conn:
            (proxy_pid,) = conn.execute("select proxy_pid from runs").fetchone()
        os.kill(proxy_pid, signal.SIGKILL)  # no clean-up: the socket file stays behind
        client.finish()
    assert socket.exists()
    for args in (("held",), ("release", "3"), ("send", "--to", "agent", "{}")):
        result = ctl(db, *args)
        assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
        assert "run 1 is not live" in result.stderr, result.stderr
    assert not socket.exists()  # the stale file is cleaned up by the first ctl that found it
    with client_behind_control(tmp_path, "--break", "method:session/new kind:response") as (client, db):
        held = held_when(db, "session/new")  # the next run in the same database is controlled
        ctl_ok(db, "clear")
        ctl_ok(db, "release", str(held["seq"]))
        returncode, err = client.finish()
    assert returncode == 0, err


def test_a_released_frame_meets_a_fault_added_while_it_was_held(tmp_path: Path) -> None:
    with client_behind_control(tmp_path, "--break", "method:session/prompt kind:request") as (client, db):
        held = held_when(db, "session/prompt")
        ctl_ok(db, "fault", "add", "error if method:session/prompt kind:request")
        ctl_ok(db, "clear")
        ctl_ok(db, "release", str(held["seq"]))
        returncode, err = client.finish()
    assert returncode == 1 and "sdk_client:" in err  # the first prompt was answered with an error
    rows = frames(db)
    prompts = [r for r in rows if r["method"] == "session/prompt" and r["kind"] == "request"]
    assert [(p["seq"] == held["seq"], p["forwarded"], p["fault"]) for p in prompts] == [
        (True, 0, None),
        (False, 0, "error"),
    ]
    assert prompts[1]["note"].startswith("released by acp-proxy ctl after it was held")
    (reply,) = [r for r in rows if r["kind"] == "error" and r["origin"] == "proxy"]
    assert reply["request_seq"] == prompts[1]["seq"]  # the error answers what was released
