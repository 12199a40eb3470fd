"""One session as a panel: who spoke (both sides' names and capabilities), which protocol
version, and where the session stands (its mode, its model, its usage, its state).

Owns: the panel of a session addressed by run and session id (session ids repeat across runs:
the SDK example agent always says ``0``), from the run's row (what ``initialize`` negotiated)
and the session's fold. The fold reads the run's frames without the streamed chunks (a chunk
changes no mode, model or usage), so a run of a million chunks costs its other frames. The
model is the session setup answer's ``models.currentModelId`` (unstable v1), changed by an
answered ``session/set_model``, or the config option whose category is ``model``.

Must not know: click, rich, HTTP, MCP; how a panel is rendered. Never writes.
"""

from __future__ import annotations

from typing import Any

from acp_proxy.protocol import wire
from acp_proxy.protocol.redact import Redactor
from acp_proxy.read import conversation as folding
from acp_proxy.read import queries

RUN_FIELDS = ("client_info", "agent_info", "client_capabilities", "agent_capabilities")
_SETUP = ("session/new", "session/load", "session/resume", "session/fork")


def _json(text: Any) -> Any:
    if text is None:
        return None
    try:
        return wire.loads(text)
    except ValueError:
        return text


def panel(db: Any, run_id: int, session_id: str, redactor: Redactor | None = None) -> dict[str, Any]:
    """The panel of session ``session_id`` in run ``run_id``; ``LookupError`` when the run has
    no such session."""
    run = queries.run_row(db, run_id)
    if run is None:
        raise LookupError(f"no run {run_id}")
    seen = db.execute(
        "select 1 from frames where run_id = ? and session_id = ? limit 1", [run_id, session_id]
    ).fetchone()
    if not seen:
        raise LookupError(f"run {run_id} has no session {session_id!r}")
    rows = queries.rows(
        db,
        """select * from frames where run_id = ? and dir != 'stderr'
           and (update_kind is null or update_kind not like '%chunk') order by seq""",
        [run_id],
    )
    if redactor is not None and redactor.enabled:
        rows = [redactor.frame_row(row) for row in rows]
    ended = queries.runs_ended(db, [run_id])
    conv = folding.fold_rows(rows, ended=ended).get(session_id)
    usage = None
    if conv is not None and conv.usage is not None:
        usage = {"used": conv.usage.used, "size": conv.usage.size, "cost": conv.usage.cost, "seq": conv.usage.seq}
    out: dict[str, Any] = {
        "run_id": run_id,
        "session_id": session_id,
        "protocol_version": run.get("protocol_version"),
        "status": run.get("status"),
        **{name: _json(run.get(name)) for name in RUN_FIELDS},
        "cwd": conv.cwd if conv else None,
        "title": conv.title if conv else None,
        "state": conv.state if conv else None,
        "stop_reason": conv.stop_reason if conv else None,
        "mode": conv.current_mode_id if conv else None,
        "modes": [m.get("id") for m in conv.modes or [] if isinstance(m, dict)] if conv else [],
        "model": _model(rows, session_id, conv.config_options if conv else None),
        "usage": usage,
        "turns": len(conv.turns) if conv else 0,
        "available_commands": [c.get("name") for c in (conv.available_commands or []) if isinstance(c, dict)]
        if conv
        else [],
    }
    if redactor is not None and redactor.enabled:
        out = redactor.value(out)
    return out


def _model(rows: list[dict[str, Any]], session_id: str, options: list[Any] | None) -> str | None:
    model: str | None = None
    requests: dict[Any, dict[str, Any]] = {}
    for row in rows:
        kind, method = row.get("kind"), row.get("method")
        if kind == "request" and row.get("dir") == "c2a":
            requests[row.get("rpc_id")] = row
            continue
        if kind != "response" or row.get("dir") != "a2c":
            continue
        request = requests.pop(row.get("rpc_id"), None)
        if request is None or row.get("error_code") is not None:
            continue
        method = request.get("method")
        asked, answered = _json(request.get("raw")), _json(row.get("raw"))
        params = asked.get("params") if isinstance(asked, dict) else None
        result = answered.get("result") if isinstance(answered, dict) else None
        if method in _SETUP and isinstance(result, dict):
            sid = result.get("sessionId") or (params or {}).get("sessionId")
            models = result.get("models")
            if sid == session_id and isinstance(models, dict) and isinstance(models.get("currentModelId"), str):
                model = models["currentModelId"]
        elif (
            method == "session/set_model"
            and isinstance(params, dict)
            and params.get("sessionId") == session_id
            and isinstance(params.get("modelId"), str)
        ):
            model = params["modelId"]
    for option in options or []:
        if isinstance(option, dict) and (option.get("category") == "model" or option.get("id") == "model"):
            value = option.get("currentValue")
            if isinstance(value, str):
                model = value
    return model


def sessions_of_run(db: Any, run_id: int) -> list[str]:
    """The ids of the sessions run ``run_id`` spoke of, in the order they first appear."""
    return [
        r[0]
        for r in db.execute(
            """select session_id from frames where run_id = ? and session_id is not null
               group by session_id order by min(seq)""",
            [run_id],
        )
    ]
