"""Read-side queries over a recording: references, runs, sessions, frames, latency statistics.

Owns: resolving a user's REF (a run id, ``last``, or a session id or unique prefix) for every
door, and the SQL the query commands run (the select lists of runs and sessions too; their
lists, which add a proxy chain's turns, are ``listing``'s). A session id that no sessions row
holds may be one only a proxy chain carries: ``hops.chain_sessions`` (asked only then) says
which run's chain, and the REF names that run. Returns plain dicts and lists, ready to render
or dump as JSON; the row helpers and the per-scope view reads are ``tables``' (``rows`` and
``iter_rows`` are reached through here too).

Must not know: click, rich, terminals, how a chain is unwrapped (``hops``'). Never writes:
every connection it gets is read-only.
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from acp_proxy.errors import UsageError
from acp_proxy.read import hops

# The row helpers live below ``hops``; read modules reach them as ``queries.rows`` as well.
from acp_proxy.read.tables import iter_rows, rows
from acp_proxy.store.database import ReadDb


class RefError(UsageError):
    """A reference that names nothing, or more than one thing; the message is for a person."""


@dataclass(frozen=True)
class Ref:
    """What a REF named: one run, or one ACP session (which may span several runs)."""

    text: str
    run_id: int | None = None
    session_row: int | None = None
    session_id: str | None = None
    chain_session: str | None = None
    """A session only ``run_id``'s proxy chain carries (no sessions row): the REF named it, and
    it stands for that run, whose conversation shows the hop's."""
    hop: int = 0

    @property
    def is_session(self) -> bool:
        return self.session_id is not None

    def describe(self) -> str:
        if self.chain_session is not None:
            return f"session {self.chain_session} (inside run {self.run_id}'s proxy chain, hop {self.hop})"
        return f"session {self.session_id}" if self.is_session else f"run {self.run_id}"


_INT_MAX = 2**63 - 1  # SQLite's integers: a larger run id cannot exist


def resolve(db: ReadDb, text: str) -> Ref:
    """What a REF names. A number is a run id and nothing else (``session:123`` for a session
    whose id starts with digits); ``last`` is the newest run; ``run:N`` and ``session:S`` say
    which explicitly; any other text is a session id or the unique start of one. A session that
    exists only inside a proxy chain (no sessions row) names its run, described as that session
    at its hop. A sessions row comes first (its exact id, then a unique prefix, found by the
    index alone); only when none answers are the chains' sessions asked (an exact id, then a
    unique prefix); a prefix that several sessions of either kind begin with asks for more."""
    text = text.strip()
    if not text:
        raise RefError("empty reference: use a run id, 'last', or a session id (or a unique prefix)")
    if not _is_utf8(text):
        raise RefError(f"the reference {text!r} is not valid UTF-8 text")
    if text == "last":
        row = db.execute("select max(id) from runs").fetchone()
        if row[0] is None:
            raise RefError("the database holds no runs yet")
        return Ref(text, run_id=row[0])
    spelled_run = text[4:] if text.startswith("run:") else None
    if spelled_run is not None and spelled_run == "last":
        return resolve(db, "last")
    number = spelled_run if spelled_run is not None else text
    if number.isascii() and number.isdigit():
        run_id = int(number)
        if run_id <= _INT_MAX and db.execute("select 1 from runs where id = ?", [run_id]).fetchone():
            return Ref(text, run_id=run_id)
        low, high = db.execute("select min(id), max(id) from runs").fetchone()
        known = f"runs are {low}..{high}" if low is not None else "the database holds no runs yet"
        hint = f"; for a session whose id starts with {number}, write session:{number}" if spelled_run is None else ""
        raise RefError(f"no run {number} ({known}{hint})")
    if spelled_run is not None:
        raise RefError(f"run:{spelled_run} is not a run id (write run:N or last)")
    prefix = text[8:] if text.startswith("session:") else text
    if not prefix:
        raise RefError("session: needs an id or the start of one, e.g. session:3f2a")
    matches = db.execute(
        "select id, session_id from sessions where session_id = ? or session_id like ? escape '\\' "
        "order by session_id = ? desc, id desc",
        [prefix, _like_prefix(prefix), prefix],
    ).fetchall()
    exact = [m for m in matches if m[1] == prefix]
    if exact:  # the usual case, answered by the sessions index alone
        return Ref(text, session_row=exact[0][0], session_id=prefix)
    ids = sorted({m[1] for m in matches})
    if len(ids) == 1:  # a sessions row first, still without a chain's work
        row = next(m for m in matches if m[1] == ids[0])
        return Ref(text, session_row=row[0], session_id=ids[0])
    # No row answers: a session only a proxy chain carries has none, and its id (or a unique
    # start of one) names the run whose chain holds it.
    chained = [row for row in hops.chain_sessions(db)[0] if str(row["session_id"]).startswith(prefix)]
    inner = [row for row in chained if row["session_id"] == prefix]
    inner_ids = sorted({str(row["session_id"]) for row in chained})
    if inner or (not ids and len(inner_ids) == 1):
        # The newest run's, as the newest row is an exact id's among the sessions rows.
        found = max(inner or chained, key=lambda row: int(row["runs"]))
        return Ref(text, run_id=int(found["runs"]), chain_session=str(found["session_id"]), hop=int(found["hop"]))
    every = sorted({*ids, *inner_ids})
    if len(every) > 1:
        shown = ", ".join(every[:5]) + (" ..." if len(every) > 5 else "")
        raise RefError(f"{prefix!r} is the start of {len(every)} session ids ({shown}); type more of it")
    if prefix is not text:
        raise RefError(f"no session matches {prefix!r} (try: acp-proxy sessions)")
    raise RefError(f"no run or session matches {text!r} (try: acp-proxy runs, acp-proxy sessions)")


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _like_prefix(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def session_prefix_length(db: ReadDb, minimum: int = 6) -> int:
    """How many leading characters name every session id the lists show unambiguously (as git
    abbreviates commit ids): ``minimum``, or more where two ids begin alike. The ids are the
    recorded sessions' and those only a proxy chain carries (``hops.chain_sessions``): a short
    id copied from a list must name the session it stood for, and ``resolve`` prefers a
    recorded session's prefix to a chain's."""
    ids = {sid for (sid,) in db.execute("select session_id from sessions where session_id is not null")}
    ids.update(row["session_id"] for row in hops.chain_sessions(db)[0] if isinstance(row["session_id"], str))
    longest = minimum
    previous: str | None = None
    for session_id in sorted(ids):
        if previous is not None:
            common = _common_prefix(previous, session_id)
            longest = max(longest, common + 1)
        previous = session_id
    return longest


def _common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def seq_width(db: ReadDb) -> int:
    """Room for ``RUN:SEQ`` of the biggest run id and the longest run."""
    row = db.execute("select max(id), max(frames) from runs").fetchone()
    return len(f"{row[0] or 0}:{row[1] or 0}")


RUNS_SELECT = """
    select r.*, (select count(*) from faults f where f.run_id = r.id) as faults_applied,
           (select count(*) from findings x where x.run_id = r.id) as findings,
           (select count(*) from turns t where t.run_id = r.id) as turns
    from runs r
"""
"""A run row with its fault, finding and (own) turn counts, as every list of runs has it
(append the rest); ``read.listing`` adds the turns of its proxy chain's hops."""

SESSIONS_SELECT = """
    select s.id as row_id, s.session_id, s.title, s.cwd, s.created_by, s.first_seen_ns, s.last_seen_ns,
           (select group_concat(run_id, ',') from
               (select run_id from session_runs sr where sr.session_row = s.id order by run_id)) as runs,
           (select count(*) from turns t where t.session_row = s.id) as turns
    from sessions s
"""
"""A session with its runs and number of (its own) turns, as every list of sessions has it;
``read.listing`` adds the turns proxy chains in those runs carry for it."""


def count(db: ReadDb, table: str) -> int:
    """How many rows ``table`` (``runs`` or ``sessions``) holds: the total a page of it is of."""
    if table not in ("runs", "sessions"):
        raise ValueError(table)
    return int(db.execute(f"select count(*) from {table}").fetchone()[0])


def run_ids_of(db: ReadDb, ref: Ref) -> list[int]:
    if not ref.is_session:
        assert ref.run_id is not None
        return [ref.run_id]
    found = [
        r[0]
        for r in db.execute(
            "select distinct run_id from session_runs where session_row = ? order by run_id", [ref.session_row]
        ).fetchall()
    ]
    if not found:  # a session only seen in frames (e.g. recorded before it was announced)
        found = [
            r[0]
            for r in db.execute(
                "select distinct run_id from frames where session_id = ? order by run_id", [ref.session_id]
            ).fetchall()
        ]
    return found


def resolve_scope(db: ReadDb, text: str) -> tuple[Ref | None, str, list[int]]:
    """A REF, or ``all``: (the resolved Ref, or None for every run; how to name it; its run ids)."""
    if text == "all":
        return None, "every run", [row[0] for row in db.execute("select id from runs order by id")]
    resolved = resolve(db, text)
    return resolved, resolved.describe(), run_ids_of(db, resolved)


def resolve_run(db: ReadDb, text: str) -> Ref | None:
    """A run named by its id alone (the inspector's ``/runs/N``); None when there is none."""
    if (
        not text.isdigit()
        or len(text) > 18
        or not db.execute("select 1 from runs where id = ?", [int(text)]).fetchone()
    ):
        return None
    return Ref(text, run_id=int(text))


def runs_by_id(db: ReadDb, run_ids: list[int], *, counted: bool = True) -> list[dict[str, Any]]:
    """These runs' rows by id; ``counted``: with ``faults_applied`` and ``findings`` counted."""
    marks = ",".join("?" * len(run_ids)) or "null"
    counts = (
        """, (select count(*) from faults f where f.run_id = r.id) as faults_applied,
             (select count(*) from findings x where x.run_id = r.id) as findings"""
        if counted
        else ""
    )
    return rows(db, f"select r.* {counts} from runs r where r.id in ({marks}) order by r.id", run_ids)


def run_row(db: ReadDb, run_id: int) -> dict[str, Any] | None:
    found = runs_by_id(db, [run_id])
    return found[0] if found else None


def runs_ended(db: ReadDb, run_ids: list[int]) -> dict[int, bool]:
    """Run id -> whether the run is over (its unanswered requests and open turns are final)."""
    marks = ",".join("?" * len(run_ids)) or "null"
    return {
        run_id: status != "running"
        for run_id, status in db.execute(f"select id, status from runs where id in ({marks})", run_ids).fetchall()
    }


def run_frames(db: ReadDb, run_id: int) -> list[dict[str, Any]]:
    """Every frame of one run, stderr included, in relay order (what a replay serves)."""
    return rows(db, "select * from frames where run_id = ? order by seq", [run_id])


def run_messages(db: ReadDb, run_id: int) -> Iterator[dict[str, Any]]:
    """A run's frames without its stderr lines, in relay order, one at a time (spans of a run of
    any size are built without holding it)."""
    return iter_rows(db, "select * from frames where run_id = ? and dir != 'stderr' order by seq", [run_id])


def run_bounds(db: ReadDb, run_id: int) -> tuple[int | None, int | None]:
    """When a run started and, once it is no longer running, when it ended."""
    row = db.execute("select started_ns, ended_ns, status from runs where id = ?", [run_id]).fetchone()
    if row is None:
        return None, None
    return row[0], (row[1] if row[2] != "running" else None)


def run_identity(db: ReadDb | sqlite3.Connection, run_id: int) -> str:
    """What names a run wherever its database is copied or moved (its id, start time to the
    nanosecond, proxy pid and source): the seed of its OpenTelemetry span and trace ids."""
    row = db.execute("select started_ns, proxy_pid, source from runs where id = ?", [run_id]).fetchone()
    started, pid, source = row if row else (None, None, None)
    return f"acp-proxy run {run_id} {started} {pid} {source}"


def database_health(db: ReadDb) -> tuple[str, int, int, int]:
    """SQLite's quick check, the number of runs and of runs still running, the schema version."""
    (check,) = db.execute("pragma quick_check").fetchone()
    runs, running = db.execute("select count(*), coalesce(sum(status = 'running'), 0) from runs").fetchone()
    version = db.execute("pragma user_version").fetchone()[0]
    return check, runs, running, version


def run_of_proxy(db: ReadDb, pid: int) -> int | None:
    """The run the proxy with this pid recorded (the newest, should the pid have been reused)."""
    row = db.execute("select max(id) from runs where proxy_pid = ?", [pid]).fetchone()
    return row[0] if row else None


def frames_of(db: ReadDb, ref: Ref, include_stderr: bool = False) -> list[dict[str, Any]]:
    """Every frame of a run, or every frame that concerns a session (responses included)."""
    stderr = "" if include_stderr else "and f.dir != 'stderr'"
    if not ref.is_session:
        return rows(db, f"select * from frames f where f.run_id = ? {stderr} order by f.seq", [ref.run_id])
    run_ids = run_ids_of(db, ref)
    marks = ",".join("?" * len(run_ids)) or "null"
    # A response carries no sessionId of its own: it belongs to the session of its request.
    sql = f"""
        select f.* from frames f
        where f.run_id in ({marks}) {stderr}
          and (f.session_id = ?
               or exists (select 1 from frames q where q.run_id = f.run_id and q.seq = f.request_seq
                          and q.session_id = ?))
        order by f.run_id, f.seq
    """
    return rows(db, sql, [*run_ids, ref.session_id, ref.session_id])


def export_frames(db: ReadDb, ref: Ref | None) -> Iterator[dict[str, Any]]:
    """What an export of ``ref`` holds, streamed: every frame of a run (stderr included), every
    run for ``None`` (``export all``), or a session's frames together with what its runs said
    before the session began — ``initialize``, ``authenticate``, the ``session/new`` request —
    so that the export is a conversation a client or a replay can start from. Requests of that
    prelude answered with another session's id are left out, with the other sessions."""
    if ref is None:
        yield from iter_rows(db, "select * from frames order by run_id, seq")
        return
    if not ref.is_session:
        yield from iter_rows(db, "select * from frames where run_id = ? order by seq", [ref.run_id])
        return
    for run_id in run_ids_of(db, ref):
        first = db.execute(
            "select min(seq) from frames where run_id = ? and session_id = ?", [run_id, ref.session_id]
        ).fetchone()[0]
        sql = """
            select f.* from frames f
            where f.run_id = ? and f.dir != 'stderr'
              and (f.session_id = ?
                   or exists (select 1 from frames q where q.run_id = f.run_id and q.seq = f.request_seq
                              and q.session_id = ?)
                   or (f.session_id is null and f.seq < ?
                       and not exists (select 1 from frames r where r.run_id = f.run_id and r.request_seq = f.seq
                                       and r.session_id is not null and r.session_id != ?)))
            order by f.seq
        """
        yield from iter_rows(db, sql, [run_id, ref.session_id, ref.session_id, first or 0, ref.session_id])


def percentile(sorted_values: list[float], fraction: float) -> float | None:
    """Nearest-rank percentile of an already sorted list."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(fraction * len(sorted_values)))
    return sorted_values[rank - 1]
