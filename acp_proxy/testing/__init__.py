"""The Python API for tests: `ProxiedAgent` and the `acp_proxy` pytest fixture (`pytest_plugin`)."""

from acp_proxy.testing.agent import ClientHung, ProxiedAgent

__all__ = ["ClientHung", "ProxiedAgent"]
