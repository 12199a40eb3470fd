"""``acp-proxy mcp`` through the SDK's stdio client: the insight tools, the prompts, answers
bounded and paged, and secrets that no tool or argument reads or probes."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import anyio

from acp_proxy.record.importers import Record, write_run
from tests.conftest import PROXY
from tests.mcp.test_mcp import MAX_ANSWER, Answer

Call = tuple[str, dict[str, Any]]


def serve(db: Path, calls: list[Call], prompts: list[Call], errlog: Path) -> tuple[list[Any], list[Answer], Any]:
    """`acp-proxy mcp --db DB` under the SDK's client: its tools, ``calls``' answers, and the
    prompts listed with ``prompts`` rendered."""
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(command=PROXY[0], args=[*PROXY[1:], "mcp", "--db", str(db)])

    async def main() -> tuple[list[Any], list[Answer], Any]:
        with anyio.fail_after(240), open(errlog, "w") as err:
            async with stdio_client(params, errlog=err) as (read, write), ClientSession(read, write) as client:
                await client.initialize()
                tools = (await client.list_tools()).tools
                answers = [Answer(await client.call_tool(name, args)) for name, args in calls]
                listed = (await client.list_prompts()).prompts
                rendered = [await client.get_prompt(name, args) for name, args in prompts]
                return tools, answers, (listed, rendered)

    return anyio.run(main, backend="asyncio")


def bounded(answer: Answer) -> None:
    assert len(answer.text) <= MAX_ANSWER
    if answer.structured is not None:
        assert len(json.dumps(answer.structured, ensure_ascii=False)) <= MAX_ANSWER


def test_insights_metadata_clients_exchanges_and_prompts(sdk_recording: tuple[Path, str], tmp_path: Path) -> None:
    db, sid = sdk_recording
    calls: list[Call] = [
        ("summary", {"ref": "1"}),
        ("summary", {}),
        ("session_info", {"ref": sid}),
        ("sessions_by_client", {}),
        ("exchanges", {"ref": "1"}),
        ("exchanges", {"ref": "1", "method": "session/prompt"}),
        ("exchanges", {"ref": "1", "limit": 2, "offset": 1}),
        ("show", {"ref": "1"}),
        ("show", {"ref": "1", "limit": 3}),
        ("show", {"ref": "1", "offset": 3, "limit": 10_000}),
    ]
    prompts: list[Call] = [
        ("triage_slow_session", {"ref": "1"}),
        ("audit_spec_violations", {"ref": sid}),
        ("compare_clients", {}),
    ]
    tools, answers, (listed, rendered) = serve(db, calls, prompts, tmp_path / "err.txt")
    assert all(t.output_schema for t in tools)
    for answer in answers:
        bounded(answer)
    one, every, info, clients, pairs, prompt_pairs, paged, whole, head, tail = (a.json() for a in answers)
    # show pages by lines: the pages put together are the whole text.
    assert (head["returned"], head["next"], head["total"]) == (3, 3, whole["total"]) and whole["next"] is None
    assert head["text"] + tail["text"] == whole["text"] and tail["returned"] == whole["total"] - 3

    # The summary: counts, latency by method, and the insights, from the recording itself.
    assert one["ref"] == "run 1" and one["runs"] == [1] and one["turns"] == 1 and one["frames"] > 10
    methods = {m["method"]: m for m in one["methods"]}
    assert {"initialize", "session/new", "session/prompt", "session/request_permission"} <= set(methods)
    hot = one["insights"]["hot_spot"]["method"]
    assert hot["total_ms"] == max(m["total_ms"] for m in one["methods"] if m["method"] != "session/prompt")
    assert one["insights"]["errors"]["count"] == 0 and one["insights"]["errors"]["unanswered"] == 0
    assert set(one["insights"]) == {"hot_spot", "long_tail", "outliers", "errors"}
    assert every["runs"] == [1, 2] and every["turns"] == 2 and every["frames"] > one["frames"]

    # Session metadata: both sides' names and capabilities, protocol version, mode/model slots.
    assert [r["run_id"] for r in info["runs"]] == [1, 2]
    run = info["runs"][0]
    assert run["agent"]["name"] == "acp-proxy-sdk-agent" and run["protocol_version"] == 1
    # As initialize said them: the agent its capabilities, the SDK client none (so null).
    assert run["agent"]["capabilities"] == {"loadSession": True} and run["client"]["capabilities"] is None
    assert run["client"]["name"] == "acp-proxy-sdk-client" and run["client"]["version"] == "0.1.0"
    assert [s["session_id"] for s in info["sessions"]] == [sid]
    assert {"modes", "current_mode", "models", "current_model", "cwd"} <= set(info["sessions"][0])

    # Sessions by client: one client, both runs, the one session.
    assert clients["total"] == 1 and clients["items"][0]["runs"] == 2 and clients["items"][0]["session_ids"] == [sid]

    # Requests paired with their answers, paged with a total.
    assert pairs["total"] == len(pairs["items"]) and pairs["next"] is None
    assert [p["method"] for p in pairs["items"]][:2] == ["initialize", "session/new"]
    assert all(p["outcome"] == "response" and p["response"]["seq"] > p["request"]["seq"] for p in pairs["items"])
    prompt = prompt_pairs["items"]
    assert prompt_pairs["total"] == 1 and prompt[0]["request"]["body"]["prompt"][0]["text"] == "hello world"
    assert prompt[0]["response"]["body"]["stopReason"] == "end_turn" and prompt[0]["latency_ms"] > 0
    assert (paged["total"], paged["offset"], paged["returned"], paged["next"]) == (pairs["total"], 1, 2, 3)
    assert [p["request"]["seq"] for p in paged["items"]] == [p["request"]["seq"] for p in pairs["items"][1:3]]

    # The prompts: listed with titles, rendered naming the tools, with the arguments filled in.
    assert {p.name for p in listed} == {"triage_slow_session", "audit_spec_violations", "compare_clients"}
    assert all(p.title and p.description and all(a.description for a in p.arguments or []) for p in listed)
    texts = [r.messages[0].content.text for r in rendered]
    assert 'summary` with ref="1"' in texts[0] and "exchanges" in texts[0] and "long_tail" in texts[0]
    assert f'check` with ref="{sid}"' in texts[1] and "frame" in texts[1]
    assert "sessions_by_client" in texts[2] and "diff" in texts[2]
    # Every tool a prompt names (`name` followed by "with" or standing alone as a call) exists.
    named = {word for text in texts for word in re.findall(r"Call `(\w+)`", text)}
    assert named and named <= {t.name for t in tools}, named - {t.name for t in tools}


def big_recording(db: Path) -> tuple[int, str]:
    """A run whose frames are far more than one answer holds: 60 of 5,000 characters and one of
    250,000. Returns the big frame's seq and its raw line."""
    records = [
        Record("c2a", 1_000, b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}}'),
        Record("a2c", 2_000, b'{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":1}}'),
    ]
    for i in range(60):
        text = f"chunk {i} " + "x" * 5_000
        line = {
            "jsonrpc": "2.0",
            "method": "session/update",
            "params": {
                "sessionId": "s1",
                "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}},
            },
        }
        records.append(Record("a2c", 3_000 + i, json.dumps(line).encode()))
    big = {
        "jsonrpc": "2.0",
        "id": 9,
        "method": "fs/write_text_file",
        "params": {"sessionId": "s1", "path": "/tmp/f", "content": "".join(f"line {i}\n" for i in range(30_000))},
    }
    raw = json.dumps(big)
    records.append(Record("a2c", 9_000, raw.encode()))
    write_run(db, records, {})
    return len(records), raw


def test_no_answer_over_100000_characters_it_pages(tmp_path: Path) -> None:
    db = tmp_path / "big.db"
    big_seq, raw = big_recording(db)
    assert len(raw) > 2 * MAX_ANSWER
    calls: list[Call] = [
        ("frames", {"filter": "", "limit": 500, "max_chars": 10_000_000}),
        ("frame", {"run_id": 1, "seq": big_seq}),
        ("show", {"ref": "1"}),
        ("exchanges", {"ref": "1", "max_chars": 10_000_000}),
        ("summary", {"ref": "1"}),
        ("list_runs", {"limit": 0}),
    ]
    _, answers, _ = serve(db, calls, [], tmp_path / "err.txt")
    for answer in answers:
        assert not answer.error, answer.text
        bounded(answer)
    frames, frame, show, pairs, _, no_runs = (a.json() for a in answers)
    assert frames["total"] == big_seq and 0 < frames["returned"] < big_seq and frames["next"] == frames["returned"]
    assert frames["note"] and f"offset {frames['returned']}" in frames["note"]
    assert frames["after"] == f"1:{frames['items'][-1]['seq']}"
    assert frame["raw_chars"] == len(raw) and frame["next_raw_offset"] == len(frame["frame"]["raw"])
    assert "raw_offset=" in frame["note"] and "acp-proxy export 1" in frame["note"]
    assert pairs["total"] == 2 and pairs["returned"] >= 1
    assert (no_runs["total"], no_runs["returned"], no_runs["next"]) == (1, 0, 0)
    assert show["total"] > 0

    # Paging on: the rest of the frames after `after`, and the big frame whole, piece by piece.
    more: list[Call] = [("frames", {"filter": "", "limit": 500, "max_chars": 10_000_000, "after": frames["after"]})]
    _, answers, _ = serve(db, more, [], tmp_path / "err.txt")
    rest = answers[0].json()
    bounded(answers[0])
    assert rest["items"][0]["seq"] == frames["items"][-1]["seq"] + 1
    pieces = [frame]
    while pieces[-1]["next_raw_offset"] is not None:
        args = {"run_id": 1, "seq": big_seq, "raw_offset": pieces[-1]["next_raw_offset"]}
        _, answers, _ = serve(db, [("frame", args)], [], tmp_path / "err.txt")
        bounded(answers[0])
        pieces.append(answers[0].json())
    assert len(pieces) > 2 and "".join(p["frame"]["raw"] for p in pieces) == raw


# -- secrets ----------------------------------------------------------------------------------------

BEARER = "Bearer zq81Kk2mWc9vLp4TxR7yB3nH"
AWS = "wJalrXUtnFEMIK7MDENGbPxRfiCYzq81Kk2mWc9v"
GHP = "ghp_" + "Q7w9E2r4T6y8U1i3O5p7A9s2D4f6G8h0J2k4"
SK = "sk-" + "proj4Lm8Nq2Wv6Xz0Bc3Df5Gh7Jk9Mp1Rs3Tu5Vw7"
SECRETS = {"bearer": BEARER.split()[1], "aws": AWS, "ghp": GHP, "sk": SK}


def secret_recording(db: Path) -> None:
    """A session whose secrets sit where editors and agents put them, and repeat later in text."""

    def line(obj: dict[str, Any]) -> bytes:
        return json.dumps(obj).encode()

    def update(seq: int, sid: str, body: dict[str, Any]) -> Record:
        message = {"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": sid, "update": body}}
        return Record("a2c", seq * 1_000, line(message))

    sid = "sess-1"
    env = [{"name": "AWS_SECRET_ACCESS_KEY", "value": AWS}]
    server = {"name": "tools", "command": "/bin/tool", "args": [], "env": env}
    records = [
        Record(
            "c2a",
            1_000,
            line(
                {
                    "jsonrpc": "2.0",
                    "id": 0,
                    "method": "initialize",
                    "params": {
                        "protocolVersion": 1,
                        "clientCapabilities": {"fs": {"readTextFile": True}},
                        "_meta": {"proxy": {"headers": {"Authorization": BEARER}}},
                    },
                }
            ),
        ),
        Record("a2c", 2_000, line({"jsonrpc": "2.0", "id": 0, "result": {"protocolVersion": 1}})),
        Record(
            "c2a",
            3_000,
            line({"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": "/w", "mcpServers": [server]}}),
        ),
        Record("a2c", 4_000, line({"jsonrpc": "2.0", "id": 1, "result": {"sessionId": sid}})),
        Record(
            "c2a",
            5_000,
            line(
                {
                    "jsonrpc": "2.0",
                    "id": 2,
                    "method": "session/prompt",
                    "params": {"sessionId": sid, "prompt": [{"type": "text", "text": f"use {GHP} and {SK}"}]},
                }
            ),
        ),
        update(
            6,
            sid,
            {
                "sessionUpdate": "tool_call",
                "toolCallId": "t1",
                "title": f"export AWS={AWS} {GHP}",
                "kind": "execute",
                "status": "pending",
            },
        ),
        update(
            7,
            sid,
            {
                "sessionUpdate": "agent_message_chunk",
                "content": {"type": "text", "text": f"key {AWS} token {BEARER} {SK}"},
            },
        ),
        update(8, sid, {"sessionUpdate": "tool_call_update", "toolCallId": "t1", "status": "completed"}),
        Record(
            "a2c",
            9_000,
            line(
                {
                    "jsonrpc": "2.0",
                    "id": 2,
                    "error": {"code": -32000, "message": f"auth failed for {AWS} with {BEARER}"},
                }
            ),
        ),
        Record("stderr", 10_000, f"env AWS_SECRET_ACCESS_KEY={AWS} {GHP} {SK} {BEARER}".encode()),
    ]
    write_run(db, records, {"argv": ["agent", f"--token={GHP}"]})


def probes(secret: str) -> list[str]:
    """Filters that would say whether a recording holds ``secret`` (or its start) if a filter
    read the unmasked frames."""
    start = secret[:8]
    out = []
    for prefix in ("text:", "note:", "error:"):
        out += [f"{prefix}{start}", f'{prefix}"{secret}"', f"-{prefix}{start}", f"run:1 {prefix}{start} OR seq:0"]
    return out


def test_no_tool_or_argument_reads_or_probes_a_secret(tmp_path: Path) -> None:
    db = tmp_path / "secret.db"
    secret_recording(db)
    calls: list[Call] = []
    for ref in ("1", "last", "sess-1", "session:sess", "run:1", ""):
        for name in ("summary", "stats"):
            calls.append((name, {"ref": ref}))
        if ref:
            for name in ("session_info", "show", "exchanges", "check"):
                calls.append((name, {"ref": ref}))
            calls.append(("exchanges", {"ref": ref, "method": "session/prompt", "max_chars": 10_000_000}))
            calls.append(("diff", {"left": ref, "right": "1"}))
    calls += [("list_runs", {}), ("list_sessions", {}), ("sessions_by_client", {})]
    calls += [("frame", {"run_id": 1, "seq": seq}) for seq in range(1, 11)]
    calls += [("frame", {"run_id": 1, "seq": seq, "raw_offset": 5}) for seq in range(1, 11)]
    for filter in (
        "",
        "run:1",
        "dir:stderr",
        "kind:error",
        "method:session/prompt",
        "update:tool_call",
        "update:agent_message_chunk",
        "seq:1..10",
        "kind:error OR unanswered",
    ):
        calls.append(("frames", {"filter": filter, "max_chars": 10_000_000}))
    plain = len(calls)
    for secret in SECRETS.values():
        for probe in probes(secret):
            calls.append(("frames", {"filter": probe}))
            calls.append(("frames", {"filter": probe, "after": "1:1"}))
        calls.append(("exchanges", {"ref": "1", "method": secret}))
        calls.append(("show", {"ref": secret}))
    # A server per tool: the masking of one tool must not lean on what another call taught it.
    answers = [Answer.__new__(Answer)] * len(calls)
    for tool in {name for name, _ in calls}:
        mine = [i for i, (name, _) in enumerate(calls) if name == tool]
        _, got, _ = serve(db, [calls[i] for i in mine], [], tmp_path / "err.txt")
        for i, answer in zip(mine, got, strict=True):
            answers[i] = answer
    assert not any(a.error for a in answers[:plain]), [a.text for a in answers[:plain] if a.error]
    masked = 0
    for (name, args), answer in zip(calls, answers, strict=True):
        seen = answer.text + json.dumps(answer.structured or {})
        for value in args.values():  # an error may quote the caller's own argument: not a leak
            seen = seen.replace(str(value), "") if answer.error else seen
        for label, secret in SECRETS.items():
            # No secret, and no long piece of one (a mask that left a tail would be a leak).
            pieces = {secret[i : i + 12] for i in range(0, len(secret) - 11, 4)}
            assert not any(piece in seen for piece in pieces), (name, args, label)
        masked += "[redacted]" in seen
    assert masked > plain // 2
    # A probe answers as if the secret were not there: a match of its start would be an oracle.
    everything = next(
        a for c, a in zip(calls, answers, strict=True) if c == ("frames", {"filter": "", "max_chars": 10_000_000})
    )
    for (name, args), answer in zip(calls[plain:], answers[plain:], strict=True):
        if name == "show":
            assert answer.error  # a secret as a reference names nothing
            continue
        if name == "exchanges":
            assert answer.json()["total"] == 0  # nor as a method
            continue
        total = answer.json()["total"]
        if "after" in args:
            assert total == (everything.json()["total"] if args["filter"].startswith("-") else 0), args
        else:
            assert total == (everything.json()["total"] if args["filter"].startswith("-") else 0), args


# -- insights from known timings ----------------------------------------------------------------------


def timed_recording(db: Path, slow_ms: int) -> None:
    """A session whose timings are known: five fs/read_text_file requests answered in 10 ms and
    one in ``slow_ms``; a tool call that runs 2 s, another 50 ms; one error answer; a mode and a
    model chosen in session/new and the mode changed by session/set_mode."""
    sid = "s-timed"
    ms = 1_000_000
    records: list[Record] = []
    now = 1_000 * ms

    def add(direction: str, obj: dict[str, Any], after_ms: float = 1) -> None:
        nonlocal now
        now += int(after_ms * ms)
        records.append(Record(direction, now, json.dumps(obj).encode()))

    def update(body: dict[str, Any], after_ms: float = 1) -> None:
        add(
            "a2c",
            {"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": sid, "update": body}},
            after_ms,
        )

    add(
        "c2a",
        {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": 1,
                "clientCapabilities": {"fs": {"readTextFile": True}, "terminal": True},
                "clientInfo": {"name": "zed", "version": "0.200.0"},
            },
        },
    )
    add(
        "a2c",
        {
            "jsonrpc": "2.0",
            "id": 0,
            "result": {
                "protocolVersion": 1,
                "agentCapabilities": {"loadSession": True},
                "agentInfo": {"name": "timed-agent", "version": "1.0"},
            },
        },
    )
    add("c2a", {"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": "/w", "mcpServers": []}})
    add(
        "a2c",
        {
            "jsonrpc": "2.0",
            "id": 1,
            "result": {
                "sessionId": sid,
                "modes": {
                    "currentModeId": "ask",
                    "availableModes": [{"id": "ask", "name": "Ask"}, {"id": "code", "name": "Code"}],
                },
                "models": {"currentModelId": "m-small", "availableModels": [{"modelId": "m-small", "name": "Small"}]},
            },
        },
    )
    add(
        "c2a", {"jsonrpc": "2.0", "id": 2, "method": "session/set_mode", "params": {"sessionId": sid, "modeId": "code"}}
    )
    add("a2c", {"jsonrpc": "2.0", "id": 2, "result": {}})
    add(
        "c2a",
        {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "session/prompt",
            "params": {"sessionId": sid, "prompt": [{"type": "text", "text": "read"}]},
        },
    )
    update(
        {"sessionUpdate": "tool_call", "toolCallId": "slow", "title": "Build", "kind": "execute", "status": "pending"}
    )
    update({"sessionUpdate": "tool_call_update", "toolCallId": "slow", "status": "completed"}, after_ms=2_000)
    update({"sessionUpdate": "tool_call", "toolCallId": "quick", "title": "Read", "kind": "read", "status": "pending"})
    update({"sessionUpdate": "tool_call_update", "toolCallId": "quick", "status": "completed"}, after_ms=50)
    for i, latency in enumerate([10, 10, 10, slow_ms, 10, 10]):
        add(
            "a2c",
            {
                "jsonrpc": "2.0",
                "id": 100 + i,
                "method": "fs/read_text_file",
                "params": {"sessionId": sid, "path": f"/w/{i}"},
            },
        )
        add("c2a", {"jsonrpc": "2.0", "id": 100 + i, "result": {"content": "x"}}, after_ms=latency)
    add(
        "a2c", {"jsonrpc": "2.0", "id": 200, "method": "fs/read_text_file", "params": {"sessionId": sid, "path": "/no"}}
    )
    add("c2a", {"jsonrpc": "2.0", "id": 200, "error": {"code": -32002, "message": "not found: /no"}}, after_ms=5)
    add("a2c", {"jsonrpc": "2.0", "id": 3, "result": {"stopReason": "end_turn"}})
    write_run(db, records, {})


def test_insights_from_known_timings(tmp_path: Path) -> None:
    slow, steady = tmp_path / "slow.db", tmp_path / "steady.db"
    timed_recording(slow, 900)
    timed_recording(steady, 10)
    calls: list[Call] = [("summary", {"ref": "s-timed"}), ("session_info", {"ref": "1"}), ("sessions_by_client", {})]
    _, (summary, info, clients), _ = serve(slow, calls, [], tmp_path / "err.txt")
    _, (calm, *_), _ = serve(steady, calls[:1], [], tmp_path / "err.txt")
    found = summary.json()
    insights = found["insights"]
    reads = next(m for m in found["methods"] if m["method"] == "fs/read_text_file")
    # Seven reads: six answered (five in 10 ms, one in 900 ms), one error (5 ms).
    assert (reads["count"], reads["errors"], reads["dir"]) == (7, 1, "a2c")
    assert reads["p50_ms"] == 10 and reads["max_ms"] == 900 and reads["total_ms"] == 5 * 10 + 900 + 5
    # The turn waits for everything in it: the hot spot is what it waited for.
    assert insights["hot_spot"]["method"]["method"] == "fs/read_text_file"
    assert found["slowest_turn"]["duration_ms"] > 2_000 + 900
    tool = insights["hot_spot"]["tool_call"]
    assert (tool["tool_call_id"], tool["title"], tool["kind"], tool["duration_ms"]) == (
        "slow",
        "Build",
        "execute",
        2000,
    )
    assert [t["tool_call_id"] for t in found["slowest_tool_calls"]] == ["slow", "quick"]
    assert [t["method"] for t in insights["long_tail"]] == ["fs/read_text_file"]
    assert insights["long_tail"][0]["tail_ratio"] == 90
    outliers = insights["outliers"]
    assert (
        outliers["count"] == 1 and outliers["slowest"][0]["ms"] == 900 and outliers["slowest"][0]["times_median"] == 90
    )
    assert insights["errors"]["count"] == 1 and insights["errors"]["first"][0]["error_message"] == "not found: /no"
    assert found["turns"] == 1 and found["stop_reasons"] == {"end_turn": 1}
    # The same recording without the slow answer: no tail, no outlier.
    assert calm.json()["insights"]["long_tail"] == [] and calm.json()["insights"]["outliers"]["count"] == 0

    meta = info.json()
    run = meta["runs"][0]
    assert run["client"]["capabilities"] == {"fs": {"readTextFile": True}, "terminal": True}
    assert run["agent"]["name"] == "timed-agent" and run["client"]["name"] == "zed"
    session = meta["sessions"][0]
    assert session["current_mode"] == "code" and [m["id"] for m in session["modes"]] == ["ask", "code"]
    assert session["current_model"] == "m-small" and session["mcp_servers"] == []
    by_client = clients.json()["items"]
    assert [(c["client"], c["client_version"], c["sessions"], c["agents"]) for c in by_client] == [
        ("zed", "0.200.0", 1, ["timed-agent"])
    ]
