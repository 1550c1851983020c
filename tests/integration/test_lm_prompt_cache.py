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
from hqa.lm.models import LlamaCppEngine, build_lm
from hqa.lm.kv_cache import PrefixCache, common_prefix
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


def test_disk_states_round_trip_stay_within_capacity_and_skip_torn_files(tmp_path):
    from hqa.lm.kv_cache import DiskStates

    disk = DiskStates(tmp_path, capacity_bytes=3000)
    rng = np.random.default_rng(0)
    saved = []
    for i in range(3):
        tokens = list(range(i * 100, i * 100 + 40))
        state = _state(1000, tokens)
        state.llama_state = rng.integers(0, 256, 1000, dtype=np.uint8).tobytes()
        saved.append((disk.save(state), state))
    # 3 x ~1.3 KB > 3 KB: the least recently written one went
    assert not saved[0][0].exists() and saved[1][0].exists() and saved[2][0].exists()
    fresh = DiskStates(tmp_path, capacity_bytes=3000)  # another process: reads the index from the files
    name, shared = fresh.longest(np.asarray(list(range(200, 230)) + [1, 2], dtype=np.intc))
    assert shared == 30 and name == saved[2][0].stem
    back = fresh.load(name)
    assert back.llama_state == saved[2][1].llama_state and back.input_ids.tolist() == list(range(200, 240))
    saved[1][0].write_bytes(saved[1][0].read_bytes()[:20])  # torn mid-header
    again = DiskStates(tmp_path, capacity_bytes=3000)
    assert list(again.index()) == [name] and not saved[1][0].exists()
