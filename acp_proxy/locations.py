"""Where recordings live by default. Kept apart from ``store`` so that ``acp-proxy run`` can
find its database before its agent starts, importing nothing but ``os`` first."""

from __future__ import annotations

import os

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing before the agent starts
if TYPE_CHECKING:
    from pathlib import Path


def default_db_file() -> str:
    """``$ACP_PROXY_DB``, else ``$XDG_DATA_HOME/acp-proxy/acp-proxy.db`` (``~/.local/share``)."""
    explicit = os.environ.get("ACP_PROXY_DB")
    if explicit:
        return os.path.expanduser(explicit)
    data_home = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return os.path.join(data_home, "acp-proxy", "acp-proxy.db")


def default_db_path() -> Path:
    """``default_db_file`` as a Path."""
    from pathlib import Path

    return Path(default_db_file())
