"""The remote wire's fault actions in-process: the rule language (what it accepts, what it refuses
in one line, where) and the gate's steps for each action, played as in ``test_gate_playbook``.
The relay that carries the steps out on WebSocket and Streamable HTTP is tested against the SDK's
peers in ``tests/relay/remote/test_remote_faults.py``."""

from __future__ import annotations

import pytest

from acp_proxy.faults import actions as fa
from acp_proxy.faults.gate import AwaitBarrier, Forward, Gate, Note, ReleaseBarrier, Send, Wire
from acp_proxy.faults.plan import FaultPlan
from acp_proxy.faults.rules import HELP, RuleError, parse_rule
from tests.faults.test_gate_playbook import ANSWER, CHUNK, PROMPT, Chunk, Clock, Playbook, line, meta, req

PROMPT_TWO = req(3, "session/prompt", {"sessionId": "sess_1", "prompt": []})


def remote_gate(*rules: str) -> Gate:
    return Gate(plan=FaultPlan.build(rules, seed=7, remote=True), clock=Clock())


# -- the rule language ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rule", "params"),
    [
        ("drop=after if kind:request", {"after": True}),
        ("drop=before", {}),
        ("drop", {}),
        ("hold=go", {"barrier": "go", "ns": None}),
        ("hold=go@1.5s", {"barrier": "go", "ns": 1_500_000_000}),
        ("release=go if kind:response", {"barrier": "go"}),
        ("close=stream", {"pipe": "stream"}),
        ("abort", {}),
        ("status=503", {"code": 503, "retry_after": None}),
        ("status=429:30", {"code": 429, "retry_after": 30}),
        ("half-close", {"direction": None}),
        ("half-close=a2c", {"direction": "a2c"}),
        ("restart nth=2", {}),
    ],
)
def test_the_remote_actions_parse(rule: str, params: dict[str, object]) -> None:
    assert parse_rule(rule).params == params


@pytest.mark.parametrize(
    ("rule", "said"),
    [
        ("drop=later", "drop takes no argument but before or after"),
        ("hold", "hold needs a barrier name"),
        ("hold=a b", "expected 'if FILTER'"),
        ("hold=x@forever", "bad duration"),
        ("hold=x@25h", "at most 24h"),
        ("release=x@1s", "release takes a barrier name only"),
        ("status=200", "status is an HTTP error status from 400 to 599"),
        ("status=503:soon", "Retry-After is a whole number of seconds"),
        ("status", "status needs an HTTP status"),
        ("half-close=both", "half-close takes c2a or a2c"),
        ("abort=1", "abort takes no argument"),
        ("restart=now", "restart takes no argument"),
        ("close=socket", "close takes agent-stdin or client-stdout (or stream, on serve)"),
    ],
)
def test_a_bad_remote_rule_is_refused_with_what_is_wrong(rule: str, said: str) -> None:
    with pytest.raises(RuleError) as refused:
        parse_rule(rule)
    assert said in refused.value.one_line()
    assert "\n" not in refused.value.one_line()


@pytest.mark.parametrize(
    "rule", ["hold=x", "release=x", "close=stream", "abort", "status=503", "half-close", "restart"]
)
def test_a_stdio_run_refuses_the_remote_actions_and_serve_takes_them(rule: str) -> None:
    with pytest.raises(RuleError) as refused:
        FaultPlan.build([rule])
    assert "is a remote fault (acp-proxy serve only" in refused.value.one_line()
    assert FaultPlan.build([rule], remote=True).rules[0].text == rule


def test_drop_after_is_no_remote_only_action() -> None:
    assert FaultPlan.build(["drop=after if kind:request"]).rules[0].params == {"after": True}


def test_the_help_names_every_remote_action_in_100_columns() -> None:
    for word in ("drop=after", "hold=NAME[@D]", "release=NAME", "close=stream", "abort", "status=CODE[:S]"):
        assert word in HELP
    assert "half-close[=DIR]" in HELP and "restart" in HELP
    assert max(len(text) for text in HELP.splitlines()) <= 100


# -- the gate's steps --------------------------------------------------------------------------


def test_drop_after_delivers_the_request_and_loses_its_answer() -> None:
    rule = "drop=after if method:session/prompt kind:request"
    g = remote_gate(rule)
    done = meta(rule, "drop", note="delivered; its answer lost", detail="after: delivered, its answer lost")
    action = fa.Drop(0, rule, True)
    assert (
        Playbook(g)
        >> Chunk("c2a", PROMPT)
        << Note("c2a", line(PROMPT), done)
        << Send("c2a", PROMPT)
        << Wire("c2a", action)
        >> Chunk("a2c", CHUNK + ANSWER)
        << Forward("a2c", CHUNK)
        << Note("a2c", line(ANSWER), {"forwarded": 0, "note": "its answer lost: drop=after on the request it answers"})
    )


def test_hold_waits_for_its_barrier_and_release_opens_it_after_its_frame() -> None:
    hold, release = "hold=two@5s if method:session/prompt kind:response", "release=two if kind:request nth=2"
    g = remote_gate(hold, release)
    assert (
        Playbook(g)
        >> Chunk("c2a", PROMPT)
        << Forward("c2a", PROMPT)
        >> Chunk("a2c", ANSWER)
        << AwaitBarrier("two", 5.0)
        << Note("a2c", line(ANSWER), meta(hold, "hold", detail="two (at most 5000ms)"))
        << Send("a2c", ANSWER)
        >> Chunk("c2a", PROMPT_TWO)
        << Note("c2a", line(PROMPT_TWO), meta(release, "release", detail="two"))
        << Send("c2a", PROMPT_TWO)
        << ReleaseBarrier("two")
    )


def test_status_and_abort_replace_the_frame_after_it_is_recorded() -> None:
    status, abort = "status=503:2 if kind:request nth=1", "abort if kind:request nth=2"
    g = remote_gate(status, abort)
    assert (
        Playbook(g)
        >> Chunk("c2a", PROMPT)
        << Note(
            "c2a",
            line(PROMPT),
            meta(
                status,
                "status",
                forwarded=0,
                note="answered HTTP 503, Retry-After: 2",
                detail="HTTP 503, Retry-After: 2",
            ),
        )
        << Wire("c2a", fa.Status(0, status, 503, 2))
        >> Chunk("c2a", PROMPT_TWO)
        << Note(
            "c2a",
            line(PROMPT_TWO),
            meta(
                abort,
                "abort",
                forwarded=0,
                note=f"cut after {len(PROMPT_TWO) // 2} bytes",
                detail=f"cut after {len(PROMPT_TWO) // 2} bytes",
            ),
        )
        << Wire("c2a", fa.Abort(1, abort, PROMPT_TWO[: len(PROMPT_TWO) // 2]))
    )


def test_status_matches_client_messages_only() -> None:
    g = remote_gate("status=503")
    assert Playbook(g) >> Chunk("a2c", ANSWER) << Forward("a2c", ANSWER)


def test_half_close_shuts_one_direction_and_leaves_the_other_open() -> None:
    rule = "half-close=c2a if update:agent_message_chunk"
    g = remote_gate(rule)
    assert (
        Playbook(g)
        >> Chunk("a2c", CHUNK)
        << Wire("a2c", fa.HalfClose(0, rule, "c2a"))
        << Note("a2c", line(CHUNK), meta(rule, "half-close", detail="c2a"))
        << Send("a2c", CHUNK)
        >> Chunk("c2a", PROMPT)
        << Note("c2a", line(PROMPT), {"forwarded": 0, "note": "direction half-closed by a fault"})
        >> Chunk("a2c", ANSWER)
        << Forward("a2c", ANSWER)
    )


def test_close_stream_and_restart_come_before_their_frame() -> None:
    close, restart = "close=stream if kind:response", "restart if kind:request"
    g = remote_gate(close, restart)
    assert (
        Playbook(g)
        >> Chunk("c2a", PROMPT)
        << Wire("c2a", fa.Restart(1, restart))
        << Note("c2a", line(PROMPT), meta(restart, "restart"))
        << Send("c2a", PROMPT)
        >> Chunk("a2c", ANSWER)
        << Wire("a2c", fa.Close(0, close, "stream"))
        << Note("a2c", line(ANSWER), meta(close, "close", forwarded=0, note="its stream was closed", detail="stream"))
    )


def test_the_same_rules_and_seed_give_the_same_remote_faults() -> None:
    rules = ["status=503 p=0.5", "hold=x@1ms p=0.5"]

    def played() -> list[object]:
        g = remote_gate(*rules)
        return [step for _ in range(20) for step in g.chunk("c2a", PROMPT)]

    first = played()
    assert first == played()
    assert any(isinstance(s, Wire) for s in first) and any(isinstance(s, Forward) for s in first)
