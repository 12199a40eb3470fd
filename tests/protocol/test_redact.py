"""Redaction: each built-in rule, user rules, opting out, and two properties — a frame that holds
no secret is never changed (byte for byte, as a line), and a planted secret of each kind is always
masked, wherever it is planted."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from acp_proxy.errors import UsageError
from acp_proxy.protocol.redact import MASK, RedactError, Redactor, parse_rule, secret_name
from tests.conftest import TRAFFIC

SHARED_TRAFFIC = Path(__file__).resolve().parents[2].parent.parent / "shared" / "acp-traffic"

ANTHROPIC = "sk-ant-api03-" + "Ab3" * 10
OPENAI = "sk-proj-" + "x9Y" * 9
GITHUB = "ghp_" + "a1B2" * 9
SLACK = "xoxb-1234567890-abcdefghij"
AWS = "AKIA" + "ABCDEFGH23456789"
GOOGLE = "AIza" + "Sy" + "A1b2C3d4E5" * 3 + "xyz"
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
KEYS = [ANTHROPIC, OPENAI, GITHUB, SLACK, AWS, GOOGLE, "glpat-" + "z" * 20, "hf_" + "Q" * 34, "npm_" + "7" * 36, JWT]


def dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False)


# -- each rule -----------------------------------------------------------------------------------


def test_headers_in_initialize_meta_are_masked_at_any_depth_in_any_spelling() -> None:
    frame = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": 1,
            "_meta": {
                "proxy": {
                    "headers": {
                        "Authorization": "Basic dXNlcjpwYXNzd29yZA==",
                        "x-api-key": "k-1",
                        "Cookie": "sid=42",
                        "X-Custom-Token": "tok",
                        "Accept": "text/plain",
                    }
                }
            },
        },
    }
    out = Redactor().frame_json(frame)
    headers = out["params"]["_meta"]["proxy"]["headers"]
    assert headers == {
        "Authorization": MASK,
        "x-api-key": MASK,
        "Cookie": MASK,
        "X-Custom-Token": MASK,
        "Accept": "text/plain",
    }
    assert frame["params"]["_meta"]["proxy"]["headers"]["Cookie"] == "sid=42", "the input is not modified"


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("Authorization", True),
        ("PROXY-AUTHORIZATION", True),
        ("set_cookie", True),
        ("apiKey", True),
        ("xApiKey", True),
        ("X_API_KEY", True),
        ("x-goog-api-key", True),
        ("accessToken", True),
        ("client_secret", True),
        ("password", True),
        ("tokens", False),
        ("inputTokens", False),
        ("sessionId", False),
        ("keyboard", False),
        ("x-request-id", False),
        ("", False),
    ],
)
def test_credential_names(name: str, secret: bool) -> None:
    assert secret_name(name) is secret


def test_http_header_objects_of_mcp_servers_are_masked_by_name() -> None:
    frame = {
        "method": "session/new",
        "params": {
            "mcpServers": [
                {
                    "type": "http",
                    "url": "https://mcp.example/",
                    "headers": [
                        {"name": "Authorization", "value": "Bearer abcdef123456"},
                        {"name": "Accept", "value": "application/json"},
                    ],
                }
            ]
        },
    }
    out = Redactor().frame_json(frame)
    assert out["params"]["mcpServers"][0]["headers"] == [
        {"name": "Authorization", "value": MASK},
        {"name": "Accept", "value": "application/json"},
    ]


def test_env_values_of_terminal_create_and_of_mcp_servers_are_masked_names_kept() -> None:
    frame = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "terminal/create",
        "params": {"sessionId": "s", "command": "make", "env": [{"name": "DEPLOY_KEY", "value": "abc"}]},
    }
    out = Redactor().frame_json(frame)
    assert out["params"]["env"] == [{"name": "DEPLOY_KEY", "value": MASK}]
    assert out["params"]["command"] == "make"
    as_object = {"params": {"mcpServers": [{"name": "gh", "env": {"GITHUB_TOKEN": "t0ken", "EMPTY": ""}}]}}
    assert Redactor().frame_json(as_object)["params"]["mcpServers"][0]["env"] == {"GITHUB_TOKEN": MASK, "EMPTY": ""}


def test_bearer_and_basic_credentials_in_text_keep_the_scheme_word() -> None:
    r = Redactor()
    assert r.text("curl -H 'Authorization: Bearer abc.def-123456'") == f"curl -H 'Authorization: Bearer {MASK}'"
    assert r.text("Basic dXNlcjpwYXNz==") == f"Basic {MASK}"
    assert r.text("uses Bearer authentication, or basic auth") == "uses Bearer authentication, or basic auth"


@pytest.mark.parametrize("key", KEYS)
def test_api_key_and_jwt_shapes_are_masked_in_any_string(key: str) -> None:
    frame = {"method": "session/update", "params": {"update": {"content": {"text": f"the key is {key}."}}}}
    out = Redactor().frame_json(frame)
    assert out["params"]["update"]["content"]["text"] == f"the key is {MASK}."


@pytest.mark.parametrize(
    "text",
    [
        "task-force-abcdefghijklmnopqrstuvwxyz",  # sk- inside a word is not a key
        "sk-short",
        "ghp_tooShort",
        "a sha256: 0d0b1ca83c4872e5473f68926a894c7a8203b59b118e2a79bfe43dd76fbcbc1a",
        "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk",
        "eyJustAWord and AKIAlowercase",
    ],
)
def test_near_misses_are_left_alone(text: str) -> None:
    assert Redactor().text(text) == text


def test_a_line_without_secret_is_returned_as_it_came() -> None:
    r = Redactor()
    for raw in (b'{"jsonrpc":"2.0" , "id":1,"result":{"a":1.0e0}}', b"not json at all", b"\xff\xfe bytes", b""):
        assert r.line(raw) is raw


def test_a_masked_line_keeps_its_own_spelling_around_the_secret() -> None:
    raw = b'{"jsonrpc": "2.0",  "id": 1, "params": {"_meta": {"Authorization": "Bearer zz9-abc.def"}, "n": 1.50}}'
    out = Redactor().line(raw)
    assert out == raw.replace(b'"Bearer zz9-abc.def"', b'"[redacted]"')


def test_a_line_with_a_masked_number_is_reserialised_as_valid_json() -> None:
    out = Redactor(["params.pin"]).line(b'{"params": {"pin": 1234, "x": "y"}}\r')
    assert out.endswith(b"\r")
    assert json.loads(out) == {"params": {"pin": MASK, "x": "y"}}


def test_lines_that_are_not_json_or_not_utf8_are_masked_as_text() -> None:
    r = Redactor()
    assert r.line(b"error: bad key " + OPENAI.encode()) == b"error: bad key " + MASK.encode()
    assert r.line(b"\xff " + OPENAI.encode()) == b"\xff " + MASK.encode()


# -- user rules ----------------------------------------------------------------------------------


def test_a_json_path_rule_masks_what_it_reaches_whole_arrays_included() -> None:
    r = Redactor(["params._meta.proxy.headers", "$.result.items.secret", "path:result.*.n"])
    frame = {
        "params": {"_meta": {"proxy": {"headers": {"Accept": "x", "list": ["a", 1, None]}}}},
        "result": {"items": [{"secret": "s1"}, {"secret": "s2", "other": "o"}], "z": {"n": 5}},
    }
    out = r.frame_json(frame)
    assert out["params"]["_meta"]["proxy"]["headers"] == {"Accept": MASK, "list": [MASK, MASK, None]}
    assert out["result"]["items"] == [{"secret": MASK}, {"secret": MASK, "other": "o"}]
    assert out["result"]["z"] == {"n": MASK}


def test_a_regex_rule_masks_its_groups_or_its_whole_match_also_in_keys() -> None:
    r = Redactor([r"token=(\w+)", "re:hunter2"])
    assert r.text("url?token=abc123&x=1 pass hunter2") == f"url?token={MASK}&x=1 pass {MASK}"
    assert r.frame_json({"hunter2": 1}) == {MASK: 1}


def test_a_value_masked_by_a_path_rule_is_masked_in_later_free_text() -> None:
    r = Redactor(["params.credential"])
    r.frame_json({"params": {"credential": "correct-horse-battery"}})
    assert r.text("the agent echoed correct-horse-battery back") == f"the agent echoed {MASK} back"


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        ("", "empty --redact rule"),
        ("re:", "empty regular expression"),
        ("re:(", "is not a regular expression"),
        ("a*", "matches the empty string"),
        ("path:a..b", "a JSON path is names"),
        ("x" * 1001, "too long"),
    ],
)
def test_bad_rules_are_one_line_usage_errors(rule: str, message: str) -> None:
    with pytest.raises(RedactError) as info:
        parse_rule(rule)
    assert message in str(info.value)
    assert "\n" not in str(info.value)
    assert isinstance(info.value, UsageError)


def test_rule_kinds_are_told_apart_as_documented() -> None:
    assert type(parse_rule("params._meta.token")).__name__ == "PathRule"
    assert type(parse_rule("$.params")).__name__ == "PathRule"
    assert type(parse_rule("hunter2")).__name__ == "RegexRule"
    assert type(parse_rule(r"api\.example\.com")).__name__ == "RegexRule"
    assert type(parse_rule("re:a.b")).__name__ == "RegexRule"


def test_no_redact_shows_everything() -> None:
    r = Redactor(enabled=False)
    frame = {"params": {"Authorization": "Bearer abcdef123456", "text": OPENAI}}
    assert r.frame_json(frame) is frame
    assert r.text(OPENAI) == OPENAI
    raw = dumps(frame).encode()
    assert r.line(raw) is raw


# -- properties ----------------------------------------------------------------------------------

# Keys and strings of frames without secrets: any text, except the names this module documents as
# credentials (an independent list, spelled here) and ``env`` (whose values are secret by rule).
DOCUMENTED_NAMES = {
    "authorization",
    "proxy-authorization",
    "cookie",
    "set-cookie",
    "api-key",
    "apikey",
    "x-api-key",
    "x-apikey",
    "x-auth-token",
    "x-access-token",
    "auth-token",
    "access-token",
    "refresh-token",
    "id-token",
    "session-token",
    "password",
    "passwd",
    "secret",
    "client-secret",
    "private-key",
    "env",
}


def _plain_key(key: str) -> bool:
    normal = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "-", key).lower().replace("_", "-")
    x_secret = normal.startswith("x-") and normal.endswith(("key", "token", "secret"))
    return normal not in DOCUMENTED_NAMES and not x_secret


keys = st.text(max_size=12).filter(_plain_key)
scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=40)
json_values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4), max_leaves=25
)
frames = st.fixed_dictionaries(
    {"jsonrpc": st.just("2.0"), "method": st.sampled_from(["session/update", "terminal/create", "initialize", "x"])},
    optional={"id": st.integers(), "params": json_values, "result": json_values},
)


@settings(max_examples=300, deadline=None)
@given(frames)
def test_property_a_frame_without_secret_is_never_changed(frame: dict[str, Any]) -> None:
    r = Redactor()
    assert r.frame_json(frame) is frame
    raw = dumps(frame).encode()
    assert r.line(raw) is raw


def test_a_key_equal_to_one_seen_before_leaves_its_frame_unchanged() -> None:
    # Found by the property above: keys are remembered across frames, and an equal key from
    # another frame is another object, which once made a secret-free frame count as changed.
    r = Redactor()
    r.frame_json({"jsonrpc": "2.0", "id": 0, "result": {}})
    key = "".join(["res", "ult"])
    frame = {"jsonrpc": "2.0", "id": 0, "result": {key: None}}
    assert r.frame_json(frame) is frame


def _traffic_lines() -> list[bytes]:
    lines = []
    for folder in (TRAFFIC, SHARED_TRAFFIC):
        for path in sorted(folder.glob("*.jsonl")) if folder.is_dir() else []:
            for line in path.read_text().splitlines():
                lines.append(json.loads(line)["frame"].encode())
    return lines


def test_real_recorded_traffic_holds_no_false_secret() -> None:
    lines = _traffic_lines()
    assert len(lines) >= 50
    r = Redactor()
    changed = [line for line in lines if r.line(line) is not line]
    assert changed == []


def _plant(value: Any, path: list[int], secret_key: str, secret: Any) -> Any:
    """``value`` with ``{secret_key: secret}`` put inside the container ``path`` leads to."""
    if isinstance(value, dict) and path:
        items = list(value)
        if items:
            k = items[path[0] % len(items)]
            return {**value, k: _plant(value[k], path[1:], secret_key, secret)}
    if isinstance(value, list) and path and value:
        i = path[0] % len(value)
        return [*value[:i], _plant(value[i], path[1:], secret_key, secret), *value[i + 1 :]]
    if isinstance(value, dict):
        return {**value, secret_key: secret}
    return {"wrapped": value, secret_key: secret}


secrets_values = st.text(alphabet="ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789", min_size=12, max_size=30)
words = st.text(alphabet="abc xyz.,:;()!?", max_size=15)
header_names = st.sampled_from(
    [
        "Authorization",
        "authorization",
        "X-Api-Key",
        "x_api_key",
        "apiKey",
        "Cookie",
        "Proxy-Authorization",
        "X-My-Token",
        "password",
    ]
)


@st.composite
def planted(draw: st.DrawFn) -> tuple[dict[str, Any], str]:
    """A frame with one secret of a random kind planted at a random depth; the secret's text."""
    frame = draw(frames)
    body = frame.get("params", {})
    path = draw(st.lists(st.integers(min_value=0, max_value=5), max_size=4))
    kind = draw(st.sampled_from(["header", "header_object", "env", "bearer", "key", "jwt"]))
    secret = draw(secrets_values)
    if kind == "header":
        body = _plant(body, path, draw(header_names), secret)
    elif kind == "header_object":
        body = _plant(body, path, "headers", [{"name": draw(header_names), "value": secret}])
    elif kind == "env":
        frame["method"] = "terminal/create"
        body = _plant(body, path, "env", [{"name": "ANY_NAME", "value": secret}])
    else:
        if kind == "bearer":
            secret = "9" + secret
            text = f"Bearer {secret}"
        else:
            secret = draw(st.sampled_from(KEYS)) if kind == "key" else JWT
            text = secret
        body = _plant(body, path, draw(keys), f"{draw(words)} {text} {draw(words)}")
    frame["params"] = body
    return frame, secret


@settings(max_examples=300, deadline=None)
@given(planted())
def test_property_a_planted_secret_of_each_kind_is_always_masked(case: tuple[dict[str, Any], str]) -> None:
    frame, secret = case
    assert secret in dumps(frame)
    assert secret not in dumps(Redactor().frame_json(frame))
    line = Redactor().line(dumps(frame).encode())
    assert secret.encode() not in line
    json.loads(line)  # still one JSON frame


# -- run --redact: the stored copy is masked, what is forwarded never -------------------------


@pytest.mark.spawns
def test_run_redact_stores_masked_copies_and_forwards_every_byte(tmp_path: Path) -> None:
    import sqlite3

    from tests.conftest import run_proxy

    key = "sk-ant-api03-" + "Qw8" * 10
    secret_line = json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"_meta": {"headers": {"Authorization": key}}}}
    ).encode()
    plain_line = b'{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"n":1}}}'
    hunter = b'{"jsonrpc":"2.0","method":"x/y","params":{"word":"hunter2"}}'
    data = secret_line + b"\n" + plain_line + b"\n" + hunter + b"\n"
    db = tmp_path / "rec.db"
    agent = ["sh", "-c", f"cat; echo 'token {key}' >&2", key]  # $0, and so argv, holds the key too
    result = run_proxy(["run", "--db", str(db), "--redact", "--redact", "re:hunter2", "--", *agent], input=data)
    assert result.returncode == 0, result.stderr
    assert result.stdout == data  # forwarded byte for byte
    conn = sqlite3.connect(db)
    try:
        raws = [r for (r,) in conn.execute("select raw from frames where dir = 'a2c' order by seq")]
        stderr = [r for (r,) in conn.execute("select raw from frames where dir = 'stderr'")]
        argv, options = conn.execute("select argv, options from runs").fetchone()
    finally:
        conn.close()
    assert key not in raws[0] and MASK in raws[0] and json.loads(raws[0])["method"] == "initialize"
    assert raws[1] == plain_line.decode()  # nothing secret: stored as it came
    assert "hunter2" not in raws[2]
    assert stderr and key not in "".join(stderr)
    assert key not in argv and "hunter2" not in options and json.loads(options)["redact"] is True


@pytest.mark.spawns
def test_run_redact_mistakes_are_one_line_before_the_agent_starts(tmp_path: Path) -> None:
    from tests.conftest import run_proxy

    for args, said in (
        (["--redact", "re:("], "--redact"),
        (["--redact", "--no-record"], "--no-record"),
    ):
        result = run_proxy(["run", "--db", str(tmp_path / "r.db"), *args, "--", "touch", str(tmp_path / "started")])
        assert result.returncode == 2 and result.stderr.count(b"\n") == 1 and said.encode() in result.stderr
        assert not (tmp_path / "started").exists()
