"""The LM of ``lm.provider = 'openai_compatible'``: any server speaking the OpenAI chat API (llama_cpp.server, vLLM,
LM Studio, ...), declared once to DSPy's own HTTP engine and reached through one engine bound to the server.

:func:`register_openai_compatible` declares the server's wire to DSPy (``dspy.lm15.register_provider``).
:class:`OpenAICompatibleEngine` is the engine hqa's ``dspy.LM`` for such a server runs on: DSPy's native
``LM15Engine`` for that declaration, built once with the server's address, credential and timeout.
"""

from __future__ import annotations

import os
import threading
from typing import Any

#: the provider id hqa declares; its LMs are ``dspy.LM("openai-compatible/<model>")``
OPENAI_COMPATIBLE = "openai-compatible"


def register_openai_compatible() -> None:
    """Declare the generic OpenAI-compatible server (``lm.provider = 'openai_compatible'``) to DSPy's own engine
    (``dspy.lm15.register_provider``; idempotent), so its LMs are ``dspy.LM("openai-compatible/<model>")`` served by
    DSPy's native HTTP client rather than litellm's.

    Why (issue 38): litellm's client was the largest share of hqa's own CPU per question, which bounds questions per
    second at many concurrent questions on a small machine (before/after in docs/benchmarks.md; one ChatAdapter call
    against an in-process loopback server: 9.3 → 2.8 ms of CPU, server included); litellm is not imported for such
    LMs.

    The wire is the one litellm's ``openai/<model>`` route sent to such a server, which hqa's tests pin against a real
    ``llama_cpp.server``: ``max_tokens`` (llama-cpp-python's server ignores ``max_completion_tokens``), no native
    tool calls or reasoning dial, and for DSPy's JSONAdapter ``response_format: {"type": "json_object"}`` — the model
    "supports a response schema" so that the JSON fallback asks for JSON at all (an unknown model gets no
    ``response_format`` and a small model then answers with free text), while ``json_schema="reject"`` turns the
    schema into the plain JSON mode, the one response format llama-cpp-python's server accepts besides text.
    """
    import dataclasses as dc

    from dspy.lm15 import AccessPolicy, ModelSupport, OpenAIChatCompat, ProviderDefinition, register_provider

    # LM Studio's preset is lm15's generic local server (max_tokens, no thinking dial, no cache_control field)
    compat = dc.replace(OpenAIChatCompat.preset("lmstudio"), json_schema="reject")
    # the base URL is a placeholder: every hqa LM passes its own api_base
    access = AccessPolicy(provider=OPENAI_COMPATIBLE, base_url="http://127.0.0.1:8000/v1")
    register_provider(ProviderDefinition.chat(access, compat=compat),
                      supports=ModelSupport(function_calling=False, reasoning=False, response_schema=True))


class OpenAICompatibleEngine:
    """DSPy's native engine for one OpenAI-compatible server, held by a ``dspy.LM`` as its custom engine
    (``complete(Request) -> Response``, ``stream``), as the embedded model's ``LlamaCppEngine`` is.

    Why (issue 38): a ``dspy.LM`` given the provider string instead chooses its route again on every call — DSPy
    3.4.1 selects a backend, plans the request offline (building its wire body once more before the real build), and
    constructs a new router to look up a price for a server that has none.  hqa's declaration leaves one route, so
    the engine is chosen once here.  Measured in docs/benchmarks.md ("LM-bound throughput"): hqa's CPU per question
    at 64 concurrent questions fell by 4-10 %.

    The wire is unchanged: the same declaration (:func:`register_openai_compatible`) builds every request and parses
    every reply, through the same connection pool, retries (``dspy.LM``'s ``num_retries``) and errors.  The
    capability hints DSPy's adapters read (JSON mode for the JSONAdapter fallback, no native tools, no reasoning) are
    the ones DSPy works out for the declared provider (:meth:`capabilities_of`).

    Saved programs keep no secret: :meth:`dump_state` names the environment variable the key is read from, never the
    key; a pickled copy rebuilds its connection lazily.
    """

    def __init__(self, model: str, api_base: str, api_key_env: str = "", timeout: float | None = None):
        self.model, self.api_base, self.api_key_env, self.timeout = model, api_base, api_key_env, timeout
        register_openai_compatible()
        hints = self.capabilities_of(model)
        self.supports_function_calling = hints.function_calling
        self.supports_reasoning = hints.reasoning
        self.supports_response_schema = hints.response_schema
        self.supported_params = hints.params
        self._native = None
        self._lock = threading.Lock()

    @staticmethod
    def capabilities_of(model: str) -> Any:
        """DSPy's capability hints for ``model`` (``openai-compatible/<name>``) on the declared provider's route."""
        import dspy
        from dspy.clients.capabilities import capabilities

        return capabilities(dspy.LM(model, api_base="http://127.0.0.1:8000/v1", api_key="not-needed", cache=False))

    def _engine(self):
        native = self._native  # built once: a call takes the lock only until then
        if native is not None:
            return native
        with self._lock:
            if self._native is None:
                from dspy.clients.engines.lm15_engine import LM15Engine, timeouts_for
                from dspy.lm15 import RouterConfig, _definitions, registered_providers

                key = (os.environ.get(self.api_key_env, "") if self.api_key_env else "") or "not-needed"
                config = RouterConfig(api_keys={OPENAI_COMPATIBLE: key}, base_urls={OPENAI_COMPATIBLE: self.api_base},
                                      timeouts=timeouts_for(self.timeout),
                                      providers=_definitions(registered_providers()))
                self._native = LM15Engine(config, model_type="chat")
            return self._native

    def complete(self, request):
        return self._engine().complete(request)

    def stream(self, request):
        return self._engine().stream(request)

    # -- saving and copying: settings only, never the key or the open connections --------------------------------
    def dump_state(self) -> dict:
        return {"model": self.model, "api_base": self.api_base, "api_key_env": self.api_key_env,
                "timeout": self.timeout}

    @classmethod
    def load_state(cls, state: dict) -> "OpenAICompatibleEngine":
        return cls(**state)

    def __getstate__(self) -> dict:
        return self.dump_state()

    def __setstate__(self, state: dict) -> None:
        self.__init__(**state)
