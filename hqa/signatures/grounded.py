"""Evidence-grounded answering: the LM picks the answer among candidates drawn from the evidence.

At call time ``answer`` is retyped ``Literal[*candidates]`` (:func:`hqa.programs.grounded.choose`): DSPy's JSON
adapter turns that into a JSON-schema enum, which the embedded llama.cpp engine enforces as a grammar; other
adapters validate it."""

from __future__ import annotations

import dspy


class GroundedAnswer(dspy.Signature):
    """Answer the question by choosing one of the candidates. The candidates were taken from the evidence: items are
    tagged [text] (encyclopedia passage), [triples] (knowledge-graph fact: subject relation object) or [sparql]
    (knowledge-graph query result). Choose the candidate the evidence gives as the answer to the question."""

    question: str = dspy.InputField()
    evidence: list[str] = dspy.InputField(desc="retrieved items, each tagged with its source")
    parametric_answer: str = dspy.InputField(desc="the answer given from memory, without evidence")
    candidates: list[str] = dspy.InputField(desc="possible answers found in the evidence")
    answer: str = dspy.OutputField(desc="exactly one of the candidates")

