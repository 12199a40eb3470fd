"""``acp-proxy serve`` under bad or heavy input, with real processes: a client that opens 1,000
connections, a client that does not read its stream, messages on a connection serve never saw
established, garbage bodies. Each time: serve goes on, what it holds stays bounded, and the
database says what happened."""

from __future__ import annotations

import json
import socket
import sqlite3
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from acp_proxy.relay.remote.runs import MAX_LIVE_RUNS
from tests.relay.remote.conftest import (
    HERE,
    INITIALIZE,
    TIMEOUT,
    Served,
    frames,
    peer,
    runs,
    sdk_client,
    start_serve,
)
from tests.relay.remote.test_serve import post

pytest.importorskip("hypercorn", reason="serve needs the remote extra (hypercorn)")
httpx = pytest.importorskip("httpx", reason="serve needs the remote extra (httpx)")
wsproto = pytest.importorskip("wsproto", reason="serve needs the remote extra (wsproto)")
from wsproto.events import AcceptConnection, Message, RejectConnection, RejectData, Request, TextMessage  # noqa: E402

pytestmark = pytest.mark.spawns


@pytest.fixture(scope="module")
def stream_agent() -> Iterator[str]:
    with peer("stream_agent.py", lifetime=600) as (_, url):
        yield url


def address(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for {pid}")


def open_fds(pid: int) -> int:
    return len(list(Path(f"/proc/{pid}/fd").iterdir()))


def children(pid: int) -> list[int]:
    found = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [int(child) for child in found]


class WsClient:
    """A WebSocket client on a plain socket (wsproto), so a test decides when it reads."""

    def __init__(self, url: str) -> None:
        host, port = address(url)
        self.sock = socket.create_connection((host, port), timeout=TIMEOUT)
        self.ws = wsproto.WSConnection(wsproto.ConnectionType.CLIENT)
        self.sock.sendall(self.ws.send(Request(host=f"{host}:{port}", target="/acp")))
        self.pending: list[object] = []

    def events(self, size: int = 65536) -> list[object]:
        data = self.sock.recv(size)
        if not data:
            raise AssertionError("the connection ended")
        self.ws.receive_data(data)
        return list(self.ws.events())

    def accepted(self) -> bool:
        while True:
            for event in self.events():
                if isinstance(event, AcceptConnection):
                    return True
                if isinstance(event, RejectConnection | RejectData):
                    return False

    def send(self, message: dict[str, object]) -> None:
        self.sock.sendall(self.ws.send(TextMessage(data=json.dumps(message))))


def test_a_thousand_connections_get_a_run_each_or_a_clear_503_and_serve_goes_on(
    upstream: str,
    db_path: Path,
) -> None:
    server = start_serve("--upstream", upstream, "--db", str(db_path))
    host, port = server.address
    request = (
        f"GET /acp HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
        "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
    ).encode()
    sockets: list[socket.socket] = []
    try:
        for _ in range(1000):
            sock = socket.create_connection((host, port), timeout=TIMEOUT)
            sock.sendall(request)
            sockets.append(sock)
        statuses = []
        for sock in sockets:
            head = b""
            while b"\r\n" not in head:
                data = sock.recv(4096)
                assert data, "a connection ended without an answer"
                head += data
            statuses.append(int(head.split()[1]))
        # Every connection has an answer: a WebSocket (a run), or 503 once MAX_LIVE_RUNS are live.
        assert set(statuses) <= {101, 503}
        assert statuses.count(101) == MAX_LIVE_RUNS
        # Bounded while they are all open: one recorder per run, one upstream socket per run.
        assert len(children(server.proc.pid)) <= MAX_LIVE_RUNS
        assert open_fds(server.proc.pid) < 1000 + 3 * MAX_LIVE_RUNS + 50
        full = post(server.url, json.dumps(INITIALIZE).encode(), {})
        assert full.status_code == 503 and "try again later" in full.json()["error"]
    finally:
        for sock in sockets:
            sock.close()
    # Once they are gone, serve serves a real client again (its runs end as their sockets close).
    deadline = time.monotonic() + TIMEOUT
    while True:
        answer = post(server.url, json.dumps(INITIALIZE).encode(), {})
        if answer.status_code != 503 or time.monotonic() > deadline:
            break
    assert answer.status_code == 200
    assert sdk_client("ws", server.endpoint("ws"), "after the flood")[0] == "<< echo: after the flood"
    said = server.stop()
    assert "Traceback" not in said
    assert said.count("connections are being recorded: new ones are refused") >= 1
    transports = [json.loads(str(r["options"]))["transport"] for r in runs(db_path)]
    assert transports.count("websocket") == MAX_LIVE_RUNS + 1  # the flood's accepted ones, the SDK client
    assert all(r["ended_ns"] is not None for r in runs(db_path))


def test_a_client_that_does_not_read_holds_the_agent_back_and_serve_memory_stays_bounded(
    stream_agent: str, db_path: Path
) -> None:
    server = start_serve("--upstream", stream_agent, "--db", str(db_path))
    try:
        client = WsClient(server.base)
        assert client.accepted()
        count, size = 1500, 64 * 1024  # ~100 MB: far more than any socket buffer
        client.send({"jsonrpc": "2.0", "id": 1, "method": "stream", "params": {"n": count, "size": size}})
        baseline = rss_kib(server.proc.pid)
        peak = baseline
        received = 0
        got_response = False
        while not got_response:
            # Read slowly: a small piece, then look at serve's memory. A proxy that read ahead of
            # its client without bound would hold most of the stream here.
            peak = max(peak, rss_kib(server.proc.pid))
            for event in client.events(16384):
                if isinstance(event, Message) and event.message_finished:
                    received += 1
                    got_response = received == count + 1
        assert received == count + 1
        assert (peak - baseline) < 48 * 1024, f"serve grew {peak - baseline} KiB while its client lagged"
        client.sock.close()
    finally:
        said = server.stop()
    assert "Traceback" not in said
    rows = [r for r in frames(db_path) if r["dir"] != "stderr"]
    assert len(rows) == count + 2  # the request, every chunk, the response: all recorded
    assert all(r["size"] > size for r in rows if r["method"] == "session/update")


def test_messages_on_a_connection_serve_did_not_see_established_are_recorded(upstream: str, db_path: Path) -> None:
    # The connection is made directly with the agent (as if before serve started): serve then
    # sees only its later messages.
    init = post(upstream, json.dumps(INITIALIZE).encode(), {})
    connection = init.headers["acp-connection-id"]
    server = start_serve("--upstream", upstream, "--db", str(db_path))
    try:
        body = {"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": "/", "mcpServers": []}}
        through = post(server.url, json.dumps(body).encode(), {"acp-connection-id": connection})
        again = {**body, "id": 2}
        post(server.url, json.dumps(again).encode(), {"acp-connection-id": connection})
        unknown = post(server.url, json.dumps(body).encode(), {"acp-connection-id": "no-such-connection"})
        direct_unknown = post(upstream, json.dumps(body).encode(), {"acp-connection-id": "no-such-connection"})
    finally:
        said = server.stop()
    assert "Traceback" not in said
    assert (unknown.status_code, unknown.content) == (direct_unknown.status_code, direct_unknown.content)
    by_connection = {json.loads(str(r["options"]))["connection"]: r["id"] for r in runs(db_path)}
    assert set(by_connection) == {connection, "no-such-connection"}
    rows = frames(db_path)
    known = [(r["dir"], r["raw"]) for r in rows if r["run_id"] == by_connection[connection]]
    # The upstream knows it (202: the answers come on its SSE stream): one run, which its next
    # messages join.
    assert through.status_code in (200, 202)
    assert known[0] == ("stderr", "acp-proxy: a POST on a connection serve did not see established")
    assert [raw for d, raw in known if d == "c2a"] == [json.dumps(body), json.dumps(again)]
    assert [d for d, _ in known].count("stderr") == 1
    lost = [(r["dir"], r["raw"], r["note"]) for r in rows if r["run_id"] == by_connection["no-such-connection"]]
    assert ("c2a", json.dumps(body), None) in lost
    answers = [(raw, note) for d, raw, note in lost if d == "a2c"]
    assert answers == [(unknown.text, answers[0][1])] and f"HTTP {unknown.status_code}" in str(answers[0][1])


@pytest.mark.parametrize(
    "body",
    [b"", b"\x00\xff\xfe garbage", b"\xc3\x28 not utf-8", b"[]", b"null", b"{" * 10_000, b"x" * 1_000_000],
    ids=["empty", "binary", "bad-utf8", "empty-batch", "null", "deep", "1MB-junk"],
)
def test_garbage_bodies_get_what_the_upstream_says_and_are_recorded(
    upstream: str,
    db_path: Path,
    body: bytes,
) -> None:
    server = start_serve("--upstream", upstream, "--db", str(db_path))
    try:
        direct = post(upstream, body, {})
        through = post(server.url, body, {})
        after = post(server.url, json.dumps(INITIALIZE).encode(), {})  # serve goes on
    finally:
        said = server.stop()
    assert "Traceback" not in said
    assert (through.status_code, through.content) == (direct.status_code, direct.content)
    assert after.status_code == 200
    # The garbage's run is the one without a connection (the initialize after it got one); run
    # ids follow the recorders' start, not the order the requests came in.
    (garbage_run,) = [r["id"] for r in runs(db_path) if json.loads(str(r["options"]))["connection"] is None]
    first = [r for r in frames(db_path) if r["run_id"] == garbage_run]
    if body:  # what the client sent is a frame, byte for byte
        assert first[0]["dir"] == "c2a" and first[0]["size"] == len(body)
    assert (
        any(r["dir"] == "a2c" and f"HTTP {direct.status_code}" in str(r["note"]) for r in first) or not direct.content
    )


def test_serve_redact_masks_what_is_recorded_never_what_is_forwarded(upstream: str, db_path: Path) -> None:
    server = start_serve("--upstream", upstream, "--db", str(db_path), "--redact", "hunter[0-9]+")
    try:
        seen = sdk_client("ws", server.endpoint("ws"), "my password is hunter42")
    finally:
        said = server.stop()
    assert "<< echo: my password is hunter42" in seen  # forwarded as it was
    assert "Traceback" not in said and "hunter42" not in said
    rows = frames(db_path)
    prompts = [str(r["raw"]) for r in rows if r["method"] == "session/prompt" and r["dir"] == "c2a"]
    assert len(prompts) == 1 and "[redacted]" in prompts[0]
    with sqlite3.connect(db_path) as conn:
        dump = "\n".join(conn.iterdump())
    assert "hunter42" not in dump and "hunter[0-9]" not in dump  # neither the secret nor the rule
    assert json.loads(str(runs(db_path)[0]["options"]))["redact"] is True


def test_compressed_answers_are_relayed_unaltered_and_recorded_decoded(db_path: Path) -> None:
    import gzip

    import httpx

    def raw(client: httpx.Client, method: str, url: str, headers: dict[str, str]) -> tuple[str | None, bytes]:
        request = client.build_request(method, url, content=json.dumps(INITIALIZE) if method == "POST" else None)
        request.headers.pop("accept-encoding", None)  # only what the test names
        request.headers.update(headers)
        response = client.send(request, stream=True)
        try:
            return response.headers.get("content-encoding"), b"".join(response.iter_raw())
        finally:
            response.close()

    with peer("gzip_server.py", lifetime=300) as (_, upstream_url):
        server = start_serve("--upstream", upstream_url, "--db", str(db_path))
        try:
            seen = []
            for url in (upstream_url, server.url):
                with httpx.Client(timeout=TIMEOUT) as client:
                    seen.append(
                        [
                            raw(client, "POST", url, {"accept-encoding": "gzip"}),
                            raw(client, "POST", url, {}),  # a client that names no encoding
                            raw(client, "GET", url, {"accept-encoding": "gzip", "acp-connection-id": "c-gzip"}),
                        ]
                    )
        finally:
            said = server.stop()
            server.kill()
    assert "Traceback" not in said
    assert seen[0] == seen[1]  # the same bytes, compressed as the upstream sent them
    (coding, gzipped), (bare_coding, bare), (sse_coding, _) = seen[1]
    assert coding == sse_coding == "gzip" and bare_coding is None  # no encoding asked, none given
    rows = [r for r in frames(db_path) if r["dir"] == "a2c"]
    decoded = [(json.loads(str(r["raw"])), r["note"]) for r in rows]
    assert (json.loads(gzip.decompress(gzipped)), "content-encoding gzip: recorded decoded") in decoded
    assert (json.loads(bare), None) in decoded
    events = [(body, note) for body, note in decoded if body.get("method") == "session/update"]
    assert [body["params"]["n"] for body, _ in events] == [0, 1]
    assert {note for _, note in events} == {"content-encoding gzip: recorded decoded"}


class SseReader:
    """A GET SSE stream on a plain socket (HTTP/1.1, parsed by h11), so a test decides when it
    reads: ``read`` takes one small piece and counts the events' data lines seen so far."""

    def __init__(self, address: tuple[str, int], connection: str) -> None:
        import h11

        self.h11 = h11
        self.sock = socket.create_connection(address, timeout=TIMEOUT)
        self.conn = h11.Connection(h11.CLIENT)
        headers = [
            ("host", f"{address[0]}:{address[1]}"),
            ("accept", "text/event-stream"),
            ("acp-connection-id", connection),
        ]
        self.sock.sendall(self.conn.send(h11.Request(method="GET", target="/acp", headers=headers)))
        self.status = 0
        self.body = b""  # the decoded body's tail not yet counted
        self.events = 0
        self.answered = False  # the stream request's response came
        self.ended = False

    def read(self, size: int = 16384) -> None:
        data = self.sock.recv(size)
        self.conn.receive_data(data)
        if not data:
            self.ended = True
        while True:
            event = self.conn.next_event()
            if event is self.h11.NEED_DATA or isinstance(event, self.h11.EndOfMessage | self.h11.ConnectionClosed):
                self.ended = self.ended or event is not self.h11.NEED_DATA
                break
            if isinstance(event, self.h11.Response):
                self.status = event.status_code
            elif isinstance(event, self.h11.Data):
                self.body += bytes(event.data)
        *done, self.body = self.body.split(b"\n\n")
        for block in done:
            if block.startswith(b"data: "):
                self.events += 1
                self.answered = self.answered or block.startswith(b'data: {"jsonrpc": "2.0", "id": 1,')


def _post_json(url: str, message: dict[str, object], connection: str | None = None) -> httpx.Response:
    headers = {"acp-connection-id": connection} if connection else {}
    return post(url, json.dumps(message).encode(), headers)


STREAM_AGENT = [sys.executable, str(HERE / "stream_stdio_agent.py")]


@pytest.mark.parametrize("front", ["agent", "upstream"])
def test_an_sse_reader_that_stops_reading_holds_the_agent_back_and_serve_stays_bounded(
    db_path: Path, serving: Callable[..., Served], front: str
) -> None:
    """One client's SSE stream is read slowly, with a pause in which it is not read at all,
    while its agent writes ~100 MB to it: serve holds the agent back instead of the stream (its
    memory stays bounded), and another client's conversation goes on meanwhile. ``upstream``:
    ``serve --upstream`` in front of a ``serve -- AGENT``; ``agent``: ``serve -- AGENT``."""
    if front == "agent":
        server = serving("--db", str(db_path), "--", *STREAM_AGENT)
    else:
        behind = serving("--no-record", "--", *STREAM_AGENT)
        server = serving("--upstream", behind.url, "--db", str(db_path))
    connection = _post_json(server.url, INITIALIZE).headers["acp-connection-id"]
    reader = SseReader(server.address, connection)
    while not reader.status:
        reader.read()
    assert reader.status == 200
    baseline = peak = rss_kib(server.proc.pid)
    count, size = 1500, 64 * 1024  # ~100 MB: far more than any socket or pipe buffer
    flood = {"jsonrpc": "2.0", "id": 1, "method": "stream", "params": {"n": count, "size": size}}
    assert _post_json(server.url, flood, connection).status_code == 202

    # Not read at all: another client's conversation goes on meanwhile (no connection waits for
    # the lagging one), and serve does not take the lagging stream into its memory.
    for n in range(3):
        other = _post_json(server.url, INITIALIZE).headers["acp-connection-id"]
        ping = {"jsonrpc": "2.0", "id": 7, "method": "ping"}
        with httpx.Client(timeout=TIMEOUT) as client:
            headers = {"acp-connection-id": other, "accept": "text/event-stream"}
            with client.stream("GET", server.url, headers=headers) as stream:
                assert _post_json(server.url, ping, other).status_code == 202
                assert b'"id": 7' in next(stream.iter_raw()), n
            client.delete(server.url, headers={"acp-connection-id": other})
        peak = max(peak, rss_kib(server.proc.pid))

    # Then read slowly, a small piece at a time, to the end of the flood and its answer.
    while not reader.answered and not reader.ended:
        peak = max(peak, rss_kib(server.proc.pid))
        reader.read()
    reader.sock.close()
    said = server.stop()
    assert reader.answered and reader.events == count + 1, (reader.events, said)
    assert "Traceback" not in said
    assert (peak - baseline) < 24 * 1024, f"serve grew {peak - baseline} KiB while its SSE reader lagged"
    rows = [r for r in frames(db_path) if r["connection"] == connection and r["dir"] != "stderr"]
    assert len([r for r in rows if r["method"] == "session/update"]) == count  # all recorded
