"""``POST /v1/ask/stream``: the HQA agent's steps arrive as server-sent events while the program is still running
(checked on a real uvicorn on 127.0.0.1 with an LM that blocks until the test has seen the first step), then one
``answer`` event with what ``/v1/ask`` returns: usage, the demos the prompts really held, labelled SPARQL ids."""

from __future__ import annotations

import json
import threading

import dspy
import httpx
from fastapi.testclient import TestClient
from lmkit import BlockingLM, UsageLM
from prockit import AGENT_SCRIPT, agent_app, serving

Q = "What is the capital of Gabon?"


def test_steps_stream_while_the_program_runs(settings_for):
    lm = BlockingLM(list(AGENT_SCRIPT))
    try:
        _agent, app = agent_app(settings_for, lm)
        seen: list[tuple[str, dict]] = []
        inflight_at_first_step = None
        with serving(app) as port:
            with httpx.stream("POST", f"http://127.0.0.1:{port}/v1/ask/stream", json={"question": Q},
                              timeout=120) as r:
                assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
                event = None
                for line in r.iter_lines():
                    if line.startswith("event: "):
                        event = line[7:]
                    elif line.startswith("data: "):
                        seen.append((event, json.loads(line[6:])))
                        if seen[-1][0] == "step" and seen[-1][1]["status"] == "done" and not lm.release.is_set():
                            inflight_at_first_step = app.state.hqa.inflight  # the LM is still blocked
                            lm.release.set()
    finally:
        lm.release.set()
        dspy.configure(lm=None)
    assert inflight_at_first_step == 1  # the first step arrived while the question was still being answered
    done = [e for kind, e in seen if kind == "step" and e["status"] == "done"]
    assert [e["predictor"] for e in done] == ["react"] * 3 + ["relevant_page", "react", "sources.parametric",
                                                              "sources.merge"]
    steps = [e["outputs"].get("next_tool_name") for e in done if e["predictor"] == "react"]
    assert steps == ["GetWikidataID", "RunSparql", "WikiSearch", "Finish"]
    assert done[0]["inputs"]["question"] == Q
    kinds = [kind for kind, _ in seen]
    assert kinds[-1] == "answer" and kinds.count("answer") == 1 and "error" not in kinds
    final = seen[-1][1]
    assert final["answer"] == "Libreville" and final["status"] == 200
    assert final["usage"]["lm_calls"] == len(AGENT_SCRIPT) and final["usage"]["tool_calls"] == 3
    assert final["labels"]["Q3825"] == "Libreville"  # the SPARQL row's IRI, labelled from the pack


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
    assert "Capital of Mali?" in str(lm.history[5]["messages"])  # ... and they really were in the prompt


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
