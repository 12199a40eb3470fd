"""``benchmarks/relay_bench.py`` on a plain install (no ``[otel]`` extra): the OTLP column is
skipped with a note, and the benchmark does not fail for it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# Installed as sitecustomize on PYTHONPATH: every Python the benchmark starts (the proxies too)
# behaves as if the [otel] extra were not installed.
_HIDE_OTEL_SDK = """
import sys


class _NoOtelSdk:
    def find_spec(self, name, path=None, target=None):
        if name.startswith(("opentelemetry.sdk", "opentelemetry.exporter")):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, _NoOtelSdk())
"""


def test_quick_bench_skips_the_otlp_column_without_the_extra(tmp_path: Path) -> None:
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text(_HIDE_OTEL_SDK)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(hide), str(REPO), env.get("PYTHONPATH", "")])
    env.pop("ACP_PROXY_DB", None)
    probe = subprocess.run(
        [sys.executable, "-c", "from acp_proxy.otel.command import missing_sdk; print(missing_sdk())"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "[otel]" in probe.stdout, probe  # the stand-in for a plain install holds
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "relay_bench.py"),
            "--quick",
            "--only",
            "storm",
            "--relays",
            "direct,proxy_otlp",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    header = next(line for line in done.stdout.splitlines() if line.lstrip().startswith("direct"))
    assert "recording + otlp" not in header
    assert "recording + otlp: skipped — OpenTelemetry export needs the [otel] extra" in done.stdout
