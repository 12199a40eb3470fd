"""Where recordings live by default. Kept apart from ``store`` so that ``acp-proxy run`` can
find its database without importing SQLite helpers before the agent starts."""

from __future__ import annotations

import os
from pathlib import Path


def default_db_path() -> Path:
    """``$ACP_PROXY_DB``, else ``$XDG_DATA_HOME/acp-proxy/acp-proxy.db`` (``~/.local/share``)."""
    explicit = os.environ.get("ACP_PROXY_DB")
    if explicit:
        return Path(explicit).expanduser()
    data_home = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(data_home) / "acp-proxy" / "acp-proxy.db"
