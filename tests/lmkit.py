"""LM fakes and scripted runs shared by test modules: the live-services :class:`ScriptLM` with its question, agent
steps, an OpenAI-compatible loopback server, DummyLMs that report usage or block, and the HumanIQ prompt fixtures."""

from __future__ import annotations

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import dspy
from conftest import AGENT_FINISH, DemoSensitiveLM
from dspy.utils import DummyLM

from hqa.data.datasets import load_examples
from hqa.optimize.compile import exclude_overlap


QUESTION = "What is the capital of Gabon?"


SPARQL = "SELECT ?x WHERE { wd:Q1000 wdt:P36 ?x }"


# text tools first, then KG tools: late fusion's text-only and KG-only agents each find theirs within six steps
AGENT_SCRIPT = [("WikiSearch", "capital of Gabon"), ("Read", "Libreville"), ("GetWikidataID", "Gabon"),
                ("RunSparql", SPARQL), ("GetLabel", "[Q3825]"),
                ("Finish", "Wikipedia_Answer: Libreville, Wikidata_Answer: [Libreville]")]


class ScriptLM(DemoSensitiveLM):
    """Demo-sensitive replies, with the agent's tool choices taken from :data:`AGENT_SCRIPT` in order (rewound by
    :meth:`reset` and after each Finish, so a second agent starts over) and fields that must parse fixed to useful
    values."""

    def __init__(self):
        super().__init__(fixed={"search_query": "capital of Gabon", "query_entity": "Gabon", "sparql": SPARQL,
                                "squall": "What is the <P36:capital> of <Q1000:Gabon>?",  # generateQuery's SQUALL
                                "reasoning_chain": "Gabon >> capital >> #1; Gabon >> continent >> #2; final answer: #1"},
                         chain=False)

    def reset(self) -> None:
        super().reset()
        self.step = 0

    def reply(self, messages):
        system = next((m["content"] for m in messages if m.get("role") == "system"), "")
        if "next_tool_name" in system:
            # the script's next step among the tools this agent is told of (late fusion's agents get half of them)
            while AGENT_SCRIPT[min(self.step, len(AGENT_SCRIPT) - 1)][0] != "Finish" and \
                    f"'{AGENT_SCRIPT[self.step][0]}'" not in system:
                self.step += 1
            tool, args = AGENT_SCRIPT[min(self.step, len(AGENT_SCRIPT) - 1)]
            self.step = 0 if tool == "Finish" else self.step + 1
            self.fixed.update(next_tool_name=tool, next_tool_args=args)
        shown = re.search(r"Page: (.*?)\\nSummary", messages[-1].get("content") or "")
        if shown:  # WikiSearch's relevant-page LM keeps the first page it is shown
            self.fixed["title"] = shown.group(1)
        return super().reply(messages)


_TIMING = {"ms", "elapsed_ms", "retrieval_ms", "seconds", "latency_ms", "lm_ms", "total_ms", "wall_ms"}


def stable(obj):
    """The trace without wall-clock timings."""
    if isinstance(obj, dict):
        return {k: stable(v) for k, v in obj.items() if k not in _TIMING and not k.endswith("_ms")}
    if isinstance(obj, list):
        return [stable(v) for v in obj]
    return obj


def step(thought, tool, args):
    return {"next_thought": thought, "next_tool_name": tool, "next_tool_args": args}


class _FakeOpenAI(ThreadingHTTPServer):
    """A minimal OpenAI-compatible server: /v1/models, and /v1/chat/completions answering in DSPy's chat format
    (``mode="ok"``), with HTTP 500 (``"500"``) or with a non-JSON body (``"garbage"``).  With ``die_after=N`` it
    answers N completions and then drops every connection unanswered, as a crashed server would: decided inside
    the server, so a request already on its way cannot race the test's own stop."""

    daemon_threads = True

    def __init__(self, mode: str = "ok", port: int = 0, die_after: int | None = None):
        super().__init__(("127.0.0.1", port), _FakeOpenAIHandler)
        self.mode, self.completions, self.die_after = mode, 0, die_after
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def stop(self) -> None:
        self.shutdown()
        self.server_close()


class _FakeOpenAIHandler(BaseHTTPRequestHandler):
    def _send(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):  # noqa: N802
        self._send(200, json.dumps({"object": "list", "data": [{"id": "x", "object": "model"}]}).encode())

    def do_POST(self):  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with _COUNT_LOCK:
            if self.server.die_after is not None and self.server.completions >= self.server.die_after:
                self.server.mode = "dead"
            else:
                self.server.completions += 1
        if self.server.mode == "dead":
            self.close_connection = True  # no reply at all: the client sees the connection dropped
            return
        if self.server.mode == "500":
            return self._send(500, b'{"error": {"message": "model crashed"}}')
        if self.server.mode == "garbage":
            return self._send(200, b"<html>proxy error</html>")
        content = "[[ ## answer ## ]]\nParis\n\n[[ ## completed ## ]]"
        self._send(200, json.dumps({
            "id": f"c{self.server.completions}", "object": "chat.completion", "created": 0, "model": "x",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}).encode())

    def log_message(self, *args):
        pass


class _Echo(dspy.Module):
    def __init__(self):
        super().__init__()
        self.asked: list[str] = []

    def forward(self, question):
        self.asked.append(question)
        time.sleep(0.01)
        return dspy.Prediction(answer="a")


class HeardLM(DummyLM):
    """DummyLM that keeps the messages of every request it answered (``heard``), whether or not DSPy keeps its LM
    history: hqa's question runs turn that history off (:func:`hqa.jobs.evaluate.run_one`, ``hqa serve``)."""

    def __init__(self, answers):
        super().__init__(answers)
        self.heard: list[list[dict]] = []
        scripted = self._engine_spec._complete_messages

        def heard(messages):
            self.heard.append(list(messages))
            return scripted(messages)

        self._engine_spec._complete_messages = heard


class UsageLM(HeardLM):
    """DummyLM whose replies report token usage as an LM server does (7 prompt, 3 completion tokens each)."""

    def __init__(self, answers):
        super().__init__(answers)
        from dspy.lm15 import Usage

        scripted = self._engine_spec._complete_messages

        def with_usage(messages):
            import dataclasses

            return dataclasses.replace(scripted(messages), usage=Usage(input_tokens=7, output_tokens=3,
                                                                       total_tokens=10))

        self._engine_spec._complete_messages = with_usage


class BlockingLM(UsageLM):
    """Replies as scripted, but the second LM call waits until ``release`` is set."""

    def __init__(self, answers):
        super().__init__(answers)
        self.release = threading.Event()
        scripted = self._engine_spec._complete_messages
        calls = []

        def gated(messages):
            calls.append(1)
            if len(calls) == 2:
                assert self.release.wait(60), "the test never released the LM"
            return scripted(messages)

        self._engine_spec._complete_messages = gated


def split():
    dev = load_examples("humaniq-compmix", 3)
    train = exclude_overlap(load_examples("compmix/dev", 6), dev)
    return train, dev


def lm_for(train, dev) -> DemoSensitiveLM:
    return DemoSensitiveLM(chain=False, fixed=AGENT_FINISH,
                           known={ex.question: ex.answers[0] for ex in train[:3]},
                           known_with_demos={ex.question: ex.answers[0] for ex in train[3:] + dev})


_COUNT_LOCK = threading.Lock()


class Calls:
    """A stand-in for an LM predictor: records its inputs, returns a fixed reply."""

    def __init__(self, reply):
        self.reply, self.seen = reply, []

    def __call__(self, *args):
        self.seen.append(args)
        return self.reply
