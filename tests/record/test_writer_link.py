"""The recorder's link to its writer process: when the recorder (and so the proxy) may go.

The writer reports the run's last transaction committed before its housekeeping (folding the
WAL into the database file), so nobody waits for that; a writer that dies before reporting is
found by its exit status, so its journal gets recovered.
"""

from __future__ import annotations

import os
import select
import threading
import types
from collections.abc import Callable

import pytest

from acp_proxy.record import writer as recorder_writer

pytestmark = pytest.mark.spawns  # every test here starts processes


def _link(writer: Callable[[int, int, object], int]) -> recorder_writer._WriterLink:
    session = types.SimpleNamespace(wake_fd=None)
    return recorder_writer._WriterLink(session, writer)  # type: ignore[arg-type]


def _alive(pid: int) -> bool:
    done, _ = os.waitpid(pid, os.WNOHANG)
    return done == 0


def test_the_recorder_goes_once_the_writer_reports_the_end_committed_not_when_it_exits() -> None:
    gate_read, gate_write = os.pipe()

    def writer(fd: int, done_fd: int, session: object) -> int:
        while os.read(fd, 65536):  # the batches, up to the recorder's end of the link
            pass
        recorder_writer._report_committed(done_fd)
        os.read(gate_read, 1)  # housekeeping that takes as long as the test says
        return 0

    link = _link(writer)
    closed: list[int] = []
    closing = threading.Thread(target=lambda: closed.append(link.close()), daemon=True)
    try:
        link.send({"batches": []})
        closing.start()
        closing.join(30)
        assert closed == [0], "close() waited for the writer's housekeeping"
        assert _alive(link.pid)
    finally:
        os.write(gate_write, b"x")
        closing.join(30)
        pidfd = os.pidfd_open(link.pid)
        ready, _, _ = select.select([pidfd], [], [], 30)
        os.close(pidfd)
        assert ready, "the writer did not exit once let go"
        _, status = os.waitpid(link.pid, 0)
        os.close(gate_read)
        os.close(gate_write)
    assert os.waitstatus_to_exitcode(status) == 0


def test_a_writer_that_dies_before_reporting_is_a_failure_the_recorder_sees() -> None:
    def writer(fd: int, done_fd: int, session: object) -> int:
        os.read(fd, 65536)
        return 1  # gone, the run's end never committed

    link = _link(writer)
    link.send({"batches": []})
    status = link.close()
    assert os.waitstatus_to_exitcode(status) == 1


def test_a_writer_killed_before_reporting_is_a_failure_the_recorder_sees() -> None:
    def writer(fd: int, done_fd: int, session: object) -> int:
        os.kill(os.getpid(), 9)
        return 0

    link = _link(writer)
    status = link.close()
    assert os.waitstatus_to_exitcode(status) == -9
