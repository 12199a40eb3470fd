"""The bridges, with the SDK's real peers: ``run --connect URL`` (the SDK's stdio example client
talks to its example HTTP/WebSocket server through the proxy) and ``serve -- AGENT`` (the SDK's
HTTP and WebSocket clients talk to a stdio agent through the proxy), what each client saw and
what the database holds; and the ``acp_proxy`` fixture given a URL."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import PROXY, proxy_env, run_proxy
from tests.relay.remote.conftest import ROOT, TIMEOUT, Served, frames, peer, runs, sdk_client

pytest.importorskip("hypercorn", reason="serve needs the remote extra (hypercorn)")
pytest.importorskip("trio_websocket", reason="the bridges need the remote extra (trio-websocket)")
pytest.importorskip("websockets", reason="the SDK's WebSocket client needs agent-client-protocol[http]")
httpx = pytest.importorskip("httpx", reason="the SDK's HTTP client needs agent-client-protocol[http]")

pytestmark = pytest.mark.spawns

EXAMPLES = ROOT / "examples"
SECRET = "sekrit-bearer-7f3a"
INITIALIZE = b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}}\n'


@pytest.fixture(scope="module")
def html_upstream() -> Iterator[str]:
    with peer("html_server.py") as (_, url):
        yield url


def stored_bytes(db_path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in db_path.parent.glob(db_path.name + "*") if p.is_file())


def sdk_stdio_client(agent_argv: list[str], prompt: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(EXAMPLES / "sdk_client.py"), "--prompt", prompt, *extra, "--", *agent_argv],
        capture_output=True,
        timeout=TIMEOUT,
        text=True,
        env=proxy_env(),
    )


# -- run --connect URL ---------------------------------------------------------------------

CONVERSATION = [
    ("c2a", "request", "initialize"),
    ("a2c", "response", "initialize"),
    ("c2a", "request", "session/new"),
    ("a2c", "response", "session/new"),
    ("c2a", "request", "session/prompt"),
    ("a2c", "notification", "session/update"),
    ("a2c", "response", "session/prompt"),
]


@pytest.mark.parametrize("scheme", ["ws", "http"])
def test_the_sdk_stdio_client_talks_to_the_remote_sdk_server_through_run_connect(
    upstream: str, db_path: Path, scheme: str
) -> None:
    url = upstream.replace("http", scheme, 1)
    proxy = [*PROXY, "run", "--db", str(db_path), "--connect", url, "--header", f"Authorization: Bearer {SECRET}"]
    done = sdk_stdio_client(proxy, "hello remote")
    assert done.returncode == 0, done.stderr
    said = done.stdout.splitlines()
    assert said[:2] == ["init: protocol=1 agent=?/? loadSession=false", "prompt: hello remote"]
    assert sorted(said[2:4]) == ["agent: echo: hello remote", "stop: end_turn"]
    assert len(said) == 5 and said[-1].startswith("session: ")

    (run,) = runs(db_path)
    assert (run["status"], run["exit_code"]) == ("ended", 0)
    options = json.loads(run["options"])
    assert options["transport"] == ("websocket" if scheme == "ws" else "http")
    assert json.loads(run["argv"]) == ["acp-proxy", "run", "--connect", url, "--header", "Authorization: ***"]
    assert SECRET.encode() not in stored_bytes(db_path)
    rows = [r for r in frames(db_path) if r["dir"] != "stderr"]
    assert sorted((r["dir"], r["kind"], r["method"]) for r in rows) == sorted(CONVERSATION)
    assert {r["transport"] for r in rows} == {options["transport"]}
    # Every message carries the connection, the initialize too (over HTTP the answer to it names
    # the connection), and so does the run row; the initialize is still the run's first frame.
    assert options["connection"] and {r["connection"] for r in rows} == {options["connection"]}
    assert (rows[0]["dir"], rows[0]["method"], rows[1]["dir"], rows[1]["method"]) == (
        "c2a",
        "initialize",
        "a2c",
        "initialize",
    )
    by_method = {(r["dir"], r["method"]): r["stream"] for r in rows}
    if scheme == "ws":
        assert set(by_method.values()) == {"websocket"}
    else:
        session = said[-1].split()[1]
        assert by_method[("c2a", "session/prompt")] == "post"
        assert by_method[("a2c", "initialize")] == "post"
        assert by_method[("a2c", "session/new")] == "sse"
        assert by_method[("a2c", "session/update")] == f"sse:{session}"
        assert by_method[("a2c", "session/prompt")] == f"sse:{session}"
    checked = run_proxy(["check", "--db", str(db_path), str(run["id"])], timeout=TIMEOUT)
    assert checked.returncode == 0, checked.stderr


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize("scheme", ["ws", "http"])
@pytest.mark.parametrize("what", ["down", "html"])
def test_run_connect_to_an_agent_that_is_down_or_not_acp_says_so_in_one_line_exits_1_and_is_recorded(
    html_upstream: str, db_path: Path, scheme: str, what: str
) -> None:
    url = html_upstream if what == "html" else f"http://127.0.0.1:{_closed_port()}/acp"
    url = url.replace("http", scheme, 1)
    done = run_proxy(["run", "--db", str(db_path), "--connect", url], input=INITIALIZE, timeout=TIMEOUT)
    said = done.stderr.decode()
    assert done.returncode == 1, said
    assert done.stdout == b""
    (line,) = said.splitlines()
    assert line.startswith(f"acp-proxy: the agent at {url} ") and "Traceback" not in said
    assert ("HTTP 200 (text/html" in line) if what == "html" else ("cannot be reached" in line)
    (run,) = runs(db_path)
    assert (run["status"], run["exit_code"]) == ("ended", 1)
    events = [r for r in frames(db_path) if r["dir"] == "stderr"]
    assert [r["raw"] for r in events] == [line]
    assert events[0]["origin"] == "proxy"


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--connect", "ftp://h/acp"], "--connect must be an http://, https://, ws:// or wss:// URL"),
        (["--connect", "ws://127.0.0.1:1/acp", "--header", "no colon"], "--header must be 'NAME: VALUE'"),
        (["--header", "A: b"], "--header is for --connect URL"),
        (["--connect", "ws://127.0.0.1:1/acp", "--", "agent"], "give no AGENT after --"),
        (["--connect", "ws://127.0.0.1:1/acp", "--control"], "--control is not available with --connect"),
        ([], "Missing argument '-- AGENT [ARGS]...' (or --connect URL)"),
    ],
)
def test_run_connect_refuses_what_it_cannot_use_in_one_line(db_path: Path, args: list[str], said: str) -> None:
    done = run_proxy(["run", "--db", str(db_path), *args], timeout=TIMEOUT)
    assert done.returncode == 2
    (line,) = done.stderr.decode().splitlines()
    assert said in line


# -- serve -- AGENT ------------------------------------------------------------------------


@pytest.fixture
def served(db_path: Path, serving: Callable[..., Served]) -> Served:
    """``serve -- AGENT`` in front of the SDK's stdio example agent."""
    server = serving("--db", str(db_path), "--", sys.executable, "examples/sdk_agent.py", cwd=ROOT)
    assert "(one agent per connection)" in server.said, server.said
    return server


@pytest.mark.parametrize("kind", ["ws", "http"])
def test_the_sdk_remote_clients_talk_to_a_stdio_agent_through_serve_one_agent_per_connection(
    served: Served, db_path: Path, kind: str
) -> None:
    url = served.url.replace("http", kind, 1)
    first = sdk_client(kind, url, "hello agent")
    second = sdk_client(kind, url, "hello again")
    assert first == sorted(
        ["initialized (protocol v1)", "session: <id>", "<< Client sent:", "<< hello agent", "stop reason: end_turn"]
    )
    assert "<< hello again" in second

    # Each connection was a run of its own agent, stopped with its connection (serve still runs).
    both = runs(db_path)
    assert len(both) == 2 and len({r["agent_pid"] for r in both}) == 2
    assert all((r["status"], r["exit_code"]) == ("ended", 0) for r in both)
    for run in both:
        with pytest.raises(ProcessLookupError):
            os.kill(run["agent_pid"], 0)
    assert served.proc.poll() is None
    served.stop()

    transport = "websocket" if kind == "ws" else "http"
    rows = [r for r in frames(db_path) if r["run_id"] == both[0]["id"] and r["dir"] != "stderr"]
    expected = [*CONVERSATION, ("a2c", "notification", "session/update")]
    assert sorted((r["dir"], r["kind"], r["method"]) for r in rows) == sorted(expected)
    assert {r["transport"] for r in rows} == {transport}
    assert len({r["connection"] for r in rows}) == 1 and rows[0]["connection"]
    streams = {(r["dir"], r["method"]): r["stream"] for r in rows}
    if kind == "ws":
        assert set(streams.values()) == {"websocket"}
    else:
        session = json.loads(next(r["raw"] for r in rows if r["method"] == "session/update"))["params"]["sessionId"]
        assert streams[("a2c", "initialize")] == "post"
        assert streams[("a2c", "session/new")] == "sse"
        assert streams[("a2c", "session/prompt")] == f"sse:{session}"
    checked = run_proxy(["check", "--db", str(db_path), str(both[0]["id"])], timeout=TIMEOUT)
    assert checked.returncode == 0, checked.stderr


def _exchanges(url: str) -> list[tuple[int, Any]]:
    """HTTP misuse, as the reference server answers it: status and JSON body of each."""
    answers: list[Any] = []
    with httpx.Client(timeout=TIMEOUT) as client:
        json_type = {"content-type": "application/json"}
        init = client.post(url, content=INITIALIZE, headers=json_type)
        assert init.status_code == 200, init.text
        connection = {"acp-connection-id": init.headers["acp-connection-id"], **json_type}
        answers.append(client.post(url, content=b'[{"jsonrpc":"2.0","id":1,"method":"x"}]', headers=connection))
        answers.append(client.post(url, content=b"{not json", headers=connection))
        answers.append(client.post(url, content=b"42", headers=connection))
        answers.append(
            client.post(url, content=b'{"jsonrpc":"2.0","id":2,"method":"x"}', headers={"content-type": "text/plain"})
        )
        answers.append(client.post(url, content=b'{"jsonrpc":"2.0","id":3,"method":"x"}', headers=json_type))
        unknown = {**connection, "acp-connection-id": "nope"}
        answers.append(client.post(url, content=b'{"jsonrpc":"2.0","id":4,"method":"x"}', headers=unknown))
        prompt = b'{"jsonrpc":"2.0","id":5,"method":"session/prompt","params":{"sessionId":"s"}}'
        answers.append(client.post(url, content=prompt, headers=connection))
        answers.append(client.post(url, content=prompt, headers={**connection, "acp-session-id": "s"}))
        answers.append(client.get(url, headers={**connection, "accept": "application/json"}))
        answers.append(client.get(url, headers={"accept": "text/event-stream"}))
        answers.append(client.delete(url, headers={"acp-connection-id": "nope"}))
        answers.append(client.delete(url, headers={"acp-connection-id": connection["acp-connection-id"]}))
        answers.append(client.delete(url, headers={"acp-connection-id": connection["acp-connection-id"]}))
    return [(r.status_code, r.json() if r.content else None) for r in answers]


def test_serve_agent_answers_http_misuse_as_the_sdk_server_does(upstream: str, served: Served) -> None:
    reference = _exchanges(upstream)
    assert [status for status, _ in reference] == [501, 400, 400, 415, 400, 404, 400, 404, 406, 400, 404, 202, 404]
    assert _exchanges(served.url) == reference


def test_serve_refuses_an_agent_and_an_upstream_together_and_an_agent_it_cannot_find(db_path: Path) -> None:
    both = run_proxy(["serve", "--db", str(db_path), "--upstream", "http://127.0.0.1:1/acp", "--", "x"])
    assert both.returncode == 2 and b"one of the two" in both.stderr
    missing = run_proxy(["serve", "--listen", "127.0.0.1:0", "--db", str(db_path), "--", "no-such-agent-here"])
    assert missing.returncode == 2
    assert missing.stderr.decode().splitlines()[0] == "acp-proxy: AGENT no-such-agent-here: command not found"
    stray = run_proxy(["serve", "--listen", "127.0.0.1:0", "--db", str(db_path), "true"])
    assert stray.returncode == 2 and b"a stdio agent comes after --" in stray.stderr


# -- the fixture, given a URL --------------------------------------------------------------


def test_the_acp_proxy_fixture_takes_a_url_for_stdio_and_remote_clients(
    acp_proxy: Callable[..., Any], upstream: str
) -> None:
    agent = acp_proxy(upstream.replace("http", "ws", 1), headers=[f"Authorization: Bearer {SECRET}"])
    result = agent.run([sys.executable, str(EXAMPLES / "sdk_client.py"), "--prompt", "via fixture", "--", *agent.argv])
    assert result.returncode == 0, result.stderr
    assert "agent: echo: via fixture" in result.stdout
    assert len(agent.frames("method:session/prompt")) == 2
    with agent.serve() as url:
        assert url.endswith("/acp")
        assert "<< echo: remote via fixture" in sdk_client("http", url, "remote via fixture")
    assert [json.loads(r["options"])["transport"] for r in agent.runs()] == ["websocket", "http"]
    assert SECRET.encode() not in stored_bytes(agent.db)


def test_a_drop_rule_on_run_connect_drops_the_prompt_response_and_the_fixture_names_it(
    acp_proxy: Callable[..., Any], upstream: str
) -> None:
    agent = acp_proxy(upstream, faults=["drop if method:session/prompt kind:response"])
    client = [sys.executable, str(EXAMPLES / "sdk_client.py"), "--prompt", "lost", "--timeout", "5"]
    result = agent.run([*client, "--", *agent.argv])
    assert result.returncode == 1 and "timed out" in result.stderr
    assert "agent: echo: lost" in result.stdout
    (fault,) = agent.faults()
    assert (fault["action"], fault["dir"], fault["method"]) == ("drop", "a2c", "session/prompt")


def test_an_agent_that_dies_is_its_connection_s_end_said_and_recorded_and_serve_goes_on(
    db_path: Path, serving: Callable[..., Served]
) -> None:
    dying = "import sys; sys.stdin.readline(); print('dying words', file=sys.stderr); sys.exit(3)"
    server = serving("--db", str(db_path), "--", sys.executable, "-c", dying)
    try:
        for _ in range(2):  # the first agent's death does not stop the next connection's
            with httpx.Client(timeout=TIMEOUT) as client:
                answer = client.post(server.url, content=INITIALIZE, headers={"content-type": "application/json"})
            assert (answer.status_code, answer.json()) == (500, {"error": "initialize failed"})
        both = runs(db_path)
        assert [(r["status"], r["exit_code"]) for r in both] == [("ended", 3), ("ended", 3)]
        assert server.proc.poll() is None
    finally:
        rest = server.stop()
    lines = rest.splitlines()
    assert lines.count("dying words") == 2 and "Traceback" not in rest
    assert sum(line.endswith(": the agent exited with status 3") for line in lines) == 2
    rows = [r for r in frames(db_path) if r["run_id"] == both[0]["id"]]
    assert [(r["dir"], r["stream"], r["raw"]) for r in rows if r["dir"] == "stderr"] == [
        ("stderr", "stderr", "dying words"),
        ("stderr", "sse", "acp-proxy: the agent exited with status 3"),
    ]


def test_a_drop_rule_on_serve_agent_drops_the_agent_s_updates_on_a_websocket_and_records_the_faults(
    db_path: Path, serving: Callable[..., Served]
) -> None:
    rule = "drop if method:session/update"
    server = serving("--db", str(db_path), "--fault", rule, "--", sys.executable, "examples/sdk_agent.py", cwd=ROOT)
    try:
        seen = sdk_client("ws", server.endpoint("ws"), "never heard")
    finally:
        server.stop()
    assert seen == sorted(["initialized (protocol v1)", "session: <id>", "stop reason: end_turn"])
    (run,) = runs(db_path)
    dropped = [r for r in frames(db_path) if r["method"] == "session/update"]
    assert len(dropped) == 2 and all(r["forwarded"] == 0 and r["fault"] == "drop" for r in dropped)
    with sqlite3.connect(db_path) as conn:
        assert conn.execute("select count(*) from faults where run_id = ?", (run["id"],)).fetchone() == (2,)


def test_serve_agent_redact_masks_what_is_recorded_never_what_is_forwarded(
    db_path: Path, serving: Callable[..., Served]
) -> None:
    agent = [sys.executable, "examples/sdk_agent.py"]
    server = serving("--db", str(db_path), "--redact", "hunter[0-9]+", "--", *agent, cwd=ROOT)
    try:
        seen = sdk_client("http", server.url, "my password is hunter42")
    finally:
        said = server.stop()
    assert "<< my password is hunter42" in seen  # forwarded as it was, both ways
    assert "Traceback" not in said and "hunter42" not in said
    rows = frames(db_path)
    prompts = [str(r["raw"]) for r in rows if r["method"] == "session/prompt" and r["dir"] == "c2a"]
    echoes = [str(r["raw"]) for r in rows if r["method"] == "session/update" and "password" in str(r["raw"])]
    assert len(prompts) == 1 and "[redacted]" in prompts[0]
    assert echoes and all("[redacted]" in echo for echo in echoes)
    assert "hunter42" not in stored_bytes(db_path).decode("latin-1")  # nor in the WAL or a journal left behind
    with sqlite3.connect(db_path) as conn:
        dump = "\n".join(conn.iterdump())
    assert "hunter42" not in dump and "hunter[0-9]" not in dump  # neither the secret nor the rule
    (run,) = runs(db_path)
    assert json.loads(run["options"])["redact"] is True


def test_serve_agent_redact_without_recording_is_refused_in_one_line(db_path: Path) -> None:
    done = run_proxy(["serve", "--listen", "127.0.0.1:0", "--no-record", "--redact", "--", "true"], timeout=TIMEOUT)
    assert done.returncode == 2
    assert done.stderr.decode().splitlines() == [
        "acp-proxy: --redact masks what is recorded: it cannot be used with --no-record"
    ]


def test_one_connection_s_end_leaves_the_other_connections_agents_alone(
    db_path: Path, serving: Callable[..., Served]
) -> None:
    """serve is the subreaper of every connection's agent: stopping one connection's agent (and
    what it left behind) must not take another connection's live agent for an orphan."""
    server = serving("--db", str(db_path), "--", sys.executable, "examples/sdk_agent.py", cwd=ROOT)
    json_type = {"content-type": "application/json"}
    new = b'{"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"/","mcpServers":[]}}'
    with httpx.Client(timeout=TIMEOUT) as client:
        first, second = (
            client.post(server.url, content=INITIALIZE, headers=json_type).headers["acp-connection-id"]
            for _ in range(2)
        )
        assert client.delete(server.url, headers={"acp-connection-id": first}).status_code == 202
        headers = {"acp-connection-id": second, "accept": "text/event-stream"}
        with client.stream("GET", server.url, headers=headers) as stream:
            assert client.post(server.url, content=new, headers={**json_type, **headers}).status_code == 202
            seen = b""
            for chunk in stream.iter_raw():
                seen += chunk
                if b"sessionId" in seen:
                    break
        assert b'"id":1' in seen.replace(b" ", b"")  # the second connection's agent answered
    said = server.stop()
    assert "Traceback" not in said and "exited with status" not in said, said
    assert [(r["status"], r["exit_code"]) for r in runs(db_path)] == [("ended", 0), ("ended", 0)]
