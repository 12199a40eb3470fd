"""The catalogue of conformance rules: what each rule says, how grave breaking it is, where the
spec says it; and the finding that reports a broken rule.

Owns: ``RULES`` (id -> ``Rule``: severity, the section of the document of the negotiated
version it comes from, a one-line summary) and ``Finding``. A MUST of the spec is an error, a
SHOULD a warning; each finding points at the frame that broke it (``run_id``, ``seq``).

Must not know: how frames are read or checked (``lifecycle``, ``schema``), SQL, click or rich.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

Severity = Literal["error", "warning", "info"]

_P2 = "v2-draft/prompt-lifecycle.md"
_P1 = "v1/prompt-turn.mdx"
_S1 = "v1/session-setup.mdx"
_S2 = "v2-draft/session-setup.mdx"
_JSONRPC = "https://www.jsonrpc.org/specification"
# Newer than the documents beside the schemas: cited by address.
_RC = "https://agentclientprotocol.com/rfds/v2/session-replay-complete"


@dataclass(frozen=True, slots=True)
class Rule:
    id: str
    severity: Severity
    spec: str
    """The section the rule comes from: of the v1 documents, or of the only version it applies to."""
    summary: str
    spec_v2: str | None = None
    """The section of the v2 draft, when the rule applies to both versions and v2 states it apart."""

    def spec_for(self, version: int | None) -> str:
        """The reference to cite for a connection of ``version`` (the v1 one when unknown)."""
        return self.spec_v2 if version == 2 and self.spec_v2 is not None else self.spec


RULES: dict[str, Rule] = {
    r.id: r
    for r in (
        Rule(
            "jsonrpc/not-json",
            "error",
            "v1/transports.mdx#stdio",
            "every line on stdin/stdout is a JSON-RPC message (MUST NOT write anything else)",
            "v2-draft/transports.mdx#stdio",
        ),
        Rule(
            "jsonrpc/unknown-id",
            "error",
            f"{_JSONRPC}#response_object",
            "a response answers a request that is pending",
        ),
        Rule(
            "jsonrpc/duplicate-id",
            "error",
            f"{_JSONRPC}#request_object",
            "a request id is not reused while a request with that id is pending",
        ),
        Rule(
            "jsonrpc/unanswered",
            "warning",
            f"{_JSONRPC}#response_object",
            "every request is answered before the connection ends",
        ),
        Rule(
            "ext/method-name",
            "warning",
            "v1/extensibility.mdx#extension-methods",
            "methods outside the schema start with _",
            "v2-draft/extensibility.mdx#extension-methods",
        ),
        Rule(
            "ext/update-name",
            "warning",
            "v1/extensibility.mdx#extension-methods",
            "session/update variants outside the schema start with _ (others are reserved for ACP)",
            "v2-draft/extensibility.mdx#enum-and-tagged-union-variants",
        ),
        Rule(
            "ext/stop-reason",
            "warning",
            f"{_P1}#stop-reasons",
            "stop reasons outside the schema start with _ (others are reserved for ACP)",
            f"{_P2}#stop-reasons",
        ),
        Rule(
            "prompt/message-id",
            "error",
            f"{_P2}#2-prompt-accepted",
            "a v2 prompt response carries a non-empty messageId",
        ),
        Rule(
            "prompt/user-message",
            "error",
            f"{_P2}#2-prompt-accepted",
            "an accepted prompt is reported by a user_message(_chunk) with the same messageId",
        ),
        Rule(
            "prompt/distinct-message-id",
            "error",
            f"{_P2}#2-prompt-accepted",
            "distinct prompts get distinct message ids",
        ),
        Rule(
            "turn/running-before-output",
            "error",
            f"{_P2}#3-agent-reports-output",
            "state_update running comes before the agent's output for a prompt",
        ),
        Rule(
            "turn/idle-stop-reason",
            "error",
            f"{_P2}#4-report-completion",
            "an idle state_update that ends foreground work carries a stop reason",
        ),
        Rule(
            "turn/unfinished",
            "warning",
            f"{_P2}#4-report-completion",
            "every accepted prompt reaches idle before the connection ends",
        ),
        Rule(
            "cancel/stop-reason",
            "error",
            f"{_P1}#cancellation",
            "after session/cancel the turn ends with stop reason cancelled, not an error",
            f"{_P2}#cancellation",
        ),
        Rule(
            "cancel/stop-reason-race",
            "warning",
            f"{_P1}#cancellation",
            "after session/cancel the turn ends cancelled (it may have finished before the cancel arrived)",
            f"{_P2}#cancellation",
        ),
        Rule(
            "cancel/permission",
            "error",
            f"{_P1}#cancellation",
            "after session/cancel pending permission requests are answered cancelled",
            f"{_P2}#cancellation",
        ),
        Rule(
            "compaction/order",
            "error",
            "rfds/session-compaction.mdx#streaming-summary-content",
            "compaction: first compaction_update before chunks, chunks only while in progress",
            f"{_P2}#session-compaction",
        ),
        Rule(
            "compaction/terminal",
            "error",
            "rfds/session-compaction.mdx#identity-and-lifecycle",
            "compaction: exactly one terminal status per compactionId",
            f"{_P2}#session-compaction",
        ),
        Rule(
            "replay/notice",
            "warning",
            "rfds/session-notices.mdx#delivery-and-history",
            "live-only notices should not be sent inside a history replay window",
            f"{_P2}#session-notices",
        ),
        Rule(
            "load/replay-after-response",
            "error",
            f"{_S1}#loading-a-session",
            "session/load replays the history before responding",
        ),
        Rule(
            "resume/replay-after-response",
            "error",
            f"{_S2}#resuming-sessions",
            "v2 session/resume replays history (when asked to) before responding, never after",
        ),
        Rule(
            "resume/replayed",
            "error",
            f"{_S1}#resuming-a-session",
            "session/resume without replayFrom does not replay history (v1: session/resume never does)",
            f"{_S2}#resuming-sessions",
        ),
        Rule(
            "replay/complete-missing",
            "error",
            f"{_RC}#what-we-propose-to-do-about-it",
            "a v2 session/resume with replayFrom sends replay_complete before its successful response",
        ),
        Rule(
            "replay/complete-unexpected",
            "error",
            f"{_RC}#what-we-propose-to-do-about-it",
            "replay_complete is sent once per session/resume with replayFrom, before the response; "
            "never without replayFrom",
        ),
        Rule(
            "replay/truncated",
            "warning",
            f"{_RC}#what-we-propose-to-do-about-it",
            "a replay that ends without replay_complete and without a successful response is truncated",
        ),
        Rule(
            "replay/live-update",
            "error",
            f"{_RC}#what-we-propose-to-do-about-it",
            "the agent holds live updates (state_update) for a session while it replays its history",
        ),
        Rule(
            "tool/unknown-call",
            "warning",
            "v1/tool-calls.mdx#updating",
            "v1 tool_call_update names a tool call announced by tool_call",
        ),
        Rule(
            "capability/missing",
            "error",
            "v1/initialization.mdx#capabilities",
            "capability-gated methods are used only when the other side advertised the capability",
            "v2-draft/initialization.mdx#capabilities",
        ),
        Rule(
            "batch/rejected",
            "error",
            f"{_JSONRPC}#batch",
            "a non-empty JSON-RPC batch is processed entry by entry, not refused with one error",
            "v2-draft/transports.mdx#json-rpc-batch-messages",
        ),
        Rule(
            "batch/http-501",
            # No MUST or SHOULD is broken (the RFD documents the 501): said so peers see why.
            "info",
            "rfds/streamable-http-websocket-transport.mdx#content-negotiation-and-validation",
            "Streamable HTTP answers a batch array with 501 (a documented deviation): batches do not cross it",
        ),
        Rule(
            "batch/ignored",
            "warning",
            f"{_JSONRPC}#batch",
            "the receiver of a batch answers its requests (SHOULD: an array of responses)",
            "v2-draft/transports.mdx#json-rpc-batch-messages",
        ),
        Rule(
            "version/newer",
            "info",
            "v1/initialization.mdx#version-negotiation",
            "a peer speaking a version newer than our schemas is checked against the newest we have",
            "v2-draft/initialization.mdx#version-negotiation",
        ),
        Rule("schema/params", "error", "schema", "request and notification params match the schema"),
        Rule("schema/result", "error", "schema", "a response's result matches its request's result type"),
        Rule("schema/update", "error", "schema", "a session/update variant matches the schema"),
    )
}


@dataclass(frozen=True, slots=True)
class Finding:
    rule_id: str
    severity: Severity
    message: str
    spec: str
    run_id: int | None
    seq: int | None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)
