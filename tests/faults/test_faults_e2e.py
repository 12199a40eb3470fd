"""Fault injection end to end: `acp-proxy run --fault ...` as a real subprocess, every action.

Each test looks at both sides of a fault: what the peer saw (the exact bytes a test client read,
or the transcript and exit status of the official SDK client) and what the database recorded
(``frames.forwarded``, ``frames.fault``, ``frames.note``, the ``faults`` rows, frames written by
the proxy itself noted "injected by acp-proxy ...").

Three kinds of agent:

- ``cat``: every line the client writes comes back, so the a2c direction carries exactly known
  bytes and a rule pinned to ``dir:a2c`` shows its effect byte for byte;
- ``tests/scripted_agent.py``: exact JSON-RPC answers (a response to replace, a prompt response
  to drop);
- the SDK example pair (``examples/sdk_client.py`` -> proxy -> ``examples/sdk_agent.py``), for
  what a real client does with the fault: time out cleanly, survive garbage, fail one request.

Every spawned process runs under a timeout. Nothing sleeps to synchronise: a client either
writes its whole input at once and reads to EOF, or a reader thread timestamps what arrives.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from acp_proxy.faults.plan import corrupt_line
from tests.conftest import PROXY, run_proxy
from tests.peers import (
    AGENT_INIT_LINE,
    REPO,
    agent_argv,
    expected_echo,
    peer_env,
    proxied,
    run_client,
    session_of,
    transcript,
)

pytestmark = pytest.mark.spawns  # every test here starts processes

CAT = shutil.which("cat") or "cat"
SCRIPTED_AGENT = Path(__file__).parents[1] / "scripted_agent.py"
EXAMPLE_FAULTS = REPO / "examples" / "faults.toml"
RUN_TIMEOUT = 30.0


def chunk(n: int) -> bytes:
    """A session/update line (no newline) whose text says which one it is."""
    update = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": f"chunk {n}"}}
    body = {"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s1", "update": update}}
    return json.dumps(body, separators=(",", ":")).encode()


LINES = [chunk(n) for n in range(1, 5)]
STREAM = b"".join(line + b"\n" for line in LINES)


def env(**extra: str) -> dict[str, str]:
    """The test environment without a user's database or fault rules."""
    out = peer_env()
    out.pop("ACP_PROXY_FAULTS", None)
    out.update(extra)
    return out


def fault_args(rules: Sequence[str]) -> list[str]:
    return [arg for rule in rules for arg in ("--fault", rule)]


def run_cat(
    db: Path, *rules: str, data: bytes = STREAM, extra: Sequence[str] = ()
) -> subprocess.CompletedProcess[bytes]:
    """`cat` behind the proxy with ``rules``; the client writes ``data`` at once, then EOF."""
    args = ["run", "--db", str(db), *fault_args(rules), *extra, "--", CAT]
    return run_proxy(args, input=data, timeout=RUN_TIMEOUT, env=env())


def scripted(tmp_path: Path, script: dict[str, Any]) -> list[str]:
    path = tmp_path / "script.json"
    path.write_text(json.dumps(script))
    return [sys.executable, str(SCRIPTED_AGENT), str(path)]


def query(db: Path, sql: str, *params: object) -> list[dict[str, Any]]:
    conn = sqlite3.connect(db)
    conn.row_factory = sqlite3.Row
    try:
        return [dict(row) for row in conn.execute(sql, params)]
    finally:
        conn.close()


def frames(db: Path, direction: str) -> list[dict[str, Any]]:
    return query(db, "select * from frames where dir = ? order by seq", direction)


def faults(db: Path) -> list[dict[str, Any]]:
    """The faults rows, each with the direction and bytes of the frame it points at."""
    return query(
        db,
        "select f.rule, f.action, f.detail, f.seq, x.dir, x.raw from faults f "
        "join frames x on x.run_id = f.run_id and x.seq = f.seq order by f.id",
    )


def the_run(db: Path) -> dict[str, Any]:
    (run,) = query(db, "select * from runs")
    return run


def raws(rows: Sequence[dict[str, Any]]) -> list[bytes]:
    return [row["raw"].encode() for row in rows]


def plain(row: dict[str, Any]) -> bool:
    """Forwarded as is: no fault applied and nothing withheld."""
    return row["forwarded"] == 1 and row["fault"] is None


def process_gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return True
    return state in ("Z", "X")


class Streamed:
    """The proxy as a subprocess; a thread reads its stdout chunk by chunk, with arrival times."""

    def __init__(self, args: Sequence[str], stderr_path: Path) -> None:
        self.stderr_file = stderr_path.open("wb")
        self.proc = subprocess.Popen(
            [*PROXY, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr_file, env=env()
        )
        self.stderr_path = stderr_path
        self.chunks: list[tuple[float, bytes]] = []
        self.eof = threading.Event()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        try:
            while data := os.read(fd, 65536):
                self.chunks.append((time.monotonic(), data))
        finally:
            self.eof.set()

    def write(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    @property
    def output(self) -> bytes:
        return b"".join(data for _, data in self.chunks)

    def arrival(self, needle: bytes) -> float:
        """When the chunk that completed the first occurrence of ``needle`` arrived."""
        seen = b""
        for at, data in self.chunks:
            seen += data
            if needle in seen:
                return at
        raise AssertionError(f"{needle!r} never arrived in {self.output!r}")

    def finish(self, timeout: float = RUN_TIMEOUT) -> int:
        """Close the proxy's stdin, wait for it and for its stdout's EOF; its exit status."""
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.close()
        except BrokenPipeError:
            pass
        code = self.proc.wait(timeout=timeout)
        assert self.eof.wait(timeout), "the proxy's stdout stayed open after it exited"
        return code

    @property
    def stderr(self) -> str:
        self.stderr_file.flush()
        return self.stderr_path.read_text()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=RUN_TIMEOUT)
        self.stderr_file.close()


@contextmanager
def streamed(args: Sequence[str], tmp_path: Path) -> Iterator[Streamed]:
    proxy = Streamed(args, tmp_path / "proxy-stderr.txt")
    try:
        yield proxy
    finally:
        proxy.kill()


# -- every action, byte for byte ---------------------------------------------------------------


def test_drop(tmp_path: Path) -> None:
    db = tmp_path / "rec.db"
    rule = "drop if dir:a2c nth=2"
    result = run_cat(db, rule)
    assert result.returncode == 0, result.stderr
    assert result.stdout == LINES[0] + b"\n" + LINES[2] + b"\n" + LINES[3] + b"\n"

    assert all(plain(row) for row in frames(db, "c2a"))
    a2c = frames(db, "a2c")
    assert raws(a2c) == LINES  # the dropped frame is recorded too, in its place
    dropped = a2c[1]
    assert (dropped["forwarded"], dropped["fault"], dropped["note"]) == (0, "drop", "dropped")
    assert all(plain(row) for row in a2c if row is not dropped)
    assert faults(db) == [
        {
            "rule": rule,
            "action": "drop",
            "detail": "",
            "seq": dropped["seq"],
            "dir": "a2c",
            "raw": LINES[1].decode(),
        }
    ]
    assert the_run(db)["frames_a2c"] == 4
    assert the_run(db)["bytes_a2c"] == len(STREAM) - len(LINES[1]) - 1  # bytes forwarded
    # The query CLI finds it with the filter language.
    listed = run_proxy(["frames", "--db", str(db), "--jsonl", "fault:drop"], timeout=RUN_TIMEOUT, env=env())
    assert listed.returncode == 0, listed.stderr
    assert [json.loads(line)["seq"] for line in listed.stdout.splitlines()] == [dropped["seq"]]


def test_delay_with_jitter_pauses_the_stream_and_keeps_its_order(tmp_path: Path) -> None:
    db = tmp_path / "rec.db"
    rule = "delay=400ms~100ms if dir:a2c nth=2"
    args = ["run", "--db", str(db), "--fault", rule, "--seed", "3", "--", CAT]
    with streamed(args, tmp_path) as proxy:
        proxy.write(STREAM)
        assert proxy.finish() == 0, proxy.stderr
        assert proxy.output == STREAM  # nothing lost, nothing reordered
        gap = proxy.arrival(LINES[1]) - proxy.arrival(LINES[0])

    (fault,) = faults(db)
    assert (fault["action"], fault["rule"], fault["raw"]) == ("delay", rule, LINES[1].decode())
    delay_ms = float(fault["detail"].removesuffix("ms"))
    assert 300 <= delay_ms <= 500 and delay_ms != 400  # jittered, within ±100 ms
    assert gap >= delay_ms / 1000 - 0.15  # less only by how late the reader saw line 1
    (delayed,) = [row for row in frames(db, "a2c") if row["fault"]]
    assert (delayed["forwarded"], delayed["fault"], delayed["note"]) == (1, "delay", None)

    # The jitter is drawn from the seed: the same seed gives the same delay.
    again = tmp_path / "again.db"
    assert run_cat(again, rule, extra=["--seed", "3"]).returncode == 0
    assert faults(again)[0]["detail"] == fault["detail"]


def test_duplicate(tmp_path: Path) -> None:
    db = tmp_path / "rec.db"
    result = run_cat(db, "duplicate=2 if dir:a2c nth=3")
    assert result.returncode == 0, result.stderr
    assert result.stdout == LINES[0] + b"\n" + LINES[1] + b"\n" + (LINES[2] + b"\n") * 3 + LINES[3] + b"\n"

    a2c = frames(db, "a2c")
    assert raws(a2c) == LINES  # one row for the frame, its note says how often it went out
    assert (a2c[2]["forwarded"], a2c[2]["fault"], a2c[2]["note"]) == (1, "duplicate", "written 3 times")
    assert [(f["action"], f["detail"], f["raw"]) for f in faults(db)] == [("duplicate", "2 extra", LINES[2].decode())]


def test_reorder_holds_a_frame_until_the_next_one_has_gone(tmp_path: Path) -> None:
    db = tmp_path / "rec.db"
    # The last frame has no next one: it is held until the direction ends, then written.
    result = run_cat(db, "reorder if dir:a2c nth=1", "reorder if dir:a2c nth=4")
    assert result.returncode == 0, result.stderr
    assert result.stdout == b"".join(LINES[i] + b"\n" for i in (1, 0, 2, 3))

    a2c = frames(db, "a2c")
    assert raws(a2c) == [LINES[i] for i in (1, 0, 2, 3)]  # recorded in the order written
    assert [(row["forwarded"], row["fault"]) for row in a2c] == [
        (1, None),
        (1, "reorder"),
        (1, None),
        (1, "reorder"),
    ]
    assert [(f["action"], f["raw"]) for f in faults(db)] == [
        ("reorder", LINES[0].decode()),
        ("reorder", LINES[3].decode()),
    ]


def test_corrupt_writes_invalid_json_of_the_same_length(tmp_path: Path) -> None:
    db = tmp_path / "rec.db"
    result = run_cat(db, "corrupt if dir:a2c nth=1")
    assert result.returncode == 0, result.stderr
    first, *rest = result.stdout.split(b"\n")
    assert first == corrupt_line(LINES[0]) and len(first) == len(LINES[0]) and first != LINES[0]
    assert b"\x1a" in first
    with pytest.raises(ValueError):
        json.loads(first)
    assert rest == [*LINES[1:], b""]

    a2c = frames(db, "a2c")
    # The frame is recorded as the agent wrote it; the fault and the note say what went out.
    assert a2c[0]["raw"] == LINES[0].decode()
    assert (a2c[0]["forwarded"], a2c[0]["fault"], a2c[0]["note"]) == (1, "corrupt", "forwarded corrupted")
    (fault,) = faults(db)
    assert fault["detail"] == f"byte {first.index(0x1A)} -> 0x1a"


def test_truncate(tmp_path: Path) -> None:
    db = tmp_path / "rec.db"
    result = run_cat(db, "truncate=20 if dir:a2c nth=2", "truncate if dir:a2c nth=3")
    assert result.returncode == 0, result.stderr
    half = len(LINES[2]) // 2
    assert result.stdout == b"".join(
        [LINES[0] + b"\n", LINES[1][:20] + b"\n", LINES[2][:half] + b"\n", LINES[3] + b"\n"]
    )
    a2c = frames(db, "a2c")
    assert [(r["forwarded"], r["fault"], r["note"]) for r in a2c[1:3]] == [
        (1, "truncate", "forwarded truncated"),
        (1, "truncate", "forwarded truncated"),
    ]
    assert [f["detail"] for f in faults(db)] == ["kept 20 bytes", f"kept {half} bytes"]


def test_split_writes_one_line_in_pieces(tmp_path: Path) -> None:
    db = tmp_path / "rec.db"
    args = ["run", "--db", str(db), "--fault", "split=3@300ms if dir:a2c nth=1", "--", CAT]
    with streamed(args, tmp_path) as proxy:
        proxy.write(STREAM)
        assert proxy.finish() == 0, proxy.stderr
        assert proxy.output == STREAM  # joined, the pieces are the line
        first_line = LINES[0] + b"\n"
        pieces = []
        seen = 0
        for at, data in proxy.chunks:
            if seen >= len(first_line):
                break
            pieces.append((at, data))
            seen += len(data)
    # The reader saw the line arrive in several reads, spread over the pauses.
    assert len(pieces) >= 2
    assert pieces[-1][0] - pieces[0][0] >= 0.3
    assert len(pieces[0][1]) < len(first_line)

    a2c = frames(db, "a2c")
    assert raws(a2c) == LINES
    assert (a2c[0]["forwarded"], a2c[0]["fault"]) == (1, "split")
    assert [f["detail"] for f in faults(db)] == ["3 writes, 300ms apart"]


def test_error_answers_a_request_instead_of_forwarding_it(tmp_path: Path) -> None:
    db = tmp_path / "rec.db"
    rule = 'error=-32000:"agent busy" if method:session/prompt kind:request'
    prompt = b'{"jsonrpc":"2.0","id":7,"method":"session/prompt","params":{"sessionId":"s1","prompt":[]}}'
    result = run_cat(db, rule, data=prompt + b"\n" + LINES[0] + b"\n")
    assert result.returncode == 0, result.stderr
    reply = b'{"jsonrpc":"2.0","id":7,"error":{"code":-32000,"message":"agent busy"}}'
    # The client gets the error; the agent (cat) never saw the request, so never echoed it.
    assert result.stdout == reply + b"\n" + LINES[0] + b"\n"

    c2a = frames(db, "c2a")
    assert raws(c2a) == [prompt, LINES[0]]
    assert (c2a[0]["forwarded"], c2a[0]["fault"]) == (0, "error")
    assert "answered with an error by acp-proxy" in c2a[0]["note"]
    a2c = frames(db, "a2c")
    assert raws(a2c) == [reply, LINES[0]]
    assert (a2c[0]["forwarded"], a2c[0]["fault"], a2c[0]["kind"]) == (1, "error", "error")
    assert (a2c[0]["rpc_id"], a2c[0]["error_code"], a2c[0]["error_message"]) == ("7", -32000, "agent busy")
    assert a2c[0]["note"].startswith(f"error reply sent by acp-proxy (rule 1: {rule})")
    # Recorded after the request it answers, and paired with it like any response.
    assert a2c[0]["seq"] > c2a[0]["seq"]
    assert (a2c[0]["method"], a2c[0]["request_seq"]) == ("session/prompt", c2a[0]["seq"])
    assert not c2a[0]["unanswered"]
    assert plain(a2c[1])
    assert (c2a[0]["origin"], a2c[0]["origin"], a2c[1]["origin"]) == (None, "proxy", None)
    # One fault applied: one row, on the request it answered.
    assert [(f["action"], f["dir"], f["raw"]) for f in faults(db)] == [("error", "c2a", prompt.decode())]
    assert faults(db)[0]["detail"] == "reply " + reply.decode()


def test_inject_before_and_after_a_frame(tmp_path: Path) -> None:
    db = tmp_path / "rec.db"
    ping = b'{"jsonrpc":"2.0","method":"_vendor/ping","params":{"sessionId":"${sessionId}"}}'
    stray = b"this line is not JSON"
    rules = [
        f"inject='{ping.decode()}' before if dir:a2c nth=1",
        f"inject='{stray.decode()}' after if dir:a2c nth=2",
    ]
    result = run_cat(db, *rules)
    assert result.returncode == 0, result.stderr
    ping_sent = ping.replace(b"${sessionId}", b"s1")  # the matched frame's session
    assert result.stdout == b"".join(
        line + b"\n" for line in [ping_sent, LINES[0], LINES[1], stray, LINES[2], LINES[3]]
    )

    a2c = frames(db, "a2c")
    assert raws(a2c) == [ping_sent, LINES[0], LINES[1], stray, LINES[2], LINES[3]]
    for injected, number in ((a2c[0], 1), (a2c[3], 2)):
        assert (injected["forwarded"], injected["fault"]) == (1, "inject")
        assert injected["note"].startswith(f"injected by acp-proxy (rule {number}: {rules[number - 1]})")
    assert (a2c[0]["method"], a2c[0]["session_id"]) == ("_vendor/ping", "s1")
    assert a2c[3]["kind"] == "invalid"
    assert (a2c[1]["fault"], a2c[2]["fault"]) == ("inject", "inject")  # the frames they were tied to
    assert all(plain(row) for row in a2c[4:])
    # One row per applied fault, on the frame that triggered it.
    assert [(f["action"], f["raw"], f["detail"]) for f in faults(db)] == [
        ("inject", LINES[0].decode(), "before: " + ping_sent.decode()),
        ("inject", LINES[1].decode(), "after: " + stray.decode()),
    ]
    listed = run_proxy(["runs", "--db", str(db), "--json"], timeout=RUN_TIMEOUT, env=env())
    assert listed.returncode == 0, listed.stderr
    assert [run["faults_applied"] for run in json.loads(listed.stdout)] == [2]
    # The two lines the proxy wrote are the ones dir:proxy selects, and only they.
    assert [row["origin"] for row in a2c] == ["proxy", None, None, "proxy", None, None]
    written = run_proxy(["frames", "--db", str(db), "--json", "dir:proxy"], timeout=RUN_TIMEOUT, env=env())
    assert written.returncode == 0, written.stderr
    assert [row["seq"] for row in json.loads(written.stdout)] == [a2c[0]["seq"], a2c[3]["seq"]]


def test_kill_signals_the_agent_and_the_proxy_exits_like_it(tmp_path: Path) -> None:
    db = tmp_path / "rec.db"
    result = run_cat(db, "kill=TERM if dir:c2a nth=2")
    assert result.returncode == -15, result.stderr

    run = the_run(db)
    assert (run["status"], run["exit_code"], run["exit_signal"]) == ("ended", None, 15)
    c2a = frames(db, "c2a")
    assert c2a[1]["fault"] == "kill"  # the frame is still handled
    # The line is written after the signal: whether the dying agent's pipe still took it is a
    # race, and the recording says which way it went.
    assert c2a[1]["forwarded"] == 1 or "never reached its receiver" in c2a[1]["note"]
    assert [(f["action"], f["detail"], f["raw"]) for f in faults(db)] == [("kill", "SIGTERM", LINES[1].decode())]
    assert process_gone(run["agent_pid"])


def test_close_agent_stdin(tmp_path: Path) -> None:
    db = tmp_path / "rec.db"
    result = run_cat(db, "close=agent-stdin if dir:c2a nth=3")
    assert result.returncode == 0, result.stderr
    assert result.stdout == LINES[0] + b"\n" + LINES[1] + b"\n"  # cat read EOF after two lines

    c2a = frames(db, "c2a")
    assert raws(c2a) == LINES
    assert (c2a[2]["forwarded"], c2a[2]["fault"], c2a[2]["note"]) == (0, "close", "its pipe was closed")
    assert (c2a[3]["forwarded"], c2a[3]["fault"], c2a[3]["note"]) == (0, None, "pipe closed by a fault")
    assert raws(frames(db, "a2c")) == LINES[:2]
    assert [(f["action"], f["detail"]) for f in faults(db)] == [("close", "agent-stdin")]


def test_close_client_stdout_gives_the_client_eof_while_it_is_still_writing(tmp_path: Path) -> None:
    db = tmp_path / "rec.db"
    args = ["run", "--db", str(db), "--fault", "close=client-stdout if dir:a2c nth=3", "--", CAT]
    with streamed(args, tmp_path) as proxy:
        proxy.write(STREAM)
        # The client's stdin is still open: the EOF it reads comes from the fault, not an exit.
        assert proxy.eof.wait(RUN_TIMEOUT), "the client never read EOF"
        assert proxy.proc.poll() is None
        assert proxy.output == LINES[0] + b"\n" + LINES[1] + b"\n"
        proxy.write(LINES[0] + b"\n")  # the agent still hears the client
        assert proxy.finish() == 0, proxy.stderr

    a2c = frames(db, "a2c")
    assert raws(a2c) == [*LINES, LINES[0]]
    assert (a2c[2]["forwarded"], a2c[2]["fault"], a2c[2]["note"]) == (0, "close", "its pipe was closed")
    assert [(r["forwarded"], r["note"]) for r in a2c[3:]] == [(0, "pipe closed by a fault")] * 2
    assert all(plain(row) for row in frames(db, "c2a"))
    assert [(f["action"], f["detail"]) for f in faults(db)] == [("close", "client-stdout")]


def test_stall_stops_a_direction_for_good(tmp_path: Path) -> None:
    db = tmp_path / "rec.db"
    result = run_cat(db, "stall if dir:a2c nth=2")
    assert result.returncode == 0, result.stderr
    assert result.stdout == LINES[0] + b"\n"

    a2c = frames(db, "a2c")
    assert raws(a2c) == LINES
    assert (a2c[1]["forwarded"], a2c[1]["fault"], a2c[1]["note"]) == (0, "stall", "a2c stalled")
    assert [(r["forwarded"], r["note"]) for r in a2c[2:]] == [(0, "direction stalled by a fault")] * 2
    assert all(plain(row) for row in frames(db, "c2a"))  # the other direction flows on
    assert [(f["action"], f["detail"]) for f in faults(db)] == [("stall", "a2c")]


# -- with the official SDK client and agent ------------------------------------------------------


def sdk_run(
    db: Path, rules: Sequence[str], *client_args: str, agent_args: Sequence[str] = (), timeout: float = 20
) -> subprocess.CompletedProcess[str]:
    """The SDK client, with ``client_args``, against the SDK agent behind the proxy with ``rules``."""
    return run_client(
        proxied(agent_argv(*agent_args), db, *fault_args(rules)), *client_args, timeout=timeout, env=env()
    )


def assert_ended_cleanly(db: Path) -> dict[str, Any]:
    """The proxy finished its run and the agent is gone (nothing was left hanging)."""
    run = the_run(db)
    assert run["status"] == "ended"
    assert run["ended_ns"] is not None
    assert process_gone(run["agent_pid"])
    return run


def test_sdk_client_times_out_cleanly_when_the_prompt_response_is_dropped(tmp_path: Path) -> None:
    db = tmp_path / "rec.db"
    started = time.monotonic()
    # The client's --timeout covers its whole conversation, start-up included: 5 s leaves a
    # loaded machine room to start three Python processes.
    result = sdk_run(db, ["drop if method:session/prompt kind:response"], "--timeout", "5")
    assert result.returncode == 1
    assert result.stderr == "sdk_client: timed out after 5 s waiting for session/prompt\n"
    # The turn's updates arrived; only its end never did.
    assert result.stdout.splitlines() == [
        AGENT_INIT_LINE,
        "prompt: hello world",
        "agent: Client sent:",
        "agent: hello world",
    ]
    assert time.monotonic() - started < 5 + 10  # neither the proxy nor the agent hung

    run = assert_ended_cleanly(db)
    assert run["exit_code"] == 0  # the agent read EOF and left on its own
    (dropped,) = query(db, "select * from frames where method = 'session/prompt' and kind = 'response'")
    assert (dropped["dir"], dropped["forwarded"], dropped["fault"], dropped["note"]) == (
        "a2c",
        0,
        "drop",
        "dropped; not forwarded: the request stays unanswered for its sender",
    )
    assert json.loads(dropped["raw"])["result"] == {"stopReason": "end_turn"}
    # The client never got its answer: the prompt is unanswered, as its sender saw it.
    assert [r["method"] for r in query(db, "select * from unanswered")] == ["session/prompt"]
    assert [(f["action"], f["seq"]) for f in faults(db)] == [("drop", dropped["seq"])]


def test_sdk_client_sees_the_connection_close_when_the_agent_is_killed_mid_turn(tmp_path: Path) -> None:
    db = tmp_path / "rec.db"
    rule = "kill if method:session/request_permission kind:request"
    result = sdk_run(db, [rule], agent_args=["--permission"])
    assert result.returncode == 1
    assert "sdk_client: the agent closed the connection during session/prompt" in result.stderr
    lines = result.stdout.splitlines()
    assert lines[:3] == [AGENT_INIT_LINE, "prompt: hello world", "tool_call: call_1 pending Write notes.txt"]
    assert "stop: end_turn" not in lines

    run = assert_ended_cleanly(db)
    assert (run["exit_code"], run["exit_signal"]) == (None, 9)
    (request,) = query(db, "select * from frames where method = 'session/request_permission' and kind = 'request'")
    assert (request["forwarded"], request["fault"]) == (1, "kill")
    assert [(f["action"], f["detail"], f["seq"]) for f in faults(db)] == [("kill", "SIGKILL", request["seq"])]
    assert not query(db, "select * from frames where method = 'session/prompt' and kind = 'response'")


def test_sdk_client_survives_a_corrupt_frame(tmp_path: Path) -> None:
    db = tmp_path / "rec.db"
    result = sdk_run(db, ["corrupt if update:agent_message_chunk nth=1"])
    lines = transcript(result)
    expected = expected_echo()
    expected.remove("agent: Client sent:")  # the first one: the client could not parse it
    assert lines[:-1] == expected

    assert_ended_cleanly(db)
    (corrupted,) = query(db, "select * from frames where fault = 'corrupt'")
    assert (corrupted["forwarded"], corrupted["note"], corrupted["update_kind"]) == (
        1,
        "forwarded corrupted",
        "agent_message_chunk",
    )
    assert "Client sent:" in corrupted["raw"]
    assert [f["action"] for f in faults(db)] == ["corrupt"]


def test_sdk_client_survives_an_unknown_update_variant_and_a_stray_line(tmp_path: Path) -> None:
    db = tmp_path / "rec.db"
    variant = (
        '{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"${sessionId}",'
        '"update":{"sessionUpdate":"_vendor_hint","text":"hi"}}}'
    )
    rules = [
        f"inject='{variant}' before if update:agent_message_chunk nth=1",
        "inject='acp-proxy was here' after if method:session/new kind:response",
    ]
    result = sdk_run(db, rules)
    lines = transcript(result)
    assert lines[:-1] == expected_echo()  # both ignored, the conversation unharmed
    session = session_of(lines)

    assert_ended_cleanly(db)
    injected = query(db, "select * from frames where note like 'injected by acp-proxy%' order by seq")
    assert [row["dir"] for row in injected] == ["a2c", "a2c"]
    stray, hint = injected
    assert (stray["raw"], stray["kind"], stray["fault"], stray["forwarded"]) == (
        "acp-proxy was here",
        "invalid",
        "inject",
        1,
    )
    assert (hint["update_kind"], hint["session_id"], hint["fault"]) == ("_vendor_hint", session, "inject")
    assert hint["unknown"] == "extension"
    a2c = frames(db, "a2c")
    # Each sits where the rule put it: the stray line right after the session/new response, the
    # variant right before the first chunk.
    after_new = next(i for i, row in enumerate(a2c) if row["method"] == "session/new")
    assert a2c[after_new + 1]["seq"] == stray["seq"]
    first_chunk = next(i for i, row in enumerate(a2c) if row["update_kind"] == "agent_message_chunk")
    assert a2c[first_chunk - 1]["seq"] == hint["seq"]
    assert [f["action"] for f in faults(db)] == ["inject", "inject"]


def test_sdk_permission_request_delayed(tmp_path: Path) -> None:
    db = tmp_path / "rec.db"
    rule = "delay=600ms if method:session/request_permission kind:request"
    result = sdk_run(db, [rule], "--prompt", "hello world", agent_args=["--permission"])
    lines = transcript(result)
    assert lines[:-1] == expected_echo(["hello world"], permission="allow")

    assert_ended_cleanly(db)
    (request,) = query(db, "select * from frames where method = 'session/request_permission' and kind = 'request'")
    assert (request["forwarded"], request["fault"]) == (1, "delay")
    assert [(f["action"], f["detail"], f["seq"]) for f in faults(db)] == [("delay", "600ms", request["seq"])]
    # Recorded when the agent sent it: the client's answer came at least the delay later.
    (answer,) = query(db, "select * from frames where method = 'session/request_permission' and kind = 'response'")
    assert answer["dir"] == "c2a" and answer["latency_ns"] >= 600_000_000


def test_sdk_prompt_answered_with_an_error_by_the_proxy(tmp_path: Path) -> None:
    db = tmp_path / "rec.db"
    rule = 'error=-32000:"agent busy" if method:session/prompt kind:request'
    result = sdk_run(db, [rule])
    assert result.returncode == 1
    assert result.stderr == "sdk_client: session/prompt failed: error -32000 agent busy\n"
    assert result.stdout.splitlines() == [AGENT_INIT_LINE, "prompt: hello world"]

    assert_ended_cleanly(db)
    (request,) = query(db, "select * from frames where method = 'session/prompt' and kind = 'request'")
    assert (request["dir"], request["forwarded"], request["fault"]) == ("c2a", 0, "error")
    (reply,) = query(db, "select * from frames where method = 'session/prompt' and kind = 'error'")
    assert (reply["dir"], reply["rpc_id"], reply["error_code"], reply["fault"]) == (
        "a2c",
        request["rpc_id"],
        -32000,
        "error",
    )
    assert reply["note"].startswith("error reply sent by acp-proxy")
    assert reply["request_seq"] == request["seq"]
    assert not query(db, "select * from frames where update_kind is not null")  # the agent never saw it


def test_sdk_client_reads_eof_when_its_stdout_is_closed(tmp_path: Path) -> None:
    db = tmp_path / "rec.db"
    started = time.monotonic()
    result = sdk_run(db, ["close=client-stdout if update:agent_message_chunk nth=1"], timeout=20)
    assert result.returncode == 1
    assert "sdk_client: the agent closed the connection during session/prompt" in result.stderr
    assert time.monotonic() - started < 15  # it read EOF; it did not wait for its timeout
    assert result.stdout.splitlines() == [AGENT_INIT_LINE, "prompt: hello world"]

    assert_ended_cleanly(db)
    (closed,) = query(db, "select * from frames where fault = 'close'")
    assert (closed["forwarded"], closed["note"], closed["update_kind"]) == (
        0,
        "its pipe was closed",
        "agent_message_chunk",
    )
    later = query(db, "select * from frames where dir = 'a2c' and seq > ?", closed["seq"])
    assert later and all(row["forwarded"] == 0 for row in later)


# -- sources, errors, determinism ----------------------------------------------------------------


def marker_agent(tmp_path: Path) -> tuple[list[str], Path]:
    marker = tmp_path / "agent-started"
    return [sys.executable, "-c", f"open({str(marker)!r}, 'w').close()"], marker


BAD_TOML = {
    "syntax": ("[[fault]\nrule = 'drop'\n", "not valid TOML"),
    "unknown key": ("[[fault]]\nrule = 'drop'\n[extra]\n", "unknown key 'extra'"),
    "bad rule": ("[[fault]]\nrule = 'dorp if kind:request'\n", "unknown action 'dorp'"),
    "bad part": ("[[fault]]\naction = 'delay'\narg = 'soon'\n", "bad duration"),
}


@pytest.mark.parametrize(
    ("how", "value", "message"),
    [
        ("--fault", "dorp if kind:request", "unknown action 'dorp'; did you mean 'drop'?"),
        ("--fault", "drop if method:session/prompt nht=2", "did you mean nth=?"),
        ("--fault", "drop if (kind:request", "bad filter"),
        ("env", "drop if dir:a2c; kill=SIGNOPE", "unknown signal"),
        ("file", "syntax", BAD_TOML["syntax"][1]),
        ("file", "unknown key", BAD_TOML["unknown key"][1]),
        ("file", "bad rule", BAD_TOML["bad rule"][1]),
        ("file", "bad part", BAD_TOML["bad part"][1]),
        ("file", "missing", "cannot read"),
    ],
)
def test_a_bad_rule_is_one_line_exit_2_and_the_agent_never_starts(
    tmp_path: Path, how: str, value: str, message: str
) -> None:
    agent, marker = marker_agent(tmp_path)
    db = tmp_path / "rec.db"
    options: list[str] = []
    environment = env()
    if how == "--fault":
        options = ["--fault", value]
    elif how == "env":
        environment = env(ACP_PROXY_FAULTS=value)
    else:
        path = tmp_path / "rules.toml"
        if value != "missing":
            path.write_text(BAD_TOML[value][0])
        options = ["--faults", str(path)]
    result = run_proxy(["run", "--db", str(db), *options, "--", *agent], timeout=RUN_TIMEOUT, env=environment)
    assert result.returncode == 2
    stderr = result.stderr.decode()
    assert stderr.count("\n") == 1 and stderr.endswith("\n"), stderr
    assert stderr.startswith("acp-proxy: bad fault rule: "), stderr
    assert message in stderr
    assert result.stdout == b""
    assert not marker.exists()
    assert not db.exists()


def test_faults_help_documents_the_language() -> None:
    result = run_proxy(["faults-help"], timeout=RUN_TIMEOUT, env=env())
    assert result.returncode == 0
    text = result.stdout.decode()
    for word in ("FAULT RULES", "drop", "delay=D[~J]", "inject=PAYLOAD", "close[=PIPE]", "ACP_PROXY_FAULTS"):
        assert word in text


def test_rules_from_the_environment(tmp_path: Path) -> None:
    db = tmp_path / "rec.db"
    args = ["run", "--db", str(db), "--", CAT]
    rules = "drop if dir:a2c nth=1; seed=5\nduplicate if dir:a2c nth=2"
    result = run_proxy(args, input=STREAM, timeout=RUN_TIMEOUT, env=env(ACP_PROXY_FAULTS=rules))
    assert result.returncode == 0, result.stderr
    assert result.stdout == LINES[1] + b"\n" + LINES[1] + b"\n" + LINES[2] + b"\n" + LINES[3] + b"\n"
    run = the_run(db)
    assert run["seed"] == 5
    spec = json.loads(run["fault_spec"])
    assert [(r["rule"], r["source"]) for r in spec["rules"]] == [
        ("drop if dir:a2c nth=1", "ACP_PROXY_FAULTS rule #1"),
        ("duplicate if dir:a2c nth=2", "ACP_PROXY_FAULTS rule #3"),
    ]
    assert [f["action"] for f in faults(db)] == ["drop", "duplicate"]


def test_the_example_rules_file_loads_and_applies(tmp_path: Path) -> None:
    db = tmp_path / "rec.db"
    agent = scripted(
        tmp_path,
        {
            "on": {
                "initialize": [{"jsonrpc": "2.0", "id": "$id", "result": {"protocolVersion": 1}}],
                "session/new": [{"jsonrpc": "2.0", "id": "$id", "result": {"sessionId": "s1"}}],
                "session/prompt": [{"jsonrpc": "2.0", "id": "$id", "result": {"stopReason": "end_turn"}}],
            }
        },
    )
    requests = [
        b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}}',
        b'{"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"/","mcpServers":[]}}',
        b'{"jsonrpc":"2.0","id":2,"method":"session/prompt","params":{"sessionId":"s1","prompt":[]}}',
    ]
    args = ["run", "--db", str(db), "--faults", str(EXAMPLE_FAULTS), "--", *agent]
    result = run_proxy(args, input=b"".join(r + b"\n" for r in requests), timeout=RUN_TIMEOUT, env=env())
    assert result.returncode == 0, result.stderr
    answered = [json.loads(line)["id"] for line in result.stdout.splitlines()]
    assert answered == [0, 1]  # the first prompt's response was dropped

    run = the_run(db)
    assert run["seed"] == 7  # the file's seed
    spec = json.loads(run["fault_spec"])
    assert len(spec["rules"]) == 5
    assert {r["source"] for r in spec["rules"]} == {f"{EXAMPLE_FAULTS}: fault #{n}" for n in range(1, 6)}
    assert [(f["action"], f["rule"]) for f in faults(db)] == [
        ("drop", "drop if method:session/prompt kind:response nth=1")
    ]


def test_same_rules_same_seed_same_traffic_same_faults(tmp_path: Path) -> None:
    lines = [chunk(n) for n in range(1, 61)]
    data = b"".join(line + b"\n" for line in lines)
    rules = [
        "duplicate if dir:c2a p=0.3",
        "drop if dir:a2c p=0.3",
        "delay=2ms~2ms if dir:a2c p=0.3",
        "truncate if dir:a2c p=0.3",
    ]

    def run(name: str, seed: int) -> tuple[bytes, list[tuple[Any, ...]]]:
        db = tmp_path / f"{name}.db"
        result = run_cat(db, *rules, data=data, extra=["--seed", str(seed)])
        assert result.returncode == 0, result.stderr
        assert the_run(db)["seed"] == seed
        # Each rule sees one direction, so the relay's interleaving of the two cannot matter;
        # within a direction, frames are compared by their bytes and order.
        applied = query(
            db,
            "select x.dir, x.raw, f.rule, f.action, f.detail from faults f "
            "join frames x on x.run_id = f.run_id and x.seq = f.seq order by x.dir, x.seq, f.id",
        )
        return result.stdout, [tuple(row.values()) for row in applied]

    first = run("first", 1234)
    second = run("second", 1234)
    other = run("other", 4321)
    assert first == second
    assert other != first
    output, applied = first
    actions = [row[3] for row in applied]
    # p=0.3 over 60 (or more) frames: each rule fired, and not every time.
    for action in ("duplicate", "drop", "delay", "truncate"):
        assert 0 < actions.count(action) < 60
    assert output != data
