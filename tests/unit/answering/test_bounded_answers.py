"""Bounded free text: with the embedded small LM, an answer is cut to its first sentence and stopped where it starts
repeating itself (DETLLM once answered with over 1,000 characters of one repeated sentence); remote LMs keep theirs.
The one place this happens is :func:`hqa.scoring.answers.clean_answer`."""

from __future__ import annotations

import dspy
import pytest
from dspy.utils import DummyLM

from hqa.programs import build_program
from hqa.scoring.answers import MAX_ANSWER_WORDS, bound_text, clean_answer

LOOP = "Guillermo del Toro directed The Shape of Water. " * 25  # 1,200 characters of one sentence
EMBEDDED = "local/SmolLM2-135M-Instruct-Q8_0"  # what build_lm names the embedded model


@pytest.mark.parametrize("text,bounded", [
    (LOOP, "Guillermo del Toro directed The Shape of Water"),
    ("Guillermo del Toro directed it\nGuillermo del Toro directed it", "Guillermo del Toro directed it"),
    ("the film was directed by the film was directed by the film was directed by", "the film was directed by"),
    ("Guillermo del Toro, Guillermo del Toro, Guillermo del Toro", "Guillermo del Toro"),
    ("Paris Paris Paris Paris", "Paris"),
    ("J. R. R. Tolkien wrote it. He was British.", "J. R. R. Tolkien wrote it"),
    ("Mr. Smith went to Washington. Then he left.", "Mr. Smith went to Washington"),
    ("It cost 3.5 million dollars! More.", "It cost 3.5 million dollars"),
    ("Washington, D.C. is the capital", "Washington, D.C. is the capital"),
    ("New York New York", "New York New York"),  # a name said twice is not a loop
    ("Talk Talk", "Talk Talk"),
    ("Born in 1990. Died in 2000.", "Born in 1990"),
])
def test_bound_text(text, bounded):
    assert bound_text(text) == bounded


def test_a_long_sentence_without_a_loop_is_cut_at_the_word_bound():
    words = [f"w{i}" for i in range(500)]
    assert bound_text(" ".join(words)) == " ".join(words[:MAX_ANSWER_WORDS])


def _lm(answer: str, model: str) -> DummyLM:
    lm = DummyLM([{"answer": answer}] * 4)
    lm.model = model
    return lm


def test_clean_answer_bounds_only_the_embedded_models_answers():
    with dspy.context(lm=_lm("x", EMBEDDED)):
        assert clean_answer(LOOP) == "Guillermo del Toro directed The Shape of Water"
    with dspy.context(lm=_lm("x", "openai/gpt-4o-mini")):
        assert clean_answer(LOOP) == LOOP.strip().rstrip(".")  # a remote LM's answer is kept as written
    assert clean_answer(LOOP, bounded=True) == "Guillermo del Toro directed The Shape of Water"


@pytest.mark.parametrize("name", ["closedbook", "cot"])
def test_closed_book_answers_of_the_embedded_model_are_one_sentence(name):
    answer = LOOP
    reply = {"answer": answer, "reasoning": "r"} if name == "cot" else {"answer": answer}
    lm = DummyLM([reply] * 2)
    lm.model = EMBEDDED
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        pred = build_program(name)(question="Who directed The Shape of Water?")
    assert pred.answer == "Guillermo del Toro directed The Shape of Water"
    assert pred.trace["answers"]["final"] == pred.answer
