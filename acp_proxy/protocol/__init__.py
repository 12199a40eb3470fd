"""The sans-IO protocol core: bytes and frames in, typed facts out. No I/O, no SQL, no trio.

- ``vocabulary``: the ACP vocabulary of each version, derived from the shipped official schemas.
- ``framing``: NDJSON framing that never alters a byte.
- ``wire``: the JSON-RPC envelope of one line, decoded with msgspec; any bytes give a frame.

Everything here is plain Python, tested in microseconds; the relay, the recorder and every view
build on it and must not re-derive what it computes.
"""
