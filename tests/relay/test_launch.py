"""The entry point's fast path: `run` spellings it takes must mean what click makes of them."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from acp_proxy.cli.commands import cli
from acp_proxy.relay import launch
from acp_proxy.relay import stdio as relay


class Captured(Exception):
    def __init__(self, options: relay.RunOptions) -> None:
        self.options = options


def click_options(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> relay.RunOptions:
    """The RunOptions click's `run` builds for ``argv`` (the relay is not started)."""

    def capture(options: relay.RunOptions, begun: object = None, started: object = None) -> relay.ExitStatus:
        raise Captured(options)

    monkeypatch.setattr(relay, "run", capture)
    result = CliRunner().invoke(cli, argv)
    assert isinstance(result.exception, Captured), result.output
    return result.exception.options


TAKEN = [
    ["run", "--", "agent"],
    ["run", "--", "agent", "--db", "x", "--login"],
    ["run", "--db", "rec.db", "--", "agent"],
    ["run", "--db=rec.db", "--", "agent"],
    ["run", "--no-record", "--", "agent", "-v"],
    ["run", "--grace", "0.5", "--db", "rec.db", "--", "agent"],
    ["run", "--grace=3", "--", "agent"],
    ["run", "--check", "--db", "rec.db", "--", "agent"],
    ["run", "--check=lifecycle", "--", "agent"],
    ["run", "--strip-replayed-notices", "--", "agent"],
    ["run", "--max-record-bytes", "1048576", "--db-limit=5000000", "--", "agent"],
]


@pytest.mark.parametrize("argv", TAKEN, ids=" ".join)
def test_the_fast_path_builds_what_click_builds(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACP_PROXY_DB", "/somewhere/default.db")
    monkeypatch.delenv("ACP_PROXY_FAULTS", raising=False)
    fast = launch.fast_run_options(argv)
    assert fast is not None
    assert fast == click_options(argv, monkeypatch)


@pytest.mark.parametrize(
    "argv",
    [
        ["runs"],
        ["run", "--help"],
        ["run", "agent"],  # no separator: click decides what is an option
        ["run", "--fault", "drop if dir:c2a", "--", "agent"],
        ["run", "--max-record-bytes", "16MiB", "--", "agent"],
        ["run", "--grace", "-1", "--", "agent"],
        ["run", "--grace", "nan", "--", "agent"],
        ["run", "--db", "a.db", "--db", "b.db", "--", "agent"],
        ["run", "--dbb", "x", "--", "agent"],
        ["run", "--check", "--no-record", "--", "agent"],
        ["run", "--check", "lifecycle", "--", "agent"],
        [
            "run",
            "--",
        ],
        ["run", "--db", "--no-record", "--", "agent"],
    ],
    ids=" ".join,
)
def test_anything_else_is_left_to_click(argv: list[str]) -> None:
    assert launch.fast_run_options(argv) is None


def test_fault_rules_in_the_environment_go_through_click(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACP_PROXY_FAULTS", "drop if dir:c2a")
    assert launch.fast_run_options(["run", "--", "agent"]) is None


def test_a_directory_as_database_is_left_to_click(tmp_path: Path) -> None:
    assert launch.fast_run_options(["run", "--db", str(tmp_path), "--", "agent"]) is None


# The START record is encoded without ``json``'s Python half (it imports ``re``): the same text.
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


@given(json_values)
def test_the_start_record_is_encoded_as_json_dumps_would(value: object) -> None:
    import json

    from acp_proxy.relay.recording import plain_json

    assert plain_json(value) == json.dumps(value)
    assert plain_json(["\udcff", {"a\x00": (1.5, -0.0)}]) == json.dumps(["\udcff", {"a\x00": (1.5, -0.0)}])
