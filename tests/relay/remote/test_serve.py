"""``acp-proxy serve`` between the SDK's real remote peers: its example server (hypercorn) and its
HTTP and WebSocket example clients, directly and through the proxy, and what the database holds."""

from __future__ import annotations

import json
import socket
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import run_proxy
from tests.relay.remote.conftest import (
    INITIALIZE,
    TIMEOUT,
    Served,
    frames,
    peer,
    runs,
    sdk_client,
    start_serve,
)

pytest.importorskip("hypercorn", reason="serve needs the remote extra (hypercorn)")
pytest.importorskip("trio_websocket", reason="serve needs the remote extra (trio-websocket)")
pytest.importorskip("websockets", reason="the SDK's WebSocket client needs agent-client-protocol[http]")
httpx = pytest.importorskip("httpx", reason="the SDK's HTTP client needs agent-client-protocol[http]")

pytestmark = pytest.mark.spawns


@pytest.fixture
def serve(upstream: str, db_path: Path, serving: Callable[..., Served]) -> Served:
    return serving("--upstream", upstream, "--db", str(db_path))


CONVERSATION = [
    ("c2a", "request", "initialize"),
    ("a2c", "response", "initialize"),
    ("c2a", "request", "session/new"),
    ("a2c", "response", "session/new"),
    ("c2a", "request", "session/prompt"),
    ("a2c", "notification", "session/update"),
    ("a2c", "response", "session/prompt"),
]


@pytest.mark.parametrize(("kind", "scheme"), [("ws", "ws"), ("http", "http")])
def test_the_sdk_client_sees_through_serve_what_it_sees_directly_and_every_message_is_recorded(
    upstream: str, serve: Served, db_path: Path, kind: str, scheme: str
) -> None:
    direct = sdk_client(kind, upstream.replace("http", scheme, 1), "hello remote")
    proxied = sdk_client(kind, serve.endpoint(scheme), "hello remote")
    assert proxied == direct
    assert "<< echo: hello remote" in proxied
    serve.stop()

    (run,) = runs(db_path)
    assert run["status"] == "ended"
    transport = "websocket" if kind == "ws" else "http"
    assert json.loads(str(run["options"]))["transport"] == transport
    everything = frames(db_path)
    # Transport events are the proxy's own lines (the SDK's WebSocket client may leave without a
    # close frame: 1006); every other row is a message of the conversation.
    events = [r for r in everything if r["dir"] == "stderr"]
    assert all(r["origin"] == "proxy" and str(r["raw"]).startswith("acp-proxy: ") for r in events)
    rows = [r for r in everything if r["dir"] != "stderr"]
    assert sorted((r["dir"], r["kind"], r["method"]) for r in rows) == sorted(CONVERSATION)
    assert {r["transport"] for r in rows} == {transport}
    assert {r["connection"] for r in rows} == {json.loads(str(run["options"]))["connection"]}
    assert all(r["connection"] for r in rows)
    for r in rows:  # each recorded message is one whole JSON-RPC message, answered when a request
        assert json.loads(str(r["raw"]))["jsonrpc"] == "2.0"
        if r["kind"] == "request":
            assert r["unanswered"] in (0, None)
    by_method = {(r["dir"], r["method"]): r["stream"] for r in rows}
    if kind == "ws":
        assert set(by_method.values()) == {"websocket"}
    else:
        session = json.loads(str(next(r["raw"] for r in rows if r["method"] == "session/update")))["params"]
        assert by_method[("c2a", "session/prompt")] == "post"
        assert by_method[("a2c", "initialize")] == "post"  # the one POST answered with a body
        assert by_method[("a2c", "session/new")] == "sse"  # the connection-scoped stream
        assert by_method[("a2c", "session/update")] == f"sse:{session['sessionId']}"
        assert by_method[("a2c", "session/prompt")] == f"sse:{session['sessionId']}"

    checked = run_proxy(["check", "--db", str(db_path), str(run["id"])], timeout=TIMEOUT)
    assert checked.returncode == 0, checked.stderr
    shown = run_proxy(["show", "--db", str(db_path), str(run["id"])], timeout=TIMEOUT)
    assert shown.returncode == 0 and b"agent      echo: hello remote" in shown.stdout, shown.stderr


def post(url: str, body: bytes, headers: dict[str, str]) -> httpx.Response:
    with httpx.Client(timeout=TIMEOUT) as client:
        return client.post(url, content=body, headers={"content-type": "application/json", **headers})


def test_http_errors_come_back_as_the_upstream_said_and_are_recorded_as_what_they_are(
    upstream: str, serve: Served, db_path: Path
) -> None:
    answers = []
    for url in (upstream, serve.url):
        init = post(url, json.dumps(INITIALIZE).encode(), {})
        connection = init.headers["acp-connection-id"]
        batch = post(url, b'[{"jsonrpc":"2.0","id":1,"method":"session/list"}]', {"acp-connection-id": connection})
        garbage = post(url, b"{not json", {"acp-connection-id": connection})
        answers.append([(r.status_code, r.content) for r in (batch, garbage)])
    assert answers[0] == answers[1]
    assert [status for status, _ in answers[1]] == [501, 400]
    serve.stop()

    rows = frames(db_path)
    # The SDK's error bodies ({"error": "..."}) decode as JSON-RPC errors without an id; the note
    # says what they were on the wire.
    notes = [(r["dir"], str(r["note"]).split(";")[0], json.loads(str(r["raw"]))) for r in rows if r["note"]]
    assert [(d, n) for d, n, _ in notes] == [("a2c", "HTTP 501 answer to a POST"), ("a2c", "HTTP 400 answer to a POST")]
    assert [body for _, _, body in notes] == [json.loads(content) for _, content in answers[1]]
    assert any(r["dir"] == "c2a" and r["kind"] == "batch" for r in rows)
    assert any(r["dir"] == "c2a" and r["kind"] == "invalid" and r["raw"] == "{not json" for r in rows)


def test_credentials_are_relayed_but_never_recorded_or_said(upstream: str, db_path: Path) -> None:
    secret_upstream = upstream.replace("http://", "http://user:hunter2@", 1) + "?token=s3cr3t-in-url"
    server = start_serve("--upstream", secret_upstream, "--db", str(db_path))
    try:
        init = post(
            server.url,
            json.dumps(INITIALIZE).encode(),
            {"authorization": "Bearer sekrit-bearer", "cookie": "sid=sekrit-cookie"},
        )
        assert init.status_code == 200
        said = server.stop()
    finally:
        server.kill()
    stored = b"".join(p.read_bytes() for p in db_path.parent.glob(f"{db_path.name}*") if p.is_file())
    for secret in (b"hunter2", b"s3cr3t-in-url", b"sekrit-bearer", b"sekrit-cookie"):
        assert secret not in stored
        assert secret.decode() not in said
    (run,) = runs(db_path)
    assert "token=***" in str(run["argv"]) and "***@" in str(run["argv"])


def test_a_host_that_is_not_this_server_is_refused(serve: Served) -> None:
    port = serve.address[1]
    refused = post(serve.url, json.dumps(INITIALIZE).encode(), {"host": f"evil.example:{port}"})
    assert refused.status_code == 403
    assert post(serve.url, json.dumps(INITIALIZE).encode(), {}).status_code == 200


def test_an_upstream_that_is_down_is_answered_with_502_and_serve_goes_on(db_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}/acp"  # bound, never listening: refused
        server = start_serve("--upstream", dead, "--db", str(db_path))
        try:
            for _ in range(2):
                answer = post(server.url, json.dumps(INITIALIZE).encode(), {})
                assert answer.status_code == 502
                assert answer.json()["error"].startswith("acp-proxy: the upstream cannot be reached")
            with httpx.Client(timeout=TIMEOUT) as client:
                upgrade = client.get(
                    server.url,
                    headers={
                        "connection": "upgrade",
                        "upgrade": "websocket",
                        "sec-websocket-version": "13",
                        "sec-websocket-key": "dGhlIHNhbXBsZSBub25jZQ==",
                    },
                )
            assert upgrade.status_code == 502
            assert server.stop().count("Traceback") == 0
        finally:
            server.kill()


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--listen", "0.0.0.0:0"], "not a loopback address; add --allow-host 0.0.0.0"),
        (["--listen", "nope"], "is not HOST:PORT"),
        (["--upstream", "ftp://x/acp"], "must be an http://"),
    ],
)
def test_serve_refuses_what_it_cannot_use_in_one_line(db_path: Path, args: list[str], said: str) -> None:
    base = {"--listen": "127.0.0.1:0", "--upstream": "http://127.0.0.1:1/acp"}
    base.update(dict(zip(args[::2], args[1::2], strict=True)))
    done = run_proxy(["serve", "--db", str(db_path), *[x for kv in base.items() for x in kv]], timeout=TIMEOUT)
    assert done.returncode == 2
    err = done.stderr.decode()
    assert said in err and err.count("\n") == 1 and "Traceback" not in err


def test_an_sse_stream_the_upstream_drops_is_recorded_as_a_dropped_stream(db_path: Path) -> None:
    with peer("sdk_server.py", lifetime=300) as (proc, agent_url):
        server = start_serve("--upstream", agent_url, "--db", str(db_path))
        try:
            url = server.url
            connection = post(url, json.dumps(INITIALIZE).encode(), {}).headers["acp-connection-id"]
            headers = {"acp-connection-id": connection, "accept": "text/event-stream"}
            with httpx.Client(timeout=TIMEOUT) as client, client.stream("GET", url, headers=headers) as stream:
                assert stream.status_code == 200
                proc.kill()  # the agent's server dies with the stream open
                with pytest.raises(httpx.HTTPError):
                    for _ in stream.iter_raw():
                        pass
            assert "Traceback" not in server.stop()
        finally:
            server.kill()
    events = [r for r in frames(db_path) if r["dir"] == "stderr"]
    assert [(r["origin"], r["stream"], r["transport"]) for r in events] == [("proxy", "sse", "http")]
    assert str(events[0]["raw"]).startswith("acp-proxy: the upstream dropped the stream: ")


def test_invalid_utf8_in_a_websocket_text_message_closes_that_socket_only_and_is_recorded(
    serve: Served, db_path: Path
) -> None:
    import wsproto
    from wsproto.events import AcceptConnection, CloseConnection, Request

    host, port = serve.address
    ws = wsproto.WSConnection(wsproto.ConnectionType.CLIENT)
    with socket.create_connection((host, int(port)), timeout=TIMEOUT) as sock:
        sock.sendall(ws.send(Request(host=f"{host}:{port}", target="/acp")))
        events: list[object] = []
        while not any(isinstance(e, AcceptConnection) for e in events):
            ws.receive_data(sock.recv(65536))
            events.extend(ws.events())
        # A text frame (FIN, opcode 1), masked, whose payload is not UTF-8: wsproto will not
        # build one, so it is written by hand.
        payload = b'{"jsonrpc":"2.0","method":"x\xff"}'
        mask = b"\x01\x02\x03\x04"
        sock.sendall(bytes([0x81, 0x80 | len(payload)]) + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))
        closed = None
        while closed is None:
            data = sock.recv(65536)
            if not data:
                break
            ws.receive_data(data)
            closed = next((e for e in ws.events() if isinstance(e, CloseConnection)), None)
    # hypercorn (wsproto) drops the connection at once, without a close frame: the client sees
    # an abnormal closure; the proxy closes the upstream socket and records why.
    assert closed is None or closed.code == 1007
    still = post(serve.url, json.dumps(INITIALIZE).encode(), {})  # serve goes on
    assert still.status_code == 200
    serve.stop()
    ws_runs = [r for r in runs(db_path) if json.loads(str(r["options"]))["transport"] == "websocket"]
    assert len(ws_runs) == 1
    said = [r["raw"] for r in frames(db_path) if r["run_id"] == ws_runs[0]["id"]]
    assert said in (
        ["acp-proxy: the client closed the WebSocket: code 1006"],
        ["acp-proxy: the client closed the WebSocket: code 1007"],
    )


def test_serve_speaks_http2_to_clients_that_ask_for_it(serve: Served) -> None:
    """h2c with prior knowledge (the RFD requires HTTP/2 for Streamable HTTP): hypercorn's."""
    with httpx.Client(http1=False, http2=True, timeout=TIMEOUT) as client:
        answer = client.post(
            serve.url, content=json.dumps(INITIALIZE).encode(), headers={"content-type": "application/json"}
        )
    assert answer.http_version == "HTTP/2"
    assert answer.status_code == 200 and answer.headers["acp-connection-id"]
    assert answer.json()["result"]["protocolVersion"] == 1


def test_a_drop_rule_on_serve_drops_the_prompt_response_and_records_the_fault(upstream: str, db_path: Path) -> None:
    from websockets.sync.client import connect

    rule = "drop if method:session/prompt kind:response"
    server = start_serve("--upstream", upstream, "--db", str(db_path), "--fault", rule)
    try:
        seen: list[dict[str, object]] = []
        with connect(server.endpoint("ws"), open_timeout=TIMEOUT) as ws:

            def request(rpc_id: int, method: str, params: dict[str, object]) -> None:
                ws.send(json.dumps({"jsonrpc": "2.0", "id": rpc_id, "method": method, "params": params}))
                while not any(m.get("id") == rpc_id for m in seen):
                    seen.append(json.loads(ws.recv(timeout=TIMEOUT)))

            request(0, "initialize", {"protocolVersion": 1})
            request(1, "session/new", {"cwd": "/", "mcpServers": []})
            session = seen[-1]["result"]["sessionId"]  # type: ignore[index]
            ws.send(
                json.dumps(
                    {
                        "jsonrpc": "2.0",
                        "id": 2,
                        "method": "session/prompt",
                        "params": {"sessionId": session, "prompt": [{"type": "text", "text": "hi"}]},
                    }
                )
            )
            while not any(m.get("method") == "session/update" for m in seen):
                seen.append(json.loads(ws.recv(timeout=TIMEOUT)))
            request(3, "session/new", {"cwd": "/", "mcpServers": []})  # the agent goes on answering
        assert not any(m.get("id") == 2 for m in seen)
        server.stop()
    finally:
        server.kill()
    rows = frames(db_path)
    (dropped,) = [r for r in rows if r["method"] == "session/prompt" and r["kind"] == "response"]
    assert (dropped["forwarded"], dropped["fault"], dropped["transport"]) == (0, "drop", "websocket")
    with sqlite3.connect(db_path) as conn:
        faults = conn.execute("select run_id, seq, action from faults").fetchall()
    assert faults == [(dropped["run_id"], dropped["seq"], "drop")]


def test_an_upstream_that_answers_html_is_relayed_as_it_said_and_recorded_as_a_failed_initialize(
    db_path: Path,
) -> None:
    with peer("html_server.py", lifetime=300) as (_, upstream):
        direct = post(upstream, json.dumps(INITIALIZE).encode(), {})
        server = start_serve("--upstream", upstream, "--db", str(db_path))
        try:
            proxied = post(server.url, json.dumps(INITIALIZE).encode(), {})
            assert "Traceback" not in server.stop()
        finally:
            server.kill()
    assert (proxied.status_code, proxied.headers["content-type"], proxied.content) == (
        direct.status_code,
        direct.headers["content-type"],
        direct.content,
    )
    (run,) = runs(db_path)
    assert run["status"] == "ended"
    rows = frames(db_path)
    assert [(r["dir"], r["method"] or r["kind"]) for r in rows] == [("c2a", "initialize"), ("a2c", "invalid")]
    assert rows[1]["raw"] == direct.text
    assert str(rows[1]["note"]).startswith("HTTP 200 answer to a POST (text/html)")
    assert rows[1]["connection"] is None


def test_an_initialize_the_upstream_never_got_is_recorded_with_the_502_it_was_answered(db_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        server = start_serve("--upstream", f"http://127.0.0.1:{sock.getsockname()[1]}/acp", "--db", str(db_path))
        try:
            assert post(server.url, json.dumps(INITIALIZE).encode(), {}).status_code == 502
            server.stop()
        finally:
            server.kill()
    rows = frames(db_path)
    assert [(r["dir"], r["method"]) for r in rows] == [("c2a", "initialize"), ("stderr", None)]
    assert str(rows[0]["unanswered"]) == "1"
    assert str(rows[1]["raw"]).startswith("acp-proxy: POST not relayed, 502 sent: the upstream cannot be reached")
