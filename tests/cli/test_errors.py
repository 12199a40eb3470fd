"""The exception root: every error class of the package descends from AcpProxyError and is in the
hierarchy its docstring draws, so the one place that catches it catches everything a person can
cause, and the picture stays true."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import acp_proxy
from acp_proxy import errors

INTERNAL = {
    "acp_proxy.record.journal.JournalDamaged": "a recovery's signal to skip a journal, said by store",
    "acp_proxy.web.model.NotFound": "answered as a 404 page, never raised out of a command",
    "acp_proxy.checks.compiled.Unsupported": "a schema part the compiler leaves to jsonschema, caught by its caller",
    "acp_proxy.relay.remote.asgi.BodyTooLarge": "a request body over serve's limit, answered 413 by serve",
    "acp_proxy.relay.remote.faults.StreamCut": "a stream a fault rule cuts on purpose, ended quietly by serve",
    "acp_proxy.read.checkpoints.TooLong": "answered as a 413 by the inspector, never raised out of a command",
    "acp_proxy.faults.remote.BadArgument": "a remote action's bad argument, worded as a RuleError by faults.rules",
}
"""Exceptions that are signals between parts of acp-proxy, never shown to a person as such."""

OPTIONAL = {
    "acp_proxy.mcp.server": "mcp",
    "acp_proxy.mcp.tools": "mcp",
    "acp_proxy.mcp.shapes": "mcp",
    "acp_proxy.mcp.prompts": "mcp",
    "acp_proxy.otel.exporter": "opentelemetry",
}


def package_error_classes() -> dict[str, type]:
    found: dict[str, type] = {}
    for info in pkgutil.walk_packages(acp_proxy.__path__, "acp_proxy."):
        if info.name in OPTIONAL:
            pytest.importorskip(OPTIONAL[info.name])
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if isinstance(value, type) and issubclass(value, Exception) and value.__module__ == info.name:
                found[f"{info.name}.{name}"] = value
    return found


def test_every_error_of_the_package_descends_from_the_root_and_is_drawn() -> None:
    classes = package_error_classes()
    assert len(classes) >= 10
    drawn = errors.__doc__ or ""
    for where, cls in classes.items():
        if where in INTERNAL or cls.__name__.startswith("_"):
            continue
        assert issubclass(cls, errors.AcpProxyError), f"{where} does not descend from AcpProxyError"
        assert f" {cls.__name__} " in drawn, f"{where} is missing from the hierarchy in errors.py"
