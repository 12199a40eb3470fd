"""The read layer: every answer the doors show, computed once, between the database and them.

The CLI, the MCP server and the inspector only render what these modules compute, as plain data:
``queries`` (references, runs, sessions, the SQL of the query commands), ``frames`` (frame
selections by the filter language, masked before the filter reads them, keyset-paged with a
total), ``conversation`` (the fold, with the runs' end state), ``compare`` (diff), ``conformance``
(check), ``stats``, ``faults`` (faults applied, findings stored), ``insights`` (a summary with
hot spot, long tail, outliers and errors; session set-up; sessions by client; request/response
pairs). When masking is on, the one ``Redactor`` masks the frames before anything is matched,
folded or compared.

Must not know: click, rich, HTTP, MCP. Never writes: every connection it gets is read-only.
"""
