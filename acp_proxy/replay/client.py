"""The fake client: a recording's client side played against a live agent
(``acp-proxy replay REF --client -- AGENT``).

Owns: ``ClientReplayer``, the pure decision of what the recorded client sends next and how it
answers the live agent's requests, and ``drive``, its blocking shell with one deadline.

The fake client (``acp-proxy replay REF --client -- AGENT``) is the mirror image, the pure
``ClientReplayer``: the recorded client→agent requests and notifications are sent to a live agent
in recorded order, each once the responses to earlier requests that the recording shows before it
have arrived (and, while a request is still open, once the agent has made as many requests as it
had by then — so a ``session/cancel`` sent during a permission prompt waits for that prompt);
recorded session ids are mapped to the ones the live agent returns; the live agent's requests
are answered with the recorded answers, matched sequentially per method, under the live ids.
``drive`` plays it over blocking streams with one deadline.

Must not know: SQL, click, trio, processes. The frame decoding and id pairing are
``replayer``'s (shared with the fake agent).
"""

from __future__ import annotations

import queue
import sys
import threading
import time
from collections import defaultdict, deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import IO, Any

from acp_proxy.protocol import wire
from acp_proxy.protocol.vocabulary import A2C, C2A
from acp_proxy.replay.replayer import REPLAY_ERROR, _decode_rows, _describe, _Frame, _line, id_key


@dataclass
class _Step:
    """A recorded client request or notification, and what the recording shows before it."""

    frame: _Frame
    after: frozenset[int]  # recorded client requests whose responses were recorded before it
    agent_requests: int  # how many agent requests were recorded before it


class ClientReplayer:
    """The pure fake client: ``start()`` once, ``receive(line)`` per agent line, ``finish()`` at the end.

    ``start`` and ``receive`` return the lines to write to the agent. ``done`` says when every
    recorded client frame has been sent and every request the recording saw answered has its
    live answer; ``fatal`` holds why driving must stop (a live error where the recording had a
    result, in strict mode; or what the shell reports through ``fail``).
    """

    def __init__(self, rows: Iterable[dict[str, Any]], *, strict: bool = False) -> None:
        self.strict = strict
        self.deviations: list[str] = []
        self.fatal: str | None = None
        frames = _decode_rows(rows, whole=C2A)
        by_seq = {f.seq: f for f in frames}
        for f in frames:
            for element in f.elements:
                by_seq[element.seq] = element
        self._steps: list[_Step] = []
        self._answers: dict[str, deque[_Frame]] = defaultdict(deque)  # agent request method -> answers
        self._responses: dict[int, _Frame] = {}  # recorded client request seq -> the agent's response
        requested: set[int] = set()
        agent_requests = 0
        for f in frames:
            message = f.message if isinstance(f.message, dict) else {}
            if f.dir == A2C:
                if "method" in message and "id" in message:
                    agent_requests += 1
                elif f.request_seq in requested:
                    self._responses[f.request_seq] = f
            elif "method" not in message and ("result" in message or "error" in message):
                request = by_seq.get(f.request_seq) if f.request_seq is not None else None
                self._answers[(request.method if request else None) or f.method or "?"].append(f)
            else:
                after = frozenset(s for s in requested if s in self._responses)
                self._steps.append(_Step(f, after, agent_requests))
                for part in f.elements or [f]:
                    if isinstance(part.message, dict) and "method" in part.message and "id" in part.message:
                        requested.add(part.seq)
        self._next = 0
        self._pending: dict[str | None, _Frame] = {}  # id_key of a sent request -> its frame
        self._answered: set[int] = set()
        self._live_agent_requests = 0
        self._session_ids: dict[str, str] = {}  # recorded -> live

    # -- the interface the shell drives ----------------------------------------------------

    @property
    def done(self) -> bool:
        """Every recorded client frame sent; every request answered in the recording answered live."""
        return self._next == len(self._steps) and not any(f.seq in self._responses for f in self._pending.values())

    def start(self) -> list[bytes]:
        """The client frames the recording sent before the agent said anything."""
        return self._advance()

    def receive(self, line: bytes) -> list[bytes]:
        """Decide what to write to the agent after one line from it."""
        text = line.rstrip(b"\r\n")
        if not text.strip():
            return []
        try:
            message = wire.loads(text)
        except ValueError:
            self.deviations.append(f"the agent wrote a line that is not JSON: {text[:80]!r}")
            return []
        elements = message if isinstance(message, list) else [message]
        out: list[bytes] = []
        for element in elements:
            if isinstance(element, dict):
                out += self._message(element)
        return out + self._advance()

    def fail(self, text: str) -> None:
        """Stop driving, for ``text`` (a hang, a dead agent): the shell's fatal deviations."""
        if self.fatal is None:
            self.fatal = text

    def waiting_for(self) -> str:
        """What the replay is waiting for, for a timeout's message."""
        open_requests = [_describe(f) for f in self._pending.values() if f.seq in self._responses]
        if open_requests:
            return "waiting for the agent's answer to " + ", ".join(open_requests)
        if self._next < len(self._steps):
            return f"waiting for the agent before sending {_describe(self._steps[self._next].frame)}"
        return "waiting for the agent to exit"

    def finish(self) -> list[str]:
        """At the end: the deviations, including recorded agent requests the live agent never made."""
        for method, answers in self._answers.items():
            for answer in answers:
                self.deviations.append(
                    f"the agent never sent the recorded {method} (answered by recorded frame {answer.seq % 10**12})"
                )
            answers.clear()
        if not self.done and self.fatal is None:
            self.deviations.append(f"the replay stopped early, {self.waiting_for()}")
        return self.deviations

    # -- matching ----------------------------------------------------------------------------

    def _ready(self, step: _Step) -> bool:
        if not step.after <= self._answered:
            return False
        open_requests = any(f.seq in self._responses for f in self._pending.values())
        return self._live_agent_requests >= step.agent_requests or not open_requests

    def _advance(self) -> list[bytes]:
        out: list[bytes] = []
        while self.fatal is None and self._next < len(self._steps) and self._ready(self._steps[self._next]):
            frame = self._steps[self._next].frame
            self._next += 1
            message = frame.message
            if frame.elements:  # a batch line: as recorded, unless a session id had to change
                for element in frame.elements:
                    if isinstance(element.message, dict) and "method" in element.message and "id" in element.message:
                        self._pending[id_key(element.message["id"])] = element
                out.append(self._encode(frame, message))
                continue
            if not isinstance(message, dict):
                out.append(frame.raw + (b"\n" if frame.terminated else b""))
                continue
            if "method" in message and "id" in message:
                self._pending[id_key(message["id"])] = frame
            out.append(self._encode(frame, message))
        return out

    def _encode(self, frame: _Frame, message: Any) -> bytes:
        """The recorded line, byte for byte unless a session id (or ``id``) had to change."""
        remapped = self._remap(message)
        if remapped == message:
            return frame.raw + b"\n"
        return _line(remapped)

    def _remap(self, value: Any) -> Any:
        if isinstance(value, str):
            return self._session_ids.get(value, value)
        if isinstance(value, dict):
            return {k: self._remap(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self._remap(v) for v in value]
        return value

    def _message(self, message: dict[str, Any]) -> list[bytes]:
        method = message.get("method")
        if isinstance(method, str):
            if "id" not in message:
                return []  # an update: recorded by the proxy, nothing to answer
            self._live_agent_requests += 1
            return [self._answer(message, method)]
        frame = self._pending.pop(id_key(message.get("id")), None)
        if frame is None:
            self.deviations.append(f"the agent answered id {id_key(message.get('id'))}, never asked")
            return []
        self._answered.add(frame.seq)
        recorded = self._responses.get(frame.seq)
        if recorded is None or not isinstance(recorded.message, dict):
            return []
        if "error" in message and "error" not in recorded.message:
            error = message.get("error")
            reason = error.get("message") if isinstance(error, dict) else error
            text = f"the agent answered {_describe(frame)} with an error ({reason}), where the recording has a result"
            self.deviations.append(text)
            if self.strict:
                self.fatal = text
        elif "error" not in message and "error" in recorded.message:
            self.deviations.append(
                f"the agent answered {_describe(frame)} with a result, where the recording has an error"
            )
        live_result, recorded_result = message.get("result"), recorded.message.get("result")
        if isinstance(live_result, dict) and isinstance(recorded_result, dict):
            was, now = recorded_result.get("sessionId"), live_result.get("sessionId")
            if isinstance(was, str) and isinstance(now, str):
                self._session_ids[was] = now
        return []

    def _answer(self, message: dict[str, Any], method: str) -> bytes:
        """The recorded answer to the live agent's ``method`` request, under the live id."""
        answers = self._answers.get(method)
        if not answers:
            self.deviations.append(f"the agent sent {method}, which the recording has no answer for")
            return _line(
                {
                    "jsonrpc": "2.0",
                    "id": message["id"],
                    "error": {"code": REPLAY_ERROR, "message": f"acp-proxy replay: no recorded answer to {method}"},
                }
            )
        recorded = answers.popleft()
        recorded_message = recorded.message if isinstance(recorded.message, dict) else {}
        reply = {**self._remap(recorded_message), "id": message["id"]}
        if reply == recorded_message:
            return recorded.raw + b"\n"
        return _line(reply)


def drive(
    replayer: ClientReplayer, to_agent: IO[bytes], from_agent: IO[bytes], timeout_s: float, log: Any = None
) -> list[str]:
    """Play ``replayer`` against an agent's streams until the agent's EOF; return the deviations.

    Once the replay is done the agent's stdin is closed and its output drained (an agent exits
    at EOF). One deadline, ``timeout_s``, bounds everything; a hang or an early EOF is fatal
    (``replayer.fatal``). The agent's lines are read on a thread so the deadline holds.
    """
    log = log or sys.stderr
    lines: queue.Queue[bytes | None] = queue.Queue()

    def pump() -> None:
        try:
            for line in from_agent:
                lines.put(line)
        except (OSError, ValueError):
            pass
        finally:
            lines.put(None)

    threading.Thread(target=pump, name="acp-proxy-replay-client", daemon=True).start()
    deadline = time.monotonic() + timeout_s
    reported = 0
    closed = False

    def write(datas: list[bytes]) -> None:
        for data in datas:
            to_agent.write(data)
        to_agent.flush()

    try:
        write(replayer.start())
        while replayer.fatal is None:
            if replayer.done and not closed:
                to_agent.close()
                closed = True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                replayer.fail(f"timed out after {timeout_s:g} s, {replayer.waiting_for()}")
                break
            try:
                line = lines.get(timeout=remaining)
            except queue.Empty:
                continue
            if line is None:
                if not replayer.done:
                    replayer.fail(f"the agent closed its output, {replayer.waiting_for()}")
                break
            out = replayer.receive(line)
            if not closed:
                write(out)
            for text in replayer.deviations[reported:]:
                print(f"acp-proxy: replay: {text}", file=log, flush=True)
            reported = len(replayer.deviations)
    except (BrokenPipeError, ValueError, OSError):
        replayer.fail("the agent stopped reading its input")
    finally:
        if not closed:
            try:
                to_agent.close()
            except OSError:
                pass
    replayer.finish()
    for text in replayer.deviations[reported:]:
        print(f"acp-proxy: replay: {text}", file=log, flush=True)
    return replayer.deviations
