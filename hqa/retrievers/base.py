"""The items retrievers return and the kinds of part a toolbox holds, as protocols (haystack-style retriever
interfaces), each with an absent implementation: a part a world does not have answers empty with the reason as its
error, never a crash and never another world's data.

Retrievers are plain callables held *outside* DSPy modules' deep-copied state: programs reach them through a
:class:`hqa.toolbox.Toolbox`, so ``program.deepcopy()`` (which every optimizer does) never copies an index.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, runtime_checkable

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
        """``dataclasses.asdict(self)``, built directly: the same dict (``meta`` copied as deep), without asdict's
        generic walk, which held the GIL in a fifth of the ``py-spy --gil`` samples of DETLLM at 64 concurrent
        questions (its traces keep every passage and triple of every hop; issue 38, docs/benchmarks.md)."""
        return {"text": self.text, "source": self.source, "score": self.score, "meta": _copy_plain(self.meta)}

    def render(self) -> str:
        """The line an LM sees: ``[source] text``."""
        title = self.meta.get("title")
        body = f"{title}: {self.text}" if title and not self.text.startswith(str(title)) else self.text
        return f"[{self.source}] {body}"


def _copy_plain(value: Any) -> Any:
    """A deep copy of ``value`` as ``dataclasses.asdict`` makes it for a field's value: JSON-like values (the
    ``meta`` of every retriever) copied directly, anything else through asdict's own copy."""
    kind = type(value)
    if kind is dict:
        return {k: _copy_plain(v) for k, v in value.items()}
    if kind is list:
        return [_copy_plain(v) for v in value]
    if kind is tuple:
        return tuple(_copy_plain(v) for v in value)
    if kind in (str, int, float, bool) or value is None:
        return value
    return asdict(_Wrapped(value))["value"]


@dataclass
class _Wrapped:
    value: Any


class Hits(list):
    """Evidence found, plus ``error``: why the source could not answer (an outage is never a silent empty list)."""

    error: str | None = None

    def __init__(self, items: Sequence = (), error: str | None = None):
        super().__init__(items)
        self.error = error


@dataclass
class SparqlResult:
    """What a query returned: rows of ``{variable: value}`` (IRIs as strings), or a boolean, or an error."""

    query: str
    rows: list[dict[str, str]] = field(default_factory=list)
    boolean: bool | None = None
    error: str | None = None
    truncated: bool = False
    elapsed_ms: float = 0.0
    variables: list[str] = field(default_factory=list)
    unavailable: bool = False  # the endpoint could not be reached/used: an infrastructure fault, not the query's

    @property
    def ok(self) -> bool:
        return self.error is None

    def values(self) -> list[str]:
        """All bound values, row by row, in projection order."""
        if self.boolean is not None:
            return ["yes" if self.boolean else "no"]
        return [row[v] for row in self.rows for v in (self.variables or list(row)) if v in row]

    def to_dict(self) -> dict[str, Any]:
        return {"query": self.query, "rows": self.rows, "boolean": self.boolean, "error": self.error,
                "truncated": self.truncated, "elapsed_ms": round(self.elapsed_ms, 2),
                **({"unavailable": True} if self.unavailable else {})}


@runtime_checkable
class PassageSearch(Protocol):
    """Text retrieval: ``search(query, k)`` → passages (``source="text"``, meta ``id`` / ``title``), a :class:`Hits`
    with ``error`` set when the source could not answer."""

    def __call__(self, query: str, k: int = 5) -> list[Evidence]: ...

    def search_many(self, queries: Sequence[str], k: int = 5) -> list[list[Evidence]]: ...


@runtime_checkable
class VectorPassageSearch(PassageSearch, Protocol):
    """A dense passage index that shows its vectors: the query vectors it computes and the stored passage vectors
    (by passage id), on the embedder ``embedder_key``."""

    embedder_key: str

    def embed_queries(self, queries: Sequence[str]) -> Any: ...

    def search_vectors(self, qv: Any, k: int = 5) -> list[list[Evidence]]: ...

    def vectors(self, ids: Sequence[str]) -> Any: ...


@runtime_checkable
class VectorReranker(Protocol):
    """A reranker that takes vectors already computed for texts (a bi-encoder on ``embedder_key``)."""

    kind: str
    embedder_key: str

    def add_vectors(self, texts: Sequence[str], vectors: Any) -> None: ...


@runtime_checkable
class TripleSearch(Protocol):
    """The KG: read-only SPARQL (``run`` → :class:`SparqlResult`, errors as the result's ``error``), labels of
    Wikidata ids, and ``ping`` (raises when the store is unusable)."""

    def run(self, query: str) -> SparqlResult: ...

    def labels(self, ids: list[str]) -> dict[str, str]: ...

    def ping(self) -> None: ...


@runtime_checkable
class Linker(Protocol):
    """Entity linking: a mention → ranked candidates (disambiguated by the question), the mentions spotted in a
    question, labels of ids, and a Wikipedia page title → its QID."""

    def link(self, mention: str, question: str | None = None, k: int = 5) -> list: ...

    def spot(self, question: str, k: int = 5, mode: str = "default") -> list: ...

    def labels(self, ids: list[str]) -> dict[str, str]: ...

    def label(self, qid: str) -> str | None: ...

    def title_to_qid(self, title: str) -> str | None: ...


class AbsentPassages:
    """No passages: every search answers an empty :class:`Hits` whose error is ``reason``."""

    def __init__(self, reason: str):
        self.reason = reason

    def __call__(self, query: str, k: int = 5) -> Hits:
        return Hits(error=self.reason)

    def search_many(self, queries: Sequence[str], k: int = 5) -> list[Hits]:
        return [self(q, k) for q in queries]


class AbsentTriples:
    """No KG: every query answers a :class:`SparqlResult` whose error is ``reason``; no labels; usable (``ping``)."""

    def __init__(self, reason: str):
        self.reason = reason

    def run(self, query: str) -> SparqlResult:
        return SparqlResult(query=query, error=self.reason)

    def labels(self, ids: list[str]) -> dict[str, str]:
        return {}

    def ping(self) -> None:
        return None


class AbsentLinker:
    """No labels to link with: no candidates, no labels, no page titles, no entities."""

    def __init__(self, reason: str):
        self.reason = reason
        self.entities: dict = {}

    def link(self, mention: str, question: str | None = None, k: int = 5) -> list:
        return []

    def spot(self, question: str, k: int = 5, mode: str = "default") -> list:
        return []

    def labels(self, ids: list[str]) -> dict[str, str]:
        return {}

    def label(self, qid: str) -> None:
        return None

    def title_to_qid(self, title: str) -> None:
        return None


__all__ = ["AbsentLinker", "AbsentPassages", "AbsentTriples", "Evidence", "Hits", "Linker", "PassageSearch",
           "SOURCES", "SparqlResult", "TripleSearch", "VectorPassageSearch", "VectorReranker"]
