"""The LM of ``lm.provider = 'openai_compatible'``: any server speaking the OpenAI chat API (llama_cpp.server, vLLM,
SGLang, Ollama, LM Studio, ...), declared once to DSPy's own HTTP engine and reached through one engine bound to the
server, with the signature's JSON schema sent in the spelling that server accepts.

:func:`register_openai_compatible` declares the server's wire to DSPy (``dspy.lm15.register_provider``).
:class:`OpenAICompatibleEngine` is the engine hqa's ``dspy.LM`` for such a server runs on: DSPy's native
``LM15Engine`` for that declaration, built once with the server's address, credential and timeout.
:func:`probe_response_format` finds, with one to four short requests, which structured-output spelling the server
applies (``lm.response_format = "auto"``); :data:`RESPONSE_FORMATS` names them.
"""

from __future__ import annotations

import dataclasses
import json
import os
import threading
from dataclasses import dataclass
from typing import Any

from hqa.errors import EndpointError

#: the provider id hqa declares; its LMs are ``dspy.LM("openai-compatible/<model>")``
OPENAI_COMPATIBLE = "openai-compatible"

#: ``lm.response_format``: how a structured-output request (DSPy's JSONAdapter asks for the signature's JSON schema)
#: reaches the server.  ``json_schema``: OpenAI's spelling, which vLLM, SGLang and Ollama's OpenAI-compatible endpoint
#: also take (``{"type": "json_schema", "json_schema": {"name", "schema", "strict"}}``); ``json_object_schema``:
#: llama-cpp-python's server (``{"type": "json_object", "schema": ...}``, applied as a grammar); ``json_object``:
#: any JSON object, the schema dropped; ``none``: no response format (the prompt alone asks for JSON); ``auto``: the
#: first of these the server is seen to apply (:func:`probe_response_format`).
RESPONSE_FORMATS = ("auto", "json_schema", "json_object_schema", "json_object", "none")
SCHEMA_FORMATS = ("json_schema", "json_object_schema")  # the spellings that carry the schema
#: request-body fields hqa (through DSPy) writes itself, which ``lm.extra_body`` may not set
OWN_FIELDS = frozenset({"model", "messages", "stream", "stream_options", "response_format", "tools", "tool_choice",
                        "max_tokens", "max_completion_tokens", "temperature", "n"})

# the probe's schema: a property name and value no model writes unless the server holds it to the schema
_PROBE_KEY, _PROBE_VALUE = "hqa_probe", "q7z"
_PROBE_SCHEMA = {"type": "object", "properties": {_PROBE_KEY: {"type": "string", "enum": [_PROBE_VALUE]}},
                 "required": [_PROBE_KEY], "additionalProperties": False}


@dataclass(frozen=True)
class ResponseFormat:
    """The structured-output spelling one server gets (:data:`RESPONSE_FORMATS`, never ``auto``) and how it was
    chosen: ``settings`` (named in ``lm.response_format``) or ``probe`` (with what each spelling did)."""

    mode: str
    how: str
    detail: str = ""

    def to_dict(self) -> dict[str, str]:
        return {"mode": self.mode, "how": self.how, **({"detail": self.detail} if self.detail else {})}


def _wire_format(mode: str, schema: dict) -> dict | None:
    """The ``response_format`` body field of ``mode`` for ``schema``."""
    if mode == "json_schema":
        return {"type": "json_schema", "json_schema": {"name": "response", "schema": schema, "strict": True}}
    if mode == "json_object_schema":
        return {"type": "json_object", "schema": schema}
    if mode == "json_object":
        return {"type": "json_object"}
    return None


def _reply_object(body: Any) -> dict | None:
    """The JSON object of a chat-completions reply's first message, or None."""
    try:
        text = body["choices"][0]["message"]["content"]
        value = json.loads(text)
    except (KeyError, IndexError, TypeError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def probe_response_format(api_base: str, model: str, api_key: str = "", timeout: float = 60.0) -> ResponseFormat:
    """Which structured-output spelling the server at ``api_base`` applies, found by asking: each schema spelling in
    turn with a schema whose one property name and value no model writes on its own, then JSON mode.  A spelling is
    taken when the server answers 200 with exactly the object the schema allows (a server that accepts a spelling
    but ignores it, or refuses it with a 4xx/5xx — llama-cpp-python's server answers OpenAI's spelling with a 500 —
    goes on to the next); JSON mode when its reply is a JSON object; else ``none``.  One to three requests of at
    most 24 completion tokens; EndpointError when the server cannot be reached, or answers every one with a 5xx.  Uses ``requests`` (a dependency through requests-cache), outside DSPy: no cache, no callbacks,
    no budget."""
    import requests

    url = api_base.rstrip("/") + "/chat/completions"
    headers = {"content-type": "application/json", **({"authorization": f"Bearer {api_key}"} if api_key else {})}
    seen: list[str] = []
    statuses: list[int] = []
    for mode in (*SCHEMA_FORMATS, "json_object"):
        body = {"model": model, "max_tokens": 24, "temperature": 0, "response_format": _wire_format(mode, _PROBE_SCHEMA),
                "messages": [{"role": "user", "content": "Reply with a JSON object."}]}
        try:
            reply = requests.post(url, json=body, headers=headers, timeout=timeout)
        except requests.RequestException as exc:
            raise EndpointError(f"LM server at {api_base} is not reachable ({type(exc).__name__}: {exc}); the "
                                "response-format probe (lm.response_format = 'auto') could not ask it") from None
        statuses.append(reply.status_code)
        if reply.status_code != 200:
            seen.append(f"{mode}: HTTP {reply.status_code}")
            continue
        try:
            obj = _reply_object(reply.json())
        except ValueError:
            obj = None
        if mode in SCHEMA_FORMATS and obj == {_PROBE_KEY: _PROBE_VALUE}:
            return ResponseFormat(mode, "probe", "; ".join([*seen, f"{mode}: applied"]))
        if mode == "json_object" and obj is not None:
            return ResponseFormat(mode, "probe", "; ".join([*seen, "json_object: a JSON object"]))
        seen.append(f"{mode}: {'not applied' if mode in SCHEMA_FORMATS else 'no JSON object'}")
    if all(code >= 500 for code in statuses):  # a server that fails everything is down, not a server without JSON
        raise EndpointError(f"LM server at {api_base} answered every request of the response-format probe with an "
                            f"error ({'; '.join(seen)}); name lm.response_format to skip the probe")
    return ResponseFormat("none", "probe", "; ".join(seen))


_PROBED: dict[tuple[str, str, str], ResponseFormat] = {}  # (api_base, model, key variable) -> the probe's finding
_PROBING = threading.Lock()


def register_openai_compatible() -> None:
    """Declare the generic OpenAI-compatible server (``lm.provider = 'openai_compatible'``) to DSPy's own engine
    (``dspy.lm15.register_provider``; idempotent), so its LMs are ``dspy.LM("openai-compatible/<model>")`` served by
    DSPy's native HTTP client rather than litellm's.

    Why (issue 38): litellm's client was the largest share of hqa's own CPU per question, which bounds questions per
    second at many concurrent questions on a small machine (before/after in docs/benchmarks.md; one ChatAdapter call
    against an in-process loopback server: 9.3 → 2.8 ms of CPU, server included); litellm is not imported for such
    LMs.

    The wire is the one litellm's ``openai/<model>`` route sent to such a server, which hqa's tests pin against a real
    ``llama_cpp.server``: ``max_tokens`` (llama-cpp-python's server ignores ``max_completion_tokens``), no native tool
    calls or reasoning dial.  The model "supports a response schema", so DSPy's JSONAdapter asks for the signature's
    schema, and ``json_schema="send"`` lets DSPy write OpenAI's spelling; :class:`OpenAICompatibleEngine` turns each
    request into the spelling its server takes (issue 53: the schema was dropped to plain JSON mode before, and a
    small model behind llama_cpp.server then wrote JSON objects without the signature's fields).
    """
    import dataclasses as dc

    from dspy.lm15 import AccessPolicy, ModelSupport, OpenAIChatCompat, ProviderDefinition, register_provider

    # LM Studio's preset is lm15's generic local server (max_tokens, no thinking dial, no cache_control field)
    compat = dc.replace(OpenAIChatCompat.preset("lmstudio"), json_schema="send")
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

    Structured outputs (issue 53): a request asking for a JSON schema goes out in the spelling of
    ``response_format`` (:data:`RESPONSE_FORMATS`; ``auto``: probed once per server and model in this process,
    :func:`probe_response_format`), so the server holds the model to the signature's fields as the embedded engine's
    grammar does; :meth:`response_format_in_use` says which, and the run record keeps it.

    The wire is otherwise DSPy's: the same declaration (:func:`register_openai_compatible`) builds every request and
    parses every reply, through the same connection pool, retries (``dspy.LM``'s ``num_retries``) and errors.  The
    capability hints DSPy's adapters read (a response schema, no native tools, no reasoning) are the ones DSPy works
    out for the declared provider (:meth:`capabilities_of`).

    Saved programs keep no secret: :meth:`dump_state` names the environment variable the key is read from, never the
    key; a pickled copy rebuilds its connection lazily.
    """

    counts_attempts = True  # calls hqa.lm.calls.note_attempt for every request it sends

    def __init__(self, model: str, api_base: str, api_key_env: str = "", timeout: float | None = None,
                 response_format: str = "auto", extra_body: dict[str, Any] | None = None):
        from hqa.errors import ConfigError

        if response_format not in RESPONSE_FORMATS:
            raise ConfigError(f"lm.response_format must be one of {', '.join(RESPONSE_FORMATS)}, got "
                              f"{response_format!r}")
        taken = sorted(set(extra_body or {}) & OWN_FIELDS)
        if taken:
            raise ConfigError(f"lm.extra_body may not set {', '.join(taken)}: hqa writes those fields itself")
        self.model, self.api_base, self.api_key_env, self.timeout = model, api_base, api_key_env, timeout
        self.response_format = response_format
        self.extra_body = dict(extra_body or {})
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

    @property
    def wire_model(self) -> str:
        """The model name the server is sent (the ``openai-compatible/`` prefix left out)."""
        return self.model.split("/", 1)[1] if self.model.startswith(OPENAI_COMPATIBLE + "/") else self.model

    def _key(self) -> str:
        return (os.environ.get(self.api_key_env, "") if self.api_key_env else "") or ""

    def response_format_in_use(self) -> ResponseFormat:
        """The spelling this engine sends a schema in: the setting, or (``auto``) the probe's finding for this
        server and model, probed on first use and shared by every engine of this process."""
        if self.response_format != "auto":
            return ResponseFormat(self.response_format, "settings")
        key = (self.api_base, self.wire_model, self.api_key_env)
        found = _PROBED.get(key)
        if found is None:
            with _PROBING:
                found = _PROBED.get(key)
                if found is None:
                    found = probe_response_format(self.api_base, self.wire_model, self._key(),
                                                  timeout=self.timeout or 60.0)
                    _PROBED[key] = found
        return found

    def shaped(self, request):
        """``request`` with its response format in the server's spelling (:data:`RESPONSE_FORMATS`): a schema as
        OpenAI's ``json_schema`` (DSPy's own wire), as llama-cpp-python's ``json_object`` + ``schema`` (sent
        verbatim through the request's ``extensions``), as plain JSON mode, or left out."""
        config = request.config
        if self.extra_body:  # the server's own knobs (lm.extra_body), under anything the request itself sets
            request = dataclasses.replace(request, config=dataclasses.replace(
                config, extensions={**self.extra_body, **(config.extensions or {})}))
            config = request.config
        fmt = config.response_format
        if not fmt:
            return request
        mode = self.response_format_in_use().mode
        if mode == "json_schema":
            return request
        if mode == "json_object_schema" and fmt.get("type") == "json_schema":
            extensions = {**(config.extensions or {}), "response_format": _wire_format(mode, fmt["schema"])}
            config = dataclasses.replace(config, response_format=None, extensions=extensions)
        elif mode in ("json_object", "json_object_schema"):
            config = dataclasses.replace(config, response_format={"type": "json_object"})
        else:  # none
            config = dataclasses.replace(config, response_format=None)
        return dataclasses.replace(request, config=config)

    def _engine(self):
        native = self._native  # built once: a call takes the lock only until then
        if native is not None:
            return native
        with self._lock:
            if self._native is None:
                from dspy.clients.engines.lm15_engine import LM15Engine, timeouts_for
                from dspy.lm15 import RouterConfig, _definitions, registered_providers

                config = RouterConfig(api_keys={OPENAI_COMPATIBLE: self._key() or "not-needed"},
                                      base_urls={OPENAI_COMPATIBLE: self.api_base},
                                      timeouts=timeouts_for(self.timeout),
                                      providers=_definitions(registered_providers()))
                self._native = LM15Engine(config, model_type="chat")
            return self._native

    def complete(self, request):
        from hqa.lm.calls import note_attempt

        request = self.shaped(request)
        note_attempt()  # one request sent to the server (a retry of DSPy's counts again)
        return self._engine().complete(request)

    def stream(self, request):
        from hqa.lm.calls import note_attempt

        request = self.shaped(request)
        note_attempt()
        return self._engine().stream(request)

    # -- saving and copying: settings only, never the key or the open connections --------------------------------
    def dump_state(self) -> dict:
        return {"model": self.model, "api_base": self.api_base, "api_key_env": self.api_key_env,
                "timeout": self.timeout, "response_format": self.response_format, "extra_body": self.extra_body}

    @classmethod
    def load_state(cls, state: dict) -> "OpenAICompatibleEngine":
        return cls(**state)

    def __getstate__(self) -> dict:
        return self.dump_state()

    def __setstate__(self, state: dict) -> None:
        self.__init__(**state)
