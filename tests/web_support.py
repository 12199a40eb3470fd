"""Recordings for the inspector's tests: a synthetic conversation recorded through acp-proxy's own
recorder (real decoding, pairing and fold), with secrets of each kind planted, and helpers that
talk to the Datasette app in-process."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

from acp_proxy.record import journal
from acp_proxy.record.session import Session

SESSION = "sess-web-1"
SECRETS = {
    "header": "Bearer hdr-9f8e7d6c5b4a",
    "env": "envsecret-31337-value",
    "key": "sk-ant-api03-" + "Zq7" * 10,
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ3ZWIifQ.c2lnbmF0dXJlLW9mLWEtand0",
    "stderr": "sk-proj-" + "Ab9" * 9,
}


def _f(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode() + b"\n"


def _update(update: dict[str, Any]) -> bytes:
    return _f({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": SESSION, "update": update}})


def _chunk(text: str) -> bytes:
    return _update({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}})


def conversation_traffic() -> list[tuple[int, bytes]]:
    """One run: initialize (proxy headers in _meta, an unknown capability), a session, one prompt
    whose answer streams in three chunks around a tool call with a diff, a terminal with env, a
    permission request and its answer, a plan, an error, a stderr line with a key."""
    c2a, a2c, err = journal.C2A, journal.A2C, journal.STDERR
    return [
        (
            c2a,
            _f(
                {
                    "jsonrpc": "2.0",
                    "id": 0,
                    "method": "initialize",
                    "params": {
                        "protocolVersion": 1,
                        "clientCapabilities": {"fs": {"readTextFile": True}, "bogusCapability": True},
                        "clientInfo": {"name": "web-test-client", "version": "1"},
                        "_meta": {"proxy": {"headers": {"Authorization": SECRETS["header"], "Accept": "x"}}},
                    },
                }
            ),
        ),
        (
            a2c,
            _f(
                {
                    "jsonrpc": "2.0",
                    "id": 0,
                    "result": {"protocolVersion": 1, "agentInfo": {"name": "web-test-agent", "version": "2"}},
                }
            ),
        ),
        (c2a, _f({"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": "/w", "mcpServers": []}})),
        (a2c, _f({"jsonrpc": "2.0", "id": 1, "result": {"sessionId": SESSION}})),
        (
            c2a,
            _f(
                {
                    "jsonrpc": "2.0",
                    "id": 2,
                    "method": "session/prompt",
                    "params": {"sessionId": SESSION, "prompt": [{"type": "text", "text": f"use {SECRETS['key']}"}]},
                }
            ),
        ),
        (a2c, _chunk("Hello, ")),
        (a2c, _chunk("I will ")),
        (a2c, _chunk("edit a file.")),
        (
            a2c,
            _update(
                {
                    "sessionUpdate": "tool_call",
                    "toolCallId": "call_7",
                    "title": "Edit main.py",
                    "kind": "edit",
                    "status": "pending",
                }
            ),
        ),
        (
            a2c,
            _f(
                {
                    "jsonrpc": "2.0",
                    "id": 10,
                    "method": "session/request_permission",
                    "params": {
                        "sessionId": SESSION,
                        "toolCall": {"toolCallId": "call_7"},
                        "options": [
                            {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
                            {"optionId": "deny", "name": "Deny", "kind": "reject_once"},
                        ],
                    },
                }
            ),
        ),
        (c2a, _f({"jsonrpc": "2.0", "id": 10, "result": {"outcome": {"outcome": "selected", "optionId": "allow"}}})),
        (
            a2c,
            _update(
                {
                    "sessionUpdate": "tool_call_update",
                    "toolCallId": "call_7",
                    "status": "completed",
                    "content": [
                        {"type": "diff", "path": "/w/main.py", "oldText": "print(1)\n", "newText": "print(2)\n"}
                    ],
                }
            ),
        ),
        (
            a2c,
            _f(
                {
                    "jsonrpc": "2.0",
                    "id": 11,
                    "method": "terminal/create",
                    "params": {
                        "sessionId": SESSION,
                        "command": "make",
                        "args": ["test"],
                        "env": [{"name": "API_TOKEN", "value": SECRETS["env"]}],
                    },
                }
            ),
        ),
        (c2a, _f({"jsonrpc": "2.0", "id": 11, "result": {"terminalId": "term_1"}})),
        (
            a2c,
            _update(
                {
                    "sessionUpdate": "plan",
                    "entries": [{"content": "run the tests", "priority": "high", "status": "in_progress"}],
                }
            ),
        ),
        (a2c, _chunk(f"Done; token {SECRETS['jwt']}")),
        (err, f"debug: using key {SECRETS['stderr']}\n".encode()),
        (c2a, _f({"jsonrpc": "2.0", "id": 3, "method": "_vendor/ping", "params": {}})),
        (a2c, _f({"jsonrpc": "2.0", "id": 3, "error": {"code": -32601, "message": "Method not found"}})),
        (a2c, _f({"jsonrpc": "2.0", "id": 2, "result": {"stopReason": "end_turn"}})),
    ]


def record(db: Path, traffic: list[tuple[int, bytes]], argv: list[str] | None = None, step_ns: int = 2_000_000) -> int:
    """Record ``traffic`` as one finished run the way a run is recorded: journaled, then recorded
    from the journal by the real recorder; the run's id."""
    writer = journal.JournalWriter.create(journal.journal_dir(db))
    ts = time.time_ns()
    start = {"started_ns": ts, "argv": argv or ["web-test-agent", "--key", "x"], "db": str(db)}
    writer.record(journal.START, 0, ts, json.dumps(start).encode())
    for direction, data in traffic:
        ts += step_ns
        writer.data(direction, ts, data)
    writer.record(journal.META, 0, ts, json.dumps({"final": True, "exit_code": 0, "ended_ns": ts}).encode())
    writer.close()
    fd = journal.open_journal(writer.path)
    try:
        session = Session(writer.path, fd, db_path=db)
        session.recover(rescue=False)
    finally:
        os.close(fd)
    return session.run_id


def synthetic_db(path: Path) -> Path:
    record(path, conversation_traffic())
    return path


# -- in-process Datasette -----------------------------------------------------------------------

TOKEN = "test-token-1234567890"
PORT = 8799
HOST = f"127.0.0.1:{PORT}"
AUTH = {"host": HOST, "authorization": f"Bearer {TOKEN}"}


def app(db: Path, rules: list[str] | None = None, no_redact: bool = False) -> Any:
    """The Datasette instance `acp-proxy ui` serves, guard included."""
    from acp_proxy.web.command import build

    return build(db, "127.0.0.1", PORT, TOKEN, rules or [], no_redact)


def get(ds: Any, path: str, headers: dict[str, str] | None = None, **kwargs: Any) -> Any:
    """One request through Datasette's own test client (asyncio, whatever loop pytest runs)."""

    async def go() -> Any:
        return await ds.client.get(path, headers=AUTH if headers is None else headers, **kwargs)

    return asyncio.run(go())


def get_json(ds: Any, path: str) -> Any:
    response = get(ds, path)
    assert response.status_code == 200, (path, response.status_code, response.text[:500])
    return response.json()


def holds_secret(text: str) -> list[str]:
    return [name for name, secret in SECRETS.items() if secret in text or secret.split()[-1] in text]
