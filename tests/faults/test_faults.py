"""Fault rules: grammar, sources, selection semantics and the bytes each fault carries. Pure."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import msgspec
import pytest

from acp_proxy.faults import actions as fault_actions
from acp_proxy.faults import rules as faults
from acp_proxy.faults.actions import (
    Close,
    Corrupt,
    Delay,
    Drop,
    Duplicate,
    ErrorReply,
    Inject,
    Kill,
    Reorder,
    Split,
    Stall,
    Truncate,
)
from acp_proxy.faults.plan import FaultPlan
from acp_proxy.faults.rules import RuleError
from acp_proxy.protocol import wire
from acp_proxy.protocol.frames import FrameRecord

# -- traffic -------------------------------------------------------------------------------

PROMPT = b'{"jsonrpc":"2.0","id":7,"method":"session/prompt","params":{"sessionId":"s1","prompt":[]}}'
PROMPT_STR_ID = b'{"jsonrpc":"2.0","id":"7","method":"session/prompt","params":{"sessionId":"s1"}}'
PROMPT_REPLY = b'{"jsonrpc":"2.0","id":7,"result":{"stopReason":"end_turn"}}'
PROMPT_FAILED = b'{"jsonrpc":"2.0","id":7,"error":{"code":-32000,"message":"nope"}}'
CHUNK = (
    b'{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":'
    b'{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"h\\"i \xc3\xa9 {}"}}}}'
)
TOOL_UPDATE = (
    b'{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":'
    b'{"sessionUpdate":"tool_call_update","toolCallId":"t1","status":"completed"}}}'
)


class Clock:
    """Makes records in relay order with increasing seq and a controllable ts_ns."""

    def __init__(self) -> None:
        self.seq = 0
        self.now = 1_000_000_000

    def rec(self, direction: str, line: bytes, *, method: str | None = None, terminated: bool = True) -> FrameRecord:
        self.seq += 1
        rec = FrameRecord(1, self.seq, self.now, direction, line, wire.decode(line))
        if method is not None:  # what the tracker adds to responses: their request's method
            rec.method = method
        rec.terminated = int(terminated)
        return rec


def prompt(clock: Clock) -> FrameRecord:
    return clock.rec("c2a", PROMPT)


def reply(clock: Clock) -> FrameRecord:
    return clock.rec("a2c", PROMPT_REPLY, method="session/prompt")


def chunk(clock: Clock) -> FrameRecord:
    return clock.rec("a2c", CHUNK)


def plan_of(*rules: str, seed: int = 1) -> FaultPlan:
    return FaultPlan(faults.parse_rules(list(rules)), seed=seed)


def fired(plan: FaultPlan, records: list[FrameRecord]) -> list[int]:
    """The positions (1-based) of the frames on which anything fired."""
    return [n for n, rec in enumerate(records, 1) if plan.decide(rec)]


def chunks(n: int) -> list[FrameRecord]:
    clock = Clock()
    return [chunk(clock) for _ in range(n)]


# -- grammar -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "action", "params"),
    [
        ("drop", "drop", {}),
        ("delay=300ms", "delay", {"ns": 300_000_000, "jitter_ns": 0}),
        ("delay=1.5s~50ms", "delay", {"ns": 1_500_000_000, "jitter_ns": 50_000_000}),
        ("delay=200us", "delay", {"ns": 200_000, "jitter_ns": 0}),
        ("delay=1m30s", "delay", {"ns": 90_000_000_000, "jitter_ns": 0}),
        ("delay=250~10", "delay", {"ns": 250_000_000, "jitter_ns": 10_000_000}),
        ("duplicate", "duplicate", {"copies": 1}),
        ("duplicate=3", "duplicate", {"copies": 3}),
        ("reorder", "reorder", {}),
        ("corrupt", "corrupt", {}),
        ("truncate", "truncate", {"keep": None}),
        ("truncate=10", "truncate", {"keep": 10}),
        ("truncate=0", "truncate", {"keep": 0}),
        ("split", "split", {"parts": 2, "pause_ns": 10_000_000}),
        ("split=3@10ms", "split", {"parts": 3, "pause_ns": 10_000_000}),
        ("split=4@0ms", "split", {"parts": 4, "pause_ns": 0}),
        ("split=2@5", "split", {"parts": 2, "pause_ns": 5_000_000}),
        ("error", "error", {"code": -32603, "message": "Internal error"}),
        ("error=-32601", "error", {"code": -32601, "message": "Method not found"}),
        ('error=-32603:"Internal error"', "error", {"code": -32603, "message": "Internal error"}),
        ("error=-32000:busy", "error", {"code": -32000, "message": "busy"}),
        ("error='-32000:so busy'", "error", {"code": -32000, "message": "so busy"}),
        ("error=1", "error", {"code": 1, "message": "Error injected by acp-proxy"}),
        ("inject=hello", "inject", {"payload": "hello", "position": "before"}),
        ("inject='not json at all' after", "inject", {"payload": "not json at all", "position": "after"}),
        ('inject=\'{"a": "b c"}\' before', "inject", {"payload": '{"a": "b c"}', "position": "before"}),
        ('inject={"a":1}', "inject", {"payload": '{"a":1}', "position": "before"}),
        ('inject="say \\"hi\\""', "inject", {"payload": 'say "hi"', "position": "before"}),
        ("kill", "kill", {"signum": int(signal.SIGKILL), "signame": "SIGKILL"}),
        ("kill=SIGTERM", "kill", {"signum": int(signal.SIGTERM), "signame": "SIGTERM"}),
        ("kill=term", "kill", {"signum": int(signal.SIGTERM), "signame": "SIGTERM"}),
        ("kill=9", "kill", {"signum": 9, "signame": "SIGKILL"}),
        ("close", "close", {"pipe": None}),
        ("close=agent-stdin", "close", {"pipe": "agent-stdin"}),
        ("close=client-stdout", "close", {"pipe": "client-stdout"}),
        ("stall", "stall", {}),
    ],
)
def test_every_action_parses(text: str, action: str, params: dict) -> None:
    rule = faults.parse_rule(text)
    assert (rule.action, rule.params) == (action, params)
    assert rule.filter_text is None and rule.expr is None
    assert rule.text == text


@pytest.mark.parametrize(
    ("text", "fields"),
    [
        ("drop nth=2", {"nth": 2}),
        ("drop first=3", {"first": 3}),
        ("drop every=4", {"every": 4}),
        ("drop p=0.25", {"p": 0.25}),
        ("drop p=1", {"p": 1.0}),
        ("drop p=0", {"p": 0.0}),
        ("drop times=2", {"times": 2}),
        ("drop after=5s", {"after_ns": 5_000_000_000}),
        ("drop after=250ms", {"after_ns": 250_000_000}),
        ("drop after=10 frames", {"after_frames": 10}),
        ("drop after=10frames", {"after_frames": 10}),
        ("drop after=1 frame", {"after_frames": 1}),
        (
            "drop every=2 p=0.5 times=3 after=1s",
            {"every": 2, "p": 0.5, "times": 3, "after_ns": 1_000_000_000},
        ),
    ],
)
def test_every_selector_parses(text: str, fields: dict) -> None:
    rule = faults.parse_rule(text)
    for name in ("nth", "first", "every", "p", "times", "after_ns", "after_frames"):
        assert getattr(rule, name) == fields.get(name), name


def test_filter_and_options_split_where_the_options_start() -> None:
    rule = faults.parse_rule("delay=300ms if dir:a2c update:agent_message_chunk p=0.1 times=3")
    assert rule.filter_text == "dir:a2c update:agent_message_chunk"
    assert (rule.p, rule.times) == (0.1, 3)
    rule = faults.parse_rule("kill=SIGKILL nth=2 if update:tool_call_update")
    assert (rule.filter_text, rule.nth) == ("update:tool_call_update", 2)
    rule = faults.parse_rule("drop first=1 if kind:request after=3 frames")
    assert (rule.filter_text, rule.first, rule.after_frames) == ("kind:request", 1, 3)


def test_field_equals_value_stays_in_the_filter() -> None:
    # FIELD=VALUE is a filter term; only the option names are taken as options.
    rule = faults.parse_rule("drop if seq=5 nth=1")
    assert (rule.filter_text, rule.nth) == ("seq=5", 1)
    rule = faults.parse_rule("drop if kind:request size=10")
    assert rule.filter_text == "kind:request size=10"


def test_inject_position_then_filter() -> None:
    rule = faults.parse_rule("inject='{\"x\": 1}' after if kind:response first=1")
    assert rule.params == {"payload": '{"x": 1}', "position": "after"}
    assert (rule.filter_text, rule.first) == ("kind:response", 1)


def test_quoted_text_in_the_filter_is_never_taken_for_an_option() -> None:
    rule = faults.parse_rule('drop if text:"nth=2 x" nth=3')
    assert (rule.filter_text, rule.nth) == ('text:"nth=2 x"', 3)
    clock = Clock()
    plan = FaultPlan([rule], seed=1)
    assert fired(plan, [clock.rec("a2c", b'{"a":"nth=2 x"}') for _ in range(4)]) == [3]


def test_unquote_and_quote_round_trip() -> None:
    for text in ["plain", "two words", "it's", 'say "hi"', "both ' and \"", "back\\slash", ""]:
        assert faults._unquote(faults._quote(text)) == text


@pytest.mark.parametrize(
    ("text", "column", "reason"),
    [
        ("dorp if kind:request", 0, "unknown action 'dorp'; did you mean 'drop'?"),
        ("explode", 0, "unknown action 'explode'"),
        ("", 0, "empty rule"),
        ("drop=1", 5, "drop takes no argument"),
        ("delay", 0, "delay needs a duration"),
        ("delay=3x", 6, "bad duration '3x'"),
        ("delay=300ms~x", 12, "bad duration 'x'"),
        ("delay='300ms~x'", 13, "bad duration 'x'"),
        ("delay=fast if kind:request", 6, "bad duration 'fast'"),
        ("split=1", 6, "split needs at least 2 pieces"),
        ("split=3@soon", 8, "bad duration 'soon'"),
        ("truncate=-1", 9, "truncate needs a number of bytes"),
        ("error=oops", 6, "error needs a JSON-RPC code"),
        ("kill=SIGNOPE", 5, "unknown signal 'SIGNOPE'"),
        ("close=stdout", 6, "close takes agent-stdin or client-stdout"),
        ("inject", 0, "inject needs a payload"),
        ("drop if", 7, "'if' needs a filter after it"),
        ("drop if nth=2", 7, "'if' needs a filter after it"),
        ("drop nth=1 every=2", 11, "nth= and every= cannot be used together"),
        ("drop if kind:request first=1 nth=2", 29, "first= and nth= cannot be used together"),
        ("drop every=2 if kind:request every=3", 29, "every= given twice"),
        ("drop p=1.5", 7, "p= is a probability between 0 and 1"),
        ("drop p=-0.1", 7, "p= is a probability between 0 and 1"),
        ("drop p=nan", 7, "p= is a probability between 0 and 1"),
        ("drop nth=0", 9, "nth= must be at least 1"),
        ("drop times=x", 11, "times= needs a whole number"),
        ("drop after=10", 11, "after= needs a unit"),
        ("drop after=soon", 11, "bad duration 'soon'"),
        ("drop nht=2", 5, "unknown option 'nht'; did you mean nth=?"),
        ("drop if kind:request nht=2", 21, "unknown option 'nht'; did you mean nth=?"),
        ("drop kind:request", 5, "expected 'if FILTER' or an option"),
        ("drop before", 5, "'before' only follows an inject payload"),
        ("inject=a b", 9, "quote an argument that contains spaces"),
        ("inject='unclosed", 7, "unterminated ' quote"),
        ('drop if text:"unclosed', 13, 'unterminated " quote'),
    ],
)
def test_bad_rules_point_at_the_mistake(text: str, column: int, reason: str) -> None:
    with pytest.raises(RuleError) as info:
        faults.parse_rule(text)
    err = info.value
    assert reason in err.message
    assert err.column == column
    assert err.rule == text
    assert err.where == "--fault"
    head, shown, caret = str(err).split("\n")
    assert head == f"--fault: {err.message}"
    assert shown == f"  {text}"
    assert caret == "  " + " " * column + "^"


def test_rule_error_looks_like_a_filter_error() -> None:
    with pytest.raises(RuleError) as info:
        faults.parse_rule("drop if kind:request nth=1 every=2")
    assert str(info.value) == (
        "--fault: nth= and every= cannot be used together (pick one)\n"
        "  drop if kind:request nth=1 every=2\n"
        "                             ^"
    )


@pytest.mark.parametrize(
    ("text", "column"),
    [
        ("drop if kind:request nosuchfield:1 nth=2", 21),
        ("drop if kind:nonsense", 13),
        ("drop if (kind:request", 8),
        ("drop if kind:request OR", 23),
    ],
)
def test_bad_filter_points_into_the_rule(text: str, column: int) -> None:
    # The filter language reports the column inside the filter; it is moved into the rule.
    with pytest.raises(RuleError) as info:
        faults.parse_rule(text)
    assert info.value.message.startswith("bad filter: ")
    assert "\n" not in info.value.message
    assert info.value.column == column


# -- sources -------------------------------------------------------------------------------


def test_env_rules_split_on_semicolons_and_newlines_outside_quotes() -> None:
    value = "drop if kind:request nth=1; inject='a;b' after\n\n  seed=42 ;delay=1s;"
    rules = faults.from_env(value)
    assert [r.text for r in rules.rules] == ["drop if kind:request nth=1", "inject='a;b' after", "delay=1s"]
    assert rules.rules[1].params["payload"] == "a;b"
    assert rules.seed == 42
    assert rules.rules[1].source == "ACP_PROXY_FAULTS rule #2"
    assert faults.from_env("") == fault_actions.RuleSet(())
    assert faults.from_env(None) == fault_actions.RuleSet(())


def test_env_errors_name_the_variable_and_the_entry() -> None:
    with pytest.raises(RuleError) as info:
        faults.from_env("drop; dorp")
    assert info.value.where == "ACP_PROXY_FAULTS rule #2"
    assert info.value.rule == "dorp" and info.value.column == 0
    with pytest.raises(RuleError) as info:
        faults.from_env("seed=x")
    assert "seed=" in str(info.value)
    with pytest.raises(RuleError) as info:
        faults.from_env("inject='a;b")
    assert info.value.where == "ACP_PROXY_FAULTS" and "unterminated" in info.value.message


GOOD_TOML = """
seed = 7

[[fault]]
rule = "drop if method:session/prompt kind:response"

[[fault]]
action = "delay"
arg = "300ms~50ms"
if = "dir:a2c update:agent_message_chunk"
p = 0.1

[[fault]]
action = "inject"
arg = '{"jsonrpc":"2.0","method":"session/update","params":{"update":{"sessionUpdate":"_x"}}}'
position = "after"
first = 1
after = "2 frames"

[[fault]]
action = "truncate"
arg = 10
times = 2
"""


def test_toml_file(tmp_path: Path) -> None:
    path = tmp_path / "faults.toml"
    path.write_text(GOOD_TOML)
    rules = faults.load_toml(path)
    assert rules.seed == 7
    drop, delay, inject, truncate = rules.rules
    assert drop.text == "drop if method:session/prompt kind:response"
    assert drop.source == f"{path}: fault #1"
    assert delay.params == {"ns": 300_000_000, "jitter_ns": 50_000_000}
    assert delay.filter_text == "dir:a2c update:agent_message_chunk" and delay.p == 0.1
    assert delay.directions == {"a2c"}
    assert delay.text == "delay=300ms~50ms if dir:a2c update:agent_message_chunk p=0.1"
    assert inject.params["position"] == "after" and inject.params["payload"].startswith('{"jsonrpc"')
    assert (inject.first, inject.after_frames) == (1, 2)
    # The rendered text parses back to the same rule.
    again = faults.parse_rule(inject.text)
    assert again.params == inject.params and again.first == 1 and again.after_frames == 2
    assert truncate.params == {"keep": 10} and truncate.times == 2


@pytest.mark.parametrize(
    ("body", "where", "reason"),
    [
        ("seed = 1\n[[fault]]\nrule = 'drop'\n[[fault]]\nrule = 'dorp'", "fault #2", "unknown action 'dorp'"),
        ("[[fault]]\naction = 'dely'", "fault #1", "action: unknown action 'dely'; did you mean 'delay'?"),
        ("[[fault]]\naction = 'delay'\narg = 'soon'", "fault #1", "arg: bad duration 'soon'"),
        ("[[fault]]\naction = 'drop'\nnht = 1", "fault #1", "unknown key 'nht'; did you mean 'nth'?"),
        ("[[fault]]\nrule = 'drop'\nnth = 1", "fault #1", "either rule"),
        ("[[fault]]\nif = 'kind:request'", "fault #1", 'needs rule = "..." or action = "..."'),
        ("[[fault]]\naction = 'drop'\np = 1.5", "fault #1", "p: p= is a probability"),
        ("[[fault]]\naction = 'drop'\nnth = '2'", "fault #1", "nth must be a whole number"),
        (
            "[[fault]]\naction = 'drop'\nnth = 1\nevery = 2",
            "fault #1",
            "nth= and every= cannot be used together",
        ),
        ("[[fault]]\naction = 'drop'\nafter = 3", "fault #1", "after must be a string"),
        ("[[fault]]\naction = 'drop'\nposition = 'after'", "fault #1", "position is before or after"),
        ("[[fault]]\naction = 'drop'\nif = 'nosuchfield:1'", "fault #1: if", "bad filter"),
        ("seed = 'x'", "", "seed must be a whole number"),
        ("faults = []", "", "unknown key 'faults'"),
        ("fault = 'drop'", "", "fault must be an array of tables"),
        ("[[fault]\nrule = 'drop'", "", "not valid TOML"),
    ],
)
def test_toml_errors_name_the_file_and_entry(tmp_path: Path, body: str, where: str, reason: str) -> None:
    path = tmp_path / "rules.toml"
    path.write_text(body)
    with pytest.raises(RuleError) as info:
        faults.load_toml(path)
    first_line = str(info.value).split("\n")[0]
    assert first_line.startswith(f"{path}: {where}".rstrip())
    assert reason in first_line


def test_toml_rule_error_shows_the_rule_with_a_caret(tmp_path: Path) -> None:
    path = tmp_path / "rules.toml"
    path.write_text("[[fault]]\nrule = 'drop if kind:request p=2'\n")
    with pytest.raises(RuleError) as info:
        faults.load_toml(path)
    assert str(info.value).split("\n") == [
        f"{path}: fault #1: p= is a probability between 0 and 1, got '2'",
        "  drop if kind:request p=2",
        "                         ^",
    ]


def test_toml_unreadable(tmp_path: Path) -> None:
    with pytest.raises(RuleError, match="cannot read"):
        faults.load_toml(tmp_path / "missing.toml")
    path = tmp_path / "latin1.toml"
    path.write_bytes(b"seed = 1 # \xe9\n")
    with pytest.raises(RuleError, match="not UTF-8"):
        faults.load_toml(path)


def test_build_orders_sources_and_picks_the_seed(tmp_path: Path) -> None:
    path = tmp_path / "f.toml"
    path.write_text("seed = 3\n[[fault]]\nrule = 'stall'\n")
    plan = FaultPlan.build(["drop nth=1"], path, "seed=5; corrupt", None)
    assert [r.action for r in plan.rules] == ["drop", "corrupt", "stall"]
    assert plan.seed == 5
    assert FaultPlan.build(["drop"], path, "seed=5", 9).seed == 9
    assert FaultPlan.build([], path, None, None).seed == 3
    chosen = FaultPlan.build(["drop"])
    assert isinstance(chosen.seed, int) and 0 <= chosen.seed < 2**31
    assert not FaultPlan.build() and FaultPlan.build(["drop"])
    with pytest.raises(RuleError):
        FaultPlan.build(["drop", "nope"])


def test_describe_is_json_for_the_run_row() -> None:
    plan = FaultPlan.build(["delay=300ms~50ms if dir:a2c p=0.1", "kill=TERM nth=2", "drop after=3 frames"], seed=11)
    spec = json.loads(json.dumps(plan.describe()))
    assert spec["seed"] == 11
    assert spec["rules"][0] == {
        "index": 0,
        "rule": "delay=300ms~50ms if dir:a2c p=0.1",
        "source": "--fault",
        "action": "delay",
        "arg": "300ms~50ms",
        "if": "dir:a2c",
        "p": 0.1,
    }
    assert spec["rules"][1]["nth"] == 2 and spec["rules"][2]["after_frames"] == 3


def test_help_documents_every_action_and_option() -> None:
    for word in (*faults.ACTIONS, *faults.OPTIONS, "ACP_PROXY_FAULTS", "[[fault]]", "seed"):
        assert word in faults.HELP
    assert faults.HELP.startswith("FAULT RULES\n")


# -- selection -----------------------------------------------------------------------------


def test_nth_first_every_times() -> None:
    stream = chunks(12)
    assert fired(plan_of("drop nth=3"), stream) == [3]
    assert fired(plan_of("drop first=2"), chunks(12)) == [1, 2]
    assert fired(plan_of("drop every=4"), chunks(12)) == [4, 8, 12]
    assert fired(plan_of("drop every=2 times=2"), chunks(12)) == [2, 4]
    assert fired(plan_of("drop times=3"), chunks(12)) == [1, 2, 3]
    assert fired(plan_of("drop"), chunks(3)) == [1, 2, 3]


def test_each_rule_counts_its_own_matches() -> None:
    clock = Clock()
    stream = [
        prompt(clock),
        chunk(clock),
        chunk(clock),
        reply(clock),
        prompt(clock),
        chunk(clock),
        reply(clock),
    ]
    plan = plan_of("drop if kind:response nth=2", "delay=1ms if update:agent_message_chunk every=2")
    decided = [[a.name for a in plan.decide(rec)] for rec in stream]
    assert decided == [[], [], ["delay"], [], [], [], ["drop"]]


def test_probability_is_deterministic_per_seed() -> None:
    def run(seed: int) -> list[int]:
        return fired(plan_of("drop p=0.3", seed=seed), chunks(500))

    assert run(7) == run(7)
    assert run(7) != run(8)
    assert 100 < len(run(7)) < 200
    assert fired(plan_of("drop p=0", seed=1), chunks(50)) == []
    assert fired(plan_of("drop p=1", seed=1), chunks(50)) == list(range(1, 51))


def test_probability_streams_are_per_rule_index() -> None:
    # Two identical rules draw from different streams: seeded with (seed, rule index).
    plan = plan_of("delay=1ms p=0.5", "duplicate p=0.5", seed=3)
    hits: dict[str, list[int]] = {"delay": [], "duplicate": []}
    for n, rec in enumerate(chunks(200), 1):
        for action in plan.decide(rec):
            hits[action.name].append(n)
    assert hits["delay"] != hits["duplicate"]


def test_probability_applies_to_selected_matches_only() -> None:
    # every=2 selects even matches; p decides among them; times caps what fires.
    hits = fired(plan_of("drop every=2 p=0.5 times=5", seed=4), chunks(400))
    assert len(hits) == 5 and all(n % 2 == 0 for n in hits)


def test_jitter_is_seeded_and_bounded() -> None:
    def delays(seed: int) -> list[float]:
        plan = plan_of("delay=200ms~50ms", seed=seed)
        return [a.seconds for rec in chunks(100) for a in plan.decide(rec) if isinstance(a, Delay)]

    first = delays(1)
    assert first == delays(1) and first != delays(2)
    assert all(0.15 <= d <= 0.25 for d in first) and len(set(first)) > 50
    plan = plan_of("delay=10ms~50ms", seed=1)
    assert all(a.seconds >= 0 for rec in chunks(100) for a in plan.decide(rec))


def test_after_a_duration_counts_from_the_plan_start() -> None:
    clock = Clock()
    plan = FaultPlan(faults.parse_rules(["drop after=1s nth=1"]), seed=1, start_ns=clock.now)
    stream = []
    for step in range(5):
        clock.now = 1_000_000_000 + step * 400_000_000  # 0, 0.4, 0.8, 1.2, 1.6 s
        stream.append(chunk(clock))
    # Frames before the gate are not matches: nth=1 is the first frame after 1 s.
    assert fired(plan, stream) == [4]
    # Without a start, the first frame seen starts the clock.
    plan = FaultPlan(faults.parse_rules(["drop after=1s"]), seed=1)
    assert fired(plan, stream) == [4, 5]


def test_after_n_frames_counts_frames_of_both_directions() -> None:
    clock = Clock()
    stream = [prompt(clock), chunk(clock), chunk(clock), reply(clock), chunk(clock)]
    plan = plan_of("drop if dir:a2c after=2 frames nth=2")
    assert fired(plan, stream) == [4]
    assert plan.needs_verdict("c2a") and plan.needs_verdict("a2c")


def test_stderr_lines_are_never_matched_or_counted() -> None:
    clock = Clock()
    plan = plan_of("drop after=1 frame")
    err = FrameRecord(1, 1, clock.now, "stderr", b"oops", None)
    assert plan.decide(err) == []
    assert plan.frames_seen == 0
    assert fired(plan, [chunk(clock), chunk(clock)]) == [2]


def test_error_only_counts_requests_and_responses() -> None:
    clock = Clock()
    stream = [chunk(clock), prompt(clock), chunk(clock), reply(clock)]
    plan = plan_of("error nth=2")
    assert fired(plan, stream) == [4]


# -- what each fault carries ---------------------------------------------------------------


def one(plan: FaultPlan, rec: FrameRecord) -> fault_actions.Action:
    actions = plan.decide(rec)
    assert len(actions) == 1, actions
    return actions[0]


@pytest.mark.parametrize(
    "line",
    [
        PROMPT,
        PROMPT_REPLY,
        CHUNK,
        TOOL_UPDATE,
        b'{"a":"' + "é".encode() * 40 + b'"}',
        b'{"jsonrpc":"2.0","id":1,"result":{}}\r',
        b"[1,2,3]",
        b"12",
        b'"just a string with } and \\" inside"',
        b"x",
        b" ",
    ],
)
def test_corrupt_keeps_the_length_and_is_invalid_json(line: bytes) -> None:
    rec = Clock().rec("a2c", line)
    action = one(plan_of("corrupt"), rec)
    assert isinstance(action, Corrupt)
    assert action.data.endswith(b"\n") and len(action.data) == len(line) + 1
    body = action.data[:-1]
    assert body != line
    with pytest.raises(ValueError):
        json.loads(body)
    with pytest.raises(ValueError):
        json.loads(body, strict=False)  # even a parser that allows control characters in strings
    with pytest.raises(msgspec.DecodeError):
        msgspec.json.decode(body)
    assert wire.decode(body).kind == "invalid"
    # Deterministic, and the UTF-8 stays valid when it was.
    assert one(plan_of("corrupt"), Clock().rec("a2c", line)).data == action.data
    body.decode()


def test_corrupt_of_an_unterminated_last_line_adds_no_newline() -> None:
    rec = Clock().rec("a2c", PROMPT_REPLY, terminated=False)
    action = one(plan_of("corrupt"), rec)
    assert len(action.data) == len(PROMPT_REPLY) and not action.data.endswith(b"\n")


def test_truncate_keeps_the_first_bytes_and_the_newline() -> None:
    clock = Clock()
    assert one(plan_of("truncate=10"), chunk(clock)).data == CHUNK[:10] + b"\n"
    assert one(plan_of("truncate"), chunk(clock)).data == CHUNK[: len(CHUNK) // 2] + b"\n"
    assert one(plan_of("truncate=100000"), chunk(clock)).data == CHUNK + b"\n"
    assert isinstance(one(plan_of("truncate=0"), chunk(clock)), Truncate)


def test_split_pieces_join_to_the_line() -> None:
    action = one(plan_of("split=3@10ms"), chunk(Clock()))
    assert isinstance(action, Split)
    assert len(action.parts) == 3 and b"".join(action.parts) == CHUNK + b"\n"
    assert max(map(len, action.parts)) - min(map(len, action.parts)) <= 1
    assert action.pause == 0.01
    short = one(plan_of("split=5"), Clock().rec("a2c", b"ab"))
    assert short.parts == (b"a", b"b", b"\n")


def test_error_answers_a_request_back_to_its_sender() -> None:
    action = one(plan_of('error=-32000:"Agent busy"'), prompt(Clock()))
    assert isinstance(action, ErrorReply) and action.to_sender
    assert action.data.endswith(b"\n") and action.data.count(b"\n") == 1
    assert json.loads(action.data) == {
        "jsonrpc": "2.0",
        "id": 7,
        "error": {"code": -32000, "message": "Agent busy"},
    }
    # The id is the same JSON value: the string "7" stays a string.
    action = one(plan_of("error"), Clock().rec("c2a", PROMPT_STR_ID))
    assert json.loads(action.data)["id"] == "7"
    assert wire.decode(action.data.rstrip(b"\n")).rpc_id == '"7"'


def test_error_replaces_a_response_with_the_same_id() -> None:
    for line in (PROMPT_REPLY, PROMPT_FAILED):
        action = one(plan_of("error=-32603"), Clock().rec("a2c", line, method="session/prompt"))
        assert isinstance(action, ErrorReply) and not action.to_sender
        decoded = wire.decode(action.data.rstrip(b"\n"))
        assert (decoded.kind, decoded.rpc_id, decoded.error_code, decoded.error_message) == (
            "error",
            "7",
            -32603,
            "Internal error",
        )
        assert "result" not in json.loads(action.data)


def test_error_on_a_response_with_a_null_id() -> None:
    action = one(plan_of("error"), Clock().rec("a2c", b'{"jsonrpc":"2.0","id":null,"result":1}'))
    assert json.loads(action.data)["id"] is None


def test_inject_carries_its_line_and_fills_in_the_session() -> None:
    clock = Clock()
    payload = '{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"${sessionId}"}}'
    plan = plan_of(f"inject='{payload}' after if kind:response")
    assert plan.decide(chunk(clock)) == []  # seen: session s1
    action = one(plan, reply(clock))  # a response has no sessionId: the last one seen is used
    assert isinstance(action, Inject) and action.position == "after"
    assert json.loads(action.data)["params"]["sessionId"] == "s1"
    assert action.data.endswith(b"\n")
    stray = one(plan_of("inject='not json'"), chunk(clock))
    assert (stray.data, stray.position) == (b"not json\n", "before")


def test_kill_close_stall_carry_their_target() -> None:
    clock = Clock()
    assert one(plan_of("kill"), chunk(clock)) == Kill(0, "kill", int(signal.SIGKILL), "SIGKILL")
    assert one(plan_of("close"), chunk(clock)) == Close(0, "close", "client-stdout")
    assert one(plan_of("close"), prompt(clock)) == Close(0, "close", "agent-stdin")
    assert one(plan_of("stall"), prompt(clock)) == Stall(0, "stall", "c2a")
    assert one(plan_of("drop"), prompt(clock)) == Drop(0, "drop")
    assert one(plan_of("reorder"), prompt(clock)) == Reorder(0, "reorder")
    assert one(plan_of("duplicate=2"), prompt(clock)) == Duplicate(0, "duplicate=2", 2)


def test_actions_know_their_rule_and_short_name() -> None:
    clock = Clock()
    plan = plan_of("drop if kind:notification", "delay=5ms")
    actions = plan.decide(chunk(clock))
    assert [(a.name, a.rule_index, a.rule_text) for a in actions] == [
        ("delay", 1, "delay=5ms"),
        ("drop", 0, "drop if kind:notification"),
    ]
    assert fault_actions.fault_label(actions) == "delay,drop"
    assert fault_actions.fault_label([]) is None
    assert [a.detail() for a in actions] == ["5ms", ""]


# -- several rules on one frame ------------------------------------------------------------


def test_first_listed_replacement_wins_and_the_other_keeps_its_budget() -> None:
    clock = Clock()
    plan = plan_of("drop nth=1", "corrupt times=1")
    assert [a.name for a in plan.decide(chunk(clock))] == ["drop"]
    # corrupt was overridden on frame 1, so its times=1 is still available.
    assert [a.name for a in plan.decide(chunk(clock))] == ["corrupt"]
    assert plan.decide(chunk(clock)) == []


def test_application_order() -> None:
    clock = Clock()
    plan = plan_of(
        "inject=after1 after",
        "reorder",
        "duplicate",
        "split=2",
        "truncate=4",
        "kill=TERM",
        "inject=before1",
        "delay=1ms",
    )
    actions = plan.decide(chunk(clock))
    assert [a.name for a in actions] == [
        "delay",
        "inject",
        "kill",
        "truncate",
        "split",
        "duplicate",
        "reorder",
        "inject",
    ]
    assert [a.position for a in actions if isinstance(a, Inject)] == ["before", "after"]
    split = next(a for a in actions if isinstance(a, Split))
    assert b"".join(split.parts) == CHUNK[:4] + b"\n"  # split cuts what is written


def test_modifiers_are_left_out_when_nothing_is_written_in_place() -> None:
    clock = Clock()
    plan = plan_of("drop nth=1", "duplicate", "inject=x after")
    assert [a.name for a in plan.decide(chunk(clock))] == ["drop", "inject"]
    assert [a.name for a in plan.decide(chunk(clock))] == ["duplicate", "inject"]
    plan = plan_of("error", "split", "reorder")
    assert [a.name for a in plan.decide(prompt(clock))] == ["error"]  # answered back
    assert [a.name for a in plan.decide(reply(clock))] == ["error", "split", "reorder"]  # replaced


def test_stall_and_close_of_the_frames_path_leave_out_what_follows() -> None:
    clock = Clock()
    plan = plan_of("inject=b", "stall", "inject=a after", "duplicate")
    assert [a.name for a in plan.decide(chunk(clock))] == ["inject", "stall"]
    plan = plan_of("close=client-stdout", "duplicate", "close=agent-stdin")
    assert [(a.name, a.detail()) for a in plan.decide(chunk(clock))] == [
        ("close", "client-stdout"),
        ("close", "agent-stdin"),
    ]
    # Closing the other direction's pipe leaves this frame alone.
    plan = plan_of("close=agent-stdin", "duplicate")
    assert [a.name for a in plan.decide(chunk(clock))] == ["close", "duplicate"]


# -- the fast path -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rules", "c2a", "a2c"),
    [
        ([], False, False),
        (["drop"], True, True),
        (["drop if dir:c2a kind:request"], True, False),
        (["delay=1ms if update:agent_message_chunk dir:a2c"], False, True),
        (["drop if -dir:c2a"], False, True),
        (["drop if dir:c2a", "corrupt if dir:a2c"], True, True),
        (["drop if dir:c2a OR kind:response"], True, True),
        (["drop if dir:c2a OR dir:stderr"], True, False),
        (["drop if (dir:agent OR dir:stderr) kind:notification"], False, True),
        (["drop if NOT dir:a2c"], True, False),
        (["drop if -(dir:a2c OR kind:request)"], True, False),
        (["drop if dir:stderr"], False, False),
        (["drop if dir:c2a dir:a2c"], False, False),
        (['drop if text:"dir:c2a"'], True, True),
        (["drop if dir:c2a after=2 frames"], True, True),
        (["drop if dir:c2a after=2s"], True, False),
        (["kill if method:session/prompt"], True, True),
    ],
)
def test_needs_verdict(rules: list[str], c2a: bool, a2c: bool) -> None:
    plan = plan_of(*rules)
    assert (plan.needs_verdict("c2a"), plan.needs_verdict("a2c")) == (c2a, a2c)
    assert not plan.needs_verdict("stderr")


def test_a_rule_pinned_to_one_direction_ignores_the_other() -> None:
    clock = Clock()
    plan = plan_of("drop if dir:c2a")
    assert plan.decide(chunk(clock)) == []
    assert [a.name for a in plan.decide(prompt(clock))] == ["drop"]


def test_the_design_examples_select_what_they_say() -> None:
    clock = Clock()
    stream = [prompt(clock), chunk(clock), clock.rec("a2c", TOOL_UPDATE), clock.rec("a2c", TOOL_UPDATE)]
    stream.append(reply(clock))
    plan = plan_of(
        "drop if method:session/prompt kind:response",
        "kill=SIGKILL if update:tool_call_update nth=2",
    )
    decided = [[(a.name, a.detail()) for a in plan.decide(rec)] for rec in stream]
    assert decided == [[], [], [], [("kill", "SIGKILL")], [("drop", "")]]


def test_same_seed_same_traffic_same_faults() -> None:
    rules = [
        "delay=20ms~10ms if dir:a2c p=0.3",
        "duplicate if kind:notification p=0.1 times=5",
        "corrupt every=7 p=0.5",
        "split=3@1ms p=0.2",
        "error if kind:request p=0.5",
    ]

    def run(seed: int) -> list[list[fault_actions.Action]]:
        clock = Clock()
        plan = FaultPlan(faults.parse_rules(rules), seed=seed)
        out = []
        for n in range(300):
            clock.now += 1_000_000
            rec = prompt(clock) if n % 10 == 0 else reply(clock) if n % 10 == 5 else chunk(clock)
            out.append(plan.decide(rec))
        return out

    assert run(99) == run(99)
    assert run(99) != run(100)
