"""Closed-book baselines: the LM's parametric memory only (Predict, or ChainOfThought with ``cot=True``).

``demos`` picks the exemplars the prompt starts with:

* ``"none"`` (default): zero-shot — HumanIQ's vanilla-LM rows give the LM the question alone (HumanIQ RQ2, the
  human evaluation's "exactly the question as input");
* ``"sscot"``: SS-CoT's baselines of Tables 1-2.  ``closedbook`` is the "Standard" row with the exemplars of SS-CoT
  Table 5 (3 printed; the paper used 25 on 2Wiki/MuSiQue and 4 on Bamboogle, Appendix D/F); ``cot`` gets the same
  three questions with a rationale.  SS-CoT prints no CoT exemplars (its CoT row is quoted from Shao et al. 2023),
  so those rationales are hqa's, written from the facts of Table 4's filled chains for the same questions
  (``hqa/data/sscot/table5_exemplars.json`` says which is which).

A compiled program's demos (``hqa compile``) replace these.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Literal

import dspy

from hqa.scoring.answers import clean_answer
from hqa.programs.arguments import Arguments, arg
from hqa.programs.base import Program
from hqa.lm.calls import safe_predict
from hqa.signatures.basic import ClosedBookAnswer
from hqa.schemas.trace import new_trace

DEMO_SETS = ("none", "sscot")
TABLE5 = "table5_exemplars.json"


def sscot_baseline_demos(cot: bool) -> list[dspy.Example]:
    """SS-CoT Table 5's standard exemplars (question → answer), or with ``cot`` the CoT set (question → reasoning,
    answer)."""
    data = json.loads(resources.files("hqa.data").joinpath("sscot", TABLE5).read_text(encoding="utf-8"))
    return [dspy.Example(**rec).with_inputs("question") for rec in data["cot" if cot else "standard"]]


class ClosedBookArguments(Arguments):
    """:class:`ClosedBook`'s arguments: chain of thought (set by the CLI name: ``cot``), SS-CoT Table 5's demos."""

    cot: bool = arg(False)
    demos: Literal[DEMO_SETS] = arg("none")  # type: ignore[valid-type]


class ClosedBook(Program):
    Arguments = ClosedBookArguments
    fixed_kwargs = {"closedbook": {"cot": False}, "cot": {"cot": True}}

    def __init__(self, cot: bool = False, demos: str = "none"):
        super().__init__()
        self.take_arguments(locals())
        self.cot = cot
        self.generate = dspy.ChainOfThought(ClosedBookAnswer) if cot else dspy.Predict(ClosedBookAnswer)
        if demos == "sscot":
            for _, predictor in self.named_predictors():
                predictor.demos = sscot_baseline_demos(cot)

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
