"""The web inspector behind ``acp-proxy ui``: a Datasette plugin (``plugin.py``, registered on
Datasette's entry point, so ``datasette acp-proxy.db`` shows the same pages), the ``ui`` command
(``command.py``), the page data as plain dicts (``model.py``, the one adapter between the
recording and the pages), the request guard (``guard.py``) and the page assets.

Importing this package imports nothing else: ``acp-proxy ui`` must be able to say, in one line,
that Datasette is missing.
"""
