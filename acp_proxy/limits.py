"""Bounds that more than one part of acp-proxy enforces, so they are the same everywhere.

Owns: numbers only. Must not know anything else: the command line, the fault rule parser and
the testing API import it, the query commands before anything heavier.
"""

from __future__ import annotations

MAX_COUNT = 2**63 - 1
"""SQLite's largest integer: every count, limit and id a user types must fit it."""

SEED_RANGE = (-(2**63), 2**63 - 1)
"""--seed, seed=N and seed = N: a 64-bit integer (it is recorded on the run)."""

GRACE_MAX_S = 3600
"""run --grace: longer than an hour for an agent to exit is surely a mistake."""

MAX_RECORD_BYTES = 1_000_000_000
"""run --max-record-bytes: SQLite's longest TEXT or BLOB value."""

MAX_DB_LIMIT = 2**48
"""run --db-limit: SQLite's largest database is 281 TB."""

EXPORT_FORMAT = 1
"""The newest ``acp_proxy_export`` header format: what ``export`` writes, the most ``import`` reads."""

CHECK_MAX_JOBS = 8
"""`check --jobs`: at most this many processes (each a fresh interpreter with compiled schemas)."""

CHECK_AUTO_JOBS_FRAMES = 100_000
"""`check --jobs auto` uses more than one process from this many frames on: below it one process
checks them in about a second, less than a worker's start-up would cost."""
