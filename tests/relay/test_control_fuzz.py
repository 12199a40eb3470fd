"""The control socket's requests, as anything a local program may send: an answer, never a raise.

``ControlServer.handle`` takes one request line (bytes, or None for one too long) and must answer
``{"ok": ...}`` or ``{"error": "one line"}`` whatever it is: garbage, deep JSON, every operation
with arguments of any type. A raise here would end the relay's control task mid-run.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from acp_proxy.faults.gate import Gate, Hold
from acp_proxy.faults.live import LiveControl
from acp_proxy.relay import control

OPS = [
    *("fault-add", "fault-list", "fault-remove", "fault-clear", "break", "unbreak", "breaks", "clear", "held"),
    *("held-frame", "release", "drop", "send", "sent"),
]
_SCALARS = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=20)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
_WORDS = st.sampled_from(
    ["drop", "delay=1s if kind:request", "kind:error", "(", "", "1", "-1", "update:x", "{}", "nope"]
)
_REQUESTS = st.fixed_dictionaries(
    {"op": st.sampled_from(OPS) | st.text(max_size=8)},
    optional={
        "rule": _WORDS | _VALUES,
        "filter": _WORDS | _VALUES,
        "id": _VALUES,
        "number": _VALUES,
        "seq": _VALUES,
        "hold": _VALUES | st.integers(0, 3),
        "to": _VALUES | st.sampled_from(["agent", "client"]),
        "frame": _VALUES | _WORDS | st.sampled_from(['{"id":1,"method":"x"}', '{"method":"y"}', '{"id":2}']),
        "resend_of": _VALUES,
        "with": _VALUES | st.text(max_size=40),
    },
)


def _server() -> control.ControlServer:
    clock = iter(range(10**9, 10**18, 10**9)).__next__
    live = LiveControl(None, clock)
    return control.ControlServer(live, Gate(plan=None, clock=clock, live=live), lambda _fields: None)


def _answered(answer: dict[str, Any]) -> None:
    assert set(answer) in ({"ok"}, {"error"}), answer
    if "error" in answer:
        assert isinstance(answer["error"], str) and answer["error"] and "\n" not in answer["error"], answer
    json.dumps(answer, default=str)


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(requests=st.lists(_REQUESTS, min_size=1, max_size=6))
def test_any_sequence_of_requests_is_answered(requests: list[dict[str, Any]]) -> None:
    server = _server()
    server.live.handle({"op": "break", "filter": "dir:a2c"})
    holds = [s for s in server.gate.chunk("a2c", b'{"jsonrpc":"2.0","method":"x"}\n{"id":"a","result":1}\n')]
    for request in requests:
        try:
            line = json.dumps(request).encode()
        except (ValueError, UnicodeEncodeError):
            continue
        _answered(server.handle(line))
    for hold in holds:  # whatever was decided gives the gate's steps, never an exception
        if isinstance(hold, Hold):
            decision = server.live.take(hold.number)
            if decision is not None:
                server.gate.released(hold, decision)


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(line=st.binary(max_size=200) | st.integers(1, 5000).map(lambda depth: b"[" * depth + b"]" * depth))
def test_any_bytes_are_answered(line: bytes) -> None:
    _answered(_server().handle(line))
    _answered(_server().handle(None))
