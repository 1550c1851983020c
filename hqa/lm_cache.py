"""Prompt-prefix KV cache for the embedded llama.cpp engine, and per-call counts of what it saved.

The programs call the same predictors again and again: the system prompt (instructions + demos) is the same, the
user message differs.  llama-cpp-python keeps only the tokens it evaluated last and reuses their longest common
prefix with the next prompt, so as soon as two predictors alternate that prefix is lost.  Its prompt cache
(``Llama.set_cache``; read from llama_cpp/llama.py and llama_cache.py of llama-cpp-python 0.3.x) fixes that: after
each completion it stores the context state keyed by the prompt + completion tokens, and before the next one it
loads the stored state sharing the longest prefix with the new prompt when that beats what is loaded; ``generate``
then drops the KV cells past the common prefix and evaluates only the rest.

Two costs of the stock classes are removed here:

* :class:`PrefixLlama` saves and restores states without llama-cpp-python's ``scores`` array — with
  ``logits_all=False`` it is never written (sampling reads llama.cpp's own logits, and a restored state is always
  re-decoded before sampling), yet the stock ``save_state`` copies ``n_batch x n_vocab`` floats (100 MB for
  SmolLM2) on every call and ``load_state`` scans it again: 0.26 s + 0.39 s per call at 800 tokens, measured;
* :class:`PrefixCache` looks prefixes up with numpy, ignores matches shorter than ``min_prefix`` tokens (every chat
  prompt shares its first few template tokens; restoring a whole state to save those is a loss), and drops a stored
  state when a new one extends it.  What a state costs: its KV cells, ~23 KB per token for SmolLM2-135M
  (30 layers x 2 x 3 KV heads x 64 x f16), whatever ``n_ctx`` is — llama.cpp serialises the used cells only.

:class:`PrefixLlama` also records, per completion, how many prompt tokens were evaluated and how many were reused,
and the seconds spent evaluating the prompt and restoring / saving states (:class:`PromptStats`).
"""

from __future__ import annotations

import ctypes
import os
import time
from dataclasses import dataclass

# llama.cpp's prompt batches run on OpenMP threads, whose default is to spin while they wait at the ggml graph's
# barriers.  With any other process on the machine that spinning is the cost: 600 prompt tokens on 2 threads took
# 12-18 s of wall and 8-17 s of CPU here instead of 3.7-6.5 s and 3.7 s with PASSIVE (measured on this 2-core machine
# under load; benchmarks/results/startup.md).  libgomp reads the variable when llama.cpp's library is loaded, i.e.
# at this import; an explicit setting wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import llama_cpp  # noqa: E402
import numpy as np  # noqa: E402
from llama_cpp.llama import Llama, LlamaState  # noqa: E402
from llama_cpp.llama_cache import LlamaRAMCache  # noqa: E402

MIN_PREFIX = 16  # tokens: a shorter shared prefix is not worth restoring a state for


def common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    """Length of the longest common prefix of two token arrays."""
    n = min(len(a), len(b))
    if n == 0:
        return 0
    diff = np.flatnonzero(a[:n] != b[:n])
    return int(diff[0]) if len(diff) else n


@dataclass
class PromptStats:
    """What one completion cost in prompt processing."""

    prompt_tokens: int = 0
    evaluated: int = 0  # prompt tokens llama.cpp decoded
    reused: int = 0  # prompt tokens whose KV cells were already there (kept or restored from the cache)
    restored: bool = False  # a cached state was loaded for this call
    prompt_seconds: float = 0.0  # wall time from generate() to the first sampled token: decoding the new tokens
    prompt_cpu_seconds: float = 0.0  # the same as CPU time of this process (robust to other load on the machine)
    restore_seconds: float = 0.0
    save_seconds: float = 0.0
    completion_seconds: float = 0.0  # wall time of the whole call: restore, prompt, generation, save


class PrefixCache(LlamaRAMCache):
    """An LRU store of context states bounded by ``capacity_bytes``, looked up by longest token prefix."""

    def __init__(self, capacity_bytes: int, min_prefix: int = MIN_PREFIX):
        super().__init__(capacity_bytes)
        self.min_prefix = min_prefix
        self._arrays: dict[tuple[int, ...], np.ndarray] = {}

    @property
    def cache_size(self) -> int:
        return sum(state.llama_state_size for state in self.cache_state.values())

    def _find_longest_prefix_key(self, key: tuple[int, ...]) -> tuple[int, ...] | None:
        probe = np.asarray(key, dtype=np.intc)
        best, best_len = None, self.min_prefix - 1
        for k, arr in self._arrays.items():
            n = common_prefix(arr, probe)
            if n > best_len:
                best, best_len = k, n
        return best

    def __setitem__(self, key, value: LlamaState) -> None:
        key = tuple(int(t) for t in key)
        arr = np.asarray(key, dtype=np.intc)
        for old in [k for k, a in self._arrays.items() if len(a) <= len(arr) and common_prefix(a, arr) == len(a)]:
            del self.cache_state[old], self._arrays[old]  # the new state holds everything the old one did
        self.cache_state[key] = value
        self._arrays[key] = arr
        while self.cache_state and self.cache_size > self.capacity_bytes:
            oldest, _ = self.cache_state.popitem(last=False)
            del self._arrays[oldest]


class PrefixLlama(Llama):
    """``Llama`` whose states leave out the unused ``scores`` array and which records :class:`PromptStats`."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.last_stats = PromptStats()
        self._in_prompt = False

    # -- states without scores -------------------------------------------------------------------------------
    def save_state(self) -> LlamaState:
        if self._logits_all:
            return super().save_state()
        start = time.perf_counter()
        size = llama_cpp.llama_state_get_size(self._ctx.ctx)
        buf = (ctypes.c_uint8 * int(size))()
        n = int(llama_cpp.llama_state_get_data(self._ctx.ctx, buf, size))
        if n > int(size):
            raise RuntimeError("llama_state_get_data wrote past its buffer")
        state = LlamaState(input_ids=self.input_ids[: self.n_tokens].copy(),
                           scores=np.empty((0, self._n_vocab), dtype=np.single), n_tokens=self.n_tokens,
                           llama_state=ctypes.string_at(buf, n), llama_state_size=n, seed=self._seed)
        self.last_stats.save_seconds += time.perf_counter() - start
        return state

    def load_state(self, state: LlamaState) -> None:
        if self._logits_all or len(state.scores):
            return super().load_state(state)
        start = time.perf_counter()
        self.input_ids[: state.n_tokens] = state.input_ids[: state.n_tokens]
        self.n_tokens = state.n_tokens
        self._requires_eval = True  # the restored logits are not live: decode before sampling (as upstream does)
        self._seed = state.seed
        buf = (ctypes.c_uint8 * state.llama_state_size).from_buffer_copy(state.llama_state)
        if llama_cpp.llama_state_set_data(self._ctx.ctx, buf, state.llama_state_size) != state.llama_state_size:
            raise RuntimeError("llama_state_set_data failed")
        self.last_stats.restored = True
        self.last_stats.restore_seconds += time.perf_counter() - start

    # -- counting ----------------------------------------------------------------------------------------------
    def begin_call(self) -> None:
        self.last_stats = PromptStats()

    def eval(self, tokens) -> None:
        if self._in_prompt:
            self.last_stats.evaluated += len(tokens)
        super().eval(tokens)

    def generate(self, tokens, *args, **kwargs):
        tokens = list(tokens)
        stats = self.last_stats
        stats.prompt_tokens = len(tokens)
        start, cpu = time.perf_counter(), time.process_time()
        self._in_prompt = True
        gen = super().generate(tokens, *args, **kwargs)
        try:
            token = next(gen)
        except StopIteration:
            return
        finally:
            self._in_prompt = False
            stats.prompt_seconds = time.perf_counter() - start
            stats.prompt_cpu_seconds = time.process_time() - cpu
            stats.reused = stats.prompt_tokens - stats.evaluated
        try:
            while True:
                sent = yield token
                try:
                    token = gen.send(sent)
                except StopIteration:
                    return
        finally:
            gen.close()


__all__ = ["PrefixCache", "PrefixLlama", "PromptStats", "common_prefix", "MIN_PREFIX"]
