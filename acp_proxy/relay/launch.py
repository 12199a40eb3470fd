"""The ``acp-proxy`` entry point: a ``run`` starts its agent before the command line library loads.

Owns: recognising the usual spellings of ``acp-proxy run [OPTIONS] -- AGENT...`` without
click — click and the modules the query commands need take about 100 ms to import, and an
editor waits for its agent's first answer — and handing everything else (other commands,
``--help``, fault rules, sizes with units, anything it does not fully understand) to the click
CLI, which parses the whole command line again and does the same thing, only later. What it
takes, it starts at once (``spawn.begin``: the checks, then the agent), then the journal and the
threads that move bytes (``flow.start``), and only then imports the rest of the relay.

Must not know: what the options do. It builds exactly the ``RunOptions`` that ``cli.run``
builds for the same words (a test holds the two to that), and never rejects anything itself:
what it does not take, click judges.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing before the agent starts
if TYPE_CHECKING:
    from typing import Any

_FLAGS = {"--no-record": "no_record", "--strip-replayed-notices": "strip_replayed_notices"}
_VALUED = {"--db", "--grace", "--max-record-bytes", "--db-limit", "--check"}
DEFAULT_MAX_RECORD_BYTES = 16 * 1024 * 1024  # cli.run's default, "16MiB"


def fast_run_options(argv: list[str]) -> Any | None:
    """The RunOptions for ``argv`` (the words after ``acp-proxy``), or None to let click parse."""
    plan = fast_run_plan(argv)
    return None if plan is None else plan.options()


class RunPlan:
    """A ``run`` command line the launcher fully understood, before anything is imported for it."""

    def __init__(
        self,
        agent: list[str],
        db_file: str | None,
        grace: float,
        max_record: int,
        db_limit: int | None,
        check: str | None,
        strip: bool,
    ) -> None:
        self.agent = agent
        self.db_file = db_file  # None: --no-record
        self.grace = grace
        self.max_record = max_record
        self.db_limit = db_limit
        self.check = check
        self.strip = strip

    def options(self) -> Any:
        """The RunOptions click's ``run`` would build."""
        from acp_proxy.relay.options import RunOptions

        return RunOptions(
            argv=list(self.agent),
            db_path=self.db_file,
            grace=self.grace,
            max_record_bytes=self.max_record,
            db_limit=self.db_limit,
            strip_replayed_notices=self.strip,
            fault_plan=None,
            check=self.check,
            options={
                "grace": self.grace,
                "max_record_bytes": self.max_record,
                "no_record": self.db_file is None,
                "strip_replayed_notices": self.strip,
            },
        )


def fast_run_plan(argv: list[str]) -> RunPlan | None:
    """``fast_run_options`` before the RunOptions: what the launcher needs to start the agent."""
    if len(argv) < 3 or argv[0] != "run" or "--" not in argv or os.environ.get("ACP_PROXY_FAULTS"):
        return None
    cut = argv.index("--", 1)
    words, agent = argv[1:cut], argv[cut + 1 :]
    if not agent:
        return None
    given: dict[str, str | bool] = {}
    i = 0
    while i < len(words):
        word = words[i]
        name, eq, value = word.partition("=")
        if name in _FLAGS and not eq:
            key, value = _FLAGS[name], "1"
        elif name == "--check" and not eq:
            key, value = name, "full"
        elif name in _VALUED and eq:
            key = name
        elif name in _VALUED and name != "--check" and i + 1 < len(words) and not words[i + 1].startswith("-"):
            key, value = name, words[i + 1]
            i += 1
        else:
            return None
        if key in given:  # repeated: click's rule (the last one wins) is click's to apply
            return None
        given[key] = value
        i += 1
    return _plan(given, agent)


def _plan(given: dict[str, str | bool], agent: list[str]) -> RunPlan | None:
    grace = _float(given.get("--grace", "2.0"))
    max_record = _int(given.get("--max-record-bytes", str(DEFAULT_MAX_RECORD_BYTES)))
    db_limit = _int(given["--db-limit"]) if "--db-limit" in given else None
    check = given.get("--check")
    no_record = bool(given.get("no_record"))
    strip = bool(given.get("strip_replayed_notices"))
    if grace is None or max_record is None or ("--db-limit" in given and db_limit is None):
        return None
    from acp_proxy.limits import GRACE_MAX_S, MAX_DB_LIMIT, MAX_RECORD_BYTES

    if (
        grace > GRACE_MAX_S
        or max_record > MAX_RECORD_BYTES
        or (db_limit is not None and not 1 <= db_limit <= MAX_DB_LIMIT)
    ):
        return None  # out of bounds: click says so
    if check not in (None, "full", "lifecycle") or (check and no_record):
        return None
    db_text = given.get("--db")
    if db_text is not None and not _plain_db_path(db_text):
        return None
    if no_record:
        db_file = None
    elif isinstance(db_text, str):
        db_file = db_text
    else:
        from acp_proxy.locations import default_db_file

        db_file = default_db_file()
    return RunPlan(agent, db_file, grace, max_record, db_limit, check if isinstance(check, str) else None, strip)


def _plain_db_path(text: str | bool) -> bool:
    """A --db the launcher may take: UTF-8, and absent or a regular file (click explains the rest)."""
    if not isinstance(text, str) or not text:
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    import stat

    try:
        return stat.S_ISREG(os.stat(text).st_mode)
    except FileNotFoundError:
        return True
    except OSError:
        return False


def _float(text: str | bool) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    # ``value - value`` is 0 for a finite float, nan otherwise: ``math.isfinite`` without ``math``
    return value if value - value == 0 and value >= 0 and str(text).strip() == str(text) else None


def _int(text: str | bool) -> int | None:
    return int(text) if isinstance(text, str) and text.isdigit() and text.isascii() else None


def main() -> None:
    plan = fast_run_plan(sys.argv[1:])
    if plan is None:
        from acp_proxy.cli.commands import main as cli_main

        cli_main()
        return
    # The agent first (an editor waits for its answer); while its exec is under way, the few
    # modules that move bytes; then the journal and a thread per direction (``flow.start``),
    # so that an agent that answers at once is heard while the relay's other modules load.
    from acp_proxy.relay.spawn import RelayError, begin, say

    try:
        begun = begin(plan.agent, None if plan.db_file is None else os.path.abspath(plan.db_file), wait=False)
    except RelayError as exc:
        say(str(exc))
        raise SystemExit(exc.code) from None
    from acp_proxy.relay.flow import start

    options = plan.options()
    started = start(options, begun)
    from acp_proxy.relay.stdio import run_and_exit

    run_and_exit(options, begun, started)
