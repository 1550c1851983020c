"""Signatures of DETLLM, DIVKNOWQA's decompose–retrieve–answer system (DIVKNOWQA §3.1, Appendix A.3 Prompts 3-5).

At each hop one call (:class:`HopQuery`, Prompts 3-4) reads the question and the evidence gathered so far, reasons
step by step (``rationale``) and writes the next single-hop question as a search query, the entity it is about, and
a Wikidata SPARQL query (or "None"); after the last hop :class:`HopAnswer` (Prompt 5) reasons step by step over the
accumulated evidence and gives a short answer.  Both carry the rationale field the paper's prompts carry; the
instructions are hqa's own wording.
"""

from __future__ import annotations

import dspy

#: the rationale field of both signatures: the step-by-step reasoning DIVKNOWQA's prompts ask for before the outputs
RATIONALE_DESC = ("think step by step: what the context has established so far and what the next single-hop "
                  "question must find")


class HopQuery(dspy.Signature):
    """Break the multi-hop question into single-hop questions and plan the retrieval for the next one only. Read
    the evidence found so far: items tagged [text] are encyclopedia passages, [triples] are knowledge-graph facts
    written "subject relation object", [sparql] are knowledge-graph query results. Think step by step about what is
    known and what is still missing, then write a simple search question for the missing information, name the one
    entity it is about, and write a SPARQL query for Wikidata that answers it. In SPARQL use wd:Q… for entities and
    wdt:P… for properties (for example wd:Q1000 wdt:P36 ?capital); the prefixes wd:, wdt:, rdfs: are predefined;
    use SELECT or ASK. If you do not know the ids, reply "None" for the SPARQL query."""

    question: str = dspy.InputField(desc="the multi-hop question")
    context: list[str] = dspy.InputField(desc="evidence gathered so far, one '[source] text' item each; may be empty")
    hop: int = dspy.InputField(desc="the step number, starting at 1")
    rationale: str = dspy.OutputField(desc=RATIONALE_DESC)
    search_query: str = dspy.OutputField(desc="a simple single-hop question seeking the missing information")
    query_entity: str = dspy.OutputField(desc="the name of the entity the search query is about, e.g. 'Gabon'")
    sparql: str = dspy.OutputField(desc="a Wikidata SPARQL SELECT/ASK query using wd:/wdt: prefixes, or None")


class HopAnswer(dspy.Signature):
    """Answer the question using the evidence gathered step by step. Items are tagged [text] (encyclopedia
    passage), [triples] (knowledge-graph fact: subject relation object) or [sparql] (knowledge-graph query result).
    First deduce the answer step by step, then give a short factoid answer: an entity name, a date, a number, or
    yes/no."""

    question: str = dspy.InputField()
    context: list[str] = dspy.InputField(desc="evidence gathered over all steps, one '[source] text' item each")
    rationale: str = dspy.OutputField(desc="a step-by-step deduction that identifies the answer")
    answer: str = dspy.OutputField(desc="a short factoid answer, often 1 to 5 words, e.g. 'Ali Bongo Ondimba'")


__all__ = ["HopQuery", "HopAnswer", "RATIONALE_DESC"]
