"""acp-proxy: see, record and break the conversation between an editor and an ACP agent."""

__version__ = "0.1.0"
