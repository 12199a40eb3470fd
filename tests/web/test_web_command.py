"""`acp-proxy ui` as a real subprocess: the printed URL, the lock over real HTTP, a clean stop on
Ctrl-C and SIGTERM, one line for each mistake, and the one line when the [ui] extra is missing."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import PROXY, proxy_env, run_proxy, watchdog

pytestmark = pytest.mark.spawns  # every test here starts processes

pytest.importorskip("datasette", reason="the [ui] extra (Datasette) is not installed")

SERVE_TIMEOUT = 60


def start_ui(*args: str) -> tuple[subprocess.Popen[bytes], str]:
    proc = subprocess.Popen(
        [*PROXY, "ui", "--no-open", "--port", "0", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=proxy_env(),
    )
    watchdog(proc, SERVE_TIMEOUT)
    assert proc.stdout is not None
    url = proc.stdout.readline().decode().strip()
    assert url.startswith("http://"), (url, proc.stderr.read().decode() if proc.poll() is not None else "")
    return proc, url


def fetch(url: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url, headers=headers or {})
    opener = urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


def stop(proc: subprocess.Popen[bytes], sig: int) -> tuple[int, str, str]:
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=SERVE_TIMEOUT)
    return proc.returncode, out.decode(), err.decode()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_ui_prints_its_url_serves_locked_and_stops_cleanly(sdk_recording: tuple[Path, str], sig: int) -> None:
    db, _ = sdk_recording
    proc, url = start_ui("--db", str(db))
    try:
        base, _, token = url.partition("/?token=")
        assert base.startswith("http://127.0.0.1:") and len(token) >= 24
        status, body = fetch(f"{base}/.json", {"Authorization": f"Bearer {token}"})
        assert status == 200 and '"runs"' in body
        assert fetch(f"{base}/.json")[0] == 401
        port = base.rsplit(":", 1)[1]
        assert fetch(f"{base}/.json", {"Authorization": f"Bearer {token}", "Host": f"rebind.example:{port}"})[0] == 403
        status, _ = fetch(url)
        assert status == 303
    finally:
        code, out, err = stop(proc, sig)
    # Ctrl-C ends in 0 or 130; SIGTERM, after the same graceful stop, is passed on (uvicorn
    # re-raises it), so the parent sees a death by SIGTERM, as with any well-behaved server.
    assert code in ((0, 130) if sig == signal.SIGINT else (0, -signal.SIGTERM, 128 + signal.SIGTERM)), err
    assert out == "", "stdout holds the URL line only"
    assert "Traceback" not in err
    assert all(line.startswith("acp-proxy: ") for line in err.splitlines()), err


def test_a_given_token_and_an_explicit_host_with_its_warning(sdk_recording: tuple[Path, str]) -> None:
    db, _ = sdk_recording
    proc, url = start_ui("--db", str(db), "--token", "my-own-token-42", "--host", "127.0.0.2")
    try:
        assert url.startswith("http://127.0.0.2:") and url.endswith("/?token=my-own-token-42")
        base = url.partition("/?token=")[0]
        assert fetch(f"{base}/.json", {"Authorization": "Bearer my-own-token-42"})[0] == 200
    finally:
        code, _, err = stop(proc, signal.SIGINT)
    assert code in (0, 130)
    assert "acp-proxy: warning: listening on 127.0.0.2" in err


def _one_line_error(result: subprocess.CompletedProcess[bytes], *needles: str) -> None:
    err = result.stderr.decode()
    assert result.returncode != 0
    assert result.stdout == b""
    assert "Traceback" not in err
    for needle in needles:
        assert needle in err, err


def test_mistakes_are_one_line(tmp_path: Path, sdk_recording: tuple[Path, str]) -> None:
    db, _ = sdk_recording
    _one_line_error(run_proxy(["ui", "--no-open", "--db", str(tmp_path / "none.db")]), "no database at")
    _one_line_error(run_proxy(["ui", "--no-open", "--db", str(db), "--token", "short"]), "a token is 8 to 200")
    _one_line_error(run_proxy(["ui", "--no-open", "--db", str(db), "--redact", "a*"]), "matches the empty string")
    _one_line_error(run_proxy(["ui", "--no-open", "--db", str(db), "--port", "70000"]), "70000")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        _one_line_error(run_proxy(["ui", "--no-open", "--db", str(db), "--port", str(port)]), "cannot listen on")


def test_without_the_extra_one_line_says_what_to_install() -> None:
    code = (
        "import sys; sys.modules['datasette'] = None; sys.argv = ['acp-proxy', 'ui', '--no-open'];"
        "from acp_proxy.cli.commands import main; main()"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60, env=proxy_env())
    assert result.returncode == 2
    lines = result.stderr.decode().strip().splitlines()
    assert lines == ["acp-proxy: acp-proxy ui needs the [ui] extra: pip install 'acp-proxy[ui]'"]
    assert result.stdout == b""
