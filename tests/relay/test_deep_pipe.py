"""The agent's output pipe, deepened: a burst crosses in reads (and journal records) bigger than
the default pipe, byte-exact, journaled before it is forwarded; a first small line waits for no
big buffer. The pipe to the client is deepened as well."""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path

import pytest

from acp_proxy.record import journal as jr
from acp_proxy.relay.pumps import CHUNK, DEEP_PIPE, Pump, deepen
from tests.conftest import start_proxy, wait_for_output, watchdog

F_GETPIPE_SZ = 1032


def test_a_deep_pipe_moves_a_burst_in_big_records_byte_exact(tmp_path: Path) -> None:
    src_r, src_w = os.pipe()
    dst_r, dst_w = os.pipe()
    size = deepen(src_r)
    assert size == fcntl.fcntl(src_r, F_GETPIPE_SZ)
    assert size in (CHUNK, DEEP_PIPE)  # CHUNK only where the kernel refuses
    journal = jr.JournalWriter.create(tmp_path / "j", db_path=tmp_path / "db")
    pump = Pump(src_r, dst_w, jr.A2C, journal, size)
    pump.start("a2c")
    first = b'{"jsonrpc":"2.0","id":0,"result":{}}\n'
    burst = os.urandom(3 * DEEP_PIPE + 12345)
    got = bytearray()

    def write_all() -> None:
        os.write(src_w, first)
        view = memoryview(burst)
        while view:
            view = view[os.write(src_w, view) :]
        os.close(src_w)

    writer = threading.Thread(target=write_all)
    writer.start()
    while len(got) < len(first) + len(burst):
        chunk = os.read(dst_r, 1 << 20)
        assert chunk, "the pump stopped early"
        got += chunk
    writer.join(timeout=30)
    assert pump.finished.wait(30)
    assert bytes(got) == first + burst
    records = [r for r in jr.JournalReader(journal.fd).records() if r.kind == jr.DATA]
    assert b"".join(r.payload for r in records) == first + burst  # everything forwarded is journaled
    if size > CHUNK:
        assert max(len(r.payload) for r in records) > CHUNK
    pump.close()
    journal.close()
    for fd in (src_r, dst_r, dst_w):
        os.close(fd)


@pytest.mark.spawns
def test_the_proxy_deepens_the_pipe_to_its_client_too(tmp_path: Path) -> None:
    """Frames bigger than the client's default pipe would otherwise leave in 64 KiB writes, each
    waiting for the client to read: the proxy deepens its stdout's pipe as it does the agent's
    (where the kernel allows; nothing changes for a terminal or a file)."""
    probe = os.pipe()
    allowed = deepen(probe[0])  # what the kernel lets this user have: DEEP_PIPE, or CHUNK
    for fd in probe:
        os.close(fd)
    proc = start_proxy(["run", "--db", str(tmp_path / "rec.db"), "--", "cat"])
    timer = watchdog(proc, 60)
    try:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{}}\n')
        proc.stdin.flush()
        wait_for_output(proc.stdout, b"\n", 30)  # the pumps run: the pipe has been deepened
        size = fcntl.fcntl(proc.stdout.fileno(), F_GETPIPE_SZ)
        proc.stdin.close()
        assert proc.wait(timeout=30) == 0
    finally:
        timer.cancel()
        proc.kill()
        proc.wait(timeout=30)
    assert size == allowed
