"""The embedded engine's prompt-prefix KV cache: same greedy outputs, fewer prompt tokens evaluated, bounded size."""

from __future__ import annotations

import pickle
from pathlib import Path

import dspy
import numpy as np
import pytest
from llama_cpp.llama import LlamaState

from hqa.config import load_settings
from hqa.errors import ConfigError
from hqa.lm import LlamaCppEngine, build_lm
from hqa.lm_cache import PrefixCache, common_prefix
from hqa.signatures.basic import ClosedBookAnswer, EvidenceAnswer

NOFILE = Path("/nonexistent-hqa.toml")
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


def _state(n_bytes: int, tokens: list[int]) -> LlamaState:
    return LlamaState(input_ids=np.asarray(tokens, dtype=np.intc), scores=np.empty((0, 4), dtype=np.single),
                      n_tokens=len(tokens), llama_state=b"\0" * n_bytes, llama_state_size=n_bytes, seed=0)


def test_prefix_cache_lookup_eviction_and_superseded_states():
    cache = PrefixCache(capacity_bytes=300, min_prefix=4)
    a = list(range(100, 120))
    b = list(range(200, 230))
    cache[a] = _state(100, a)
    cache[b] = _state(100, b)
    assert cache[a[:10] + [7, 7]].input_ids.tolist() == a  # longest shared prefix wins
    with pytest.raises(KeyError):
        cache[a[:3] + [9] * 10]  # 3 shared tokens < min_prefix: not worth a restore
    longer = a + [1, 2, 3]
    cache[longer] = _state(100, longer)  # extends a: a's state is dropped, it holds nothing longer does not
    assert len(cache.cache_state) == 2 and tuple(a) not in cache.cache_state
    _ = cache[b + [5]]  # b used last: a fourth state evicts the least recently used one (longer)
    c = list(range(300, 330))
    cache[c] = _state(150, c)
    assert set(cache.cache_state) == {tuple(b), tuple(c)} and cache.cache_size <= 300
    assert common_prefix(np.array([1, 2, 3]), np.array([1, 2, 4, 5])) == 2


def test_prompt_cache_size_is_a_range_checked_setting():
    assert load_settings(NOFILE, environ={}).lm.prompt_cache_mb == 1024
    for bad in ("-1", "2000000", "lots"):
        with pytest.raises(ConfigError, match="prompt_cache_mb"):
            load_settings(NOFILE, environ={"HQA_LM__PROMPT_CACHE_MB": bad})
    engine = build_lm(load_settings(NOFILE, environ={"HQA_LM__PROMPT_CACHE_MB": "0"}))._engine_spec
    assert engine.prompt_cache_mb == 0
    copy = pickle.loads(pickle.dumps(LlamaCppEngine(prompt_cache_mb=32)))
    assert copy.prompt_cache_mb == 32 and copy.stats["calls"] == 0 and copy._llama is None
