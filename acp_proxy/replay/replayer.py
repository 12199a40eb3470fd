"""Replay: a recorded agent served as a deterministic fake agent on stdio.

Owns: deciding, from a recording's frames (rows of the ``frames`` table, as
``queries.frames_of`` returns them) and each message a live client sends, what the fake agent
writes back — the pure ``Replayer`` — and a thin blocking I/O shell (``serve``) that reads the
client's lines from a binary stream, sleeps the recorded gaps scaled by ``--timing`` and writes
the decided lines to another.

How a recording becomes a script: every client→agent (c2a) message is a *trigger*; the
agent→client (a2c) frames recorded after it and before the next c2a message are its
*reaction*. The agent's frames before any c2a message are the start. When a live client
message is matched to a recorded trigger, the trigger's reaction is sent in recorded order,
with each response's id remapped to the id the live client used for the matching request.
An agent→client request therefore "waits" for the client's answer by construction: what the
agent did after the answer is the reaction of the recorded answer, sent only when the live
answer arrives.

Matching: requests and notifications sequentially per method (the n-th live ``session/prompt``
is the n-th recorded one), params compared with volatile fields ignored (``_meta``, timestamps,
and ``cwd`` unless asked to match it); answers to the fake agent's requests by their id.
``strict`` also demands the recorded order across methods and equal params; a deviating request
gets a JSON-RPC error naming what was expected. Every deviation, strict or not, is kept in
``deviations`` for the report — one per divergence: a refused request consumes the recorded one
it stands for, and once the conversation has diverged, the recorded requests the client never
sent are not counted again. An answer to an agent request that differs from the recorded one
(another permission option) is a deviation; with ``follow_client`` the recording's branch for
that answer plays, where the recording has one (another recorded answer to the same method,
equal to the live one), its final response going to the live request still open.

The protocol's meaning comes from ``protocol/``, not from rules of the replay's own: the
recording's version from ``ConnectionState`` (negotiated, else inferred), live-only variants
from ``vocabulary``, history windows from a ``ConnectionState`` fed the live traffic (a live
request opens one by the protocol layer's rule), ids compared as ``wire.canonical_id`` text.

Batch lines: an agent's recorded batch line is written as recorded, byte for byte (re-encoded
only when an id inside must change); the fake client does the same with a client's.

History replay: a recorded ``session/load`` (v1) or ``session/resume`` with ``replayFrom`` (v2)
replays its recorded history minus live-only ``notice`` updates; when the recording has no such
request left, a lenient replay synthesises the history of the recorded session from its live
updates (v1: the prompts as ``user_message_chunk``s first, as agents do), notices excepted.

The fake client (``acp-proxy replay REF --client -- AGENT``) is ``client``'s.

Must not know: SQL, click, trio, processes. It never raises on odd traffic: invalid lines from
the live client are reported and ignored; invalid lines the recorded agent wrote are replayed
as they were.

Rule 1: send what was recorded; change only what must change (response ids), so a replayed
frame — a batch line too — is byte-identical to the recorded one whenever the client used the
recorded ids.
Rule 2: a history replay never carries a ``notice``.
"""

from __future__ import annotations

import json
import re
import sys
import threading
import time
from collections import defaultdict, deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import msgspec

from acp_proxy.protocol import vocabulary as acp
from acp_proxy.protocol import wire
from acp_proxy.protocol.rows import RecordedFrame
from acp_proxy.protocol.state import ConnectionState
from acp_proxy.protocol.vocabulary import A2C, C2A

VOLATILE_KEYS = frozenset({"_meta", "timestamp", "createdAt", "updatedAt", "startedAt", "endedAt"})
# Server-error range of JSON-RPC (-32000..-32099): the replay's own errors, not the agent's.
REPLAY_ERROR = -32042

_TIMING = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*x?\s*$", re.IGNORECASE)


def parse_timing(text: str) -> float:
    """``original`` -> 1.0, ``fast`` -> 0.0, ``N`` / ``Nx`` -> N (the speed-up factor).

    The shell divides recorded gaps by the factor; 0 means no waiting at all.
    """
    word = text.strip().lower()
    if word == "original":
        return 1.0
    if word == "fast":
        return 0.0
    match = _TIMING.match(word)
    if match is not None and float(match.group(1)) == 0:
        # Zero times as fast would never send; "fast" (no waiting) is what it is often taken for.
        raise ValueError(f"{text!r} is no speed-up (a replay at 0x would never end); did you mean fast?")
    if match is None or float(match.group(1)) <= 0:
        raise ValueError(f"{text!r} is not a timing (original, fast, or a speed-up such as 2x or 0.5x)")
    return float(match.group(1))


@dataclass(frozen=True)
class Send:
    """One line for the client: ``data`` includes its newline (unless the recorded line had none)."""

    data: bytes
    delay_s: float = 0.0  # the recorded gap before this line, unscaled
    seq: int | None = None  # the recorded frame it replays; None for a frame the replay made


@dataclass
class _Frame:
    """A recorded frame, decoded once."""

    seq: int
    ts_ns: int
    dir: str
    kind: str | None
    raw: bytes  # without the newline
    terminated: bool
    message: Any  # decoded JSON, or None for an invalid line
    method: str | None
    request_seq: int | None
    session_id: str | None
    update_kind: str | None
    replay: bool
    reaction: list[_Frame] = field(default_factory=list)  # on c2a frames
    used: bool = False
    rpc_id: str | None = None  # the id as canonical JSON text (wire.canonical_id), None without one
    elements: list[_Frame] = field(default_factory=list)  # on an agent's batch line: its elements


def _decode_rows(rows: Iterable[dict[str, Any]], whole: str = A2C) -> list[_Frame]:
    """The recorded frames in order. A batch line in direction ``whole`` (the side the replay
    plays: the agent's for the fake agent, the client's for the fake client) is one frame with
    its elements attached, so that it is written as recorded; in the other direction, the live
    peer sends its own batches and the recording's are matched through their elements."""
    frames: list[_Frame] = []
    batches: dict[int, _Frame] = {}
    for row in rows:
        if row.get("dir") not in (C2A, A2C):
            continue
        batch = row.get("batch_seq")
        if row.get("kind") == "batch" and row["dir"] != whole:
            continue
        frame = _decode_row(row)
        if row.get("kind") == "batch":
            batches[int(row["seq"])] = frame
        elif batch is not None and row["dir"] == whole:
            parent = batches.get(int(batch))
            if parent is not None:
                parent.elements.append(frame)
                continue
        frames.append(frame)
    return frames


def _decode_row(row: dict[str, Any]) -> _Frame:
    raw_text = row.get("raw")
    raw = raw_text.encode("utf-8", "surrogatepass") if raw_text is not None else bytes(row.get("raw_bytes") or b"")
    message: Any = None
    if row.get("kind") != "invalid" and raw_text is not None:
        try:
            message = wire.loads(raw_text)
        except ValueError:
            message = None
    method = row.get("method")
    if isinstance(message, dict) and isinstance(message.get("method"), str):
        method = message["method"]
    run = int(row.get("run_id") or 0) * 10**12  # seqs unique across runs
    return _Frame(
        seq=int(row["seq"]) + run,
        ts_ns=int(row.get("ts_ns") or 0),
        dir=row["dir"],
        kind=row.get("kind"),
        raw=raw,
        terminated=row.get("terminated") != 0,
        message=message,
        method=method,
        request_seq=int(row["request_seq"]) + run if row.get("request_seq") is not None else None,
        session_id=row.get("session_id"),
        update_kind=row.get("update_kind"),
        replay=bool(row.get("replay")),
        rpc_id=row.get("rpc_id"),
    )


def id_key(value: Any) -> str | None:
    """A JSON-RPC id as the protocol layer pairs it (``wire.canonical_id``: 1 and "1" differ)."""
    try:
        return wire.canonical_id(msgspec.Raw(msgspec.json.encode(value)))
    except (TypeError, OverflowError, msgspec.EncodeError):
        return json.dumps(value, default=str)


class _Seen:
    """A line the replay saw or wrote, as ``ConnectionState.feed`` reads a frame."""

    __slots__ = ("cut", "dir", "forwarded", "kind", "line", "method", "rpc_id", "seq", "session_id", "ts_ns",
                 "update_kind")  # fmt: skip

    def __init__(self, seq: int, direction: str, line: bytes, frame: wire.Frame) -> None:
        self.seq, self.ts_ns, self.dir, self.line, self.forwarded, self.cut = seq, 0, direction, line, 1, 0
        self.kind: str | None = frame.kind
        self.method: str | None = frame.method
        self.rpc_id: str | None = frame.rpc_id
        self.session_id: str | None = frame.session_id
        self.update_kind: str | None = frame.update_kind


def normalise(value: Any, ignore: frozenset[str]) -> Any:
    """``value`` without the keys in ``ignore`` at any depth: what matching compares."""
    if isinstance(value, dict):
        return {k: normalise(v, ignore) for k, v in value.items() if k not in ignore}
    if isinstance(value, list):
        return [normalise(v, ignore) for v in value]
    return value


def _line(message: Any) -> bytes:
    return json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


def _describe(frame: _Frame) -> str:
    what = frame.method or frame.kind or "frame"
    return f"{what} (recorded frame {frame.seq % 10**12})"


class Replayer:
    """The pure fake agent: ``start()`` once, then ``receive(line)`` per client line, then ``finish()``.

    One deviation per divergence: a request the strict replay refuses consumes the recorded one
    it stands for, and once the conversation has diverged, what the recording still had for the
    client is not counted again at the end. ``follow_client``: when the client answers an agent
    request otherwise than the recording, play the recording's branch for the answer it gave,
    where the recording has one (another recorded answer to the same method, equal to it).
    """

    def __init__(
        self,
        rows: Iterable[dict[str, Any]],
        *,
        strict: bool = False,
        match_cwd: bool = False,
        follow_client: bool = False,
    ) -> None:
        self.strict = strict
        self.follow_client = follow_client
        self.ignore = VOLATILE_KEYS if match_cwd else VOLATILE_KEYS | {"cwd"}
        self.deviations: list[str] = []  # what made the replay differ from the recording
        self.notes: list[str] = []  # what the replay did that the recording did not, by design
        self.received = 0  # client messages seen
        rows = list(rows)
        # The protocol layer's rules, not the replay's own: the version the recording
        # negotiated (or shows), which update variants are live-only in it, and (fed the live
        # traffic) when a live request opens a history replay window.
        recorded = ConnectionState()
        for row in rows:
            if row.get("dir") in (C2A, A2C):
                recorded.feed(RecordedFrame(row))
        self._version = recorded.version or 1
        self._live_only = acp.vocabulary(self._version).live_only
        self._live = ConnectionState(version=self._version)
        self._live_seq = 0
        frames = _decode_rows(rows)
        self._by_seq = {f.seq: f for f in frames}
        for f in frames:
            for element in f.elements:
                self._by_seq[element.seq] = element
        self._start: list[_Frame] = []
        self._triggers: list[_Frame] = []  # recorded c2a messages in order
        current: list[_Frame] = self._start
        for frame in frames:
            if frame.dir == C2A:
                self._triggers.append(frame)
                current = frame.reaction
            else:
                current.append(frame)
        self._by_method: dict[str, deque[_Frame]] = defaultdict(deque)
        self._answers: dict[int, deque[_Frame]] = defaultdict(deque)  # a2c request seq -> c2a answers
        self._last_of_method: dict[str, _Frame] = {}
        for t in self._triggers:
            if isinstance(t.message, dict) and "method" in t.message:
                self._by_method[t.message["method"]].append(t)
            elif t.request_seq is not None:
                self._answers[t.request_seq].append(t)
        self._live_ids: dict[int, Any] = {}  # recorded c2a request seq -> the live client's id
        self._open: dict[str, list[int]] = defaultdict(list)  # method -> played requests not yet answered
        self._sent_requests: dict[str | None, int] = {}  # id_key of a replayed a2c request -> its seq
        self._diverged = False
        self.ended_by = "stdin closed"
        """How the replay ended, for ``summary`` (the shell sets it: a signal's name)."""

    # -- the interface the shell drives ----------------------------------------------------

    def start(self) -> list[Send]:
        """What the recorded agent wrote before the client said anything (usually nothing)."""
        return self._observed(list(self._sends(self._start, None)))

    def receive(self, line: bytes) -> list[Send]:
        """Decide what to write after one line from the live client."""
        text = line.rstrip(b"\r\n")
        if not text.strip():
            return []
        self._observe(C2A, text)
        try:
            message = wire.loads(text)
        except ValueError:
            self._deviate(f"the client sent a line that is not JSON: {text[:80]!r}")
            return []
        if isinstance(message, list):  # a batch: each element on its own, answers unbatched
            return self._observed([s for element in message for s in self._message(element)])
        return self._observed(self._message(message))

    def finish(self) -> list[str]:
        """At the client's EOF: the deviations, including recorded requests never sent (strict):
        one, for where the client stopped, unless an earlier divergence explains it."""
        if self.strict and not self._diverged:
            unsent = [t for t in self._triggers if not t.used and isinstance(t.message, dict) and "method" in t.message]
            if unsent:
                more = f" and {len(unsent) - 1} more recorded client message(s)" if len(unsent) > 1 else ""
                self._deviate(f"the client ended before the recorded {_describe(unsent[0])}{more}")
        return self.deviations

    def summary(self, ended_by: str) -> str:
        """The replay's verdict in one line, as a test runner's: ``ended_by`` says how it ended."""
        count = len(self.deviations)
        seen = f"{self.received} client message(s), {ended_by}"
        if not count:
            return f"replay passed: {seen}, no deviation from the recording"
        word = "failed" if self.strict else "finished"
        return f"replay {word} with {count} deviation(s) from the recording: {seen}"

    # -- the protocol layer's view of the live conversation ------------------------------------

    def _observe(self, direction: str, line: bytes) -> None:
        frame = wire.decode(line)
        parts = [(data, element) for data, element in frame.elements] if frame.elements else [(line, frame)]
        for data, part in parts:
            self._live_seq += 1
            self._live.feed(_Seen(self._live_seq, direction, data, part))

    def _observed(self, sends: list[Send]) -> list[Send]:
        for send in sends:
            self._observe(A2C, send.data.rstrip(b"\r\n"))
        return sends

    def _is_notice(self, frame: _Frame) -> bool:
        """A live-only update (``vocabulary.live_only`` of the recording's version)."""
        if frame.update_kind is not None:
            return frame.update_kind in self._live_only
        message = frame.message
        if not (isinstance(message, dict) and message.get("method") == "session/update"):
            return False
        params = message.get("params")
        update = params.get("update") if isinstance(params, dict) else None
        return isinstance(update, dict) and update.get("sessionUpdate") in self._live_only

    # -- matching ----------------------------------------------------------------------------

    def _message(self, message: Any) -> list[Send]:
        self.received += 1
        if not isinstance(message, dict):
            self._deviate(f"the client sent a JSON value that is no message: {str(message)[:80]}")
            return []
        method = message.get("method")
        if not isinstance(method, str):
            return self._answer(message)
        is_request = "id" in message
        params = message.get("params")
        session_id = params.get("sessionId") if isinstance(params, dict) else None
        # The window the live request opened, by the protocol layer's rule (v1 session/load;
        # session/resume with a non-null replayFrom): its reaction is history, notices left out.
        history = is_request and isinstance(session_id, str) and self._live.replaying(session_id)
        candidate = self._match(message, method)
        if isinstance(candidate, str):  # a deviation, described
            if is_request and not self.strict:
                fallback = self._lenient_fallback(message, method, history)
                if fallback is not None:
                    return fallback
            self._deviate(candidate)
            if not is_request:
                return []
            error = {"code": REPLAY_ERROR, "message": f"acp-proxy replay: {candidate}"}
            return [Send(_line({"jsonrpc": "2.0", "id": message["id"], "error": error}))]
        candidate.used = True
        if is_request:
            self._live_ids[candidate.seq] = message["id"]
            self._open[method].append(candidate.seq)
        return list(self._sends(candidate.reaction, candidate, history=history))

    def _match(self, message: dict[str, Any], method: str) -> _Frame | str:
        """The recorded trigger this live request or notification plays, or why there is none."""
        queue = self._by_method.get(method)
        while queue and queue[0].used:
            queue.popleft()
        expected = next(
            (t for t in self._triggers if not t.used and isinstance(t.message, dict) and "method" in t.message),
            None,
        )
        if self.strict:
            if expected is None:
                return f"unexpected {method}: the recording has no more client requests"
            if expected.method != method:
                return f"unexpected {method}: expected {_describe(expected)}"
            candidate = expected
        else:
            if not queue:
                where = "no more" if method in self._last_of_method else "no"
                return f"unexpected {method}: the recording has {where} {method} left"
            candidate = queue[0]
        got = normalise(message.get("params"), self.ignore)
        want = normalise(candidate.message.get("params"), self.ignore)
        if got != want:
            text = f"{method} params differ from {_describe(candidate)}: got {_short(got)}, recorded {_short(want)}"
            if self.strict:
                candidate.used = True  # the refused request stands for it: not "never sent" too
                return text
            self._deviate(text)  # lenient: play it anyway
        self._last_of_method[method] = candidate
        if queue and queue[0] is candidate:
            queue.popleft()
        return candidate

    def _answer(self, message: dict[str, Any]) -> list[Send]:
        """The live client answered one of the replayed agent requests."""
        key = id_key(message.get("id"))
        request_seq = self._sent_requests.pop(key, None)
        if request_seq is None:
            self._deviate(f"the client answered id {key}, which the fake agent never asked")
            return []
        request = self._by_seq[request_seq]
        answers = self._answers.get(request_seq)
        while answers and answers[0].used:
            answers.popleft()
        if not answers:
            self._deviate(f"the recording has no answer to {_describe(request)}")
            return []
        recorded = answers.popleft()
        recorded.used = True
        if ("error" in message) != ("error" in recorded.message):
            self._deviate(
                f"the client answered {_describe(request)} "
                f"{'with an error' if 'error' in message else 'with a result'}, unlike the recording"
            )
            return list(self._sends(recorded.reaction, recorded))
        live, was = (
            normalise(message.get("result"), self.ignore),
            normalise(recorded.message.get("result"), self.ignore),
        )
        if live == was:
            return list(self._sends(recorded.reaction, recorded))
        branch = self._branch_for(request, live) if self.follow_client else None
        said = f"the client answered {_describe(request)} with {_short(live, 80)}, the recording with {_short(was, 80)}"
        if branch is None:
            tail = "; the recording has no branch for that answer" if self.follow_client else ""
            self._deviate(f"{said}: the recorded branch plays on{tail}")
            return list(self._sends(recorded.reaction, recorded))
        self._deviate(f"{said}: playing the recording's branch for that answer ({_describe(branch)})")
        return list(self._sends(branch.reaction, branch, borrowed=True))

    def _branch_for(self, request: _Frame, result: Any) -> _Frame | None:
        """A recorded answer to another request of the same method, equal to the live answer."""
        for answers in self._answers_by_method(request.method):
            if normalise(answers.message.get("result"), self.ignore) == result:
                return answers
        return None

    def _answers_by_method(self, method: str | None) -> Iterator[_Frame]:
        for t in self._triggers:
            if t.request_seq is not None and isinstance(t.message, dict) and "method" not in t.message:
                asked = self._by_seq.get(t.request_seq)
                if asked is not None and asked.method == method and "error" not in t.message:
                    yield t

    def _lenient_fallback(self, message: dict[str, Any], method: str, history: bool) -> list[Send] | None:
        """Best effort for a request the recording cannot play: history, or a repeat of the last answer."""
        if history or method == "session/resume" or method == "session/load":
            # Opening a recorded session the recording never reopened is what an editor does
            # with a fake agent: documented behaviour, so a note rather than a deviation.
            self.notes.append(f"{method} not in the recording: history rebuilt from the recorded session")
            return self._synthesised_history(message, with_history=history)
        last = self._last_of_method.get(method)
        if last is None:
            return None
        self._deviate(f"{method} beyond the recording: repeated the last recorded answer")
        response = next((f for f in last.reaction if f.request_seq == last.seq), None)
        if response is None or not isinstance(response.message, dict):
            return None
        reply = {k: v for k, v in response.message.items() if k != "id"}
        return [Send(_line({**reply, "id": message["id"]}), seq=response.seq)]

    # -- what goes out -------------------------------------------------------------------------

    def _sends(
        self, frames: list[_Frame], trigger: _Frame | None, history: bool = False, borrowed: bool = False
    ) -> Iterator[Send]:
        previous = trigger.ts_ns if trigger is not None else (frames[0].ts_ns if frames else 0)
        responded = False
        for frame in frames:
            delay = max(frame.ts_ns - previous, 0) / 1e9
            previous = frame.ts_ns
            if (frame.replay or (history and not responded)) and self._is_notice(frame):
                continue  # Rule 2: a live-only notice is never part of a history replay
            data = self._outgoing(frame, borrowed)
            if data is None:
                continue
            if trigger is not None and frame.request_seq == trigger.seq:
                responded = True
            yield Send(data, delay, frame.seq)

    def _outgoing(self, frame: _Frame, borrowed: bool = False) -> bytes | None:
        ending = b"\n" if frame.terminated else b""
        if frame.elements:
            return self._batch(frame, ending, borrowed)
        message = frame.message
        if not isinstance(message, dict):
            return frame.raw + ending  # an invalid line (or a bare value) the agent really wrote
        reply = self._element(frame, borrowed)
        if reply is None:
            return None
        return frame.raw + ending if reply is message else _line(reply)

    def _batch(self, frame: _Frame, ending: bytes, borrowed: bool) -> bytes | None:
        """An agent's batch line: the recorded bytes when no element changes (Rule 1), else the
        array again with the changed ids, the elements the client cannot take left out."""
        out: list[Any] = []
        same = True
        for element in frame.elements:
            if not isinstance(element.message, dict):
                out.append(element.message)
                continue
            reply = self._element(element, borrowed)
            same = same and reply is element.message
            if reply is not None:
                out.append(reply)
        if same:
            return frame.raw + ending
        return _line(out) if out else None

    def _element(self, frame: _Frame, borrowed: bool) -> dict[str, Any] | None:
        """One message for the client: the recorded one (the same object) when nothing changes,
        a copy with the live id for a response, None for an answer the client cannot take."""
        message: dict[str, Any] = frame.message
        if "method" in message:
            if "id" in message:  # the agent's own request: its answer comes back with this id
                self._sent_requests[id_key(message["id"])] = frame.seq
            return message
        if frame.request_seq is None:
            return message  # a response the recording could not pair: as it was
        if borrowed and frame.request_seq not in self._live_ids:
            # The branch of another turn ends with that turn's answer: the live request of the
            # same method still open takes it.
            asked = self._by_seq.get(frame.request_seq)
            opened = self._open.get((asked.method if asked else None) or "") or []
            if opened:
                return {**message, "id": self._live_ids[opened.pop(0)]}
        if frame.request_seq not in self._live_ids:
            self._deviate(
                f"skipped the recorded answer to {_describe(self._by_seq[frame.request_seq])}, "
                "which the client did not send"
            )
            return None
        live = self._live_ids[frame.request_seq]
        asked = self._by_seq.get(frame.request_seq)
        if asked is not None and frame.request_seq in self._open.get(asked.method or "", []):
            self._open[asked.method or ""].remove(frame.request_seq)
        if id_key(live) == (frame.rpc_id or id_key(message.get("id"))):
            return message  # Rule 1: byte-identical when the ids agree
        return {**message, "id": live}

    def _synthesised_history(self, message: dict[str, Any], with_history: bool = True) -> list[Send]:
        """A history for a recorded session the recording never loaded: its live updates, no notices."""
        given = message.get("params")
        params: dict[str, Any] = given if isinstance(given, dict) else {}
        session_id = params.get("sessionId")
        sends: list[Send] = []
        if not with_history:  # a resume without replayFrom: no history, just the answer
            return [Send(_line({"jsonrpc": "2.0", "id": message["id"], "result": {}}))]
        user_sent_live = any(
            f.update_kind in ("user_message", "user_message_chunk") and f.session_id == session_id and not f.replay
            for f in self._by_seq.values()
        )
        for frame in sorted(self._by_seq.values(), key=lambda f: f.seq):
            if frame.session_id != session_id or frame.replay:
                continue
            if frame.dir == C2A and frame.method == "session/prompt" and self._version < 2 and not user_sent_live:
                prompt = (frame.message or {}).get("params", {}).get("prompt") or []
                for block in prompt:
                    update = {"sessionUpdate": "user_message_chunk", "content": block}
                    sends.append(
                        Send(
                            _line(
                                {
                                    "jsonrpc": "2.0",
                                    "method": "session/update",
                                    "params": {"sessionId": session_id, "update": update},
                                }
                            )
                        )
                    )
            elif (
                frame.dir == A2C
                and frame.method == "session/update"
                and frame.kind == "notification"
                and not self._is_notice(frame)
            ):
                sends.append(Send(frame.raw + b"\n", seq=frame.seq))
        if with_history and not any(f.session_id == session_id for f in self._by_seq.values()):
            self._deviate(f"{message.get('method')} of session {session_id!r}, which the recording does not hold")
            sends = []
        sends.append(Send(_line({"jsonrpc": "2.0", "id": message["id"], "result": {}})))
        return sends

    # -- helpers ---------------------------------------------------------------------------------

    def _deviate(self, text: str) -> None:
        self.deviations.append(text)
        self._diverged = True


def _short(value: Any, limit: int = 160) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text if len(text) <= limit else text[: limit - 1] + "…"


# -- the I/O shell ---------------------------------------------------------------------------------


class _Ended(Exception):
    """A signal ended the replay (raised by the handler ``serve`` installs)."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


def serve(replayer: Replayer, stdin: BinaryIO, stdout: BinaryIO, speed: float, log: Any = None) -> list[str]:
    """Play ``replayer`` over blocking streams until the client's EOF, SIGTERM or SIGINT (how
    editors and the SDK client end an agent); return the deviations. ``replayer.ended_by`` then
    says which ended it, for the summary: the three end alike, with the verdict so far.

    ``speed``: recorded gaps are divided by it (1 = original timing); 0 sends without waiting.
    The sleeps reproduce the recorded agent's pace; they synchronise nothing.
    """
    import signal

    log = log or sys.stderr

    def write(sends: list[Send]) -> None:
        for send in sends:
            if speed > 0 and send.delay_s > 0:
                time.sleep(send.delay_s / speed)
            stdout.write(send.data)
            stdout.flush()

    reported = noted = 0

    def report_new() -> None:
        nonlocal reported, noted
        try:
            for text in replayer.notes[noted:]:
                print(f"acp-proxy: replay: note: {text}", file=log, flush=True)
            for text in replayer.deviations[reported:]:
                print(f"acp-proxy: replay: {text}", file=log, flush=True)
        except (OSError, ValueError):
            pass  # stderr gone: the exit status still tells
        reported, noted = len(replayer.deviations), len(replayer.notes)

    def stop(signum: int, _frame: Any) -> None:
        raise _Ended(signal.Signals(signum).name)

    handled: tuple[int, ...] = (signal.SIGTERM, signal.SIGINT)
    previous: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in handled:
            previous[sig] = signal.signal(sig, stop)
    replayer.ended_by = "stdin closed"
    try:
        try:
            write(replayer.start())
            for line in stdin:
                write(replayer.receive(line))
                report_new()
        except BrokenPipeError:
            replayer.deviations.append("the client closed its end before the replay was written")
        except _Ended as ended:
            replayer.ended_by = f"ended by {ended.name}"
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    replayer.finish()
    report_new()
    return replayer.deviations
