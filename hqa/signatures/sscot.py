"""Signatures of the Semi-Structured Chain-of-Thought program (Su et al. 2023)."""

from __future__ import annotations

import dspy


class ParseChain(dspy.Signature):
    """Break the question into a chain of knowledge-graph triples (head, relation, tail), separated by ';'.
    Write every unknown entity or value as a mask #1, #2, ... numbered from #1 in order of first use. Each triple
    must have a mask as its head or its tail; the relation is always a known Wikidata-style property, never a
    mask. Use no more masks than triples. The highest-numbered mask is the answer.
    Example — question: "Who was president of the US in the year Citibank was founded?" chain:
    (Citibank, inception, #1); (#2, position held, President of the United States); (#2, start time, #1)"""

    question: str = dspy.InputField()
    chain: str = dspy.OutputField(desc="triples like (Gabon, capital, #1); (#1, population, #2)")


class ReadHop(dspy.Signature):
    """Answer the question using only the passages. Reply with a short answer only: an entity name, a date, a
    number, or yes/no. If the passages do not contain the answer, reply exactly: unknown."""

    question: str = dspy.InputField()
    passages: list[str] = dspy.InputField(desc="retrieved encyclopedia passages")
    answer: str = dspy.OutputField(desc="short answer, or 'unknown'")


class RecallHop(dspy.Signature):
    """Answer the question from your own knowledge. Reply with a short answer only: an entity name, a date, a
    number, or yes/no. No explanation."""

    question: str = dspy.InputField()
    answer: str = dspy.OutputField(desc="short answer")


class ChainAnswer(dspy.Signature):
    """Answer the question using the chain of facts gathered for it. Each fact is (head, relation, tail); an
    unknown that could not be resolved is still written as #n. The last facts usually hold the answer; where the
    chain is incomplete, use your own knowledge. Reply with a short answer only."""

    question: str = dspy.InputField()
    filled_chain: list[str] = dspy.InputField(desc="facts (head, relation, tail), masks replaced by found values")
    answer: str = dspy.OutputField(desc="short answer")


__all__ = ["ParseChain", "ReadHop", "RecallHop", "ChainAnswer"]
