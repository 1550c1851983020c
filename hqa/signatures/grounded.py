"""Evidence-grounded answering: the LM picks the answer among candidates drawn from the evidence.

At call time ``answer`` is retyped ``Literal[*candidates]`` (:func:`hqa.answering.grounded.choose`): DSPy's JSON
adapter turns that into a JSON-schema enum, which the embedded llama.cpp engine enforces as a grammar; other
adapters validate it."""

from __future__ import annotations

import dspy


class GroundedAnswer(dspy.Signature):
    """Answer the question by choosing one of the candidate answers. Each candidate is written "answer — evidence":
    the evidence is the encyclopedia sentence or knowledge-graph fact (subject relation object) the answer was found
    in. Choose the candidate whose evidence answers exactly what the question asks. Candidates are listed best-ranked
    first."""

    question: str = dspy.InputField()
    candidates: list[str] = dspy.InputField(desc="candidate answers, each as 'answer — evidence'")
    answer: str = dspy.OutputField(desc="exactly one of the candidate answers (the part before ' — ')")
