"""Two recordings compared: what ``acp-proxy diff``, the MCP ``diff`` tool and the inspector's
diff page all show.

Owns: resolving both sides, folding each (masked first, with its runs' end state) and comparing
them, around the turns (initialize, set-up calls, errors, unanswered requests) and per turn, once.
What counts as a difference is ``read/diff.py``'s.

Must not know: click, rich, HTTP, MCP. Never writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from acp_proxy.protocol.redact import Redactor
from acp_proxy.read import conversation, queries
from acp_proxy.read import diff as df
from acp_proxy.read import fold as fd
from acp_proxy.read.queries import Ref


@dataclass(frozen=True)
class Side:
    text: str
    """The reference as given."""
    ref: Ref
    conversations: list[fd.Conversation]

    def describe(self) -> str:
        return self.ref.describe()


@dataclass(frozen=True)
class Comparison:
    left: Side
    right: Side
    connection: df.ConnectionDiff
    """Outside the turns."""
    turns: list[df.TurnDiff]
    redactor: Redactor | None = None

    @property
    def differ(self) -> bool:
        return df.any_difference(self.turns, self.connection)

    def connection_json(self) -> dict[str, Any]:
        return dict(self._masked(self.connection.as_json()))

    def turns_json(self) -> list[dict[str, Any]]:
        return [self._masked(t.as_json()) for t in self.turns]

    def as_json(self) -> dict[str, Any]:
        """Both sides, whether they differ, and what differs (``diff --json``)."""
        return {
            "left": self.left.describe(),
            "right": self.right.describe(),
            "differ": self.differ,
            "connection": self.connection_json(),
            "turns": self.turns_json(),
        }

    def _masked(self, value: Any) -> Any:
        # Frames were masked before the fold; a secret learnt late may sit earlier in a value.
        return self.redactor.value(value) if self.redactor is not None and self.redactor.enabled else value


def side(db: Any, text: str, redactor: Redactor | None = None) -> Side:
    """One side: the REF ``text`` resolved (``queries.RefError`` when it names nothing) and folded."""
    ref = queries.resolve(db, text)
    return Side(text, ref, conversation.conversations(db, ref, redactor).conversations)


def compare(db: Any, left: str, right: str, redactor: Redactor | None = None) -> Comparison:
    a, b = side(db, left, redactor), side(db, right, redactor)
    return Comparison(
        a,
        b,
        df.diff_connection(a.conversations, b.conversations),
        df.diff_conversations(a.conversations, b.conversations),
        redactor,
    )
