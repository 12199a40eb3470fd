"""The turns and sessions of the conversations proxy chains carry: what ``stats``, MCP and the
inspector show for each hop beside the link's own turns table, what the lists of runs and
sessions count, and the sessions that exist only inside a chain (``chain_sessions``), which the
lists of sessions show beside the sessions rows.

Owns: finding a run's ``proxy/successor`` envelopes (through the frames' ``method`` index: a
response is annotated with its request's method, so one equality finds both), unwrapping them
with ``protocol.chains.Unwrapper`` (a deeper hop the same way), and running the recorder's own
``Tracker`` over each hop's frames, so a hop's turn row is exactly what the turns table would
hold had that conversation been the link's own. The metrics are the ``turn_metrics`` view's own
SQL (the database's own view), run over those rows, so a hop's "took" is the link's "took". A
hop's sessions are the same tracker's ``sessions`` rows; ``chain_sessions`` and ``turn_counts``
keep each run's answer while the run is unchanged (``_KEPT``), so a list the
inspector polls does not track every chain recorded on each poll.

Why computed here and not recorded: the meaning of a turn stays the tracker's, once, and the
hop's frames are a pure function of the envelopes already stored, so every recording made
before this module existed shows its hops without a migration; the recorder's hot path and
the ``sessions`` / ``runs`` rows (which an inner ``initialize`` or ``session/new`` would
otherwise rewrite) are untouched.

Must not know: click, rich, HTTP, MCP, how a door draws a hop. Never writes.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from acp_proxy.protocol import wire
from acp_proxy.protocol.chains import SUCCESSOR, Unwrapper
from acp_proxy.protocol.frames import FrameRecord
from acp_proxy.protocol.tracker import Change, Tracker
from acp_proxy.read import tables
from acp_proxy.store.database import READABLE_VIEWS

_ROW_COLUMNS = ("run_id", "seq", "ts_ns", "dir", "kind", "method", "rpc_id", "raw", "cut", "forwarded")


def envelopes(db: Any, run_ids: list[int] | None) -> list[dict[str, Any]]:
    """Every ``proxy/successor`` frame (request, notification or answer) of the runs, in
    relay order."""
    where, params = tables.runs_clause(run_ids, "run_id")
    sql = f"select {', '.join(_ROW_COLUMNS)} from frames where method = ?{where} order by run_id, seq"
    cursor = db.execute(sql, [SUCCESSOR, *params])
    return [dict(zip(_ROW_COLUMNS, row, strict=True)) for row in cursor]


def unwrap(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The frames of every hop the envelopes in ``rows`` carry (each with its ``hop``), a hop's
    frames after the hop before it, each run in relay order."""
    out: list[dict[str, Any]] = []
    level = list(rows)
    while level:
        inner: list[dict[str, Any]] = []
        for _run, group in itertools.groupby(level, key=lambda r: r.get("run_id")):
            unwrapper = Unwrapper()
            inner += [found for row in group if (found := unwrapper.unwrap(row)) is not None]
        out += inner
        level = [r for r in inner if r.get("method") == SUCCESSOR or r.get("kind") in ("response", "error")]
    return out


def _record(row: Mapping[str, Any]) -> FrameRecord:
    line = str(row["raw"]).encode()
    rec = FrameRecord(row["run_id"], row["seq"], row["ts_ns"], row["dir"], line, wire.decode(line))
    rec.raw = row["raw"]
    rec.forwarded = row.get("forwarded", 1)
    return rec


def _tracked(
    frames: Iterable[Mapping[str, Any]], ended_ns: Mapping[int, int | None]
) -> Iterator[tuple[int, int, list[Change]]]:
    """(run id, hop, the recorder's ``Change``s) of each hop in ``frames`` (``unwrap``'s), by run
    then hop, tracked by the recorder's ``Tracker``; a run in ``ended_ns`` with a time is over,
    and its hop's open turns end with it as the link's do."""
    key = lambda r: (r.get("run_id"), r.get("hop"))  # noqa: E731
    # sorted is stable: each hop's frames stay in relay order.
    for (run_id, hop), group in itertools.groupby(sorted(frames, key=key), key=key):
        tracker = Tracker(run_id)
        for row in group:
            tracker.observe(_record(row))
        end = ended_ns.get(run_id)
        if end is not None:
            tracker.finish(end)
        yield run_id, hop, tracker.drain()


def _turn_rows(hop: int, changes: list[Change]) -> list[dict[str, Any]]:
    rows: dict[int, dict[str, Any]] = {}
    for change in changes:
        if change.table == "turns":
            values = dict(change.values)
            values.pop("session_key", None)
            rows[change.key["turn_key"]] = {**values, "hop": hop}
    return list(rows.values())


def hop_turns(frames: Iterable[Mapping[str, Any]], ended_ns: Mapping[int, int | None]) -> list[dict[str, Any]]:
    """The turns table's rows (without ``session_row``; with ``hop``) of each hop in ``frames``
    (``unwrap``'s), tracked by the recorder's ``Tracker``; a run in ``ended_ns`` with a time is
    over, and its hop's open turns end with it as the link's do."""
    return [row for _run, hop, changes in _tracked(frames, ended_ns) for row in _turn_rows(hop, changes)]


_SCOPED_RUNS = 500
"""A list of more runs than this looks for envelopes in every run (one ``method`` index range)
rather than naming them all: SQLite bounds the variables of a statement."""


def turn_counts(db: Any, run_ids: list[int] | None) -> Counter[tuple[int, str | None]]:
    """How many turns the hops inside the runs hold, by (run id, session id): the turns
    ``turn_stats`` lists, counted (``_chain_answers``: kept per run while it is unchanged)."""
    counts: Counter[tuple[int, str | None]] = Counter()
    for _rows, run_counts in _chain_answers(db, run_ids).values():
        counts.update(run_counts)
    return counts


def count_in_runs(db: Any, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` (runs rows with their own ``turns`` counted) with each run's hops' turns added:
    a run's turns as ``stats`` of that run lists them."""
    counts = turn_counts(db, [row["id"] for row in rows]) if rows else Counter()
    by_run = Counter[int]()
    for (run_id, _session), n in counts.items():
        by_run[run_id] += n
    for row in rows:
        row["turns"] = (row.get("turns") or 0) + by_run[row["id"]]
    return rows


def count_in_sessions(
    db: Any, rows: list[dict[str, Any]], counts: Counter[tuple[int, str | None]] | None = None
) -> list[dict[str, Any]]:
    """``rows`` (sessions rows with ``runs``, their run ids comma-separated, and their own
    ``turns``) with the turns the hops of those runs hold for the session added: a session's
    turns as ``stats`` of that session lists them. ``counts``: ``turn_counts`` of every run,
    when the caller has them already."""
    runs_of = {id(row): [int(r) for r in str(row.get("runs") or "").split(",") if r] for row in rows}
    wanted = sorted({run for runs in runs_of.values() for run in runs})
    if counts is None:
        counts = turn_counts(db, wanted) if wanted else Counter()
    if counts:
        for row in rows:
            row["turns"] = (row.get("turns") or 0) + sum(counts[(run, row["session_id"])] for run in runs_of[id(row)])
    return rows


SESSION_ROWS = 2**24
"""A session only a proxy chain carries has no ``sessions`` row: its ``row_id`` is ``-(run id *
SESSION_ROWS + n)``, n its place among that run's (1 for the first opened). Negative, so it names
no row; fixed while its run grows (a session opened later comes later); ordered like a row id
where a list breaks ties between sessions last seen at the same moment."""


def chain_sessions(db: Any) -> tuple[list[dict[str, Any]], Counter[tuple[int, str | None]]]:
    """The sessions that exist only inside proxy chains, as the lists of sessions have a row
    (``queries.SESSIONS_SELECT``'s columns, ``hop`` the shallowest it is seen at, ``runs`` its
    one run, ``turns`` every hop's turns in it), most recently seen first; and ``turn_counts`` of
    every run. A session is one of them when a hop (``session/new``, ``load``, ``resume``, ``fork``
    or a first ``sessionId`` inside ``proxy/successor`` envelopes) opens it in a run whose link
    has no session of that id (there, the link's row counts its hops' turns). One session id per
    run: its instances and the deeper hops that pass it on are one row.

    Cost: ``_chain_answers``' (a chain is tracked again only once it changed)."""
    answers = _chain_answers(db, None)
    out: list[dict[str, Any]] = []
    counts: Counter[tuple[int, str | None]] = Counter()
    for rows, run_counts in answers.values():
        out += [dict(row) for row in rows]  # the caller's to change; the kept ones stay as they are
        counts.update(run_counts)
    out.sort(key=lambda row: (row["last_seen_ns"] or 0, row["row_id"]), reverse=True)
    return out, counts


_ChainAnswer = tuple[list[dict[str, Any]], Counter[tuple[int, str | None]]]
"""A run's sessions only its chain carries, and its hops' turns by (run, session)."""
_KEPT_RUNS = 4096
"""How many runs' answers ``_chain_answers`` keeps (the least recently asked for go first)."""
_KEPT: OrderedDict[tuple[Any, ...], _ChainAnswer] = OrderedDict()
"""Each run's ``_chain_answers`` answer, by the run as it was."""
_KEPT_LOCK = threading.Lock()  # the inspector answers requests on several threads


def _kept(
    keep: bool, keys: dict[int, tuple[Any, ...]], compute: Callable[[list[int]], dict[int, _ChainAnswer]]
) -> dict[int, _ChainAnswer]:
    """Each run's answer: from ``_KEPT`` where its key (the run as it is now) is there, else
    ``compute``d for all such runs at once and, with ``keep``, kept (the least recently asked
    for go first, past ``_KEPT_RUNS``)."""
    cache = _KEPT
    answers: dict[int, _ChainAnswer] = {}
    with _KEPT_LOCK:
        for run_id, key in keys.items():
            if keep and (kept := cache.get(key)) is not None:
                cache.move_to_end(key)
                answers[run_id] = kept
    stale = [run_id for run_id in keys if run_id not in answers]
    if stale:
        fresh = compute(stale)
        with _KEPT_LOCK:
            for run_id in stale:
                answers[run_id] = fresh[run_id]
                if keep:
                    cache[keys[run_id]] = fresh[run_id]
            while len(cache) > _KEPT_RUNS:
                cache.popitem(last=False)
    return answers


def _chain_answers(db: Any, run_ids: list[int] | None) -> dict[int, _ChainAnswer]:
    """For each of the runs (None: every run) that holds ``proxy/successor`` envelopes: the
    sessions only its chain carries (``chain_sessions``' rows) and its hops' turns counted by
    (run, session).

    Cost: one ``method`` index probe counting each run's envelopes; a run is unwrapped and
    tracked only when ``_KEPT`` holds no answer for it as it is now (its envelopes counted, its
    start and end, its link's sessions), so the lists the inspector polls track a live chain,
    not every chain in view on each poll."""
    wanted = None if run_ids is None else set(run_ids)
    where, params = tables.runs_clause(
        run_ids if run_ids is not None and len(run_ids) <= _SCOPED_RUNS else None, "run_id"
    )
    sql = f"select run_id, count(*) from frames where method = ?{where} group by run_id"
    per_run = {r: n for r, n in db.execute(sql, [SUCCESSOR, *params]) if wanted is None or r in wanted}
    if not per_run:
        return {}
    runs = sorted(per_run)
    marks = ",".join("?" * len(runs))
    facts = {
        r: (started, ended)
        for r, started, ended in db.execute(f"select id, started_ns, ended_ns from runs where id in ({marks})", runs)
    }
    # Unpacked, as a door's connection may give rows (``sqlite3.Row``) that equal no tuple.
    own = {
        (run_id, session_id)
        for run_id, session_id in db.execute(
            f"""select sr.run_id, s.session_id from session_runs sr join sessions s on s.id = sr.session_row
                where sr.run_id in ({marks})""",
            runs,
        )
    }
    place = _database(db)
    keys = {
        r: (place, r, *facts.get(r, (None, None)), per_run[r], frozenset(s for o, s in own if o == r)) for r in runs
    }

    def track(stale: list[int]) -> dict[int, _ChainAnswer]:
        fresh = _sessions_of(_envelopes_of(db, stale), {r: facts.get(r, (None, None))[1] for r in stale}, own)
        return {r: fresh.get(r, ([], Counter())) for r in stale}

    return _kept(place is not None, keys, track)


def _envelopes_of(db: Any, run_ids: list[int]) -> list[dict[str, Any]]:
    """``envelopes`` of ``run_ids`` (of every run when they are too many to name)."""
    wanted = set(run_ids)
    return [r for r in envelopes(db, None if len(run_ids) > _SCOPED_RUNS else run_ids) if r["run_id"] in wanted]


def _database(db: Any) -> str | None:
    """The file of ``db``'s main database: what, with a run's id and start, names the run kept
    (None for a database in memory, whose answers are not kept)."""
    for row in db.execute("pragma database_list"):
        if row[1] == "main":
            return str(row[2]) or None
    return None


def _sessions_of(
    found: list[dict[str, Any]], ended: Mapping[int, int | None], own: set[tuple[int, str]]
) -> dict[int, tuple[list[dict[str, Any]], Counter[tuple[int, str | None]]]]:
    """``chain_sessions``' rows and turn counts of each run whose envelopes are in ``found``."""
    counts: Counter[tuple[int, str | None]] = Counter()
    rows: dict[tuple[int, str], dict[str, Any]] = {}
    for run_id, hop, changes in _tracked(unwrap(found), ended):
        counts.update((run_id, t["session_id"]) for t in _turn_rows(hop, changes))
        opened = {c.key["session_key"]: c.values.get("first_seq") for c in changes if c.table == "session_runs"}
        for change in changes:
            values = change.values
            session_id = values.get("session_id")
            if change.table != "sessions" or not isinstance(session_id, str) or (run_id, session_id) in own:
                continue
            row = rows.get((run_id, session_id))
            if row is None:
                rows[(run_id, session_id)] = {
                    "session_id": session_id,
                    **{name: values.get(name) for name in ("title", "cwd", "created_by")},
                    "first_seen_ns": values.get("first_seen_ns"),
                    "last_seen_ns": values.get("last_seen_ns"),
                    "runs": str(run_id),
                    "hop": hop,
                    "first_seq": opened.get(change.key["session_key"]) or 0,
                }
                continue
            # The same session again: a later instance in this hop, or a deeper hop passing it on.
            if hop == row["hop"]:
                row.update({name: values[name] for name in ("title", "cwd") if name in values})
            seen = [t for t in (row["first_seen_ns"], values.get("first_seen_ns")) if t is not None]
            row["first_seen_ns"] = min(seen, default=None)
            seen = [t for t in (row["last_seen_ns"], values.get("last_seen_ns")) if t is not None]
            row["last_seen_ns"] = max(seen, default=None)
    out: dict[int, tuple[list[dict[str, Any]], Counter[tuple[int, str | None]]]] = {}
    for (run_id, session_id), n in counts.items():
        out.setdefault(run_id, ([], Counter()))[1][(run_id, session_id)] = n
    for run_id, _session in rows:
        out.setdefault(run_id, ([], Counter()))
    for run_id, group in itertools.groupby(sorted(rows.items()), key=lambda item: item[0][0]):
        ordered = sorted((row for _key, row in group), key=lambda row: (row["first_seq"], row["hop"]))
        for n, row in enumerate(ordered, 1):
            row_id = -(run_id * SESSION_ROWS + min(n, SESSION_ROWS - 1))
            hop = row.pop("hop")
            del row["first_seq"]
            out[run_id][0].append({"row_id": row_id, **row, "turns": counts[(run_id, row["session_id"])], "hop": hop})
    return out


def turn_metrics(db: Any, turns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``turn_metrics``' columns (and ``hop``) of ``turns`` (``hop_turns``' rows): the database's
    own view, its SQL run over them in place of the turns table."""
    if not turns:
        return []
    columns = sorted({name for row in turns for name in row} | {"session_row"})
    picks = ", ".join(f"json_extract(value, '$.{name}') as {name}" for name in columns)
    found = db.execute("select sql from sqlite_master where type = 'view' and name = 'turn_metrics'").fetchone()
    view = found[0].split(" AS ", 1)[1] if found and " AS " in found[0] else READABLE_VIEWS["turn_metrics"]
    view = view.replace("select t.run_id,", "select t.hop, t.run_id,", 1)
    # A common table expression named like the table shadows it for this one statement.
    sql = f"with turns as (select {picks} from json_each(?)) {view}"
    cursor = db.execute(sql, [json.dumps(turns)])
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row, strict=True)) for row in cursor]


def turn_stats(db: Any, run_ids: list[int] | None, session_id: str | None) -> list[dict[str, Any]]:
    """The turns of every hop inside the runs (of ``session_id`` when given), as
    ``tables.turn_stats`` has the link's, with ``hop`` (1 and deeper), by run then hop."""
    found = envelopes(db, run_ids)
    if not found:
        return []
    runs = sorted({r["run_id"] for r in found})
    marks = ",".join("?" * len(runs))
    ended = dict(db.execute(f"select id, ended_ns from runs where id in ({marks})", runs).fetchall())
    turns = [t for t in hop_turns(unwrap(found), ended) if session_id is None or t["session_id"] == session_id]
    rows = turn_metrics(db, turns)
    order = {(t["run_id"], t["hop"], t["session_id"], t["turn_index"]): n for n, t in enumerate(turns)}
    return sorted(rows, key=lambda r: order.get((r["run_id"], r["hop"], r["session_id"], r["turn_index"]), 0))


def every_turn(db: Any, run_ids: list[int] | None, session_id: str | None) -> list[dict[str, Any]]:
    """``turn_metrics``' rows of the runs (of ``session_id`` when given), the link's own (``hop``
    0, the turns table's) and every hop's, by run then hop: what each view that lists or counts
    turns reads."""
    own = [{**row, "hop": 0} for row in tables.turn_stats(db, run_ids, session_id)]
    # sorted is stable: each hop keeps its own order.
    return sorted(own + turn_stats(db, run_ids, session_id), key=lambda row: (row["run_id"], row["hop"]))
