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
                          "replayed": 0, "statuses": {}, "in_flight": 0, "max_in_flight": 0}
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


def scripted_reply(messages: list[dict], script: dict[str, Any]) -> str:
    """The chat-adapter reply for the output fields the system message asks for, from ``script``."""
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
    if "Outputs will be a JSON object" in system:  # DSPy's JSONAdapter
        return json.dumps(values)
    return "\n\n".join(f"[[ ## {k} ## ]]\n{v}" for k, v in values.items()) + "\n\n[[ ## completed ## ]]"


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
            tokens = prompt_tokens(messages, _TOKEN.findall)
            cached = state.cache.cached(tokens)
            replayed = b.replay.get(messages_key(messages)) if b.replay else None
            text = replayed if replayed is not None else scripted_reply(messages, b.script)
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
    a = p.parse_args(argv)
    import uvicorn

    script = dict(SCRIPTS[a.program])
    if a.script:
        script.update(json.loads(Path(a.script).read_text(encoding="utf-8")))
    behaviour = Behaviour(latency=a.latency, distribution=a.distribution, spread=a.spread, script=script,
                          replay=load_replay(a.replay) if a.replay else {}, error_rate=a.error_rate,
                          error_status=a.error_status, seed=a.seed)
    app = make_app(behaviour, PrefixCache(a.cache_min, a.cache_step))
    uvicorn.run(app, host="127.0.0.1", port=a.port, log_level="warning", access_log=False, backlog=2048,
                timeout_keep_alive=30)


if __name__ == "__main__":
    main()
