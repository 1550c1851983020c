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
import hashlib
import json
import logging
import os
import struct
import time
from dataclasses import dataclass
from pathlib import Path

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
NEW_PREFIX_SHARE = 0.5  # a state goes to disk when no stored one shares half of its tokens (a new prompt prefix)
STATE_MAGIC = b"HQAKV001"

log = logging.getLogger(__name__)


def common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    """Length of the longest common prefix of two token arrays."""
    n = min(len(a), len(b))
    diff = np.flatnonzero(a[:n] != b[:n])
    return int(diff[0]) if len(diff) else n


def longest_prefix(arrays: dict, probe: np.ndarray):
    """The key of ``arrays`` (key → token array) sharing the longest prefix with ``probe``, and that length
    (``(None, 0)`` when none shares a token)."""
    best, best_len = None, 0
    for key, arr in arrays.items():
        n = common_prefix(arr, probe)
        if n > best_len:
            best, best_len = key, n
    return best, best_len


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


def states_dir(root: str | Path, model_path: str | Path, n_ctx: int) -> Path:
    """The folder of persisted states for one model file and context size under ``root``: a state only restores
    into the context that wrote it (same weights, same llama.cpp, same ``n_ctx``)."""
    st = os.stat(model_path)
    ident = "/".join(str(x) for x in (STATE_MAGIC.decode(), llama_cpp.__version__, os.path.realpath(model_path),
                                      st.st_size, st.st_mtime_ns, n_ctx))
    return Path(root) / f"{Path(model_path).stem}-{hashlib.sha256(ident.encode()).hexdigest()[:16]}"


class DiskStates:
    """Context states kept in a folder, so the next process restores a prompt prefix instead of evaluating it.

    A process that starts (``hqa ask``) pays for every prompt token of its first call: the instructions and demos of
    a compiled predictor are the same in every process, only the question differs.  One file per state,
    ``<sha256 of its tokens>.state``: magic, a JSON header (token count, state size, seed, SHA-256 of the state),
    the tokens, the llama.cpp state; written atomically (:func:`hqa.io.files.write_atomic`).  A file that is torn,
    foreign or fails its checksum is removed and the prompt evaluated in full.  ``capacity_bytes`` bounds the folder;
    the least recently used files go first (a restore touches its file).
    """

    def __init__(self, directory: str | Path, capacity_bytes: int):
        self.directory = Path(directory)
        self.capacity_bytes = capacity_bytes
        self._index: dict[str, np.ndarray] | None = None

    @staticmethod
    def _header(fh) -> tuple[dict, np.ndarray]:
        if fh.read(len(STATE_MAGIC)) != STATE_MAGIC:
            raise ValueError("not a state file")
        (size,) = struct.unpack("<I", fh.read(4))
        meta = json.loads(fh.read(size))
        tokens = np.frombuffer(fh.read(4 * meta["n_tokens"]), dtype="<i4").astype(np.intc)
        if len(tokens) != meta["n_tokens"]:
            raise ValueError("truncated tokens")
        return meta, tokens

    def index(self) -> dict[str, np.ndarray]:
        """Stored states by name → their tokens (read once per process; this process's writes are added)."""
        if self._index is None:
            self._index = {}
            for path in sorted(self.directory.glob("*.state")) if self.directory.is_dir() else []:
                try:
                    with path.open("rb") as fh:
                        _, tokens = self._header(fh)
                except (OSError, ValueError, KeyError, struct.error):
                    self._drop(path.stem)
                    continue
                self._index[path.stem] = tokens
        return self._index

    def longest(self, probe: np.ndarray) -> tuple[str | None, int]:
        """The stored state sharing the longest token prefix with ``probe``, and that length."""
        return longest_prefix(self.index(), probe)

    def load(self, name: str) -> LlamaState | None:
        """The stored state ``name``, or None (and the file removed) when it is unreadable or fails its checksum."""
        path = self.directory / f"{name}.state"
        try:
            with path.open("rb") as fh:
                meta, tokens = self._header(fh)
                data = fh.read()
            if len(data) != meta["state_size"] or hashlib.sha256(data).hexdigest() != meta["sha256"]:
                raise ValueError("state does not match its checksum")
            self._touch(path)
        except FileNotFoundError:  # another process sharing the folder trimmed it since this one read the index
            log.debug("llama state %s is gone: another process trimmed the folder", path)
            self._drop(name)
            return None
        except (OSError, ValueError, KeyError, struct.error) as exc:
            log.warning("llama state %s dropped: %s", path, exc)
            self._drop(name)
            return None
        return LlamaState(input_ids=tokens, scores=np.empty((0, 0), dtype=np.single), n_tokens=len(tokens),
                          llama_state=data, llama_state_size=len(data), seed=int(meta["seed"]))

    def save(self, state: LlamaState) -> Path:
        """Write ``state`` (its tokens are ``state.input_ids[:n_tokens]``), then trim the folder to capacity."""
        from hqa.io.files import write_atomic

        tokens = np.asarray(state.input_ids[: state.n_tokens], dtype="<i4")
        data = bytes(state.llama_state[: state.llama_state_size])
        meta = {"n_tokens": int(len(tokens)), "state_size": len(data), "seed": int(state.seed),
                "sha256": hashlib.sha256(data).hexdigest()}
        head = json.dumps(meta).encode()
        name = hashlib.sha256(tokens.tobytes()).hexdigest()[:32]
        path = self.directory / f"{name}.state"
        write_atomic(path, b"".join([STATE_MAGIC, struct.pack("<I", len(head)), head, tokens.tobytes(), data]))
        self._touch(path)
        self.index()[name] = tokens.astype(np.intc)
        self._trim()
        return path

    @staticmethod
    def _touch(path: Path) -> None:
        """Mark ``path`` used now, to the nanosecond (the file system's own stamps are coarser: two writes in the
        same few milliseconds would tie)."""
        now = time.time_ns()
        os.utime(path, ns=(now, now))

    def _trim(self) -> None:
        files = []
        for path in self.directory.glob("*.state"):
            try:
                st = path.stat()
            except OSError:
                continue
            files.append((st.st_mtime_ns, st.st_size, path))
        total = sum(size for _, size, _ in files)
        for _, size, path in sorted(files):
            if total <= self.capacity_bytes:
                break
            self._drop(path.stem)
            total -= size

    def _drop(self, name: str) -> None:
        (self.directory / f"{name}.state").unlink(missing_ok=True)
        if self._index is not None:
            self._index.pop(name, None)


class PrefixCache(LlamaRAMCache):
    """An LRU store of context states bounded by ``capacity_bytes``, looked up by longest token prefix.

    With ``disk`` (:class:`DiskStates`) a lookup also considers the states earlier processes left on disk (one that
    shares a longer prefix than any in memory is read and kept in memory), and a state whose prompt prefix is new —
    no stored state shares ``NEW_PREFIX_SHARE`` of its tokens, e.g. a predictor's first call — is also written there.
    Later calls of the same predictor share most of their tokens with it and are not written again."""

    def __init__(self, capacity_bytes: int, min_prefix: int = MIN_PREFIX, disk: DiskStates | None = None):
        super().__init__(capacity_bytes)
        self.min_prefix = min_prefix
        self.disk = disk
        self._arrays: dict[tuple[int, ...], np.ndarray] = {}

    @property
    def cache_size(self) -> int:
        return sum(state.llama_state_size for state in self.cache_state.values())

    def _find_longest_prefix_key(self, key: tuple[int, ...]) -> tuple[int, ...] | None:
        best, best_len = longest_prefix(self._arrays, np.asarray(key, dtype=np.intc))
        return best if best_len >= self.min_prefix else None

    def __getitem__(self, key) -> LlamaState:
        if self.disk is not None:
            probe = np.asarray(key, dtype=np.intc)
            _, ram_len = longest_prefix(self._arrays, probe)
            name, disk_len = self.disk.longest(probe)
            if name is not None and disk_len >= self.min_prefix and disk_len > ram_len:
                state = self.disk.load(name)
                if state is not None:
                    self._put(tuple(int(t) for t in state.input_ids), state)
                    return state
        return super().__getitem__(key)

    def __setitem__(self, key, value: LlamaState) -> None:
        self._put(key, value)
        if self.disk is not None:
            tokens = np.asarray(value.input_ids[: value.n_tokens], dtype=np.intc)
            _, shared = self.disk.longest(tokens)
            if shared < NEW_PREFIX_SHARE * len(tokens):
                try:
                    self.disk.save(value)
                except OSError as exc:  # a full or read-only disk costs the next process time, nothing else
                    log.warning("llama state not written to %s: %s", self.disk.directory, exc)

    def _put(self, key, value: LlamaState) -> None:
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
            # not this context's state: start from an empty context, the prompt is then evaluated in full
            log.warning("a cached llama state did not restore; evaluating the prompt in full")
            self._ctx.kv_cache_clear()
            self.n_tokens = 0
            return
        self.last_stats.restored = True
        self.last_stats.restore_seconds += time.perf_counter() - start

    # -- counting ----------------------------------------------------------------------------------------------
    def begin_call(self) -> None:
        self.last_stats = PromptStats()

    def eval(self, tokens) -> None:
        from hqa.io import cancel

        if self._in_prompt:
            self.last_stats.evaluated += len(tokens)
        tokens = list(tokens)
        step = max(1, int(self.n_batch))
        for i in range(0, len(tokens), step):  # batch by batch, as Llama.eval does, with a cancellation check
            cancel.check()  # between batches (hqa.io.cancel); each generated token comes through here too
            super().eval(tokens[i:i + step])

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


__all__ = ["DiskStates", "PrefixCache", "PrefixLlama", "PromptStats", "common_prefix", "states_dir", "MIN_PREFIX"]
