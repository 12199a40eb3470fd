"""The command-line reference in Markdown, made from the commands' own help (for README.md).

Owns: rendering click's help records — usage lines, the first paragraph of each command's help,
every option with its metavar, help and default — as Markdown. README.md calls it from cog
blocks, and CI runs ``cog --check README.md``, so the README can never describe options the
code does not have.

Must not know: what the commands do. Pure: reads the click objects, returns text.
"""

from __future__ import annotations

import click


def _context(name: str) -> tuple[click.Command, click.Context]:
    from acp_proxy.cli.commands import cli

    root = click.Context(cli, info_name="acp-proxy")
    command = cli.commands[name]
    return command, click.Context(command, info_name=name, parent=root)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def options_table(name: str) -> str:
    """A Markdown table of a command's options: the option as typed, and what it does."""
    command, ctx = _context(name)
    lines = ["| option | what it does |", "| --- | --- |"]
    for param in command.get_params(ctx):
        record = param.get_help_record(ctx)
        if record is None or not isinstance(param, click.Option) or "--help" in param.opts:
            continue
        spelled, help_text = record
        lines.append(f"| `{_cell(spelled)}` | {_cell(help_text)} |")
    return "\n".join(lines)


def _summary(command: click.Command) -> str:
    """The help's first paragraph, unwrapped."""
    text = (command.help or "").split("\n\n", 1)[0]
    return " ".join(text.split())


def usage(name: str) -> str:
    command, ctx = _context(name)
    return " ".join(command.collect_usage_pieces(ctx)).join([f"acp-proxy {name} ", ""]).strip()


def reference() -> str:
    """Every command: its usage line, what it does, its options."""
    from acp_proxy.cli.commands import cli

    parts = []
    for name in sorted(cli.commands):
        command = cli.commands[name]
        parts.append(f"#### `acp-proxy {name}`\n\n```\n{usage(name)}\n```\n\n{_summary(command)}\n")
        table = options_table(name)
        if table.count("\n") > 1:  # more than the heading
            parts.append(table + "\n")
    return "\n".join(parts)
