"""The transition tables of one ACP connection's protocol state, and their states and triggers.

Owns: the three tables ``ConnectionState`` (``state.py``) follows — ``REQUEST_TRANSITIONS`` (pending
requests per direction and id), ``SESSION_TRANSITIONS`` (session instances and history replay
windows) and ``TURN_TRANSITIONS`` (prompt turns) — with the names of their states and triggers, and
how an ended turn's state and trigger are spelled in ``TurnEnded`` (``END_STATUS``, ``END_BY``).

Must not know: frames, payloads, events' fields, rows, rendering. Plain data: the machine computes
a trigger from a frame, looks the transition up here, and emits what the table names.
"""

from __future__ import annotations

# == the transition tables ========================================================================
#
# Each maps (state, trigger) to (next state, what to emit). A pair that is not listed changes
# nothing and emits nothing: that is a transition too (e.g. an error answer to a prompt that an
# idle already ended).

# -- requests, per (direction, id) -----------------------------------------------------------------
NONE = "none"
"""No request with this id is pending."""
PENDING = "pending"

# Triggers.
REQUEST = "request"
ANSWER_FRAME = "response"  # a response or error, forwarded
WITHHELD = "withheld"  # a response the proxy did not forward: the requester never saw it
CUT = "cut-response"  # a line recorded only in part whose head shows a response with this id
CANCEL = "cancel"  # $/cancel_request naming the id (the sender cancels its own request)
END = "finish"  # the connection ended

REQUEST_TRANSITIONS: dict[tuple[str, str], tuple[str, str | None]] = {
    (NONE, REQUEST): (PENDING, "RequestSent"),
    # JSON-RPC forbids reusing a pending id; if it happens anyway, answers are taken in order.
    (PENDING, REQUEST): (PENDING, "RequestSent reused"),
    (PENDING, ANSWER_FRAME): (NONE, "ResponsePaired"),  # a request queued behind it moves up
    (PENDING, WITHHELD): (PENDING, "ResponsePaired withheld"),
    (PENDING, CUT): (NONE, "ResponsePaired cut"),  # paired for latency; its payload is lost
    (PENDING, CANCEL): (PENDING, "RequestCancelled"),  # still pending: the answer must still come
    (PENDING, END): (NONE, "Unanswered"),
    (NONE, ANSWER_FRAME): (NONE, "ResponseUnpaired"),
    (NONE, WITHHELD): (NONE, "ResponseUnpaired"),
    (NONE, CUT): (NONE, None),  # a cut line that only looks like an answer: nothing to say
    (NONE, CANCEL): (NONE, "RequestCancelled unmatched"),
}

# -- sessions, per session id: instances and history replay windows --------------------------------
UNSEEN = "unseen"
OPEN = "open"
REPLAYING = "replaying"
"""At least one replay window is open: the agent's updates for the session are history."""

# Triggers.
CREATED = "created"  # session/new or session/fork answered with this id
RESTORE = "restore"  # session/load or session/resume sent, no replay asked for
RESTORE_REPLAY = "restore-replay"  # session/load, or session/resume with a non-null replayFrom
RESTORED = "restored"  # the answer to a restore without replay
RESTORED_REPLAY = "restored-replay"  # the answer to a replaying restore (closes its window)
SEEN = "seen"  # any other frame naming the session
UPDATE = "update"  # a session/update for the session
MARKER = "replay-complete"  # v2 replay_complete: the agent says its replay ended (oldest window)
ENDED_BY_CLIENT = "closed"  # session/close or session/delete answered successfully

SESSION_TRANSITIONS: dict[tuple[str, str], tuple[str, str | None]] = {
    (UNSEEN, CREATED): (OPEN, "SessionOpened"),
    (OPEN, CREATED): (OPEN, "SessionOpened"),  # an id seen before: a new instance
    (REPLAYING, CREATED): (OPEN, "SessionOpened"),  # a new instance has no window open
    (UNSEEN, RESTORE): (OPEN, "SessionOpened SessionRestoring"),
    (OPEN, RESTORE): (OPEN, "SessionRestoring"),
    (REPLAYING, RESTORE): (REPLAYING, "SessionRestoring"),
    (UNSEEN, RESTORE_REPLAY): (REPLAYING, "SessionOpened SessionRestoring ReplayWindowOpened"),
    (OPEN, RESTORE_REPLAY): (REPLAYING, "SessionRestoring ReplayWindowOpened"),
    (REPLAYING, RESTORE_REPLAY): (REPLAYING, "SessionRestoring ReplayWindowOpened"),  # windows nest
    (OPEN, RESTORED): (OPEN, "SessionRestored"),
    (REPLAYING, RESTORED): (REPLAYING, "SessionRestored"),
    # Closes the newest window; the session replays until its last window is closed.
    (REPLAYING, RESTORED_REPLAY): (OPEN, "ReplayWindowClosed SessionRestored"),
    (OPEN, RESTORED_REPLAY): (OPEN, "SessionRestored"),  # its window went with a new instance
    # The marker states where the replay ends; the answer then only restores (RESTORED). Without
    # it (peers older than the marker) the answer closes the window: the end is inferred.
    (REPLAYING, MARKER): (OPEN, "ReplayWindowClosed"),
    (UNSEEN, SEEN): (OPEN, "SessionOpened"),
    (UNSEEN, UPDATE): (OPEN, "SessionOpened"),
    (REPLAYING, UPDATE): (REPLAYING, "UpdateReplayed"),
    (OPEN, ENDED_BY_CLIENT): (OPEN, "SessionClosed"),
    (REPLAYING, ENDED_BY_CLIENT): (REPLAYING, "SessionClosed"),
}

# -- prompt turns, per session/prompt request --------------------------------------------------------
SENT = "sent"
"""The prompt was sent; not accepted, not worked on. It may be queued behind other work."""
WORKING = "working"
"""v2: the agent reported work (running / requires_action) while this was the oldest open prompt."""
ACCEPTED = "accepted"
"""v2: the answer accepted it: the user message was inserted (acceptance means insertion)."""
ENDED = "ended"
ERROR = "error"
UNFINISHED = "unfinished"
OPEN_TURN = frozenset({SENT, WORKING, ACCEPTED})
AGENT_START = WORKING
"""v2 work the agent started itself (``running`` with no turn open) starts a turn here: there
is no prompt to accept, so it is worked on from its first frame and ends at ``idle``."""

# Triggers, computed per turn (see ``_prompt_trigger`` and ``_state_update``).
ACCEPT = "accept"  # an answer with a messageId (or, for a v2 turn, without a stopReason)
ANSWERED = "answer"  # an answer that ends the turn: v1 (or a v1-shaped answer: stopReason)
REJECT = "reject"  # an error answer
WORK = "work"  # v2 state_update running / requires_action; only the session's oldest open turn
IDLE = "idle"  # v2 state_update idle, live (a replayed idle ends nothing); every open v2 turn
FINISH = "finish"  # the connection ended

TURN_TRANSITIONS: dict[tuple[str, str], tuple[str, str | None]] = {
    (SENT, ACCEPT): (ACCEPTED, "TurnAccepted"),
    (SENT, ANSWERED): (ENDED, "TurnEnded"),
    (SENT, REJECT): (ERROR, "TurnEnded"),
    (SENT, WORK): (WORKING, None),
    (SENT, IDLE): (SENT, None),  # the idle ends work this prompt is queued behind
    (SENT, FINISH): (UNFINISHED, "TurnEnded"),
    (WORKING, ACCEPT): (ACCEPTED, "TurnAccepted"),
    (WORKING, ANSWERED): (ENDED, "TurnEnded"),
    (WORKING, REJECT): (ERROR, "TurnEnded"),
    (WORKING, WORK): (WORKING, None),
    (WORKING, IDLE): (ENDED, "TurnEnded"),
    (WORKING, FINISH): (UNFINISHED, "TurnEnded"),
    (ACCEPTED, WORK): (ACCEPTED, None),
    (ACCEPTED, IDLE): (ENDED, "TurnEnded"),  # with or without a stop reason (the check says which)
    (ACCEPTED, FINISH): (UNFINISHED, "TurnEnded"),
    # The acceptance arrived after the idle that ended the work: still the prompt's acceptance.
    (ENDED, ACCEPT): (ENDED, "TurnAccepted"),
}
END_STATUS = {ENDED: "ended", ERROR: "error", UNFINISHED: "unfinished"}
END_BY = {ANSWERED: "response", REJECT: "error", IDLE: "idle", FINISH: "finish"}
