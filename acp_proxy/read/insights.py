"""Answers about a recording at a glance: a one-call summary with insights, the session set-up
(both sides' capabilities, protocol versions, mode, model), sessions by client, and requests
paired with their responses.

Owns: computing these as plain data for a run, a session or every run, masked by the one
``Redactor`` when masking is on. Before anything is read, the redactor reads every frame of the
runs in relay order (``prime``), so a secret it masks by name where ``initialize`` or
``session/new`` carries it (a credential header, an ``env`` value) stays masked where a later
frame, a tool title or an error message repeats it.

The insights: the hot spot (the method with the most time spent waiting for answers — not
``session/prompt``, whose answer waits for the whole turn — and the slowest tool call), the
long tail (each method's p99 against its p50), outliers (answers slower than
``OUTLIER_FACTOR`` times their method's median) and errors (error answers, unanswered
requests).

Must not know: click, rich, HTTP, MCP; how a door renders or pages these. Never writes.
"""

from __future__ import annotations

from typing import Any

from acp_proxy.protocol import wire
from acp_proxy.protocol.redact import Redactor
from acp_proxy.read import hops, listing, queries
from acp_proxy.read.frames import prime
from acp_proxy.read.queries import Ref

OUTLIER_FACTOR = 3.0
"""An answer slower than this many times its method's median is an outlier."""
LONG_TAIL_FACTOR = 3.0
"""A method whose p99 is this many times its p50 has a long tail."""
TOP = 5
"""How many outliers, errors and slow tool calls a summary names (the counts are whole)."""
SETUP_METHODS = ("session/new", "session/load", "session/resume", "session/fork")


def _masked(redactor: Redactor | None, value: Any) -> Any:
    return redactor.value(value) if redactor is not None else value


def _scope(db: Any, text: str | None) -> tuple[Ref | None, str, list[int]]:
    return queries.resolve_scope(db, text or "all")


def _in(column: str, run_ids: list[int] | None) -> tuple[str, list[Any]]:
    if run_ids is None:
        return "1", []
    return f"{column} in ({','.join('?' * len(run_ids)) or 'null'})", list(run_ids)


def _session_clause(ref: Ref | None, alias: str = "f") -> tuple[str, list[Any]]:
    """The frames of a session (a response by its request's session), or every frame."""
    if ref is None or not ref.is_session:
        return "1", []
    return (
        f"""({alias}.session_id = ? or exists (select 1 from frames q where q.run_id = {alias}.run_id
              and q.seq = {alias}.request_seq and q.session_id = ?))""",
        [ref.session_id, ref.session_id],
    )


# -- the summary ------------------------------------------------------------------------------------


def summary(db: Any, text: str | None, redactor: Redactor | None = None) -> dict[str, Any]:
    """A run's, a session's or (``text`` None or ``all``) every run's summary with insights."""
    ref, label, run_ids = _scope(db, text)
    scope_ids = None if ref is None else run_ids
    redactor = prime(db, redactor, scope_ids)
    runs_in, runs_args = _in("f.run_id", scope_ids)
    session, session_args = _session_clause(ref)
    where, args = f"{runs_in} and {session}", [*runs_args, *session_args]
    counts = db.execute(
        f"""select count(*), sum(f.dir = 'c2a'), sum(f.dir = 'a2c'), sum(f.kind = 'error'),
                   min(f.ts_ns), max(f.ts_ns), sum(f.kind = 'request' and f.unanswered = 1)
            from frames f where {where}""",
        args,
    ).fetchone()
    latencies = _latencies(db, where, args)
    methods = _methods(latencies)
    # A proxy chain's inner turns are turns too (read.hops): counted, and the slowest may be one.
    turns = hops.every_turn(db, scope_ids, ref.session_id if ref is not None else None)
    errors = queries.rows(
        db,
        f"""select f.run_id, f.seq, f.method, f.error_code, f.error_message from frames f
            where f.kind = 'error' and {where} order by f.run_id, f.seq limit ?""",
        [*args, TOP],
    )
    unanswered = queries.rows(
        db,
        f"""select f.run_id, f.seq, f.dir, f.method from frames f
            where f.kind = 'request' and f.unanswered = 1 and {where} order by f.run_id, f.seq limit ?""",
        [*args, TOP],
    )
    tools = _tool_calls(db, where, args, redactor)
    outliers = _outliers(latencies, methods)
    long_tail = [
        {k: m[k] for k in ("method", "dir", "count", "p50_ms", "p99_ms", "tail_ratio")}
        for m in sorted(methods, key=lambda m: -(m["tail_ratio"] or 0))
        if m["tail_ratio"] is not None and m["tail_ratio"] >= LONG_TAIL_FACTOR
    ]
    # A turn lasts as long as everything in it: session/prompt is the slowest turn, not a hot spot.
    waited = [m for m in methods if m["method"] != "session/prompt"]
    slowest_method = max(waited, key=lambda m: m["total_ms"], default=None)
    sessions = db.execute(
        f"select count(distinct f.session_id) from frames f where f.session_id is not null and {where}", args
    ).fetchone()[0]
    report = {
        "ref": label,
        "runs": run_ids,
        "sessions": sessions,
        "frames": counts[0],
        "frames_c2a": counts[1] or 0,
        "frames_a2c": counts[2] or 0,
        "duration_ms": (counts[5] - counts[4]) / 1e6 if counts[4] is not None else None,
        "turns": len(turns),
        "stop_reasons": _tally(t["stop_reason"] or t["status"] or "?" for t in turns),
        "slowest_turn": max(turns, key=lambda t: t["duration_ms"] or 0, default=None),
        "methods": methods,
        "insights": {
            "hot_spot": {
                "method": slowest_method,
                "tool_call": tools[0] if tools else None,
            },
            "long_tail": long_tail,
            "outliers": {"count": len(outliers), "slowest": outliers[:TOP], "factor": OUTLIER_FACTOR},
            "errors": {
                "count": counts[3] or 0,
                "first": errors,
                "unanswered": counts[6] or 0,
                "first_unanswered": unanswered,
            },
        },
        "slowest_tool_calls": tools[:TOP],
    }
    return _masked(redactor, report)


def _latencies(db: Any, where: str, args: list[Any]) -> list[dict[str, Any]]:
    """Every answer with a latency: run, seq, method, the request's direction, ms, error."""
    return [
        {
            "run_id": run_id,
            "seq": seq,
            "request_seq": request_seq,
            "method": method or "?",
            # The request travelled the other way: name the pair by the request's direction.
            "dir": "a2c" if direction == "c2a" else "c2a",
            "ms": latency / 1e6,
            "error": kind == "error",
        }
        for run_id, seq, request_seq, method, direction, kind, latency in db.execute(
            f"""select f.run_id, f.seq, f.request_seq, f.method, f.dir, f.kind, f.latency_ns from frames f
                where f.kind in ('response', 'error') and f.latency_ns is not null and {where}
                order by f.run_id, f.seq""",
            args,
        )
    ]


def _methods(latencies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by: dict[tuple[str, str], list[float]] = {}
    errors: dict[tuple[str, str], int] = {}
    for item in latencies:
        key = (item["method"], item["dir"])
        by.setdefault(key, []).append(item["ms"])
        errors[key] = errors.get(key, 0) + item["error"]
    out = []
    for (method, direction), values in sorted(by.items()):
        values.sort()
        p50, p99 = queries.percentile(values, 0.5), queries.percentile(values, 0.99)
        out.append(
            {
                "method": method,
                "dir": direction,
                "count": len(values),
                "errors": errors[(method, direction)],
                "total_ms": sum(values),
                "p50_ms": p50,
                "p95_ms": queries.percentile(values, 0.95),
                "p99_ms": p99,
                "max_ms": values[-1],
                "tail_ratio": round(p99 / p50, 2) if p50 and p99 is not None and len(values) > 1 else None,
            }
        )
    return out


def _outliers(latencies: list[dict[str, Any]], methods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Answers slower than ``OUTLIER_FACTOR`` times their method's median, slowest first (a
    method answered fewer than three times has no median to stand out from)."""
    medians = {(m["method"], m["dir"]): m["p50_ms"] for m in methods if m["count"] >= 3}
    found = []
    for item in latencies:
        median = medians.get((item["method"], item["dir"]))
        if median and item["ms"] > OUTLIER_FACTOR * median:
            found.append({**item, "median_ms": median, "times_median": round(item["ms"] / median, 1)})
    return sorted(found, key=lambda i: -i["ms"])


def _tool_calls(db: Any, where: str, args: list[Any], redactor: Redactor | None) -> list[dict[str, Any]]:
    """Tool calls by how long they ran (first report to last), slowest first, with the title and
    kind of their first report."""
    rows = queries.rows(
        db,
        f"""select f.run_id, f.session_id, f.item_id as tool_call_id, count(*) as updates,
                   min(f.seq) as first_seq, max(f.seq) as last_seq,
                   (max(f.ts_ns) - min(f.ts_ns)) / 1e6 as duration_ms
            from frames f where f.update_kind in ('tool_call', 'tool_call_update') and f.item_id is not null
              and {where}
            group by f.run_id, f.session_id, f.item_id order by duration_ms desc, f.run_id, min(f.seq)""",
        args,
    )
    for row in rows[:TOP]:
        raw = db.execute("select raw from frames where run_id = ? and seq = ?", [row["run_id"], row["first_seq"]])
        text = (raw.fetchone() or [None])[0]
        update = _update(redactor.raw(text) if redactor is not None and text else text)
        row["title"] = update.get("title") if isinstance(update.get("title"), str) else None
        row["kind"] = update.get("kind") if isinstance(update.get("kind"), str) else None
    return rows


def _update(raw: str | None) -> dict[str, Any]:
    message = _json(raw)
    params = message.get("params") if isinstance(message, dict) else None
    update = params.get("update") if isinstance(params, dict) else None
    return update if isinstance(update, dict) else {}


def _json(raw: str | None) -> Any:
    if not raw:
        return None
    try:
        return wire.loads(raw)  # depth-bounded: a deep frame is read, never a RecursionError
    except ValueError:
        return None


def _tally(values: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for value in values:
        out[value] = out.get(value, 0) + 1
    return out


# -- session metadata -----------------------------------------------------------------------------


def metadata(db: Any, text: str, redactor: Redactor | None = None) -> dict[str, Any]:
    """How a run's or a session's connection was set up: per run both sides' names, versions,
    protocol versions and capabilities, the auth methods; per session its cwd, title, how it was
    created, its modes and current mode, its models and current model (where recorded)."""
    ref, label, run_ids = _scope(db, text)
    redactor = prime(db, redactor, run_ids)
    runs = []
    for run in queries.runs_by_id(db, run_ids, counted=False):
        runs.append(
            {
                "run_id": run["id"],
                "status": run["status"],
                "protocol_version": run["protocol_version"],
                "client": {
                    "name": run["client_name"],
                    "version": run["client_version"],
                    "protocol_version": run["client_protocol_version"],
                    "info": _json(run["client_info"]),
                    "capabilities": _json(run["client_capabilities"]),
                },
                "agent": {
                    "name": run["agent_name"],
                    "version": run["agent_version"],
                    "protocol_version": run["agent_protocol_version"],
                    "info": _json(run["agent_info"]),
                    "capabilities": _json(run["agent_capabilities"]),
                    "auth_methods": _json(run["auth_methods"]),
                },
            }
        )
    sessions = _sessions_setup(db, ref, run_ids, redactor)
    return _masked(redactor, {"ref": label, "runs": runs, "sessions": sessions})


def _sessions_setup(db: Any, ref: Ref | None, run_ids: list[int], redactor: Redactor | None) -> list[dict[str, Any]]:
    if ref is not None and ref.chain_session is not None:
        return _chain_session_setup(db, ref)
    marks = ",".join("?" * len(run_ids)) or "null"
    sql = f"""select distinct s.id, s.session_id, s.cwd, s.title, s.created_by from sessions s
              join session_runs sr on sr.session_row = s.id where sr.run_id in ({marks})"""
    args: list[Any] = list(run_ids)
    if ref is not None and ref.is_session:
        sql += " and s.session_id = ?"
        args.append(ref.session_id)
    out = []
    for row in queries.rows(db, sql + " order by s.first_seen_ns, s.id", args):
        found = _session_entry(row)
        _setup_frames(db, run_ids, row["session_id"], found, redactor)
        out.append(found)
    return out


def _chain_session_setup(db: Any, ref: Ref) -> list[dict[str, Any]]:
    """A session only a proxy chain carries: what its list row knows (its cwd as its hop's
    ``session/new`` gave it, its title, how it was made) and the hop; its set-up frames are
    inside envelopes, so modes, models and MCP servers are not read from them."""
    out = []
    for row in hops.chain_sessions(db)[0]:
        if row["session_id"] == ref.chain_session and str(row["runs"]) == str(ref.run_id):  # its one run
            out.append(_session_entry(row, hop=row["hop"]))
    return out


def _session_entry(row: Any, **extra: Any) -> dict[str, Any]:
    """What a session's row says of its set-up; modes, models and MCP servers come from its
    frames where they are read (``_setup_frames``)."""
    return {
        "session_id": row["session_id"],
        **extra,
        "cwd": row["cwd"],
        "title": row["title"],
        "created_by": row["created_by"],
        "modes": None,
        "current_mode": None,
        "models": None,
        "current_model": None,
        "mcp_servers": None,
    }


def _setup_frames(db: Any, run_ids: list[int], session_id: str, found: dict[str, Any], redactor: Any) -> None:
    """Mode, model and MCP servers from the set-up requests and answers and later changes."""
    marks = ",".join("?" * len(run_ids)) or "null"
    rows = db.execute(
        f"""select f.kind, f.method, f.update_kind, f.raw from frames f where f.run_id in ({marks})
            and f.kind in ('request', 'response', 'notification') and (
              (f.method in ('session/new', 'session/load', 'session/resume', 'session/fork',
                            'session/set_mode', 'session/set_model') and (f.session_id = ? or exists (
                 select 1 from frames q where q.run_id = f.run_id and q.seq = f.request_seq and q.session_id = ?)
                 -- session/new asks without an id: its answer names the session
                 or exists (select 1 from frames r where r.run_id = f.run_id and r.request_seq = f.seq
                            and r.session_id = ?)))
              or (f.update_kind = 'current_mode_update' and f.session_id = ?))
            order by f.run_id, f.seq""",
        [*run_ids, session_id, session_id, session_id, session_id],
    )
    for kind, method, update_kind, raw in rows:
        message = _json(redactor.raw(raw) if redactor is not None and raw else raw)
        if not isinstance(message, dict):
            continue
        params: dict[str, Any] = message["params"] if isinstance(message.get("params"), dict) else {}
        result: dict[str, Any] = message["result"] if isinstance(message.get("result"), dict) else {}
        if kind == "request" and method in SETUP_METHODS and "mcpServers" in params:
            found["mcp_servers"] = params["mcpServers"]
        if kind == "response" and method in SETUP_METHODS:
            modes, models = result.get("modes"), result.get("models")
            if isinstance(modes, dict):
                found["modes"] = modes.get("availableModes")
                found["current_mode"] = modes.get("currentModeId")
            if isinstance(models, dict):
                found["models"] = models.get("availableModels")
                found["current_model"] = models.get("currentModelId")
        if kind == "request" and method == "session/set_mode" and isinstance(params.get("modeId"), str):
            found["current_mode"] = params["modeId"]
        if kind == "request" and method == "session/set_model" and isinstance(params.get("modelId"), str):
            found["current_model"] = params["modelId"]
        if update_kind == "current_mode_update":
            update: dict[str, Any] = params["update"] if isinstance(params.get("update"), dict) else {}
            if isinstance(update.get("currentModeId"), str):
                found["current_mode"] = update["currentModeId"]


# -- sessions by client ------------------------------------------------------------------------------


def sessions_by_client(db: Any, redactor: Redactor | None = None) -> list[dict[str, Any]]:
    """Every client (name and version, as ``initialize`` said) with its runs, sessions and turns,
    and the agents it talked to; the most sessions first. Its runs, sessions and turns are those
    the lists of runs and sessions (``listing``) have, a proxy chain's included: a client's turns
    are the sum of its runs' ``turns`` in ``acp-proxy runs``."""
    clients: dict[tuple[str, str | None], dict[str, Any]] = {}
    client_of: dict[int, tuple[str, str | None]] = {}
    for run in listing.runs(db, None):
        key = (run["client_name"] or "?", run["client_version"])
        client_of[run["id"]] = key
        row = clients.setdefault(
            key,
            {
                "client": key[0],
                "client_version": key[1],
                "runs": 0,
                "sessions": 0,
                "turns": 0,
                "agents": set(),
                "first_started_ns": run["started_ns"],
                "last_started_ns": run["started_ns"],
                "session_ids": {},
            },
        )
        row["runs"] += 1
        row["turns"] += run["turns"] or 0
        row["agents"].add(run["agent_name"] or "?")
        row["first_started_ns"] = min(row["first_started_ns"], run["started_ns"])
        row["last_started_ns"] = max(row["last_started_ns"], run["started_ns"])
    for session in listing.sessions(db, None):  # the latest seen first
        runs = {int(r) for r in str(session["runs"] or "").split(",") if r}
        for key in sorted({client_of[run] for run in runs if run in client_of}, key=str):
            row = clients[key]
            row["sessions"] += 1
            row["session_ids"][session["session_id"]] = None  # distinct, in the list's order
    rows = sorted(clients.values(), key=lambda row: (-row["sessions"], -row["runs"], row["client"]))
    for row in rows:
        row["agents"], row["session_ids"] = sorted(row["agents"]), list(row["session_ids"])
    return _masked(redactor if redactor is not None and redactor.enabled else None, rows)


# -- requests paired with their responses -----------------------------------------------------------


def exchanges(
    db: Any, text: str, method: str | None, offset: int, limit: int, redactor: Redactor | None = None
) -> tuple[list[dict[str, Any]], int]:
    """A run's or session's requests (of ``method`` only, when given), each with its answer, in
    relay order: ``limit`` of them after skipping ``offset``, and how many there are in all."""
    ref, _, run_ids = _scope(db, text)
    redactor = prime(db, redactor, run_ids)
    runs_in, runs_args = _in("f.run_id", run_ids)
    session, session_args = _session_clause(ref)
    where = f"f.kind = 'request' and {runs_in} and {session}"
    args = [*runs_args, *session_args]
    if method:
        where += " and f.method = ?"
        args.append(method)
    total = db.execute(f"select count(*) from frames f where {where}", args).fetchone()[0]
    requests = queries.rows(
        db, f"select * from frames f where {where} order by f.run_id, f.seq limit ? offset ?", [*args, limit, offset]
    )
    out = []
    for request in requests:
        answers = queries.rows(
            db,
            "select * from frames where run_id = ? and request_seq = ? order by seq",
            [request["run_id"], request["seq"]],
        )
        answer = answers[0] if answers else None
        if redactor is not None:
            request = redactor.frame_row(request)
            answer = redactor.frame_row(answer) if answer is not None else None
        outcome = answer["kind"] if answer is not None else ("unanswered" if request["unanswered"] else "pending")
        out.append(
            {
                "run_id": request["run_id"],
                "method": request["method"],
                "dir": request["dir"],
                "rpc_id": request["rpc_id"],
                "session_id": request["session_id"],
                "request": _side(request),
                "response": _side(answer) if answer is not None else None,
                "outcome": outcome,
                "latency_ms": answer["latency_ns"] / 1e6 if answer is not None and answer["latency_ns"] else None,
            }
        )
    return _masked(redactor, out), total


def _side(row: dict[str, Any]) -> dict[str, Any]:
    message = _json(row.get("raw"))
    body: Any = None
    if isinstance(message, dict):
        body = message.get("params") if row["kind"] == "request" else message.get("result", message.get("error"))
    return {
        "seq": row["seq"],
        "ts_ns": row["ts_ns"],
        "kind": row["kind"],
        "body": body,
        "error_code": row.get("error_code"),
        "error_message": row.get("error_message"),
    }
