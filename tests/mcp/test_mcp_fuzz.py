"""Every MCP tool, called with whatever an agent may send: a correct answer or one clear line.

The SDK checks the arguments' JSON types at the MCP boundary; these calls go past it, in
process, with values of the right types but anything in them (negative and huge numbers, odd
references, garbage filters, NULs, lone surrogates). The property is the one of every door: a
structured answer, or an ``AcpProxyError`` whose message is one line (a filter's may point at the
mistake below it) — never another exception.
"""

from __future__ import annotations

import inspect
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("mcp", reason="the [mcp] extra is not installed")
pytest.importorskip("pydantic", reason="the [mcp] extra is not installed")

from pydantic import BaseModel

from acp_proxy.errors import AcpProxyError
from acp_proxy.mcp.tools import Tools
from acp_proxy.protocol.redact import Redactor
from tests.web_support import synthetic_db

_WORDS = st.sampled_from(
    [
        "",
        "1",
        "2",
        "0",
        "-1",
        "last",
        "all",
        "run:1",
        "run:last",
        "session:",
        "sess_",
        "1:3",
        "kind:error",
        "text:ghp_",
        "note:x",
        "error:",
        "method:session/prompt",
        "fault:nope",
        "seq:20..10",
        "latency>1e999d",
        "(",
        ")",
        "NOT",
        "OR",
        "*",
        "\x00",
        "\udcff",
        "9223372036854775808",
        "漢字",
    ]
)
_TEXT = _WORDS | st.text(max_size=30) | st.lists(_WORDS, max_size=4).map(" ".join)
_INTS = st.sampled_from([0, 1, 2, 3, -1, -(2**63), 2**31, 2**63, 2**64, 10**30]) | st.integers(-5, 5000)


def _values(annotation: Any) -> st.SearchStrategy[Any]:
    """Values of the parameter's JSON type (what the SDK lets through), anything inside."""
    text = str(annotation)
    if "bool" in text:
        return st.booleans()
    if "int" in text:
        return st.none() | _INTS if "None" in text else _INTS
    return _TEXT


def _calls() -> st.SearchStrategy[tuple[str, dict[str, Any]]]:
    tools = Tools(Path("/nonexistent"), None)
    options = []
    for method in tools.all():
        params = inspect.signature(method).parameters
        required = {n: _values(p.annotation) for n, p in params.items() if p.default is inspect.Parameter.empty}
        optional = {n: _values(p.annotation) for n, p in params.items() if n not in required}
        args = st.fixed_dictionaries(required, optional=optional)
        options.append(args.map(lambda kwargs, name=method.__name__: (name, kwargs)))
    return st.one_of(options)


@pytest.fixture(scope="module")
def recorded() -> Path:
    where = Path(tempfile.mkdtemp())
    return synthetic_db(where / "rec.db")


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(call=_calls())
def test_any_arguments_get_an_answer_or_one_line(recorded: Path, call: tuple[str, dict[str, Any]]) -> None:
    name, kwargs = call
    tools = Tools(recorded, Redactor())
    try:
        answer = getattr(tools, name)(**kwargs)
    except AcpProxyError as exc:
        message = str(exc)
        # One line, or a filter's one line with the parser's two-line pointer at the mistake.
        assert message and "Traceback" not in message and message.count("\n") in (0, 2), (name, kwargs, message)
        return
    assert isinstance(answer, BaseModel), (name, kwargs, answer)
    answer.model_dump_json()  # the answer can be sent: JSON all the way down
