"""The item every retriever returns.

Retrievers are plain callables held *outside* DSPy modules' deep-copied state: programs reach them through a
:class:`hqa.retrievers.registry.Toolbox` looked up at call time, so ``program.deepcopy()`` (which every optimizer does)
never copies an index.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

SOURCES = ("text", "triples", "sparql", "parametric")


@dataclass
class Evidence:
    """One retrieved item.

    ``source`` is ``text`` (a passage), ``triples`` (a linearized KG triple found by BM25), ``sparql`` (a row
    returned by a SPARQL query) or ``parametric`` (the LM's own answer).  ``meta`` carries provenance: passage id and
    title, triple subject/predicate/object ids, the SPARQL query, the pack sources a fact came from.
    """

    text: str
    source: str
    score: float = 0.0
    meta: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def render(self) -> str:
        """The line an LM sees: ``[source] text``."""
        title = self.meta.get("title")
        body = f"{title}: {self.text}" if title and not self.text.startswith(str(title)) else self.text
        return f"[{self.source}] {body}"
