"""Refresh the ACP JSON Schemas shipped in ``acp_proxy/schema/`` from the published SDK package.

Owns: fetching ``@agentclientprotocol/sdk`` with npm (``npm view`` for the newest version and
the tarball's integrity, ``npm pack`` for the tarball), copying its ``schema/v<N>/schema.json``
and ``schema.unstable.json`` files unmodified to ``v<N>.schema.json`` /
``v<N>.schema.unstable.json`` (every version the package has: a new ``v3`` directory adds
protocol version 3 without code), its ``LICENSE``, and writing ``PROVENANCE.md`` (package,
version, tarball integrity, sha256 of each file). It then names the supplement entries
(``v<N>.supplement.json``) the new schema defines itself, so they can be dropped.

Must not know: how the proxy reads the schemas (``acp_proxy.protocol.vocabulary`` derives
everything from whichever files are present).

Usage: ``python scripts/refresh_schemas.py [--version X.Y.Z] [--tarball PATH] [--dest DIR]``
(``--tarball``: a package tarball already on disk, e.g. for a machine without the registry).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

PACKAGE = "@agentclientprotocol/sdk"
DEST = Path(__file__).resolve().parent.parent / "acp_proxy" / "schema"
_MEMBER = re.compile(r"package/schema/v(\d+)/(schema(?:\.unstable)?)\.json")


class RefreshError(Exception):
    """Something a person must fix (no npm, no such version, a package without schemas)."""


def _npm(*args: str, cwd: Path | None = None) -> str:
    try:
        done = subprocess.run(["npm", *args], cwd=cwd, capture_output=True, text=True, timeout=300, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RefreshError(f"npm {args[0]} failed: {exc}") from exc
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise RefreshError(f"npm {' '.join(args)} failed: {last}")
    return done.stdout


def fetch(version: str | None, workdir: Path) -> tuple[Path, str, str | None]:
    """The package tarball (npm pack into ``workdir``), its version and its registry integrity."""
    if version is None:
        version = json.loads(_npm("view", PACKAGE, "version", "--json"))
    packed = json.loads(_npm("pack", f"{PACKAGE}@{version}", "--json", "--pack-destination", str(workdir)))
    entry = packed[0] if isinstance(packed, list) else packed
    return workdir / entry["filename"], str(entry.get("version", version)), entry.get("integrity")


def install(tarball: Path, dest: Path, version: str, integrity: str | None = None) -> list[str]:
    """Copy the schemas and LICENSE of ``tarball`` to ``dest``, write PROVENANCE.md; the file names."""
    found: dict[str, bytes] = {}
    license_text: bytes | None = None
    with tarfile.open(tarball, "r:gz") as tar:
        for member in tar.getmembers():
            if not member.isfile():
                continue
            match = _MEMBER.fullmatch(member.name)
            if match is None and member.name != "package/LICENSE":
                continue
            handle = tar.extractfile(member)
            data = handle.read() if handle is not None else b""
            if match is None:
                license_text = data
                continue
            json.loads(data)  # a schema that is not JSON is not installed
            found[f"v{match.group(1)}.{match.group(2)}.json"] = data
    if not any(re.fullmatch(r"v\d+\.schema\.json", name) for name in found):
        raise RefreshError(f"{tarball.name} has no schema/v<N>/schema.json")
    dest.mkdir(parents=True, exist_ok=True)
    for old in dest.glob("v*.schema*.json"):
        if old.name not in found:
            old.unlink()
    for name, data in found.items():
        (dest / name).write_bytes(data)
    if license_text is not None:
        (dest / "LICENSE").write_bytes(license_text)
    (dest / "PROVENANCE.md").write_text(provenance(found, version, integrity, dest), encoding="utf-8")
    return sorted(found)


def provenance(found: dict[str, bytes], version: str, integrity: str | None, dest: Path) -> str:
    rows = [
        f"| `{name}` | `schema/{name.split('.')[0]}/{name.split('.', 1)[1]}` | {hashlib.sha256(data).hexdigest()} |"
        for name, data in sorted(found.items())
    ]
    supplements = sorted(p.name for p in dest.glob("v*.supplement.json"))
    lines = [
        "# Official ACP JSON Schemas",
        "",
        f"Copied unmodified from the npm package `{PACKAGE}` version {version}",
        "(`schema/v<N>/*.json`), Apache-2.0 (see `LICENSE` here), by `scripts/refresh_schemas.py`.",
        *([f"Tarball integrity (registry): `{integrity}`."] if integrity else []),
        "acp-proxy derives its method and `session/update` variant tables from them",
        "(`acp_proxy/protocol/vocabulary.py`: the versions are the files present) and validates",
        "frames against them; nothing in them is edited by hand.",
        "",
        "| file here | upstream file | sha256 |",
        "| --- | --- | --- |",
        *rows,
        "",
        "## Supplements",
        "",
        "`v<N>.supplement.json` files hold `session/update` variants newer than any published",
        "schema file, each with its source (the Rust schema crate's docs on docs.rs, the RFD):",
        "they are merged into the draft schema of their version, and an entry the official schema",
        "defines is ignored (`refresh_schemas.py` names those, to be deleted).",
        "",
        *([f"- `{name}`" for name in supplements] or ["(none)"]),
        "",
    ]
    return "\n".join(lines)


def superseded(dest: Path) -> list[str]:
    """Supplement entries that the installed official draft schema defines itself."""
    out = []
    for path in sorted(dest.glob("v*.supplement.json")):
        version = path.name.split(".")[0]
        official = dest / f"{version}.schema.unstable.json"
        if not official.is_file():
            continue
        members = json.loads(official.read_text())["$defs"].get("SessionUpdate", {})
        known = {
            m.get("properties", {}).get("sessionUpdate", {}).get("const")
            for m in members.get("oneOf") or members.get("anyOf") or []
        }
        out += [f"{path.name}: {name}" for name in json.loads(path.read_text()).get("updates", {}) if name in known]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", help=f"the {PACKAGE} version (default: the newest published)")
    parser.add_argument("--tarball", type=Path, help="a package tarball on disk instead of npm pack")
    parser.add_argument("--dest", type=Path, default=DEST)
    args = parser.parse_args(argv)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            if args.tarball is not None:
                tarball, version, integrity = args.tarball, args.version or "(local tarball)", None
            else:
                tarball, version, integrity = fetch(args.version, Path(tmp))
            names = install(tarball, args.dest, version, integrity)
    except (RefreshError, OSError, tarfile.TarError, json.JSONDecodeError) as exc:
        print(f"refresh_schemas: {exc}", file=sys.stderr)
        return 2
    print(f"{PACKAGE} {version}: {', '.join(names)} -> {args.dest}")
    for entry in superseded(args.dest):
        print(f"now in the official schema, drop from the supplement: {entry}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
