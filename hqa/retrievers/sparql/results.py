"""SPARQL results as the programs show them: HumanIQ's RunSparql observation and one evidence item per row."""

from __future__ import annotations

from hqa.data import wikidata as W
from hqa.retrievers.base import Evidence, SparqlResult


QUERY_FAILED = "The given query failed, please reconstruct your query and try again."
UNREACHABLE = "That query failed. Perhaps you could try a different one?"


def humaniq_observation(result: SparqlResult) -> str:
    """HumanIQ's RunSparql observation (NIMI-research/Hybrid-QA ``SparqlTool.run_sparql``; the late-fusion logs show
    it): ``{'message': True}`` / ``{'message': False}`` for ASK; ``{'message': [...]}`` with ``{'value': v}`` for a
    row that binds ``?x1`` and the row's full binding (``{'var': {'type': 'uri'|'literal', 'value': v}}``) otherwise;
    ``{'message': QUERY_FAILED}`` for an empty result or a failing query (the authors' code lands every failure
    there: the endpoint's error page is not JSON).  An endpoint that could not be reached at all gives its
    ``UNREACHABLE`` answer to a non-200 reply, followed by the reason in parentheses (hqa's: an outage or a replay
    miss is never silent).  hqa keeps no ``datatype`` (see :class:`SparqlResult`)."""
    if result.error:
        return f"{UNREACHABLE} ({result.error})" if result.unavailable else str({"message": QUERY_FAILED})
    if result.boolean is not None:
        return str({"message": bool(result.boolean)})
    if not result.rows:
        return str({"message": QUERY_FAILED})
    return str({"message": [{"value": row["x1"]} if row.get("x1") is not None else
                            {var: {"type": "uri" if str(value).startswith(("http://", "https://")) else "literal",
                                   "value": value} for var, value in row.items()} for row in result.rows]})


def rows_as_evidence(result: SparqlResult, labels: dict[str, str] | None = None) -> list[Evidence]:
    """One Evidence per result row (source ``sparql``), with IRIs shown as ``label (Qid)`` where known."""
    labels = labels or {}
    if result.error:
        return []
    if result.boolean is not None:
        return [Evidence(text="yes" if result.boolean else "no", source="sparql", score=1.0, meta={"query": result.query})]

    def shown(value: str) -> str:
        lid = W.local_id(value)
        return f"{labels[lid]} ({lid})" if lid and lid in labels else (lid or value)

    return [Evidence(text=", ".join(f"{var}={shown(value)}" for var, value in row.items()), source="sparql", score=1.0,
                     meta={"query": result.query, "row": row}) for row in result.rows]


__all__ = ["QUERY_FAILED", "UNREACHABLE", "humaniq_observation", "rows_as_evidence"]
