"""Remote ACP: the relay for agents reached over Streamable HTTP and WebSocket (``acp-proxy serve``).

A neighbour of ``relay/stdio.py``: the same journal-first recording (``record/journal.py``, the
recorder process that follows it), a different wire. ``shapes`` holds what is plain (headers,
SSE event boundaries, masking, names); ``runs`` one client connection's recording; ``server``
the ASGI application, the upstream connections and serving it under hypercorn's trio worker;
``faults`` the fault rules carried out on the remote wire.
"""
