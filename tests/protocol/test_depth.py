"""No depth reaches a RecursionError above the wire, and no user pattern costs more than linear
time (issue 31): the bounded decode, the state machine and tracker on generated depths, and
the redaction and filter patterns that used to backtrack for minutes."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from acp_proxy.protocol import wire
from acp_proxy.protocol.frames import FrameRecord
from acp_proxy.protocol.redact import RedactError, Redactor
from acp_proxy.protocol.tracker import Tracker
from tests.conftest import proxy_env

MS = 1_000_000
DEPTHS = st.integers(min_value=0, max_value=3000)


def nested(depth: int, leaf: bytes = b"1") -> bytes:
    """A JSON value ``depth`` levels deep, alternating arrays and objects."""
    opens = b"".join(b"[" if i % 2 else b'{"k":' for i in range(depth))
    closes = b"".join(b"]" if i % 2 else b"}" for i in reversed(range(depth)))
    return opens + leaf + closes


def depth_of(value: Any) -> int:
    depth = 0
    while isinstance(value, (list, dict)) and value:
        value = value[0] if isinstance(value, list) else next(iter(value.values()))
        depth += 1
    return depth + (1 if isinstance(value, (list, dict)) else 0)


@given(depth=DEPTHS, as_text=st.booleans(), msgspec_semantics=st.booleans())
@settings(max_examples=60)
def test_the_bounded_decode_keeps_flatten_depth_levels_of_any_depth(
    depth: int, as_text: bool, msgspec_semantics: bool
) -> None:
    data: bytes | str = nested(depth)
    if as_text:
        data = data.decode()
    value = (wire.decode_value if msgspec_semantics else wire.loads)(data)
    assert depth_of(value) == min(depth, wire.FLATTEN_DEPTH)
    if depth <= wire.FLATTEN_DEPTH:
        assert value is not None and wire.bounded(data) is data
    assert wire.too_deep(data) == (depth > wire.FLATTEN_DEPTH)


def test_the_bounded_decode_still_refuses_what_is_not_json() -> None:
    for bad in (b"[" * 5000, b"{" * 5000 + b"]" * 5000, b"[1,", "nope"):
        with pytest.raises(ValueError):
            wire.loads(bad)
        with pytest.raises(ValueError):
            wire.decode_value(bad)


# -- every payload the state machine decodes, at generated depths ------------------------------

DECODED = ("initialize", "session/new", "session/load", "session/resume", "session/fork", "session/prompt")


def conversation(method: str, depth: int, where: str) -> list[tuple[str, bytes]]:
    """Both peers' lines of a connection whose ``method`` exchange (and each state or title
    update, and a cancel) carries a value ``depth`` deep in ``where`` (params or result)."""
    deep = nested(depth)
    p = b',"deep":' + deep if where == "params" else b""
    r = b',"deep":' + deep if where == "result" else b""
    sid = b'"sess_1"'
    lines = [
        (
            "c2a",
            b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1,'
            b'"clientInfo":{"name":"c","x":' + deep + b'},"clientCapabilities":{"x":' + deep + b"}" + p + b"}}",
        ),
        (
            "a2c",
            b'{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":1,"agentInfo":{"name":"a","x":'
            + deep
            + b'},"agentCapabilities":{"x":'
            + deep
            + b'},"authMethods":['
            + deep
            + b"]"
            + r
            + b"}}",
        ),
        ("c2a", b'{"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"/"' + p + b"}}"),
        ("a2c", b'{"jsonrpc":"2.0","id":1,"result":{"sessionId":' + sid + r + b"}}"),
    ]
    if method not in ("initialize", "session/new"):
        lines += [
            (
                "c2a",
                b'{"jsonrpc":"2.0","id":2,"method":"'
                + method.encode()
                + b'","params":{"sessionId":'
                + sid
                + b',"cwd":"/","prompt":[],"replayFrom":'
                + deep
                + b',"requestId":'
                + deep
                + p
                + b"}}",
            ),
            (
                "a2c",
                b'{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":'
                + sid
                + b',"update":{"sessionUpdate":"state_update","state":'
                + deep
                + p
                + b"}}}",
            ),
            (
                "a2c",
                b'{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":'
                + sid
                + b',"update":{"sessionUpdate":"session_info_update","title":'
                + deep
                + p
                + b"}}}",
            ),
            ("c2a", b'{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":' + deep + p + b"}}"),
            (
                "a2c",
                b'{"jsonrpc":"2.0","id":2,"result":{"sessionId":'
                + sid
                + b',"stopReason":'
                + deep
                + b',"messageId":'
                + deep
                + r
                + b"}}",
            ),
        ]
    return lines


@given(method=st.sampled_from(DECODED), depth=DEPTHS, where=st.sampled_from(["params", "result"]))
@settings(max_examples=80)
def test_the_state_machine_and_tracker_take_any_depth_in_every_decoded_payload(
    method: str, depth: int, where: str
) -> None:
    tracker = Tracker(1)
    for seq, (direction, line) in enumerate(conversation(method, depth, where), start=1):
        frame = wire.decode(line)
        rec = FrameRecord(1, seq, seq * MS, direction, line, frame)
        tracker.observe(rec)
        assert frame.kind != "invalid", frame.decode_error
        # Every frame nested past FLATTEN_DEPTH says so; none shallower does.
        flagged = "nested deeper than" in (frame.decode_error or "")
        assert flagged == (line_depth(line) > wire.FLATTEN_DEPTH)


def line_depth(line: bytes) -> int:
    """How deep ``line`` nests (its strings hold no brackets)."""
    level = deepest = 0
    for byte in line:
        if byte in b"[{":
            level += 1
            deepest = max(deepest, level)
        elif byte in b"]}":
            level -= 1
    return deepest


# -- user patterns in linear time --------------------------------------------------------------

_TIMED = """
import sys, time
from acp_proxy.protocol.redact import Redactor
from acp_proxy.protocol.filters import parse
from acp_proxy.protocol import wire
from acp_proxy.protocol.frames import FrameRecord
redactor = Redactor(["re:(a+)+$"])
line = b'{"jsonrpc":"2.0","method":"x","params":{"t":"' + b"a" * 30 + b'b"}}'
glob = parse("method:*a*a*a*a*a*a*a*a*b")
named = b'{"jsonrpc":"2.0","id":1,"method":"' + b"a" * 60 + b'"}'
rec = FrameRecord(0, 1, 0, "c2a", named, wire.decode(named))
start = time.perf_counter()
redactor.line(line)
redactor.text("a" * 30 + "b")
glob.matches(rec)
print(time.perf_counter() - start)
"""


@pytest.mark.spawns
def test_a_catastrophic_redaction_rule_or_glob_costs_milliseconds() -> None:
    # In a process of its own: on a backtracking engine this takes minutes, and the timeout
    # turns that into a failure instead of a hung test run.
    result = subprocess.run([sys.executable, "-c", _TIMED], capture_output=True, timeout=30, env=proxy_env(), text=True)
    assert result.returncode == 0, result.stderr
    assert float(result.stdout) < 0.2


@pytest.mark.parametrize("rule", [r"re:(a)\1", "re:(?=a)b", "re:(?<!a)b", r"re:(?P<x>a)(?P=x)"])
def test_what_re2_lacks_is_refused_in_one_line(rule: str) -> None:
    with pytest.raises(RedactError) as caught:
        Redactor([rule])
    message = str(caught.value)
    assert "\n" not in message and "RE2" in message and "backreferences" in message


def test_re2_rules_still_mask_their_groups() -> None:
    redactor = Redactor([r"token=(\w+)", "re:hunter2"])
    assert redactor.text("token=abc and hunter2") == "token=[redacted] and [redacted]"


@given(brackets=st.integers(min_value=0, max_value=260), filler=st.integers(min_value=0, max_value=70_000))
def test_the_quick_depth_test_on_a_big_line_counts_like_count(brackets: int, filler: int) -> None:
    # Past 64 KiB the test finds brackets instead of counting them: the same answer.
    line = b"[" * (brackets // 2) + b'"' + b"x" * filler + b'"' + b"{" * (brackets - brackets // 2)
    expected = line.count(b"[") > wire._HALF_DEPTH or line.count(b"{") > wire._HALF_DEPTH
    assert wire._may_be_deep(line) == expected
    assert wire._more_than(line, b"{", brackets // 3) == (line.count(b"{") > brackets // 3)
