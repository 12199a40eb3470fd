"""scripts/refresh_schemas.py: a package tarball in, the schema directory and its provenance out.

The tarball is built here from the shipped schema files (no registry): the same layout as the
published ``@agentclientprotocol/sdk`` (``package/schema/v<N>/schema*.json``, ``package/LICENSE``).
"""

from __future__ import annotations

import hashlib
import io
import json
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

from acp_proxy.protocol import vocabulary as acp

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import refresh_schemas

SHIPPED = Path(acp.__file__).resolve().parent.parent / "schema"


def tarball(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def package(tmp_path: Path, extra: dict[str, Any] | None = None) -> Path:
    members = {
        f"package/schema/v{v}/schema{kind}.json": (SHIPPED / f"v{v}.schema{kind}.json").read_bytes()
        for v in (1, 2)
        for kind in ("", ".unstable")
    }
    members["package/LICENSE"] = b"Apache-2.0 text"
    members["package/dist/index.js"] = b"//"
    for name, value in (extra or {}).items():
        members[name] = json.dumps(value).encode()
    return tarball(tmp_path / "sdk.tgz", members)


def test_install_copies_every_version_unmodified_and_records_provenance(tmp_path: Path) -> None:
    v3 = json.loads((SHIPPED / "v2.schema.json").read_text())
    dest = tmp_path / "schema"
    dest.mkdir()
    (dest / "v2.supplement.json").write_bytes((SHIPPED / "v2.supplement.json").read_bytes())
    names = refresh_schemas.install(package(tmp_path, {"package/schema/v3/schema.json": v3}), dest, "9.9.9", "sha512-x")
    assert names == [
        "v1.schema.json",
        "v1.schema.unstable.json",
        "v2.schema.json",
        "v2.schema.unstable.json",
        "v3.schema.json",
    ]
    # A new version directory is a new protocol version, with no code.
    assert acp.versions_in(p.name for p in dest.iterdir()) == (1, 2, 3)
    assert (dest / "v2.schema.unstable.json").read_bytes() == (SHIPPED / "v2.schema.unstable.json").read_bytes()
    text = (dest / "PROVENANCE.md").read_text()
    digest = hashlib.sha256((SHIPPED / "v1.schema.json").read_bytes()).hexdigest()
    assert "version 9.9.9" in text and "sha512-x" in text and digest in text and "`v2.supplement.json`" in text
    assert (dest / "LICENSE").read_bytes() == b"Apache-2.0 text"


def test_the_shipped_provenance_matches_the_shipped_files() -> None:
    text = (SHIPPED / "PROVENANCE.md").read_text()
    for path in sorted(SHIPPED.glob("v*.schema*.json")):
        assert f"`{path.name}`" in text and hashlib.sha256(path.read_bytes()).hexdigest() in text


def test_supplement_entries_a_new_schema_defines_are_named(tmp_path: Path) -> None:
    newer = json.loads((SHIPPED / "v2.schema.unstable.json").read_text())
    newer["$defs"]["SessionUpdate"]["anyOf"].insert(
        0, {"properties": {"sessionUpdate": {"const": "replay_complete"}}, "type": "object"}
    )
    dest = tmp_path / "schema"
    dest.mkdir()
    (dest / "v2.supplement.json").write_bytes((SHIPPED / "v2.supplement.json").read_bytes())
    refresh_schemas.install(package(tmp_path, {"package/schema/v2/schema.unstable.json": newer}), dest, "9.9.9")
    assert refresh_schemas.superseded(dest) == ["v2.supplement.json: replay_complete"]


def test_a_package_without_schemas_is_one_clear_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tarball(tmp_path / "empty.tgz", {"package/LICENSE": b"x"})
    assert refresh_schemas.main(["--tarball", str(empty), "--dest", str(tmp_path / "d")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("refresh_schemas: ") and err.count("\n") == 1
