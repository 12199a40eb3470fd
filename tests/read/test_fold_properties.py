"""Fold: ``text_of``, and the properties: receive order per id whatever the interleaving, and
never an exception on odd traffic.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from acp_proxy.read.fold import (
    Folder,
    diff_text,
    fold_sessions,
    text_of,
)
from tests.read.fold_support import (
    ac,
    am,
    inputs,
    item,
    run,
    texts,
    txt,
    upd,
)

# ---------------------------------------------------------------------------------------------
# text_of

TEXT_CASES = [
    (txt("hi"), "hi"),
    ([txt("Client sent:"), txt("hello world")], "Client sent:hello world"),
    ({"type": "image", "mimeType": "image/png", "data": "AA=="}, "<image>"),
    ({"type": "audio", "mimeType": "audio/wav", "data": "AA=="}, "<audio>"),
    (
        {"type": "resource_link", "uri": "file:///home/user/document.pdf", "name": "document.pdf"},
        "[document.pdf](file:///home/user/document.pdf)",
    ),
    ({"type": "resource_link", "uri": "file:///a"}, "<file:///a>"),
    (
        {"type": "resource", "resource": {"uri": "file:///m.py", "text": "x = 1"}},
        "<resource file:///m.py>\nx = 1\n</resource>",
    ),
    ({"type": "resource", "resource": {"uri": "file:///b.bin", "blob": "AA=="}}, "<resource file:///b.bin>"),
    (item("tool output"), "tool output"),
    ({"type": "terminal", "terminalId": "t1"}, "<terminal t1>"),
    (
        {
            "type": "diff",
            "changes": [{"operation": "modify", "path": "/p/c.json"}],
            "patch": {"format": "git_patch", "text": "diff --git ..."},
        },
        "diff --git ...",
    ),
    ({"type": "diff", "changes": [{"operation": "add", "path": "/p/n"}]}, "<diff add /p/n>"),
    ({"type": "_custom", "x": 1}, "<_custom>"),
    (None, ""),
]


@pytest.mark.parametrize(("content", "expected"), TEXT_CASES)
def test_text_of(content: Any, expected: str) -> None:
    assert text_of(content) == expected


def test_text_of_separator_and_v1_diff() -> None:
    assert text_of([item("a"), item("b")], "\n") == "a\nb"
    diff = {
        "type": "diff",
        "path": "/p/config.json",
        "oldText": '{\n  "debug": false\n}',
        "newText": '{\n  "debug": true\n}',
    }
    assert diff_text(diff).splitlines() == [
        "--- /p/config.json",
        "+++ /p/config.json",
        "@@ -1,3 +1,3 @@",
        " {",
        '-  "debug": false',
        '+  "debug": true',
        " }",
    ]
    assert text_of({"type": "diff", "path": "/p/new", "oldText": None, "newText": "x"}).startswith(
        "--- /dev/null\n+++ /p/new"
    )


# ---------------------------------------------------------------------------------------------
# Properties: receive order per id, whatever the interleaving; never an exception

OPS = st.lists(
    st.tuples(
        st.sampled_from(["m1", "m2", "m3"]),
        st.one_of(
            st.tuples(st.just("chunk"), st.sampled_from("abcdef")),
            st.tuples(
                st.just("update"),
                st.one_of(st.just(...), st.none(), st.lists(st.sampled_from("xyz"), max_size=3)),
            ),
        ),
    ),
    max_size=30,
)


@settings(max_examples=300, deadline=None)
@given(OPS)
def test_message_fold_matches_the_documented_rules_in_any_order(ops: list) -> None:
    expected: dict[str, list[str]] = {}
    first_seen: list[str] = []
    frames = []
    for mid, (op, arg) in ops:
        if mid not in expected:
            expected[mid] = []
            first_seen.append(mid)
        if op == "chunk":
            expected[mid].append(arg)  # a chunk appends to whatever is current
            frames.append(ac(mid, arg))
        else:
            if arg is not ...:
                expected[mid] = list(arg or [])  # a value replaces; null and [] clear
            frames.append(am(mid, arg))  # omitted: unchanged
    conv = run(*frames)
    assert [m.message_id for m in conv.messages] == first_seen
    assert {m.message_id: texts(m.content) for m in conv.messages} == expected


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
VARIANTS = sorted({"plan", "tool_call", "_x", *Folder()._updates})
FIELDS = [
    "messageId",
    "toolCallId",
    "terminalId",
    "compactionId",
    "planId",
    "content",
    "summary",
    "plan",
    "data",
    "output",
    "state",
    "status",
    "_meta",
    "sessionId",
]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.builds(
                lambda v, f: upd({"sessionUpdate": v, **f}),
                st.sampled_from(VARIANTS),
                st.dictionaries(st.sampled_from(FIELDS), JSON, max_size=4),
            ),
            st.builds(
                lambda d, m: (d, m),
                st.sampled_from(["c2a", "a2c"]),
                st.dictionaries(st.sampled_from(["id", "method", "params", "result", "error"]), JSON, max_size=4),
            ),
            JSON,
        ),
        max_size=12,
    ),
    st.sampled_from([None, 1, 2]),
)
def test_odd_traffic_never_raises(steps: list, version: int | None) -> None:
    for sid, conv in fold_sessions(inputs(*steps), protocol_version=version).items():
        assert conv.session_id == sid
        for entry in conv.timeline:
            assert entry.seq >= 1
