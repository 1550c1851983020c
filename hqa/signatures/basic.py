"""Signatures shared by the baselines and the first hybrid program."""

from __future__ import annotations

import dspy


class ClosedBookAnswer(dspy.Signature):
    """Answer the question from your own knowledge. Reply with a short answer only: an entity name, a date, a
    number, or yes/no. No explanation."""

    question: str = dspy.InputField()
    answer: str = dspy.OutputField(desc="short answer, e.g. 'Guillermo del Toro'")


class EvidenceAnswer(dspy.Signature):
    """Answer the question using the evidence. Items are tagged [text] (encyclopedia passage), [triples]
    (knowledge-graph fact: subject relation object) or [sparql] (knowledge-graph query result). If the evidence does
    not contain the answer, fall back to the parametric answer. Reply with a short answer only."""

    question: str = dspy.InputField()
    evidence: list[str] = dspy.InputField(desc="retrieved items, each tagged with its source")
    parametric_answer: str = dspy.InputField(desc="the answer given from memory, without evidence")
    answer: str = dspy.OutputField(desc="short answer")
