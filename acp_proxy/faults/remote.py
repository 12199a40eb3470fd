"""The remote fault vocabulary: the actions that exist for ``acp-proxy serve`` (Streamable HTTP
and WebSocket), their arguments, their help, and the refusal of those that mean nothing on stdio.

Owns: which actions are remote-only (``REMOTE_ONLY``), parsing their arguments (``params``, for
``rules._action_params``), the ``drop=before|after`` and ``close=stream`` arguments, the help
section ``faults-help`` appends (``HELP``), and ``refuse_on_stdio`` (one line, before the agent
starts, for a rule ``run`` could never carry out).

Must not know: trio, HTTP, WebSocket, the plan's counters. What an action does to a frame is the
gate's (``gate``); what it does on the wire is the remote relay's (``relay/remote/faults.py``).

REMOTE FAULTS (acp-proxy serve)
===============================

Every action above applies to remote messages too (a message is a WebSocket message, a POST
body, a JSON answer or one SSE event). kill signals the agent serve -- AGENT started for the
connection; before a remote upstream it has no process to signal and is only recorded. These
are the remote wire's (run refuses all but drop=after):

    drop=after           a client message is delivered, then its answer is lost: on HTTP the
                         POST's own answer is cut off (no complete response reaches the
                         client), and the response to a request is dropped wherever it
                         travels. drop (or drop=before) of a client message: never delivered,
                         and on HTTP the client is answered 202 Accepted as if it had been.
                         drop=after also works on run (the response to the request is dropped)
    hold=NAME[@D]        hold the frame (its direction waits behind it) until barrier NAME is
                         released, or D has passed (default: the connection's end)
    release=NAME         release barrier NAME once the matched frame has been written; a
                         released barrier stays released (barriers are shared by every
                         connection of one serve)
    close=stream         close the stream that carries the frame cleanly, before it: the SSE
                         stream ends with its last chunk (a POST is answered 202), a WebSocket
                         is closed with 1000 on both sides
    abort                abort the frame's stream mid-frame: half of its bytes are written, then
                         the stream is cut (an SSE stream or POST answer without its end, a
                         POST body cut upstream). A WebSocket is cut at the message boundary:
                         the agent's socket dropped without a close frame, the client's 1011
    status=CODE[:S]      answer a client message with HTTP CODE (400..599), Retry-After: S when
                         given, and do not deliver it. On WebSocket: closed with 1013 (Try
                         Again Later). Matches client-to-agent frames only
    half-close[=DIR]     close one direction (c2a or a2c; default the frame's own) from this
                         frame on, the other stays open: nothing more is delivered that way
                         (WebSocket has no half-close frame: the direction falls silent)
    restart              close the proxy's upstream connection and open a new one before the
                         frame goes on: a new WebSocket (a fresh agent connection), new HTTP
                         connections (open SSE streams of that connection drop)
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from acp_proxy.protocol.vocabulary import A2C, C2A

HELP = __doc__[__doc__.index("REMOTE FAULTS") :] if __doc__ else ""

REMOTE_ONLY = ("hold", "release", "abort", "status", "half-close", "restart")
"""Actions only the remote relay carries out (``close=stream`` is one too, by its argument)."""

MAX_BARRIER_NAME = 64
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")


class BadArgument(ValueError):
    """An argument that cannot be used: ``str()`` says why, for ``rules._Bad``."""


def params(action: str, arg: str | None, duration: Any) -> dict[str, Any]:
    """The parsed argument of a remote action; ``duration(text, offset)`` parses a duration
    (the rule language's, so bounds and messages are the same)."""
    if action in ("abort", "restart"):
        if arg is not None:
            raise BadArgument(f"{action} takes no argument")
        return {}
    if action in ("hold", "release"):
        if not arg:
            raise BadArgument(f"{action} needs a barrier name, e.g. {action}=prompt")
        name, at, wait = arg.partition("@")
        if not _NAME.fullmatch(name):
            raise BadArgument(f"a barrier name is 1 to {MAX_BARRIER_NAME} letters, digits, _ . or -, got {name!r}")
        if action == "release":
            if at:
                raise BadArgument("release takes a barrier name only (the time limit belongs to hold=NAME@D)")
            return {"barrier": name}
        return {"barrier": name, "ns": duration(wait, len(name) + 1) if at else None}
    if action == "status":
        if not arg:
            raise BadArgument("status needs an HTTP status, e.g. status=503 or status=503:2 (Retry-After: 2)")
        code, colon, retry = arg.partition(":")
        if not re.fullmatch(r"\d{3}", code) or not 400 <= int(code) <= 599:
            raise BadArgument(f"status is an HTTP error status from 400 to 599, got {code!r}")
        if colon and not re.fullmatch(r"\d{1,6}", retry):
            raise BadArgument(f"Retry-After is a whole number of seconds (at most 6 digits), got {retry!r}")
        return {"code": int(code), "retry_after": int(retry) if colon else None}
    if action == "half-close":
        if arg is not None and arg not in (C2A, A2C):
            raise BadArgument(f"half-close takes c2a or a2c, got {arg!r}")
        return {"direction": arg}
    raise BadArgument(f"not a remote action: {action!r}")


def drop_params(arg: str | None) -> dict[str, Any]:
    if arg not in (None, "before", "after"):
        raise BadArgument(f"drop takes no argument but before or after (drop=after: its answer lost), got {arg!r}")
    return {"after": True} if arg == "after" else {}


def remote_only(action: str, params: dict[str, Any]) -> bool:
    """Whether a parsed rule needs the remote relay."""
    return action in REMOTE_ONLY or (action == "close" and params.get("pipe") == "stream")


def refuse_on_stdio(rules: Iterable[Any]) -> str | None:
    """One line naming the first rule ``run`` cannot carry out, or None."""
    for rule in rules:
        if remote_only(rule.action, rule.params):
            what = "close=stream" if rule.action == "close" else rule.action
            return (
                f"bad fault rule: {rule.source}: {what} is a remote fault (acp-proxy serve only; "
                f"a stdio run has no such stream) in {rule.text!r}"
            )
    return None
