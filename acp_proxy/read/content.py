"""The fold's content rules: what each ``session/update`` variant does to the conversation.

Owns: applying the protocol documents' content rules to a conversation — message chunks and
upserts (v1 continuity without ids, ``messageId`` keys, replace / clear / append), tool calls
(patch fields, placeholders, content chunks), plans (v1 single plan, v2 by ``planId``, removal),
agent-owned and client terminals, compactions, latest-value session state (usage, state, info,
modes, config options, commands), notices and subagents — and the plumbing every rule uses:
where an effect happens (``_At``: its frame, run, replay window and turn), adding, keying and
touching entities, and rebuilding what a replay window re-sends.

Must not know: pairing, windows, turns or versions (the state machine's events say them, through
``fold.Folder``), frames' envelopes, SQL, rendering. Never raises on odd payloads: a rule that
cannot apply says so and the caller keeps the update raw.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from acp_proxy.protocol import events as ev
from acp_proxy.read.entities import (
    Compaction,
    Conversation,
    Entity,
    FoldInput,
    Json,
    Message,
    Notice,
    Plan,
    PromptTurn,
    SessionState,
    Subagent,
    Terminal,
    ToolCall,
    Unknown,
    Usage,
    _dict,
    _list,
    _str,
)


@dataclass(slots=True)
class _At:
    """Where an effect happens: the frame being applied."""

    seq: int
    ts_ns: int
    run: int | str | None
    replay: bool
    window: int | None = None
    """The replay window the frame is history of (the seq of the request that opened it)."""
    turn_seq: int | None = None
    """The prompt seq of the turn the frame belongs to (``ConnectionState.turn_of``)."""


@dataclass(slots=True)
class _Pending:
    """A request waiting for its response."""

    method: str
    dir: str
    id: Json
    params: dict[str, Any]
    session_id: str | None
    seq: int
    ts_ns: int
    entity: Entity | None = None
    turn: PromptTurn | None = None


MESSAGE_ROLES = {
    "user_message_chunk": "user",
    "agent_message_chunk": "agent",
    "agent_thought_chunk": "thought",
    "session_message_chunk": "session",
}
MESSAGE_UPSERTS = {
    "user_message": "user",
    "agent_message": "agent",
    "agent_thought": "thought",
    "session_message": "session",
}
# Latest-value session state that is also a timeline entry (``SessionState``), by variant.
_STATE_VARIANTS = frozenset(
    {
        "usage_update",
        "state_update",
        "session_info_update",
        "current_mode_update",
        "config_option_update",
        "available_commands_update",
        # Reports with no state a view keeps: the entry is all there is to show of them.
        "replay_complete",
        "cursor_update",
        "prompt_suggestions_update",
    }
)
# Session set-up answers carry modes and config options.
SETUP_RESULTS = frozenset({"session/new", "session/load", "session/resume", "session/fork"})
TERMINAL_METHODS = frozenset(
    {"terminal/create", "terminal/output", "terminal/wait_for_exit", "terminal/kill", "terminal/release"}
)
# ToolCall / ToolCallUpdate wire fields and the attributes they patch.
_TOOL_FIELDS = (
    ("title", "title"),
    ("name", "name"),
    ("kind", "tool_kind"),
    ("status", "status"),
    ("content", "content"),
    ("locations", "locations"),
    ("rawInput", "raw_input"),
    ("rawOutput", "raw_output"),
    ("_meta", "meta"),
    ("capabilities", "capabilities"),
)
_TOOL_DEFAULTS: dict[str, Any] = {
    "title": None,
    "name": None,
    "tool_kind": "other",
    "status": "pending",
    "raw_input": None,
    "raw_output": None,
    "meta": None,
    "capabilities": None,
}


def _id_key(value: Json) -> tuple[str, Any]:
    # JSON-RPC ids are compared as JSON values: 1 and "1" are different requests.
    if isinstance(value, (int, float, str)) or value is None:
        return (type(value).__name__, value)
    return ("other", repr(value))


class ContentRules:
    """The content half of ``fold.Folder``: the rules per update variant and their plumbing."""

    protocol_version: int | None
    conversations: dict[str | None, Conversation]
    _negotiated: dict[Any, int]
    _inferred: dict[Any, int]
    _turns: dict[tuple[Any, int], PromptTurn]
    _turn_seq: int | None
    _updates: dict[str, Callable[[Conversation, _At, dict[str, Any], str], bool]]

    def _content_rules(self) -> dict[str, Callable[[Conversation, _At, dict[str, Any], str], bool]]:
        """The rule of each ``session/update`` variant the fold knows."""
        rules: dict[str, Callable[[Conversation, _At, dict[str, Any], str], bool]] = {
            "tool_call": self._tool_call,
            "tool_call_update": self._tool_call_update,
            "tool_call_content_chunk": self._tool_call_chunk,
            "plan": self._plan_v1,
            "plan_update": self._plan_update,
            "plan_removed": self._plan_removed,
            "terminal_update": self._terminal_update,
            "terminal_output_chunk": self._terminal_chunk,
            "compaction_update": self._compaction_update,
            "compaction_summary_chunk": self._compaction_chunk,
            "usage_update": self._usage,
            "state_update": self._state,
            "session_info_update": self._session_info,
            "current_mode_update": self._current_mode,
            "config_option_update": self._config_options,
            "available_commands_update": self._commands,
            "notice": self._notice,
            "subagent_update": self._subagent,
            "replay_complete": self._report,
            "cursor_update": self._report,
            "prompt_suggestions_update": self._report,
        }
        for variant in MESSAGE_ROLES:
            rules[variant] = self._message_chunk
        for variant in MESSAGE_UPSERTS:
            rules[variant] = self._message_upsert
        return rules

    # ---- plumbing

    def _version(self, run: Any) -> int:
        # Without any evidence, v1 rules: every recorded real peer so far speaks v1.
        return self._known_version(run) or 1

    def _v2(self, run: Any) -> bool:
        return self._version(run) >= 2

    def _conv(self, session_id: str | None, run: Any) -> Conversation:
        conv = self.conversations.get(session_id)
        if conv is None:
            conv = self.conversations[session_id] = Conversation(session_id=session_id)
        if run not in conv.runs:
            conv.runs.append(run)
        conv.protocol_version = self._known_version(run) or conv.protocol_version
        return conv

    def _known_version(self, run: Any) -> int | None:
        return self.protocol_version or self._negotiated.get(run) or self._inferred.get(run)

    def _session_of(self, item: FoldInput, msg: Json, events: tuple[ev.Event, ...]) -> str | None:
        if not isinstance(msg, dict):
            return None
        sid = _str(_dict(msg.get("params")).get("sessionId"))
        if sid is not None or "method" in msg:
            return sid
        for e in events:
            if isinstance(e, ev.ResponsePaired):
                return e.session_id
        return None

    def _at(self, item: FoldInput, session_id: str | None, events: tuple[ev.Event, ...] = ()) -> _At:
        window = None
        replay = bool(item.replay)
        for e in events:
            if isinstance(e, ev.UpdateReplayed):
                # History: sent inside a replay window (session/load, session/resume + replayFrom).
                replay, window = True, e.window_seq
        return _At(item.seq, item.ts_ns, item.run, replay, window, None if replay else self._turn_seq)

    def _add(self, conv: Conversation, at: _At, cls: type[Any], **fields: Any) -> Any:
        entity = cls(
            seq=at.seq,
            ts_ns=at.ts_ns,
            session_id=conv.session_id,
            turn=self._turn_index(at),
            replay=at.replay,
            run=at.run,
            rebuilt_in=at.window,
            **fields,
        )
        conv.timeline.append(entity)
        return entity

    def _turn_index(self, at: _At) -> int:
        turn = self._turns.get((at.run, at.turn_seq)) if at.turn_seq is not None else None
        return turn.index if turn is not None else 0

    def _keyed(self, conv: Conversation, at: _At, kind: str, item_id: str) -> Any:
        return conv._index.get((kind, at.run, item_id))

    def _register(self, conv: Conversation, at: _At, kind: str, item_id: str, entity: Entity) -> None:
        conv._index[(kind, at.run, item_id)] = entity
        conv._latest[(kind, item_id)] = entity

    @staticmethod
    def _touch(entity: Entity, at: _At) -> None:
        entity.updated_seq = at.seq
        entity.updated_ts_ns = at.ts_ns
        if at.replay and not entity.replay:
            entity.replayed_seq = at.seq

    @staticmethod
    def _rebuilds(entity: Entity, at: _At) -> bool:
        """Whether this touch starts the entity's content over: the first one of a replay window.

        History replayed on the same connection re-sends what is already held (v2 resume with
        replayFrom: every message, as upserts or chunks): chunks of a replayed message rebuild
        it instead of appending to the copy already held.
        """
        if at.window is None or entity.rebuilt_in == at.window:
            return False
        entity.rebuilt_in = at.window
        return True

    # ---- session/update

    def _update(self, conv: Conversation, at: _At, params: dict[str, Any]) -> None:
        update = params.get("update")
        variant = _dict(update).get("sessionUpdate")
        if not isinstance(update, dict) or not isinstance(variant, str):
            self._add(conv, at, Unknown, method="session/update", raw=update, reason="malformed")
            return
        conv.protocol_version = self._known_version(at.run) or conv.protocol_version
        handler = self._updates.get(variant)
        if handler is None:
            self._add(conv, at, Unknown, method="session/update", update_kind=variant, raw=update)
        elif not handler(conv, at, update, variant):
            self._add(
                conv,
                at,
                Unknown,
                method="session/update",
                update_kind=variant,
                raw=update,
                reason="malformed",
            )
        elif variant in _STATE_VARIANTS:
            fields = {k: v for k, v in update.items() if k != "sessionUpdate"}
            self._add(conv, at, SessionState, variant=variant, fields=fields)

    # Messages.

    def _message_chunk(self, conv: Conversation, at: _At, update: dict[str, Any], variant: str) -> bool:
        if "content" not in update:
            return False
        role = MESSAGE_ROLES[variant]
        message_id = _str(update.get("messageId"))
        last = _last_entry(conv)
        # v1 continuity never crosses a replay window's edge: history is a message of its own.
        current = (
            last
            if isinstance(last, Message)
            and last.role == role
            and last.run == at.run
            and last.replay == at.replay
            and last.rebuilt_in == at.window
            else None
        )
        msg: Message | None = None
        if message_id is not None:
            msg = self._keyed(conv, at, f"message:{role}", message_id)
            adopt = current is not None and current.message_id is None and current.from_prompt
            if msg is None and current is not None and adopt and not self._v2(at.run):
                # v1: the agent echoing the prompt it just received, now with an id. In v1 arrival
                # order is all there is; v2 reconciles through the prompt response instead.
                msg = current
                msg.message_id = message_id
                self._register(conv, at, f"message:{role}", message_id, msg)
        elif current is not None and (not current.from_prompt or not self._v2(at.run)):
            # v1 without ids: consecutive chunks of one kind are one message.
            msg = current
        if msg is None:
            msg = self._add(conv, at, Message, role=role, message_id=message_id)
            if message_id is not None:
                self._register(conv, at, f"message:{role}", message_id, msg)
        else:
            self._touch(msg, at)
            if self._rebuilds(msg, at):
                msg.content = []
        if msg.from_prompt:
            # The agent's own report of the user's message supersedes the client's copy.
            msg.content = []
            msg.from_prompt = False
        # One content block per chunk; its `_meta` belongs to the chunk, not the message.
        msg.content.append(update["content"])
        msg.chunks += 1
        if role == "session":
            self._participants(msg, update)
        return True

    def _message_upsert(self, conv: Conversation, at: _At, update: dict[str, Any], variant: str) -> bool:
        message_id = _str(update.get("messageId"))
        if message_id is None:
            return False
        role = MESSAGE_UPSERTS[variant]
        msg = self._keyed(conv, at, f"message:{role}", message_id)
        if msg is None:
            msg = self._add(conv, at, Message, role=role, message_id=message_id)
            self._register(conv, at, f"message:{role}", message_id, msg)
        else:
            self._touch(msg, at)
        if "content" in update:
            value = update["content"]
            # An array replaces everything current, chunks included; null and [] clear.
            msg.content = list(value) if isinstance(value, list) else ([] if value is None else [value])
            msg.from_prompt = False
            self._rebuilds(msg, at)
        if "_meta" in update:
            msg.meta = update["_meta"]
        if role == "session":
            self._participants(msg, update)
        return True

    @staticmethod
    def _participants(msg: Message, update: dict[str, Any]) -> None:
        # Omitted or null participant ids mean "not supplied" and keep what is known.
        for key, attr in (
            ("senderSessionId", "sender_session_id"),
            ("recipientSessionId", "recipient_session_id"),
            ("senderMessageId", "sender_message_id"),
            ("recipientMessageId", "recipient_message_id"),
        ):
            value = _str(update.get(key))
            if value is not None:
                setattr(msg, attr, value)

    # Tool calls.

    def _new_tool_call(self, conv: Conversation, at: _At, tool_call_id: str, placeholder: bool) -> ToolCall:
        tc: ToolCall = self._add(conv, at, ToolCall, tool_call_id=tool_call_id, placeholder=placeholder)
        self._register(conv, at, "tool_call", tool_call_id, tc)
        return tc

    def _patch_tool_call(self, tc: ToolCall, update: dict[str, Any], at: _At) -> None:
        v1 = not self._v2(at.run)
        for key, attr in _TOOL_FIELDS:
            if key not in update:
                continue  # omitted: unchanged
            value = update[key]
            if key in ("content", "locations"):
                value = _list(value)  # arrays replace whole; null (or []) clears
            elif key == "name" and value is None and v1:
                continue  # the v1 schema: a null name leaves the existing one unchanged
            setattr(tc, attr, value)

    def _tool_call(self, conv: Conversation, at: _At, update: dict[str, Any], _variant: str) -> bool:
        tool_call_id = _str(update.get("toolCallId"))
        if tool_call_id is None:
            return False
        tc = self._keyed(conv, at, "tool_call", tool_call_id)
        if tc is None:
            tc = self._new_tool_call(conv, at, tool_call_id, placeholder=False)
        else:
            # v1 `tool_call` announces the whole call: sent again for a known id (e.g. in a
            # replay), it replaces the call, omitted fields back to their defaults.
            self._touch(tc, at)
            for attr, default in _TOOL_DEFAULTS.items():
                setattr(tc, attr, default)
            tc.content, tc.locations, tc.placeholder = [], [], False
            self._rebuilds(tc, at)
        tc.updates += 1
        self._patch_tool_call(tc, update, at)
        return True

    def _tool_call_update(self, conv: Conversation, at: _At, update: dict[str, Any], _variant: str) -> bool:
        tool_call_id = _str(update.get("toolCallId"))
        if tool_call_id is None:
            return False
        tc = self._keyed(conv, at, "tool_call", tool_call_id)
        if tc is None:
            # v2: the first update creates the call (omitted fields take defaults). v1: an update
            # for a call never announced; keep what it says, marked as a placeholder.
            tc = self._new_tool_call(conv, at, tool_call_id, placeholder=not self._v2(at.run))
        else:
            self._touch(tc, at)
            if "content" in update:
                self._rebuilds(tc, at)  # the array replaces the content: rebuilt
        tc.updates += 1
        self._patch_tool_call(tc, update, at)
        return True

    def _tool_call_chunk(self, conv: Conversation, at: _At, update: dict[str, Any], _variant: str) -> bool:
        tool_call_id = _str(update.get("toolCallId"))
        if tool_call_id is None or "content" not in update:
            return False
        tc = self._keyed(conv, at, "tool_call", tool_call_id)
        if tc is None:
            tc = self._new_tool_call(conv, at, tool_call_id, placeholder=True)
        else:
            self._touch(tc, at)
            if self._rebuilds(tc, at):
                tc.content = []
        tc.content.append(update["content"])  # appends to whatever is current; _meta chunk-scoped
        tc.chunks += 1
        return True

    # Plans.

    def _plan_v1(self, conv: Conversation, at: _At, update: dict[str, Any], _variant: str) -> bool:
        # v1 has one plan per session, replaced completely by every `plan` update.
        plan = self._keyed(conv, at, "plan", "")
        if plan is None:
            plan = self._add(conv, at, Plan, plan_id=None)
            self._register(conv, at, "plan", "", plan)
        else:
            self._touch(plan, at)
        plan.entries = _list(update.get("entries"))
        plan.raw = update
        plan.meta = update.get("_meta")
        plan.updates += 1
        return True

    def _plan_update(self, conv: Conversation, at: _At, update: dict[str, Any], _variant: str) -> bool:
        content = _dict(update.get("plan"))
        plan_id = _str(content.get("planId"))
        if plan_id is None:
            return False
        plan = self._keyed(conv, at, "plan", plan_id)
        if plan is None:
            plan = self._add(conv, at, Plan, plan_id=plan_id)
            self._register(conv, at, "plan", plan_id, plan)
        else:
            self._touch(plan, at)
        # Each update carries the complete plan: replace everything about it.
        plan.plan_type = _str(content.get("type"))
        plan.entries = _list(content.get("entries"))
        plan.markdown = _str(content.get("content")) if plan.plan_type == "markdown" else None
        plan.uri = _str(content.get("uri"))
        plan.raw = content
        plan.meta = update.get("_meta")
        plan.removed, plan.removed_seq = False, None
        plan.updates += 1
        return True

    def _plan_removed(self, conv: Conversation, at: _At, update: dict[str, Any], _variant: str) -> bool:
        plan_id = _str(update.get("planId"))
        if plan_id is None:
            return False
        plan = self._keyed(conv, at, "plan", plan_id)
        if plan is None:
            plan = self._add(conv, at, Plan, plan_id=plan_id, plan_type=None)
            self._register(conv, at, "plan", plan_id, plan)
        else:
            self._touch(plan, at)
        plan.removed, plan.removed_seq = True, at.seq
        return True

    # Terminals.

    def _terminal(self, conv: Conversation, at: _At, terminal_id: str) -> Terminal:
        term = self._keyed(conv, at, "terminal", terminal_id)
        if term is None:
            term = self._add(conv, at, Terminal, terminal_id=terminal_id)
            self._register(conv, at, "terminal", terminal_id, term)
        else:
            self._touch(term, at)
        return term

    def _terminal_update(self, conv: Conversation, at: _At, update: dict[str, Any], _variant: str) -> bool:
        terminal_id = _str(update.get("terminalId"))
        if terminal_id is None:
            return False
        term = self._terminal(conv, at, terminal_id)
        for key, attr in (
            ("command", "command"),
            ("cwd", "cwd"),
            ("exitStatus", "exit_status"),
            ("size", "size"),
            ("capabilities", "capabilities"),
            ("_meta", "meta"),
        ):
            if key in update:
                setattr(term, attr, update[key])
        if "output" in update:
            # An authoritative snapshot: it replaces every stored byte, never merged.
            self._rebuilds(term, at)
            term.output = bytearray()
            output = update["output"]
            if output is not None:
                data = _b64(_dict(output).get("data"))
                if data is None:
                    term.decode_errors += 1
                else:
                    term.output += data
        return True

    def _terminal_chunk(self, conv: Conversation, at: _At, update: dict[str, Any], _variant: str) -> bool:
        terminal_id = _str(update.get("terminalId"))
        if terminal_id is None or "data" not in update:
            return False
        term = self._terminal(conv, at, terminal_id)
        if self._rebuilds(term, at):
            term.output = bytearray()
        # Each chunk is decoded on its own, then the bytes appended: base64 strings must never be
        # concatenated before decoding (padding), and a chunk may end inside a UTF-8 sequence.
        data = _b64(update["data"])
        term.chunks += 1
        if data is None:
            term.decode_errors += 1
        else:
            term.output += data
        return True

    def _terminal_answered(self, conv: Conversation, at: _At, pending: _Pending, result: dict[str, Any]) -> None:
        terminal_id = _str(pending.params.get("terminalId"))
        if terminal_id is None:
            return
        term = self._keyed(conv, at, "terminal", terminal_id)
        if term is None:
            # A terminal created before the recording began.
            term = self._terminal(conv, at, terminal_id)
            term.client_side = term.placeholder = True
        else:
            self._touch(term, at)
        if pending.method == "terminal/output":
            output = result.get("output")
            if isinstance(output, str):
                term.output = bytearray(output.encode("utf-8", errors="surrogatepass"))
            term.truncated = bool(result.get("truncated"))
            if isinstance(result.get("exitStatus"), dict):
                term.exit_status = result["exitStatus"]
        elif pending.method == "terminal/wait_for_exit":
            term.exit_status = {k: v for k, v in result.items() if k in ("exitCode", "signal", "_meta")}
        elif pending.method == "terminal/kill":
            term.killed = True
        elif pending.method == "terminal/release":
            term.released = True

    # Compactions.

    def _compaction(self, conv: Conversation, at: _At, compaction_id: str, placeholder: bool) -> Compaction:
        comp = self._keyed(conv, at, "compaction", compaction_id)
        if comp is None:
            # The first update fixes the position; later patches never move it.
            comp = self._add(conv, at, Compaction, compaction_id=compaction_id, placeholder=placeholder)
            self._register(conv, at, "compaction", compaction_id, comp)
        else:
            self._touch(comp, at)
        return comp

    def _compaction_update(self, conv: Conversation, at: _At, update: dict[str, Any], _variant: str) -> bool:
        compaction_id = _str(update.get("compactionId"))
        if compaction_id is None:
            return False
        comp = self._compaction(conv, at, compaction_id, placeholder=False)
        comp.placeholder = False
        comp.updates += 1
        if "status" in update:
            comp.status = _str(update["status"])
        # Patch fields: omitted unchanged, null clears, a value replaces. A materialised replay
        # entry therefore replaces (never duplicates) a summary already held.
        if "summary" in update:
            comp.summary = _list(update["summary"])
            self._rebuilds(comp, at)
        if "error" in update:
            comp.error = _str(update["error"])
        if "_meta" in update:
            comp.meta = update["_meta"]
        return True

    def _compaction_chunk(self, conv: Conversation, at: _At, update: dict[str, Any], _variant: str) -> bool:
        compaction_id = _str(update.get("compactionId"))
        if compaction_id is None or "content" not in update:
            return False
        comp = self._compaction(conv, at, compaction_id, placeholder=True)
        if self._rebuilds(comp, at):
            comp.summary = []
        if comp.placeholder and comp.status is None:
            comp.status = "in_progress"  # the schema: a first-seen id starts in progress
        comp.summary.append(update["content"])
        comp.chunks += 1
        return True

    # Latest-value state.

    def _usage(self, conv: Conversation, at: _At, update: dict[str, Any], _variant: str) -> bool:
        conv.usage = Usage(
            used=update.get("used"),
            size=update.get("size"),
            cost=update.get("cost"),
            meta=update.get("_meta"),
            seq=at.seq,
            ts_ns=at.ts_ns,
        )
        return True

    def _state(self, conv: Conversation, at: _At, update: dict[str, Any], _variant: str) -> bool:
        state = _str(update.get("state"))
        if state is None:
            return False
        conv.state, conv.state_seq = state, at.seq
        conv.stop_reason = _str(update.get("stopReason")) if state == "idle" else None
        # Which prompt turns an idle ends is the protocol state machine's (TurnEnded events).
        return True

    def _report(self, conv: Conversation, at: _At, update: dict[str, Any], _variant: str) -> bool:
        # The timeline entry (SessionState) is the whole of it; where a replay ends is the
        # state machine's (ReplayWindowClosed), not this entry's.
        return True

    def _session_info(self, conv: Conversation, at: _At, update: dict[str, Any], _variant: str) -> bool:
        if "title" in update:
            conv.title = _str(update["title"])
        if "updatedAt" in update:
            conv.updated_at = _str(update["updatedAt"])
        if "_meta" in update:
            conv.info_meta = update["_meta"]
        return True

    def _current_mode(self, conv: Conversation, at: _At, update: dict[str, Any], _variant: str) -> bool:
        conv.current_mode_id = _str(update.get("currentModeId"))
        return True

    def _config_options(self, conv: Conversation, at: _At, update: dict[str, Any], _variant: str) -> bool:
        conv.config_options = _list(update.get("configOptions"))
        return True

    def _commands(self, conv: Conversation, at: _At, update: dict[str, Any], _variant: str) -> bool:
        conv.available_commands = _list(update.get("availableCommands"))
        return True

    # Live notices and subagents.

    def _notice(self, conv: Conversation, at: _At, update: dict[str, Any], _variant: str) -> bool:
        # Notices have no id and patch nothing: each one is its own event.
        self._add(
            conv,
            at,
            Notice,
            severity=_str(update.get("severity")),
            title=_str(update.get("title")),
            description=_str(update.get("description")),
            meta=update.get("_meta"),
        )
        return True

    def _subagent(self, conv: Conversation, at: _At, update: dict[str, Any], _variant: str) -> bool:
        child = _str(update.get("sessionId"))
        if child is None:
            return False
        sub = self._keyed(conv, at, "subagent", child)
        if sub is None:
            sub = self._add(conv, at, Subagent, child_session_id=child)
            self._register(conv, at, "subagent", child, sub)
        else:
            self._touch(sub, at)
        for key, value in update.items():
            if key in ("sessionUpdate", "sessionId"):
                continue
            if value is None:
                sub.fields.pop(key, None)
            else:
                sub.fields[key] = value
        return True


def _last_entry(conv: Conversation) -> Entity | None:
    """The latest timeline entry that can hold a message's continuation: session state reports
    (usage, mode, ...) are beside the conversation, they do not end a v1 message."""
    for entity in reversed(conv.timeline):
        if not isinstance(entity, SessionState):
            return entity
    return None


def _b64(data: Json) -> bytes | None:
    if not isinstance(data, str):
        return None
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return None
