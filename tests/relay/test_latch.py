"""``pumps.Latch``: what the pumps need of ``threading.Event`` (set once, looked at, waited for
with a deadline), on a bare lock, so that no pump loads ``threading`` before the first answer."""

from __future__ import annotations

import _thread
import time

from acp_proxy.relay.pumps import Latch


def test_unset_it_waits_out_its_deadline_and_says_so() -> None:
    latch = Latch()
    t0 = time.monotonic()
    assert not latch.is_set()
    assert latch.wait(0.05) is False
    assert time.monotonic() - t0 >= 0.05
    assert latch.wait(0) is False and latch.wait(-1) is False  # a deadline already past


def test_set_it_answers_every_waiter_at_once_and_stays_set() -> None:
    latch = Latch()
    latch.set()
    latch.set()  # a second set changes nothing (and does not release a lock it does not hold)
    assert latch.is_set()
    assert latch.wait(0) and latch.wait(0)  # each wait gives the lock back for the next


def test_a_waiter_in_another_thread_wakes_when_it_is_set() -> None:
    latch, woke, waiting = Latch(), Latch(), _thread.allocate_lock()
    waiting.acquire()

    def waiter() -> None:
        waiting.release()
        if latch.wait(30):
            woke.set()

    _thread.start_new_thread(waiter, ())
    assert waiting.acquire(timeout=30)  # the thread is running (and about to wait, or waiting)
    assert not woke.is_set()
    latch.set()
    assert woke.wait(30)
