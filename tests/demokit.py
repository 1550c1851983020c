"""Demo-leakage checks shared by the leakage tests: the benchmarks with human demos, the questions a compiled
program's demos show, a question as another dataset may spell it, and the assertion that no dev question leaked."""

from __future__ import annotations

import dspy
from conftest import predictor_states

from hqa.data.datasets import question_key

HUMAN = ("mintaka", "qald", "compmix")


def assert_no_leak(program, dev):
    keys = {question_key(ex.question) for ex in dev}
    shown = demo_questions(program)
    assert shown, "the program has no demos: nothing was checked"
    leaked = sorted({q for q in shown if question_key(q) in keys})
    assert not leaked, f"dev questions among the demos: {leaked}"


def demo_questions(program) -> list[str]:
    return [d["question"] for s in predictor_states(program).values() for d in s["demos"] if "question" in d]


def variant(ex, i: int):
    """The same question as another dataset may spell it: other case and spacing."""
    q = ex.question.upper() if i % 2 else ex.question.replace(" ", "  ").lower()
    return dspy.Example(**{**ex.toDict(), "question": q, "id": f"variant-{i}"}).with_inputs("question")

