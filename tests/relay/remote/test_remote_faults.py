"""Faults on the remote wire, against the SDK's real peers: its example server (hypercorn) and its
HTTP and WebSocket client, through ``acp-proxy serve --fault``. Each test states what the client
saw (an answer, an error, a timeout, a retry) and what the ``frames`` and ``faults`` tables hold.

One test (or one per transport) for each item of the ACP Remote conformance RFD's fault
vocabulary that a proxy can produce; docs/remote-faults.md maps them to the rules used here.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import run_proxy
from tests.relay.remote.conftest import INITIALIZE, ROOT, TIMEOUT, Served, fault_rows, frames, peer, start_serve

pytest.importorskip("hypercorn", reason="serve needs the remote extra (hypercorn)")
pytest.importorskip("trio_websocket", reason="serve needs the remote extra (trio-websocket)")
pytest.importorskip("websockets", reason="the SDK's WebSocket client needs agent-client-protocol[http]")
httpx = pytest.importorskip("httpx", reason="the SDK's HTTP client needs agent-client-protocol[http]")

pytestmark = pytest.mark.spawns

HERE = Path(__file__).parent
ANSWERED = "30"  # seconds the client waits for what must come (a loaded machine is slow)
UNANSWERED = "3"  # seconds it waits for the prompt's (or --again's) answer a fault keeps away
# http-agent, ws-agent: the same client through ``serve -- AGENT`` in front of the same echo agent
# on stdio (echo_stdio_agent.py): every rule must do there what it does in front of a remote agent.
BOTH = pytest.mark.parametrize("kind", ["http", "ws", "http-agent", "ws-agent"])
HTTP = pytest.mark.parametrize("kind", ["http", "http-agent"])


Target = str | list[str]
"""What serve stands in front of: an upstream URL, or a stdio agent's command line (-- AGENT)."""
ECHO_AGENT = [sys.executable, str(HERE / "echo_stdio_agent.py")]  # sdk_server.py's echo agent, on stdio


def faulted(target: Target, db_path: Path, rules: list[str], *more: str) -> Served:
    """``acp-proxy serve`` with fault rules in front of ``target``, recording to ``db_path``."""
    faults = [word for rule in rules for word in ("--fault", rule)]
    if isinstance(target, str):
        return start_serve("--upstream", target, "--db", str(db_path), *faults, *more)
    return start_serve("--db", str(db_path), *faults, *more, "--", *target, cwd=ROOT)


def client(kind: str, url: str, *args: str, wait: str = UNANSWERED) -> list[str]:
    """What the SDK's client saw, one line per outcome (tests/relay/remote/sdk_fault_client.py)."""
    done = subprocess.run(
        [sys.executable, str(HERE / "sdk_fault_client.py"), kind, url, "--wait", ANSWERED, "--short", wait, *args],
        capture_output=True,
        timeout=TIMEOUT,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def through(
    upstream: Target, db_path: Path, kind: str, rules: list[str], *args: str, wait: str = UNANSWERED
) -> tuple[list[str], str]:
    """The SDK client's conversation through serve with ``rules``: what it saw, what serve said.
    ``kind`` http-agent, ws-agent: through ``serve -- AGENT`` in front of the stdio echo agent."""
    if kind.endswith("-agent"):
        upstream, kind = ECHO_AGENT, kind.removesuffix("-agent")
    serve = faulted(upstream, db_path, rules)
    try:
        seen = client(kind, serve.endpoint(kind), *args, wait=wait)
        said = serve.stop()
    finally:
        serve.kill()
    assert "Traceback" not in said, said
    return seen, said


def row(rows: list[dict[str, object]], direction: str, kind: str, method: str, nth: int = 1) -> dict[str, object]:
    found = [r for r in rows if (r["dir"], r["kind"], r["method"]) == (direction, kind, method)]
    assert len(found) >= nth, (direction, kind, method, rows)
    return found[nth - 1]


def events(rows: list[dict[str, object]]) -> list[str]:
    """The proxy's own lines about the transport."""
    return [str(r["raw"]) for r in rows if r["dir"] == "stderr"]


# -- drop a server-to-client response or event ------------------------------------------------


@BOTH
def test_a_drop_rule_on_serve_drops_the_prompt_response_and_records_the_fault(
    upstream: str, db_path: Path, kind: str
) -> None:
    seen, _ = through(upstream, db_path, kind, ["drop if method:session/prompt kind:response"])
    assert seen == ["initialized", "session: ok", "<< echo: hi", "prompt: timeout"]
    rows = frames(db_path)
    dropped = row(rows, "a2c", "response", "session/prompt")
    assert (dropped["forwarded"], dropped["fault"]) == (0, "drop")
    assert dropped["transport"] == ("websocket" if kind.startswith("ws") else "http")
    assert fault_rows(db_path) == [(dropped["run_id"], dropped["seq"], "drop")]


@BOTH
def test_drop_an_event(upstream: str, db_path: Path, kind: str) -> None:
    seen, _ = through(upstream, db_path, kind, ["drop if method:session/update"], wait=ANSWERED)
    assert seen == ["initialized", "session: ok", "stop reason: end_turn"]  # no echo
    update = row(frames(db_path), "a2c", "notification", "session/update")
    assert (update["forwarded"], update["fault"]) == (0, "drop")
    assert fault_rows(db_path) == [(update["run_id"], update["seq"], "drop")]


# -- drop a client-to-server message before or after the server accepts it --------------------


@BOTH
def test_drop_a_client_message_before_the_server_accepts_it(upstream: str, db_path: Path, kind: str) -> None:
    seen, _ = through(upstream, db_path, kind, ["drop if method:session/prompt kind:request"])
    # On HTTP the POST was answered 202 (the SDK client raises on any other status): accepted,
    # as far as the client can tell, and never delivered.
    assert seen == ["initialized", "session: ok", "prompt: timeout"]
    rows = frames(db_path)
    prompt = row(rows, "c2a", "request", "session/prompt")
    assert (prompt["forwarded"], prompt["fault"]) == (0, "drop")
    assert not [r for r in rows if r["dir"] == "a2c" and r["method"] in ("session/update", "session/prompt")]
    assert fault_rows(db_path) == [(prompt["run_id"], prompt["seq"], "drop")]


@BOTH
def test_drop_a_client_message_after_the_server_accepted_it(upstream: str, db_path: Path, kind: str) -> None:
    seen, _ = through(
        upstream, db_path, kind, ["drop=after if method:session/prompt kind:request"], "--await-echo", "echo: hi"
    )
    # The agent did the work (its echo came), its answer was lost: on HTTP the POST's answer is
    # cut off, on WebSocket the response never comes.
    lost = "prompt: error RemoteProtocolError" if not kind.startswith("ws") else "prompt: timeout"
    # (The echo and the cut answer travel on different HTTP streams: their order is the client's.)
    assert seen[:2] == ["initialized", "session: ok"] and "<< echo: hi" in seen
    assert len(seen) == 4 and any(line.startswith(lost) for line in seen), seen
    rows = frames(db_path)
    prompt = row(rows, "c2a", "request", "session/prompt")
    assert (prompt["forwarded"], prompt["fault"], prompt["note"]) == (1, "drop", "delivered; its answer lost")
    answer = row(rows, "a2c", "response", "session/prompt")
    assert answer["forwarded"] == 0 and str(answer["note"]).startswith("its answer lost: drop=after")
    assert fault_rows(db_path) == [(prompt["run_id"], prompt["seq"], "drop")]


# -- duplicate a complete message ----------------------------------------------------------------


@BOTH
def test_duplicate_a_complete_message(upstream: str, db_path: Path, kind: str) -> None:
    rule = "duplicate if method:session/prompt kind:request"
    # --again: one more round trip, so the copy's answers have come before the client leaves.
    seen, _ = through(upstream, db_path, kind, [rule], "--again", wait=ANSWERED)
    # (The echo and the answer are handled concurrently by the SDK client: their order is its own.)
    assert seen[:2] == ["initialized", "session: ok"] and "<< echo: hi" in seen
    assert "stop reason: end_turn" in seen and seen[-1] == "session again: ok"
    rows = frames(db_path)
    prompt = row(rows, "c2a", "request", "session/prompt")
    assert (prompt["fault"], prompt["note"]) == ("duplicate", "written 2 times")
    answers = [
        r for r in rows if r["dir"] == "a2c" and r["kind"] == "response" and json.loads(str(r["raw"]))["id"] == 2
    ]
    assert len(answers) == 2  # the agent answered the prompt twice
    assert len([r for r in rows if r["method"] == "session/update"]) == 2
    assert fault_rows(db_path) == [(prompt["run_id"], prompt["seq"], "duplicate")]


# -- delay a message until a named barrier ---------------------------------------------------------


@BOTH
def test_hold_a_message_until_a_named_barrier_is_released(upstream: str, db_path: Path, kind: str) -> None:
    rules = [
        "hold=two@60s if method:session/prompt kind:response nth=1",
        "release=two if method:session/prompt kind:request nth=2",
    ]
    seen, _ = through(upstream, db_path, kind, rules, "--two-prompts", wait=ANSWERED)
    # The answer to "one" is held until the client sends "two" (without the release it would
    # wait 60 s, past the client's patience): both are answered.
    assert seen[:4] == ["initialized", "session: ok", "<< echo: one", "sending two"]
    assert {"stop reason one: end_turn", "stop reason two: end_turn"} <= set(seen)
    rows = frames(db_path)
    second = row(rows, "c2a", "request", "session/prompt", 2)
    held = row(rows, "a2c", "response", "session/prompt")
    assert (
        json.loads(str(held["raw"]))["id"]
        == json.loads(str(row(rows, "c2a", "request", "session/prompt")["raw"]))["id"]
    )
    assert (second["fault"], held["fault"], held["forwarded"]) == ("release", "hold", 1)
    assert int(str(held["seq"])) > int(str(second["seq"]))  # it went out after "two" came in
    assert "acp-proxy: barrier two released by a fault rule" in events(rows)
    assert fault_rows(db_path) == [(second["run_id"], second["seq"], "release"), (held["run_id"], held["seq"], "hold")]


@HTTP
def test_a_hold_whose_barrier_is_never_released_goes_on_after_its_time(upstream: str, db_path: Path, kind: str) -> None:
    seen, _ = through(
        upstream, db_path, kind, ["hold=never@200ms if method:session/prompt kind:response"], wait=ANSWERED
    )
    assert seen[-1] == "stop reason: end_turn"
    rows = frames(db_path)
    held = row(rows, "a2c", "response", "session/prompt")
    assert (held["fault"], held["forwarded"]) == ("hold", 1)
    assert "acp-proxy: hold=never: not released in time, the frame goes on" in events(rows)


# -- close a stream cleanly or abort it mid-frame ------------------------------------------------


@BOTH
def test_close_a_stream_cleanly(upstream: str, db_path: Path, kind: str) -> None:
    # The stream that carries the answer to session/new ends before it: on HTTP the
    # connection's SSE stream, on WebSocket the socket (1000). The SDK client notices.
    seen, _ = through(upstream, db_path, kind, ["close=stream if method:session/new kind:response"])
    assert seen == ["initialized", "session: error ConnectionError: Connection closed"]
    rows = frames(db_path)
    answer = row(rows, "a2c", "response", "session/new")
    assert (answer["forwarded"], answer["fault"]) == (0, "close")
    assert str(answer["note"]).startswith("its stream was closed")
    said = "the stream was closed" if not kind.startswith("ws") else "the WebSocket was closed"
    assert any(e.startswith(f"acp-proxy: {said} by a fault rule") for e in events(rows))
    assert fault_rows(db_path) == [(answer["run_id"], answer["seq"], "close")]


@BOTH
def test_abort_a_stream_mid_frame(upstream: str, db_path: Path, kind: str) -> None:
    seen, _ = through(upstream, db_path, kind, ["abort if method:session/new kind:response"])
    assert seen == ["initialized", "session: error ConnectionError: Connection closed"]
    rows = frames(db_path)
    answer = row(rows, "a2c", "response", "session/new")
    assert (answer["forwarded"], answer["fault"]) == (0, "abort")
    assert fault_rows(db_path) == [(answer["run_id"], answer["seq"], "abort")]
    if kind.startswith("ws"):
        assert "acp-proxy: connection aborted by a fault rule (no close handshake)" in events(rows)


def test_an_aborted_sse_stream_ends_inside_an_event(upstream: str, db_path: Path) -> None:
    """What the wire looks like: half an event, then no end of the stream."""
    serve = faulted(upstream, db_path, ["abort if method:session/new kind:response"])
    try:
        with httpx.Client(timeout=TIMEOUT) as http:
            init = http.post(serve.url, json=INITIALIZE)
            connection = {"acp-connection-id": init.headers["acp-connection-id"]}
            got = b""
            with http.stream("GET", serve.url, headers={**connection, "accept": "text/event-stream"}) as stream:
                new = {"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": "/", "mcpServers": []}}
                assert http.post(serve.url, json=new, headers=connection).status_code == 202
                with pytest.raises(httpx.RemoteProtocolError):
                    for chunk in stream.iter_raw():
                        got += chunk
        assert "Traceback" not in serve.stop()
    finally:
        serve.kill()
    assert got.startswith(b'data: {"jsonrpc"') and b"\n" not in got  # half an event, and no end


# -- half-close one direction ---------------------------------------------------------------------


@BOTH
def test_half_close_one_direction_while_the_other_stays_open(upstream: str, db_path: Path, kind: str) -> None:
    rule = "half-close=c2a if method:session/update"
    seen, _ = through(upstream, db_path, kind, [rule], "--again", "--again-wait", UNANSWERED, wait=ANSWERED)
    # Client to agent is closed from the agent's first update on; the agent's side still
    # delivers the prompt's answer, and the client's next request goes nowhere.
    assert seen == ["initialized", "session: ok", "<< echo: hi", "stop reason: end_turn", "session again: timeout"]
    rows = frames(db_path)
    update = row(rows, "a2c", "notification", "session/update")
    again = row(rows, "c2a", "request", "session/new", 2)
    assert (update["fault"], update["forwarded"]) == ("half-close", 1)
    assert (again["forwarded"], again["note"]) == (0, "direction half-closed by a fault")
    assert "acp-proxy: c2a half-closed by a fault rule" in events(rows)
    assert fault_rows(db_path) == [(update["run_id"], update["seq"], "half-close")]


# -- return a transient HTTP status with or without Retry-After ----------------------------------


@HTTP
def test_a_transient_503_and_the_client_that_retries(upstream: str, db_path: Path, kind: str) -> None:
    seen, _ = through(
        upstream, db_path, kind, ["status=503:1 if method:session/prompt nth=1"], "--retry", wait=ANSWERED
    )
    assert seen == [
        "initialized",
        "session: ok",
        "prompt: error AcpHttpStatusError: HTTP 503: POST session/prompt failed",
        "retrying",
        "<< echo: hi",
        "stop reason: end_turn",
    ]
    rows = frames(db_path)
    refused = row(rows, "c2a", "request", "session/prompt")
    retried = row(rows, "c2a", "request", "session/prompt", 2)
    assert (refused["forwarded"], refused["fault"]) == (0, "status")
    assert (retried["forwarded"], retried["fault"]) == (1, None)
    assert fault_rows(db_path) == [(refused["run_id"], refused["seq"], "status")]


def test_a_transient_status_with_and_without_retry_after(upstream: str, db_path: Path) -> None:
    rules = ["status=503:7 if method:session/new nth=1", "status=429 if method:session/new nth=2"]
    serve = faulted(upstream, db_path, rules)
    try:
        with httpx.Client(timeout=TIMEOUT) as http:
            init = http.post(serve.url, json=INITIALIZE)
            connection = {"acp-connection-id": init.headers["acp-connection-id"]}
            new = {"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": "/", "mcpServers": []}}
            answers = [http.post(serve.url, json=new, headers=connection) for _ in range(3)]
        serve.stop()
    finally:
        serve.kill()
    assert [a.status_code for a in answers] == [503, 429, 202]
    assert [a.headers.get("retry-after") for a in answers] == ["7", None, None]
    assert [action for _, _, action in fault_rows(db_path)] == ["status", "status"]


@HTTP
def test_a_transient_status_for_an_initialize_leaves_no_connection(upstream: str, db_path: Path, kind: str) -> None:
    """Rules see an HTTP connection's initialize too: the run is recorded from its first POST."""
    seen, _ = through(upstream, db_path, kind, ["status=503:3 if method:initialize"])
    assert seen == ["initialize: error AcpHttpStatusError: HTTP 503: initialize failed"]
    rows = frames(db_path)
    assert [(r["dir"], r["method"], r["forwarded"], r["fault"]) for r in rows] == [("c2a", "initialize", 0, "status")]
    if kind == "http":
        assert rows[0]["connection"] is None  # the agent never made one
    assert fault_rows(db_path) == [(rows[0]["run_id"], rows[0]["seq"], "status")]


@HTTP
def test_a_dropped_json_answer_is_lost_on_its_way(upstream: str, db_path: Path, kind: str) -> None:
    """The answer to an HTTP initialize is the POST's JSON body: dropped, it is cut off."""
    seen, _ = through(upstream, db_path, kind, ["drop if method:initialize kind:response"])
    assert len(seen) == 1 and seen[0].startswith("initialize: error RemoteProtocolError"), seen
    rows = frames(db_path)
    answer = row(rows, "a2c", "response", "initialize")
    assert (answer["forwarded"], answer["fault"], answer["stream"]) == (0, "drop", "post")
    assert row(rows, "c2a", "request", "initialize")["forwarded"] == 1  # the agent has a connection
    assert fault_rows(db_path) == [(answer["run_id"], answer["seq"], "drop")]


@pytest.mark.parametrize("behind", ["upstream", "agent"])
def test_a_transient_status_on_a_websocket_closes_it_with_try_again_later(
    upstream: str, db_path: Path, behind: str
) -> None:
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    serve = faulted(upstream if behind == "upstream" else ECHO_AGENT, db_path, ["status=503 if method:initialize"])
    try:
        with connect(serve.endpoint("ws"), open_timeout=TIMEOUT) as ws:
            ws.send(json.dumps(INITIALIZE))
            with pytest.raises(ConnectionClosed) as closed:
                ws.recv(timeout=TIMEOUT)
        serve.stop()
    finally:
        serve.kill()
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1013
    rows = frames(db_path)
    init = row(rows, "c2a", "request", "initialize")
    assert (init["forwarded"], init["fault"]) == (0, "status")
    assert fault_rows(db_path) == [(init["run_id"], init["seq"], "status")]


# -- restart the upstream connection ------------------------------------------------------------


@pytest.mark.parametrize("kind", ["http", "ws"])
def test_restart_the_upstream_connection(upstream: str, db_path: Path, kind: str) -> None:
    seen, _ = through(upstream, db_path, kind, ["restart if method:session/prompt kind:request"], wait=ANSWERED)
    rows = frames(db_path)
    prompt = row(rows, "c2a", "request", "session/prompt")
    assert (prompt["forwarded"], prompt["fault"]) == (1, "restart")
    assert fault_rows(db_path) == [(prompt["run_id"], prompt["seq"], "restart")]
    if kind.startswith("ws"):
        # A new agent connection takes the prompt (the SDK's echo agent does not check
        # sessions): the client is answered through it.
        assert seen[-1] == "stop reason: end_turn"
        (said,) = [e for e in events(rows) if "restarted" in e]
        connection = said.rsplit(" ", 1)[1]
        assert connection != prompt["connection"] and connection != "id)"
    else:
        # New HTTP connections upstream: the streams open on the old ones drop, and the SDK
        # client, whose connection stream ended, gives up on its pending prompt.
        assert seen[-1] == "prompt: error ConnectionError: Connection closed"
        assert "acp-proxy: the upstream HTTP connections were restarted by a fault rule" in events(rows)
        assert any(e.startswith("acp-proxy: the upstream dropped the stream") for e in events(rows))


def test_an_sse_answer_to_a_post_streams_through_the_rules(db_path: Path) -> None:
    """A POST may be answered with an SSE stream of its own: its events are judged one by one."""
    with peer("sse_answer_server.py", lifetime=300) as (_, upstream):
        serve = faulted(upstream, db_path, ["drop if method:session/update"])
        try:
            with httpx.Client(timeout=TIMEOUT) as http:
                init = http.post(serve.url, json=INITIALIZE)
                connection = {"acp-connection-id": init.headers["acp-connection-id"]}
                prompt = {"jsonrpc": "2.0", "id": 1, "method": "session/prompt", "params": {"sessionId": "s-1"}}
                answer = http.post(serve.url, json=prompt, headers=connection)
            assert "Traceback" not in serve.stop()
        finally:
            serve.kill()
    assert answer.status_code == 200 and answer.headers["content-type"] == "text/event-stream"
    assert answer.text == 'data: {"jsonrpc": "2.0", "id": 1, "result": {"stopReason": "end_turn"}}\n\n'
    rows = frames(db_path)
    update = row(rows, "a2c", "notification", "session/update")
    response = row(rows, "a2c", "response", "session/prompt")
    assert (update["forwarded"], update["fault"], update["stream"]) == (0, "drop", "post")
    assert (response["forwarded"], response["fault"], response["stream"]) == (1, None, "post")
    assert fault_rows(db_path) == [(update["run_id"], update["seq"], "drop")]


def test_serve_reads_rules_from_a_file_and_records_the_seed(upstream: str, db_path: Path, tmp_path: Path) -> None:
    rules = tmp_path / "faults.toml"
    rules.write_text('seed = 11\n\n[[fault]]\nrule = "status=503 if method:initialize"\n')
    serve = faulted(upstream, db_path, [], "--faults", str(rules))
    try:
        with httpx.Client(timeout=TIMEOUT) as http:
            assert http.post(serve.url, json=INITIALIZE).status_code == 503
        serve.stop()
    finally:
        serve.kill()
    with sqlite3.connect(db_path) as conn:
        (seed,) = conn.execute("select seed from runs").fetchone()
    assert seed == 11
    assert [action for _, _, action in fault_rows(db_path)] == ["status"]


# -- the rule language: remote actions are refused where they mean nothing ---------------------


def test_run_refuses_a_remote_fault_in_one_line(db_path: Path) -> None:
    done = run_proxy(
        ["run", "--db", str(db_path), "--fault", "status=503 if method:session/prompt", "--", sys.executable, "-c", ""],
        timeout=TIMEOUT,
    )
    assert done.returncode == 2
    err = done.stderr.decode()
    assert err.count("\n") == 1 and "status is a remote fault (acp-proxy serve only" in err, err


def test_faults_help_lists_the_remote_actions() -> None:
    done = run_proxy(["faults-help"], timeout=TIMEOUT)
    assert done.returncode == 0
    text = done.stdout.decode()
    for word in (
        "drop=after",
        "hold=NAME",
        "release=NAME",
        "close=stream",
        "abort",
        "status=CODE",
        "half-close",
        "restart",
    ):
        assert word in text, word
    assert max(len(line) for line in text.splitlines()) <= 100


def test_restart_has_no_upstream_connection_in_front_of_a_stdio_agent_and_says_so(db_path: Path) -> None:
    seen, _ = through(ECHO_AGENT, db_path, "http", ["restart if method:session/prompt kind:request"], wait=ANSWERED)
    assert seen[-1] == "stop reason: end_turn"  # the conversation goes on, with the same agent
    rows = frames(db_path)
    prompt = row(rows, "c2a", "request", "session/prompt")
    assert (prompt["forwarded"], prompt["fault"]) == (1, "restart")
    assert "acp-proxy: restart: a served stdio agent has no upstream connection to restart" in events(rows)


def test_kill_and_close_agent_stdin_act_on_a_served_stdio_agent(db_path: Path) -> None:
    """A served agent is a process of serve's own: kill= signals it, as run --fault does."""
    seen, said = through(ECHO_AGENT, db_path, "http", ["kill=TERM if method:session/prompt kind:request"])
    assert seen[:2] == ["initialized", "session: ok"] and seen[-1].startswith("prompt: "), seen
    assert "the agent exited with status -15" in said
    rows = frames(db_path)
    prompt = row(rows, "c2a", "request", "session/prompt")
    assert prompt["fault"] == "kill"
    assert "acp-proxy: signal 15 sent to the agent by a fault rule" in events(rows)
