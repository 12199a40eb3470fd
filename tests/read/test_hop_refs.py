"""A session that exists only inside a proxy chain (no ``sessions`` row; ``acp-proxy sessions``
lists it with its hop) is a REF at every door: its id, or a unique prefix of it, names the run
whose chain carries it, described as that session at its hop. Copying an id from the list must
never give "no run or session matches". (The MCP tools: ``tests/mcp/test_mcp_hops.py``.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from acp_proxy.read import listing, queries
from acp_proxy.store import database as store
from tests.checks.test_checks import S, chained, v2_turn
from tests.read.test_hops import CHUNK, _chain_sessions, _record, _renamed, _times


def _chained_session(db_path: Path, session_id: str) -> int:
    """A run whose only session, ``session_id``, is inside its proxy chain (hop 1)."""
    messages = chained(_renamed(v2_turn(CHUNK), session_id))
    return _record(db_path, messages, _times(len(messages)))


def _own_session(db_path: Path, session_id: str) -> int:
    """A run whose session ``session_id`` is its own: a sessions row."""
    messages = _renamed(v2_turn(CHUNK), session_id)
    return _record(db_path, messages, _times(len(messages)))


def test_a_chains_session_id_or_a_unique_prefix_names_its_run(tmp_path: Path) -> None:
    db_path = tmp_path / "rec.db"
    runs = _chain_sessions(db_path)
    db = store.open_for_reading(db_path)
    for text in ("sess_in", "sess_i", "session:sess_in", " sess_in "):
        ref = queries.resolve(db, text)
        assert (ref.run_id, ref.is_session, ref.chain_session, ref.hop) == (runs["link"], False, "sess_in", 1), text
        assert ref.describe() == f"session sess_in (inside run {runs['link']}'s proxy chain, hop 1)"
        assert queries.run_ids_of(db, ref) == [runs["link"]]
        assert queries.resolve_scope(db, text) == (ref, ref.describe(), [runs["link"]])
    deep = queries.resolve(db, "sess_d")
    assert (deep.run_id, deep.chain_session, deep.hop) == (runs["deep"], "sess_deep", 2)
    # In a run that has sessions of its own too: the chain's session names that run.
    mixed = queries.resolve(db, "sess_mix")
    assert (mixed.run_id, mixed.chain_session, mixed.hop) == (runs["mixed"], "sess_mix", 1)
    # Every session the list shows is a REF that names it (or, for a chain's, its run).
    from acp_proxy.read import listing

    for row in listing.sessions(db, None):
        ref = queries.resolve(db, row["session_id"])
        assert str(ref.run_id if row["hop"] else ref.session_id) == (row["runs"] if row["hop"] else row["session_id"])


def test_a_sessions_row_answers_first_and_the_chains_only_when_no_row_does(tmp_path: Path) -> None:
    db_path = tmp_path / "rec.db"
    runs = _chain_sessions(db_path)
    db = store.open_for_reading(db_path)
    # `sess_` starts the sessions row S (sess_1) and three chains' sessions: the row, as before.
    assert S.startswith("sess_")
    ref = queries.resolve(db, "sess_")
    assert (ref.session_id, ref.chain_session) == (S, None)
    # A row that a chain's whole id is the start of: the row, found by the index alone, as
    # before (the chain's session is `run:N` then).
    table = _own_session(db_path, "sess_in_own")
    ref = queries.resolve(db, "sess_in")
    assert (ref.session_id, ref.chain_session, queries.run_ids_of(db, ref)) == ("sess_in_own", None, [table])
    # Two such rows: no row answers, and the chain's exact id does.
    _own_session(db_path, "sess_in_two")
    ref = queries.resolve(db, "sess_in")
    assert (ref.run_id, ref.chain_session) == (runs["link"], "sess_in")
    with pytest.raises(queries.RefError, match=r"'sess_in_' is the start of 2 session ids"):
        queries.resolve(db, "sess_in_")
    # A chain's session of the same id as a row (in another run): the row.
    _chained_session(db_path, "sess_in_own")
    assert queries.resolve(db, "sess_in_own").session_id == "sess_in_own"


def test_a_prefix_of_several_sessions_of_either_kind_asks_for_more(tmp_path: Path) -> None:
    db_path = tmp_path / "rec.db"
    _chain_sessions(db_path)
    _chained_session(db_path, "sess_mux")
    db = store.open_for_reading(db_path)
    # Two chains' sessions.
    with pytest.raises(queries.RefError, match=r"'sess_m' is the start of 2 session ids \(sess_mix, sess_mux\)"):
        queries.resolve(db, "sess_m")
    # Two sessions rows: the candidates are those of both kinds.
    _own_session(db_path, "sess_2")
    with pytest.raises(queries.RefError, match=r"'sess_' is the start of 6 session ids \(sess_1, sess_2, sess_deep"):
        queries.resolve(db, "sess_")
    with pytest.raises(queries.RefError, match="no run or session matches 'sess_x'"):
        queries.resolve(db, "sess_x")


def test_the_same_chain_session_in_two_runs_names_the_newest(tmp_path: Path) -> None:
    db_path = tmp_path / "rec.db"
    _chained_session(db_path, "sess_twice")
    newer = _chained_session(db_path, "sess_twice")
    ref = queries.resolve(store.open_for_reading(db_path), "sess_tw")
    assert (ref.run_id, ref.chain_session) == (newer, "sess_twice")


def test_the_cli_shows_stats_and_checks_a_chains_session(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from acp_proxy.cli.commands import cli

    db_path = tmp_path / "rec.db"
    runs = _chain_sessions(db_path)
    link = runs["link"]

    def invoke(*args: str) -> str:
        result = CliRunner().invoke(cli, [*args, "--db", str(db_path)], env={"COLUMNS": "100"})
        assert result.exit_code == 0, result.output
        return result.output

    # `show` of the session is `show` of its run: the link's frames and the hop's conversation.
    shown = invoke("show", "sess_in")
    assert shown == invoke("show", str(link)) == invoke("show", "sess_i")
    assert shown.startswith(f"Run {link} ")
    assert any(line.startswith("Session sess_in  hop 1") for line in shown.splitlines()), shown
    assert json.loads(invoke("show", "sess_in", "--json")) == json.loads(invoke("show", str(link), "--json"))
    described = f"session sess_in (inside run {link}'s proxy chain, hop 1)"
    stats = json.loads(invoke("stats", "sess_in", "--json"))
    assert stats["ref"] == described
    assert [(t["run_id"], t["hop"], t["session_id"]) for t in stats["turns"]] == [(link, 1, "sess_in")]
    assert invoke("stats", "sess_in").splitlines()[0] == f"Stats for {described}"
    checked = invoke("check", "sess_in")
    assert f"no findings for {described}" in checked


def test_the_inspectors_session_page_takes_a_chains_session(tmp_path: Path) -> None:
    from acp_proxy.protocol.redact import Redactor
    from acp_proxy.web import model

    db_path = tmp_path / "rec.db"
    runs = _chain_sessions(db_path)
    db = store.open_for_reading(db_path)
    page = model.conversation(db, "session", "sess_in", Redactor(), parts=("summary",))
    assert page["run_ids"] == [runs["link"]]
    assert page["ref"]["id"] == "sess_in" and "proxy chain, hop 1" in page["ref"]["describe"]
    with pytest.raises(model.NotFound):
        model.conversation(db, "session", "sess_x", Redactor(), parts=("summary",))


@pytest.fixture(scope="module")
def chain_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db_path = tmp_path_factory.mktemp("chains") / "rec.db"
    _chain_sessions(db_path)
    return db_path


_REF_TEXT = st.one_of(
    st.text(max_size=40),
    st.sampled_from(
        ["sess", "sess_", "sess_in", "sess_d", "session:", "session:sess", "run:", "last", "s%", "s_\\", "sess\ud800"]
    ),
    st.builds(lambda a, b: a + b, st.sampled_from(["", "session:", "run:", "sess_"]), st.text(max_size=12)),
)


@settings(max_examples=300, deadline=None)
@given(text=_REF_TEXT)
def test_any_ref_text_names_a_run_or_a_session_or_says_why_in_one_line(chain_db: Path, text: str) -> None:
    """Total on input: a REF beside chain sessions (prefixes of both kinds, LIKE's own characters,
    lone surrogates) resolves or raises RefError with one line, never anything else."""
    db = store.open_for_reading(chain_db)
    try:
        ref = queries.resolve(db, text)
    except queries.RefError as exc:
        assert str(exc) and "\n" not in str(exc)
        return
    assert ref.run_id is not None or ref.session_id is not None
    assert (ref.chain_session is None) or (ref.run_id is not None and ref.hop >= 1 and not ref.is_session)


@settings(max_examples=300, deadline=None)
@given(text=st.one_of(st.text(max_size=30), st.from_regex(r"-?[0-9]{0,20}:-?[0-9]{0,20}", fullmatch=True)))
def test_any_sessions_key_pages_or_is_ignored(chain_db: Path, text: str) -> None:
    """The inspector hands the last session's place back as text: any text is a key or none, and
    the page after it is a list of sessions."""
    key = listing.session_key(text)
    assert key is None or all(isinstance(part, int) and abs(part) < 10**19 for part in key)
    page, more = listing.sessions_before(store.open_for_reading(chain_db), key, 2)
    assert isinstance(more, bool) and len(page) <= 2 and all("session_id" in row for row in page)


def test_the_short_ids_the_lists_show_tell_a_chains_session_from_a_recorded_one(tmp_path: Path) -> None:
    """A recorded session and a chain's that share a long prefix: the lists abbreviate both past
    it, so each short id, copied as a REF, names the session it stood for."""
    db_path = tmp_path / "rec.db"
    own = _own_session(db_path, "sess_abcdefghij_own")
    chain = _chained_session(db_path, "sess_abcdefghij_hop")
    db = store.open_for_reading(db_path)
    length = queries.session_prefix_length(db)
    assert length == len("sess_abcdefghij_") + 1
    assert queries.resolve(db, "sess_abcdefghij_own"[:length]).session_id == "sess_abcdefghij_own"
    ref = queries.resolve(db, "sess_abcdefghij_hop"[:length])
    assert (ref.session_id, ref.chain_session, ref.run_id) == (None, "sess_abcdefghij_hop", chain)
    assert own != chain


def test_a_chains_session_is_described_as_itself_with_its_hop_not_as_its_runs_other_sessions(
    tmp_path: Path,
) -> None:
    """MCP ``session_info`` (``insights.metadata``) on a chain's session: that session, at its
    hop, beside the run's set-up; not the sessions the run has of its own."""
    from acp_proxy.read import insights

    db_path = tmp_path / "rec.db"
    runs = _chain_sessions(db_path)
    db = store.open_for_reading(db_path)
    listed = {row["session_id"]: row for row in listing.sessions(db, None) if row["hop"]}
    for session_id, run in (("sess_in", "link"), ("sess_mix", "mixed"), ("sess_deep", "deep")):
        found = insights.metadata(db, session_id)
        assert [r["run_id"] for r in found["runs"]] == [runs[run]]
        (session,) = found["sessions"]
        assert (session["session_id"], session["hop"]) == (session_id, listed[session_id]["hop"])
        assert session["cwd"] == listed[session_id]["cwd"]
    # The run `mixed` has a session of its own (S): asked by its run, that one is there as before.
    assert [s["session_id"] for s in insights.metadata(db, f"run:{runs['mixed']}")["sessions"]] == [S]
