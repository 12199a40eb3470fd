"""The control socket in-process (trio, a real Unix socket): its mode, its wire, one controller at
a time, a held frame's direction woken by a release, and the ctl client's one-line mistakes."""

from __future__ import annotations

import json
import os
import shutil
import socket
import sqlite3
import stat
from pathlib import Path
from typing import Any

import trio
from click.testing import CliRunner

from acp_proxy.cli.commands import cli
from acp_proxy.faults.gate import Gate, Hold
from acp_proxy.faults.live import LiveControl
from acp_proxy.relay import control
from acp_proxy.relay.stdio import RunOptions
from tests.faults.test_live import update

TIMEOUT_S = 10


def serve(tmp_path: Path, body: Any) -> tuple[list[dict[str, Any]], Path]:
    """Run a ControlServer on a socket in ``tmp_path`` while ``body(server, path)`` runs."""
    live = LiveControl(None, lambda: 0)
    gate = Gate(live=live)
    journaled: list[dict[str, Any]] = []
    server = control.ControlServer(live, gate, journaled.append)
    path = control.socket_path(tmp_path / "run.journal")

    async def main() -> None:
        with trio.fail_after(TIMEOUT_S):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(server.serve, control.listen(path), path)
                await body(server, path)
                nursery.cancel_scope.cancel()

    trio.run(main)
    return journaled, path


async def ask(path: Path, request: bytes) -> dict[str, Any]:
    stream = await trio.open_unix_socket(str(path))
    async with stream:
        await stream.send_all(request)
        data = b""
        while not data.endswith(b"\n"):
            chunk = await stream.receive_some(4096)
            if not chunk:
                break
            data += chunk
    return dict(json.loads(data))


def test_the_socket_is_private_answers_one_line_and_is_removed_at_the_end(tmp_path: Path) -> None:
    async def body(server: control.ControlServer, path: Path) -> None:
        mode = os.stat(path).st_mode
        assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o600
        assert await ask(path, b'{"op": "held"}\n') == {"ok": []}
        assert await ask(path, b"not json\n") == {"error": "the request is not JSON"}
        assert await ask(path, b"[1]\n") == {"error": "the request is not a JSON object"}
        added = await ask(path, b'{"op": "fault-add", "rule": "drop if dir:a2c"}\n')
        assert added == {"ok": {"id": 1, "rule": "drop if dir:a2c"}}
        assert server.gate.plan is server.live.plan and server.gate.plan is not None  # from the next frame

    journaled, path = serve(tmp_path, body)
    assert not path.exists()
    (spec,) = journaled  # the run's fault spec, journaled once per change
    assert [r["rule"] for r in json.loads(spec["fault_spec"])["runtime"]] == ["drop if dir:a2c"]
    (action,) = spec["control"]  # the action itself, in the same record: a controls row
    assert (action["number"], action["action"], action["argument"]) == (1, "fault-add", "#1 drop if dir:a2c")


def test_a_second_controller_at_the_same_moment_is_told_so(tmp_path: Path) -> None:
    async def body(server: control.ControlServer, path: Path) -> None:
        first = await trio.open_unix_socket(str(path))
        await first.send_all(b'{"op": ')  # half a request: the first controller is talking
        await trio.testing.wait_all_tasks_blocked()
        assert await ask(path, b'{"op": "held"}\n') == {"error": control.BUSY}
        await first.send_all(b'"held"}\n')
        assert json.loads(await first.receive_some(4096)) == {"ok": []}
        await first.aclose()

    serve(tmp_path, body)


def test_a_release_wakes_the_direction_waiting_on_the_held_frame(tmp_path: Path) -> None:
    woken: list[str] = []

    async def body(server: control.ControlServer, path: Path) -> None:
        server.live.handle({"op": "break", "filter": "dir:a2c"})
        (_note, hold) = server.gate.chunk("a2c", update("one"))
        assert isinstance(hold, Hold)

        async def direction() -> None:
            await server.wait_decision(hold.number)
            woken.append("a2c")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(direction)
            await trio.testing.wait_all_tasks_blocked()
            assert woken == []  # held: the direction waits
            assert await ask(path, f'{{"op": "release", "hold": {hold.number}}}\n'.encode()) == {"ok": {"released": 1}}
        assert woken == ["a2c"]

    serve(tmp_path, body)


def test_a_sent_frame_is_carried_out_before_the_answer_and_its_reply_kept(tmp_path: Path) -> None:
    carried: list[list[Any]] = []

    async def body(server: control.ControlServer, path: Path) -> None:
        async def inject(steps: list[Any]) -> None:
            carried.append(steps)

        server.inject = inject
        frame = json.dumps({"jsonrpc": "2.0", "id": 5, "method": "session/cancel_x", "params": {}})
        answer = await ask(path, json.dumps({"op": "send", "to": "agent", "frame": frame}).encode() + b"\n")
        assert answer == {"ok": {"sent": "agent", "id": "acp-proxy-ctl-1", "method": "session/cancel_x"}}
        ((note, send),) = carried
        assert note.meta["origin"] == "proxy" and json.loads(send.data)["id"] == "acp-proxy-ctl-1"
        reply = b'{"jsonrpc":"2.0","id":"acp-proxy-ctl-1","result":{}}\n'
        (kept,) = server.gate.chunk("a2c", reply)
        assert kept.meta["forwarded"] == 0  # type: ignore[union-attr]
        assert (await ask(path, b'{"op": "sent"}\n'))["ok"][0]["answered"] is True

    serve(tmp_path, body)


def test_a_long_journal_path_puts_the_socket_in_a_private_temporary_directory(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 120) / "123-456-abcd.journal"
    path = control.socket_path(deep)
    assert len(os.fsencode(path)) <= control.SOCKET_PATH_MAX and path.name == "123-456-abcd.ctl"
    assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700
    assert control.socket_path(tmp_path / "x.journal") == tmp_path / "x.ctl"


def test_a_run_without_control_builds_no_gate() -> None:
    assert not RunOptions(["agent"], None).needs_gate()
    assert RunOptions(["agent"], None, control=True).needs_gate()


def test_ctl_to_a_socket_that_is_gone_is_one_line_and_exit_2(sdk_recording: tuple[Path, str], tmp_path: Path) -> None:
    db = tmp_path / "gone.db"
    shutil.copy(sdk_recording[0], db)
    gone = tmp_path / "gone.ctl"
    with sqlite3.connect(db) as conn:  # as a proxy killed with SIGKILL leaves its run
        conn.execute(
            "update runs set status = 'running', options = ? where id = 2", [json.dumps({"control": str(gone)})]
        )
    result = CliRunner().invoke(cli, ["ctl", "--db", str(db), "last", "held"])
    assert result.exit_code == 2
    assert result.stderr == "acp-proxy: run 2 is not live: its control socket is gone (the proxy exited)\n"
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(gone))  # bound, never listening: what a dead proxy's socket file refuses
    stale.close()
    for args in (["fault", "list"], ["send", "--to", "agent", "{}"], ["release", "3"], ["resend", "3"]):
        result = CliRunner().invoke(cli, ["ctl", "--db", str(db), "2", *args])
        assert result.exit_code == 2 and result.stderr.count("\n") == 1, (args, result.stderr)
        assert "run 2 is not live" in result.stderr, result.stderr
        assert not gone.exists()  # the stale file is cleaned up
        stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        stale.bind(str(gone))
        stale.close()
    control.listen(gone).close()  # a new run can take the path
    result = CliRunner().invoke(cli, ["ctl", "--db", str(db), "1", "held"])
    assert result.exit_code == 2
    assert result.stderr == "acp-proxy: run 1 was not started with --control: it has no control socket\n"


def test_control_needs_a_recording(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["run", "--no-record", "--control", "--", "true"])
    assert result.exit_code == 2 and "--control" in result.stderr and result.stderr.count("\n") == 1
    result = CliRunner().invoke(cli, ["run", "--db", str(tmp_path / "x.db"), "--break", "method:(", "--", "true"])
    assert result.exit_code == 2 and result.stderr.startswith("acp-proxy: ") and result.stderr.count("\n") == 1
