"""What each table, view and column of a recording means, as Datasette metadata.

Owns: the descriptions Datasette shows above a table and beside its columns, and each table's
default sort. Must not know: anything but the schema's meaning; it is plain data.
"""

from __future__ import annotations

from typing import Any

_NS = "nanoseconds since the Unix epoch"

_FRAME_COLUMNS = {
    "run_id": "the run (proxy process) that recorded the frame",
    "seq": "the frame's number within its run, in relay order",
    "ts_ns": f"when the proxy read the line ({_NS})",
    "dir": "which way the line travelled: c2a (client to agent), a2c (agent to client), stderr (the agent's stderr)",
    "raw": "the line exactly as it crossed the pipe, without its newline (NULL when not valid UTF-8)",
    "raw_bytes": "the line, when it is not valid UTF-8",
    "size": "the line's length in bytes, without the newline",
    "terminated": "0 for a last line that ended at EOF without a newline",
    "cut": "1 when raw holds only the first --max-record-bytes of the line",
    "kind": "request, notification, response, error, batch, invalid or stderr",
    "method": "the JSON-RPC method; a response carries the method of its request",
    "rpc_id": 'the JSON-RPC id as JSON text, so 1 and "1" differ',
    "session_id": "the ACP sessionId the frame concerns",
    "update_kind": "the session/update variant (sessionUpdate)",
    "item_id": "the id of the item an update is about: messageId, toolCallId, planId, terminalId, ...",
    "request_seq": "on a response: the seq of the request it answers",
    "latency_ns": "on a response: nanoseconds since its request",
    "error_code": "on an error response: the JSON-RPC error code",
    "error_message": "on an error response: the error message",
    "replay": "1 when sent inside a session/load or session/resume history replay window",
    "batch_seq": "on an element of a JSON-RPC batch: the seq of the batch line",
    "batch_index": "on an element of a JSON-RPC batch: its position in the batch",
    "forwarded": "0 when the proxy did not pass the frame on (a fault, or a withheld notice)",
    "unanswered": "on a request: 1 when no response came before the run ended",
    "unknown": "extension (a name starting with _) or future (not in the schema), for methods and update variants",
    "note": "why the proxy flagged, dropped or withheld the frame",
    "fault": "the fault injected on this frame, if any",
    "decode_error": "why the line is not a JSON-RPC message",
    "origin": "proxy on lines acp-proxy wrote itself (injected frames, error replies)",
}

TABLES: dict[str, Any] = {
    "runs": {
        "description": "One row per acp-proxy process: the agent command, its peers, the negotiated protocol, "
        "how it ended and what was recorded. Times are " + _NS + "; the run_overview view shows them as ISO-8601.",
        "sort_desc": "id",
        "columns": {
            "id": "the run id (REF in acp-proxy show, diff, ...)",
            "started_ns": f"when the proxy started ({_NS})",
            "ended_ns": f"when the proxy ended ({_NS})",
            "status": "running, ended or crashed",
            "argv": "the agent command, as a JSON list",
            "interactive": "1 when stdin was a terminal: the agent ran attached to it, no frames recorded",
            "options": "the run's options, as JSON",
            "protocol_version": "the protocol version the peers agreed on",
            "fault_spec": "the fault rules the run applied",
            "frames": "lines recorded (both directions and stderr)",
            "not_recorded": "lines relayed but not recorded (see not_recorded_reason)",
            "unanswered_requests": "requests no response answered before the run ended",
            "unpaired_responses": "responses that matched no pending request",
        },
    },
    "frames": {
        "description": "One row per line seen on the agent's stdin, stdout or stderr, in relay order. raw is "
        "the line verbatim. The frame_timeline and conversation views show the same rows ordered, with ISO-8601 times.",
        "sort": "seq",
        "columns": _FRAME_COLUMNS,
    },
    "sessions": {
        "description": "One row per ACP session; a session loaded again in a later run is the same row.",
        "sort_desc": "last_seen_ns",
        "columns": {
            "session_id": "the ACP sessionId",
            "created_by": "session/new, session/load, session/resume, session/fork, or seen (first met in an update)",
            "parent_session_id": "for session/fork: the session it was forked from",
            "first_seen_ns": f"first frame of the session ({_NS})",
            "last_seen_ns": f"last frame of the session ({_NS})",
        },
    },
    "session_runs": {
        "description": "Which runs each session appeared in, and how (created, loaded, resumed ...).",
    },
    "turns": {
        "description": "One row per session/prompt: when it started, was accepted, first answered and ended, and how. "
        "The turn_metrics view gives the durations in milliseconds.",
        "columns": {
            "turn_index": "1-based within the session",
            "prompt_seq": "the seq of the session/prompt request",
            "start_ns": f"the prompt was sent ({_NS})",
            "accepted_ns": f"protocol v2: the prompt was accepted ({_NS})",
            "first_output_ns": f"the agent's first update of the turn ({_NS})",
            "end_ns": f"the turn ended ({_NS})",
            "status": "running, ended, error or unfinished",
        },
    },
    "faults": {
        "description": "Faults injected by --fault rules, each on the frame (run_id, seq) it hit.",
    },
    "findings": {
        "description": "Conformance findings (acp-proxy check --save, or run --check), each on the frame "
        "(run_id, seq) that broke the rule.",
        "columns": {"rule": "the rule id, e.g. schema/invalid", "spec": "where the protocol says so"},
    },
    "run_overview": {"description": "Runs, newest first, with ISO-8601 start and end times and the duration."},
    "frame_timeline": {"description": "Every frame in relay order, with its ISO-8601 time and latency in ms."},
    "conversation": {"description": "The JSON-RPC frames (no stderr, no batch elements) in relay order."},
    "rpc_pairs": {"description": "Each request beside its response: outcome, error, latency in ms."},
    "unanswered": {"description": "Requests no response answered before their run ended."},
    "turn_metrics": {"description": "Prompt turns with their times to acceptance, first output and end, in ms."},
    "fault_log": {"description": "Injected faults in order, with the frame each one hit."},
    "finding_log": {"description": "Conformance findings in order, with the frame each one is about."},
}
