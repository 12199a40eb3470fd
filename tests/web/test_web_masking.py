"""Masking at the source, for every door of `acp-proxy ui`: a recording with planted secrets (a
Bearer header in initialize's _meta, an AWS_SECRET_ACCESS_KEY env value, ghp_ and sk- tokens,
one in a line that is not UTF-8, one in the agent's argv), and every route the test can
enumerate from Datasette's own listings: tables and views (HTML, JSON, CSV, facets, sorts,
filters, _where, _search), every row and blob, SQL that applies functions to each text column
(json_extract, substr, instr, like, hex, unicode, length), the plugin's own pages. No answer may
hold a secret (plainly, in hex or in base64), and no probe may tell a secret's prefix from a
decoy: the answer for the one is the answer for the other."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

pytest.importorskip("datasette", reason="the [ui] extra (Datasette) is not installed")

from acp_proxy.record import journal
from acp_proxy.web import masking
from tests.web_support import SECRETS, SESSION, app, conversation_traffic, get, record

AWS = "wJalrXUtnFEMIK7MDENGbPxRfiCY0031337"
GHP = "ghp_" + "Kd8" * 12
SK = "sk-" + "Tq4" * 9
PLANTED = {
    "bearer": SECRETS["header"].split()[-1],
    "aws": AWS,
    "ghp": GHP,
    "sk": SK,
    "sk-ant": SECRETS["key"],
    "jwt": SECRETS["jwt"],
    "stderr": SECRETS["stderr"],
    "env": SECRETS["env"],
}
# Each probe asks about a prefix long enough to be the secret's, not a word's.
PREFIXES = {name: PLANTED[name][:10] for name in ("bearer", "aws", "ghp", "sk")}
DECOY = "Qz0Qz0Qz0Qz0Qz0"


def _f(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode() + b"\n"


def traffic() -> list[tuple[int, bytes]]:
    c2a, a2c = journal.C2A, journal.A2C
    env = [{"name": "AWS_SECRET_ACCESS_KEY", "value": AWS}]
    extra = [
        (
            c2a,
            _f(
                {
                    "jsonrpc": "2.0",
                    "id": 40,
                    "method": "session/new",
                    "params": {"cwd": "/w", "mcpServers": [{"name": "m", "command": "srv", "args": [], "env": env}]},
                }
            ),
        ),
        (a2c, _f({"jsonrpc": "2.0", "id": 40, "result": {"sessionId": "sess-web-2"}})),
        (
            a2c,
            _f(
                {
                    "jsonrpc": "2.0",
                    "id": 41,
                    "method": "terminal/create",
                    "params": {"sessionId": SESSION, "command": "aws", "args": ["s3", "ls"], "env": env},
                }
            ),
        ),
        (c2a, _f({"jsonrpc": "2.0", "id": 41, "result": {"terminalId": "term_2"}})),
        (
            a2c,
            _f(
                {
                    "jsonrpc": "2.0",
                    "method": "session/update",
                    "params": {
                        "sessionId": SESSION,
                        "update": {
                            "sessionUpdate": "agent_message_chunk",
                            "content": {"type": "text", "text": f"pushing with {GHP} and {SK}"},
                        },
                    },
                }
            ),
        ),
        # Not UTF-8: recorded in raw_bytes, which Datasette offers as a blob download.
        (a2c, b'{"jsonrpc":"2.0","method":"_x/note","params":{"t":"\xff\xfe ' + GHP.encode() + b'"}}\n'),
    ]
    return conversation_traffic() + extra


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("masking") / "planted.db"
    record(path, traffic(), argv=["agent", "--token", GHP])
    return path


@pytest.fixture(scope="module")
def ds(db: Path) -> Any:
    return app(db)


def leaks(text: str) -> list[str]:
    """The planted secrets ``text`` holds: plainly, in hex, or in a base64 blob of Datasette's JSON."""
    found = []
    blobs = " ".join(
        base64.b64decode(m).decode("utf-8", "replace") for m in re.findall(r'"encoded": ?"([A-Za-z0-9+/=]*)"', text)
    )
    for name, secret in PLANTED.items():
        hexed = secret.encode().hex()
        if secret in text or secret in blobs or hexed in text.lower():
            found.append(name)
    return found


def status_ok(response: Any, path: str) -> None:
    assert 200 <= response.status_code < 500, (path, response.status_code, response.text[:300])


def routes(ds: Any, db: Path) -> list[str]:
    """Every route the test can enumerate from Datasette's listings and the plugin's pages."""
    name = db.stem
    listing = get(ds, f"/{name}.json").json()
    paths = ["/", "/.json", "/-/databases.json", "/-/metadata.json", f"/{name}", f"/{name}.json"]
    paths += ["/runs/1", "/runs/1.json", f"/sessions/{SESSION}.json", "/diff/1/1.json"]
    paths += [f"/runs/1/frames/{seq}.json" for seq in range(1, 40)]
    paths += [f"/{name}/{q['name']}.json" for q in listing["queries"]]
    relations = [(t["name"], t["columns"], t["primary_keys"]) for t in listing["tables"]]
    for view in listing["views"]:
        columns = list(get(ds, f"/{name}/{view['name']}.json?_size=1").json()["columns"])
        relations.append((view["name"], columns, []))
    for table, columns, pks in relations:
        base = f"/{name}/{table}"
        paths += [base, base + ".json?_size=max", base + ".csv?_size=max", base + ".json?_shape=array&_size=max"]
        paths += [base + ".json?_search=" + quote(PREFIXES["ghp"])]
        for column in columns:
            paths += [base + f".json?_facet={column}&_size=0", base + f"?_facet={column}&_size=0"]
            paths += [base + f".json?_facet_array={column}&_size=0", base + f".json?_sort={column}&_size=max"]
        if pks:
            rows = get(ds, base + ".json?_shape=array&_size=max").json()
            for row in rows:
                key = ",".join(str(row[pk]) for pk in pks)
                paths += [f"{base}/{key}", f"{base}/{key}.json"]
                for column in columns:
                    paths.append(f"{base}/{key}.blob?_blob_column={column}")
    return paths


def test_no_route_shows_a_planted_secret(ds: Any, db: Path) -> None:
    # The recording does hold them (else this test proves nothing).
    plain = app(db, no_redact=True)
    assert set(leaks(get(plain, "/planted/frames.json?_size=max").text)) >= {"bearer", "aws", "ghp", "sk", "env"}
    assert leaks(get(plain, "/planted/frames/1,26.blob?_blob_column=raw_bytes").text) == ["ghp"]
    paths = routes(ds, db)
    assert len(paths) > 500
    for path in paths:
        response = get(ds, path)
        status_ok(response, path)
        assert leaks(response.text) == [], path


def _sql_probes(table: str, column: str) -> list[str]:
    """SQL over one column; {P} is the probed prefix, {P4} its first four characters, {H} its
    hex (as SQLite's hex() spells it)."""
    return [
        f"select {column} from {table}",
        f"select json_extract({column}, '$.params.env') from {table} where json_valid({column})",
        f"select json_extract({column}, '$.params.mcpServers') from {table} where json_valid({column})",
        f"select hex({column}), length({column}) from {table}",
        f"select count(*) from {table} where {column} like '%{{P}}%'",
        f"select count(*) from {table} where instr({column}, '{{P}}') > 0",
        f"select count(*) from {table} where hex({column}) like '%{{H}}%'",
        f"select substr({column}, instr({column}, '{{P}}'), 40) from {table} where instr({column}, '{{P}}')",
        f"select unicode(substr({column}, instr({column}, '{{P4}}') + 4, 1)) from {table}",
        f"select sum(length({column})) from {table} where {column} glob '*{{P}}*'",
    ]


def _fill(template: str, prefix: str) -> tuple[str, dict[str, str]]:
    values = {"P": prefix, "P4": prefix[:4], "H": prefix.encode().hex().upper()}
    return template.format(**values), values


def _unstamped(text: str) -> str:
    """An answer without what differs between any two requests: timings, and the CSS class
    Datasette derives from a column's name (which holds the probe)."""
    return re.sub(r'[0-9.]+ ?ms|class="col-[^"]*"', "", text)


TEXT_COLUMNS = [
    ("frames", "raw"),
    ("frames", "raw_bytes"),
    ("frames", "error_message"),
    ("conversation", "raw"),
    ("frame_timeline", "raw"),
    ("runs", "argv"),
    ("run_overview", "argv"),
]


@pytest.mark.parametrize(("table", "column"), TEXT_COLUMNS)
def test_sql_over_masked_columns_sees_masked_text_and_is_no_oracle(ds: Any, table: str, column: str) -> None:
    for secret, prefix in PREFIXES.items():
        for template in _sql_probes(table, column):
            answers = []
            for needle in (prefix, DECOY[: len(prefix)]):
                sql, values = _fill(template, needle)
                for fmt in (".json", ".csv", ""):
                    path = f"/planted{fmt}?sql={quote(sql)}" + ("&_shape=array" if fmt == ".json" else "")
                    response = get(ds, path)
                    status_ok(response, path)
                    assert leaks(response.text) == [], (secret, sql)
                    text = response.text
                    for key, value in sorted(values.items(), key=lambda kv: -len(kv[1])):
                        text = text.replace(value, key)
                    answers.append((response.status_code, _unstamped(text)))
            assert answers[:3] == answers[3:], (secret, template)


@pytest.mark.parametrize("column", ["raw", "raw_bytes", "error_message"])
def test_table_filters_are_no_oracle(ds: Any, column: str) -> None:
    for secret, prefix in PREFIXES.items():
        answers = []
        for needle in (prefix, DECOY[: len(prefix)]):
            base = "/planted/frames.json?_shape=array&_size=max&"
            paths = [
                base + f"{column}__contains={quote(needle)}",
                base + f"{column}__startswith={quote(needle)}",
                base + f"{column}__glob={quote('*' + needle + '*')}",
                base + "_where=" + quote(f"{column} like '%{needle}%'"),
                base + "_where=" + quote(f"instr({column}, '{needle}')"),
                base + "_search=" + quote(needle),
            ]
            for path in paths:
                response = get(ds, path)
                status_ok(response, path)
                answers.append((response.status_code, _unstamped(response.text.replace(needle, "NEEDLE"))))
        half = len(answers) // 2
        assert answers[:half] == answers[half:], secret


@pytest.mark.parametrize(
    "sql",
    [
        "select raw from main.frames",
        "select json_extract(main.frames.raw, '$.params.env') from main.frames",
        "select count(*) from main.frames where main.frames.raw like '%ghp_%'",
        "select argv from main.runs",
        "select raw from main.conversation",
        "select hex(raw_bytes) from main.frames",
    ],
)
def test_sql_past_the_masking_is_refused_in_one_line(ds: Any, sql: str) -> None:
    for fmt in (".json", ".csv", ""):
        response = get(ds, f"/planted{fmt}?sql={quote(sql)}")
        assert response.status_code == 403, (fmt, sql, response.text[:300])
        if fmt == ".json":
            assert response.json()["error"] == masking.REFUSED
        else:
            assert masking.REFUSED in response.text


def test_no_redact_opens_the_sql_and_blobs_again(db: Path) -> None:
    plain = app(db, no_redact=True)
    response = get(plain, "/planted.json?_shape=array&sql=" + quote("select raw from main.frames"))
    assert response.status_code == 200 and "aws" in leaks(response.text)


def test_masked_values_keep_their_shape_for_sql(ds: Any) -> None:
    sql = "select json_extract(raw, '$.params.env') as env from frames where method = 'terminal/create'"
    rows = get(ds, f"/planted.json?_shape=array&sql={quote(sql)}").json()
    envs = [json.loads(r["env"]) for r in rows if r["env"]]
    assert {"name": "AWS_SECRET_ACCESS_KEY", "value": "[redacted]"} in [e for env in envs for e in env]
    # Row URLs keep the table's keys, and links to the run stay (keys come from the table, not its shadow).
    page = get(ds, "/planted/frames?_size=1").text
    assert 'href="/planted/frames/1,1"' in page and 'href="/planted/runs/1"' in page


# -- the shadows themselves, on a plain connection ------------------------------------------------


def _masked_connection(db: Path) -> Any:
    import sqlite3

    from acp_proxy.protocol.redact import Redactor

    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    masking.install(conn, Redactor())
    return conn


def test_shadows_mask_keep_keys_usable_and_pass_the_inspectors_own_reads_verbatim(db: Path) -> None:
    import sqlite3

    conn = _masked_connection(db)
    try:
        sql = "select raw from frames where method = 'terminal/create' and kind = 'request' order by seq desc limit 1"
        (masked,) = conn.execute(sql).fetchone()
        assert AWS not in masked and "[redacted]" in masked
        with masking.verbatim():
            (verbatim,) = conn.execute(sql).fetchone()
        assert AWS in verbatim
        assert conn.execute(sql).fetchone()[0] == masked  # verbatim ends with its block
        # Integer keys are not wrapped: a lookup by (run_id, seq) still uses the primary key.
        lookup = "explain query plan select raw from frames where run_id = 1 and seq = 5"
        plan = " ".join(str(r) for r in conn.execute(lookup))
        assert "PRIMARY KEY" in plan or "sqlite_autoindex" in plan, plan
        with pytest.raises(sqlite3.DatabaseError, match=r"prohibited|not authorized"):
            conn.execute("select raw from main.frames")
        assert conn.execute("select count(seq) from main.frames").fetchone()[0] == 26
    finally:
        conn.close()


def test_with_masking_off_nothing_is_shadowed(db: Path) -> None:
    import sqlite3

    from acp_proxy.protocol.redact import Redactor

    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        masking.install(conn, Redactor(enabled=False))
        assert conn.execute("select count(*) from temp.sqlite_master").fetchone()[0] == 0
        assert AWS in " ".join(r[0] for r in conn.execute("select raw from main.frames where raw is not null"))
    finally:
        conn.close()
