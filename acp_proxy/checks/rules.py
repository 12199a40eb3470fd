"""Conformance checks: recorded frames in, findings out (Wireshark's "expert info" for ACP).

Owns: the public face of the checks — ``check`` (frames of one or more runs in, one
``lifecycle.Checker`` per run, findings out), ``check_runs`` (the same, run by run, in a pool of
processes for ``check --jobs``), ``FRAME_COLUMNS`` (the row fields a check reads) — and the
names the doors use, gathered here:
``RULES``, ``Rule``, ``Finding`` (``catalogue``), ``Checker`` (``lifecycle``), ``schemas``
(``schema``). The parts: ``catalogue`` says what the rules are, ``schema`` validates payloads
against the official JSON Schema of the negotiated version (``compiled`` makes that fast),
``lifecycle`` keeps the rules of order and pairing no schema can state.

Must not know: SQL (a caller hands ``check_runs`` the function that reads a run), pipes, click
or rich.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

from acp_proxy.checks.catalogue import RULES, Finding, Rule, Severity
from acp_proxy.checks.lifecycle import Checker, _field
from acp_proxy.checks.schema import SchemaSet, schemas

__all__ = [
    "FRAME_COLUMNS",
    "RULES",
    "Checker",
    "Finding",
    "Rule",
    "RunChecked",
    "SchemaSet",
    "Severity",
    "check",
    "check_runs",
    "schemas",
]

FRAME_COLUMNS: tuple[str, ...] = (
    "run_id",
    "seq",
    "ts_ns",
    "dir",
    "raw",
    "raw_bytes",
    "cut",
    "kind",
    "method",
    "rpc_id",
    "session_id",
    "update_kind",
    "item_id",
    "forwarded",
    "fault",
    "batch_seq",
    "note",  # serve's HTTP status of an error answer (protocol.transports): batch/http-501
)
"""The fields of a ``frames`` row that a check reads (the checker's and ``protocol.state``'s):
a reader may fetch only these. Half the columns, and a third less time reading rows."""


def check(
    frames: Iterable[Any],
    *,
    versions: Mapping[int, int | None] | None = None,
    schema: bool = True,
    unstable: bool = True,
    ended: Mapping[int, bool] | None = None,
) -> Iterator[Finding]:
    """Findings for frames of one or more runs in (run, relay) order: one ``Checker`` per run.

    ``versions``: run id -> protocol version known from the run row; ``ended``: run id -> whether
    that run is over (default: yes), which decides whether pending requests count as unanswered.
    """
    checker: Checker | None = None
    current: Any = object()
    for rec in frames:
        run_id: Any = rec.get("run_id") if type(rec) is dict else _field(rec, "run_id")
        if run_id != current:
            if checker is not None:
                yield from checker.finish(ended=(ended or {}).get(current, True))
            current = run_id
            checker = Checker(version=(versions or {}).get(run_id), schema=schema, unstable=unstable)
        assert checker is not None
        found = checker.feed(rec)
        if found:  # most frames find nothing: no generator delegation for them
            yield from found
    if checker is not None:
        yield from checker.finish(ended=(ended or {}).get(current, True))


class RunChecked(NamedTuple):
    run_id: int
    frames: int
    findings: list[Finding]


def check_runs(
    run_ids: Sequence[int],
    frames_of: Callable[[int], Iterable[Any]],
    *,
    jobs: int = 1,
    versions: Mapping[int, int | None] | None = None,
    schema: bool = True,
    unstable: bool = True,
    ended: Mapping[int, bool] | None = None,
) -> Iterator[RunChecked]:
    """Each run checked on its own, in run order; with ``jobs`` > 1 in that many processes.

    ``frames_of(run_id)`` gives a run's frames in relay order; with ``jobs`` > 1 it runs in the
    worker processes, so it must pickle (a module-level function, or a ``functools.partial`` of
    one) and open what it reads itself. Runs are independent (one ``Checker`` each), so the
    findings are those of ``check`` over all the frames, whatever ``jobs`` is.
    """
    tasks = [
        (frames_of, run_id, (versions or {}).get(run_id), schema, unstable, (ended or {}).get(run_id, True))
        for run_id in run_ids
    ]
    if jobs <= 1 or len(tasks) <= 1:
        yield from map(_check_run, tasks)
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    # spawn, not fork: the caller may hold a database connection and run threads (a progress bar).
    with ProcessPoolExecutor(min(jobs, len(tasks)), mp_context=multiprocessing.get_context("spawn")) as pool:
        yield from pool.map(_check_run, tasks)


def _check_run(task: tuple[Callable[[int], Iterable[Any]], int, int | None, bool, bool, bool]) -> RunChecked:
    frames_of, run_id, version, schema, unstable, ended = task
    checker = Checker(version=version, schema=schema, unstable=unstable)
    found: list[Finding] = []
    for rec in frames_of(run_id):
        found += checker.feed(rec)
    found += checker.finish(ended=ended)
    return RunChecked(run_id, checker.frames, found)
