"""The MCP prompts: ready-made investigations that say which tools to call, in what order.

Owns: the prompt templates ``triage_slow_session``, ``audit_spec_violations`` and
``compare_clients`` and their registration on the SDK's server. Each is a user message that
names the tools (``summary``, ``session_info``, ``exchanges``, ``frames``, ``show``, ``stats``,
``check``, ``diff``, ``sessions_by_client``) with their arguments filled in.

Must not know: the database, the read layer: a prompt only says what to ask the tools.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

RefArg = Annotated[str, Field(description="A run id, `last`, or a session id (or a unique start of one).")]


def triage_slow_session(ref: RefArg = "last") -> str:
    """Find out why a run or session was slow: hot spot, long tail, outliers, then the frames."""
    return f"""Triage why the ACP recording `{ref}` was slow, using the acp-proxy MCP tools.

1. Call `summary` with ref="{ref}". Read `insights.hot_spot` (the method with the most time spent
   waiting, the slowest tool call), `insights.long_tail` (p99 against p50 per method),
   `insights.outliers` (answers over 3x their method's median) and `slowest_turn`.
2. Call `session_info` with ref="{ref}" to see the agent, client, protocol version, mode and model.
3. For the hot-spot method, call `exchanges` with ref="{ref}" and method=<that method> to see each
   request with its answer and latency; page with `offset`=`next` while `next` is not null.
4. For each outlier (run_id, seq), call `frames` with filter="run:<run_id> seq:<seq-20>..<seq>"
   to see what happened just before it, and `frame` for one frame whole.
5. Call `show` with ref="{ref}" and turn=<the slowest turn's turn_index> to read that turn.

Report: where the time went (method or tool, with numbers), whether it is a steady cost or a
tail, the frames that prove it (as RUN:SEQ), and what to try next."""


def audit_spec_violations(ref: RefArg = "last") -> str:
    """Audit a run or session against the ACP specification: findings, then the frames."""
    return f"""Audit the ACP recording `{ref}` for violations of the Agent Client Protocol specification,
using the acp-proxy MCP tools.

1. Call `check` with ref="{ref}" (schema=true). `counts` gives findings by severity; page
   `findings` with `offset`=`findings.next` while it is not null.
2. Call `session_info` with ref="{ref}": the negotiated protocol version and both sides'
   capabilities (a method used without its capability is a violation).
3. For each error finding, call `frame` with its run_id and seq, and `exchanges` with
   ref="{ref}" and the frame's method to see the request and its answer together.
4. Call `frames` with filter="kind:error OR unanswered OR kind:invalid" to catch what the
   checker does not name: error answers, requests never answered, lines that are not JSON-RPC.

Report each violation once: the rule, which side broke it (client or agent), the frame (RUN:SEQ),
the spec section, and how severe it is; then what is fine."""


def compare_clients(left: RefArg = "", right: RefArg = "") -> str:
    """Compare how different clients (editors) drive the same agent."""
    pick = (
        f"the recordings `{left}` and `{right}`"
        if left and right
        else "two recordings, one per client: pick them from `sessions_by_client` (its `session_ids`)"
    )
    return f"""Compare how different ACP clients (editors) talk to the agent, using the acp-proxy MCP tools.

1. Call `sessions_by_client`: every client with its runs, sessions, turns and agents.
2. Compare {pick}.
3. Call `session_info` on each: the protocol versions and both sides' capabilities each client
   announced (fs, terminal, MCP servers), mode and model.
4. Call `summary` on each: latency per method, errors, unanswered requests, turns.
5. Call `diff` with left and right: what differs around and in the turns.

Report: what each client supports and uses, where they behave differently (methods, errors,
timing), and which differences are the client's and which the agent's."""


PROMPTS = (triage_slow_session, audit_spec_violations, compare_clients)


def register(server: Any) -> None:
    """Add the prompts to the SDK's server."""
    from mcp.server.mcpserver.prompts.base import Prompt

    titles = {
        "triage_slow_session": "Triage a slow session",
        "audit_spec_violations": "Audit spec violations",
        "compare_clients": "Compare clients",
    }
    for function in PROMPTS:
        server.add_prompt(Prompt.from_function(function, title=titles[function.__name__], description=function.__doc__))
