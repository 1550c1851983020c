"""A loopback OpenAI-compatible LM server for hqa's benchmarks and tests (not part of the installed package).

``POST /v1/chat/completions`` (non-streaming, and streaming as server-sent events when ``"stream": true``),
``GET /v1/models``; every call answers a latency (fixed, or drawn from a distribution) after it reached the handler,
this server's own work included, so a client's throughput against it is LM-bound exactly as against a remote
provider, while this server spends almost no CPU.

Replies are valid for hqa's DSPy signatures in the chat-adapter layout (``[[ ## field ## ]]`` blocks): the output
fields a call asks for are read from its system message ("Your output fields are: 1. `name` ..."), and each gets
a value from the *script* (per field name: a value, or a list indexed by the agent step, i.e. the number of
``Action:`` lines already in the prompt's trajectory) or a generic short value.  :data:`SCRIPTS` holds one script per
hqa program, e.g. the HumanIQ agent's WikiSearch → GetWikidataID → GenerateSparql → RunSparql → Finish.  A *replay*
file (JSONL of ``{"messages": [...], "reply": "..."}``, e.g. a recorded conversation) answers a call whose messages
it holds with the recorded reply.

Usage follows OpenAI's chat-completions object: ``prompt_tokens``, ``completion_tokens``, ``total_tokens``,
``prompt_tokens_details.cached_tokens``, ``completion_tokens_details.reasoning_tokens``; a stream ends with a chunk
holding ``usage`` when the request asks ``stream_options.include_usage``.  Tokens are counted approximately (a word or
one punctuation mark is a token), not with a provider's tokenizer.  Prompt caching is accounted as OpenAI documents
it (platform.openai.com/docs/guides/prompt-caching): only prompts of at least 1,024 tokens are cached, and a hit
covers the longest previously seen prefix in steps of 128 tokens (both configurable).

Structured outputs as real servers take them (``Behaviour.response_format``): ``json_schema`` (the default) answers
like OpenAI or vLLM — a ``{"type": "json_schema", "json_schema": {"schema": ...}}`` request gets a reply that is an
instance of the schema, a ``json_object`` request with a ``schema`` beside it is refused with 400; ``json_object_schema``
answers like llama-cpp-python's server — ``{"type": "json_object", "schema": ...}`` is applied, the ``json_schema``
spelling is refused (that server answers 500 with a validation error); ``json_object`` and ``none`` ignore any schema
(the reply is the script's).  An instance of a schema takes the script's value for each property it names, an
``enum``'s first member when that value is not one of them.

Faults on demand: ``--error-rate``/``--error-status`` fail that share of calls at random, and ``POST /admin/faults``
``{"status": 429, "count": 3}`` fails the next N calls (429 with ``Retry-After``, 500 otherwise, OpenAI's error
body).  ``GET /admin/stats`` gives calls, tokens and statuses; ``POST /admin/reset`` clears them and the cache.

Run: ``python -m standins.openai_lm --port 8765 --latency 0.3`` (loopback only), or :func:`start` in a thread.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import random
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

# OpenAI's prompt-caching rule and the prompt's text, shared with hqa's reports (PrefixCache: the name tests use)
from hqa.lm.prefix_cache import ProviderCache as PrefixCache, prompt_text, prompt_tokens  # noqa: E402

_OUTPUT_FIELDS = re.compile(r"Your output fields are:\n(.*?)(?:\n\n|\Z)", re.S)
_FIELD_NAME = re.compile(r"^\d+\. `(\w+)`", re.M)
_TOKEN = re.compile(r"\w+|[^\w\s]")
_STEP = re.compile(r"^Action:", re.M)
_QUESTION = re.compile(r"\[\[ ## question ## \]\]\n(.*?)(?:\n\n|\Z)", re.S)

#: per hqa program, the value of each output field (a list: by agent step, the last repeated); ``{entity}`` is the
#: question's last capitalised word, ``{question}`` the question
SCRIPTS: dict[str, dict[str, Any]] = {
    "humaniq": {
        "next_thought": ["Search Wikipedia for the entity.", "Get the page's QID.", "Write a query with the QID.",
                         "Run the query.", "Both sources answered."],
        "next_tool_name": ["WikiSearch", "GetWikidataID", "GenerateSparql", "RunSparql", "Finish"],
        "next_tool_args": ["{entity}", "[{entity}]", "[Q1000]", "SELECT ?x1 WHERE { wd:Q1000 wdt:P36 ?x1 }",
                           "Wikipedia_Answer: Libreville, Wikidata_Answer: [Libreville]"],
        "title": "None", "summary": "None", "answer": "Libreville",
        "squall": "<Q1000:Gabon> has <P36:capital> ?x1",
        "sparql": "SELECT ?x1 WHERE { wd:Q1000 wdt:P36 ?x1 }",
        "wikipedia_answer": "Libreville", "wikidata_answer": "Libreville",
        "assistant_response": "Both sources name Libreville.",
    },
    "detllm": {
        "rationale": "The question asks for one fact; search for it.",
        "search_query": "What is the capital of {entity}?", "query_entity": "{entity}",
        "sparql": "SELECT ?x1 WHERE { wd:Q1000 wdt:P36 ?x1 }", "answer": "Libreville",
    },
    "sscot": {
        "reasoning_chain": "{entity} >> capital >> #1; final answer: #1",
        "filled_reasoning_chain": "{entity} >> capital >> Libreville; final answer: Libreville",
        "question": "What is the capital of {entity}?", "answer": "Libreville",
    },
    "simple": {"answer": "Libreville", "reasoning": "The evidence names it."},
}
SCRIPTS["default"] = {k: v for script in SCRIPTS.values() for k, v in script.items()}


def count_tokens(text: str) -> int:
    """Approximate token count: words and punctuation marks."""
    return len(_TOKEN.findall(text))


def messages_key(messages: list[dict]) -> str:
    return hashlib.sha256(json.dumps([[m.get("role"), m.get("content")] for m in messages],
                                     sort_keys=True).encode()).hexdigest()


@dataclass
class Behaviour:
    """What the server does: latency, script, replay, faults."""

    latency: float = 0.3
    distribution: str = "fixed"  # fixed | uniform | lognormal | exponential
    spread: float = 0.0  # uniform: ± seconds; lognormal: sigma; exponential: ignored (mean = latency)
    script: dict[str, Any] = field(default_factory=lambda: dict(SCRIPTS["default"]))
    replay: dict[str, str] = field(default_factory=dict)
    error_rate: float = 0.0
    error_status: int = 500
    seed: int = 0
    response_format: str = "json_schema"  # json_schema | json_object_schema | json_object | none (the module docstring)

    def delay(self, rng: random.Random) -> float:
        if self.distribution == "uniform":
            return max(0.0, rng.uniform(self.latency - self.spread, self.latency + self.spread))
        if self.distribution == "lognormal":  # median = latency
            return self.latency * rng.lognormvariate(0.0, self.spread)
        if self.distribution == "exponential":
            return rng.expovariate(1.0 / self.latency) if self.latency > 0 else 0.0
        return self.latency


def load_replay(path: str | Path) -> dict[str, str]:
    """A JSONL conversation (``{"messages": [...], "reply": "..."}`` per line) as messages digest -> reply."""
    out = {}
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if line.strip():
            rec = json.loads(line)
            out[messages_key(rec["messages"])] = rec["reply"]
    return out


class State:
    def __init__(self, behaviour: Behaviour, cache: PrefixCache):
        self.behaviour, self.cache = behaviour, cache
        self.rng = random.Random(behaviour.seed)
        self.lock = threading.Lock()
        self.forced: list[int] = []
        self.reset()

    def reset(self) -> None:
        with self.lock:
            self.stats = {"calls": 0, "streamed": 0, "prompt_tokens": 0, "cached_tokens": 0, "completion_tokens": 0,
                          "replayed": 0, "statuses": {}, "in_flight": 0, "max_in_flight": 0, "response_formats": {},
                          "bodies": []}
        self.cache.clear()

    def fault(self) -> int | None:
        with self.lock:
            if self.forced:
                return self.forced.pop(0)
            if self.behaviour.error_rate and self.rng.random() < self.behaviour.error_rate:
                return self.behaviour.error_status
        return None

    def count(self, status: int, **add: int) -> None:
        with self.lock:
            s = self.stats
            s["statuses"][str(status)] = s["statuses"].get(str(status), 0) + 1
            for k, v in add.items():
                s[k] += v


def scripted_reply(messages: list[dict], script: dict[str, Any], schema: dict | None = None,
                   as_json: bool = False) -> str:
    """The chat-adapter reply for the output fields the system message asks for, from ``script``; with ``schema``
    (a response format the server applies) an instance of it (:func:`schema_instance`); ``as_json`` (JSON mode):
    the fields as one JSON object."""
    system = next((m.get("content") or "" for m in messages if m.get("role") == "system"), "")
    block = _OUTPUT_FIELDS.search(system if isinstance(system, str) else "")
    names = _FIELD_NAME.findall(block.group(1)) if block else ["answer"]
    user = messages[-1].get("content") or "" if messages else ""
    user = user if isinstance(user, str) else prompt_text(messages[-1:])
    step = len(_STEP.findall(user))
    found = _QUESTION.search(user)
    question = found.group(1).strip() if found else ""
    caps = re.findall(r"\b[A-Z][\w-]+", question)
    entity = caps[-1] if caps else (question.split() or ["Gabon"])[-1].strip("?")
    values = {}
    for name in names:
        value = script.get(name, "None" if name != "answer" else "Libreville")
        if isinstance(value, list):
            value = value[min(step, len(value) - 1)]
        values[name] = str(value).replace("{entity}", entity).replace("{question}", question)
    if schema is not None:
        return json.dumps(schema_instance(schema, {**{k: str(v) for k, v in script.items()
                                                     if not isinstance(v, list)}, **values}))
    if as_json or "Outputs will be a JSON object" in system:  # JSON mode, or DSPy's JSONAdapter
        return json.dumps(values)
    return "\n\n".join(f"[[ ## {k} ## ]]\n{v}" for k, v in values.items()) + "\n\n[[ ## completed ## ]]"


def schema_instance(schema: dict, values: dict[str, Any], defs: dict | None = None) -> Any:
    """A value that satisfies the JSON ``schema`` (the subset DSPy's structured outputs use: objects, arrays,
    strings, numbers, booleans, enums, ``anyOf``, ``$ref``), each named property from ``values`` when it fits."""
    defs = defs if defs is not None else {**schema.get("$defs", {}), **schema.get("definitions", {})}
    if "$ref" in schema:
        return schema_instance(defs.get(schema["$ref"].rsplit("/", 1)[-1], {}), values, defs)
    if "anyOf" in schema:
        options = [o for o in schema["anyOf"] if o.get("type") != "null"] or schema["anyOf"]
        return schema_instance(options[0], values, defs)
    kind = schema.get("type")
    if kind == "object":
        out = {}
        for name, sub in (schema.get("properties") or {}).items():
            given = values.get(name)
            if "enum" in sub:
                out[name] = given if given in sub["enum"] else sub["enum"][0]
            elif sub.get("type") == "string" and given is not None:
                out[name] = str(given)
            else:
                out[name] = schema_instance(sub, {} if given is None else
                                            (given if isinstance(given, dict) else {"": given}), defs)
        return out
    if "enum" in schema:
        return schema["enum"][0]
    if kind == "array":
        return [schema_instance(schema.get("items") or {"type": "string"}, values, defs)]
    if kind == "string":
        return str(values.get("", "x"))
    if kind in ("integer", "number"):
        return 0
    if kind == "boolean":
        return False
    return None


def format_spelling(body: dict) -> str:
    """The structured-output spelling of a request body: json_schema, json_object_schema, json_object or none."""
    fmt = body.get("response_format")
    if not isinstance(fmt, dict):
        return "none"
    if fmt.get("type") == "json_object":
        return "json_object_schema" if "schema" in fmt else "json_object"
    return str(fmt.get("type") or "none")


def applied_schema(body: dict, honoured: str) -> tuple[str, dict | None, int | None]:
    """How the server answers this request's response format when it applies ``honoured``: (``schema`` with the
    schema | ``json`` (any JSON object) | ``text``, the schema or None, the error status it answers instead or
    None) — as the module docstring says each kind of server does."""
    spelling = format_spelling(body)
    fmt = body.get("response_format") or {}
    if spelling == "json_schema":
        if honoured == "json_schema":
            return "schema", (fmt.get("json_schema") or {}).get("schema"), None
        return "text", None, (500 if honoured == "json_object_schema" else None)
    if spelling == "json_object_schema":
        if honoured == "json_object_schema":
            return "schema", fmt["schema"], None
        return "text", None, (400 if honoured == "json_schema" else None)
    if spelling == "json_object" and honoured != "none":
        return "json", None, None
    return "text", None, None


def make_app(behaviour: Behaviour | None = None, cache: PrefixCache | None = None):
    """The FastAPI application."""
    state = State(behaviour or Behaviour(), cache or PrefixCache())
    app = FastAPI()
    app.state.lm = state

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": "standin", "object": "model", "owned_by": "hqa-standins"}]}

    @app.get("/admin/stats")
    async def stats():
        with state.lock:
            return json.loads(json.dumps(state.stats))

    @app.post("/admin/reset")
    async def reset():
        state.reset()
        return {"ok": True}

    @app.post("/admin/faults")
    async def faults(request: Request):
        body = await request.json()
        with state.lock:
            state.forced.extend([int(body.get("status", 500))] * int(body.get("count", 1)))
        return {"queued": len(state.forced)}

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        # the latency runs from here: this server's own work (token counts, cache accounting, the reply's bytes) is
        # inside it, as a provider's is inside its latency, so a client sees the latency it asked for
        arrived = time.monotonic()
        body = await request.json()
        messages = body.get("messages") or []
        b = state.behaviour
        with state.lock:
            delay = b.delay(state.rng)
            state.stats["in_flight"] += 1
            state.stats["max_in_flight"] = max(state.stats["max_in_flight"], state.stats["in_flight"])
        try:
            status = state.fault()
            if status is not None:
                await asyncio.sleep(min(delay, 0.05))
                state.count(status, calls=1)
                kind = "rate_limit_exceeded" if status == 429 else "server_error"
                headers = {"Retry-After": "1"} if status == 429 else {}
                return JSONResponse({"error": {"message": f"stand-in fault {status}", "type": kind, "param": None,
                                               "code": kind}}, status_code=status, headers=headers)
            spelling = format_spelling(body)
            with state.lock:
                state.stats["response_formats"][spelling] = state.stats["response_formats"].get(spelling, 0) + 1
                if len(state.stats["bodies"]) < 64:  # the first requests' bodies, for tests that check the wire
                    state.stats["bodies"].append({k: v for k, v in body.items() if k != "messages"})
            kind, schema, refused = applied_schema(body, b.response_format)
            if refused is not None:
                state.count(refused, calls=1)
                return JSONResponse({"error": {"message": "this response_format spelling is not accepted",
                                               "type": "invalid_request_error", "param": "response_format",
                                               "code": None}}, status_code=refused)
            tokens = prompt_tokens(messages, _TOKEN.findall)
            cached = state.cache.cached(tokens)
            replayed = b.replay.get(messages_key(messages)) if b.replay else None
            text = replayed if replayed is not None else scripted_reply(messages, b.script, schema,
                                                                        as_json=kind == "json")
            usage = {"prompt_tokens": len(tokens), "completion_tokens": count_tokens(text),
                     "total_tokens": len(tokens) + count_tokens(text),
                     "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
                     "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0}}
            model = body.get("model") or "standin"
            rid = "chatcmpl-" + hashlib.sha1(f"{time.time_ns()}{id(request)}".encode()).hexdigest()[:24]
            created = int(time.time())
            state.count(200, calls=1, prompt_tokens=len(tokens), cached_tokens=cached,
                        completion_tokens=usage["completion_tokens"], replayed=int(replayed is not None),
                        streamed=int(bool(body.get("stream"))))
            if not body.get("stream"):
                reply = json.dumps({"id": rid, "object": "chat.completion", "created": created, "model": model,
                                    "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                                 "logprobs": None, "finish_reason": "stop"}], "usage": usage})
                await asyncio.sleep(max(0.0, delay - (time.monotonic() - arrived)))
                return Response(reply, media_type="application/json")
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            pieces = re.findall(r"\S+\s*|\s+", text) or [""]
            chunk_size = max(1, len(pieces) // 8)
            chunks = ["".join(pieces[i:i + chunk_size]) for i in range(0, len(pieces), chunk_size)]

            def event(delta: dict, finish: str | None, with_usage: dict | None = None) -> str:
                payload = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": model,
                           "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}
                if with_usage is not None:
                    payload = {**payload, "choices": [], "usage": with_usage}
                return f"data: {json.dumps(payload)}\n\n"

            async def stream():
                # time to first token: half the latency, the rest spread over chunks
                await asyncio.sleep(max(0.0, delay / 2 - (time.monotonic() - arrived)))
                yield event({"role": "assistant", "content": ""}, None)
                for piece in chunks:
                    await asyncio.sleep(delay / 2 / len(chunks))
                    yield event({"content": piece}, None)
                yield event({}, "stop")
                if include_usage:
                    yield event({}, None, usage)
                yield "data: [DONE]\n\n"

            return StreamingResponse(stream(), media_type="text/event-stream")
        finally:
            with state.lock:
                state.stats["in_flight"] -= 1

    return app


class Running:
    """A server started in a thread of this process; ``stop()`` ends it."""

    def __init__(self, server, thread: threading.Thread, port: int, app):
        self.server, self.thread, self.port, self.app = server, thread, port, app

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def state(self) -> State:
        return self.app.state.lm

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


def start(behaviour: Behaviour | None = None, cache: PrefixCache | None = None, port: int = 0) -> Running:
    """Serve on 127.0.0.1 (a free port when 0) in a daemon thread; returns once it accepts connections."""
    import uvicorn

    from standins.servers import free_port, wait_port

    port = port or free_port()
    app = make_app(behaviour, cache)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False,
                                           backlog=2048, timeout_keep_alive=30))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_port(port, seconds=30)
    return Running(server, thread, port, app)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--port", type=int, default=8765)
    p.add_argument("--latency", type=float, default=0.3, help="seconds per call (the median for lognormal)")
    p.add_argument("--distribution", choices=("fixed", "uniform", "lognormal", "exponential"), default="fixed")
    p.add_argument("--spread", type=float, default=0.0, help="uniform: +- seconds; lognormal: sigma")
    p.add_argument("--program", choices=sorted(SCRIPTS), default="default", help="the script replies follow")
    p.add_argument("--script", help="a JSON file: output field -> value or list of values by agent step")
    p.add_argument("--replay", help="a JSONL file of {messages, reply} to answer recorded calls with")
    p.add_argument("--error-rate", type=float, default=0.0)
    p.add_argument("--error-status", type=int, default=500, choices=(429, 500))
    p.add_argument("--cache-min", type=int, default=1024)
    p.add_argument("--cache-step", type=int, default=128)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--response-format", choices=("json_schema", "json_object_schema", "json_object", "none"),
                   default="json_schema", help="the structured-output spelling this server applies")
    a = p.parse_args(argv)
    import uvicorn

    script = dict(SCRIPTS[a.program])
    if a.script:
        script.update(json.loads(Path(a.script).read_text(encoding="utf-8")))
    behaviour = Behaviour(latency=a.latency, distribution=a.distribution, spread=a.spread, script=script,
                          replay=load_replay(a.replay) if a.replay else {}, error_rate=a.error_rate,
                          error_status=a.error_status, seed=a.seed, response_format=a.response_format)
    app = make_app(behaviour, PrefixCache(a.cache_min, a.cache_step))
    uvicorn.run(app, host="127.0.0.1", port=a.port, log_level="warning", access_log=False, backlog=2048,
                timeout_keep_alive=30)


if __name__ == "__main__":
    main()
