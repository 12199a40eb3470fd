"""Every rule cites the section of the document it comes from: a page of the protocol's
documentation (v1, the v2 draft, an RFD) or a published address, always down to its heading;
the schema rules cite the schema (their findings name the ``$defs`` type)."""

from __future__ import annotations

import re

import pytest

from acp_proxy.checks.catalogue import RULES

PAGE = re.compile(r"(v1|v2-draft|rfds)/[a-z0-9-]+\.mdx?#[a-z0-9][a-z0-9-]*")
ADDRESS = re.compile(r"https://[a-z0-9.-]+/\S*#[a-z0-9_-]+")


@pytest.mark.parametrize("rule_id", sorted(RULES))
def test_each_rule_cites_a_section(rule_id: str) -> None:
    rule = RULES[rule_id]
    for spec in (rule.spec, rule.spec_v2):
        if spec is None:
            continue
        if rule_id.startswith("schema/"):
            assert spec == "schema"
            continue
        assert PAGE.fullmatch(spec) or ADDRESS.fullmatch(spec), f"{rule_id}: {spec!r} names no section"
    if rule.spec_v2 is not None:
        assert rule.spec_v2.startswith(("v2-draft/", "rfds/", "https://")), rule_id
