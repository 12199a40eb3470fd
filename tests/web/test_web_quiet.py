"""`acp-proxy ui` is quiet and reachable: stdout holds the URL alone, each of Datasette's errors
is one line on stderr (never a traceback), no request is answered 500 (hypothesis over paths and
parameters, in-process), and `--allow-host NAME` serves past loopback with the token still
required."""

from __future__ import annotations

import contextlib
import io
import signal
import urllib.parse
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("datasette", reason="the [ui] extra (Datasette) is not installed")

from acp_proxy.web.guard import Guard, decide
from tests.conftest import run_proxy
from tests.web.test_web_command import fetch, start_ui, stop
from tests.web_support import AUTH, HOST, SESSION, app, get, synthetic_db

BIG = str(2**63)


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return synthetic_db(tmp_path_factory.mktemp("quiet") / "quiet.db")


@pytest.fixture(scope="module")
def ds(recording: Path) -> Any:
    return app(recording)


ERRORS = [
    "/no-such-database",
    "/quiet/no_such_table.json",
    "/quiet.json?sql=" + urllib.parse.quote("select nope from frames"),
    "/quiet?sql=" + urllib.parse.quote("select from"),
    "/quiet/frames.json?_sort=nope",
    "/quiet/frames.json?_facet=nope",
    "/quiet/frames?_facet=nope&_facet_array=nope&_facet_date=nope",
    "/quiet/frames.json?_where=" + urllib.parse.quote("1=1)"),
    f"/quiet/frames.json?seq__gt={BIG}",
    f"/quiet/frames/1,{BIG}",
    "/quiet/frames/1,1.blob?_blob_column=seq",
    "/quiet/frames.json?_timelimit=x",
    "/quiet.csv?sql=" + urllib.parse.quote("select raw from main.frames"),
    f"/runs/1/frames/{BIG}.json",
]


def test_errors_are_one_line_on_stderr_and_stdout_is_the_url(recording: Path) -> None:
    proc, url = start_ui("--db", str(recording))
    base, _, token = url.partition("/?token=")
    try:
        for path in ERRORS:
            status, _ = fetch(base + path, {"Authorization": f"Bearer {token}"})
            assert 400 <= status < 500, (path, status)
    finally:
        code, out, err = stop(proc, signal.SIGINT)
    assert code in (0, 130), err
    assert out == "", out[:2000]
    assert "Traceback" not in err and "locals" not in err
    lines = err.splitlines()
    assert all(line.startswith("acp-proxy: ") for line in lines), err
    # One line per Datasette error (the 404 of the plugin's own route is its JSON answer alone).
    assert sum(" GET " in line or "SQL error" in line for line in lines) >= len(ERRORS) - 1, err


@given(
    prefix=st.sampled_from(
        [
            "/",
            "/runs/",
            "/runs/1/frames/",
            "/sessions/",
            "/diff/1/",
            "/quiet/",
            "/quiet/frames/",
            "/quiet/runs/",
            "/quiet/conversation/",
            "/-/",
            "/-/acp-proxy/",
        ]
    ),
    segment=st.one_of(
        st.integers(min_value=-(2**70), max_value=2**70).map(str),
        st.sampled_from(["1", "1,1", f"1,{BIG}", f"{BIG},1", SESSION, "frames", "runs", ".json", "1.blob", "%00"]),
        st.text(alphabet="abc01,.:-_%~", max_size=12),
    ),
    suffix=st.sampled_from(["", ".json", ".csv", ".blob"]),
    params=st.lists(
        st.tuples(
            st.sampled_from(
                [
                    "sql",
                    "_sort",
                    "_sort_desc",
                    "_facet",
                    "_where",
                    "_size",
                    "_next",
                    "after",
                    "filter",
                    "limit",
                    "parts",
                    "_blob_column",
                    "_shape",
                    "_search",
                    "seq__gt",
                    "raw__contains",
                    "_timelimit",
                    "_labels",
                    "_col",
                    "_nocol",
                ]
            ),
            st.one_of(
                st.integers(min_value=-(2**70), max_value=2**70).map(str),
                st.sampled_from(["raw", "seq", "select 1", "select raw from main.frames", "1=1)", "on", "x"]),
                st.text(max_size=10),
            ),
        ),
        max_size=3,
    ),
)
def test_no_request_is_answered_500_nor_prints_a_traceback(
    ds: Any, prefix: str, segment: str, suffix: str, params: list[tuple[str, str]]
) -> None:
    path = prefix + urllib.parse.quote(segment, safe=",%~") + suffix
    query = urllib.parse.urlencode(params)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        response = get(ds, path + ("?" + query if query else ""))
    assert 200 <= response.status_code < 500 or response.status_code in (301, 302, 303), (path, query)
    assert out.getvalue() == "", (path, query)
    assert "Traceback" not in err.getvalue()
    assert all(line.startswith("acp-proxy: ") for line in err.getvalue().splitlines()), err.getvalue()


# -- reachable -----------------------------------------------------------------------------------


def test_allowed_hosts_are_answered_with_the_token_and_others_are_not() -> None:
    guard = Guard(token="t" * 24, host="0.0.0.0", port=8799, extra_hosts=("devbox.lan", "fe80::1", "10.0.0.7"))
    token = {"authorization": "Bearer " + "t" * 24}
    for host in ("devbox.lan:8799", "DEVBOX.LAN:8799", "[fe80::1]:8799", "10.0.0.7:8799", "127.0.0.1:8799"):
        assert decide(guard, "GET", "/", "", {**token, "host": host}).status == 0, host
        assert decide(guard, "GET", "/", "", {"host": host}).status == 401, host
    for host in ("devbox.lan:9999", "evil.example:8799", "devbox.lan.evil.example:8799", "10.0.0.8:8799"):
        assert decide(guard, "GET", "/", "", {**token, "host": host}).status == 403, host


def test_allow_host_serves_past_loopback_with_the_token(recording: Path) -> None:
    proc, url = start_ui("--db", str(recording), "--host", "0.0.0.0", "--allow-host", "inspector.test")
    try:
        assert url.startswith("http://inspector.test:"), url
        port = url.split("://", 1)[1].split("/", 1)[0].rsplit(":", 1)[1]
        token = url.partition("/?token=")[2]
        local = f"http://127.0.0.1:{port}/.json"
        named = {"Host": f"inspector.test:{port}"}
        assert fetch(local, {**named, "Authorization": f"Bearer {token}"})[0] == 200
        assert fetch(local, named)[0] == 401
        assert fetch(local, {"Host": f"other.test:{port}", "Authorization": f"Bearer {token}"})[0] == 403
    finally:
        code, out, err = stop(proc, signal.SIGINT)
    assert code in (0, 130) and out == ""
    assert "acp-proxy: warning: listening on 0.0.0.0" in err


def test_a_wildcard_host_without_allow_host_says_how_to_name_one(recording: Path) -> None:
    proc, _ = start_ui("--db", str(recording), "--host", "0.0.0.0")
    code, _, err = stop(proc, signal.SIGINT)
    assert code in (0, 130)
    assert "--allow-host NAME" in err


@pytest.mark.parametrize("name", ["http://devbox", "devbox:8080", "devbox/x", "", "a b"])
def test_a_bad_allow_host_is_one_line(recording: Path, name: str) -> None:
    result = run_proxy(["ui", "--no-open", "--db", str(recording), "--allow-host", name])
    err = result.stderr.decode()
    assert result.returncode == 2 and result.stdout == b"" and "Traceback" not in err
    assert "--allow-host" in err and len(err.strip().splitlines()) <= 2, err


def test_the_in_process_client_still_needs_the_host(ds: Any) -> None:
    assert get(ds, "/.json", headers={**AUTH, "host": "devbox.lan:8799"}).status_code == 403
    assert get(ds, "/.json", headers={**AUTH, "host": HOST}).status_code == 200
