"""The command line: ``acp-proxy``'s click group with every command registered.

Owns: which commands there are (each lives in its own module: ``run_command``, ``lists``,
``show_diff``, ``frames_tail``, ``export_command``, ``check_command``; the group and what they
share is ``group``) and the entry point, ``main``. ``acp_proxy.cli.commands:cli`` and ``main``
are what tests, ``relay.launch`` and the README's reference import. Must not know: how frames
are relayed, decoded or stored, or what any command computes.
"""

from __future__ import annotations

from acp_proxy.cli import check_command, export_command, frames_tail, lists, run_command, show_diff
from acp_proxy.cli.group import cli
from acp_proxy.cli.run_command import build_fault_plan
from acp_proxy.replay.command import _run_of_proxy

__all__ = ["_run_of_proxy", "build_fault_plan", "cli", "main"]
_REGISTERED = (check_command, export_command, frames_tail, lists, run_command, show_diff)  # each adds its commands

cli.add_command(__import__("acp_proxy.web.command", fromlist=["ui"]).ui)
cli.add_command(__import__("acp_proxy.cli.import_command", fromlist=["import_log"]).import_log)
cli.add_command(__import__("acp_proxy.mcp.server", fromlist=["mcp"]).mcp)
cli.add_command(__import__("acp_proxy.cli.setup", fromlist=["setup"]).setup)
cli.add_command(__import__("acp_proxy.cli.setup", fromlist=["doctor"]).doctor)
cli.add_command(__import__("acp_proxy.replay.command", fromlist=["replay"]).replay)
cli.add_command(__import__("acp_proxy.cli.ctl_command", fromlist=["ctl"]).ctl)
cli.add_command(__import__("acp_proxy.cli.mark_command", fromlist=["mark"]).mark)
cli.add_command(__import__("acp_proxy.cli.mark_command", fromlist=["unmark"]).unmark)
cli.add_command(__import__("acp_proxy.cli.serve_command", fromlist=["serve"]).serve)


def main() -> None:
    cli(prog_name="acp-proxy")
