"""``POST /v1/ask/stream`` in process (FastAPI's TestClient): the final ``answer`` event names the demos the prompts
really held, and refusals are plain HTTP errors.  The steps arriving while the program runs are checked on a real
server in tests/integration/test_serve_stream.py."""

from __future__ import annotations

import threading

import dspy
from fastapi.testclient import TestClient
from lmkit import UsageLM
from prockit import AGENT_SCRIPT, agent_app

Q = "What is the capital of Gabon?"


def test_demos_are_the_ones_the_prompts_held(settings_for):
    """Fixed demos on the step predictor and one on the memory predictor are reported per predictor, as the
    adapter formatted them into the prompts (the agent rebuilds the step demos per step)."""
    lm = UsageLM(list(AGENT_SCRIPT))
    try:
        agent, app = agent_app(settings_for, lm)
        agent.react.demos = [dspy.Example(question="Capital of Chad?", trajectory="", next_thought="done",
                                          next_tool_name="Finish", next_tool_args="N'Djamena",
                                          demo_id="chad-1").with_inputs("question", "trajectory")]
        agent.sources.parametric.demos = [dspy.Example(question="Capital of Mali?", answer="Bamako"),
                                          dspy.Example(question="Capital of Niger?", answer="Niamey")]
        with TestClient(app) as client:
            r = client.post("/v1/ask", json={"question": Q})
    finally:
        dspy.configure(lm=None)
    assert r.status_code == 200, r.text
    demos = r.json()["demos"]
    assert set(demos) == {"react", "sources.parametric"}
    assert [d["demo_id"] for d in demos["react"]] == ["chad-1"]
    assert demos["react"][0]["outputs"]["next_tool_name"] == "Finish"
    assert [d["question"] for d in demos["sources.parametric"]] == ["Capital of Mali?", "Capital of Niger?"]
    assert demos["sources.parametric"][1]["outputs"] == {"answer": "Niamey"}
    assert "Capital of Mali?" in str(lm.heard[5])  # ... and they really were in the prompt


def test_stream_refusals_are_plain_http_errors():
    from hqa.app import OpenedProgram
    from hqa.serve import create_app

    warming = threading.Event()
    app = create_app(OpenedProgram(lambda question: None, label="x", kind="x", source="program"),
                     warmup=lambda: warming.wait(10))
    with TestClient(app) as client:
        loading = client.post("/v1/ask/stream", json={"question": Q})
        bad = client.post("/v1/ask/stream", json={"question": "  "})
        warming.set()
    assert loading.status_code == 503 and "still loading" in loading.json()["error"]
    assert bad.status_code == 422 and "question is empty" in bad.json()["error"]
