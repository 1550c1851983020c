"""The embedded engine's prompt-prefix KV cache: same greedy outputs, fewer prompt tokens evaluated, bounded size."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
from llama_cpp.llama import LlamaState

from hqa.config import load_settings
from hqa.errors import ConfigError
from hqa.lm.models import LlamaCppEngine, build_lm
from hqa.lm.kv_cache import PrefixCache, common_prefix

NOFILE = Path("/nonexistent-hqa.toml")


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


def test_a_state_another_process_trimmed_is_a_miss_without_a_warning(tmp_path, caplog):
    """Processes sharing the states folder trim each other's files: a state gone since the index was read is a
    plain miss (the prompt evaluated in full), not the warning a torn or foreign file gets."""
    import logging

    from hqa.lm.kv_cache import DiskStates

    disk = DiskStates(tmp_path, capacity_bytes=10_000)
    path = disk.save(_state(100, list(range(40))))
    reader = DiskStates(tmp_path, capacity_bytes=10_000)
    assert list(reader.index()) == [path.stem]
    path.unlink()  # the other process's trim
    with caplog.at_level(logging.DEBUG, logger="hqa"):
        assert reader.load(path.stem) is None
    assert reader.index() == {} and not [r for r in caplog.records if r.levelno >= logging.WARNING]
    path.write_bytes(b"not a state")  # a foreign file is still a warning
    with caplog.at_level(logging.WARNING, logger="hqa"):
        assert reader.load(path.stem) is None
    assert any("dropped" in r.getMessage() for r in caplog.records)
