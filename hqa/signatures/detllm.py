"""Signatures of DETLLM, DIVKNOWQA's decompose–retrieve–answer system.

At each hop one call (:class:`HopQuery`) reads the question and the evidence gathered so far and writes the next
sub-question as a text search query, the entity it is about, and a Wikidata SPARQL query (or "None"); after the last
hop :class:`HopAnswer` answers from the accumulated evidence.
"""

from __future__ import annotations

import dspy


class HopQuery(dspy.Signature):
    """Break the multi-hop question into steps and plan the retrieval for the next step only. Read the evidence
    found so far: items tagged [text] are encyclopedia passages, [triples] are knowledge-graph facts written
    "subject relation object", [sparql] are knowledge-graph query results. Say what is still unknown, then write a
    short search query for the next sub-question, name the one entity it is about, and write a SPARQL query for
    Wikidata that answers the sub-question. In SPARQL use wd:Q… for entities and wdt:P… for properties (for example
    wd:Q1000 wdt:P36 ?capital); the prefixes wd:, wdt:, rdfs: are predefined; use SELECT or ASK. If you do not
    know the ids, reply "None" for the SPARQL query."""

    question: str = dspy.InputField(desc="the multi-hop question")
    context: list[str] = dspy.InputField(desc="evidence gathered so far, one '[source] text' item each; may be empty")
    hop: int = dspy.InputField(desc="the step number, starting at 1")
    rationale: str = dspy.OutputField(desc="what is known so far and what the next step must find")
    search_query: str = dspy.OutputField(desc="a short search query for the next sub-question")
    query_entity: str = dspy.OutputField(desc="the name of the entity the sub-question is about, e.g. 'Gabon'")
    sparql: str = dspy.OutputField(desc="a Wikidata SPARQL SELECT/ASK query using wd:/wdt: prefixes, or None")


class HopAnswer(dspy.Signature):
    """Answer the question using the evidence gathered step by step. Items are tagged [text] (encyclopedia
    passage), [triples] (knowledge-graph fact: subject relation object) or [sparql] (knowledge-graph query result).
    Reply with a short answer only: an entity name, a date, a number, or yes/no. No explanation."""

    question: str = dspy.InputField()
    context: list[str] = dspy.InputField(desc="evidence gathered over all steps, one '[source] text' item each")
    answer: str = dspy.OutputField(desc="short answer, e.g. 'Ali Bongo Ondimba'")


__all__ = ["HopQuery", "HopAnswer"]
