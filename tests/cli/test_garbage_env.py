"""Every environment variable acp-proxy reads, set to anything: a run of `true` or one line.

The variables are the ones the package reads (``ACP_PROXY_DB``, ``ACP_PROXY_FAULTS``, the
``OTEL_*`` family with ``--otlp``, ``XDG_DATA_HOME``, ``COLUMNS``, ``NO_COLOR``, ``TERM``); the
property is the one of every door: exit 0 (the agent ran) or 2 with one ``acp-proxy:`` line,
never a traceback, and nothing on stdout but the agent's bytes (``true`` says nothing).
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import PROXY, proxy_env

pytestmark = pytest.mark.spawns

_ODD = st.sampled_from(
    [
        "",
        " ",
        "-",
        "0",
        "-1",
        "nan",
        "1e999",
        "/",
        "/dev/null",
        "/nonexistent/dir/x.db",
        "drop",
        "drop if",
        "seed=1;seed=2",
        "delay=1e308s",
        "http://[::1",
        "http://localhost:1",
        "grpc",
        "http/xml",
        "a=b,=c,d",
        "k=%zz",
        "9223372036854775808",
        "漢字",
        "\x1b[2J",
    ]
)
_VALUES = _ODD | st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=24)
_VARIABLES = [
    "ACP_PROXY_DB",
    "ACP_PROXY_FAULTS",
    "XDG_DATA_HOME",
    "COLUMNS",
    "NO_COLOR",
    "TERM",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_EXPORTER_OTLP_TIMEOUT",
    "OTEL_SERVICE_NAME",
    "OTEL_RESOURCE_ATTRIBUTES",
]


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(env=st.dictionaries(st.sampled_from(_VARIABLES), _VALUES, min_size=1, max_size=4), otlp=st.booleans())
def test_any_environment_gets_a_run_or_one_line(env: dict[str, str], otlp: bool) -> None:
    with tempfile.TemporaryDirectory() as where:
        line = ["run", *(["--otlp"] if otlp else []), "--", "true"]
        if "ACP_PROXY_DB" not in env:
            line[1:1] = ["--db", str(Path(where) / "rec.db")]
        try:
            done = subprocess.run(
                [*PROXY, *line],
                capture_output=True,
                timeout=60,
                env=proxy_env(HOME=where, **env),
                cwd=where,
                stdin=subprocess.DEVNULL,
            )
        except (UnicodeEncodeError, ValueError):
            return  # not a value a real environment can hold
    stderr = done.stderr.decode("utf-8", "replace")
    assert "Traceback" not in stderr, (env, stderr)
    assert done.returncode in (0, 2), (env, done.returncode, stderr)
    if done.returncode == 2:
        assert stderr.startswith("acp-proxy: ") and stderr.count("\n") == 1, (env, stderr)
    assert done.stdout == b"", (env, done.stdout)
