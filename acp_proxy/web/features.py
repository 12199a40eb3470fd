"""The inspector's feature routes beyond the core pages: the list ``plugin`` registers.

Owns: ``routes`` (every feature's routes, each view bound to the plugin's ``Doors``). The
features live in their own modules — ``playhead`` (a run's conversation stepped frame by frame),
``session_panel``, ``search`` (runs and frames across runs), ``actions`` (marks and live control,
behind the token and CSRF), ``controls_view`` (a run's recorded ctl actions).

Must not know: SQL, the fold, click; what a feature shows (its module's business).
"""

from __future__ import annotations

from acp_proxy.web import actions, controls_view, frame_diff, frame_marks, playhead, search, session_panel
from acp_proxy.web.doors import Doors, Handler, bind


def routes(doors: Doors) -> list[tuple[str, Handler]]:
    found: list[tuple[str, Handler]] = []
    for module in (playhead, session_panel, search, frame_marks, frame_diff, actions, controls_view):
        found += [(pattern, bind(doors, view)) for pattern, view in module.ROUTES]
    return found
