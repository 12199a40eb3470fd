"""The sans-IO protocol core: bytes and frames in, typed facts out. No I/O, no SQL, no trio.

- ``vocabulary``: the ACP vocabulary of each version, derived from the shipped official schemas.
- ``framing``: NDJSON framing that never alters a byte.
- ``wire``: the JSON-RPC envelope of one line, decoded with msgspec; any bytes give a frame.
- ``state`` (with ``transitions``, ``payloads``) and ``events``: what a frame means — pairing,
  versions, sessions, replay windows, prompt turns, which turn a frame belongs to (``turn_of``)
  and each turn's first output (``TurnOutput``).
- ``output``: the one vocabulary of the agent's output, chunks and tool calls.
- ``rows``: the one rows-to-events adapter for every view that reads the database.
- ``tracker``: the recorder's rows from the events.

Everything here is plain Python, tested in microseconds; the relay, the recorder and every view
build on it and must not re-derive what it computes.
"""
