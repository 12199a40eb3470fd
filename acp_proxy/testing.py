"""A Python API for test suites: put acp-proxy, with fault rules, in front of an agent.

Owns: building the command line a client under test should launch instead of the agent, and
reading back what the proxy recorded. Must not know: how the proxy relays or records.

The shape is Toxiproxy's, for stdio::

    from acp_proxy.testing import ProxiedAgent

    agent = ProxiedAgent(["my-agent", "--acp"], faults=["drop if method:session/prompt kind:response"],
                         db=tmp_path / "rec.db")
    run_my_client(agent.argv)                  # the client spawns the proxy, which spawns the agent
    assert agent.frames("fault:drop")          # the recording, through the filter language
    assert agent.faults()[0]["action"] == "drop"

The pytest fixture ``acp_proxy`` (``acp_proxy.pytest_plugin``, loaded automatically when
acp-proxy is installed) makes one of these per call, with a fresh database in ``tmp_path``.
"""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any


class ProxiedAgent:
    def __init__(
        self,
        agent: Sequence[str],
        *,
        db: str | Path,
        faults: Sequence[str] = (),
        faults_file: str | Path | None = None,
        seed: int | None = None,
        strip_replayed_notices: bool = False,
        grace: float | None = None,
        python: str = sys.executable,
    ) -> None:
        if not agent:
            raise ValueError("agent: the agent's command line is empty")
        self.agent = list(agent)
        self.db = Path(db)
        options: list[str] = ["--db", str(self.db)]
        for rule in faults:
            options += ["--fault", rule]
        if faults_file is not None:
            options += ["--faults", str(faults_file)]
        if seed is not None:
            options += ["--seed", str(seed)]
        if strip_replayed_notices:
            options.append("--strip-replayed-notices")
        if grace is not None:
            options += ["--grace", str(grace)]
        self.argv: list[str] = [python, "-m", "acp_proxy", "run", *options, "--", *self.agent]
        """The command line to give the client under test in place of the agent's."""

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        if not self.db.exists():
            return []
        conn = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True)
        conn.row_factory = sqlite3.Row
        try:
            return [dict(row) for row in conn.execute(sql, list(params))]
        finally:
            conn.close()

    def runs(self) -> list[dict[str, Any]]:
        """Every run recorded in this database, oldest first."""
        return self._query("select * from runs order by id")

    def frames(self, filter_text: str = "") -> list[dict[str, Any]]:
        """Recorded frames, in relay order, selected with the filter language."""
        from .filters import parse

        where, params = parse(filter_text).to_sql()
        return self._query(f"select * from frames where {where} order by run_id, seq", params)

    def faults(self) -> list[dict[str, Any]]:
        """Every fault applied, with the frame it was applied to."""
        return self._query(
            "select f.*, x.dir, x.kind, x.method from faults f "
            "left join frames x on x.run_id = f.run_id and x.seq = f.seq order by f.run_id, f.seq, f.id"
        )

    def sql(self, query: str, *params: Any) -> list[dict[str, Any]]:
        """Anything else, read-only."""
        return self._query(query, params)
