"""Closed-book baselines: the LM's parametric memory only (Predict, or ChainOfThought with ``cot=True``)."""

from __future__ import annotations

import dspy

from hqa.answers import clean_answer
from hqa.programs import Program
from hqa.programs.common import safe_predict
from hqa.signatures.basic import ClosedBookAnswer
from hqa.trace import new_trace


class ClosedBook(Program):
    fixed_kwargs = {"closedbook": {"cot": False}, "cot": {"cot": True}}

    def __init__(self, cot: bool = False):
        super().__init__()
        self.cot = cot
        self.generate = dspy.ChainOfThought(ClosedBookAnswer) if cot else dspy.Predict(ClosedBookAnswer)

    def forward(self, question: str) -> dspy.Prediction:
        trace = new_trace("cot" if self.cot else "closedbook", question)
        out, error = safe_predict(self.generate, question=question)
        trace.note(error)
        answer = clean_answer(out.answer) if out is not None else ""
        step = {"step": "parametric", "answer": answer}
        if self.cot and out is not None:
            step["reasoning"] = getattr(out, "reasoning", "")
        trace.steps.append(step)
        trace.answers.parametric = trace.answers.final = answer
        return dspy.Prediction(answer=answer, trace=trace.to_dict())
