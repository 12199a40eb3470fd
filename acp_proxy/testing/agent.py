"""A Python API for test suites: put acp-proxy, with fault rules, in front of an agent.

Owns: building the command line a client under test should launch instead of the agent, and
reading back what the proxy recorded. Must not know: how the proxy relays or records.

The shape is Toxiproxy's, for stdio::

    from acp_proxy.testing import ProxiedAgent

    agent = ProxiedAgent(["my-agent", "--acp"], faults=["drop if method:session/prompt kind:response"],
                         db=tmp_path / "rec.db")
    run_my_client(agent.argv)                  # the client spawns the proxy, which spawns the agent
    assert agent.frames("fault:drop")          # the recording, through the filter language
    assert agent.faults()[0]["action"] == "drop"

``agent.run(client_argv)`` runs the client under test as a process, bounded by ``timeout``
seconds (``ProxiedAgent(..., timeout=)``, default 60): a client still running then is stopped
(SIGTERM to its process group, so the proxy finishes its recording; SIGKILL 5 s later) and the
call raises ``ClientHung``, an ``AssertionError`` that names what the client never got, from
the recording — a response a fault dropped, a request the agent never answered — so a hang is
a failure that says why, not a test that never ends.

The rules are checked here, with the proxy's own parser, before anything is spawned: a typo
fails at once with the parser's message (``unknown action 'dorp'; did you mean 'drop'?``)
instead of as a client that lost its agent. With ``stderr_file``, the proxy writes everything
it would print on stderr — its own lines, the agent's stderr — to that file, and ``stderr()``
reads it back.

Live control (``control=True``: the proxy runs with ``--control``) reads like the scenario::

    agent = acp_proxy(["my-agent"], control=True, breaks=["method:session/new kind:response"])
    client = agent.start(["my-client", "--", *agent.argv])      # runs while the test acts
    slow = agent.fault("delay=2s if method:session/prompt")     # from the next frame on
    with agent.hold("update:tool_call") as held:                # a breakpoint while in the block
        agent.release(agent.held()[0]["seq"])                   # the session/new held from the start
        frame = held.wait()                                     # the first tool call, held
        held.release(edit=lambda f: {**f, "params": {...}})     # or held.drop()
    slow.remove()
    agent.mark(frame["seq"], note="the tool call we edited")
    result = agent.finish()                                     # bounded like run()

A breakpoint set while frames flow can miss the frame it wants: ``breaks=`` holds from the
first frame, and ``hold`` with the same filter is that breakpoint. Leaving a ``hold`` block
removes its breakpoint and releases what it still holds (a test must not leave its client
waiting); leaving a ``with agent.fault(...)`` block removes its rule.

The pytest fixture ``acp_proxy`` (``acp_proxy.testing.pytest_plugin``, loaded automatically when
acp-proxy is installed) makes one of these per call, with a fresh database and stderr file in
``tmp_path``, and adds the proxy's stderr to the report of a test that fails.
"""

from __future__ import annotations

import json
import math
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from acp_proxy.errors import AcpProxyError, UsageError

if TYPE_CHECKING:
    from acp_proxy.relay.control_client import Controller

POLL_S = 0.05


class ProxiedAgent:
    def __init__(
        self,
        agent: Sequence[str],
        *,
        db: str | Path,
        faults: Sequence[str] = (),
        faults_file: str | Path | None = None,
        seed: int | None = None,
        strip_replayed_notices: bool = False,
        grace: float | None = None,
        stderr_file: str | Path | None = None,
        python: str = sys.executable,
        timeout: float = 60.0,
        control: bool = False,
        breaks: Sequence[str] = (),
    ) -> None:
        if not agent:
            raise ValueError("agent: the agent's command line is empty")
        _check_options(list(faults), faults_file, seed, grace)
        if not (isinstance(timeout, int | float) and math.isfinite(timeout) and timeout > 0):
            raise UsageError(f"timeout is a positive number of seconds, not {timeout!r}")
        self.agent = list(agent)
        self.timeout = float(timeout)
        """How long ``run`` lets the client under test run before it fails the test."""
        self.db = Path(db)
        self.stderr_file = Path(stderr_file) if stderr_file is not None else None
        """Where the proxy's stderr goes (None: inherited from the client)."""
        options: list[str] = ["--db", str(self.db)]
        for rule in faults:
            options += ["--fault", rule]
        if faults_file is not None:
            options += ["--faults", str(faults_file)]
        if seed is not None:
            options += ["--seed", str(seed)]
        if strip_replayed_notices:
            options.append("--strip-replayed-notices")
        if grace is not None:
            options += ["--grace", repr(float(grace))]
        if self.stderr_file is not None:
            options += ["--stderr-file", str(self.stderr_file)]
        self.control = control or bool(breaks)
        """Whether the proxy runs with ``--control`` (``fault``, ``hold``, ``release``...)."""
        if self.control:
            options.append("--control")
            for text in breaks:
                _check_filter(text)
                options += ["--break", text]
        self.client: subprocess.Popen[str] | None = None
        self.argv: list[str] = [python, "-m", "acp_proxy", "run", *options, "--", *self.agent]
        """The command line to give the client under test in place of the agent's."""

    def run(
        self,
        client: Sequence[str],
        *,
        timeout: float | None = None,
        input: str | None = None,
        env: dict[str, str] | None = None,
        cwd: str | Path | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run the client under test (``client``: its command line, which launches ``argv``) to
        its end, output captured as text. Raises ``ClientHung`` when it is still running after
        ``timeout`` seconds (default: this agent's ``timeout``)."""
        limit = self.timeout if timeout is None else timeout
        proc = subprocess.Popen(
            list(client),
            stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=cwd,
            start_new_session=True,  # its own process group: the proxy and agent are stopped with it
        )
        try:
            out, err = proc.communicate(input, timeout=limit)
        except subprocess.TimeoutExpired:
            out, err = _stop(proc)
            raise ClientHung(
                f"the client was still running after {limit:g} s and was stopped; {self.never_got()}",
                subprocess.CompletedProcess(proc.args, proc.returncode, out, err),
            ) from None
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    # -- a client running while the test acts (live control) -------------------------------

    def start(
        self, client: Sequence[str], *, env: dict[str, str] | None = None, cwd: str | Path | None = None
    ) -> subprocess.Popen[str]:
        """Start the client under test and return at once (``finish`` waits for it)."""
        self.client = subprocess.Popen(
            list(client),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
        return self.client

    def finish(self, timeout: float | None = None) -> subprocess.CompletedProcess[str]:
        """Wait for the client ``start`` started, like ``run`` (``ClientHung`` at the limit)."""
        proc = self.client
        if proc is None:
            raise UsageError("finish() needs a client started with start()")
        limit = self.timeout if timeout is None else timeout
        try:
            out, err = proc.communicate(timeout=limit)
        except subprocess.TimeoutExpired:
            out, err = _stop(proc)
            raise ClientHung(
                f"the client was still running after {limit:g} s and was stopped; {self.never_got()}",
                subprocess.CompletedProcess(proc.args, proc.returncode, out, err),
            ) from None
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    def controller(self) -> Controller:
        """The live run's controls (``relay.control_client.Controller``), once its proxy
        listens: waits (bounded by ``timeout``) for the client to have started it."""
        from acp_proxy.relay.control_client import Controller

        if not self.control:
            raise UsageError("live control needs ProxiedAgent(..., control=True)")
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                return Controller(self.db, "last")
            except AcpProxyError:  # no database, no run, or its row not yet recorded
                if time.monotonic() > deadline or (self.client is not None and self.client.poll() is not None):
                    raise
            time.sleep(POLL_S)  # the client starts the proxy; nothing else says when it listens

    def fault(self, rule: str) -> LiveFault:
        """Add a fault rule to the live run, from its next frame; ``.remove()`` takes it away."""
        controller = self.controller()
        return LiveFault(controller, int(controller.fault_add(rule)["id"]), rule)

    def hold(self, filter_text: str) -> HeldFrames:
        """A breakpoint for the ``with`` block: frames ``filter_text`` matches are held."""
        return HeldFrames(self.controller(), filter_text, self.timeout)

    def held(self) -> list[dict[str, Any]]:
        """The frames held now, each with its ``seq`` in ``frames``."""
        return self.controller().held()

    def release(self, seq: int, edit: Any = None) -> None:
        """Forward held frame ``seq`` (``edit``: a frame, or a function of it, to forward instead)."""
        controller = self.controller()
        controller.release(seq, _edited(controller, seq, edit))

    def drop(self, seq: int) -> None:
        self.controller().drop(seq)

    def send(self, to: str, frame: dict[str, Any] | str) -> dict[str, Any]:
        """Write a frame to the agent or the client (``ctl send``); a request's answer is
        the proxy's: ``sent()`` lists it."""
        return self.controller().send(to, frame if isinstance(frame, str) else json.dumps(frame))

    def sent(self) -> list[dict[str, Any]]:
        return self.controller().sent()

    def mark(self, seq: int, note: str | None = None, run: int | None = None) -> None:
        """Mark frame ``seq`` of the last run (or ``run``), with a note; ``frames("marked")``."""
        from acp_proxy.read.marks import frame_ref
        from acp_proxy.record import recovery
        from acp_proxy.store import database as store

        run_id, seq = frame_ref(recovery.open_for_reading(self.db), f"{run if run is not None else 'last'}:{seq}")
        store.set_mark(self.db, run_id, seq, note)

    def never_got(self) -> str:
        """What the recording shows the client waiting for, in words (for a hang's message)."""
        lost = self._query(
            "select seq, kind, method, rpc_id, note, fault from frames "
            "where dir = 'a2c' and forwarded = 0 and kind in ('response', 'error', 'request') order by run_id, seq"
        )
        if lost:
            return "it never got " + "; nor ".join(_lost(frame) for frame in lost)
        open_requests = self._query(
            "select seq, dir, method, rpc_id from frames where kind = 'request' and unanswered = 1 order by run_id, seq"
        )
        waiting = [f for f in open_requests if f["dir"] == "c2a"]
        if waiting:
            return "it never got " + "; nor ".join(
                f"the response to {f['method']} (id {f['rpc_id']}, frame {f['seq']}): the agent never sent it"
                for f in waiting
            )
        if open_requests:
            f = open_requests[0]
            return f"it never answered the agent's {f['method']} (id {f['rpc_id']}, frame {f['seq']})"
        return "the recording shows nothing it was waiting for (is the client waiting on something else?)"

    def stderr(self) -> str:
        """What the proxy wrote to stderr so far (with ``stderr_file``; else "")."""
        if self.stderr_file is None or not self.stderr_file.is_file():
            return ""
        return self.stderr_file.read_bytes().decode("utf-8", "replace")

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        from acp_proxy.record.recovery import wait_recorded
        from acp_proxy.store.database import file_uri

        if not self.db.exists():
            return []
        # The proxy exits with its agent; its recorder may still be writing: the whole run first.
        wait_recorded(self.db, self.timeout)
        conn = sqlite3.connect(file_uri(self.db), uri=True)
        conn.row_factory = sqlite3.Row
        try:
            return [dict(row) for row in conn.execute(sql, list(params))]
        finally:
            conn.close()

    def runs(self) -> list[dict[str, Any]]:
        """Every run recorded in this database, oldest first."""
        return self._query("select * from runs order by id")

    def frames(self, filter_text: str = "") -> list[dict[str, Any]]:
        """Recorded frames, in relay order, selected with the filter language."""
        from acp_proxy.protocol.filters import parse

        where, params = parse(filter_text).to_sql()
        return self._query(f"select * from frames where {where} order by run_id, seq", params)

    def faults(self) -> list[dict[str, Any]]:
        """Every fault applied, with the frame it was applied to."""
        return self._query(
            "select f.*, x.dir, x.kind, x.method from faults f "
            "left join frames x on x.run_id = f.run_id and x.seq = f.seq order by f.run_id, f.seq, f.id"
        )

    def sql(self, query: str, *params: Any) -> list[dict[str, Any]]:
        """Anything else, read-only."""
        return self._query(query, params)


class LiveFault:
    """A fault rule added to a live run; ``remove()`` (or leaving a ``with`` block) ends it."""

    def __init__(self, controller: Controller, rule_id: int, rule: str) -> None:
        self.controller = controller
        self.id = rule_id
        self.rule = rule
        self.removed = False

    def remove(self) -> None:
        if not self.removed:
            self.removed = True
            self.controller.fault_remove(self.id)

    def __enter__(self) -> LiveFault:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.remove()


class HeldFrames:
    """A breakpoint while a ``with`` block runs. ``wait()`` returns the next frame it holds
    (``held()``'s entry: seq, dir, method, the whole frame as text...); ``release(edit=)`` and ``drop()`` decide
    the frame ``wait`` returned (waiting first if none). On exit the breakpoint goes and what
    it still holds is released."""

    def __init__(self, controller: Controller, filter_text: str, timeout: float) -> None:
        self.controller = controller
        self.filter = filter_text
        self.timeout = timeout
        self.id: int | None = None
        self.current: dict[str, Any] | None = None
        self.decided: set[int] = set()

    def __enter__(self) -> HeldFrames:
        # The same filter given in ``breaks=`` is that breakpoint, set from the first frame.
        same = [int(b["id"]) for b in self.controller.breaks() if b["filter"] == self.filter]
        self.id = same[0] if same else int(self.controller.break_(self.filter)["id"])
        return self

    def __exit__(self, *_exc: object) -> None:
        if self.id is None:
            return
        try:
            self.controller.unbreak(self.id)
            for frame in self._mine():
                self.controller.release(frame["seq"])
        except UsageError:
            pass  # the run has ended: nothing left to release
        self.id = None

    def _mine(self) -> list[dict[str, Any]]:
        return [
            f
            for f in self.controller.held()
            if f["breakpoint"] == self.id and f["seq"] is not None and f["seq"] not in self.decided
        ]

    def wait(self, timeout: float | None = None) -> dict[str, Any]:
        """The next frame this breakpoint holds (``AssertionError`` if none within ``timeout``)."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while True:
            mine = self._mine()
            if mine:
                # The whole frame (``held`` shows the first characters of each).
                self.current = {**mine[0], "frame": self.controller.held_frame(int(mine[0]["hold"]))}
                return dict(self.current)
            if time.monotonic() > deadline:
                raise AssertionError(f"no frame matching {self.filter!r} was held within the time limit")
            time.sleep(POLL_S)  # polling a live run, under a deadline

    def _frame(self) -> dict[str, Any]:
        return self.current if self.current is not None else self.wait()

    def release(self, edit: Any = None) -> None:
        """Forward the held frame; ``edit``: a frame (dict or JSON text) or a function from the
        frame (a dict) to the frame to forward instead."""
        frame = self._frame()
        self.controller.release(frame["seq"], _edited(self.controller, frame["seq"], edit, frame))
        self.decided.add(frame["seq"])
        self.current = None

    def drop(self) -> None:
        frame = self._frame()
        self.controller.drop(frame["seq"])
        self.decided.add(frame["seq"])
        self.current = None


def _edited(controller: Controller, seq: int, edit: Any, frame: dict[str, Any] | None = None) -> str | None:
    """The text ``release --with`` sends for ``edit`` (None: the frame as it is)."""
    if edit is None or isinstance(edit, str):
        return edit
    if callable(edit):
        if frame is None:
            frame = next((f for f in controller.held() if f["seq"] == seq), None)
            if frame is None:
                raise UsageError(f"frame {seq} is not held")
        whole = controller.held_frame(int(frame["hold"]))
        edit = edit(json.loads(whole))
    return json.dumps(edit)


class ClientHung(AcpProxyError, AssertionError):
    """The client under test was still running at its time limit; the message says what the
    recording shows it never got. ``result`` holds what it wrote before it was stopped."""

    exit_code = 1

    def __init__(self, message: str, result: subprocess.CompletedProcess[str]) -> None:
        super().__init__(message)
        self.result = result


def _lost(frame: dict[str, Any]) -> str:
    what = (
        "the request"
        if frame["kind"] == "request"
        else "the response to"
        if frame["kind"] == "response"
        else ("the error answering")
    )
    why = f"the fault `{frame['fault']}` held it back" if frame["fault"] else (frame["note"] or "not forwarded")
    return f"{what} {frame['method']} (id {frame['rpc_id']}, frame {frame['seq']}): {why}"


def _stop(proc: subprocess.Popen[str]) -> tuple[str, str]:
    """Stop a client and everything in its process group: SIGTERM (the proxy then finishes its
    recording), SIGKILL if anything is left 5 s later. What it wrote."""
    for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            return proc.communicate(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
    return "", ""


def _check_filter(text: str) -> None:
    from acp_proxy.protocol import filters

    try:
        filters.parse(text)
    except filters.FilterError as exc:
        raise UsageError(str(exc).splitlines()[0]) from None


def _check_options(faults: list[str], faults_file: str | Path | None, seed: int | None, grace: float | None) -> None:
    """What ``acp-proxy run`` would refuse, refused here (the same parser, the same words)."""
    from acp_proxy.faults.plan import FaultPlan
    from acp_proxy.faults.rules import check_seed
    from acp_proxy.limits import GRACE_MAX_S

    if seed is not None:
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise UsageError(f"seed must be a whole number, not {seed!r}")
        check_seed(seed, "seed")
    if grace is not None and not (
        isinstance(grace, int | float) and math.isfinite(grace) and 0 <= grace <= GRACE_MAX_S
    ):
        raise UsageError(f"grace is a number of seconds from 0 to {GRACE_MAX_S}, not {grace!r}")
    FaultPlan.build(faults, faults_file, os.environ.get("ACP_PROXY_FAULTS"), seed)
