"""The embedded engine's prompt-prefix KV cache: same greedy outputs, fewer prompt tokens evaluated, bounded size."""

from __future__ import annotations

import dspy
import pytest

from hqa.lm.models import LlamaCppEngine
from hqa.signatures.basic import ClosedBookAnswer, EvidenceAnswer

QUESTIONS = [("Who is the author of Animal Farm?", "[text] George Orwell wrote Animal Farm in 1945."),
             ("What is the capital of Gabon?", "[triples] Gabon capital Libreville"),
             ("Who directed Alien?", "[text] Alien is a 1979 film directed by Ridley Scott.")]


def _run(engine: LlamaCppEngine) -> list[str]:
    """Two predictors alternating, as the programs call them: the one-slot reuse of llama.cpp loses each prefix."""
    lm = dspy.LM("local/smollm2", engine=engine, cache=False, temperature=0.0, max_tokens=24)
    out = []
    with dspy.context(lm=lm, adapter=dspy.JSONAdapter()):
        closed, grounded = dspy.Predict(ClosedBookAnswer), dspy.Predict(EvidenceAnswer)
        for question, evidence in QUESTIONS:
            out.append(closed(question=question).answer)
            out.append(grounded(question=question, evidence=[evidence], parametric_answer=out[-1]).answer)
    return out


@pytest.mark.real_lm
def test_greedy_outputs_are_identical_with_fewer_prompt_tokens_evaluated():
    off = LlamaCppEngine(n_threads=1, prompt_cache_mb=0)
    on = LlamaCppEngine(n_threads=1, prompt_cache_mb=64)
    try:
        plain, cached = _run(off), _run(on)
    finally:
        off.close()
        on.close()
    assert cached == plain and len(plain) == 6
    assert on.stats["prompt_tokens"] == off.stats["prompt_tokens"]
    assert on.stats["restored"] == 4  # every call after the first of each predictor restores its prefix
    # the instructions of each predictor (~170 tokens) are evaluated once instead of three times
    assert on.stats["evaluated"] < 0.6 * off.stats["evaluated"]
    assert on.stats["reused"] - off.stats["reused"] >= 4 * 150
    calls = list(on.history)
    assert [c.prompt_tokens for c in calls] == [c.prompt_tokens for c in off.history]
    assert all(c.reused + c.evaluated == c.prompt_tokens for c in calls)
    assert all(c.reused >= 150 for c in calls[2:])


# -- states kept on disk for the next process ------------------------------------------------------------------------
CHILD = """
import json, sys
import dspy
from hqa.lm.models import LlamaCppEngine
from hqa.signatures.basic import ClosedBookAnswer
engine = LlamaCppEngine(n_threads=1, prompt_cache_mb=64, prompt_states_mb=64, prompt_states_dir=sys.argv[1])
lm = dspy.LM("local/smollm2", engine=engine, cache=False, temperature=0.0, max_tokens=16)
with dspy.context(lm=lm, adapter=dspy.JSONAdapter()):
    answer = dspy.Predict(ClosedBookAnswer)(question=sys.argv[2]).answer
print(json.dumps({"answer": answer, "stats": engine.stats}))
"""


def _closed_book(engine: LlamaCppEngine, question: str) -> str:
    lm = dspy.LM("local/smollm2", engine=engine, cache=False, temperature=0.0, max_tokens=16)
    with dspy.context(lm=lm, adapter=dspy.JSONAdapter()):
        return dspy.Predict(ClosedBookAnswer)(question=question).answer


@pytest.mark.real_lm
def test_a_new_process_restores_the_prefix_an_earlier_one_left_on_disk(tmp_path):
    """A first process writes its predictor's state; a later one (here: another process, then this one with a fresh
    engine) restores the shared instructions and evaluates only the new question — same greedy answer as without
    any cache.  A state that fails its checksum is dropped and the prompt evaluated in full, answer unchanged."""
    import json
    import subprocess
    import sys

    states = tmp_path / "states"
    first = subprocess.run([sys.executable, "-c", CHILD, str(states), QUESTIONS[0][0]], capture_output=True,
                           text=True, check=True)
    child = json.loads(first.stdout.strip().splitlines()[-1])
    assert child["stats"]["restored"] == 0 and child["stats"]["evaluated"] == child["stats"]["prompt_tokens"]
    files = list(states.glob("*/*.state"))
    assert len(files) == 1

    question = QUESTIONS[1][0]
    off = LlamaCppEngine(n_threads=1, prompt_cache_mb=0)
    warm = LlamaCppEngine(n_threads=1, prompt_cache_mb=64, prompt_states_mb=64, prompt_states_dir=states)
    try:
        plain = _closed_book(off, question)
        assert _closed_book(warm, question) == plain
        assert warm.stats["restored"] == 1 and warm.stats["prompt_tokens"] == off.stats["prompt_tokens"]
        assert warm.stats["reused"] >= 0.7 * warm.stats["prompt_tokens"]
        assert warm.stats["evaluated"] < 0.3 * off.stats["evaluated"]
    finally:
        warm.close()
    # this call shared most of its tokens with the stored state: not written again
    assert list(states.glob("*/*.state")) == files

    raw = bytearray(files[0].read_bytes())
    raw[-1] ^= 0xFF
    files[0].write_bytes(bytes(raw))
    cold = LlamaCppEngine(n_threads=1, prompt_cache_mb=64, prompt_states_mb=64, prompt_states_dir=states)
    try:
        assert _closed_book(cold, question) == plain
        assert cold.stats["restored"] == 0 and cold.stats["evaluated"] == off.stats["evaluated"]
    finally:
        cold.close()
        off.close()
    assert not files[0].exists()  # the corrupt state is gone; the call's own state replaced it
    assert len(list(states.glob("*/*.state"))) == 1
