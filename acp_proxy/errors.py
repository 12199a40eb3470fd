"""The exception root of acp-proxy: every mistake a person can make, or a peer can cause, that
must end in one clear line instead of a traceback.

Owns: the hierarchy, nothing else. Each module raises the most specific class; the command
group (``cli_support.Group``) catches ``AcpProxyError`` once and prints it as one line (its
``one_line()`` when it has one, else ``str(exc)``) with exit status ``exc.exit_code``.

Must not know: click, rich, SQL, trio. Import-cheap on purpose: the relay imports it before the
agent starts.

    AcpProxyError                 exit 2 unless the subclass says otherwise
    ├── UsageError                an option or argument a user gave cannot be used
    │   ├── FilterError           (filters)      a filter expression does not parse or is too big
    │   ├── RuleError             (faults)       a fault rule or rules file cannot be used
    │   ├── RefError              (queries)      a REF names nothing, or more than one thing
    │   ├── RedactError           (redact)       a --redact rule cannot be used
    │   ├── ImportFormatError     (importers)    a log cannot be read or is not in its format
    │   ├── OtlpError             (otel.endpoints) an OTLP endpoint or option cannot be used
    │   ├── SettingsError         (cli.editors)  an editor's settings file cannot be edited
    │   ├── ControlFailed         (relay.control_client) a live run's proxy said no, or is gone
    │   ├── ControlError          (faults.live)  a control request the proxy cannot carry out
    │   └── ToolFailure           (mcp.tools)    an MCP tool was called with what it cannot use
    ├── StoreError                (store)    the database cannot be opened, read or written
    │   ├── NotYetADatabase       (store)    nothing recorded at the path yet (tail waits)
    │   └── SqlRefused            (store)    `acp-proxy sql` was asked to do more than read
    ├── RelayError                (relay)    the run cannot start (exit 126/127 for the agent)
    ├── OtlpExportError           (otel.command) spans of an export were lost (collector down)
    ├── ClientHung                (testing)  a client under test outlived its time limit (also an
    │                                        AssertionError: it fails the test that ran it)
    ├── OutputError               (views)    stdout or the pager cannot be written (full, closed)
    └── MissingExtra              (web.command, mcp_server) an optional extra is not installed

``cli.support.Group.main`` is the one place the query commands catch it; ``relay.stdio.run_and_exit``
is the other, for ``run`` started by the launcher before click is loaded.

Every subclass is also a ``ValueError`` where it always was one (filters, faults), so callers
that caught that keep working.
"""

from __future__ import annotations


class AcpProxyError(Exception):
    """Something acp-proxy cannot do; ``str()`` is one line (or a caret diagram) for a person."""

    exit_code: int = 2


class UsageError(AcpProxyError):
    """An option or argument given by the user cannot be used."""


__all__ = ["AcpProxyError", "UsageError"]
