"""The echo agent of ``sdk_server.py`` (the SDK's HTTP example) on stdio instead: the same answers,
so a test can put ``serve -- AGENT`` where ``serve --upstream`` was and expect what the client
saw to be the same. Run as ``python echo_stdio_agent.py``."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from acp import run_agent
from sdk_server import EchoAgent

if __name__ == "__main__":
    asyncio.run(run_agent(EchoAgent()))
